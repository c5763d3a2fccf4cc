#!/usr/bin/env bash
# Prometheus and prometheus-operator on the running local cluster in $RLPLACE_E2E_DIR (default .e2e), on demand.
#
#   monitoring.sh up      idempotent: build what is missing (tools.sh --monitoring, the two images), install the
#                         monitoring.coreos.com CRDs, start prometheus-operator as a host process (like KubeRay and
#                         Kueue), create the Prometheus `rlplace` in namespace `monitoring` (its StatefulSet on the
#                         real node real-robot-0) and wait until it answers; prints its URL as the last line
#   monitoring.sh url     the URL of Prometheus' HTTP API, reachable from this host (exit 1 when it is not up)
#   monitoring.sh down    delete the Prometheus, its namespace and RBAC, stop prometheus-operator (the CRDs and
#                         the ServiceMonitors etc. that use them stay); make cluster-down does all of this too
#
# The Prometheus selects every ServiceMonitor, PodMonitor and PrometheusRule in every namespace, scrapes and
# evaluates every 5 s. The host reaches it through a NodePort Service on a real node's address (the host has no
# route to the pod network, but is on the nodes' bridge). `RLPLACE_MONITORING=1 make cluster-up` runs `up` at the
# end of cluster-up. Needs the real nodes (Prometheus runs as a pod).
set -euo pipefail
# shellcheck disable=SC2034 # used by log() in lib.sh
E2E_LOG_PREFIX=monitoring
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# shellcheck source=../images.env
source "$E2E_REPO/e2e/images.env"

STATE="$E2E_DIR/cluster"
LOGS="$STATE/logs"
PIDS="$STATE/pids"
CMDS="$STATE/cmds"
MON_ENV="$STATE/monitoring.env" # present while monitoring is on: lib.sh then lists prometheus-operator
NS=monitoring
NAME=rlplace
# Off the GPU nodes, so that no GPU test sees a pod it did not make: the real CPU-only node.
NODE_SELECTOR='{"rlplace.io/real-node": "true", "rlplace.io/real-cpu-only": "true"}'
READY_TIMEOUT=${RLPLACE_MONITORING_TIMEOUT:-180}
T0=$SECONDS

usage() { echo "usage: monitoring.sh up|down|url" >&2; exit 2; }
(($# == 1)) || usage

cluster_running() { component_pid kube-apiserver >/dev/null; }
KC=("$(tool_bin kubectl)" --kubeconfig "$STATE/admin.kubeconfig")

# http://<node address>:<node port> of the NodePort Service, once its Prometheus answers /-/ready.
prometheus_url() {
  local port node ip
  port=$("${KC[@]}" -n "$NS" get service prometheus-nodeport -o 'jsonpath={.spec.ports[0].nodePort}' 2>/dev/null) || return 1
  node=$("${KC[@]}" -n "$NS" get pods -l "app.kubernetes.io/name=prometheus,app.kubernetes.io/instance=$NAME" \
    -o 'jsonpath={.items[0].spec.nodeName}' 2>/dev/null) || return 1
  [[ -n $port && -n $node ]] || return 1
  ip=$("${KC[@]}" get node "$node" -o 'jsonpath={.status.addresses[?(@.type=="InternalIP")].address}') || return 1
  echo "http://$ip:$port"
}
prometheus_ready() { local url; url=$(prometheus_url) && curl -fsS --max-time 3 "$url/-/ready" >/dev/null 2>&1; }

operator_running() { component_pid prometheus-operator >/dev/null; }

stop_operator() {
  local pid deadline=$((SECONDS + ${RLPLACE_E2E_STOP_TIMEOUT:-10}))
  pid=$(component_pid prometheus-operator) || return 0
  log "stopping prometheus-operator (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null && [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) != Z ]]; do
    if ((SECONDS >= deadline)); then kill -KILL "$pid" 2>/dev/null || true; break; fi
    sleep 0.1
  done
}

case $1 in
  url)
    cluster_running || { echo "no cluster is running from $E2E_DIR" >&2; exit 1; }
    prometheus_ready || { echo "Prometheus is not up on the cluster in $E2E_DIR (monitoring.sh up)" >&2; exit 1; }
    prometheus_url
    exit 0
    ;;
  down)
    if cluster_running && [[ -f $MON_ENV ]]; then
      "${KC[@]}" delete namespace "$NS" --ignore-not-found --timeout 120s >/dev/null || log "namespace $NS not gone after 120 s"
      "${KC[@]}" delete clusterrole,clusterrolebinding rlplace-prometheus --ignore-not-found >/dev/null
    fi
    stop_operator
    rm -f "$MON_ENV" "$PIDS/prometheus-operator.pid" "$CMDS/prometheus-operator.sh"
    [[ ! -f $STATE/ports.env ]] || sed -i '/^PROMETHEUS_OPERATOR=/d' "$STATE/ports.env"
    log "monitoring stopped"
    exit 0
    ;;
  up) ;;
  *) usage ;;
esac

# ---------------------------------------------------------------------------------------------------------
cluster_running || die "no cluster is running from $E2E_DIR; start one first (make cluster-up)"
[[ -f $STATE/real-nodes.env ]] || die "monitoring needs the real nodes (Prometheus runs as a pod); this cluster has none"
if operator_running && prometheus_ready; then
  prometheus_url
  exit 0
fi
[[ ${PROMETHEUS_IMAGE##*:} == "v$(prometheus_release)" ]] ||
  die "e2e/images.env: PROMETHEUS_IMAGE=$PROMETHEUS_IMAGE but PROMETHEUS_VERSION=$PROMETHEUS_VERSION is v$(prometheus_release)"
[[ ${PROMETHEUS_CONFIG_RELOADER_IMAGE##*:} == "$PROMETHEUS_OPERATOR_VERSION" ]] ||
  die "e2e/images.env: PROMETHEUS_CONFIG_RELOADER_IMAGE=$PROMETHEUS_CONFIG_RELOADER_IMAGE but PROMETHEUS_OPERATOR_VERSION=$PROMETHEUS_OPERATOR_VERSION"

# Binaries and images (a warm run checks them in about a second).
RLPLACE_E2E_DIR=$E2E_DIR bash "$E2E_REPO/e2e/cluster/tools.sh" --monitoring
bash "$E2E_REPO/e2e/images/build.sh" prometheus prometheus-config-reloader
log "binaries and images ready ($((SECONDS - T0)) s)"

# The images, into the containerd of every real node that may run Prometheus (the ones NODE_SELECTOR picks).
mapfile -t nodes < <("${KC[@]}" get nodes -l 'rlplace.io/real-node=true,rlplace.io/real-cpu-only=true' -o name)
((${#nodes[@]})) || die "no real node is labelled rlplace.io/real-cpu-only=true"
for node in "${nodes[@]}"; do
  node=${node#node/}
  for image in "$PROMETHEUS_IMAGE" "$PROMETHEUS_CONFIG_RELOADER_IMAGE"; do
    name=${image#localhost/rlplace/}
    tar="$E2E_CACHE/images/monitoring/${name%%:*}.tar"
    ctr=("$(tool_bin ctr)" --address "$(node_socket "$node")" -n k8s.io)
    # The image ID the archive was saved from: imported once per node and image ID (the record goes with the cluster).
    want=$(<"$tar.id")
    if [[ $(cat "$STATE/monitoring-images-$node-${name%%:*}.id" 2>/dev/null) != "$want" ]]; then
      "${ctr[@]}" images import --local --snapshotter overlayfs "$tar" >>"$LOGS/monitoring-images.log" 2>&1 ||
        { tail -5 "$LOGS/monitoring-images.log" >&2; die "importing $tar into $node failed"; }
      echo "$want" >"$STATE/monitoring-images-$node-${name%%:*}.id"
    fi
  done
done
log "images in ${nodes[*]#node/} ($((SECONDS - T0)) s)"

# CRDs (server-side: the Prometheus CRD is too large for client-side apply's annotation). Only the kinds a
# Prometheus server uses (prometheus-operator skips the controllers of the others: no Alertmanager, ThanosRuler,
# PrometheusAgent, AlertmanagerConfig); each one costs the apiserver memory.
CRD_FILES=()
for kind in prometheuses servicemonitors podmonitors prometheusrules probes scrapeconfigs; do
  CRD_FILES+=(-f "$(prometheus_operator_crd_dir)/monitoring.coreos.com_$kind.yaml")
done
"${KC[@]}" apply --server-side --force-conflicts --field-manager rlplace-e2e "${CRD_FILES[@]}" >"$LOGS/monitoring-crds.log" 2>&1 ||
  { cat "$LOGS/monitoring-crds.log" >&2; die "creating the monitoring.coreos.com CRDs failed"; }
"${KC[@]}" wait --for condition=Established --timeout 60s "${CRD_FILES[@]}" >/dev/null ||
  die "the monitoring.coreos.com CRDs did not become Established"
log "monitoring.coreos.com CRDs Established ($((SECONDS - T0)) s)"

# prometheus-operator: a host process with the admin kubeconfig (it never talks to the pods), every namespace,
# no kubelet Service (--kubelet-service unset), its own metrics/health port picked free.
if ! operator_running; then
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  echo "PROMETHEUS_OPERATOR_PORT=$port" >"$MON_ENV" # before the start: down.sh must know it even if the start fails
  sed -i '/^PROMETHEUS_OPERATOR=/d' "$STATE/ports.env"
  echo "PROMETHEUS_OPERATOR=$port" >>"$STATE/ports.env"
  bin=$(tool_bin prometheus-operator)
  args=("$bin" --web.listen-address "127.0.0.1:$port"
    --prometheus-config-reloader "$PROMETHEUS_CONFIG_RELOADER_IMAGE"
    --prometheus-default-base-image "${PROMETHEUS_IMAGE%:*}"
    --log-level info --log-format logfmt)
  { echo "export KUBECONFIG=$(printf %q "$STATE/admin.kubeconfig")"; printf 'cd %q\n' "$PWD"; printf 'exec'; printf ' %q' "${args[@]}"; printf '\n'; } \
    >"$CMDS/prometheus-operator.sh"
  KUBECONFIG="$STATE/admin.kubeconfig" setsid "${args[@]}" >>"$LOGS/prometheus-operator.log" 2>&1 </dev/null 8>&- 9>&- &
  echo $! >"$PIDS/prometheus-operator.pid"
  deadline=$((SECONDS + 60))
  until curl -fsS "http://127.0.0.1:$port/healthz" >/dev/null 2>&1; do
    operator_running || { tail -20 "$LOGS/prometheus-operator.log" >&2; die "prometheus-operator exited (log: $LOGS/prometheus-operator.log)"; }
    ((SECONDS < deadline)) || die "prometheus-operator not healthy after 60 s (log: $LOGS/prometheus-operator.log)"
    sleep 0.2
  done
  log "prometheus-operator is healthy on 127.0.0.1:$port ($((SECONDS - T0)) s)"
fi

# The Prometheus, its ServiceAccount with cluster-wide discovery rights, and a NodePort Service for the host.
"${KC[@]}" apply -f - >"$LOGS/monitoring-objects.log" 2>&1 <<EOF || { cat "$LOGS/monitoring-objects.log" >&2; die "creating the Prometheus objects failed"; }
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Namespace
  metadata: {name: $NS}
- apiVersion: v1
  kind: ServiceAccount
  metadata: {name: prometheus, namespace: $NS}
- apiVersion: rbac.authorization.k8s.io/v1
  kind: ClusterRole
  metadata: {name: rlplace-prometheus}
  rules:
  - apiGroups: [""]
    resources: [nodes, nodes/metrics, services, endpoints, pods]
    verbs: [get, list, watch]
  - apiGroups: [discovery.k8s.io]
    resources: [endpointslices]
    verbs: [get, list, watch]
  - apiGroups: [""]
    resources: [configmaps]
    verbs: [get]
  - nonResourceURLs: [/metrics]
    verbs: [get]
- apiVersion: rbac.authorization.k8s.io/v1
  kind: ClusterRoleBinding
  metadata: {name: rlplace-prometheus}
  roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: rlplace-prometheus}
  subjects: [{kind: ServiceAccount, name: prometheus, namespace: $NS}]
- apiVersion: monitoring.coreos.com/v1
  kind: Prometheus
  metadata: {name: $NAME, namespace: $NS}
  spec:
    image: $PROMETHEUS_IMAGE
    version: v$(prometheus_release)
    replicas: 1
    serviceAccountName: prometheus
    scrapeInterval: 5s
    evaluationInterval: 5s
    retention: 2h
    serviceMonitorSelector: {}
    serviceMonitorNamespaceSelector: {}
    podMonitorSelector: {}
    podMonitorNamespaceSelector: {}
    ruleSelector: {}
    ruleNamespaceSelector: {}
    nodeSelector: $NODE_SELECTOR
    resources:
      requests: {cpu: 50m, memory: 128Mi}
      limits: {memory: 1Gi}
- apiVersion: v1
  kind: Service
  metadata: {name: prometheus-nodeport, namespace: $NS}
  spec:
    type: NodePort
    selector: {app.kubernetes.io/name: prometheus, app.kubernetes.io/instance: $NAME}
    ports: [{name: web, port: 9090, targetPort: 9090}]
EOF
deadline=$((SECONDS + READY_TIMEOUT))
until prometheus_ready; do
  operator_running || { tail -20 "$LOGS/prometheus-operator.log" >&2; die "prometheus-operator exited (log: $LOGS/prometheus-operator.log)"; }
  if ((SECONDS >= deadline)); then
    "${KC[@]}" -n "$NS" get statefulsets,pods -o wide >&2 || true
    "${KC[@]}" -n "$NS" describe pods >&2 || true
    die "Prometheus did not answer /-/ready within ${READY_TIMEOUT} s (operator log: $LOGS/prometheus-operator.log)"
  fi
  sleep 1
done
url=$(prometheus_url)
log "Prometheus ready ($((SECONDS - T0)) s); its HTTP API: $url"
echo "$url"

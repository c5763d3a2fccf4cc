#!/usr/bin/env bash
# Start a real Kubernetes control plane as local processes, with kwok simulating the kubelets of the fake
# nodes in e2e/nodes.yaml, and the KubeRay operator and Kueue running out of cluster.
#
#   etcd -> kube-apiserver -> kube-controller-manager, kube-scheduler -> kwok -> KubeRay CRDs + operator,
#   Kueue CRDs + webhooks + Kueue -> fake nodes Ready, default ServiceAccount present
#
# Returns once everything is healthy. Admin kubeconfig: $RLPLACE_E2E_DIR/kubeconfig (default .e2e/kubeconfig).
# Every port is picked free at start, so two clusters (two state dirs) can run side by side.
# If the cluster is already running it says so and exits 2 (use make cluster-down first).
# If a component fails to start it prints the component's name and the tail of its log, stops everything
# started so far, keeps the logs under $RLPLACE_E2E_DIR/cluster/logs and exits 1.
set -euo pipefail
# shellcheck disable=SC2034 # used by log() in lib.sh
E2E_LOG_PREFIX=cluster-up
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"
# Kueue runs next to the KubeRay operator (started and stopped like the other components).

STATE="$E2E_DIR/cluster"
PKI="$STATE/pki"
LOGS="$STATE/logs"
PIDS="$STATE/pids"
# How each component was started (start): e2e/cluster/component.sh starts one again from it.
CMDS="$STATE/cmds"
KUBECONFIG_OUT="$E2E_DIR/kubeconfig"
T0=$SECONDS

# Component start timeouts (seconds); generous because a cold page cache on 2 cores is slow.
START_TIMEOUT=${RLPLACE_E2E_START_TIMEOUT:-90}

# ---------------------------------------------------------------------------------------------------------
# Already running? Stale state from a crashed run?
alive=()
for name in "${E2E_COMPONENTS[@]}"; do
  if pid=$(component_pid "$name"); then alive+=("${name}[$pid]"); fi
done
if ((${#alive[@]})); then
  log "a cluster is already running from $E2E_DIR: ${alive[*]}"
  log "kubeconfig: $KUBECONFIG_OUT. Use 'make cluster-down' (e2e/cluster/down.sh) to stop it first."
  exit 2
fi
if [[ -e $STATE || -e $KUBECONFIG_OUT ]]; then
  log "removing stale state of a previous cluster that is no longer running ($STATE)"
  rm -rf "$STATE" "$KUBECONFIG_OUT"
fi

# ---------------------------------------------------------------------------------------------------------
# Binaries (built by tools.sh, cached by version).
declare -A BIN
for t in etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok ray-operator kueue; do
  BIN[$t]=$(tool_bin "$t")
  [[ -x ${BIN[$t]} ]] || die "$t $(tool_version "$t") is not built (${BIN[$t]} missing); run 'make tools' first"
done
CRDS=$(kuberay_crd_dir)
[[ -f $CRDS/ray.io_rayclusters.yaml ]] || die "KubeRay CRDs missing in $CRDS; run 'make tools' first"
KUEUE_CRDS=$(kueue_crd_dir)
[[ -f $KUEUE_CRDS/kueue.x-k8s.io_workloads.yaml ]] || die "Kueue CRDs missing in $KUEUE_CRDS; run 'make tools' first"
# Kueue's webhook list (config/components/webhook/manifests.yaml of the module tools.sh built it from).
KUEUE_WEBHOOKS=$(tool_dir kueue)/webhooks/manifests.yaml
[[ -f $KUEUE_WEBHOOKS ]] || die "Kueue's webhook manifests are missing ($KUEUE_WEBHOOKS); run 'make tools' first"
for cmd in openssl curl python3 unshare; do command -v "$cmd" >/dev/null || die "$cmd is required"; done
PY=python3 # PyYAML: the repo's venv has it (make setup)
[[ -x $E2E_REPO/.venv/bin/python ]] && PY=$E2E_REPO/.venv/bin/python
"$PY" -c 'import yaml' 2>/dev/null || die "$PY cannot import yaml (PyYAML); run 'make setup' first"

mkdir -p "$PKI" "$LOGS" "$PIDS" "$CMDS"
mkdir -m 700 "$STATE/etcd"

# ---------------------------------------------------------------------------------------------------------
# Process management: every component runs in its own session (it survives the terminal that started it)
# with its PID in $PIDS/<name>.pid. On any failure, stop what was started (in reverse order).
STARTED=()

stop_started() {
  ((${#STARTED[@]})) || return 0
  log "stopping the components started so far: ${STARTED[*]}"
  RLPLACE_E2E_DIR=$E2E_DIR E2E_KEEP_LOGS=1 bash "$(dirname "$0")/down.sh" --quiet || true
}

on_exit() {
  local rc=$?
  if ((rc != 0 && rc != 2)); then
    stop_started
    log "cluster-up FAILED; logs kept in $LOGS"
  fi
}
trap on_exit EXIT
trap 'log "interrupted"; exit 130' INT TERM

start() { # start <name> <binary> args...
  local name=$1
  shift
  # How to start it again (e2e/cluster/component.sh restart: the faults of benchmarks/chaos.py): its environment
  # and command line as a script of its own, run the same way.
  { export -p; printf 'cd %q\n' "$PWD"; printf 'exec'; printf ' %q' "$@"; printf '\n'; } >"$CMDS/$name.sh"
  setsid "$@" >"$LOGS/$name.log" 2>&1 </dev/null 8>&- &
  echo $! >"$PIDS/$name.pid"
  STARTED+=("$name")
}

fail() { # fail <name> <why>
  log "component $1 failed to start: $2"
  log "last lines of $LOGS/$1.log:"
  tail -n 25 "$LOGS/$1.log" | sed 's/^/    /' >&2 || true
  exit 1
}

# wait_for <name> <description> <command...>: poll until the command succeeds, the process dies, or timeout.
wait_for() {
  local name=$1 what=$2
  shift 2
  local pid deadline=$((SECONDS + START_TIMEOUT))
  pid=$(<"$PIDS/$name.pid")
  until "$@" >/dev/null 2>&1; do
    kill -0 "$pid" 2>/dev/null || fail "$name" "process exited before $what"
    ((SECONDS < deadline)) || fail "$name" "not $what after ${START_TIMEOUT}s"
    sleep 0.2
  done
  log "$name is $what ($((SECONDS - T0)) s)"
}

# ---------------------------------------------------------------------------------------------------------
# One cluster-up at a time chooses its ports and its real nodes' subnet. The ports are claimed in
# $E2E_PORT_CLAIMS/<cluster id> (another cluster-up avoids them until down.sh removes the claim), the subnet
# by the route its bridge adds; the lock is released as soon as both are taken, so clusters started side by
# side (make test's shards) start their components at the same time. Components do not inherit the lock.
mkdir -p "$E2E_CACHE" "$E2E_PORT_CLAIMS"
exec 8>"$E2E_CACHE/.cluster-up.lock"
if ! flock -n 8; then
  log "another cluster-up is choosing its ports and subnet; waiting for it ..."
  flock -w 300 8 || die "gave up waiting for $E2E_CACHE/.cluster-up.lock after 300 s"
fi
inotify_raise

# Free ports: random ports in 20000-32000 (below the ephemeral range) that nothing listens on now and no
# other cluster-up has claimed. Each candidate is bound once to make sure it is free; if a process that is no
# cluster-up grabs it before the component binds, the component fails to start and the message says which port.
read -r P_ETCD P_ETCD_PEER P_API P_KCM P_SCHED P_KWOK P_RAY_METRICS P_RAY_PROBE \
  P_KUEUE_WEBHOOK P_KUEUE_METRICS P_KUEUE_PROBE < <(python3 - "$E2E_PORT_CLAIMS" "$E2E_CLUSTER_ID" <<'EOF'
import pathlib, random, socket, sys
claims, own = pathlib.Path(sys.argv[1]), sys.argv[2]
taken = {int(p) for f in claims.iterdir() if f.name != own for p in f.read_text().split()}
ports = set()
while len(ports) < 11:
    p = random.randint(20000, 32000)
    if p in ports or p in taken:
        continue
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", p))
        except OSError:
            continue  # in use: pick another
    ports.add(p)
print(*ports)
EOF
)
cat >"$STATE/ports.env" <<EOF
ETCD=$P_ETCD
ETCD_PEER=$P_ETCD_PEER
APISERVER=$P_API
KUBE_CONTROLLER_MANAGER=$P_KCM
KUBE_SCHEDULER=$P_SCHED
KWOK=$P_KWOK
RAY_OPERATOR_METRICS=$P_RAY_METRICS
RAY_OPERATOR_PROBE=$P_RAY_PROBE
KUEUE_WEBHOOK=$P_KUEUE_WEBHOOK
KUEUE_METRICS=$P_KUEUE_METRICS
KUEUE_PROBE=$P_KUEUE_PROBE
EOF
cut -d= -f2 "$STATE/ports.env" >"$E2E_PORT_CLAIMS/$E2E_CLUSTER_ID" # the same ports, claimed
log "state in $STATE; apiserver will listen on https://127.0.0.1:$P_API"

# ---------------------------------------------------------------------------------------------------------
# Real nodes' network (before the apiserver, which must listen on the host bridge the nodes reach it by).
REAL_NODES=()
API_SANS="IP:127.0.0.1,IP:10.96.0.1"
if [[ ${RLPLACE_E2E_REAL_NODES:-1} != 0 ]]; then
  ((EUID == 0)) || die "real nodes need root (network namespaces, mounts, cgroups); RLPLACE_E2E_REAL_NODES=0 starts a kwok-only cluster"
  for cmd in ip iptables; do command -v "$cmd" >/dev/null || die "$cmd is required for the real nodes (apt-get install iproute2 iptables)"; done
  mapfile -t REAL_NODES < <(real_node_names)
  NODE_NET=$(pick_node_subnet) || die "no free /24 in 172.16.0.0/12 for the real nodes' bridge"
  HOST_IP="$NODE_NET.1"
  {
    echo "CLUSTER_ID=$E2E_CLUSTER_ID"
    echo "NODE_NET=$NODE_NET.0/24"
    echo "HOST_IP=$HOST_IP"
  } >"$STATE/real-nodes.env"
  API_SANS+=",IP:$HOST_IP"
  log "real nodes ${REAL_NODES[*]} on bridge $E2E_NET_PREFIX ($NODE_NET.0/24), cluster id $E2E_CLUSTER_ID"
  ip link add "$E2E_NET_PREFIX" type bridge
  ip addr add "$HOST_IP/24" dev "$E2E_NET_PREFIX"
  ip link set "$E2E_NET_PREFIX" up
  # Nodes reach the world (and the host) through the host, masqueraded; forwarded both ways even where the
  # FORWARD policy is DROP. One chain per cluster, so down.sh removes exactly this cluster's rules.
  sysctl -qw net.ipv4.ip_forward=1
  iptables -t nat -N "$E2E_IPT_CHAIN"
  iptables -t nat -A "$E2E_IPT_CHAIN" -s "$NODE_NET.0/24" ! -d "$NODE_NET.0/24" -j MASQUERADE
  iptables -t nat -A POSTROUTING -j "$E2E_IPT_CHAIN"
  iptables -t filter -N "$E2E_IPT_CHAIN"
  iptables -t filter -A "$E2E_IPT_CHAIN" -i "$E2E_NET_PREFIX" -j ACCEPT
  iptables -t filter -A "$E2E_IPT_CHAIN" -o "$E2E_NET_PREFIX" -j ACCEPT
  iptables -t filter -I FORWARD -j "$E2E_IPT_CHAIN"
  for i in "${!REAL_NODES[@]}"; do
    ns="$E2E_NETNS_PREFIX$i"
    ip netns add "$ns"
    ip link add "${E2E_NET_PREFIX}v$i" type veth peer name "${E2E_NET_PREFIX}p$i"
    ip link set "${E2E_NET_PREFIX}v$i" master "$E2E_NET_PREFIX" up
    ip link set "${E2E_NET_PREFIX}p$i" netns "$ns"
    ip -n "$ns" link set "${E2E_NET_PREFIX}p$i" name eth0
    ip -n "$ns" addr add "$NODE_NET.$((10 + i))/24" dev eth0
    ip -n "$ns" link set lo up
    ip -n "$ns" link set eth0 up
    ip -n "$ns" route add default via "$HOST_IP"
    for j in "${!REAL_NODES[@]}"; do
      ((i == j)) || ip -n "$ns" route add "10.245.$j.0/24" via "$NODE_NET.$((10 + j))"
    done
    ip netns exec "$ns" sysctl -qw net.ipv4.ip_forward=1
    # Pods' traffic that leaves the cluster's pod network looks like the node's (the CNI bridge plugin's own
    # ipMasq would also hide pod addresses from pods on other nodes).
    ip netns exec "$ns" iptables -t nat -A POSTROUTING -s "10.245.$i.0/24" ! -d "$E2E_POD_CIDR" -j MASQUERADE
  done
fi
exec 8>&- # ports claimed, subnet routed: another cluster-up may choose its own now

# ---------------------------------------------------------------------------------------------------------
# Certificates: one CA; apiserver serving cert; client certs for admin and each component;
# a key pair to sign ServiceAccount tokens (TokenRequest API).
log "generating certificates"
(
  cd "$PKI"
  ossl() { openssl "$@" 2>>"$LOGS/openssl.log"; }
  ossl ecparam -name prime256v1 -genkey -noout -out ca.key
  ossl req -x509 -new -key ca.key -sha256 -days 3650 -subj "/CN=rlplace-e2e-ca" -out ca.crt
  sign() { # sign <name> <subject> <extensions>
    ossl ecparam -name prime256v1 -genkey -noout -out "$1.key"
    ossl req -new -key "$1.key" -subj "$2" -out "$1.csr"
    printf '%s\n' "$3" >"$1.ext"
    ossl x509 -req -in "$1.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -sha256 -days 3650 \
      -extfile "$1.ext" -out "$1.crt"
    rm -f "$1.csr" "$1.ext"
  }
  client="basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=clientAuth"
  sign apiserver "/CN=kube-apiserver" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=$API_SANS,DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local"
  sign admin "/O=system:masters/CN=rlplace-e2e-admin" "$client"
  sign kube-controller-manager "/CN=system:kube-controller-manager" "$client"
  sign kube-scheduler "/CN=system:kube-scheduler" "$client"
  sign front-proxy-client "/CN=front-proxy-client" "$client" # apiserver -> aggregated APIs
  sign kueue "/CN=kueue" "basicConstraints=CA:FALSE
keyUsage=critical,digitalSignature,keyEncipherment
extendedKeyUsage=serverAuth
subjectAltName=IP:127.0.0.1,DNS:localhost" # Kueue's webhook and metrics servers
  if ((${#REAL_NODES[@]})); then
    sign apiserver-kubelet-client "/O=system:masters/CN=kube-apiserver-kubelet-client" "$client" # logs, exec
    sign kube-proxy "/CN=system:kube-proxy" "$client"
    for node in "${REAL_NODES[@]}"; do sign "kubelet-$node" "/O=system:nodes/CN=system:node:$node" "$client"; done
  fi
  ossl ecparam -name prime256v1 -genkey -noout -out sa.key # ServiceAccount tokens are signed ES256
  ossl ec -in sa.key -pubout -out sa.pub
  chmod 600 ./*.key
) || die "openssl failed; see $LOGS/openssl.log"

kubeconfig() { # kubeconfig <user cert name> <file> [server address]
  cat >"$2" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: rlplace-e2e
  cluster:
    server: https://${3:-127.0.0.1}:$P_API
    certificate-authority-data: $(base64 -w0 "$PKI/ca.crt")
users:
- name: $1
  user:
    client-certificate-data: $(base64 -w0 "$PKI/$1.crt")
    client-key-data: $(base64 -w0 "$PKI/$1.key")
contexts:
- name: rlplace-e2e
  context: {cluster: rlplace-e2e, user: $1}
current-context: rlplace-e2e
EOF
  chmod 600 "$2"
}
kubeconfig admin "$STATE/admin.kubeconfig"
kubeconfig kube-controller-manager "$STATE/kube-controller-manager.kubeconfig"
kubeconfig kube-scheduler "$STATE/kube-scheduler.kubeconfig"
KC=("${BIN[kubectl]}" --kubeconfig "$STATE/admin.kubeconfig")
if ((${#REAL_NODES[@]})); then
  kubeconfig kube-proxy "$STATE/kube-proxy.kubeconfig" "$HOST_IP"
  for node in "${REAL_NODES[@]}"; do kubeconfig "kubelet-$node" "$STATE/kubelet-$node.kubeconfig" "$HOST_IP"; done
fi

# Real nodes reach the apiserver on the host bridge; it listens there too, and advertises that address so
# that the `kubernetes` Service (what pods such as CoreDNS use) has a reachable endpoint.
API_NET_FLAGS=(--bind-address 127.0.0.1 --advertise-address 127.0.0.1 --endpoint-reconciler-type none)
if ((${#REAL_NODES[@]})); then
  API_NET_FLAGS=(--bind-address 0.0.0.0 --advertise-address "$HOST_IP" --endpoint-reconciler-type lease
    --kubelet-preferred-address-types InternalIP # node names are not in any DNS the apiserver uses
    --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt"
    --kubelet-client-key "$PKI/apiserver-kubelet-client.key")
fi

api_get() { curl -fsS --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" "https://127.0.0.1:$P_API$1"; }

# ---------------------------------------------------------------------------------------------------------
start etcd "${BIN[etcd]}" \
  --name default --data-dir "$STATE/etcd" \
  --listen-client-urls "http://127.0.0.1:$P_ETCD" --advertise-client-urls "http://127.0.0.1:$P_ETCD" \
  --listen-peer-urls "http://127.0.0.1:$P_ETCD_PEER" --initial-advertise-peer-urls "http://127.0.0.1:$P_ETCD_PEER" \
  --initial-cluster "default=http://127.0.0.1:$P_ETCD_PEER" \
  --unsafe-no-fsync --snapshot-count 10000 --quota-backend-bytes 2147483648 --log-level warn
wait_for etcd healthy curl -fsS "http://127.0.0.1:$P_ETCD/health"

start kube-apiserver "${BIN[kube-apiserver]}" \
  --etcd-servers "http://127.0.0.1:$P_ETCD" \
  "${API_NET_FLAGS[@]}" --secure-port "$P_API" \
  --authorization-mode Node,RBAC \
  --client-ca-file "$PKI/ca.crt" \
  --tls-cert-file "$PKI/apiserver.crt" --tls-private-key-file "$PKI/apiserver.key" \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-account-key-file "$PKI/sa.pub" --service-account-signing-key-file "$PKI/sa.key" \
  --service-cluster-ip-range 10.96.0.0/16 \
  --requestheader-client-ca-file "$PKI/ca.crt" --requestheader-allowed-names front-proxy-client \
  --requestheader-username-headers X-Remote-User --requestheader-group-headers X-Remote-Group \
  --requestheader-extra-headers-prefix X-Remote-Extra- \
  --proxy-client-cert-file "$PKI/front-proxy-client.crt" --proxy-client-key-file "$PKI/front-proxy-client.key" \
  --allow-privileged=true --profiling=false \
  --cert-dir "$STATE/apiserver-certs"
wait_for kube-apiserver ready api_get /readyz

# The controller-manager's and the scheduler's API clients are rate limited to 20 and 50 requests a second
# by default (QPS, bursts of 30 and 100): a burst of jobs, the many pods of one, or Job and ReplicaSet
# controllers waking together then wait on their own client, not on the API server (200 pods took seconds to
# bind instead of a fraction of one). DRA pods need several times more writes each (a ResourceClaim made from
# its template, allocated, reserved for the pod): 200 of them bound in 17 s with the defaults, 0.3 s with these.
# A one-machine test cluster has no other tenant to protect.
CLIENT_RATE=(--kube-api-qps=200 --kube-api-burst=400)
start kube-controller-manager "${BIN[kube-controller-manager]}" \
  --kubeconfig "$STATE/kube-controller-manager.kubeconfig" \
  --authentication-kubeconfig "$STATE/kube-controller-manager.kubeconfig" \
  --authorization-kubeconfig "$STATE/kube-controller-manager.kubeconfig" \
  --bind-address 127.0.0.1 --secure-port "$P_KCM" --cert-dir "$STATE/kcm-certs" \
  --leader-elect=false --profiling=false \
  --use-service-account-credentials=true \
  --service-account-private-key-file "$PKI/sa.key" \
  --root-ca-file "$PKI/ca.crt" \
  --cluster-signing-cert-file "$PKI/ca.crt" --cluster-signing-key-file "$PKI/ca.key" \
  --controllers '*,-nodeipam,-cloud-node-lifecycle,-service-lb-controller,-node-route-controller' \
  "${CLIENT_RATE[@]}"
start kube-scheduler "${BIN[kube-scheduler]}" \
  --kubeconfig "$STATE/kube-scheduler.kubeconfig" \
  --authentication-kubeconfig "$STATE/kube-scheduler.kubeconfig" \
  --authorization-kubeconfig "$STATE/kube-scheduler.kubeconfig" \
  --bind-address 127.0.0.1 --secure-port "$P_SCHED" --cert-dir "$STATE/scheduler-certs" \
  --leader-elect=false --profiling=false "${CLIENT_RATE[@]}"
start kwok "${BIN[kwok]}" \
  --kubeconfig "$STATE/admin.kubeconfig" \
  --config "$E2E_REPO/e2e/cluster/kwok-stages.yaml" \
  --manage-nodes-with-annotation-selector kwok.x-k8s.io/node=fake \
  --node-lease-duration-seconds 40 \
  --cidr 10.244.0.0/16 \
  --server-address "127.0.0.1:$P_KWOK"
# While those start: KubeRay's and Kueue's CRDs, Kueue's namespace and webhooks, and the fake nodes (all need
# only the apiserver). KubeRay's CRDs are large (4 MB): too big for client-side apply's annotation, and
# `create` is faster than server-side apply.
"${KC[@]}" create -f "$CRDS" >"$LOGS/crds.log" 2>&1 8>&- &
crds_job=$!

# Kueue: its configuration (e2e/cluster/kueue-config.yaml with this cluster's ports and paths), its serving
# certificate (webhooks and metrics), namespace kueue-system and its admission webhooks: only Kueue's own
# kueue.x-k8s.io ones from the module's webhook manifests (never the pod, Job or Ray ones: rlplace creates its
# Workloads itself, and those would gate every pod), renamed kueue-*, called by URL on 127.0.0.1 with this
# cluster's CA, failurePolicy as upstream. Registered before Kueue listens, so that the apiserver knows them
# by the time cluster-up returns; nothing creates Kueue objects before that.
# RLPLACE_KUEUE_RAY_INTEGRATION=1 (opt-in, for benchmarks/kueue_admission.py's baseline) also turns on Kueue's
# own RayJob and RayCluster integrations and registers their ray.io webhooks (the RayJob one suspends a new
# RayJob that names a queue); Kueue serves only the integrations it runs, so no other ones are registered.
KUEUE_RAY=${RLPLACE_KUEUE_RAY_INTEGRATION:-0}
KUEUE_STATE="$STATE/kueue"
mkdir -p "$KUEUE_STATE/certs" "$KUEUE_STATE/etc-upper/kueue/metrics/certs" "$KUEUE_STATE/etc-work"
for dir in "$KUEUE_STATE/certs" "$KUEUE_STATE/etc-upper/kueue/metrics/certs"; do
  cp "$PKI/kueue.crt" "$dir/tls.crt" && cp "$PKI/kueue.key" "$dir/tls.key"
done
kueue_config=$(<"$E2E_REPO/e2e/cluster/kueue-config.yaml")
kueue_config=${kueue_config//@KUEUE_PROBE_PORT@/$P_KUEUE_PROBE}
kueue_config=${kueue_config//@KUEUE_METRICS_PORT@/$P_KUEUE_METRICS}
kueue_config=${kueue_config//@KUEUE_WEBHOOK_PORT@/$P_KUEUE_WEBHOOK}
kueue_config=${kueue_config//@KUEUE_CERT_DIR@/$KUEUE_STATE/certs}
kueue_ray_frameworks=""
[[ $KUEUE_RAY != 1 ]] || kueue_ray_frameworks=', "ray.io/rayjob", "ray.io/raycluster"'
kueue_config=${kueue_config//@KUEUE_RAY_FRAMEWORKS@/$kueue_ray_frameworks}
printf '%s\n' "$kueue_config" >"$KUEUE_STATE/config.yaml"
"$PY" - "$KUEUE_WEBHOOKS" "https://127.0.0.1:$P_KUEUE_WEBHOOK" "$(base64 -w0 "$PKI/ca.crt")" "$KUEUE_RAY" \
  >"$KUEUE_STATE/objects.json" 2>"$LOGS/kueue-objects.log" <<'PY' ||
import json, sys, yaml

manifests, base_url, ca_bundle, ray = sys.argv[1:]
RAY_RESOURCES = {"rayjobs", "rayclusters"}  # the integrations kueue-config.yaml then lists, not rayservices


def registered(rule):
    if rule["apiGroups"] == ["kueue.x-k8s.io"]:
        return True
    return ray == "1" and rule["apiGroups"] == ["ray.io"] and set(rule["resources"]) <= RAY_RESOURCES


items = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kueue-system"}}]
ray_hooks = 0
with open(manifests) as f:
    for doc in yaml.safe_load_all(f):
        if not doc:
            continue
        hooks = [w for w in doc["webhooks"] if all(registered(r) for r in w["rules"])]
        ray_hooks += sum(1 for w in hooks if w["rules"][0]["apiGroups"] == ["ray.io"])
        for w in hooks:
            w["clientConfig"] = {"url": base_url + w["clientConfig"]["service"]["path"], "caBundle": ca_bundle}
        if hooks:
            meta = {"name": "kueue-" + doc["metadata"]["name"]}
            items.append({"apiVersion": doc["apiVersion"], "kind": doc["kind"], "metadata": meta, "webhooks": hooks})
if {i["kind"] for i in items[1:]} != {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"}:
    sys.exit(f"no kueue.x-k8s.io mutating and validating webhooks found in {manifests}")
if ray == "1" and ray_hooks != 4:  # mutating and validating, for RayJobs and RayClusters
    sys.exit(f"RLPLACE_KUEUE_RAY_INTEGRATION=1: {ray_hooks} of the 4 RayJob/RayCluster webhooks in {manifests}")
json.dump({"apiVersion": "v1", "kind": "List", "items": items}, sys.stdout)
PY
  { cat "$LOGS/kueue-objects.log" >&2; die "reading Kueue's webhooks from $KUEUE_WEBHOOKS failed"; }
# Server-side: the Workload CRD alone is 1.4 MB. The trailing / also reads a CRD directory that is a symlink.
"${KC[@]}" apply --server-side --field-manager rlplace-e2e -f "$KUEUE_CRDS/" -f "$KUEUE_STATE/objects.json" \
  >"$LOGS/kueue-crds.log" 2>&1 8>&- &
kueue_crds_job=$!
"${KC[@]}" apply -f "$E2E_REPO/e2e/nodes.yaml" >"$LOGS/nodes.log" 2>&1 ||
  { cat "$LOGS/nodes.log" >&2; die "creating the fake nodes from e2e/nodes.yaml failed"; }

wait_for kube-controller-manager healthy curl -fsSk "https://127.0.0.1:$P_KCM/healthz"
wait_for kube-scheduler healthy curl -fsSk "https://127.0.0.1:$P_SCHED/healthz"
wait_for kwok healthy curl -fsS "http://127.0.0.1:$P_KWOK/healthz"

wait "$crds_job" || { cat "$LOGS/crds.log" >&2; die "creating the KubeRay CRDs failed"; }
log "KubeRay CRDs created ($((SECONDS - T0)) s)"
crds_established() { # crds_established <dir>: every CRD in the files of <dir> is Established
  local got
  got=$("${KC[@]}" get -f "$1" -o jsonpath='{range .items[*]}{.status.conditions[?(@.type=="Established")].status}{" "}{end}')
  [[ $got == "$(for _ in "$1"/*.yaml; do printf 'True '; done)" ]]
}
wait_for kube-apiserver "serving the KubeRay CRDs (Established)" crds_established "$CRDS"

# KubeRay learns how a RayJob ended from the Ray dashboard of its head pod, by the head Service's cluster DNS
# name: with real nodes it runs in the first node's network namespace (the pod network) with the cluster's
# DNS in its own mount namespace, and reaches the apiserver on the host bridge like the kubelets.
RAY_OPERATOR_KUBECONFIG="$STATE/admin.kubeconfig"
IN_POD_NETWORK=()
if ((${#REAL_NODES[@]})); then
  RAY_OPERATOR_KUBECONFIG="$STATE/ray-operator.kubeconfig"
  kubeconfig admin "$RAY_OPERATOR_KUBECONFIG" "$HOST_IP"
  printf 'nameserver %s\nsearch svc.cluster.local cluster.local\n' "$E2E_DNS_IP" >"$STATE/pod-network-resolv.conf"
  IN_POD_NETWORK=(unshare --mount -- bash -c 'mount --bind "$0" /etc/resolv.conf && exec "$@"'
    "$STATE/pod-network-resolv.conf" nsenter --net="/run/netns/${E2E_NETNS_PREFIX}0" --)
fi
KUBECONFIG="$RAY_OPERATOR_KUBECONFIG" start ray-operator "${IN_POD_NETWORK[@]}" "${BIN[ray-operator]}" \
  --kubeconfig "$RAY_OPERATOR_KUBECONFIG" \
  --enable-leader-election=false \
  --metrics-addr "127.0.0.1:$P_RAY_METRICS" \
  --health-probe-bind-address "127.0.0.1:$P_RAY_PROBE" \
  --log-stdout-encoder console
probe_ray_operator() {
  if ((${#REAL_NODES[@]})); then
    nsenter --net="/run/netns/${E2E_NETNS_PREFIX}0" -- curl -fsS "http://127.0.0.1:$P_RAY_PROBE/readyz"
  else
    curl -fsS "http://127.0.0.1:$P_RAY_PROBE/readyz"
  fi
}

wait "$kueue_crds_job" || { cat "$LOGS/kueue-crds.log" >&2; die "creating Kueue's CRDs, namespace and webhooks failed"; }
log "Kueue CRDs, namespace and webhooks created ($((SECONDS - T0)) s)"
wait_for kube-apiserver "serving the Kueue CRDs (Established)" crds_established "$KUEUE_CRDS/"
# Kueue (host network: the apiserver calls its webhooks on 127.0.0.1). With internal cert management off it
# insists on /etc/kueue/metrics/certs/tls.{crt,key} (a hard-coded path). It gets them in a mount namespace of
# its own: an overlay over /etc whose upper layer (holding just those two files) is in the state dir. The
# host's /etc stays as it is and the mount goes away with the process: nothing to unmount or remove outside
# the state dir, and clusters side by side do not share the files.
KUEUE_SANDBOX=(unshare --mount --propagation private)
kueue_overlay="lowerdir=/etc,upperdir=$KUEUE_STATE/etc-upper,workdir=$KUEUE_STATE/etc-work"
if ((EUID != 0)); then # kwok-only cluster without root: a user namespace in which this user is root
  KUEUE_SANDBOX=(unshare --user --map-root-user --mount --propagation private)
  kueue_overlay+=",userxattr"
fi
# shellcheck disable=SC2016 # $0 and $@ belong to the inner shell
start kueue "${KUEUE_SANDBOX[@]}" -- sh -c 'mount -t overlay rlplace-kueue-etc -o "$0" /etc && exec "$@"' \
  "$kueue_overlay" "${BIN[kueue]}" --config="$KUEUE_STATE/config.yaml" --kubeconfig="$STATE/admin.kubeconfig" \
  --zap-encoder=console

wait_for ray-operator ready probe_ray_operator
wait_for kueue ready curl -fsS "http://127.0.0.1:$P_KUEUE_PROBE/readyz"
kueue_webhooks_answer() { # a ResourceFlavor created as a dry run: Kueue's defaulting webhook adds its finalizer
  local got
  got=$("${KC[@]}" create --dry-run=server -o 'jsonpath={.metadata.finalizers}' -f - \
    <<<'{"apiVersion":"kueue.x-k8s.io/v1beta2","kind":"ResourceFlavor","metadata":{"name":"rlplace-e2e-webhook-check"}}') &&
    [[ $got == *kueue.x-k8s.io/resource-in-use* ]]
}
wait_for kueue "answering its admission webhooks" kueue_webhooks_answer

# kwok reports the nodes Ready; pods can be created once the namespace's "default" ServiceAccount exists.
wait_for kwok "running every node in e2e/nodes.yaml (Ready)" \
  "${KC[@]}" wait --for condition=Ready --timeout 2s -f "$E2E_REPO/e2e/nodes.yaml"
wait_for kube-controller-manager "done creating the default ServiceAccount" \
  "${KC[@]}" get serviceaccount default -n default

((${#REAL_NODES[@]} == 0)) || source "$E2E_REPO/e2e/cluster/start-nodes.sh"

# Prometheus and prometheus-operator, only when asked for (RLPLACE_MONITORING=1; monitoring.sh up does the same on
# a running cluster). A failure here fails cluster-up, which then stops everything, prometheus-operator included.
if [[ ${RLPLACE_MONITORING:-0} != 0 ]]; then
  RLPLACE_E2E_DIR=$E2E_DIR bash "$E2E_REPO/e2e/cluster/monitoring.sh" up 8>&- >/dev/null
fi

cp "$STATE/admin.kubeconfig" "$KUBECONFIG_OUT.tmp" && mv "$KUBECONFIG_OUT.tmp" "$KUBECONFIG_OUT"
log "cluster up in $((SECONDS - T0)) s: $("${KC[@]}" get nodes --no-headers | wc -l) nodes Ready"
log "export KUBECONFIG=$KUBECONFIG_OUT   (kubectl etc.: export PATH=$E2E_DIR/bin:\$PATH)"

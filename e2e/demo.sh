#!/usr/bin/env bash
# `make demo`: the local control plane, rlplace installed the way users install it (`helm install` of
# charts/rlplace with the operator image `make images` built, its pod on a real node), the example NodeGroups
# and RLJobs; then shows what they became. Everything keeps running until `make cluster-down`.
# A cluster without real nodes (RLPLACE_E2E_REAL_NODES=0: kwok runs no containers) gets the chart without its
# Deployment and the operator as a local process instead, as `make operator` runs it for development.
#   e2e/demo.sh               run the demo
#   e2e/demo.sh stop-operator stop the demo's operator (cluster-down calls it)
set -euo pipefail
source "$(dirname "$0")/cluster/lib.sh"
source "$(dirname "$0")/images.env"
E2E_LOG_PREFIX=demo
cd "$E2E_REPO"
export KUBECONFIG="$E2E_DIR/kubeconfig"
PIDFILE="$E2E_DIR/operator.pid"
LOGFILE="$E2E_DIR/operator.log"
RELEASE=rlplace
RELEASE_NAMESPACE=rlplace-system
kubectl() { "$(tool_bin kubectl)" "$@"; }
helm() { "$(tool_bin helm)" "$@"; }

stop_local_operator() {
  if [[ -f $PIDFILE ]]; then
    local pid
    pid=$(<"$PIDFILE")
    if kill -0 "$pid" 2>/dev/null && grep -q rlplace_operator "/proc/$pid/cmdline" 2>/dev/null; then
      log "stopping the operator (pid $pid)"
      kill "$pid"
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
      kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$PIDFILE"
  fi
}

# The in-cluster operator: its Deployment scaled to 0, so it stops acting before the cluster goes (the release
# and its CRDs stay; `make cluster-down` removes the rest). Quick and quiet when the cluster is already gone.
stop_chart_operator() {
  [[ -f $KUBECONFIG ]] || return 0
  local deployments deployment
  deployments=$(timeout 20 "$(tool_bin kubectl)" --request-timeout=5s -n "$RELEASE_NAMESPACE" get deployment \
    -l "app.kubernetes.io/instance=$RELEASE" -o name 2>/dev/null) || return 0
  for deployment in $deployments; do
    log "stopping the operator ($deployment in $RELEASE_NAMESPACE)"
    timeout 20 "$(tool_bin kubectl)" --request-timeout=5s -n "$RELEASE_NAMESPACE" scale "$deployment" \
      --replicas=0 >/dev/null 2>&1 || true
  done
}

if [[ ${1:-} == stop-operator ]]; then
  stop_local_operator
  stop_chart_operator
  exit 0
fi

if ! bash e2e/cluster/status.sh >/dev/null 2>&1; then
  bash e2e/cluster/up.sh
fi

stop_local_operator
# The operator image is on the real nodes when `make images` built it and up.sh imported it.
in_cluster=
if [[ -n $(kubectl get nodes -l rlplace.io/real-node=true -o name 2>/dev/null) ]]; then
  in_cluster=1
fi
chart_values=(--set replicas=0)
# The DeviceClass of the local cluster's fake DRA GPUs (real-dra-0's dra-example-kubeletplugin; docs/dra.md).
dra_values=(--set "dra.deviceClasses[0].name=gpu.example.com" --set "dra.deviceClasses[0].driver=gpu.example.com")
if [[ -n $in_cluster ]]; then
  chart_values=(--set replicas=1 --set "image.repository=${OPERATOR_IMAGE%:*}" --set "image.tag=${OPERATOR_IMAGE##*:}"
    --set image.pullPolicy=Never --set-string 'nodeSelector.rlplace\.io/real-node=true')
  log "installing rlplace: helm install $RELEASE charts/rlplace -n $RELEASE_NAMESPACE (image $OPERATOR_IMAGE)"
else
  log "installing rlplace's CRDs and RBAC: helm install $RELEASE charts/rlplace -n $RELEASE_NAMESPACE (replicas=0)"
fi
if ! helm upgrade --install "$RELEASE" charts/rlplace --namespace "$RELEASE_NAMESPACE" --create-namespace \
  "${chart_values[@]}" "${dra_values[@]}" --wait --timeout 300s >/dev/null; then
  kubectl -n "$RELEASE_NAMESPACE" get pods -o wide >&2 || true
  die "helm install of charts/rlplace failed"
fi
# helm installs the chart's CRDs only on a first install; bring them up to date (they are generated files).
kubectl apply --server-side --force-conflicts -f crds/ >/dev/null
kubectl wait --for=condition=Established crd/rljobs.rlplace.io crd/nodegroups.rlplace.io --timeout=60s >/dev/null

if [[ -n $in_cluster ]]; then
  LOGS="kubectl -n $RELEASE_NAMESPACE logs deploy/$RELEASE-operator"
else
  port=$(.venv/bin/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  log "no real nodes to run the operator's image: starting the operator as a local process (log: ${LOGFILE#"$E2E_REPO"/})"
  nohup .venv/bin/python -m rlplace_operator.main --liveness "http://127.0.0.1:$port/healthz" >"$LOGFILE" 2>&1 &
  echo $! >"$PIDFILE"
  for _ in $(seq 150); do
    curl -fs "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
    kill -0 "$(<"$PIDFILE")" 2>/dev/null || { tail -20 "$LOGFILE" >&2; die "the operator exited"; }
    sleep 0.2
  done
  LOGS="cat $LOGFILE"
fi

log "applying examples/nodegroups-local.yaml, rljob-collocated.yaml and rljob-heterogeneous.yaml"
kubectl apply -f examples/nodegroups-local.yaml >/dev/null
kubectl apply -n default -f examples/rljob-collocated.yaml -f examples/rljob-heterogeneous.yaml >/dev/null
if ! kubectl -n default wait --for=jsonpath='{.status.phase}'=Running rljob/collocated rljob/heterogeneous --timeout=180s >/dev/null; then
  kubectl -n default get rljobs -o wide
  die "the example RLJobs did not reach Running (operator log: $LOGS)"
fi

echo
echo "\$ kubectl get nodegroups,rljobs,rayclusters"
kubectl -n default get nodegroups,rljobs,rayclusters
echo
echo "\$ kubectl get configmap collocated-placement -o jsonpath='{.data.plan\\.json}' | rlplace show -"
kubectl -n default get configmap collocated-placement -o jsonpath='{.data.plan\.json}' | .venv/bin/rlplace show -

# Apply examples/rljob-<job>.yaml, wait for the job to succeed (or stop the demo with its message), show it.
run_to_succeeded() { # run_to_succeeded <job>
  kubectl apply -n default -f "examples/rljob-$1.yaml" >/dev/null
  if ! kubectl -n default wait --for=jsonpath='{.status.phase}'=Succeeded "rljob/$1" --timeout=420s >/dev/null; then
    kubectl -n default get rljob "$1" -o wide
    die "$1 did not succeed: $(kubectl -n default get rljob "$1" -o jsonpath='{.status.message}')"
  fi
  echo
  echo "\$ kubectl get rljob $1 -o wide"
  kubectl -n default get rljob "$1" -o wide
  echo
}

# The jobs above stop at Running (kwok nodes run no containers). On real nodes a job with an entrypoint runs
# its driver to the end: every process checks its own GPUs and node from inside, and the driver's log ends
# with what each process saw.
if [[ -n $(kubectl get nodes -l rlplace.io/real-node=true -o name 2>/dev/null) && -f examples/nodegroups-real.yaml ]]; then
  log "applying examples/nodegroups-real.yaml and rljob-heterogeneous-run.yaml (real nodes: the driver runs)"
  kubectl apply -f examples/nodegroups-real.yaml >/dev/null
  run_to_succeeded heterogeneous-run
  echo "\$ kubectl logs job/heterogeneous-run   # the driver, from inside the pods (last lines)"
  kubectl -n default logs job/heterogeneous-run | grep -v '^rlplace-binding-report: ' | tail -12
  # A real RLinf program, unchanged (spec.framework: rlinf): RLinf's own scheduler places the processes, the
  # probe rlplace mounts shows each one from inside, Ray's State API from outside (docs/frameworks.md).
  log "applying examples/rljob-rlinf-run.yaml (an RLinf program, unchanged, on the same three nodes)"
  run_to_succeeded rlinf-run
  echo "\$ kubectl logs job/rlinf-run   # each RLinf worker's rlplace-probe line, from inside its pod (summarised)"
  kubectl -n default logs job/rlinf-run | .venv/bin/python -c '
import json, sys
for line in sys.stdin:
    if "rlplace-probe: " in line:
        env = json.loads(line.split("rlplace-probe: ", 1)[1])["env"]
        name, node, gpus = env["WORKER_NAME"], env.get("RLPLACE_KUBE_NODE", "?"), env.get("CUDA_VISIBLE_DEVICES", "")
        print(f"  {name:<16} node {node:<14} CUDA_VISIBLE_DEVICES={gpus}")'
  # A veRL-style program (spec.framework: verl): Ray picks each process's GPU among the plan's; rlplace
  # observes what each got, per pool (docs/frameworks.md: observed, not enforced).
  log "applying examples/rljob-verl-run.yaml (a program that leaves GPU ids to Ray, as veRL does)"
  run_to_succeeded verl-run
  echo "\$ kubectl get rljob verl-run -o jsonpath='{.status.observedPlacement}'   # the GPU ids Ray gave, per node"
  kubectl -n default get rljob verl-run -o jsonpath='{.status.observedPlacement}' | .venv/bin/python -c '
import json, sys
for entry in json.load(sys.stdin):
    component, node, ranks, gpus = entry["component"], entry["node"], entry["ranks"], entry["gpus"]
    print(f"  {component:<8} node {node:<14} ranks {ranks} GPUs {gpus}")'
  # A driver that reports its step times (a synthetic workload): ITERATION, STEP and BOTTLENECK fill in.
  log "applying examples/rljob-synthetic-run.yaml (its driver reports each iteration's step times)"
  kubectl apply -n default -f examples/rljob-synthetic-run.yaml >/dev/null
  if kubectl -n default wait --for=jsonpath='{.status.phase}'=Running rljob/synthetic-run --timeout=300s >/dev/null &&
    kubectl -n default wait --for=jsonpath='{.status.progress.bottleneck}'=rollout rljob/synthetic-run --timeout=60s >/dev/null; then
    echo
    echo "\$ kubectl get rljob synthetic-run   # step times reported by the driver (docs/progress.md)"
    kubectl -n default get rljob synthetic-run
  else
    kubectl -n default get rljob synthetic-run -o wide
    log "synthetic-run shows no progress (is the operator in the cluster? a local operator serves no progress endpoint)"
  fi
  # Two 4-GPU jobs side by side on one 8-GPU node (DRA): each worker pod claims exactly its GPUs, and every
  # process reports from inside which host GPUs its container was given (docs/dra.md).
  if [[ -n $(kubectl get nodes -l rlplace.io/real-gpu-allocation=dra -o name 2>/dev/null) ]]; then
    log "applying examples/rljob-shared-node.yaml (two 4-GPU jobs sharing real-dra-0 through DRA)"
    kubectl apply -n default -f examples/rljob-shared-node.yaml >/dev/null
    for job in shared-a shared-b; do
      if ! kubectl -n default wait --for=jsonpath='{.status.phase}'=Succeeded "rljob/$job" --timeout=420s >/dev/null; then
        kubectl -n default get rljob "$job" -o wide
        die "$job did not succeed: $(kubectl -n default get rljob "$job" -o jsonpath='{.status.message}')"
      fi
    done
    echo "\$ kubectl get rljob shared-a shared-b -o jsonpath='{.status.gpuClaims}'   # the GPUs each job claimed"
    for job in shared-a shared-b; do
      echo "  $job: $(kubectl -n default get rljob "$job" -o jsonpath='{.status.gpuClaims}')"
    done
    echo "\$ kubectl logs job/shared-a   # the binding report: host GPUs seen from inside each process"
    for job in shared-a shared-b; do
      kubectl -n default logs "job/$job" | .venv/bin/python -c '
import sys
from placement_core.observe.verify import find_report
report = find_report(sys.stdin.read())
for check in report.checks if report else ():
    print(f"  '"$job"' {check.component:<8} rank {check.rank} node {check.node_name} host GPUs {check.host_gpus} of the container'"'"'s {check.pod_host_gpus}")'
    done
  fi
else
  log "no real nodes (label rlplace.io/real-node=true): skipping the jobs that run a driver (examples/rljob-*-run.yaml)"
fi
cat <<MSG

The cluster and the operator keep running. Try:
  export PATH=\$PWD/.e2e/bin:\$PATH KUBECONFIG=\$PWD/.e2e/kubeconfig
  kubectl get rljobs -o wide
  $LOGS   # the operator's log
  kubectl apply -f examples/rljob-disaggregated.yaml   # waits for the 4090 node, held by 'heterogeneous'
  make cluster-down                                    # stops everything
MSG

#!/usr/bin/env bash
# `make demo`: the local control plane, rlplace's CRDs, the operator (a local process), the example NodeGroups
# and RLJobs; then shows what they became. Everything keeps running until `make cluster-down`.
#   e2e/demo.sh               run the demo
#   e2e/demo.sh stop-operator stop the demo's operator (cluster-down calls it)
set -euo pipefail
source "$(dirname "$0")/cluster/lib.sh"
E2E_LOG_PREFIX=demo
cd "$E2E_REPO"
export KUBECONFIG="$E2E_DIR/kubeconfig"
PIDFILE="$E2E_DIR/operator.pid"
LOGFILE="$E2E_DIR/operator.log"
kubectl() { "$(tool_bin kubectl)" "$@"; }

stop_operator() {
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

if [[ ${1:-} == stop-operator ]]; then
  stop_operator
  exit 0
fi

if ! bash e2e/cluster/status.sh >/dev/null 2>&1; then
  bash e2e/cluster/up.sh
fi

log "installing rlplace's CRDs"
kubectl apply --server-side --force-conflicts -f crds/ >/dev/null
kubectl wait --for=condition=Established crd/rljobs.rlplace.io crd/nodegroups.rlplace.io --timeout=60s >/dev/null

stop_operator
port=$(.venv/bin/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
log "starting the operator (log: ${LOGFILE#"$E2E_REPO"/})"
nohup .venv/bin/python -m rlplace_operator.main --liveness "http://127.0.0.1:$port/healthz" >"$LOGFILE" 2>&1 &
echo $! >"$PIDFILE"
for _ in $(seq 150); do
  curl -fs "http://127.0.0.1:$port/healthz" >/dev/null 2>&1 && break
  kill -0 "$(<"$PIDFILE")" 2>/dev/null || { tail -20 "$LOGFILE" >&2; die "the operator exited"; }
  sleep 0.2
done

log "applying examples/nodegroups-local.yaml, rljob-collocated.yaml and rljob-heterogeneous.yaml"
kubectl apply -f examples/nodegroups-local.yaml >/dev/null
kubectl apply -n default -f examples/rljob-collocated.yaml -f examples/rljob-heterogeneous.yaml >/dev/null
if ! kubectl -n default wait --for=jsonpath='{.status.phase}'=Running rljob/collocated rljob/heterogeneous --timeout=180s >/dev/null; then
  kubectl -n default get rljobs -o wide
  die "the example RLJobs did not reach Running (operator log: $LOGFILE)"
fi

echo
echo "\$ kubectl get nodegroups,rljobs,rayclusters"
kubectl -n default get nodegroups,rljobs,rayclusters
echo
echo "\$ kubectl get configmap collocated-placement -o jsonpath='{.data.plan\\.json}' | rlplace show -"
kubectl -n default get configmap collocated-placement -o jsonpath='{.data.plan\.json}' | .venv/bin/rlplace show -

# The jobs above stop at Running (kwok nodes run no containers). On real nodes a job with an entrypoint runs
# its driver to the end: every process checks its own GPUs and node from inside, and the driver's log ends
# with what each process saw.
if [[ -n $(kubectl get nodes -l rlplace.io/real-node=true -o name 2>/dev/null) && -f examples/nodegroups-real.yaml ]]; then
  log "applying examples/nodegroups-real.yaml and rljob-heterogeneous-run.yaml (real nodes: the driver runs)"
  kubectl apply -f examples/nodegroups-real.yaml >/dev/null
  kubectl apply -n default -f examples/rljob-heterogeneous-run.yaml >/dev/null
  if ! kubectl -n default wait --for=jsonpath='{.status.phase}'=Succeeded rljob/heterogeneous-run --timeout=420s >/dev/null; then
    kubectl -n default get rljob heterogeneous-run -o wide
    die "heterogeneous-run did not succeed: $(kubectl -n default get rljob heterogeneous-run -o jsonpath='{.status.message}')"
  fi
  echo
  echo "\$ kubectl get rljob heterogeneous-run -o wide"
  kubectl -n default get rljob heterogeneous-run -o wide
  echo
  echo "\$ kubectl logs job/heterogeneous-run   # the driver, from inside the pods (last lines)"
  kubectl -n default logs job/heterogeneous-run | grep -v '^rlplace-binding-report: ' | tail -12
else
  log "no real nodes (label rlplace.io/real-node=true): skipping the jobs that run a driver (examples/rljob-*-run.yaml)"
fi
cat <<MSG

The cluster and the operator keep running. Try:
  export PATH=\$PWD/.e2e/bin:\$PATH KUBECONFIG=\$PWD/.e2e/kubeconfig
  kubectl get rljobs -o wide
  kubectl apply -f examples/rljob-disaggregated.yaml   # waits for the 4090 node, held by 'heterogeneous'
  make cluster-down                                    # stops everything
MSG

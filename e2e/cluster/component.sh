#!/usr/bin/env bash
# One component of the local cluster in $RLPLACE_E2E_DIR (default .e2e), as a fault would hit it
# (benchmarks/chaos.py, tests/e2e/test_chaos.py). NAME as e2e/cluster/status.sh lists it (kube-apiserver,
# kubelet@real-a800-0, dra-example-kubeletplugin@real-dra-0, ...).
#
#   component.sh kill NAME              SIGKILL; returns once every thread has exited (its ports are free)
#   component.sh stop NAME              SIGTERM, SIGKILL after RLPLACE_E2E_STOP_TIMEOUT (10 s)
#   component.sh start NAME             start it again as cluster-up did (same command, environment, log) and
#                                       wait until it answers its health check as cluster-up did
#   component.sh restart NAME           kill, then start
#   component.sh pause NAME SECONDS     SIGSTOP, then SIGCONT after SECONDS
#   component.sh revive                 start every component that has exited, one name per line on stdout
#
# `revive` does what the cluster's supervisor would (systemd for containerd and the kubelet, the kubelet for
# the control plane's static pods, a Deployment for KubeRay and Kueue): the local cluster has none, and a
# controller that loses its leader lease while the apiserver is away exits by design.
# Exit 2 with one line for a component that is not part of the cluster or was not started by cluster-up.
set -euo pipefail
# shellcheck disable=SC2034 # used by log() in lib.sh
E2E_LOG_PREFIX=component
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

usage() { echo "usage: component.sh kill|stop|start|restart NAME | pause NAME SECONDS | revive" >&2; exit 2; }
(($# >= 1)) || usage
verb=$1 name=${2:-}
STATE=$E2E_DIR/cluster
READY_TIMEOUT=${RLPLACE_E2E_READY_TIMEOUT:-120}

script_of() { echo "$STATE/cmds/$1.sh"; }

# Gone, or a zombie whose threads have all exited: a Go program's main thread can show Z while its other
# threads still hold the listening sockets, and a zombie left to a parent that never reaps stays one.
exited() { # exited <pid>
  [[ -d /proc/$1 ]] || return 0
  [[ $(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) == Z ]] || return 1
  local threads
  threads=$(ls "/proc/$1/task" 2>/dev/null | wc -l)
  ((threads <= 1))
}

kill_now() { # kill_now <name>
  local pid
  pid=$(component_pid "$1") || return 0
  kill -KILL "$pid" 2>/dev/null || true
  until exited "$pid"; do sleep 0.1; done
}

stop_now() { # stop_now <name>
  local pid deadline=$((SECONDS + ${RLPLACE_E2E_STOP_TIMEOUT:-10}))
  pid=$(component_pid "$1") || return 0
  kill -TERM "$pid" 2>/dev/null || true
  until exited "$pid"; do
    ((SECONDS < deadline)) || { kill_now "$1"; return 0; }
    sleep 0.1
  done
}

# The health check cluster-up waited for, run where the component runs (its network namespace, if any).
healthy() { # healthy <name>
  local script ns
  script=$(script_of "$1")
  ns=$(grep -o -- '--net=[^ ]*' "$script" | head -1 | cut -d= -f2 || true)
  in_ns() { if [[ -n $ns ]]; then nsenter --net="$ns" -- "$@"; else "$@"; fi; }
  # shellcheck source=/dev/null
  source "$STATE/ports.env"
  case $1 in
    etcd) curl -fsS "http://127.0.0.1:$ETCD/health" ;;
    kube-apiserver)
      curl -fsS --cacert "$STATE/pki/ca.crt" --cert "$STATE/pki/admin.crt" --key "$STATE/pki/admin.key" \
        "https://127.0.0.1:$APISERVER/readyz"
      ;;
    kube-controller-manager) curl -fsSk "https://127.0.0.1:$KUBE_CONTROLLER_MANAGER/healthz" ;;
    kube-scheduler) curl -fsSk "https://127.0.0.1:$KUBE_SCHEDULER/healthz" ;;
    kwok) curl -fsS "http://127.0.0.1:$KWOK/healthz" ;;
    ray-operator) in_ns curl -fsS "http://127.0.0.1:$RAY_OPERATOR_PROBE/readyz" ;;
    kueue) in_ns curl -fsS "http://127.0.0.1:$KUEUE_PROBE/readyz" ;;
    prometheus-operator) curl -fsS "http://127.0.0.1:$PROMETHEUS_OPERATOR/healthz" ;;
    containerd@*)
      local binary
      binary=$(grep -o -- '[^ ]*/containerd ' "$script" | head -1)
      in_ns "$(dirname "$binary")/ctr" --address "$(node_socket "${1#*@}")" version
      ;;
    kubelet@*) in_ns curl -fsS "http://127.0.0.1:10248/healthz" ;;
    kube-proxy@*) in_ns curl -fsS "http://127.0.0.1:10256/healthz" ;;
    *) true ;; # the DRA plugin answers nothing of its own: running is what it says
  esac
}

start_now() { # start_now <name>
  local pid deadline=$((SECONDS + READY_TIMEOUT)) log="$STATE/logs/$1.log"
  if component_pid "$1" >/dev/null; then
    echo "error: $1 is running already" >&2
    exit 2
  fi
  echo "--- started again by component.sh at $(date -u +%FT%TZ)" >>"$log"
  # The script ends in `exec`, so the PID recorded is the component's own, as cluster-up records it.
  setsid bash "$(script_of "$1")" >>"$log" 2>&1 </dev/null &
  pid=$!
  echo "$pid" >"$STATE/pids/$1.pid"
  until healthy "$1" >/dev/null 2>&1; do
    if exited "$pid"; then
      echo "error: $1 exited before it was healthy; last line of $log: $(tail -n 1 "$log" | cut -c1-300)" >&2
      exit 1
    fi
    ((SECONDS < deadline)) || { echo "error: $1 not healthy after ${READY_TIMEOUT}s (log: $log)" >&2; exit 1; }
    sleep 0.2
  done
}

if [[ $verb == revive ]]; then
  (($# == 1)) || usage
  # In cluster-up's order: etcd before the apiserver, the apiserver before what talks to it.
  for component in "${E2E_COMPONENTS[@]}"; do
    [[ -f $(script_of "$component") ]] || continue
    if ! component_pid "$component" >/dev/null; then
      start_now "$component"
      echo "$component"
    fi
  done
  exit 0
fi

[[ -n $name ]] || usage
[[ -f $(script_of "$name") ]] || {
  echo "error: no component '$name' in $E2E_DIR (known: ${E2E_COMPONENTS[*]})" >&2
  exit 2
}
case $verb in
  kill) kill_now "$name" ;;
  stop) stop_now "$name" ;;
  start) start_now "$name" ;;
  restart) kill_now "$name"; start_now "$name" ;;
  pause)
    (($# == 3)) && [[ $3 =~ ^[0-9]+$ ]] || usage
    pid=$(component_pid "$name") || { echo "error: $name is not running" >&2; exit 2; }
    kill -STOP "$pid"
    sleep "$3"
    kill -CONT "$pid"
    ;;
  *) usage ;;
esac

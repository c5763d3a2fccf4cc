#!/usr/bin/env bash
# One component of the local cluster in $RLPLACE_E2E_DIR (default .e2e), as a fault would hit it
# (benchmarks/chaos.py, tests/e2e/test_chaos.py). NAME as `make cluster-status` lists it (kube-apiserver,
# kubelet@real-a800-0, dra-example-kubeletplugin@real-dra-0, ...).
#
#   component.sh kill NAME              SIGKILL, nothing more
#   component.sh stop NAME              SIGTERM, SIGKILL after RLPLACE_E2E_STOP_TIMEOUT (10 s)
#   component.sh start NAME             start it again as cluster-up did (same command, environment, log)
#   component.sh restart NAME           kill, then start
#   component.sh pause NAME SECONDS     SIGSTOP, then SIGCONT after SECONDS
#
# Exit 2 with one line for a component that is not part of the cluster or was not started by cluster-up.
set -euo pipefail
# shellcheck disable=SC2034 # used by log() in lib.sh
E2E_LOG_PREFIX=component
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

usage() { echo "usage: component.sh kill|stop|start|restart NAME | pause NAME SECONDS" >&2; exit 2; }
(($# >= 2)) || usage
verb=$1 name=$2
STATE=$E2E_DIR/cluster
script="$STATE/cmds/$name.sh"
[[ -f $script ]] || { echo "error: no component '$name' in $E2E_DIR (known: ${E2E_COMPONENTS[*]})" >&2; exit 2; }

kill_now() {
  local pid
  pid=$(component_pid "$name") || return 0
  kill -KILL "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null && [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) != Z ]]; do sleep 0.1; done
}

stop_now() {
  local pid deadline=$((SECONDS + ${RLPLACE_E2E_STOP_TIMEOUT:-10}))
  pid=$(component_pid "$name") || return 0
  kill -TERM "$pid" 2>/dev/null || true
  while kill -0 "$pid" 2>/dev/null && [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) != Z ]]; do
    ((SECONDS < deadline)) || { kill_now; return 0; }
    sleep 0.1
  done
}

start_now() {
  if component_pid "$name" >/dev/null; then
    echo "error: $name is running already" >&2
    exit 2
  fi
  echo "--- started again by component.sh at $(date -u +%FT%TZ)" >>"$STATE/logs/$name.log"
  # The script ends in `exec`, so the PID recorded is the component's own, as cluster-up records it.
  setsid bash "$script" >>"$STATE/logs/$name.log" 2>&1 </dev/null &
  echo $! >"$STATE/pids/$name.pid"
}

case $verb in
  kill) kill_now ;;
  stop) stop_now ;;
  start) start_now ;;
  restart) kill_now; start_now ;;
  pause)
    (($# == 3)) && [[ $3 =~ ^[0-9]+$ ]] || usage
    pid=$(component_pid "$name") || { echo "error: $name is not running" >&2; exit 2; }
    kill -STOP "$pid"
    sleep "$3"
    kill -CONT "$pid"
    ;;
  *) usage ;;
esac

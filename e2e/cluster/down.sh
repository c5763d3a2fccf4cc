#!/usr/bin/env bash
# Stop every process e2e/cluster/up.sh started (by the PIDs it recorded: TERM, then KILL after a timeout)
# and remove the cluster's state (certificates, etcd data, logs, kubeconfig). The tool symlinks in
# .e2e/bin stay. With nothing running it says so and exits 0.
#
# Usage: e2e/cluster/down.sh [--quiet]
# Env:   RLPLACE_E2E_DIR (state dir, default .e2e), RLPLACE_E2E_STOP_TIMEOUT (seconds before KILL, default 10)
set -euo pipefail
# shellcheck disable=SC2034 # used by log() in lib.sh
E2E_LOG_PREFIX=cluster-down
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

QUIET=0
[[ ${1:-} == --quiet ]] && QUIET=1
say() { ((QUIET)) || log "$@"; }

STATE="$E2E_DIR/cluster"
PIDS="$STATE/pids"
TIMEOUT=${RLPLACE_E2E_STOP_TIMEOUT:-10}
declare -A running=()
for name in "${E2E_COMPONENTS[@]}"; do
  if pid=$(component_pid "$name"); then running[$name]=$pid; fi
done

if ((${#running[@]} == 0)); then
  if [[ -e $STATE || -e $E2E_DIR/kubeconfig ]]; then
    say "no cluster process is running from $E2E_DIR; removing its leftover state"
  else
    say "no cluster is running from $E2E_DIR; nothing to do"
  fi
else
  # In three steps, so that nothing loses its apiserver (or the apiserver its etcd) while shutting down:
  # clients first, then the apiserver, then etcd.
  stop() { # stop <component>...: TERM, wait up to $TIMEOUT s, then KILL
    local name group=()
    for name in "$@"; do
      [[ -n ${running[$name]:-} ]] || continue
      say "stopping $name (pid ${running[$name]})"
      kill -TERM "${running[$name]}" 2>/dev/null || true
      group+=("$name")
    done
    local deadline=$((SECONDS + TIMEOUT)) left
    while ((${#group[@]})); do
      left=()
      for name in "${group[@]}"; do component_pid "$name" >/dev/null && left+=("$name"); done
      group=("${left[@]}")
      ((${#group[@]})) || break
      if ((SECONDS >= deadline)); then
        for name in "${group[@]}"; do
          log "$name (pid ${running[$name]}) ignored TERM for ${TIMEOUT}s; sending KILL"
          kill -KILL "${running[$name]}" 2>/dev/null || true
        done
        sleep 0.5
        break
      fi
      sleep 0.1
    done
  }
  # Real nodes first (their kubelets would otherwise log lost-apiserver errors while stopping).
  node_components=()
  for name in "${E2E_COMPONENTS[@]}"; do [[ $name != *@* ]] || node_components+=("$name"); done
  ((${#node_components[@]} == 0)) || stop "${node_components[@]}"
  # Then their containers (CoreDNS, test pods: clients of the apiserver, which otherwise waits for their
  # watches to end before it exits).
  teardown_real_nodes say
  stop prometheus-operator kueue ray-operator kwok kube-scheduler kube-controller-manager
  stop kube-apiserver
  stop etcd
fi

# Kueue: also one whose PID was not recorded or that had not yet become kueue (a cluster-up interrupted while
# starting it), found by the config file on its command line. Its /etc overlay lives in its own mount
# namespace, so it goes with the process; the overlay's layers are in the state dir, removed below.
kueue_pids() {
  local f argv
  for f in /proc/[0-9]*/cmdline; do
    mapfile -d '' -t argv 2>/dev/null <"$f" || continue
    if [[ " ${argv[*]} " == *" --config=$STATE/kueue/config.yaml "* ]]; then f=${f#/proc/} && echo "${f%/cmdline}"; fi
  done
}
mapfile -t kueue_left < <(kueue_pids)
if ((${#kueue_left[@]})); then
  log "stopping Kueue processes left from a cluster-up that did not finish (pid ${kueue_left[*]})"
  kill -TERM "${kueue_left[@]}" 2>/dev/null || true
  for _ in $(seq $((TIMEOUT * 10))); do
    mapfile -t kueue_left < <(kueue_pids)
    ((${#kueue_left[@]})) || break
    sleep 0.1
  done
  ((${#kueue_left[@]} == 0)) || kill -KILL "${kueue_left[@]}" 2>/dev/null || true
fi

# prometheus-operator (monitoring.sh): also one whose PID was not recorded, found by the kubeconfig in its
# environment (it has no --kubeconfig flag).
prometheus_operator_pids() {
  local f
  for f in /proc/[0-9]*/environ; do
    [[ $(basename "$(tr '\0' '\n' 2>/dev/null <"${f%environ}cmdline" | head -1)") == prometheus-operator ]] || continue
    if tr '\0' '\n' 2>/dev/null <"$f" | grep -qxF "KUBECONFIG=$STATE/admin.kubeconfig"; then
      f=${f#/proc/} && echo "${f%/environ}"
    fi
  done
}
mapfile -t po_left < <(prometheus_operator_pids)
if ((${#po_left[@]})); then
  log "stopping prometheus-operator processes left from a monitoring.sh up that did not finish (pid ${po_left[*]})"
  kill -KILL "${po_left[@]}" 2>/dev/null || true
fi

# Real nodes: containers, shims, mounts, network namespaces, bridge, iptables chain, cgroups. Always, by the
# cluster id: a cluster-up that failed halfway may have made some of them and recorded nothing.
teardown_real_nodes say
left=$(real_node_leftovers)
[[ -z $left ]] || log "WARNING: left on the host after teardown: $(tr '\n' ';' <<<"$left")"

# Ports it had: nothing may listen there any more.
if [[ -f $STATE/ports.env ]] && command -v ss >/dev/null; then
  busy=()
  while IFS='=' read -r comp port; do
    [[ -n $port ]] || continue
    if ss -Hltn "sport = :$port" | grep -q .; then busy+=("$comp:$port"); fi
  done <"$STATE/ports.env"
  ((${#busy[@]} == 0)) || log "WARNING: still listening after stop: ${busy[*]}"
fi

rm -f "$E2E_PORT_CLAIMS/$E2E_CLUSTER_ID" # the ports are free for another cluster-up

if [[ ${E2E_KEEP_LOGS:-0} == 1 ]]; then
  # cluster-up failed: keep the logs for the person to read; the next cluster-up removes them.
  rm -rf "$PIDS" "$E2E_DIR/kubeconfig"
else
  rm -rf "$STATE" "$E2E_DIR/kubeconfig"
fi
((${#running[@]} == 0)) || say "stopped ${!running[*]}; state removed"
# The inotify limit cluster-up raised, back to what it was once no cluster runs (lib.sh).
if ((QUIET)); then inotify_restore >/dev/null; else inotify_restore; fi

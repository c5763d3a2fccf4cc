#!/usr/bin/env bash
# Is the local cluster in $RLPLACE_E2E_DIR (default .e2e) running? Prints each component's PID and port.
# Exit 0: every component runs; 1: none does; 2: some do (a crashed component: make cluster-down, then up).
set -euo pipefail
# shellcheck disable=SC2034 # used by log() in lib.sh
E2E_LOG_PREFIX=cluster
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

up=0
for name in "${E2E_COMPONENTS[@]}"; do
  if pid=$(component_pid "$name"); then
    printf '%-37s running  pid %s\n' "$name" "$pid"
    up=$((up + 1))
  else
    printf '%-37s stopped\n' "$name"
  fi
done
[[ -f $E2E_DIR/cluster/ports.env ]] && sed 's/^/port /' "$E2E_DIR/cluster/ports.env"
if ((up == ${#E2E_COMPONENTS[@]})); then
  echo "kubeconfig: $E2E_DIR/kubeconfig"
  exit 0
fi
((up == 0)) && exit 1
exit 2

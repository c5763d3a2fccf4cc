# Shared paths and helpers for e2e/cluster/*.sh. Source it; do not run it.
# shellcheck shell=bash

E2E_REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=../versions.env
source "$E2E_REPO/e2e/versions.env"

# Binaries and Go caches live outside the repo, keyed by version, so every clone reuses them.
E2E_CACHE=${RLPLACE_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/rlplace}
# Cluster state (certificates, etcd data, logs, PIDs, kubeconfig). Override to run a second cluster.
E2E_DIR=$(realpath -m "${RLPLACE_E2E_DIR:-$E2E_REPO/.e2e}") # absolute: up.sh changes directory

# tool name -> version
tool_version() {
  case "$1" in
    kube-apiserver | kube-controller-manager | kube-scheduler | kubectl | kubelet | kube-proxy | pause)
      echo "$KUBERNETES_VERSION" ;;
    containerd | ctr | containerd-shim-runc-v2) echo "$CONTAINERD_VERSION" ;;
    runc) echo "$RUNC_VERSION" ;;
    bridge | host-local | loopback | portmap) echo "$CNI_PLUGINS_VERSION" ;;
    coredns) echo "$COREDNS_VERSION" ;;
    etcd) echo "$ETCD_VERSION" ;;
    kwok) echo "$KWOK_VERSION" ;;
    ray-operator) echo "$KUBERAY_VERSION" ;;
    helm) echo "$HELM_VERSION" ;;
    kueue) echo "$KUEUE_VERSION" ;;
    dra-example-kubeletplugin) echo "$DRA_EXAMPLE_DRIVER_VERSION" ;;
    prometheus | promtool) echo "$PROMETHEUS_VERSION" ;;
    prometheus-operator | prometheus-config-reloader) echo "$PROMETHEUS_OPERATOR_VERSION" ;;
    *) echo "unknown tool $1" >&2; return 1 ;;
  esac
}

# Tools that are looked up next to each other share one directory: containerd finds its shim in PATH (the
# containerd directory is put first), and the CNI plugins are one bin directory for containerd.
tool_dir() {
  case "$1" in
    ctr | containerd-shim-runc-v2) echo "$E2E_CACHE/containerd-$CONTAINERD_VERSION" ;;
    bridge | host-local | loopback | portmap) echo "$E2E_CACHE/cni-plugins-$CNI_PLUGINS_VERSION" ;;
    pause) echo "$E2E_CACHE/pause-$KUBERNETES_VERSION" ;;
    promtool) echo "$E2E_CACHE/prometheus-$PROMETHEUS_VERSION" ;;
    *) echo "$E2E_CACHE/$1-$(tool_version "$1")" ;;
  esac
}
tool_bin() { echo "$(tool_dir "$1")/$1"; }
kuberay_crd_dir() { echo "$(tool_dir ray-operator)/crds"; }
kueue_crd_dir() { echo "$(tool_dir kueue)/crds"; }
prometheus_operator_crd_dir() { echo "$(tool_dir prometheus-operator)/crds"; }
# The release a Prometheus module version stands for: v0.316.0 -> 3.16.0 (what `prometheus --version` prints).
prometheus_release() {
  local v=${PROMETHEUS_VERSION#v0.} major minor
  major=${v%%.*}
  minor=${major:1}
  echo "${major:0:1}.$((10#$minor)).${v#*.}"
}

# shellcheck disable=SC2034 # used by the scripts that source this file
E2E_TOOLS=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl kwok ray-operator helm kueue
  kubelet kube-proxy containerd ctr containerd-shim-runc-v2 runc bridge host-local loopback portmap coredns pause
  dra-example-kubeletplugin promtool)
# Built only when monitoring is asked for (tools.sh --monitoring, RLPLACE_MONITORING=1; monitoring.sh up).
# shellcheck disable=SC2034
E2E_MONITORING_TOOLS=(prometheus prometheus-operator prometheus-config-reloader)
# The CNI plugins the real nodes use (one directory: tool_dir bridge).
# shellcheck disable=SC2034
E2E_CNI_PLUGINS=(bridge host-local loopback portmap)

log() { printf '[%s] %s\n' "${E2E_LOG_PREFIX:-e2e}" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

# Real nodes (kubelet + containerd + kube-proxy each, see nodes.sh): on unless RLPLACE_E2E_REAL_NODES=0.
# A running cluster remembers its choice in its state dir, so status.sh and down.sh need no variable.
real_nodes_on() {
  if [[ -f $E2E_DIR/cluster/real-nodes.env ]]; then return 0; fi
  [[ -d $E2E_DIR/cluster ]] && return 1
  [[ ${RLPLACE_E2E_REAL_NODES:-1} != 0 ]]
}

# Cluster components in start order; down.sh stops them in reverse. A real node's are <binary>@<node>.
# shellcheck disable=SC2034
E2E_COMPONENTS=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok ray-operator kueue)
# shellcheck source=nodes.sh
source "$E2E_REPO/e2e/cluster/nodes.sh"
if real_nodes_on; then
  for _node in $(real_node_names); do
    E2E_COMPONENTS+=("containerd@$_node" "kubelet@$_node" "kube-proxy@$_node")
    # A DRA node's fake-GPU driver (start-nodes.sh), a process of its own beside the kubelet.
    [[ -z $(real_node_dra_devices "$_node") ]] || E2E_COMPONENTS+=("dra-example-kubeletplugin@$_node")
  done
  unset _node
fi
# prometheus-operator, a host process while monitoring is on (monitoring.sh up writes monitoring.env first).
[[ ! -f $E2E_DIR/cluster/monitoring.env ]] || E2E_COMPONENTS+=(prometheus-operator)

# Print the PID of a running component of the cluster in $E2E_DIR; fail if it is not running.
# A recorded PID only counts if that process was started as the component's binary (argv[0]; PIDs get
# reused). argv[0], not /proc/PID/exe: the latter changes when tools.sh replaces a binary in the cache.
component_pid() {
  local f="$E2E_DIR/cluster/pids/$1.pid" pid argv0
  [[ -f $f ]] || return 1
  pid=$(<"$f")
  [[ $pid =~ ^[0-9]+$ ]] || return 1
  argv0=$(tr '\0' '\n' 2>/dev/null <"/proc/$pid/cmdline" | head -1) || return 1
  [[ $(basename "$argv0") == "${1%%@*}" ]] || return 1
  [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) != Z ]] || return 1 # a zombie has stopped already
  echo "$pid"
}

# The kernel's limit on inotify instances per user (default 128). Each cluster's kubelets, containerds, control
# plane and Kueue hold about 45 (counted with three real nodes), so three clusters side by side (make test) pass
# the default and a component fails with "too many open files". cluster-up raises it while clusters run (root
# only) and keeps the value it found; the cluster-down that leaves no cluster running puts that value back.
INOTIFY_LIMIT=/proc/sys/fs/inotify/max_user_instances
INOTIFY_WANTED=1024
INOTIFY_SAVED=$E2E_CACHE/inotify-max-user-instances.orig
# The ports each running cluster-up chose, one file per cluster id (up.sh writes it, down.sh removes it).
E2E_PORT_CLAIMS=$E2E_CACHE/port-claims

inotify_raise() {
  [[ -w $INOTIFY_LIMIT ]] || return 0
  local now
  now=$(<"$INOTIFY_LIMIT")
  ((now < INOTIFY_WANTED)) || return 0
  [[ -f $INOTIFY_SAVED ]] || echo "$now" >"$INOTIFY_SAVED"
  echo "$INOTIFY_WANTED" >"$INOTIFY_LIMIT"
  log "raised fs.inotify.max_user_instances from $now to $INOTIFY_WANTED while clusters run"
}

inotify_restore() { # when no cluster of this cache runs any more
  [[ -f $INOTIFY_SAVED && -w $INOTIFY_LIMIT ]] || return 0
  pgrep -f "^$(tool_bin kube-apiserver) " >/dev/null && return 0
  cat "$INOTIFY_SAVED" >"$INOTIFY_LIMIT"
  log "restored fs.inotify.max_user_instances to $(<"$INOTIFY_LIMIT")"
  rm -f "$INOTIFY_SAVED"
}

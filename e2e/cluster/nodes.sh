# Real nodes of the local cluster: shared by up.sh (start) and down.sh (teardown). Source it after lib.sh.
# shellcheck shell=bash
#
# Like kind's node containers, each real node is a network namespace with its own IP on a bridge of the host,
# running its own containerd (own root, state, socket, runc root), kubelet (own root dir and cgroup root) and
# kube-proxy (its iptables rules stay inside the namespace). Pods get addresses from the CNI bridge plugin in
# the node's namespace, one /24 per node; each node routes the other nodes' pod /24s via their node IPs.
#
#   host:  bridge rlp<id> (<subnet>.1)  --veth rlp<id>v<i>-->  netns rlp-<id>-<i>: eth0 <subnet>.<10+i>
#   netns: cni0 (10.245.<i>.1/24) -- pods;  kubelet :10250, containerd /run/rlp-<id>/<node>/containerd.sock (state: <state>/nodes/<node>/)
#
# Every name the host sees (netns, bridge, veths, iptables chain, cgroup roots) carries <id>, a hash of the
# state dir, so clusters of two checkouts (two state dirs) do not clash; down.sh finds them by that id
# even when up.sh died halfway and wrote nothing down.

# name|labels|fake extended resources|DRA devices. The labels are the real nodes' own (rlplace.io/real-*), not
# the kwok nodes' rlplace.io/gpu-type etc.: with those, the example NodeGroups of the kwok nodes would also
# select these nodes and every kwok test's capacity and plan would change. examples/nodegroups-real.yaml
# selects them.
# The optional 4th field dra=<n> makes a DRA node: its GPUs come from Dynamic Resource Allocation only, as
# <n> devices gpu-0..gpu-<n-1> (driver gpu.example.com, attribute index) that the fake-GPU driver
# dra-example-kubeletplugin publishes in a ResourceSlice; pods get them through ResourceClaims, so that
# several pods can share the node with exact device ids. A DRA node has no nvidia.com/gpu (3rd field
# empty) and no rlplace.io/real-gpu-type (the NodeGroups and tests that select real GPU nodes by that label
# count extended-resource GPUs): device-plugin GPUs and DRA GPUs on one node would be the same GPUs handed
# out twice.
E2E_REAL_NODE_SPECS=(
  "real-a800-0|rlplace.io/real-gpu-type=a800,rlplace.io/node-rank=0|nvidia.com/gpu=8"
  "real-4090-0|rlplace.io/real-gpu-type=4090,rlplace.io/node-rank=0|nvidia.com/gpu=8"
  "real-robot-0|rlplace.io/real-robot=franka,rlplace.io/real-cpu-only=true,rlplace.io/node-rank=0|rlplace.io/franka=2"
  "real-dra-0|rlplace.io/real-gpu-allocation=dra,rlplace.io/node-rank=0||dra=8"
)
# The DRA driver's name (a constant of dra-example-driver v0.2.1): its ResourceSlices' spec.driver, the
# attribute domain of its devices (device.attributes["gpu.example.com"].index) and its kubelet socket names.
E2E_DRA_DRIVER=gpu.example.com
E2E_POD_CIDR=10.245.0.0/16 # node i: 10.245.<i>.0/24
E2E_DNS_IP=10.96.0.10

E2E_CLUSTER_ID=$(printf '%s' "$E2E_DIR" | sha256sum | cut -c1-6)
E2E_NET_PREFIX="rlp$E2E_CLUSTER_ID"      # bridge rlp<id>, veths rlp<id>v<i> (IFNAMSIZ: 15 chars)
E2E_NETNS_PREFIX="rlp-$E2E_CLUSTER_ID-"  # netns and cgroup roots rlp-<id>-<i>
E2E_IPT_CHAIN="RLP-$E2E_CLUSTER_ID"      # host iptables chain (nat and filter)
E2E_NODES_STATE="$E2E_DIR/cluster/nodes" # per node: containerd, kubelet, cni state; <node>/
# containerd's sockets: a unix socket path has at most 104 characters, which a state dir in a deep checkout
# (or pytest's tmp_path) exceeds; so they live in a short directory named by the cluster id.
E2E_NODES_RUN="/run/rlp-$E2E_CLUSTER_ID"
node_socket() { echo "$E2E_NODES_RUN/$1/containerd.sock"; } # node_socket <node>

real_node_names() { local s; for s in "${E2E_REAL_NODE_SPECS[@]}"; do echo "${s%%|*}"; done; }
# How many DRA devices the node's spec gives it; nothing for a node without (no DRA driver runs there).
real_node_dra_devices() { # real_node_dra_devices <node>
  local s name dra
  for s in "${E2E_REAL_NODE_SPECS[@]}"; do
    IFS='|' read -r name _ _ dra <<<"$s"
    [[ $name == "$1" && $dra == dra=* ]] && echo "${dra#dra=}"
  done
  return 0
}
# The kubelet's root dir of a real node, and in it the two directories the DRA driver shares with the kubelet:
# the kubelet watches <root>/plugins_registry for registration sockets (a fixed place under --root-dir), and
# the driver serves its DRA gRPC socket in <root>/plugins/<driver>/. A unix socket path has at most 107
# characters and the state dir of a deep checkout is longer than that leaves, so a DRA node's kubelet keeps
# its root dir in the short per-cluster run directory (like containerd's sockets); the other nodes keep theirs
# in the state dir.
node_kubelet_dir() { # node_kubelet_dir <node>
  if [[ -n $(real_node_dra_devices "$1") ]]; then echo "$E2E_NODES_RUN/$1/kubelet"; else echo "$E2E_NODES_STATE/$1/kubelet"; fi
}

# The host bridge's /24 in 172.16.0.0/12, chosen from the cluster id; the next free one if a route to it exists.
# Written to the state dir so down.sh and a later status use the same.
pick_node_subnet() {
  local n=$((16#$E2E_CLUSTER_ID % 4096)) tries=0 net
  while ((tries < 4096)); do
    net="172.$((16 + n / 256 % 16)).$((n % 256))"
    if ! ip -4 route show to match "$net.1" | grep -qv '^default'; then
      echo "$net"
      return
    fi
    n=$(((n + 1) % 4096))
    tries=$((tries + 1))
  done
  return 1
}

# Remove every trace of this cluster's real nodes that the host keeps outside the state dir or that outlives
# processes: processes in the node namespaces and cgroups, mounts under the state dir, namespaces, links,
# iptables chain, cgroups. Idempotent; quiet when there is nothing.
# The host paths every kubelet uses whatever its flags: the device-plugin registration socket (kubelet's
# pluginapi.KubeletSocket) and the directory of container log symlinks. start-nodes.sh records in
# KUBELET_HOST_DIRS_MADE which of their directories did not exist before; teardown removes those.
KUBELET_DEVICE_PLUGIN_SOCKET=/var/lib/kubelet/device-plugins/kubelet.sock
KUBELET_CONTAINER_LOG_LINKS=/var/log/containers
KUBELET_HOST_DIRS_MADE="$E2E_NODES_STATE/host-dirs-made"

record_kubelet_host_dirs() {
  local dir
  mkdir -p "$E2E_NODES_STATE"
  : >"$KUBELET_HOST_DIRS_MADE"
  for dir in "${KUBELET_DEVICE_PLUGIN_SOCKET%/*}" "$KUBELET_CONTAINER_LOG_LINKS"; do
    while [[ $dir != / && ! -d $dir ]]; do
      echo "$dir" >>"$KUBELET_HOST_DIRS_MADE" # deepest first
      dir=${dir%/*}
    done
  done
}

teardown_real_nodes() {
  local say=${1:-log} ns pid i
  # 1. Processes: whatever runs in a node namespace (kubelet, containerd, shims, kube-proxy) and whatever runs
  #    in a node's cgroups (the containers, which live in their pods' namespaces).
  local pids=()
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$E2E_NETNS_PREFIX" || true); do
    mapfile -t -O "${#pids[@]}" pids < <(ip netns pids "$ns" 2>/dev/null)
  done
  local cg
  for cg in /sys/fs/cgroup/*/"$E2E_NETNS_PREFIX"*; do
    [[ -d $cg ]] || continue
    mapfile -t -O "${#pids[@]}" pids < <(find "$cg" -name cgroup.procs -exec cat {} + 2>/dev/null)
  done
  # Background image imports (ctr) and shims name a node's socket on their command line; the node daemons
  # (a DRA driver too) name the node's state dir, which finds one even outside its namespace.
  local f
  for f in /proc/[0-9]*/cmdline; do
    if tr '\0' ' ' 2>/dev/null <"$f" | grep -qF -e "$E2E_NODES_RUN/" -e "$E2E_NODES_STATE/"; then
      pid=${f#/proc/}
      pids+=("${pid%/cmdline}")
    fi
  done
  if ((${#pids[@]})); then
    $say "stopping ${#pids[@]} real-node processes (kubelets, containerd, shims, containers)"
    kill -TERM "${pids[@]}" 2>/dev/null || true
    for i in $(seq 50); do
      local alive=0
      for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1 && break; done
      ((alive)) || break
      sleep 0.1
    done
    kill -KILL "${pids[@]}" 2>/dev/null || true
  fi
  # 2. Mounts under the state dir (containerd's overlay rootfs and pod netns files, kubelet's volumes),
  #    deepest first. Lazy unmount as the last resort: a mount busy for a moment must not stop the teardown.
  local mounts
  mapfile -t mounts < <(awk -v p="$E2E_DIR/" -v r="$E2E_NODES_RUN/" 'index($5, p) == 1 || index($5, r) == 1 {print $5}' \
    /proc/self/mountinfo | sort -r)
  if ((${#mounts[@]})); then
    $say "unmounting ${#mounts[@]} mounts under $E2E_DIR"
    local m
    for m in "${mounts[@]}"; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
  fi
  rm -rf "$E2E_NODES_RUN"
  # 3. Network: namespaces (their veth peers, pod veths and cni0 bridges go with them), the host bridge,
  #    the iptables chain and the rules that jump to it.
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$E2E_NETNS_PREFIX" || true); do
    ip netns delete "$ns" 2>/dev/null || true
  done
  local link
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' | grep "^$E2E_NET_PREFIX" || true); do
    ip link delete "$link" 2>/dev/null || true
  done
  local table hook
  for table in nat filter; do
    if iptables -t "$table" -S "$E2E_IPT_CHAIN" >/dev/null 2>&1; then
      hook=POSTROUTING
      [[ $table == filter ]] && hook=FORWARD
      while iptables -t "$table" -D "$hook" -j "$E2E_IPT_CHAIN" 2>/dev/null; do :; done
      iptables -t "$table" -F "$E2E_IPT_CHAIN" 2>/dev/null || true
      iptables -t "$table" -X "$E2E_IPT_CHAIN" 2>/dev/null || true
    fi
  done
  # 4. Cgroups (kubelet's kubepods tree under each node's root), deepest first, in every v1 controller.
  for cg in /sys/fs/cgroup/*/"$E2E_NETNS_PREFIX"*; do
    [[ -d $cg ]] || continue
    find "$cg" -depth -type d -exec rmdir {} + 2>/dev/null || true
  done
  # 5. The kubelets' fixed host paths: this cluster's container log links, and the directories it made.
  find "$KUBELET_CONTAINER_LOG_LINKS" -maxdepth 1 -type l -lname "$E2E_DIR/*" -delete 2>/dev/null || true
  if [[ -s $KUBELET_HOST_DIRS_MADE ]]; then
    rm -f "$KUBELET_DEVICE_PLUGIN_SOCKET"
    local dir
    while read -r dir; do rmdir "$dir" 2>/dev/null || true; done <"$KUBELET_HOST_DIRS_MADE"
  fi
}

# What of this cluster's real nodes is left on the host (for tests and down.sh's final check). Empty: nothing.
real_node_leftovers() {
  ip netns list 2>/dev/null | awk '{print "netns " $1}' | grep " $E2E_NETNS_PREFIX" || true
  ip -o link show 2>/dev/null | awk -F': ' '{print "link " $2}' | sed 's/@.*//' | grep " $E2E_NET_PREFIX" || true
  iptables -t nat -S "$E2E_IPT_CHAIN" >/dev/null 2>&1 && echo "iptables nat chain $E2E_IPT_CHAIN"
  iptables -t filter -S "$E2E_IPT_CHAIN" >/dev/null 2>&1 && echo "iptables filter chain $E2E_IPT_CHAIN"
  local cg
  for cg in /sys/fs/cgroup/*/"$E2E_NETNS_PREFIX"*; do [[ -d $cg ]] && echo "cgroup $cg"; done
  awk -v p="$E2E_DIR/" -v r="$E2E_NODES_RUN/" 'index($5, p) == 1 || index($5, r) == 1 {print "mount " $5}' \
    /proc/self/mountinfo
  [[ ! -e $E2E_NODES_RUN ]] || echo "directory $E2E_NODES_RUN"
  if [[ -s $KUBELET_HOST_DIRS_MADE ]]; then
    local dir
    while read -r dir; do [[ ! -e $dir ]] || echo "directory $dir"; done <"$KUBELET_HOST_DIRS_MADE"
  fi
  return 0
}

# Start the real nodes (see nodes.sh for the layout). Sourced by up.sh once the control plane is up; uses its
# start/wait_for/fail helpers, BIN, KC, STATE, PKI, REAL_NODES, NODE_NET, HOST_IP.
# shellcheck shell=bash

# shellcheck source=../images.env
source "$E2E_REPO/e2e/images.env"
IMAGES_DIR="$E2E_CACHE/images"
for t in containerd containerd-shim-runc-v2 ctr runc kubelet kube-proxy "${E2E_CNI_PLUGINS[@]}"; do
  BIN[$t]=$(tool_bin "$t")
  [[ -x ${BIN[$t]} ]] || die "$t $(tool_version "$t") is not built (${BIN[$t]} missing); run 'make tools' first"
done
for image in pause coredns; do
  [[ -f $IMAGES_DIR/$image.tar ]] || die "image archive $IMAGES_DIR/$image.tar missing; run 'make images' first"
done

# Each node's own cgroup root in every v1 controller; cpuset needs its cpus/mems before a child can be used.
make_cgroup_root() { # make_cgroup_root <name>
  local ctrl
  for ctrl in /sys/fs/cgroup/*/; do
    [[ -f $ctrl/cgroup.procs ]] || continue
    mkdir -p "$ctrl$1"
  done
  cat /sys/fs/cgroup/cpuset/cpuset.cpus >"/sys/fs/cgroup/cpuset/$1/cpuset.cpus"
  cat /sys/fs/cgroup/cpuset/cpuset.mems >"/sys/fs/cgroup/cpuset/$1/cpuset.mems"
}

node_ip() { echo "$NODE_NET.$((10 + $1))"; }
in_node() { local i=$1; shift; nsenter --net="/run/netns/$E2E_NETNS_PREFIX$i" -- "$@"; }

# Images: every archive `make images` saved, in every node's containerd (namespace k8s.io, the CRI's) before
# it starts. Importing them into each node (~2.7 GB to copy and unpack, 4 nodes per cluster, 3 clusters per
# suite) wrote ~30 GB beside the starting clusters and the unit tests and kept 2 cores busy for minutes. So
# they are imported once into a seed root, cached by containerd's version and the archives' image ids, and
# each node's root is a hard-linked copy of it, as kind ships its node image with the images preloaded. The
# shared files are never written in place: content blobs and committed snapshots are immutable, and a
# container writes to a new snapshot of its own. The bolt databases, which are written in place, and the
# daemon's uuid are each node's own.
IMAGE_ARCHIVES=("$IMAGES_DIR"/*.tar)
image_seed_key() {
  local tar
  echo "containerd $CONTAINERD_VERSION"
  for tar in "${IMAGE_ARCHIVES[@]}"; do
    echo "${tar##*/} $(cat "$tar.id" 2>/dev/null || stat -c %s-%Y "$tar")"
  done
}
IMAGE_SEED="$IMAGES_DIR/containerd-seed-$(image_seed_key | sha256sum | cut -c1-16)"

# build_image_seed: import every archive into a containerd of its own, then move its root to $IMAGE_SEED. It is
# built in this cluster's state dir, so that down.sh stops its containerd and unmounts what an interrupted
# unpack left mounted; only a complete root moves into the cache.
build_image_seed() {
  local build="$E2E_NODES_STATE/image-seed" run="$E2E_NODES_RUN/image-seed" pid tar
  rm -rf "$build" "$run"
  mkdir -p "$build" "$run"
  cat >"$build/containerd.toml" <<TOML
version = 3
root = "$build/root"
state = "$run/state"
# Only the content store, the snapshotter and the image store are needed here: no CRI, NRI or tracing.
disabled_plugins = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime", "io.containerd.cri.v1.images",
  "io.containerd.nri.v1.nri", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]
[grpc]
  address = "$run/containerd.sock"
[ttrpc]
  address = "$run/containerd.sock.ttrpc"
TOML
  # Without the seed lock's descriptor: a containerd left by a failed start must not hold the lock.
  start containerd@image-seed "${BIN[containerd]}" --config "$build/containerd.toml" 9>&-
  pid=$!
  wait_for containerd@image-seed serving "${BIN[ctr]}" --address "$run/containerd.sock" version
  for tar in "${IMAGE_ARCHIVES[@]}"; do
    if ! "${BIN[ctr]}" --address "$run/containerd.sock" -n k8s.io images import --local --snapshotter overlayfs \
      "$tar" >>"$LOGS/containerd@image-seed.log" 2>&1; then
      log "importing $tar failed"
      kill -TERM "$pid"
      return 1
    fi
  done
  # Stopped cleanly, so that its databases are closed before they are copied.
  kill -TERM "$pid"
  wait "$pid" || true
  rm -rf "$run" "$PIDS/containerd@image-seed.pid"
  mv "$build/root" "$IMAGE_SEED.partial"
  mv "$IMAGE_SEED.partial" "$IMAGE_SEED"
  rm -rf "$build"
}

# seed_node_root <node>: the node's containerd root, a copy of the seed (hard links where it is on the same
# file system, a full copy elsewhere; the seed may be a link to one).
seed_node_root() {
  local root="$E2E_NODES_STATE/$1/containerd/root" db
  rm -rf "$root"
  cp -al "$IMAGE_SEED/." "$root" 2>/dev/null || { rm -rf "$root" && cp -a "$IMAGE_SEED/." "$root"; } || return 1
  while IFS= read -r -d '' db; do
    cp --remove-destination "$IMAGE_SEED/${db#"$root/"}" "$db" || return 1
  done < <(find "$root" -name '*.db' -print0)
  rm -f "$root/io.containerd.grpc.v1.introspection/uuid"
}

# One cluster at a time builds or copies the seed (the suite starts three side by side). Seeds of other
# image sets are removed: nodes copied from one keep their own links to its files.
seed_started=$SECONDS
if ! (
  flock 9
  if [[ ! -d $IMAGE_SEED ]]; then
    log "importing ${#IMAGE_ARCHIVES[@]} images into a new seed root ${IMAGE_SEED#"$E2E_CACHE"/} (once per image set)"
    find "$IMAGES_DIR" -maxdepth 1 -name 'containerd-seed-*' -exec rm -rf {} +
    build_image_seed || exit 1
  fi
  for node in "${REAL_NODES[@]}"; do
    mkdir -p "$E2E_NODES_STATE/$node/containerd"
    seed_node_root "$node" || { log "copying the image seed into $node failed"; exit 1; }
  done
) 9>"$IMAGES_DIR/.seed.lock"; then
  die "the images could not be seeded into the real nodes (log: $LOGS/containerd@image-seed.log)"
fi
log "${#IMAGE_ARCHIVES[@]} images in ${#REAL_NODES[@]} nodes from ${IMAGE_SEED#"$E2E_CACHE"/} ($((SECONDS - seed_started)) s)"

for i in "${!REAL_NODES[@]}"; do
  node=${REAL_NODES[$i]}
  d="$E2E_NODES_STATE/$node"
  mkdir -p "$d"/{containerd,kubelet,cni/net.d,cni/ipam,runc,pod-logs} "$E2E_NODES_RUN/$node"
  make_cgroup_root "$E2E_NETNS_PREFIX$i"
  # A DRA node's containerd reads the CDI specs its DRA driver writes (one per prepared claim: the devices'
  # environment) from the node's own directory, not from the host-wide /etc/cdi and /var/run/cdi: drivers of
  # several nodes (or clusters) on one host would write the same device names there, which CDI rejects.
  cdi_dirs=""
  [[ -z $(real_node_dra_devices "$node") ]] || cdi_dirs="cdi_spec_dirs = [\"$d/cdi\"]"

  cat >"$d/containerd.toml" <<EOF
version = 3
root = "$d/containerd/root"
state = "$d/containerd/state"
# Shared host paths (NRI's socket, tracing) stay off: several containerds run on this host.
disabled_plugins = ["io.containerd.nri.v1.nri", "io.containerd.tracing.processor.v1.otlp",
  "io.containerd.internal.v1.tracing", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs",
  "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.blockfile",
  "io.containerd.snapshotter.v1.erofs", "io.containerd.differ.v1.erofs"]
[grpc]
  address = "$(node_socket "$node")"
[ttrpc]
  address = "$(node_socket "$node").ttrpc"
[plugins.'io.containerd.internal.v1.opt']
  path = "$d/containerd/opt"
[plugins.'io.containerd.cri.v1.images']
  snapshotter = "overlayfs"
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = "$PAUSE_IMAGE"
[plugins.'io.containerd.cri.v1.runtime']
  enable_selinux = false
  netns_mounts_under_state_dir = true
  # Where this runs without CAP_SYS_RESOURCE (containers, VMs like this one) no process may lower its OOM
  # score; sandboxes and containers get at least containerd's own instead of failing to start.
  restrict_oom_score_adj = true
  $cdi_dirs
  [plugins.'io.containerd.cri.v1.runtime'.containerd]
    default_runtime_name = "runc"
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        BinaryName = "${BIN[runc]}"
        Root = "$d/runc"
        SystemdCgroup = false
  [plugins.'io.containerd.cri.v1.runtime'.cni]
    bin_dirs = ["$(tool_dir bridge)"]
    conf_dir = "$d/cni/net.d"
[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
EOF
  cat >"$d/cni/net.d/10-rlplace.conflist" <<EOF
{
  "cniVersion": "1.0.0",
  "name": "rlplace",
  "plugins": [
    {
      "type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
      "ipam": {"type": "host-local", "dataDir": "$d/cni/ipam",
               "ranges": [[{"subnet": "10.245.$i.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]}
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
EOF
  # The CPU-only node is where monitoring.sh runs Prometheus: prometheus-operator hands it a new configuration
  # (ServiceMonitors, PodMonitors, PrometheusRules) through a Secret volume, which a kubelet refreshes on its
  # periodic pod sync (syncFrequency, 1 min by default: a new ServiceMonitor was scraped after 53 s). 10 s there.
  sync_frequency=1m
  for spec in "${E2E_REAL_NODE_SPECS[@]}"; do
    [[ ${spec%%|*} != "$node" || $spec != *rlplace.io/real-cpu-only=true* ]] || sync_frequency=10s
  done
  cat >"$d/kubelet.yaml" <<EOF
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
failCgroupV1: false          # this host has cgroup v1 only
cgroupDriver: cgroupfs
cgroupRoot: /$E2E_NETNS_PREFIX$i
containerRuntimeEndpoint: unix://$(node_socket "$node")
address: $(node_ip "$i")
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: false}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: AlwaysAllow}   # only holders of a certificate of this cluster's CA get this far
clusterDNS: [$E2E_DNS_IP]
clusterDomain: cluster.local
podLogsDir: $d/pod-logs
failSwapOn: false
oomScoreAdj: 0   # its default, -999, needs CAP_SYS_RESOURCE (see restrict_oom_score_adj above)
serializeImagePulls: false
# Never garbage-collect the imported images (there is no registry to pull them again); evict late.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%}
maxPods: 110
syncFrequency: $sync_frequency
EOF
  cat >"$d/kube-proxy.yaml" <<EOF
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: $STATE/kube-proxy.kubeconfig}
hostnameOverride: $node
mode: iptables
clusterCIDR: $E2E_POD_CIDR
# A pod reaching a Service backed by a pod on its own bridge gets the answer back through the node.
iptables: {masqueradeAll: true}
oomScoreAdj: 0
metricsBindAddress: 127.0.0.1:10249
healthzBindAddress: 127.0.0.1:10256
# 0: leave the host-wide conntrack sysctls alone (shared by every node and the host).
conntrack: {maxPerCore: 0, min: 0, tcpEstablishedTimeout: 0s, tcpCloseWaitTimeout: 0s}
EOF
  PATH="$(tool_dir containerd):$PATH" start "containerd@$node" \
    nsenter --net="/run/netns/$E2E_NETNS_PREFIX$i" -- "${BIN[containerd]}" --config "$d/containerd.toml"
done

for i in "${!REAL_NODES[@]}"; do
  node=${REAL_NODES[$i]}
  wait_for "containerd@$node" serving "${BIN[ctr]}" --address "$(node_socket "$node")" version
done

# Every kubelet serves its device-plugin registration socket at one fixed host path, whatever its --root-dir
# (KUBELET_DEVICE_PLUGIN_SOCKET, nodes.sh). A starting kubelet empties that directory and then listens there,
# so two kubelets starting together can race, and the loser exits ("Failed to start ContainerManager ...
# address already in use"). So they start one at a time, each after the previous one's socket appeared. A
# later kubelet taking the path over is harmless: the fake accelerators come from the node status patch
# below, not from a device plugin. down.sh removes the directories if this cluster made them.
record_kubelet_host_dirs
for i in "${!REAL_NODES[@]}"; do
  node=${REAL_NODES[$i]}
  spec=${E2E_REAL_NODE_SPECS[$i]}
  labels=$(cut -d'|' -f2 <<<"$spec")
  rm -f "$KUBELET_DEVICE_PLUGIN_SOCKET"
  start "kubelet@$node" nsenter --net="/run/netns/$E2E_NETNS_PREFIX$i" -- "${BIN[kubelet]}" \
    --config "$E2E_NODES_STATE/$node/kubelet.yaml" --kubeconfig "$STATE/kubelet-$node.kubeconfig" \
    --root-dir "$(node_kubelet_dir "$node")" --cert-dir "$E2E_NODES_STATE/$node/kubelet/pki" \
    --hostname-override "$node" --node-ip "$(node_ip "$i")" --node-labels "rlplace.io/real-node=true,$labels"
  wait_for "kubelet@$node" "serving its device-plugin socket" test -S "$KUBELET_DEVICE_PLUGIN_SOCKET"
  start "kube-proxy@$node" nsenter --net="/run/netns/$E2E_NETNS_PREFIX$i" -- "${BIN[kube-proxy]}" \
    --config "$E2E_NODES_STATE/$node/kube-proxy.yaml"
done
for i in "${!REAL_NODES[@]}"; do
  node=${REAL_NODES[$i]}
  wait_for "kubelet@$node" healthy in_node "$i" curl -fsS http://127.0.0.1:10248/healthz
  wait_for "kube-proxy@$node" healthy in_node "$i" curl -fsS http://127.0.0.1:10256/healthz
done
wait_for "kubelet@${REAL_NODES[0]}" "running every real node (Ready)" \
  "${KC[@]}" wait --for condition=Ready --timeout 2s "${REAL_NODES[@]/#/node/}"

# Fake accelerators: the documented extended-resource patch of the node status (capacity and allocatable).
# The kubelet keeps extended resources it does not manage, except when it registers a node that already
# exists (a restarted kubelet): then it zeroes them, and this patch must be applied again.
for i in "${!REAL_NODES[@]}"; do
  node=${REAL_NODES[$i]}
  extended=$(cut -d'|' -f3 <<<"${E2E_REAL_NODE_SPECS[$i]}")
  [[ -n $extended ]] || continue # a DRA node: its GPUs are in its ResourceSlice (below)
  ops=()
  for kv in ${extended//,/ }; do
    key=${kv%%=*}
    for field in capacity allocatable; do
      ops+=("{\"op\":\"add\",\"path\":\"/status/$field/${key//\//~1}\",\"value\":\"${kv#*=}\"}")
    done
  done
  ops_json=$(IFS=,; echo "[${ops[*]}]")
  "${KC[@]}" patch node "$node" --subresource=status --type=json -p "$ops_json" >/dev/null ||
    fail "kubelet@$node" "patching its fake extended resources ($extended) failed"
done

# DRA nodes: one fake-GPU driver each (dra-example-kubeletplugin), in the node's network namespace like its
# kubelet (so teardown stops it with the node's other processes). It registers with that node's kubelet
# through <kubelet root>/plugins_registry, writes a CDI spec per prepared claim into <node>/cdi (the
# directory the node's containerd reads, above), and publishes the node's devices as a ResourceSlice; it
# needs the Node object for that, hence after the kubelets registered. NODE_NAME must be in its environment
# (not only a flag): the devices' uuid attributes are derived from it. The admin kubeconfig with the host
# bridge address (the namespace's 127.0.0.1 is not the apiserver's) lets it write ResourceSlices.
DRA_NODES=()
for i in "${!REAL_NODES[@]}"; do
  node=${REAL_NODES[$i]}
  devices=$(real_node_dra_devices "$node")
  [[ -n $devices ]] || continue
  if [[ ${#DRA_NODES[@]} == 0 ]]; then
    DRA_BIN=$(tool_bin dra-example-kubeletplugin)
    [[ -x $DRA_BIN ]] ||
      die "dra-example-kubeletplugin $DRA_EXAMPLE_DRIVER_VERSION is not built ($DRA_BIN missing); run 'make tools' first"
    kubeconfig admin "$STATE/dra-driver.kubeconfig" "$HOST_IP"
  fi
  DRA_NODES+=("$node")
  kubelet_dir=$(node_kubelet_dir "$node")
  start "dra-example-kubeletplugin@$node" nsenter --net="/run/netns/$E2E_NETNS_PREFIX$i" -- env \
    NODE_NAME="$node" CDI_ROOT="$E2E_NODES_STATE/$node/cdi" NUM_DEVICES="$devices" \
    KUBECONFIG="$STATE/dra-driver.kubeconfig" "$DRA_BIN" \
    --kubelet-registrar-directory-path="$kubelet_dir/plugins_registry" \
    --kubelet-plugins-directory-path="$kubelet_dir/plugins"
done
resource_slice_published() { # resource_slice_published <node>: the driver's ResourceSlice of the node exists
  [[ -n $("${KC[@]}" get resourceslices -o name \
    --field-selector "spec.driver=$E2E_DRA_DRIVER,spec.nodeName=$1") ]]
}

# Cluster DNS as pods on the real nodes (kube-dns Service at $E2E_DNS_IP, the kubelets' clusterDNS).
sed -e "s#@COREDNS_IMAGE@#$COREDNS_IMAGE#" -e "s#@DNS_IP@#$E2E_DNS_IP#" "$E2E_REPO/e2e/cluster/coredns.yaml" |
  "${KC[@]}" apply -f - >"$LOGS/coredns.log" 2>&1 || { cat "$LOGS/coredns.log" >&2; die "creating CoreDNS failed"; }
wait_for "kubelet@${REAL_NODES[0]}" "running CoreDNS (Available)" \
  "${KC[@]}" -n kube-system wait --for condition=Available --timeout 2s deployment/coredns
for node in "${DRA_NODES[@]}"; do
  wait_for "dra-example-kubeletplugin@$node" "publishing $node's ResourceSlice (driver $E2E_DRA_DRIVER)" \
    resource_slice_published "$node"
done
log "real nodes ready: ${REAL_NODES[*]} ($((SECONDS - T0)) s)"

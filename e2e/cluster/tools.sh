#!/usr/bin/env bash
# Build the local control plane's binaries from the Go module proxy, once per version.
#
#   etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kwok, ray-operator (+ CRDs), helm,
#   kueue (+ CRDs)
#   and for the real nodes: kubelet, kube-proxy, containerd (+ ctr, containerd-shim-runc-v2), runc,
#   the CNI plugins bridge/host-local/loopback/portmap, coredns, the pod sandbox binary pause, and
#   dra-example-kubeletplugin (the fake-GPU DRA driver of the DRA real nodes), and promtool (unit tests);
#   with --monitoring (or RLPLACE_MONITORING=1) also prometheus, prometheus-operator (+ CRDs) and
#   prometheus-config-reloader
#
# Each lands in ${XDG_CACHE_HOME:-$HOME/.cache}/rlplace/<tool>-<version>/ and is symlinked into .e2e/bin/.
# A warm run only checks that every cached binary still answers its version command (~1 s).
# A missing or broken binary is rebuilt. Go's own caches (modules, build cache) live under the same
# directory, so a fresh clone or a version bump reuses everything already downloaded or compiled.
#
# Usage: e2e/cluster/tools.sh [--force] [--monitoring] [--only=TOOL]...
#   (--force rebuilds everything; --only builds and checks just the tools named, e.g. promtool)
set -euo pipefail
# shellcheck disable=SC2034 # used by log() in lib.sh
E2E_LOG_PREFIX=tools
# shellcheck source=lib.sh
source "$(dirname "$0")/lib.sh"

FORCE=0
MONITORING=0
[[ ${RLPLACE_MONITORING:-0} == 0 ]] || MONITORING=1
ONLY=()
for arg in "$@"; do
  case "$arg" in
    --force) FORCE=1 ;;
    --monitoring) MONITORING=1 ;;
    --only=*) ONLY+=("${arg#--only=}") ;;
    *) die "unknown argument $arg (usage: tools.sh [--force] [--monitoring] [--only=TOOL]...)" ;;
  esac
done
TOOLS=("${E2E_TOOLS[@]}")
((MONITORING)) && TOOLS+=("${E2E_MONITORING_TOOLS[@]}")
if ((${#ONLY[@]})); then
  for t in "${ONLY[@]}"; do
    [[ " ${E2E_TOOLS[*]} ${E2E_MONITORING_TOOLS[*]} " == *" $t "* ]] || die "--only=$t: no such tool"
  done
  TOOLS=("${ONLY[@]}") # e.g. --only=promtool for the unit tests, without the control plane
fi

export GOTOOLCHAIN=local CGO_ENABLED=0
export GOPATH="$E2E_CACHE/go"
export GOMODCACHE="$E2E_CACHE/go/pkg/mod"
export GOCACHE="$E2E_CACHE/go/build-cache"
export GOFLAGS="-buildvcs=false -modcacherw"
mkdir -p "$E2E_CACHE/logs" "$E2E_CACHE/src"

command -v go >/dev/null || die "go is not on PATH (need Go >= 1.26 to build the control plane)"

# ---------------------------------------------------------------------------------------------------------
# Health check of one cached binary: it exists and its version command succeeds and names the version.
check_args() { # the arguments that make a tool print its version
  case "$1" in
    kubectl) echo "version --client" ;;
    helm) echo "version --short" ;;
    ray-operator | kueue) echo "-help" ;; # no version flag; -help exits 0 once its flags parse
    dra-example-kubeletplugin) echo "--help" ;; # no version flag either; --help exits 0
    containerd-shim-runc-v2 | pause) echo "-v" ;;
    coredns) echo "-version" ;;
    prometheus | promtool | prometheus-operator | prometheus-config-reloader) echo "--version" ;;
    bridge | host-local | loopback | portmap) echo "" ;; # without CNI_COMMAND a plugin prints its version
    *) echo "--version" ;;
  esac
}

check_tool() { # prints nothing on success, a reason on failure
  local tool=$1 bin out
  bin=$(tool_bin "$tool")
  [[ -x $bin ]] || { echo "missing"; return 1; }
  local rc=0 args=()
  read -ra args <<<"$(check_args "$tool")"
  out=$(timeout 20 "$bin" "${args[@]}" 2>&1) || rc=$?
  if ((rc == 124)); then
    # A busy machine (a parallel build, a test suite) can take longer than 20 s to page in a 100 MB binary:
    # a time-out alone is not proof of a broken binary, and rebuilding it costs many minutes. Ask once more.
    rc=0
    out=$(timeout 180 "$bin" "${args[@]}" 2>&1) || rc=$?
  fi
  if ((rc != 0)); then
    local why="exit status $rc"
    ((rc > 128)) && why+=" (killed by signal $((rc - 128)))"
    [[ -n $out ]] && why+=": $(tail -1 <<<"$out")"
    echo "'$tool ${args[*]}' failed with $why"
    return 1
  fi
  local ver
  ver=$(tool_version "$tool")
  [[ $tool == prometheus || $tool == promtool ]] && ver=$(prometheus_release) # v0.316.0 -> 3.16.0
  if [[ $tool != ray-operator && $tool != kueue && $tool != dra-example-kubeletplugin && $out != *"${ver#v}"* ]]; then
    echo "reports a different version (want $ver): $(head -1 <<<"$out")"
    return 1
  fi
  if [[ $tool == kueue ]] && ! [[ -f $(kueue_crd_dir)/kueue.x-k8s.io_workloads.yaml && -f $(tool_dir kueue)/webhooks/manifests.yaml ]]; then
    echo "its CRDs or webhook manifests are missing"
    return 1
  fi
  if [[ $tool == prometheus-operator ]] && ! [[ -f $(prometheus_operator_crd_dir)/monitoring.coreos.com_prometheuses.yaml ]]; then
    echo "its CRDs are missing"
    return 1
  fi
  if [[ $tool == ray-operator ]] && ! compgen -G "$(kuberay_crd_dir)/ray.io_rayclusters.yaml" >/dev/null; then
    echo "its CRDs are missing"
    return 1
  fi
}

# ---------------------------------------------------------------------------------------------------------
# Run a long go command with its output in a log file, printing a heartbeat every 15 s.
progress() {
  local name=$1
  shift
  local logf="$E2E_CACHE/logs/$name.log"
  local start=$SECONDS rc=0
  log "  building $name (log: $logf)"
  set +e
  "$@" >"$logf" 2>&1 &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 15
    if kill -0 "$pid" 2>/dev/null; then
      # grep -c prints 0 and exits 1 for an empty log: take its count, whatever its status.
      local lines
      lines=$(grep -c . "$logf" 2>/dev/null) || true
      log "  $name: ${lines:-0} lines of build output, $((SECONDS - start)) s ..."
    fi
  done
  wait "$pid"
  rc=$?
  set -e
  if ((rc != 0)); then
    log "  $name FAILED (exit $rc) after $((SECONDS - start)) s; last lines of $logf:"
    tail -25 "$logf" >&2
    return "$rc"
  fi
  log "  $name done in $((SECONDS - start)) s"
}

# Move freshly built binaries from a temp dir into their version directories.
install_bin() { # install_bin <tool> <built file>
  local tool=$1 src=$2 dir
  dir=$(tool_dir "$tool")
  mkdir -p "$dir"
  mv -f "$src" "$dir/$tool.new"
  mv -f "$dir/$tool.new" "$dir/$tool"
}

# ---------------------------------------------------------------------------------------------------------
# kube-apiserver, kube-controller-manager, kube-scheduler, kubectl: one wrapper module around k8s.io/kubernetes.
build_kubernetes() {
  local kv=$KUBERNETES_VERSION
  local minor=${kv#v1.}
  minor=${minor%%.*}
  local staging_ver=v0.${kv#v1.}
  local src="$E2E_CACHE/src/kubernetes-$kv"
  log "building Kubernetes $kv (kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, kubelet, kube-proxy)"
  log "  a cold build takes 6-20 minutes (the slowest part of make tools) and ~2.5 GB of memory on 2 cores"
  mkdir -p "$src"

  # Upstream go.mod replaces every staging module (k8s.io/api, client-go, ...) with ./staging/src/...,
  # which a dependent module cannot see. Derive the same list and point each at its published v0.Y.Z.
  local upstream_mod
  upstream_mod=$(go mod download -json "k8s.io/kubernetes@$kv" | sed -n 's/^\s*"GoMod": "\(.*\)",\?$/\1/p')
  [[ -f $upstream_mod ]] || die "could not download k8s.io/kubernetes@$kv from the Go module proxy"
  {
    echo "// Generated by e2e/cluster/tools.sh: builds k8s.io/kubernetes $kv commands. Do not edit."
    echo "module rlplace.local/e2e/kubernetes"
    echo
    grep -E '^(go|godebug) ' "$upstream_mod"
    echo
    echo "require k8s.io/kubernetes $kv"
    echo
    echo "replace ("
    sed -n 's#^\s*\(k8s.io/[a-z0-9-]*\) => ./staging/src/k8s.io/[a-z0-9-]*$#\t\1 => \1 '"$staging_ver"'#p' "$upstream_mod"
    echo ")"
  } >"$src/go.mod.new"
  local nrep
  nrep=$(grep -c ' => ' "$src/go.mod.new")
  ((nrep > 20)) || die "found only $nrep staging replace lines in k8s.io/kubernetes@$kv go.mod; format changed?"
  if ! cmp -s "$src/go.mod.new" "$src/go.mod"; then
    mv "$src/go.mod.new" "$src/go.mod"
    rm -f "$src/go.sum"
  else
    rm "$src/go.mod.new"
  fi
  log "  wrapper module with $nrep staging replaces: $src/go.mod"

  local commit date ld="-s -w" pkg
  commit=$(go mod download -json "k8s.io/kubernetes@$kv" | sed -n 's/^\s*"Hash": "\([0-9a-f]\{40\}\)",\?$/\1/p' | head -1)
  date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $pkg.gitVersion=$kv -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ld+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=$date"
    [[ -n $commit ]] && ld+=" -X $pkg.gitCommit=$commit"
  done
  local out="$src/out"
  rm -rf "$out" && mkdir -p "$out"
  (cd "$src" && progress "kubernetes-$kv" nice go build -mod=mod -v -trimpath -ldflags "$ld" -o "$out/" \
    k8s.io/kubernetes/cmd/kube-apiserver \
    k8s.io/kubernetes/cmd/kube-controller-manager \
    k8s.io/kubernetes/cmd/kube-scheduler \
    k8s.io/kubernetes/cmd/kubectl \
    k8s.io/kubernetes/cmd/kubelet \
    k8s.io/kubernetes/cmd/kube-proxy)
  for t in kube-apiserver kube-controller-manager kube-scheduler kubectl kubelet kube-proxy; do
    install_bin "$t" "$out/$t"
  done
}

# A tiny wrapper module that requires <module>@<version> and builds one of its main packages. Used instead
# of `go install pkg@version`, which also asks the proxy for the module's version list (to report
# deprecation) and fails when the proxy refuses that list, as it does for KubeRay.
wrapper_build() { # wrapper_build <tool> <module> <package> <ldflags>
  local tool=$1 mod=$2 pkg=$3 ld=$4 ver src
  ver=$(tool_version "$tool")
  src="$E2E_CACHE/src/$tool-$ver"
  log "building $tool $ver ($pkg)"
  mkdir -p "$src"
  printf '// Generated by e2e/cluster/tools.sh. Do not edit.\nmodule rlplace.local/e2e/%s\n\ngo 1.25.0\n\nrequire %s %s\n' \
    "$tool" "$mod" "$ver" >"$src/go.mod.new"
  if ! cmp -s "$src/go.mod.new" "$src/go.mod"; then
    mv "$src/go.mod.new" "$src/go.mod"
    rm -f "$src/go.sum"
  else
    rm "$src/go.mod.new"
  fi
  (cd "$src" && progress "$tool-$ver" nice go build -mod=mod -v -trimpath -ldflags "$ld" -o "$src/$tool.out" "$pkg")
  install_bin "$tool" "$src/$tool.out"
}

# etcd: the server main package at the version k8s.io/kubernetes pins.
build_etcd() {
  wrapper_build etcd go.etcd.io/etcd/server/v3 go.etcd.io/etcd/server/v3 "-s -w"
}

build_kwok() {
  wrapper_build kwok sigs.k8s.io/kwok sigs.k8s.io/kwok/cmd/kwok "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${KWOK_VERSION#v}"
}

build_ray_operator() {
  local mod="github.com/ray-project/kuberay/ray-operator"
  wrapper_build ray-operator "$mod" "$mod" "-s -w"
  local crds moddir
  moddir=$(cd "$E2E_CACHE/src/ray-operator-$KUBERAY_VERSION" && go list -m -f '{{.Dir}}' "$mod")
  crds=$(kuberay_crd_dir)
  rm -rf "$crds" && mkdir -p "$crds"
  cp "$moddir"/config/crd/bases/*.yaml "$crds/"
  chmod u+w "$crds"/*.yaml
  log "  KubeRay CRDs: $(cd "$crds" && echo *.yaml)"
}

# Kueue: its manager binary (version stamped as upstream's Makefile does) and the CRD bases of the same module.
build_kueue() {
  local mod=sigs.k8s.io/kueue crds moddir
  wrapper_build kueue "$mod" "$mod/cmd/kueue" \
    "-s -w -X $mod/pkg/version.GitVersion=$KUEUE_VERSION -X $mod/pkg/version.GitCommit=$KUEUE_VERSION"
  moddir=$(cd "$E2E_CACHE/src/kueue-$KUEUE_VERSION" && go list -m -f '{{.Dir}}' "$mod")
  crds=$(kueue_crd_dir)
  rm -rf "$crds" && mkdir -p "$crds"
  cp "$moddir"/config/components/crd/bases/*.yaml "$crds/"
  chmod u+w "$crds"/*.yaml
  # Its admission webhooks, from which up.sh registers Kueue's own (kueue.x-k8s.io) ones.
  mkdir -p "$(tool_dir kueue)/webhooks"
  cp "$moddir/config/components/webhook/manifests.yaml" "$(tool_dir kueue)/webhooks/manifests.yaml"
  chmod u+w "$(tool_dir kueue)/webhooks/manifests.yaml"
  log "  Kueue CRDs: $(cd "$crds" && echo *.yaml)"
}

build_helm() {
  wrapper_build helm helm.sh/helm/v3 helm.sh/helm/v3/cmd/helm \
    "-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
}

# The DRA real nodes' fake GPUs: the example driver's kubelet plugin, a pure Go binary (no version variable
# to stamp; its cache directory carries the version).
build_dra_example_driver() {
  CGO_ENABLED=0 wrapper_build dra-example-kubeletplugin sigs.k8s.io/dra-example-driver \
    sigs.k8s.io/dra-example-driver/cmd/dra-example-kubeletplugin "-s -w"
}

# A wrapper module for several main packages of one module, built into one directory (tool_dir of the
# first tool). Env CGO_ENABLED/tags come from the caller: build_multi <module> <version> <ldflags> <tags> <pkg>...
build_multi() {
  local mod=$1 ver=$2 ld=$3 tags=$4
  shift 4
  local name="${mod##*/}-$ver"
  [[ $mod == */v[0-9] ]] && name="$(basename "${mod%/*}")-$ver"
  local src="$E2E_CACHE/src/$name"
  log "building $name (${*##*/})"
  mkdir -p "$src"
  printf '// Generated by e2e/cluster/tools.sh. Do not edit.\nmodule rlplace.local/e2e/%s\n\ngo 1.25.0\n\nrequire %s %s\n' \
    "${name%-*}" "$mod" "$ver" >"$src/go.mod.new"
  if ! cmp -s "$src/go.mod.new" "$src/go.mod"; then
    mv "$src/go.mod.new" "$src/go.mod"
    rm -f "$src/go.sum"
  else
    rm "$src/go.mod.new"
  fi
  rm -rf "$src/out" && mkdir -p "$src/out"
  (cd "$src" && progress "$name" nice go build -mod=mod -v -trimpath -tags "$tags" -ldflags "$ld" -o "$src/out/" "$@")
  local pkg
  for pkg in "$@"; do install_bin "${pkg##*/}" "$src/out/${pkg##*/}"; done
}

# containerd, ctr and the runc shim, statically (no btrfs snapshotter, the only part that needs cgo).
build_containerd() {
  local mod=github.com/containerd/containerd/v2
  CGO_ENABLED=0 build_multi "$mod" "$CONTAINERD_VERSION" \
    "-s -w -X $mod/version.Version=$CONTAINERD_VERSION -X $mod/version.Revision=rlplace-e2e" \
    "no_btrfs osusergo netgo" "$mod/cmd/containerd" "$mod/cmd/ctr" "$mod/cmd/containerd-shim-runc-v2"
}

# runc needs cgo (libcontainer/nsenter is C) and libseccomp for the seccomp profiles pods may ask for.
build_runc() {
  command -v gcc >/dev/null || die "runc needs a C compiler (apt-get install gcc)"
  pkg-config --exists libseccomp 2>/dev/null || die "runc needs libseccomp (apt-get install libseccomp-dev pkg-config)"
  CGO_ENABLED=1 build_multi github.com/opencontainers/runc "$RUNC_VERSION" \
    "-s -w -X main.version=${RUNC_VERSION#v} -X main.gitCommit=rlplace-e2e" "seccomp" github.com/opencontainers/runc
}

build_cni_plugins() {
  local mod=github.com/containernetworking/plugins
  CGO_ENABLED=0 build_multi "$mod" "$CNI_PLUGINS_VERSION" \
    "-s -w -X $mod/pkg/utils/buildversion.BuildVersion=$CNI_PLUGINS_VERSION" "" \
    "$mod/plugins/main/bridge" "$mod/plugins/ipam/host-local" "$mod/plugins/main/loopback" "$mod/plugins/meta/portmap"
}

build_coredns() {
  CGO_ENABLED=0 build_multi github.com/coredns/coredns "$COREDNS_VERSION" "-s -w" "" github.com/coredns/coredns
}

# The pod sandbox: the C source registry.k8s.io/pause is built from, in the k8s.io/kubernetes module.
build_pause() {
  command -v gcc >/dev/null || die "pause needs a C compiler (apt-get install gcc)"
  local moddir dir
  moddir=$(go mod download -json "k8s.io/kubernetes@$KUBERNETES_VERSION" | sed -n 's/^\s*"Dir": "\(.*\)",\?$/\1/p')
  [[ -f $moddir/build/pause/linux/pause.c ]] || die "build/pause/linux/pause.c missing in k8s.io/kubernetes@$KUBERNETES_VERSION"
  dir=$(tool_dir pause)
  mkdir -p "$dir"
  log "building pause from $moddir/build/pause/linux/pause.c"
  gcc -Os -Wall -Werror -static -DVERSION="$KUBERNETES_VERSION" -o "$dir/pause.new" "$moddir/build/pause/linux/pause.c"
  strip "$dir/pause.new"
  mv -f "$dir/pause.new" "$dir/pause"
}

# Prometheus' ldflags (as its .promu.yml sets them), for the prometheus module and prometheus-operator alike.
prometheus_ldflags() { # prometheus_ldflags <version as printed>
  local v=github.com/prometheus/common/version
  echo "-s -w -X $v.Version=$1 -X $v.Revision=rlplace-e2e -X $v.Branch=HEAD -X $v.BuildUser=rlplace-e2e -X $v.BuildDate=$(date -u +%Y%m%d-%H:%M:%S)"
}

# promtool (always: the unit tests check the chart's rules with it) and, with monitoring, prometheus: one
# go build, only Kubernetes service discovery (the others pull in every cloud's SDK), no embedded web UI.
build_prometheus() { # build_prometheus <cmd>...   (promtool, prometheus)
  local mod=github.com/prometheus/prometheus pkgs=() c
  for c in "$@"; do pkgs+=("$mod/cmd/$c"); done
  CGO_ENABLED=0 build_multi "$mod" "$PROMETHEUS_VERSION" "$(prometheus_ldflags "$(prometheus_release)")" \
    "remove_all_sd enable_kubernetes_sd" "${pkgs[@]}"
}

# prometheus-operator (cmd/operator, installed as prometheus-operator), its config reloader, and the
# monitoring.coreos.com CRDs from the module's example/prometheus-operator-crd/.
build_prometheus_operator() {
  local mod=github.com/prometheus-operator/prometheus-operator crds moddir ld
  ld=$(prometheus_ldflags "${PROMETHEUS_OPERATOR_VERSION#v}")
  CGO_ENABLED=0 wrapper_build prometheus-operator "$mod" "$mod/cmd/operator" "$ld"
  CGO_ENABLED=0 wrapper_build prometheus-config-reloader "$mod" "$mod/cmd/prometheus-config-reloader" "$ld"
  moddir=$(cd "$E2E_CACHE/src/prometheus-operator-$PROMETHEUS_OPERATOR_VERSION" && go list -m -f '{{.Dir}}' "$mod")
  crds=$(prometheus_operator_crd_dir)
  rm -rf "$crds" && mkdir -p "$crds"
  cp "$moddir"/example/prometheus-operator-crd/monitoring.coreos.com_*.yaml "$crds/"
  chmod u+w "$crds"/*.yaml
  log "  prometheus-operator CRDs: $(cd "$crds" && echo *.yaml)"
}

# ---------------------------------------------------------------------------------------------------------
# Only one tools.sh at a time may build into the cache.
exec 9>"$E2E_CACHE/.lock"
if ! flock -n 9; then
  log "another tools.sh is building in $E2E_CACHE; waiting for it ..."
  flock 9
fi

# Check every cached binary in parallel (a version command of a 100 MB binary takes ~0.1-0.3 s).
declare -A reason=()
tmpd=$(mktemp -d)
trap 'rm -rf "$tmpd"' EXIT
for t in "${TOOLS[@]}"; do
  if ((FORCE)); then echo "--force given" >"$tmpd/$t"; else (check_tool "$t" >"$tmpd/$t" 2>&1 || true) & fi
done
wait
for t in "${TOOLS[@]}"; do
  r=$(<"$tmpd/$t")
  if [[ -n $r ]]; then
    reason[$t]=$r
    [[ $r == missing ]] || log "cached $t at $(tool_bin "$t") is broken ($r); rebuilding it"
  fi
done

if ((${#reason[@]})); then
  todo=()
  for t in "${TOOLS[@]}"; do [[ -z ${reason[$t]:-} ]] || todo+=("$t"); done
  log "to build: ${todo[*]}  (cache: $E2E_CACHE)"
  total=$SECONDS
  # Two lanes side by side: Kubernetes (the longest build by far) and every other tool one after another.
  # Each go build already compiles on every core; side by side, one lane's module downloads, cgo and links
  # overlap the other's compiling. Go's build cache makes an interrupted or failed build resume where it
  # stopped (every package compiled is kept), and its module cache is shared by both lanes (Go locks it).
  kubernetes_lane() {
    if [[ -n ${reason[kube-apiserver]:-}${reason[kube-controller-manager]:-}${reason[kube-scheduler]:-}${reason[kubectl]:-}${reason[kubelet]:-}${reason[kube-proxy]:-} ]]; then
      build_kubernetes
    fi
  }
  other_lane() {
    [[ -z ${reason[etcd]:-} ]] || build_etcd
    [[ -z ${reason[kwok]:-} ]] || build_kwok
    [[ -z ${reason[ray-operator]:-} ]] || build_ray_operator
    [[ -z ${reason[helm]:-} ]] || build_helm
    [[ -z ${reason[kueue]:-} ]] || build_kueue
    [[ -z ${reason[containerd]:-}${reason[ctr]:-}${reason[containerd-shim-runc-v2]:-} ]] || build_containerd
    [[ -z ${reason[runc]:-} ]] || build_runc
    [[ -z ${reason[bridge]:-}${reason[host-local]:-}${reason[loopback]:-}${reason[portmap]:-} ]] || build_cni_plugins
    [[ -z ${reason[coredns]:-} ]] || build_coredns
    [[ -z ${reason[pause]:-} ]] || build_pause
    [[ -z ${reason[dra-example-kubeletplugin]:-} ]] || build_dra_example_driver
    # prometheus and promtool share one build: both when monitoring is on and either is missing.
    if [[ -n ${reason[prometheus]:-} ]] || { ((MONITORING)) && [[ -n ${reason[promtool]:-} ]]; }; then
      build_prometheus promtool prometheus
    elif [[ -n ${reason[promtool]:-} ]]; then
      build_prometheus promtool
    fi
    [[ -z ${reason[prometheus-operator]:-}${reason[prometheus-config-reloader]:-} ]] || build_prometheus_operator
  }
  kubernetes_lane &
  kubernetes_pid=$!
  other_lane &
  other_pid=$!
  lanes_ok=1
  wait "$kubernetes_pid" || lanes_ok=0
  wait "$other_pid" || lanes_ok=0
  ((lanes_ok)) || die "a build failed (above); run make tools again: what was built is kept and the rest resumes"
  for t in "${todo[@]}"; do
    r=$(check_tool "$t") || die "$t was rebuilt but still fails its check: $r"
  done
  log "built ${todo[*]} in $((SECONDS - total)) s"
fi

# Symlinks for people: export PATH=$PWD/.e2e/bin:$PATH
mkdir -p "$E2E_DIR/bin"
for t in "${TOOLS[@]}"; do
  ln -sfn "$(tool_bin "$t")" "$E2E_DIR/bin/$t"
done
log "all tools ready in $E2E_CACHE; symlinks in $E2E_DIR/bin (export PATH=$E2E_DIR/bin:\$PATH)"

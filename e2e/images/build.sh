#!/usr/bin/env bash
# Build the real nodes' container images without Docker (names in e2e/images.env):
#
#   base        debootstrap bookworm (minbase + python3 3.11 + wget/bash/procps), Python as a venv at /usr/local
#   pause       the pause binary from tools.sh, FROM scratch
#   coredns     the coredns binary from tools.sh, FROM scratch
#   ray         base + ray[default]==<pyproject's pin>          (e2e/images/ray.Containerfile)
#   ray-rlplace ray + this checkout's wheel                      (e2e/images/ray-rlplace.Containerfile)
#   ray-rlinf-test  ray + RLinf + test-only stand-ins             (e2e/images/ray-rlinf-test.Containerfile)
#   operator    operator/Dockerfile itself, --build-arg BASE_IMAGE=<base>
#
# Only when named (e2e/cluster/monitoring.sh does), saved under images/monitoring/ so that the default image
# set the real nodes are seeded with stays as it is:
#   prometheus                  the prometheus binary from tools.sh --monitoring, FROM scratch, /bin/prometheus
#   prometheus-config-reloader  prometheus-operator's config reloader, FROM scratch, /bin/prometheus-config-reloader
#
# Tools: debootstrap (rootfs) and buildah (daemonless; chroot isolation, its own storage under the cache).
# Everything lands in ${XDG_CACHE_HOME:-$HOME/.cache}/rlplace/images/: buildah's storage (layer cache), the base
# rootfs keyed by a hash of its inputs, and one docker-archive tarball per image (<name>.tar, what up.sh imports
# into each node's containerd and what `kind load image-archive` takes). A warm run rebuilds only what changed.
#
# Usage: e2e/images/build.sh [image...]   (default: all)
set -euo pipefail
# shellcheck disable=SC2034 # used by log() in lib.sh
E2E_LOG_PREFIX=images
# shellcheck source=../cluster/lib.sh
source "$(dirname "$0")/../cluster/lib.sh"
# shellcheck source=../images.env
source "$E2E_REPO/e2e/images.env"

IMAGES_DIR="$E2E_CACHE/images"
BUILDAH=(buildah --root "$IMAGES_DIR/storage" --runroot "$IMAGES_DIR/run" --storage-driver overlay)
DEBIAN_MIRROR=${RLPLACE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
BASE_PACKAGES=python3,python3-venv,ca-certificates,wget,procps,bash
T0=$SECONDS

for cmd in buildah debootstrap; do
  command -v "$cmd" >/dev/null || die "$cmd is required (apt-get install $cmd)"
done
((EUID == 0)) || die "building images needs root (debootstrap, buildah's chroot isolation)"
mkdir -p "$IMAGES_DIR"
exec 7>"$IMAGES_DIR/.lock"
if ! flock -n 7; then
  log "another images build is running; waiting for it ..."
  flock 7
fi

# The Ray version is the pin of pyproject.toml's `ray` extra; the image tag must say the same.
RAY_VERSION=$(sed -n 's/^ray = \["ray==\([0-9.]*\)"\]$/\1/p' "$E2E_REPO/pyproject.toml")
[[ -n $RAY_VERSION ]] || die "pyproject.toml: no 'ray = [\"ray==X.Y.Z\"]' extra found"
[[ ${RAY_IMAGE##*:} == "$RAY_VERSION" ]] ||
  die "e2e/images.env: RAY_IMAGE=$RAY_IMAGE but pyproject.toml pins ray==$RAY_VERSION"

image_id() { "${BUILDAH[@]}" images --noheading --no-trunc --format '{{.ID}}' "$1" 2>/dev/null | awk 'NR == 1'; }

# Save an image as a docker-archive tarball named after it, unless the saved one is of the same image ID.
save() { # save <image> [directory, default $IMAGES_DIR]
  local image=$1 dir=${2:-$IMAGES_DIR} name id tar
  name=${image#localhost/rlplace/}
  name=${name%%:*}
  mkdir -p "$dir"
  tar="$dir/$name.tar"
  id=$(image_id "$image")
  [[ -n $id ]] || die "image $image was not built"
  if [[ -f $tar && $(cat "$tar.id" 2>/dev/null) == "$id" ]]; then
    log "$image unchanged (${id:7:12})"
    return
  fi
  rm -f "$tar" "$tar.id"
  "${BUILDAH[@]}" push --quiet "$image" "docker-archive:$tar.new:$image" >/dev/null
  mv "$tar.new" "$tar"
  echo "$id" >"$tar.id"
  log "$image saved: $tar ($(du -h "$tar" | cut -f1), ${id:7:12}, $((SECONDS - T0)) s)"
}

# ---------------------------------------------------------------------------------------------------------
# The base: debootstrap is the slow part (1-3 minutes), so the image is tagged with a hash of its inputs
# (mirror, suite, packages, this function) and rebuilt only when one of them changes.
build_base() {
  local key
  key=$( (
    echo "$DEBIAN_MIRROR bookworm $BASE_PACKAGES"
    declare -f build_base
  ) | sha256sum | cut -c1-12)
  local keyed="$BASE_IMAGE-$key"
  if [[ -n $(image_id "$keyed") ]]; then
    "${BUILDAH[@]}" tag "$keyed" "$BASE_IMAGE"
    log "base $keyed cached"
    return
  fi
  local rootfs="$IMAGES_DIR/base-rootfs-$key"
  rm -rf "$rootfs"
  log "debootstrap bookworm into $rootfs (packages: $BASE_PACKAGES; log: $IMAGES_DIR/debootstrap.log)"
  debootstrap --variant=minbase --include="$BASE_PACKAGES" bookworm "$rootfs" "$DEBIAN_MIRROR" \
    >"$IMAGES_DIR/debootstrap.log" 2>&1 || {
    tail -20 "$IMAGES_DIR/debootstrap.log" >&2
    die "debootstrap failed"
  }
  # Python the way the public python image has it: python/pip/console scripts in /usr/local/bin and
  # `pip install --prefix=/install` landing in /usr/local/lib/python3.11/site-packages when copied to
  # /usr/local (what operator/Dockerfile does). A venv at /usr/local gives exactly that layout on
  # Debian's python3, whose own pip would install to dist-packages.
  chroot "$rootfs" /usr/bin/python3 -m venv /usr/local
  chroot "$rootfs" /usr/local/bin/python3 -c 'import sys, ssl; assert sys.prefix == "/usr/local", sys.prefix'
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/*.log
  local ctr mnt
  ctr=$("${BUILDAH[@]}" from scratch)
  mnt=$("${BUILDAH[@]}" mount "$ctr")
  cp -a "$rootfs/." "$mnt/"
  "${BUILDAH[@]}" umount "$ctr" >/dev/null
  "${BUILDAH[@]}" config --env PATH=/usr/local/bin:/usr/local/sbin:/usr/bin:/usr/sbin:/bin:/sbin \
    --env LANG=C.UTF-8 --cmd python3 --label "rlplace.io/base-inputs=$key" "$ctr"
  "${BUILDAH[@]}" commit --quiet --rm "$ctr" "$keyed" >/dev/null
  "${BUILDAH[@]}" tag "$keyed" "$BASE_IMAGE"
  rm -rf "$rootfs"
  log "base $keyed built ($((SECONDS - T0)) s)"
}

# An image of one static binary, FROM scratch.
build_binary_image() { # build_binary_image <image> <binary> [its path in the image, default /<name>]
  local image=$1 bin=$2 path=${3:-/$(basename "$2")} ctr sum
  [[ -x $bin ]] || die "$bin missing; run 'make tools' first"
  # Same binary, same image: a new commit would get a new ID (timestamps) and be imported again for nothing.
  sum=$(sha256sum "$bin" | cut -c1-64)
  if [[ $("${BUILDAH[@]}" inspect --type image --format '{{index .ImageAnnotations "rlplace.io/binary"}}' "$image" 2>/dev/null) == "$sum" ]]; then
    return
  fi
  ctr=$("${BUILDAH[@]}" from scratch)
  "${BUILDAH[@]}" copy --quiet "$ctr" "$bin" "$path" >/dev/null
  "${BUILDAH[@]}" config --entrypoint "[\"$path\"]" --cmd '' --annotation "rlplace.io/binary=$sum" "$ctr"
  "${BUILDAH[@]}" commit --quiet --rm "$ctr" "$image" >/dev/null
}

# Machines behind a TLS-inspecting proxy trust its CA in the host's bundle and pip.conf; the build steps see
# both (read-only, at build time only; nothing of it lands in an image).
BUILD_MOUNTS=()
for f in /etc/ssl/certs/ca-certificates.crt /etc/pip.conf; do
  [[ -f $f ]] && BUILD_MOUNTS+=(--volume "$f:$f:ro")
done

bud() { # bud <image> <containerfile> <context> [build args...]
  local image=$1 file=$2 ctx=$3
  shift 3
  local logf="$IMAGES_DIR/${image//[\/:]/_}.log"
  log "building $image from ${file#"$E2E_REPO/"} (log: $logf)"
  # --layers: every step is cached in buildah's storage; a rebuild re-runs only the steps after a change.
  if ! "${BUILDAH[@]}" bud --isolation chroot --layers --pull-never "${BUILD_MOUNTS[@]}" -f "$file" -t "$image" "$@" "$ctx" \
    >"$logf" 2>&1; then
    tail -25 "$logf" >&2
    die "building $image failed"
  fi
  log "$image built ($((SECONDS - T0)) s)"
}

build_ray_rlplace() {
  local ctx
  ctx=$(mktemp -d)
  # shellcheck disable=SC2064 # expand now: the directory is this call's
  trap "rm -rf '$ctx'" RETURN
  cp "$E2E_REPO/pyproject.toml" "$ctx/"
  local py=${PYTHON:-$E2E_REPO/.venv/bin/python}
  [[ -x $py ]] || py=python3
  # The wheel is built from a copy: building in the checkout would leave build/ and *.egg-info behind.
  mkdir -p "$ctx/src/operator"
  cp -r "$E2E_REPO"/{pyproject.toml,README.md,placement_core} "$ctx/src/"
  cp -r "$E2E_REPO/operator/rlplace_operator" "$ctx/src/operator/"
  find "$ctx/src" -name __pycache__ -prune -exec rm -rf {} +
  "$py" -m pip wheel --quiet --no-deps -w "$ctx/dist" "$ctx/src" >"$IMAGES_DIR/wheel.log" 2>&1 || {
    tail -20 "$IMAGES_DIR/wheel.log" >&2
    die "building the rlplace wheel failed"
  }
  bud "$RAY_RLPLACE_IMAGE" "$E2E_REPO/e2e/images/ray-rlplace.Containerfile" "$ctx" --build-arg "RAY_IMAGE=$RAY_IMAGE"
}

want=("$@")
((${#want[@]})) || want=(base pause coredns ray ray-rlplace ray-rlinf-test operator)
for w in "${want[@]}"; do
  case "$w" in
    base) build_base && save "$BASE_IMAGE" ;;
    pause) build_binary_image "$PAUSE_IMAGE" "$(tool_bin pause)" && save "$PAUSE_IMAGE" ;;
    coredns) build_binary_image "$COREDNS_IMAGE" "$(tool_bin coredns)" && save "$COREDNS_IMAGE" ;;
    ray)
      bud "$RAY_IMAGE" "$E2E_REPO/e2e/images/ray.Containerfile" "$E2E_REPO/e2e/images" \
        --build-arg "BASE_IMAGE=$BASE_IMAGE" --build-arg "RAY_VERSION=$RAY_VERSION"
      save "$RAY_IMAGE"
      ;;
    ray-rlplace) build_ray_rlplace && save "$RAY_RLPLACE_IMAGE" ;;
    ray-rlinf-test)
      [[ ${RAY_RLINF_TEST_IMAGE##*:} == "$RLINF_VERSION" ]] ||
        die "e2e/images.env: RAY_RLINF_TEST_IMAGE=$RAY_RLINF_TEST_IMAGE but RLINF_VERSION=$RLINF_VERSION"
      bud "$RAY_RLINF_TEST_IMAGE" "$E2E_REPO/e2e/images/ray-rlinf-test.Containerfile" "$E2E_REPO/e2e/images/rlinf-test" \
        --build-arg "RAY_IMAGE=$RAY_IMAGE" --build-arg "RLINF_VERSION=$RLINF_VERSION"
      save "$RAY_RLINF_TEST_IMAGE"
      ;;
    operator)
      bud "$OPERATOR_IMAGE" "$E2E_REPO/operator/Dockerfile" "$E2E_REPO" --build-arg "BASE_IMAGE=$BASE_IMAGE"
      save "$OPERATOR_IMAGE"
      ;;
    # The operator runs /bin/prometheus-config-reloader by that path (its Command); prometheus by the entrypoint.
    prometheus)
      build_binary_image "$PROMETHEUS_IMAGE" "$(tool_bin prometheus)" /bin/prometheus
      save "$PROMETHEUS_IMAGE" "$IMAGES_DIR/monitoring"
      ;;
    prometheus-config-reloader)
      build_binary_image "$PROMETHEUS_CONFIG_RELOADER_IMAGE" "$(tool_bin prometheus-config-reloader)" /bin/prometheus-config-reloader
      save "$PROMETHEUS_CONFIG_RELOADER_IMAGE" "$IMAGES_DIR/monitoring"
      ;;
    *) die "unknown image '$w' (known: base pause coredns ray ray-rlplace ray-rlinf-test operator prometheus prometheus-config-reloader)" ;;
  esac
done
log "images ready in $IMAGES_DIR ($((SECONDS - T0)) s)"

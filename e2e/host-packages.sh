#!/usr/bin/env bash
# Install the Debian packages the local cluster needs on the host (HOST_PACKAGES in e2e/versions.env) when
# some are missing. Nothing is done when all are there; without root or apt-get, the missing ones are named
# with the command that installs them.
set -euo pipefail
# shellcheck disable=SC2034 # used by log() in lib.sh
E2E_LOG_PREFIX=host
# shellcheck source=cluster/lib.sh
source "$(dirname "$0")/cluster/lib.sh"

command -v dpkg-query >/dev/null || exit 0 # not Debian: the scripts that need a tool name it when it is missing
missing=()
for pkg in $HOST_PACKAGES; do
  dpkg-query -W -f '${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
((${#missing[@]})) || exit 0
if ((EUID != 0)) || ! command -v apt-get >/dev/null; then
  die "missing host packages: ${missing[*]} (as root: apt-get install ${missing[*]})"
fi
log "installing host packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq "${missing[@]}" >/dev/null

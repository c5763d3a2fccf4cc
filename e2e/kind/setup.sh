#!/usr/bin/env bash
# Make a kind cluster look like the local e2e cluster: the i-th kind worker gets the labels and extended
# resources (nvidia.com/gpu, rlplace.io/franka) of the i-th node in e2e/nodes.yaml, and the workers after
# those the labels and resources of the local cluster's real nodes (E2E_REAL_NODE_SPECS in
# e2e/cluster/nodes.sh; a DRA node gets only its labels, see below). The images `make images` built
# (e2e/images.env) are loaded into every node with `kind load image-archive`.
# Extended resources are advertised by patching each node's status capacity/allocatable through the API
# ("Advertise Extended Resources for a Node" in the Kubernetes docs); the kubelet keeps them, and pods that
# request them are scheduled and run (pause/busybox images; nothing uses a real GPU).
#
# Usage: e2e/kind/setup.sh [cluster-name]    (default: rlplace; creates the cluster if it does not exist)
# Needs: docker, kind, kubectl, python3 on PATH.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
NAME=${1:-rlplace}
CTX=kind-$NAME

for cmd in docker kind kubectl python3; do
  command -v "$cmd" >/dev/null || { echo "setup.sh: $cmd is required" >&2; exit 1; }
done

if ! kind get clusters 2>/dev/null | grep -qx "$NAME"; then
  kind create cluster --name "$NAME" --config "$HERE/kind-config.yaml" --wait 120s
fi
kubectl --context "$CTX" wait --for condition=Ready node --all --timeout 120s >/dev/null

# nodes.yaml -> one line per node: "<labels k=v,...> <extended resources k=v,...>". kubectl turns the YAML
# into a stream of JSON objects, so no YAML library is needed.
plan=$(kubectl --context "$CTX" create --dry-run=client -o json -f "$REPO/e2e/nodes.yaml" | python3 -c '
import json, sys
text, decoder, i, nodes = sys.stdin.read(), json.JSONDecoder(), 0, []
while True:
    while i < len(text) and text[i].isspace():
        i += 1
    if i == len(text):
        break
    obj, i = decoder.raw_decode(text, i)
    nodes.extend(obj.get("items", [obj]))
for node in nodes:
    labels = {k: v for k, v in node["metadata"]["labels"].items()
              if k.startswith("rlplace.io/")}
    extra = {k: v for k, v in node["status"]["capacity"].items()
             if "/" in k and not k.startswith(("kubernetes.io/", "hugepages-"))}
    print(",".join(f"{k}={v}" for k, v in labels.items()) or "-",
          ",".join(f"{k}={v}" for k, v in extra.items()) or "-")
')

mapfile -t workers < <(kubectl --context "$CTX" get nodes -l '!node-role.kubernetes.io/control-plane' \
  -o jsonpath='{range .items[*]}{.metadata.name}{"\n"}{end}' | sort -V)
i=0
while read -r labels extra; do
  node=${workers[i]:-}
  [[ -n $node ]] || { echo "setup.sh: fewer kind workers than nodes in e2e/nodes.yaml" >&2; exit 1; }
  if [[ $labels != - ]]; then
    # shellcheck disable=SC2046 # one argument per k=v
    kubectl --context "$CTX" label node "$node" --overwrite $(tr , ' ' <<<"$labels") >/dev/null
  fi
  if [[ $extra != - ]]; then
    patch=$(python3 -c '
import json, sys
ops = []
for kv in sys.argv[1].split(","):
    k, v = kv.split("=")
    for field in ("capacity", "allocatable"):
        ops.append({"op": "add", "path": f"/status/{field}/" + k.replace("~", "~0").replace("/", "~1"), "value": v})
print(json.dumps(ops))' "$extra")
    kubectl --context "$CTX" patch node "$node" --subresource status --type json -p "$patch" >/dev/null
  fi
  echo "$node: labels $labels; extended resources $extra"
  i=$((i + 1))
done <<<"$plan"

# The real nodes' labels and fake devices, on the next workers: the same shape as kind's own nodes, so the
# real-node tests (tests/e2e/test_real_nodes.py) run here too.
# shellcheck source=../cluster/lib.sh
source "$REPO/e2e/cluster/lib.sh"
for spec in "${E2E_REAL_NODE_SPECS[@]}"; do
  node=${workers[i]:-}
  [[ -n $node ]] || { echo "setup.sh: fewer kind workers than nodes in e2e/nodes.yaml + real nodes" >&2; exit 1; }
  IFS='|' read -r real_name labels extra dra <<<"$spec"
  # shellcheck disable=SC2046 # one argument per k=v
  kubectl --context "$CTX" label node "$node" --overwrite rlplace.io/real-node=true $(tr , ' ' <<<"$labels") >/dev/null
  if [[ -n $dra ]]; then
    # A DRA node ($dra devices on the local cluster): labelled like there, but without devices here. The local
    # cluster runs the fake-GPU driver (dra-example-kubeletplugin, built by e2e/cluster/tools.sh) as a host
    # process next to each DRA node's kubelet; a kind node would need it as a DaemonSet with a container image
    # of it, which this repository does not build. So tests that need DRA devices skip or fail on kind.
    echo "$node: plays $real_name (labels $labels; DRA devices: none on kind, no driver installed)"
    i=$((i + 1))
    continue
  fi
  ops=()
  for kv in ${extra//,/ }; do
    key=${kv%%=*}
    for field in capacity allocatable; do
      ops+=("{\"op\":\"add\",\"path\":\"/status/$field/${key//\//~1}\",\"value\":\"${kv#*=}\"}")
    done
  done
  kubectl --context "$CTX" patch node "$node" --subresource status --type json -p "[$(IFS=,; echo "${ops[*]}")]" >/dev/null
  echo "$node: plays $real_name (labels $labels; extended resources $extra)"
  i=$((i + 1))
done

# The images of the real nodes (`make images`), into every kind node.
# shellcheck source=../images.env
source "$REPO/e2e/images.env"
for image in BASE_IMAGE RAY_IMAGE RAY_RLPLACE_IMAGE OPERATOR_IMAGE; do
  name=${!image#localhost/rlplace/}
  tar="$E2E_CACHE/images/${name%%:*}.tar"
  if [[ -f $tar ]]; then
    kind load image-archive --name "$NAME" "$tar"
  else
    echo "setup.sh: $tar missing (run 'make images'); the real-node tests will skip or fail without ${!image}" >&2
  fi
done

echo "kind cluster $NAME ready. Run the e2e suite against it with:"
echo "  export KUBECONFIG=\$(mktemp) && kind get kubeconfig --name $NAME > \$KUBECONFIG && make test"
echo "KubeRay is not installed by this script; install its operator (e.g. helm install kuberay-operator"
echo "kuberay/kuberay-operator) before running the tests that need RayClusters."

"""What the operator and the Ray side agree on: the one place for the names both must spell the same way.

The operator (rlplace_operator) writes these: a ConfigMap key holding the plan, the directory it is mounted
at, the Ray node label and custom resources every Ray worker declares. The launcher reads them. Both import
this module, so a rename cannot leave one side behind.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from placement_core.errors import PlacementError
from placement_core.plan import Plan

# -- the plan in the job's ConfigMap and in the pods ---------------------------------------------------------

#: ConfigMap key of the plan as JSON text (`Plan.to_json`).
PLAN_KEY = "plan.json"
#: ConfigMap key (binaryData) of the plan gzipped (`Plan.to_gzip`), used when the text would be too large.
PLAN_GZIP_KEY = "plan.json.gz"
#: Plans larger than this are stored gzipped, keeping the ConfigMap under etcd's 1 MiB object limit for tens
#: of thousands of processes (the JSON is repetitive and compresses about 20x).
MAX_TEXT_PLAN_BYTES = 512 * 1024
#: Where the operator mounts the ConfigMap in every Ray pod; exactly one of the two keys is there.
PLAN_MOUNT_DIR = "/etc/rlplace"
#: Environment variable that may hold the plan itself (JSON), for drivers started without the mounted file.
PLAN_ENV = "RLPLACE_PLAN"
#: Environment variable naming the directory that holds the plan file, when it is not PLAN_MOUNT_DIR.
PLAN_DIR_ENV = "RLPLACE_PLAN_DIR"
#: Variables the operator sets in every Ray pod: the job's name, and on workers the cluster node rank.
JOB_ENV = "RLPLACE_JOB"
NODE_RANK_ENV = "RLPLACE_NODE_RANK"
#: The Kubernetes node a Ray pod runs on (downward API spec.nodeName), for checking a process's placement.
KUBE_NODE_ENV = "RLPLACE_KUBE_NODE"
#: The driver prints its binding report (observe.verify.BindingReport JSON) on one log line after this
#: prefix; the operator reads it from the driver's log (the RayJob submitter's) into the RLJob's status.
BINDING_REPORT_PREFIX = "rlplace-binding-report: "
#: After it started a lost rank of a Replace component again (docs/replace.md), or a rank a change of the
#: component's replicas added (docs/elastic.md), the driver prints this prefix and `{"component": NAME, "rank":
#: RANK}` on one line, then a new binding report covering every live rank: the operator takes the first report
#: after those ranks' lines as the one that verifies them.
REPLACED_PREFIX = "rlplace-replaced: "
#: When it applies a change of a component's replicas (docs/elastic.md), the driver prints this prefix and
#: `{"component": NAME, "previous": N, "replicas": M}` on one line: ranks below min(N, M) ran on through it; a
#: REPLACED_PREFIX line of the component printed before it may be of a rank the change stopped, so the operator
#: counts only the ranks started after it.
RESIZED_PREFIX = "rlplace-resized: "

# -- restarts and resume (the driver's side; see docs/driver.md) ---------------------------------------------

#: The attempt the driver runs in: "1" for the first run of a job, one more for each restart. Unset means 1.
#: (The operator does not set it yet; the restart path will.)
ATTEMPT_ENV = "RLPLACE_ATTEMPT"
#: A directory that outlives the attempt (the job's checkpoint volume, mounted at the same path on the head
#: and every worker), where the driver keeps what it needs to resume (launcher.checkpoint). Unset: no resume.
CHECKPOINT_DIR_ENV = "RLPLACE_CHECKPOINT_DIR"

# -- progress: per-component step times (the driver's side; see docs/driver.md) ------------------------------

#: The driver prints each iteration's report (observe.progress.IterationReport JSON) on one log line after
#: this prefix.
PROGRESS_REPORT_PREFIX = "rlplace-progress: "
#: URL the driver POSTs its iteration reports to (JSON, throttled); unset: reports go to the log only. The
#: operator sets it in the head pod when it serves its progress endpoint (docs/progress.md).
PROGRESS_URL_ENV = "RLPLACE_PROGRESS_URL"
#: File holding the bearer token sent with each POST (a projected ServiceAccount token, re-read before each
#: POST because the kubelet rotates it).
PROGRESS_TOKEN_FILE_ENV = "RLPLACE_PROGRESS_TOKEN_FILE"


# -- framework jobs (spec.framework other than rlplace; see docs/frameworks.md) --------------------------------

#: The probe (placement_core/observe/probe.py) as the pods import it: the operator ships the file in the
#: job's ConfigMap under PROBE_FILE and mounts it at PROBE_MOUNT_DIR, which it puts on PYTHONPATH.
PROBE_MODULE = "rlplace_probe"
PROBE_FILE = f"{PROBE_MODULE}.py"
PROBE_MOUNT_DIR = "/opt/rlplace-probe"
#: What each framework process prints about itself (a JSON record after the prefix, one line).
PROBE_PREFIX = "rlplace-probe: "
#: What the driver-side probe prints of Ray's State API: the job's actors with their Ray node (one line).
ACTORS_PREFIX = "rlplace-actors: "
#: RLinf's node rank variable: it orders RLinf's nodes by it when every Ray node sets it.
RLINF_NODE_RANK_ENV = "RLINF_NODE_RANK"
#: RLinf imports the module this names in every Worker before its __init__ and calls its register().
RLINF_EXT_MODULE_ENV = "RLINF_EXT_MODULE"
#: Ray imports this function in a driver's ray.init (set on the head: the framework's driver runs there).
RAY_RUNTIME_ENV_HOOK_ENV = "RAY_RUNTIME_ENV_HOOK"
#: The framework, on the head, for the probe's driver hook: `verl` adds the probe's worker setup hook.
FRAMEWORK_ENV = "RLPLACE_FRAMEWORK"
#: Where veRL's `file` logger writes its step metrics (JSONL); the operator sets it in a veRL job's pods and
#: the probe tails it (docs/frameworks.md).
VERL_METRICS_ENV = "VERL_FILE_LOGGER_PATH"
VERL_METRICS_PATH = "/tmp/rlplace/verl-metrics.jsonl"

# -- the variables of a planned process ------------------------------------------------------------------------

#: Variables a placement sets in each process (placement_core.placement.placement_env), and Ray's flag and the
#: rendezvous address the operator sets beside them: a user's pod settings cannot name them (the RLJob CRD
#: refuses them, as every RLPLACE_* variable).
PLAN_ENV_NAMES = (
    "RANK",
    "WORLD_SIZE",
    "NODE_RANK",
    "CLUSTER_NODE_RANK",
    "LOCAL_ACCELERATOR_RANK",
    "NODE_LOCAL_RANK",
    "NODE_LOCAL_WORLD_SIZE",
    "VISIBLE_DEVICES",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES",
    "ISOLATE_ACCELERATOR",
    "LOCAL_HARDWARE_RANKS",
    "NODE_GROUP_LABEL",
    "MASTER_ADDR",
)
#: What the probe records of a framework's process, where set: the plan's variables, the framework's names for
#: the process, and what the operator set in the pod. The probe is a file of its own (the framework's image need
#: not have rlplace), so the operator hands it this list in PROBE_VARIABLES_ENV.
PROBE_VARIABLES = (
    "GROUP_NAME",
    "WORKER_NAME",
    *PLAN_ENV_NAMES,
    NODE_RANK_ENV,
    KUBE_NODE_ENV,
    RLINF_NODE_RANK_ENV,
    ATTEMPT_ENV,
    CHECKPOINT_DIR_ENV,
    "WG_PREFIX",
    "RAY_LOCAL_WORLD_SIZE",
)
PROBE_VARIABLES_ENV = "RLPLACE_PROBE_VARIABLES"


def plan_payload(plan: Plan) -> tuple[str, str | bytes]:
    """The ConfigMap key and content for a plan: JSON text, or gzip bytes when the text is too large."""
    text = plan.to_json()
    if len(text.encode()) <= MAX_TEXT_PLAN_BYTES:
        return PLAN_KEY, text
    return PLAN_GZIP_KEY, plan.to_gzip()


def read_plan_dir(directory: str | os.PathLike[str]) -> Plan:
    """The plan mounted in `directory` (either key of the ConfigMap)."""
    folder = Path(directory)
    for key in (PLAN_KEY, PLAN_GZIP_KEY):
        try:
            data = (folder / key).read_bytes()
        except FileNotFoundError:
            continue
        except OSError as err:
            raise PlacementError(f"cannot read the plan '{folder / key}': {err.strerror}") from None
        return Plan.from_json(data)
    raise PlacementError(
        f"no plan in '{folder}' (expected {PLAN_KEY} or {PLAN_GZIP_KEY}; set ${PLAN_ENV} or ${PLAN_DIR_ENV})"
    )


# -- pods given exactly their planned GPUs (Dynamic Resource Allocation) -------------------------------------

#: The job ConfigMap's key with the GPUs of each node whose worker pod is given exactly its planned GPUs (a DRA
#: claim) instead of all of its node's: `<node rank> <gpu>,<gpu>,...` per line, the plan's GPU numbers. Such a
#: container numbers the GPUs it was given from 0 in PCI order, so a process's CUDA_VISIBLE_DEVICES is the
#: position of each of its GPUs in that set (`container_ordinals`); nodes not listed keep the plan's numbers.
POD_GPUS_KEY = "pod-gpus"
#: On such a worker pod: the host GPU numbers its claim pins (PCI order on the node), in the order of the pod's
#: planned GPUs, for the binding check from inside.
HOST_GPUS_ENV = "RLPLACE_HOST_GPUS"
#: CUDA numbers visible GPUs fastest first unless told PCI order; the ordinals above assume PCI order.
CUDA_DEVICE_ORDER = ("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
#: What the example DRA driver (and any CDI spec written the same way) sets in a container per GPU it was given:
#: GPU_DEVICE_<host index>=gpu-<host index>, and GPU_DEVICE_<host index>_RESOURCE_CLAIM=<claim uid>.
DRA_DEVICE_ENV_PREFIX = "GPU_DEVICE_"
DRA_CLAIM_ENV_SUFFIX = "_RESOURCE_CLAIM"


def pod_gpus_text(pod_gpus: Mapping[int, Sequence[int]]) -> str:
    """The POD_GPUS_KEY file: one `<node rank> <gpus>` line per node, in rank order."""
    return "".join(f"{rank} {','.join(map(str, sorted(gpus)))}\n" for rank, gpus in sorted(pod_gpus.items()))


def parse_pod_gpus(text: str) -> dict[int, tuple[int, ...]]:
    """Node rank -> the plan's GPUs its pod was given, from a POD_GPUS_KEY file (malformed lines are skipped)."""
    pod_gpus: dict[int, tuple[int, ...]] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0].isdigit() and all(g.isdigit() for g in parts[1].split(",")):
            pod_gpus[int(parts[0])] = tuple(sorted(int(g) for g in parts[1].split(",")))
    return pod_gpus


def read_pod_gpus(directory: str | os.PathLike[str]) -> dict[int, tuple[int, ...]]:
    """The POD_GPUS_KEY file mounted in `directory` (none: every pod has all of its node's GPUs)."""
    try:
        return parse_pod_gpus((Path(directory) / POD_GPUS_KEY).read_text())
    except FileNotFoundError:
        return {}
    except OSError as err:
        raise PlacementError(f"cannot read '{Path(directory) / POD_GPUS_KEY}': {err.strerror}") from None


def container_ordinals(visible: Sequence[str], pod_gpus: Sequence[int]) -> str:
    """CUDA_VISIBLE_DEVICES inside a pod given exactly `pod_gpus` (the plan's numbers): each planned GPU's
    position among them (`["5", "7"]` in a pod of 4..7 -> `"1,3"`). A GPU the pod was not given is a bug in
    whoever built the pod: it raises."""
    order = {gpu: position for position, gpu in enumerate(sorted(pod_gpus))}
    try:
        return ",".join(str(order[int(gpu)]) for gpu in visible)
    except (KeyError, ValueError):
        raise PlacementError(f"GPUs {','.join(visible)} are not all among the pod's GPUs {sorted(pod_gpus)}") from None


def dra_devices_seen(environ: Mapping[str, str]) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """The host GPU numbers a DRA driver's CDI spec announced in this container (GPU_DEVICE_<i>), ascending, and
    the claim UIDs it named for them."""
    gpus, claims = set(), set()
    for key, value in environ.items():
        if not key.startswith(DRA_DEVICE_ENV_PREFIX):
            continue
        rest = key[len(DRA_DEVICE_ENV_PREFIX) :]
        if rest.isdigit():
            gpus.add(int(rest))
        elif rest.endswith(DRA_CLAIM_ENV_SUFFIX) and rest[: -len(DRA_CLAIM_ENV_SUFFIX)].isdigit():
            claims.add(value)
    return tuple(sorted(gpus)), tuple(sorted(claims))


# -- Ray node label and custom resources ------------------------------------------------------------------

#: Ray node label holding the node's cluster node rank.
NODE_LABEL = "rlplace.io/node-rank"
#: How much of its node resource a Ray node declares; each actor takes 1, so this bounds actors per node.
NODE_RESOURCE_CAPACITY = 1000

_NODE_RESOURCE = re.compile(r"^rlplace_node_(\d+)$")
_GPU_RESOURCE = re.compile(r"^rlplace_gpu_(\d+)_(\d+)$")


def node_labels(rank: int) -> dict[str, str]:
    """The labels a Ray node of cluster node rank `rank` declares."""
    return {NODE_LABEL: str(rank)}


def node_resource(rank: int | str) -> str:
    """The custom resource that pins an actor to the Ray node of cluster node rank `rank` (or of a shell
    placeholder for it: worker_start_command)."""
    return f"rlplace_node_{rank}"


def gpu_resource(rank: int | str, gpu: int) -> str:
    """The custom resource for local GPU `gpu` of node rank `rank`: amount 1, shared out by the plan."""
    return f"rlplace_gpu_{rank}_{gpu}"


def node_resources(rank: int, num_gpus: int) -> dict[str, float]:
    """Every custom resource a Ray node of rank `rank` with `num_gpus` GPUs declares."""
    resources: dict[str, float] = {node_resource(rank): NODE_RESOURCE_CAPACITY}
    resources.update({gpu_resource(rank, gpu): 1 for gpu in range(num_gpus)})
    return resources


#: The job ConfigMap's key with every worker node's rank (`<node name> <rank>` per line), which each worker
#: pod mounts at NODE_RANKS_MOUNT_DIR: a worker group holds the pods of many nodes, so a pod finds its rank
#: from the node it was scheduled to (RLPLACE_KUBE_NODE) before Ray starts.
NODE_RANKS_KEY = "node-ranks"
#: Where each worker pod mounts the whole job ConfigMap: the node ranks, and the plan as it was when the pod
#: started (a replaced rank's plan entry is read there: docs/replace.md).
NODE_RANKS_MOUNT_DIR = "/opt/rlplace-nodes"


def node_ranks_text(ranks: Mapping[str, int]) -> str:
    """The NODE_RANKS_KEY file: one `<node name> <rank>` line per node, in rank order."""
    return "".join(f"{name} {rank}\n" for name, rank in sorted(ranks.items(), key=lambda item: item[1]))


def parse_node_ranks(text: str) -> dict[str, int]:
    """Node name -> rank from a NODE_RANKS_KEY file (malformed lines are skipped)."""
    ranks: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].isdigit():
            ranks[parts[0]] = int(parts[1])
    return ranks


def worker_start_command(
    num_gpus: int,
    exports: Sequence[str] = (),
    ranks_file: str = f"{NODE_RANKS_MOUNT_DIR}/{NODE_RANKS_KEY}",
    gpus: Sequence[int] | None = None,
) -> str:
    """The worker container's shell command (KubeRay runs it instead of its own when the pod template says
    `ray.io/overwrite-container-cmd`, and passes its generated `ray start` in $KUBERAY_GEN_RAY_START_CMD).

    It reads the pod's node rank from the mounted NODE_RANKS_KEY file by the pod's Kubernetes node, exports it
    as NODE_RANK_ENV (and as each of `exports`, e.g. RLinf's RLINF_NODE_RANK) so the raylet and every process
    it starts inherit it, and starts Ray with the node's label and custom resources (`node_labels`,
    `node_resources`) for that rank. A pod on a node the file does not list stops with a one-line reason.
    A pod given exactly some GPUs (`gpus`, the plan's numbers: a DRA claim) declares the resources of those.
    """
    names = " ".join(f"{name}=$rank" for name in (NODE_RANK_ENV, *exports))
    # The resources JSON as a printf format: `%s` where the rank goes, one argument per place.
    entries = [
        f'"{node_resource("%s")}":{NODE_RESOURCE_CAPACITY}',
        *(f'"{gpu_resource("%s", g)}":1' for g in (range(num_gpus) if gpus is None else gpus)),
    ]
    ranks = ' "$rank"' * len(entries)
    start = f"$KUBERAY_GEN_RAY_START_CMD --resources='$resources' --labels={NODE_LABEL}=$rank"
    return "\n".join(
        [
            "ulimit -n 65536 2>/dev/null  # KubeRay's own command raises the limit too, where the pod may",
            "rank=",
            "while read -r node node_rank; do",
            f'  if [ "$node" = "${KUBE_NODE_ENV}" ]; then rank=$node_rank; break; fi',
            f"done < {ranks_file}",
            'if [ -z "$rank" ]; then',
            f"  echo \"rlplace: node '${KUBE_NODE_ENV}' is not one of this job's nodes ({ranks_file})\" >&2",
            "  exit 1",
            "fi",
            f"export {names}",
            f"resources=$(printf '{{{','.join(entries)}}}'{ranks})",
            f'exec /bin/bash -c "{start}"',
        ]
    )


def parse_node_resource(name: str) -> int | None:
    """The node rank in a `node_resource` name, or None for any other resource."""
    match = _NODE_RESOURCE.match(name)
    return int(match.group(1)) if match else None


def parse_gpu_resource(name: str) -> tuple[int, int] | None:
    """(node rank, local GPU) in a `gpu_resource` name, or None for any other resource."""
    match = _GPU_RESOURCE.match(name)
    return (int(match.group(1)), int(match.group(2))) if match else None


def plan_from_configmap(configmap: Mapping[str, object]) -> Plan:
    """The plan in a ConfigMap object as the API returns it (`kubectl get configmap NAME -o json`): `data`
    holds plan.json as text, `binaryData` plan.json.gz base64-encoded."""
    data = configmap.get("data") or {}
    binary = configmap.get("binaryData") or {}
    if isinstance(data, Mapping) and isinstance(data.get(PLAN_KEY), str):
        return Plan.from_json(data[PLAN_KEY])
    if isinstance(binary, Mapping) and isinstance(binary.get(PLAN_GZIP_KEY), str):
        try:
            packed = base64.b64decode(binary[PLAN_GZIP_KEY], validate=True)
        except binascii.Error as err:
            raise PlacementError(f"binaryData.{PLAN_GZIP_KEY} is not base64: {err}") from None
        return Plan.from_json(packed)
    raise PlacementError(f"the ConfigMap has no data.{PLAN_KEY} and no binaryData.{PLAN_GZIP_KEY}")

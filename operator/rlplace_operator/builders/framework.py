"""What a framework job's pods get beyond an rlplace-driver job's (spec.framework; docs/frameworks.md).

RLinf places every process itself: one Ray actor per rank, pinned to a Ray node by RLinf's node rank, with the
CUDA_VISIBLE_DEVICES RLinf computes from `cluster.component_placement`. The plan and RLinf agree once RLinf's
node ranks are rlplace's, so:

- every worker pod sets RLINF_NODE_RANK to its plan node rank before Ray starts (the worker start command,
  placement_core.contract.worker_start_command), and the head (a Ray node too, without GPUs) sets the rank
  after the last worker; RLinf then needs `cluster.num_nodes` = workers + 1, appended to the
  entrypoint as a Hydra override;
- no pod sets RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES: RLinf sets it per process with the variable;
- the probe (placement_core/observe/probe.py) is shipped in the job's ConfigMap and mounted in every pod on
  PYTHONPATH: RLinf imports it in every Worker (RLINF_EXT_MODULE), Ray calls its hook in the driver
  (RAY_RUNTIME_ENV_HOOK), and Ray forwards every line to the driver's log whole (RAY_DEDUP_LOGS=0);
- each pod declares more Ray CPUs than the plan's processes: every RLinf actor asks Ray for one CPU to be
  scheduled, and RLinf adds a node probe per node and a few managers of its own.

veRL leaves GPU ids to Ray (placement groups of one-GPU bundles per node, `num_gpus` per actor), so rlplace
shapes the Ray cluster to the plan and observes (observe/pools.py):

- no pod sets RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES (veRL reads it and then picks its GPU itself);
- a worker pod whose node the plan uses only in part shows Ray only the plan's GPUs: Ray's num-gpus is their
  count and the pod's CUDA_VISIBLE_DEVICES lists them (Ray's GPU ids then index that list, and each actor's
  CUDA_VISIBLE_DEVICES names the node's own GPU ids);
- the head sets RLPLACE_FRAMEWORK=verl, so the probe's driver hook adds the probe's worker setup hook to the
  job's runtime_env: every worker process reports its actor, node and the GPU ids Ray gave it;
- every pod sets VERL_FILE_LOGGER_PATH, where veRL's `file` logger writes each step's metrics, which the probe
  passes on to the operator's progress endpoint;
- each pod declares VERL_BUNDLE_CPUS Ray CPUs per GPU beyond the plan's processes (veRL's bundles ask for
  them: `max_colocate_count`, 3 by default).
"""

from __future__ import annotations

from pathlib import Path

from placement_core import contract
from placement_core.observe import probe
from rlplace_operator.api.names import placement_configmap_name
from rlplace_operator.api.rljob import Framework, RLJobSpec
from rlplace_operator.builders.podtemplate import with_volume

#: The pods' volume with the probe (the job's ConfigMap, its probe key only).
PROBE_VOLUME = "rlplace-probe"
#: Ray CPUs each pod declares beyond the plan's processes on it (RLinf's node probe and managers, veRL's
#: TaskRunner and register center), and per GPU for veRL's bundles.
EXTRA_RAY_CPUS = 4
VERL_BUNDLE_CPUS = 3


def probe_source() -> str:
    """The probe module's text, as the ConfigMap carries it."""
    return Path(probe.__file__).read_text()


def probe_data(spec: RLJobSpec) -> dict[str, str]:
    """The ConfigMap keys a framework job adds (none for an rlplace-driver job)."""
    return {contract.PROBE_FILE: probe_source()} if spec.framework_job else {}


def _common_env(spec: RLJobSpec) -> list[dict]:
    probe_path = {"name": "PYTHONPATH", "value": contract.PROBE_MOUNT_DIR}
    if spec.framework is Framework.VERL:
        return [probe_path, {"name": contract.VERL_METRICS_ENV, "value": contract.VERL_METRICS_PATH}]
    return [probe_path, {"name": contract.RLINF_EXT_MODULE_ENV, "value": contract.PROBE_MODULE}]


def _shaped(spec: RLJobSpec, gpus: int, held: tuple[int, ...]) -> bool:
    """Ray is shown only the plan's GPUs of the node (veRL on a node the plan uses in part)."""
    return spec.framework is Framework.VERL and len(held) < gpus


def ray_gpus(spec: RLJobSpec, gpus: int, held: tuple[int, ...]) -> int:
    """Ray's num-gpus of a worker on a node with `gpus` GPUs, `held` of them by the plan's processes."""
    return len(held) if _shaped(spec, gpus, held) else gpus


def shown_gpus(spec: RLJobSpec, gpus: int, held: tuple[int, ...]) -> tuple[int, ...] | None:
    """The GPUs Ray is shown on a worker pod (the pod's CUDA_VISIBLE_DEVICES), None for all of the node's."""
    return held if _shaped(spec, gpus, held) else None


def worker_env(spec: RLJobSpec, gpus: int, held: tuple[int, ...]) -> list[dict]:
    """A worker pod's variables: the probe, and for veRL the plan's GPUs (for an rlplace-driver job, Ray's flag
    that keeps it from overwriting the CUDA_VISIBLE_DEVICES rlplace's launcher sets)."""
    if not spec.framework_job:
        return [{"name": "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES", "value": "1"}]
    shown = shown_gpus(spec, gpus, held)
    visible = [] if shown is None else [{"name": "CUDA_VISIBLE_DEVICES", "value": ",".join(map(str, shown))}]
    return [*_common_env(spec), *visible]


def node_rank_exports(spec: RLJobSpec) -> tuple[str, ...]:
    """Variables a worker pod sets to its node rank before Ray starts, beside rlplace's (RLinf's node rank:
    RLinf orders its nodes by it)."""
    return (contract.RLINF_NODE_RANK_ENV,) if spec.framework is Framework.RLINF else ()


def head_env(spec: RLJobSpec, workers: int) -> list[dict]:
    """The head's variables: (RLinf) the rank after the workers, the driver hook, and whole log lines."""
    if not spec.framework_job:
        return []
    rank = [] if spec.framework is Framework.VERL else [{"name": contract.RLINF_NODE_RANK_ENV, "value": str(workers)}]
    return [
        *rank,
        *_common_env(spec),
        {"name": contract.FRAMEWORK_ENV, "value": str(spec.framework)},
        {"name": contract.RAY_RUNTIME_ENV_HOOK_ENV, "value": f"{contract.PROBE_MODULE}.runtime_env_hook"},
        {"name": "RAY_DEDUP_LOGS", "value": "0"},
    ]


def with_probe(template: dict, spec: RLJobSpec, job: str, container: str) -> dict:
    """`template` with the probe mounted in `container` (unchanged for an rlplace-driver job)."""
    if not spec.framework_job:
        return template
    source = {
        "name": placement_configmap_name(job),
        "items": [{"key": contract.PROBE_FILE, "path": contract.PROBE_FILE}],
    }
    mount = {"name": PROBE_VOLUME, "mountPath": contract.PROBE_MOUNT_DIR, "readOnly": True}
    return with_volume(template, {"name": PROBE_VOLUME, "configMap": source}, container, mount)


def extra_ray_cpus(spec: RLJobSpec, gpus: int) -> int:
    """Ray CPUs a pod with `gpus` GPUs declares beyond the plan's processes on it
    (raycluster.worker_start_params)."""
    if not spec.framework_job:
        return 0
    return EXTRA_RAY_CPUS + (VERL_BUNDLE_CPUS * gpus if spec.framework is Framework.VERL else 0)


def entrypoint(spec: RLJobSpec, workers: int) -> str:
    """The command the RayJob submits: the user's, and for RLinf its node count with the head counted."""
    assert spec.entrypoint is not None
    if spec.framework is Framework.RLINF:
        return f"{spec.entrypoint} cluster.num_nodes={workers + 1}"
    return spec.entrypoint

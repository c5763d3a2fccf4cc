"""What every framework that runs its own program shares: the probe rlplace ships into its pods.

The probe (placement_core/observe/probe.py) is shipped in the job's ConfigMap and mounted in every pod on
PYTHONPATH; Ray calls its hook in the driver (RAY_RUNTIME_ENV_HOOK) and forwards every line to the driver's log
whole (RAY_DEDUP_LOGS=0); it records the variables placement_core.contract.PROBE_VARIABLES names, which every
pod is handed (the probe stands alone, without rlplace). Each pod declares Ray CPUs beyond the plan's processes
for the framework's own actors (a node probe, managers, a task runner).
"""

from __future__ import annotations

from pathlib import Path

from placement_core import contract
from placement_core.observe import probe
from rlplace_operator.api.names import placement_configmap_name
from rlplace_operator.frameworks.base import ProbeMount, ProgramFramework

#: The pods' volume with the probe (the job's ConfigMap, its probe key only).
PROBE_VOLUME = "rlplace-probe"
#: Ray CPUs each pod declares beyond the plan's processes (RLinf's node probe and managers, veRL's TaskRunner and
#: register center).
EXTRA_RAY_CPUS = 4


class ProbedFramework(ProgramFramework):
    """A framework whose processes rlplace observes through the probe it ships."""

    def configmap_files(self) -> dict[str, str]:
        return {contract.PROBE_FILE: Path(probe.__file__).read_text()}

    def probe_mount(self, job: str) -> ProbeMount:
        source = {
            "name": placement_configmap_name(job),
            "items": [{"key": contract.PROBE_FILE, "path": contract.PROBE_FILE}],
        }
        return ProbeMount(
            {"name": PROBE_VOLUME, "configMap": source},
            {"name": PROBE_VOLUME, "mountPath": contract.PROBE_MOUNT_DIR, "readOnly": True},
        )

    def common_env(self) -> list[dict[str, str]]:
        """Every pod's variables: the probe on PYTHONPATH, what it records, and the framework's own."""
        return [
            {"name": "PYTHONPATH", "value": contract.PROBE_MOUNT_DIR},
            {"name": contract.PROBE_VARIABLES_ENV, "value": ",".join(contract.PROBE_VARIABLES)},
            *self.framework_env(),
        ]

    def framework_env(self) -> list[dict[str, str]]:
        """What the framework itself reads in every pod, to load the probe or write what it passes on."""
        return []

    def worker_env(self, gpus: int, held: tuple[int, ...]) -> list[dict[str, str]]:
        shown = self.shown_gpus(gpus, held)
        visible = [] if shown is None else [{"name": "CUDA_VISIBLE_DEVICES", "value": ",".join(map(str, shown))}]
        return [*self.common_env(), *visible]

    def head_env(self, workers: int) -> list[dict[str, str]]:
        return [
            *self.common_env(),
            {"name": contract.FRAMEWORK_ENV, "value": str(self.name)},
            {"name": contract.RAY_RUNTIME_ENV_HOOK_ENV, "value": f"{contract.PROBE_MODULE}.runtime_env_hook"},
            {"name": "RAY_DEDUP_LOGS", "value": "0"},
        ]

    def extra_ray_cpus(self, gpus: int) -> int:
        return EXTRA_RAY_CPUS

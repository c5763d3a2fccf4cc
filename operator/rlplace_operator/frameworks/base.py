"""The Framework protocol: everything rlplace does differently for the program that starts a job's processes.

Kueue's `jobframework` is the model: one small interface, one module per integration that registers itself, and
nothing outside this package names a framework. A job's `spec.framework` picks its Framework from the registry
(`frameworks.framework_of`); builders, admission and the reconcile ask it, never test the name.

What a Framework says:
- what its pods need: the variables of the head and the workers, the node-rank variables set before Ray starts,
  the Ray GPUs and CPUs each Ray node declares, the entrypoint the RayJob submits, the files the job's ConfigMap
  ships and where they are mounted, and whether every pod (not only the head) reports progress;
- how its processes are found and checked: the binding report from the driver's log (an rlplace driver prints
  its own; a framework's processes are observed through the probe's lines), whether a mismatch stops the job
  from outside, and what a failed driver's log says about a framework the image lacks;
- how its logged metrics map to components (placement_core.observe.adapters);
- what admission refuses for it, in one line.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from placement_core.observe.progress import IterationReport
from placement_core.observe.verify import BindingReport, find_report
from placement_core.plan import OnLoss, Plan
from rlplace_operator.api.rljob import FrameworkName, OnBindingMismatch, RLJobSpec
from rlplace_operator.diagnosis.causes import FRAMEWORK_MISSING, Cause

#: What a failed driver prints when its image lacks a module it imports.
_NO_MODULE = re.compile(r"ModuleNotFoundError: No module named '([A-Za-z0-9_.]+)'")


@dataclass(frozen=True)
class ProbeMount:
    """A volume rlplace adds to every Ray pod of the job and where the main container mounts it."""

    volume: dict[str, Any]
    mount: dict[str, Any]


class Framework:
    """The defaults are those of a job whose processes rlplace's own launcher starts (FrameworkName.RLPLACE);
    a framework that runs its own program overrides what differs."""

    name: ClassVar[FrameworkName]
    #: The framework's own program starts the processes (so rlplace observes them, not launches them).
    runs_own_program: ClassVar[bool] = False

    # -- what its pods need ------------------------------------------------------------------------------------

    def worker_env(self, gpus: int, held: tuple[int, ...]) -> list[dict[str, str]]:
        """A worker pod's variables on a node with `gpus` GPUs, `held` of them by the plan's processes."""
        return []

    def head_env(self, workers: int) -> list[dict[str, str]]:
        """The head pod's variables, for a job of `workers` worker pods."""
        return []

    def node_rank_exports(self) -> tuple[str, ...]:
        """Variables a worker pod sets to its node rank before Ray starts, beside rlplace's."""
        return ()

    def ray_gpus(self, gpus: int, held: tuple[int, ...]) -> int:
        """Ray's num-gpus of a worker on a node with `gpus` GPUs, `held` of them by the plan's processes."""
        return gpus

    def shown_gpus(self, gpus: int, held: tuple[int, ...]) -> tuple[int, ...] | None:
        """The GPUs Ray is shown on a worker pod (its CUDA_VISIBLE_DEVICES); None for all of the node's."""
        return None

    def extra_ray_cpus(self, gpus: int) -> int:
        """Ray CPUs a pod with `gpus` GPUs declares beyond the plan's processes on it."""
        return 0

    def entrypoint(self, spec: RLJobSpec, workers: int) -> str:
        """The command the RayJob submits."""
        assert spec.entrypoint is not None
        return spec.entrypoint

    def configmap_files(self) -> dict[str, str]:
        """Files the job's ConfigMap ships beside the plan (key -> text)."""
        return {}

    def probe_mount(self, job: str) -> ProbeMount | None:
        """What the main container of every Ray pod mounts from those files, if anything."""
        return None

    def progress_from_every_pod(self) -> bool:
        """Whether any pod (not only the head, where the driver runs) may report the job's progress."""
        return False

    # -- how its processes are found and checked ----------------------------------------------------------------

    def binding_report(self, plan: Plan, logs: Iterable[str], final: bool) -> BindingReport | None:
        """The binding report in the driver's logs (newest first), or None while there is none yet. `final`: the
        driver ended or the bound on its workers' start passed (a process not seen by then is a problem)."""
        for log in logs:
            found = find_report(log)
            if found is not None:
                return found
        return None

    def reads_plan_for_report(self) -> bool:
        """Whether `binding_report` compares against the plan (the caller then reads it)."""
        return False

    def mismatch_fails_job(self, on_mismatch: OnBindingMismatch) -> bool:
        """Whether a process found elsewhere than planned fails the job (else BindingVerified says it), given the
        job's spec.onBindingMismatch."""
        return True

    def operator_stops_on_mismatch(self) -> bool:
        """Whether the operator must stop the driver on a mismatch (an rlplace driver exits on its own check)."""
        return False

    def missing_from_image(self, driver_log_tail: str) -> Cause | None:
        """A failed driver whose log shows the image lacks the framework (or what its program needs)."""
        return None

    # -- how its metrics map to components ---------------------------------------------------------------------

    def iteration_report(self, metrics: Mapping[str, Any], iteration: int) -> IterationReport:
        """One step's report from the metrics the framework logged (its probe posts them)."""
        raise ValueError(f"framework {self.name} posts IterationReports, not metrics")

    # -- admission ---------------------------------------------------------------------------------------------

    def refusal(self, spec: RLJobSpec, dra_groups: Iterable[str]) -> str | None:
        """Why the job cannot be admitted with this framework, in one line (None: it can). `dra_groups`: the job's
        NodeGroups whose GPUs come from DRA."""
        return None


class ProgramFramework(Framework):
    """A framework whose own program starts the processes: rlplace observes them through the probe."""

    runs_own_program = True

    def mismatch_fails_job(self, on_mismatch: OnBindingMismatch) -> bool:
        return on_mismatch is OnBindingMismatch.FAIL

    def operator_stops_on_mismatch(self) -> bool:
        return True

    def reads_plan_for_report(self) -> bool:
        return True

    def missing_from_image(self, driver_log_tail: str) -> Cause | None:
        match = _NO_MODULE.search(driver_log_tail)
        if match is None:
            return None
        module = match.group(1)
        what = "the framework" if module.split(".")[0] == self.name else f"'{module}', which the program needs"
        message = f"the job's image cannot import {what} (No module named '{module}'; spec.framework {self.name})"
        return Cause(FRAMEWORK_MISSING, message, True)

    def refusal(self, spec: RLJobSpec, dra_groups: Iterable[str]) -> str | None:
        shared = list(dra_groups)
        if shared:
            return (
                f"NodeGroup {shared[0]} allocates GPUs through DRA; framework jobs run on devicePlugin NodeGroups "
                "only for now (their GPU numbering is the framework's)"
            )
        replaced = [c.name for c in spec.components if c.on_loss is OnLoss.REPLACE]
        if replaced:
            # The framework's own workers hold the processes: nothing in them starts a lost replica again and
            # goes on, so a loss must restart the job.
            return (
                f"component '{replaced[0]}': onLoss Replace needs a driver that starts lost replicas again, and "
                f"framework {self.name}'s workers cannot be replaced today (use RestartJob)"
            )
        return None

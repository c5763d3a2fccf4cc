"""The plan as the launcher needs it: the typed Plan, and how many processes hold each GPU."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from placement_core.contract import (
    PLAN_DIR_ENV,
    PLAN_ENV,
    PLAN_GZIP_KEY,
    PLAN_KEY,
    PLAN_MOUNT_DIR,
    gpu_resource,
    node_resource,
    read_plan_dir,
    read_pod_gpus,
)
from placement_core.errors import LaunchError, PlacementError
from placement_core.observe.verify import in_pod
from placement_core.plan import Plan, ProcessPlan, build_plan

if TYPE_CHECKING:
    from placement_core.components import ComponentPlacement

#: Ray grants custom resources in steps of 1/10000; a shared GPU's share is rounded down to that step.
RESOURCE_STEP = 10_000


@dataclass(frozen=True)
class LaunchPlan:
    """A plan and, per (node rank, local GPU), how many of its processes hold that GPU.

    The sharing count is plan-wide: collocated components ask for 1/k of a GPU each even when launched
    one at a time, so the second one still fits and an exclusive (k=1) process takes the GPU whole.
    """

    plan: Plan
    holders: Mapping[tuple[int, int], int]
    pod_gpus: Mapping[int, tuple[int, ...]] = field(default_factory=dict)
    """Node rank -> the plan's GPUs its pod was given exactly (a DRA claim; contract.POD_GPUS_KEY)."""

    @classmethod
    def of(cls, plan: Plan, pod_gpus: Mapping[int, tuple[int, ...]] | None = None) -> LaunchPlan:
        holders: dict[tuple[int, int], int] = {}
        for _, process in plan.processes():
            for gpu in process.held_gpus:
                holders[(process.node_rank, gpu)] = holders.get((process.node_rank, gpu), 0) + 1
        crowded = [key for key, count in holders.items() if count > RESOURCE_STEP]
        if crowded:
            node, gpu = crowded[0]
            raise LaunchError(
                f"GPU {gpu} on node rank {node} is shared by {holders[crowded[0]]} processes (at most {RESOURCE_STEP})"
            )
        return cls(plan, holders, dict(pod_gpus or {}))

    def env(self, process: ProcessPlan) -> dict[str, str]:
        """The process's planned variables as its container sees them (GPU numbers as container ordinals in a pod
        given exactly its GPUs)."""
        return in_pod(process.env, self.pod_gpus.get(process.node_rank))

    def processes(self, component: str) -> tuple[ProcessPlan, ...]:
        try:
            return self.plan.component(component).processes
        except PlacementError as err:
            raise LaunchError(str(err)) from None

    def share(self, node_rank: int, gpu: int) -> float:
        """What one holder of the GPU asks for: 1/k rounded down to Ray's step, so k shares fit in 1."""
        return math.floor(RESOURCE_STEP / self.holders[(node_rank, gpu)]) / RESOURCE_STEP

    def resources(self, process: ProcessPlan) -> dict[str, float]:
        """The custom resources one actor asks Ray for."""
        resources: dict[str, float] = {node_resource(process.node_rank): 1}
        resources.update(
            {gpu_resource(process.node_rank, g): self.share(process.node_rank, g) for g in process.held_gpus}
        )
        return resources

    def demand(self, components: Sequence[str]) -> dict[str, float]:
        """Total custom resources the given components ask for together."""
        total: dict[str, float] = {}
        for name in components:
            for process in self.processes(name):
                for key, amount in self.resources(process).items():
                    total[key] = total.get(key, 0.0) + amount
        return total


def load_plan(source: LaunchPlan | Plan | ComponentPlacement | str | bytes) -> LaunchPlan:
    """A LaunchPlan from a Plan, a ComponentPlacement, or the plan's JSON (gzipped or not).

    The ConfigMap's plan and an in-process ComponentPlacement give the same LaunchPlan, so a driver can be
    tried offline on the exact plan the operator stored.
    """
    if isinstance(source, LaunchPlan):
        return source
    if isinstance(source, str | bytes):
        try:
            source = Plan.from_json(source)
        except PlacementError as err:
            raise LaunchError(str(err)) from None
    if not isinstance(source, Plan):
        source = build_plan(source)
    return LaunchPlan.of(source)


def read_plan(directory: str | os.PathLike[str] | None = None) -> LaunchPlan:
    """The plan a driver in the RayCluster runs: in `directory`, else $RLPLACE_PLAN (the JSON itself), else
    the directory $RLPLACE_PLAN_DIR names, else where the operator mounts it."""
    if directory is None and os.environ.get(PLAN_ENV):
        return load_plan(os.environ[PLAN_ENV])
    folder = Path(directory or os.environ.get(PLAN_DIR_ENV) or PLAN_MOUNT_DIR)
    try:
        return LaunchPlan.of(read_plan_dir(folder), read_pod_gpus(folder))
    except PlacementError as err:
        raise LaunchError(str(err)) from None


class MountedPlan:
    """The plan mounted where the driver runs, read again only when its file changed: how a driver follows the
    operator's in-place changes (a component's replicas changed: docs/elastic.md). The kubelet swaps a ConfigMap
    volume's files at once when it refreshes them, so a changed file is a whole new plan. Looked at once per step,
    so it costs a `stat` when nothing changed."""

    def __init__(self, directory: str | os.PathLike[str] | None = None) -> None:
        self.directory = Path(directory or os.environ.get(PLAN_DIR_ENV) or PLAN_MOUNT_DIR)
        self._seen = self._stamp()

    def _stamp(self) -> tuple[int, int, int] | None:
        for key in (PLAN_KEY, PLAN_GZIP_KEY):
            try:
                found = (self.directory / key).stat()
            except OSError:
                continue
            return found.st_ino, found.st_mtime_ns, found.st_size
        return None

    def changed(self) -> LaunchPlan | None:
        """The plan, when its file changed since the last look (None: unchanged, or unreadable now: a kubelet
        in the middle of its swap; the next look reads it)."""
        stamp = self._stamp()
        if stamp is None or stamp == self._seen:
            return None
        try:
            plan = read_plan(self.directory)
        except LaunchError:
            return None
        self._seen = stamp
        return plan

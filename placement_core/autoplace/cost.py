"""The two per-component cost models of docs/autoplace.md, and how schedules compose their costs.

A cost is seconds per group batch (c = T/rbs at the profiled W GPUs). `StageCost(g)` is None where the model
does not allow g GPUs; `why_not(g)` says why, for `rlplace cost` of a hand-written placement. The search
builds its tables from these same functions, so the search and `rlplace cost` cannot disagree.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from placement_core.autoplace.inputs import ROLLOUT, ReasoningTask, Stage
from placement_core.errors import PlacementError


class CostModel(enum.StrEnum):
    """`scaling`: the reference's current model; `linear`: its first tool (cost grows as W/g)."""

    scaling = "scaling"
    linear = "linear"


def parse_cost_model(value: str | CostModel) -> CostModel:
    """Accept the model's name as well as the enum, so `autotune(config, "linear")` reads naturally."""
    try:
        return CostModel(value)
    except ValueError:
        known = ", ".join(m.value for m in CostModel)
        raise PlacementError(f"unknown cost model {value!r} (known: {known})") from None


def valid_dp_sizes(task: ReasoningTask, model_parallel: int) -> frozenset[int]:
    """Data-parallel sizes a Megatron component accepts: (rbs*gs/n_minibatches) % (dp*gs) == 0.

    Checked for dp up to G/mp, as the reference does; an empty set means no restriction (spec).
    """
    per_step = task.rollout_batch_size * task.group_size // task.n_minibatches
    top = task.num_gpus // model_parallel
    return frozenset(dp for dp in range(1, top + 1) if per_step % (dp * task.group_size) == 0)


def rollout_capacity(max_running_requests: int) -> int:
    """Requests one rollout engine serves at once without queueing (90% of mrr from 128 up)."""
    return math.ceil(max_running_requests * (0.9 if max_running_requests >= 128 else 1))


@dataclass(frozen=True)
class StageCost:
    """Seconds per group batch of one stage on g GPUs, under one cost model."""

    stage: Stage
    model: CostModel
    per_batch_at_profile: float
    dp_sizes: frozenset[int]
    all_requests: int
    capacity: int

    @classmethod
    def build(cls, task: ReasoningTask, stage: Stage, model: CostModel) -> StageCost:
        megatron = stage.kind != ROLLOUT
        return cls(
            stage=stage,
            model=model,
            per_batch_at_profile=stage.cost / task.rollout_batch_size,
            dp_sizes=valid_dp_sizes(task, stage.model_parallel) if megatron else frozenset(),
            all_requests=task.rollout_batch_size * task.group_size,
            capacity=rollout_capacity(task.max_running_requests),
        )

    def why_not(self, g: int) -> str | None:
        """None when g GPUs are allowed, else the reason in words."""
        stage, W = self.stage, self.stage.profiled_gpus
        if g == W:
            return None
        if g < 1:
            return "a component needs at least one GPU"
        if g > W:
            return f"the profile was measured on {W} GPUs and the model does not extrapolate beyond them"
        if g % stage.model_parallel:
            return f"{g} GPUs are not a multiple of its model-parallel size {stage.model_parallel}"
        dp = g // stage.model_parallel
        if self.dp_sizes and dp not in self.dp_sizes:
            valid = ", ".join(map(str, sorted(self.dp_sizes)))
            return f"data-parallel size {dp} does not split the training batch (valid: {valid})"
        return None

    def __call__(self, g: int) -> float | None:
        if self.why_not(g) is not None:
            return None
        c, W = self.per_batch_at_profile, self.stage.profiled_gpus
        if g == W:
            return c
        if self.model is CostModel.linear:
            return c * W / g
        if self.stage.kind == ROLLOUT:
            engines = g // self.stage.model_parallel
            return c if engines * self.capacity >= self.all_requests else c * W / g
        s = W / g
        return c * s / (1 + min(0.9, max(s / 10, 0.1)))

    def table(self, num_gpus: int) -> np.ndarray:
        """Cost for g = 0..num_gpus as a dense array, inf where g is not allowed (what the search scans).

        Only multiples of mp enter: a pipelined placement must give a rollout whole engines and the actor a
        whole number of model replicas, even at g == W.
        """
        out = np.full(num_gpus + 1, np.inf)
        mp = self.stage.model_parallel
        for g in range(mp, num_gpus + 1, mp):
            cost = self(g)
            if cost is not None:
                out[g] = cost
        return out


def stage_costs(task: ReasoningTask, model: CostModel) -> tuple[StageCost, ...]:
    return tuple(StageCost.build(task, stage, model) for stage in task.stages)


def pipelined_total(per_batch: Sequence[float], rollout_batch_size: int) -> float:
    """Space division, streaming rbs batches: every stage warms up once, then the slowest sets the pace.

    Summed left to right in chain order: the search's vectorised totals use the same order, so the total it
    minimised and the total reported for its answer are the same float.
    """
    return sum(per_batch) + max(per_batch) * (rollout_batch_size - 1)


def collocated_total(per_batch: Sequence[float], rollout_batch_size: int) -> float:
    """Time division on the same GPUs: each stage runs all rbs batches, one stage after the other."""
    return sum(p * rollout_batch_size for p in per_batch)

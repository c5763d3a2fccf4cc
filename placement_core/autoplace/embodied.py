"""Embodied tasks (docs/autoplace.md, "Embodied tasks"): `env -> env_rollout -> actor`, the actor on all GPUs.

The profile gives, for the simulator (`env`) and for the policy engine (`env_rollout`, the config's `rollout`
component), seconds per step at a few loads `{instances_per_gpu: seconds}`. `CurveFit` turns each into a
function: the profiled value at a profiled load, and between loads the best of four SciPy curve fits (power
law, exponential, logarithmic, quadratic) by R^2.

Two placements are searched, both keeping the actor on all G GPUs after the rollout:
- collocated: env and rollout on all G GPUs, one after the other: env(G) + rollout(G) + actor;
- hybrid: env on GPUs 0..g_e-1 and rollout on the other G - g_e, pipelined over the envs split into
  B = `rollout.pipeline_stage_num` stages (default 2, the reference tool's): each stage runs env_num/B envs,
  so per stage e = env(g_e) and r = rollout(g_r) at the per-stage load, and the two streams cost
  e + r + max(e, r) * (B - 1) (the pipelined composition of docs/autoplace.md with B batches), plus the actor.

`env(g)` exists only when the envs split evenly over the g GPUs (and the B stages) and the load per GPU does
not exceed the largest profiled load; `rollout(g)` needs g % mp == 0 and a load of at least one env and at
most the largest profiled load per engine (env_num // engines, as the reference splits them).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from placement_core.autoplace.cost import pipelined_total
from placement_core.autoplace.inputs import MAX_PROFILED_SECONDS, check_gpus, require_profile_keys, seconds
from placement_core.autoplace.search import COLLOCATED, HYBRID, Progress, Schedule, pick_best
from placement_core.errors import PlacementError
from placement_core.jobconfig import Job


def _power(x, a, b):
    return a * np.power(x, b)


def _exponential(x, a, b):
    return a * np.exp(b * x)


def _logarithmic(x, a, b):
    return a + b * np.log(x)


def _quadratic(x, a, b, c):
    return a * x * x + b * x + c


#: The candidate curves, in the order that breaks R^2 ties.
CURVES: tuple[tuple[str, Callable[..., np.ndarray], int], ...] = (
    ("power law", _power, 2),
    ("exponential", _exponential, 2),
    ("logarithmic", _logarithmic, 2),
    ("quadratic", _quadratic, 3),
)


def _r_squared(y: np.ndarray, predicted: np.ndarray) -> float:
    if not np.all(np.isfinite(predicted)):
        return -math.inf
    residual = float(np.sum((y - predicted) ** 2))
    spread = float(np.sum((y - y.mean()) ** 2))
    return 1.0 - residual / spread if spread > 0 else (1.0 if residual == 0 else -math.inf)


def _initial_guess(name: str, x: np.ndarray, y: np.ndarray) -> list[float] | None:
    """A starting point from the linearised curve, so curve_fit converges the same way every time."""
    if name == "power law" and np.all(y > 0):
        b, log_a = np.polyfit(np.log(x), np.log(y), 1)
        return [math.exp(log_a), b]
    if name == "exponential" and np.all(y > 0):
        b, log_a = np.polyfit(x, np.log(y), 1)
        return [math.exp(log_a), b]
    if name == "quadratic":
        return list(np.polyfit(x, y, 2))
    return None


@dataclass(frozen=True)
class CurveFit:
    """Seconds at a load: exact at the profiled loads, the best-fitting curve between them."""

    points: dict[int, float]
    curve: str
    params: tuple[float, ...]
    r_squared: float

    @classmethod
    def from_profile(cls, where: str, raw: object) -> CurveFit:
        # SciPy loads in about half a second; only embodied jobs need it, so `rlplace plan` does not wait for it.
        from scipy.optimize import OptimizeWarning, curve_fit

        points = _points(where, raw)
        x = np.array(sorted(points), dtype=float)
        y = np.array([points[k] for k in sorted(points)], dtype=float)
        if len(points) == 1 or np.all(y == y[0]):
            return cls(points, "constant", (float(y[0]),), 1.0)
        best: tuple[float, str, tuple[float, ...]] | None = None
        for name, function, n_params in CURVES:
            if n_params > len(points):
                continue
            try:
                with warnings.catch_warnings(), np.errstate(all="ignore"):
                    warnings.simplefilter("ignore", OptimizeWarning)
                    params, _ = curve_fit(function, x, y, p0=_initial_guess(name, x, y), maxfev=20000)
            except (RuntimeError, ValueError, FloatingPointError):
                continue
            with np.errstate(all="ignore"):
                score = _r_squared(y, function(x, *params))
            if best is None or score > best[0]:
                best = (score, name, tuple(float(p) for p in params))
        if best is None:
            raise PlacementError(f"{where}: no curve fits the profiled points {points}")
        return cls(points, best[1], best[2], best[0])

    @property
    def max_load(self) -> int:
        return max(self.points)

    def __call__(self, load: int) -> float:
        """Predicted seconds at `load`; a curve never predicts a negative time (it is floored at 0)."""
        if load in self.points:
            return self.points[load]
        if self.curve == "constant":
            return self.params[0]
        function = next(f for name, f, _ in CURVES if name == self.curve)
        with np.errstate(all="ignore"):
            value = float(function(np.float64(load), *self.params))
        return max(value, 0.0) if math.isfinite(value) else math.inf


def _points(where: str, raw: object) -> dict[int, float]:
    """`{instances_per_gpu: seconds}` from YAML (int keys) or JSON (string keys)."""
    if not isinstance(raw, Mapping) or not raw:
        raise PlacementError(f"{where} must be a non-empty mapping of instances per GPU to seconds, got {raw!r}")
    points: dict[int, float] = {}
    for key, value in raw.items():
        try:
            load = int(str(key).strip())
        except ValueError:
            load = 0
        if isinstance(key, bool) or load < 1:
            raise PlacementError(f"{where}: key {key!r} must be a number of instances per GPU >= 1")
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= MAX_PROFILED_SECONDS:
            raise PlacementError(
                f"{where}: value for {key!r} must be a finite number of seconds >= 0 (at most {MAX_PROFILED_SECONDS:g}), got {value!r}"
            )
        points[load] = float(value)
    return points


@dataclass(frozen=True)
class EmbodiedTask:
    """An embodied job reduced to what the search needs."""

    num_gpus: int
    num_nodes: int
    env_num: int
    pipeline_stages: int
    rollout_model_parallel: int
    env: CurveFit
    rollout: CurveFit
    actor_cost: float

    def env_cost(self, gpus: int, stages: int = 1) -> float | None:
        """Seconds per stage of the simulator on `gpus` GPUs, each stage holding env_num/stages envs."""
        share = gpus * stages
        if gpus < 1 or self.env_num % share or self.env_num // share > self.env.max_load:
            return None
        return self.env(self.env_num // share)

    def rollout_cost(self, gpus: int, stages: int = 1) -> float | None:
        """Seconds per stage of the policy engines on `gpus` GPUs (gpus/mp engines)."""
        if gpus < 1 or gpus % self.rollout_model_parallel:
            return None
        load = self.env_num // (gpus // self.rollout_model_parallel * stages)
        if not 1 <= load <= self.rollout.max_load:
            return None
        return self.rollout(load)


def read_embodied(job: Job) -> EmbodiedTask:
    check_gpus(job)
    costs = job.profile
    require_profile_keys(costs, ("env_profile_data", "rollout_profile_data", "actor_cost"))
    if job.batch.env_num is None:
        raise PlacementError("data.env_num is required for auto placement")
    return EmbodiedTask(
        num_gpus=job.cluster.num_accelerators,
        num_nodes=job.cluster.num_nodes,
        env_num=job.batch.env_num,
        pipeline_stages=job.batch.pipeline_stages,
        rollout_model_parallel=job.model_parallel.rollout.model_parallel,
        env=CurveFit.from_profile("profile_data.env_profile_data", costs["env_profile_data"]),
        rollout=CurveFit.from_profile("profile_data.rollout_profile_data", costs["rollout_profile_data"]),
        actor_cost=seconds(costs, "actor_cost"),
    )


EMBODIED_CHAIN = ("env", "rollout", "actor")


def collocated_schedule(task: EmbodiedTask) -> Schedule | None:
    G = task.num_gpus
    env, rollout = task.env_cost(G), task.rollout_cost(G)
    if env is None or rollout is None:
        return None
    return Schedule(
        mode=COLLOCATED,
        names=EMBODIED_CHAIN,
        ranges=((0, G - 1),) * 3,
        per_batch=(env, rollout, task.actor_cost),
        total=env + rollout + task.actor_cost,
        gpu_sets=1,
    )


def hybrid_schedule(task: EmbodiedTask, env_gpus: int, rollout_gpus: int) -> Schedule | None:
    """Env on GPUs 0..env_gpus-1, rollout on the next rollout_gpus, pipelined; the actor on all GPUs."""
    B = task.pipeline_stages
    env, rollout = task.env_cost(env_gpus, B), task.rollout_cost(rollout_gpus, B)
    if env is None or rollout is None:
        return None
    G = task.num_gpus
    return Schedule(
        mode=HYBRID,
        names=EMBODIED_CHAIN,
        ranges=((0, env_gpus - 1), (env_gpus, env_gpus + rollout_gpus - 1), (0, G - 1)),
        per_batch=(env, rollout, task.actor_cost),
        total=pipelined_total((env, rollout), B) + task.actor_cost,
        gpu_sets=3,
    )


def search_embodied(task: EmbodiedTask, progress: Progress | None = None) -> dict[str, Schedule | None]:
    """Every split of the GPUs between env and rollout (G - 1 of them), and the collocated placement."""
    G = task.num_gpus
    hybrids = []
    for env_gpus in range(1, G):
        hybrids.append(hybrid_schedule(task, env_gpus, G - env_gpus))
        if progress is not None:
            progress(env_gpus, G - 1)
    return {COLLOCATED: collocated_schedule(task), HYBRID: pick_best(hybrids)}

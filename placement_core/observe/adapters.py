"""Iteration reports from the metric dicts RL frameworks already log (pure functions, no framework imported).

Each framework times its phases under its own keys, in seconds; each adapter maps the phases of one iteration
onto rlplace components (the names of `cluster.component_placement`: actor, rollout, reward, critic,
reference, env), the weight sync, and the iteration's wall time. Phases of one component are summed (veRL's
`old_log_prob` and `update_actor` both run on the actor's GPUs). Keys an adapter does not know (evaluation,
checkpoint saving, throughput figures, per-token times) are left out, so a report holds only what a placement
decides. Key names as the frameworks document and log them:

| framework | prefix      | rollout                                    | actor                                        | weight sync                                        | iteration         |
|-----------|-------------|--------------------------------------------|----------------------------------------------|----------------------------------------------------|-------------------|
| RLinf     | `time/`     | `generate_rollouts`                        | `actor_training`, `cal_adv_and_returns`      | `sync_weights`                                     | `step`            |
| veRL      | `timing_s/` | `gen`                                      | `old_log_prob`, `update_actor`               | `update_weights`                                   | `step`            |
| NeMo-RL   | `timing/train/` | `generation` (else `exposed_generation`) | `policy_training`, `policy_and_reference_logprobs` | `prepare_for_generation/total`, `weight_sync` | `total_step_time` |
| OpenRLHF  | `timing/` (`train/timing/` in its logger) | `make_experience`        | `ppo_train`                                  | `broadcast`                                        | (none)            |

and further: RLinf `env/interact` -> env; veRL `reward` -> reward, `ref` -> reference, `values` and
`update_critic` -> critic; NeMo-RL `reward_calculation` -> reward. OpenRLHF's `make_experience` covers
generation and the reward, reference and critic forward passes, and `ppo_train` the actor and critic updates,
so its report has two components.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from placement_core.observe.progress import ComponentTime, IterationReport

#: Marks a phase as the weight sync in the tables below.
WEIGHT_SYNC = "<weight sync>"
#: Marks a phase as the iteration's wall time.
ITERATION = "<iteration>"

RLINF = {
    "generate_rollouts": "rollout",
    "actor_training": "actor",
    "cal_adv_and_returns": "actor",
    "env/interact": "env",
    "sync_weights": WEIGHT_SYNC,
    "step": ITERATION,
}
VERL = {
    "gen": "rollout",
    "reward": "reward",
    "old_log_prob": "actor",
    "ref": "reference",
    "values": "critic",
    "update_critic": "critic",
    "update_actor": "actor",
    "update_weights": WEIGHT_SYNC,
    "step": ITERATION,
}
NEMO_RL = {
    "generation": "rollout",
    "policy_and_reference_logprobs": "actor",
    "reward_calculation": "reward",
    "policy_training": "actor",
    "prepare_for_generation/total": WEIGHT_SYNC,
    "weight_sync": WEIGHT_SYNC,
    "total_step_time": ITERATION,
}
OPENRLHF = {
    "make_experience": "rollout",
    "ppo_train": "actor",
    "broadcast": WEIGHT_SYNC,
}


def from_rlinf(metrics: Mapping[str, Any], iteration: int) -> IterationReport:
    """RLinf's `time/*` metrics of one step (the runner logs them with the step number)."""
    return _report(_phases(metrics, ("time/",), RLINF), iteration)


def from_verl(metrics: Mapping[str, Any], iteration: int | None = None) -> IterationReport:
    """veRL's `timing_s/*` metrics of one step; the iteration from `training/global_step` unless given."""
    return _report(_phases(metrics, ("timing_s/",), VERL), _iteration(metrics, iteration, "training/global_step"))


def from_nemo_rl(metrics: Mapping[str, Any], iteration: int) -> IterationReport:
    """NeMo-RL's `timing/train/*` metrics of one step (its logger takes the step separately). Synchronous
    runs log `generation`; asynchronous ones `exposed_generation` (the part the trainer waited for), used
    when `generation` is absent."""
    table = NEMO_RL if "timing/train/generation" in metrics else {**NEMO_RL, "exposed_generation": "rollout"}
    return _report(_phases(metrics, ("timing/train/",), table), iteration)


def from_openrlhf(metrics: Mapping[str, Any], iteration: int | None = None) -> IterationReport:
    """OpenRLHF's `timing/*` entries of a training step's status (or `train/timing/*` as its logger writes
    them); the iteration from `global_step` / `train/global_step` unless given."""
    phases = _phases(metrics, ("timing/", "train/timing/"), OPENRLHF)
    step = iteration
    if step is None:
        key = "global_step" if "global_step" in metrics else "train/global_step"
        step = _iteration(metrics, None, key)
    return _report(phases, step)


def _phases(metrics: Mapping[str, Any], prefixes: tuple[str, ...], table: Mapping[str, str]) -> dict[str, float]:
    """Seconds per target (component, WEIGHT_SYNC, ITERATION), in the table's order, from the known keys."""
    phases: dict[str, float] = {}
    for prefix in prefixes:
        for phase, target in table.items():
            key = prefix + phase
            if key in metrics:
                phases[target] = phases.get(target, 0.0) + _seconds(metrics[key], key)
    return phases


def _report(phases: dict[str, float], iteration: int) -> IterationReport:
    components = tuple(
        ComponentTime(name, seconds) for name, seconds in phases.items() if name not in (WEIGHT_SYNC, ITERATION)
    )
    if not components:
        raise ValueError("no known timing keys in the metrics (see placement_core.observe.adapters)")
    return IterationReport(iteration, components, phases.get(WEIGHT_SYNC), phases.get(ITERATION))


def _seconds(value: Any, key: str) -> float:
    """A logged number (plain, numpy or a 0-d tensor: anything with `float()`)."""
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"metric '{key}' is not a number: {value!r:.40}") from None


def _iteration(metrics: Mapping[str, Any], given: int | None, key: str) -> int:
    if given is not None:
        return given
    if key not in metrics:
        raise ValueError(f"no '{key}' in the metrics; pass the iteration")
    return int(_seconds(metrics[key], key))

"""Which components may be replaced while the job runs (spec.components[].onLoss: Replace), checked on the plan.

A lost replica is started again while the others go on only when nothing else is lost with it and nothing waits
on it: its ranks hold no GPU that a RestartJob component's process uses (a GPU shared with the trainer would take
a trainer rank down with it), they train no model together (the trainer's ranks all-reduce their gradients every
step), and they form no tensor- or pipeline-parallel group (the other ranks of the group stop with it). Each
refusal is one line naming the component and why (docs/replace.md).
"""

from __future__ import annotations

from collections.abc import Mapping

from placement_core.errors import PlacementError
from placement_core.plan import OnLoss, Plan
from rlplace_operator.api.rljob import RLJobSpec

#: Components whose ranks train one model together: never independent replicas.
TRAINERS = ("actor", "critic")


def on_loss_of(spec: RLJobSpec) -> dict[str, OnLoss]:
    """spec.components' onLoss by component name (components not listed are RestartJob)."""
    return {c.name: c.on_loss for c in spec.components}


def model_parallel_size(spec: RLJobSpec, component: str) -> tuple[str, int] | None:
    """The component's model-parallel group (its kind and size) when larger than one rank, from spec.modelParallel."""
    sizes = spec.model_parallel
    groups = {
        "rollout": (("tensor", sizes.rollout_tensor_parallel_size), ("pipeline", sizes.rollout_pipeline_parallel_size)),
        "inference": (
            ("tensor", sizes.inference_tensor_parallel_size or sizes.actor_tensor_parallel_size),
            ("pipeline", sizes.inference_pipeline_parallel_size or sizes.actor_pipeline_parallel_size),
        ),
    }
    for kind, size in groups.get(component, ()):
        if size > 1:
            return kind, size
    return None


def with_on_loss(spec: RLJobSpec, plan: Plan) -> Plan:
    """The plan with spec.components' onLoss, once every Replace component is shown replaceable; PlacementError (one
    line) for a component the plan does not place or one that cannot be replaced."""
    on_loss = on_loss_of(spec)
    for name in on_loss:
        if name not in plan.names:
            raise PlacementError(
                f"spec.components names '{name}', which the placement does not place (placed: {', '.join(plan.names)})"
            )
    for name, wanted in on_loss.items():
        if wanted is OnLoss.REPLACE:
            problem = _why_not_replaceable(spec, plan, name, on_loss)
            if problem is not None:
                raise PlacementError(f"component '{name}': onLoss Replace needs independent ranks, but {problem}")
    return plan.with_on_loss(on_loss)


def _why_not_replaceable(spec: RLJobSpec, plan: Plan, name: str, on_loss: Mapping[str, OnLoss]) -> str | None:
    if name in TRAINERS:
        return f"{name}'s ranks train one model together (their gradients are all-reduced every step)"
    group = model_parallel_size(spec, name)
    if group is not None:
        return f"{name} runs {group[0]} parallel size {group[1]}"
    held: dict[tuple[int, int], str] = {}
    for component, process in plan.processes():
        if on_loss.get(component.name, OnLoss.RESTART_JOB) is OnLoss.RESTART_JOB:
            for gpu in process.held_gpus:
                held.setdefault((process.node_rank, gpu), component.name)
    for process in plan.component(name).processes:
        for gpu in process.held_gpus:
            other = held.get((process.node_rank, gpu))
            if other is not None:
                return (
                    f"its rank {process.rank} shares GPU {gpu} of node {process.node_name} with '{other}' (RestartJob), "
                    "which a loss would take down with it"
                )
    return None

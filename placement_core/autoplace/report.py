"""What `rlplace autotune` prints: the pasteable `cluster:` block, its JSON form, and the `--explain` table.

The block is made with `yaml.safe_dump` from the same mapping the JSON carries, so the text a user pastes and
the data the operator reads cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import yaml
from rich.table import Table

from placement_core.autoplace.search import COLLOCATED, Schedule
from placement_core.jobconfig import EMBODIED

HEADLINE = "Best placement for this task is:"


@dataclass(frozen=True, slots=True)
class ComponentChoice:
    """Where one chain component runs (inclusive global GPU range) and its predicted seconds per batch."""

    gpus: tuple[int, int]
    per_batch: float


@dataclass(frozen=True)
class AutotuneResult:
    """The fastest placement found and what it is predicted to cost.

    `component_placement` is the mapping to paste under `cluster.component_placement`; `components` has one
    entry per chain component (reward, which the profile does not time, is only in the mapping);
    `collocated_cost` is None where collocating every component on all GPUs is not possible.
    `schedules` is the best schedule of each mode, for `--explain`.
    """

    task_type: str
    mode: str
    total_cost: float
    collocated_cost: float | None
    component_placement: dict[str, str]
    components: dict[str, ComponentChoice]
    num_nodes: int
    cost_model: str
    schedules: Mapping[str, Schedule | None] = field(default_factory=dict)

    @property
    def speedup(self) -> float | None:
        """How many times faster than collocating everything (None when that is impossible or free)."""
        if self.collocated_cost is None or self.total_cost <= 0:
            return None
        return self.collocated_cost / self.total_cost

    def to_json(self) -> dict[str, object]:
        return {
            "mode": self.mode,
            "total_cost": self.total_cost,
            "collocated_cost": self.collocated_cost,
            "component_placement": dict(self.component_placement),
            "components": {
                name: {"gpus": list(choice.gpus), "per_batch": choice.per_batch}
                for name, choice in self.components.items()
            },
        }


def gpu_range(start: int, end: int) -> str:
    return f"{start}-{end}"


def placement_mapping(task_type: str, schedule: Schedule, num_gpus: int) -> dict[str, str]:
    """The `component_placement` that realises `schedule`, in chain order, valid as it stands.

    Reasoning: collocated is `actor,rollout,reward: all` (inference shares the actor's GPUs, so it gets no key
    of its own); disaggregated gives each component its range and reward the rollout's GPUs. Embodied:
    `actor,env,rollout: all`, or env and rollout on their ranges with the actor on all GPUs.
    """
    if schedule.mode == COLLOCATED:
        names = ("actor", "env", "rollout") if task_type == EMBODIED else ("actor", "rollout", "reward")
        return {",".join(names): "all"}
    mapping = {}
    for name, (start, end) in zip(schedule.names, schedule.ranges, strict=True):
        if (start, end) == (0, num_gpus - 1) and task_type == EMBODIED:
            mapping[name] = "all"
        else:
            mapping["rollout,reward" if name == "rollout" and task_type != EMBODIED else name] = gpu_range(start, end)
    return mapping


def build_result(
    task_type: str,
    schedules: Mapping[str, Schedule | None],
    best: Schedule,
    num_gpus: int,
    num_nodes: int,
    cost_model: str,
) -> AutotuneResult:
    collocated = schedules.get(COLLOCATED)
    return AutotuneResult(
        task_type=task_type,
        mode=best.mode,
        total_cost=best.total,
        collocated_cost=collocated.total if collocated is not None else None,
        component_placement=placement_mapping(task_type, best, num_gpus),
        components={
            name: ComponentChoice(gpus=rng, per_batch=per_batch)
            for name, rng, per_batch in zip(best.names, best.ranges, best.per_batch, strict=True)
        },
        num_nodes=num_nodes,
        cost_model=cost_model,
        schedules=dict(schedules),
    )


def summary_line(result: AutotuneResult) -> str:
    """`# predicted iteration time: 289.10 s; collocated: 335.00 s; 1.16x faster` (a YAML comment)."""
    line = f"# predicted iteration time: {result.total_cost:.2f} s"
    if result.collocated_cost is None:
        return f"{line}; collocated: not possible"
    line = f"{line}; collocated: {result.collocated_cost:.2f} s"
    speedup = result.speedup
    return f"{line}; {speedup:.2f}x faster" if speedup is not None else line


def render_text(result: AutotuneResult, cluster: Mapping[str, object] | None = None) -> str:
    """Headline, blank line, the `cluster:` block, then the comment line.

    With `cluster` (the config's own `cluster:` section) the block is that whole section with only
    `component_placement` replaced, so pasting it over the config's section cannot change the cluster
    (accelerators_per_node, node_groups and the rest stay as the config had them).
    """
    section = dict(cluster) if cluster is not None else {"num_nodes": result.num_nodes}
    section["component_placement"] = dict(result.component_placement)
    body = yaml.safe_dump({"cluster": section}, sort_keys=False, indent=2, default_flow_style=False, allow_unicode=True)
    return f"{HEADLINE}\n\n{body}{summary_line(result)}"


def explain_table(result: AutotuneResult) -> Table:
    """The best schedule of each mode, side by side, with the chosen one marked."""
    table = Table(title=f"best schedule per mode ({result.cost_model} cost model)", title_justify="left")
    for column in ("mode", "placement", "seconds per batch", "iteration (s)", ""):
        table.add_column(column, justify="right" if column == "iteration (s)" else "left")
    for mode, schedule in result.schedules.items():
        if schedule is None:
            table.add_row(mode, "not possible", "-", "-", "")
            continue
        where = ", ".join(
            f"{name} {gpu_range(*rng)}" for name, rng in zip(schedule.names, schedule.ranges, strict=True)
        )
        per_batch = ", ".join(f"{name} {p:.4g}" for name, p in zip(schedule.names, schedule.per_batch, strict=True))
        chosen = "chosen" if mode == result.mode else ""
        table.add_row(mode, where, per_batch, f"{schedule.total:.2f}", chosen)
    return table

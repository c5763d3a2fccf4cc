"""What `rlplace autotune` prints: the pasteable `cluster:` block, its JSON form, and the `--explain` table.

The block is made with `yaml.safe_dump` from the same mapping the JSON carries, so the text a user pastes and
the data the operator reads cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import yaml
from rich.table import Table

from placement_core.autoplace.search import COLLOCATED, Schedule
from placement_core.cluster import CLUSTER_GROUP
from placement_core.jobconfig import EMBODIED, REASONING

if TYPE_CHECKING:
    from placement_core.autoplace.hetero import HeteroSummary

HEADLINE = "Best placement for this task is:"


@dataclass(frozen=True, slots=True)
class ComponentChoice:
    """Where one chain component runs (inclusive global GPU range) and its predicted seconds per batch."""

    gpus: tuple[int, int]
    per_batch: float
    node_group: str | None = None
    """The node group whose ranks `gpus` counts (node groups of different GPUs only)."""


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
    hetero: HeteroSummary | None = None
    """Per-type estimates, assumptions and sync settings when the job gave per-type data (hetero.py)."""
    sync_cost: float = 0.0
    sync_link: str = ""
    collective_costs: Mapping[str, float] = field(default_factory=dict)
    """Seconds per iteration of each component's own collectives, where priced (included in total_cost)."""
    collective_links: Mapping[str, str] = field(default_factory=dict)

    @property
    def speedup(self) -> float | None:
        """How many times faster than collocating everything (None when that is impossible or free)."""
        if self.collocated_cost is None or self.total_cost <= 0:
            return None
        return self.collocated_cost / self.total_cost

    def to_json(self) -> dict[str, object]:
        data: dict[str, object] = {
            "mode": self.mode,
            "total_cost": self.total_cost,
            "collocated_cost": self.collocated_cost,
            "component_placement": dict(self.component_placement),
            "components": {
                name: {"gpus": list(choice.gpus), "per_batch": choice.per_batch}
                | ({"node_group": choice.node_group} if choice.node_group is not None else {})
                for name, choice in self.components.items()
            },
        }
        if self.hetero is not None:
            data["sync_cost"] = self.sync_cost
            data["sync_link"] = self.sync_link
            if self.collective_costs:
                data["collectives"] = {
                    name: {"seconds": seconds, "link": self.collective_links[name]}
                    for name, seconds in self.collective_costs.items()
                }
            data["notes"] = list(self.hetero.notes)
            data["estimates"] = [
                {
                    "component": e.component,
                    "node_group": e.node_group,
                    "accelerator_type": e.accelerator_type,
                    "gpus": e.gpus,
                    "seconds": e.seconds,
                    "why_not": e.why_not,
                    "memory_gb": e.memory_gb,
                    "accelerator_memory_gb": e.accelerator_memory_gb,
                }
                for e in self.hetero.estimates
            ]
        return data


def gpu_range(start: int, end: int) -> str:
    return f"{start}-{end}"


#: The components of a collocated placement's one entry, on `all` GPUs (inference shares the actor's GPUs in a
#: collocated reasoning job: the actor recomputes the log-probs itself).
COLLOCATED_COMPONENTS = {REASONING: ("actor", "rollout", "reward"), EMBODIED: ("actor", "env", "rollout")}


def collocated_mapping(task_type: str) -> dict[str, str]:
    """The `component_placement` of every component on all GPUs: `actor,rollout,reward: all` for reasoning."""
    return {",".join(COLLOCATED_COMPONENTS[task_type if task_type == EMBODIED else REASONING]): "all"}


def placement_mapping(task_type: str, schedule: Schedule, num_gpus: int) -> dict[str, str]:
    """The `component_placement` that realises `schedule`, in chain order, valid as it stands.

    Reasoning: collocated is `actor,rollout,reward: all` (inference shares the actor's GPUs, so it gets no key
    of its own); disaggregated gives each component its range and reward the rollout's GPUs. Embodied:
    `actor,env,rollout: all`, or env and rollout on their ranges with the actor on all GPUs.
    """
    if schedule.node_groups:
        return _node_group_mapping(schedule)
    if schedule.mode == COLLOCATED:
        return collocated_mapping(task_type)
    mapping = {}
    for name, (start, end) in zip(schedule.names, schedule.ranges, strict=True):
        if (start, end) == (0, num_gpus - 1) and task_type == EMBODIED:
            mapping[name] = "all"
        else:
            mapping["rollout,reward" if name == "rollout" and task_type != EMBODIED else name] = gpu_range(start, end)
    return mapping


def _node_group_mapping(schedule: Schedule) -> dict[str, object]:
    """A reasoning placement over node groups: each value `{node_group: X, placement: ...}` (plain strings on
    the implicit `cluster` group), reward on the rollout's GPUs; what `rlplace plan` reads as it stands."""

    def value(label: str, placement: str) -> object:
        return placement if label == CLUSTER_GROUP else {"node_group": label, "placement": placement}

    if schedule.mode == COLLOCATED:
        return {"actor,rollout,reward": value(schedule.node_groups[0], "all")}
    return {
        ("rollout,reward" if name == "rollout" else name): value(label, gpu_range(*rng))
        for name, rng, label in zip(schedule.names, schedule.ranges, schedule.node_groups, strict=True)
    }


def build_result(
    task_type: str,
    schedules: Mapping[str, Schedule | None],
    best: Schedule,
    num_gpus: int,
    num_nodes: int,
    cost_model: str,
    hetero: HeteroSummary | None = None,
) -> AutotuneResult:
    collocated = schedules.get(COLLOCATED)
    groups = best.node_groups or (None,) * len(best.names)
    priced = _priced_collectives(best, hetero)
    return AutotuneResult(
        task_type=task_type,
        mode=best.mode,
        total_cost=best.total,
        collocated_cost=collocated.total if collocated is not None else None,
        component_placement=placement_mapping(task_type, best, num_gpus),
        components={
            name: ComponentChoice(gpus=rng, per_batch=per_batch, node_group=group)
            for name, rng, per_batch, group in zip(best.names, best.ranges, best.per_batch, groups, strict=True)
        },
        num_nodes=num_nodes,
        cost_model=cost_model,
        schedules=dict(schedules),
        hetero=hetero,
        sync_cost=best.sync,
        sync_link=best.sync_link,
        collective_costs={name: seconds for name, seconds, _ in priced},
        collective_links={name: link for name, _, link in priced},
    )


def _priced_collectives(best: Schedule, hetero: HeteroSummary | None) -> list[tuple[str, float, str]]:
    """(component, seconds, link) of each component whose collectives the job priced (a collectives term in
    profile_data)."""
    if hetero is None or not best.collectives:
        return []
    return [
        (name, seconds, link)
        for name, seconds, link in zip(best.names, best.collectives, best.collective_links, strict=True)
        if hetero.collective_gb.get(name)
    ]


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
    return f"{HEADLINE}\n\n{body}{summary_line(result)}" + "".join(f"\n# {line}" for line in hetero_lines(result))


def hetero_lines(result: AutotuneResult) -> list[str]:
    """The weight sync and the assumptions made, as comment lines (node groups of different GPUs only)."""
    if result.hetero is None:
        return []
    from placement_core.autoplace.hetero import LINK_WORDS

    lines = []
    if result.hetero.model_size_gb:
        bandwidth = result.hetero.bandwidth_gb_s[result.sync_link]
        lines.append(
            f"weight sync: {result.sync_cost:.2f} s per iteration ({result.hetero.model_size_gb:g} GB "
            f"{LINK_WORDS[result.sync_link]} at {bandwidth:g} GB/s), included above"
        )
    else:
        lines.append("weight sync: not priced (no model_size_gb in profile_data)")
    for name, seconds in result.collective_costs.items():
        link = result.collective_links[name]
        gb = result.hetero.collective_gb[name]
        where = f"{LINK_WORDS[link]}, at {result.hetero.bandwidth_gb_s[link]:g} GB/s" if link else "one GPU, no peers"
        lines.append(f"{name} collectives: {seconds:.2f} s per iteration ({gb:g} GB per GPU, {where}), included above")
    lines.extend(result.hetero.notes)
    return lines


def explain_table(result: AutotuneResult) -> Table:
    """The best schedule of each mode, side by side, with the chosen one marked."""
    table = Table(title=f"best schedule per mode ({result.cost_model} cost model)", title_justify="left")
    for column in ("mode", "placement", "seconds per batch", "iteration (s)", ""):
        table.add_column(column, justify="right" if column == "iteration (s)" else "left")
    for mode, schedule in result.schedules.items():
        if schedule is None:
            table.add_row(mode, "not possible", "-", "-", "")
            continue
        groups = schedule.node_groups or ("",) * len(schedule.names)
        where = ", ".join(
            f"{name} {f'{group}:' if group else ''}{gpu_range(*rng)}"
            for name, rng, group in zip(schedule.names, schedule.ranges, groups, strict=True)
        )
        per_batch = ", ".join(f"{name} {p:.4g}" for name, p in zip(schedule.names, schedule.per_batch, strict=True))
        chosen = "chosen" if mode == result.mode else ""
        if schedule.sync_link:
            per_batch += f"; weight sync {schedule.sync:.3g} s per iteration ({schedule.sync_link.replace('_', ' ')})"
        for name, seconds, link in zip(schedule.names, schedule.collectives, schedule.collective_links, strict=False):
            if seconds:
                per_batch += f"; {name} collectives {seconds:.3g} s ({link.replace('_', ' ')})"
        table.add_row(mode, where, per_batch, f"{schedule.total:.2f}", chosen)
    return table


def estimates_table(result: AutotuneResult) -> Table | None:
    """Each component on each node group: its best time there alone, the memory check (hetero only)."""
    if result.hetero is None:
        return None
    table = Table(title="each component per node group (alone, at its best GPU count there)", title_justify="left")
    for column in ("component", "node group", "type", "GPUs", "iteration (s)", "memory per GPU", ""):
        table.add_column(column, justify="right" if column in ("GPUs", "iteration (s)") else "left")
    for e in result.hetero.estimates:
        need = f"{e.memory_gb:g} GB" if e.memory_gb is not None else "not given"
        have = f"{e.accelerator_memory_gb:g} GB" if e.accelerator_memory_gb is not None else "unknown"
        fits = (
            ""
            if e.memory_gb is None or e.accelerator_memory_gb is None
            else (" fits" if e.memory_gb <= e.accelerator_memory_gb else " DOES NOT FIT")
        )
        seconds = f"{e.seconds:.2f}" if e.seconds is not None else "-"
        gpus = str(e.gpus) if e.seconds is not None else "-"
        table.add_row(
            e.component, e.node_group, e.accelerator_type, gpus, seconds, f"{need} of {have}{fits}", e.why_not or ""
        )
    return table

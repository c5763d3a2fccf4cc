"""A placement as plain data: what `rlplace plan --format json` prints, the operator stores in the
`<job>-placement` ConfigMap, and the Ray launcher reads back.

One builder serves all three, so the plan a worker starts from is exactly the plan a person inspected.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from placement_core.cluster import Cluster
from placement_core.components import ComponentPlacement, HybridComponentPlacement, ModelParallelComponentPlacement
from placement_core.errors import PlacementError
from placement_core.jobconfig import config_value
from placement_core.placement import Placement, placement_env

PlacementKind = Literal["hybrid", "model-parallel"]
PLACEMENT_KINDS: tuple[PlacementKind, ...] = ("hybrid", "model-parallel")


def default_placement_kind(config: Mapping[str, object]) -> PlacementKind:
    """Reasoning tasks (`runner.task_type: reasoning`) are model-parallel; everything else is hybrid."""
    return "model-parallel" if config_value(config, "runner.task_type") == "reasoning" else "hybrid"


def component_placement(
    config: Mapping[str, object], cluster: Cluster | None = None, kind: PlacementKind | None = None
) -> ComponentPlacement:
    """Parse a whole job config; the cluster comes from its `cluster:` section unless given."""
    if cluster is None:
        section = config.get("cluster")
        if section is None:
            raise PlacementError("the config has no 'cluster' section")
        cluster = Cluster.from_config(section)
    kind = kind or default_placement_kind(config)
    if kind == "model-parallel":
        return ModelParallelComponentPlacement(config, cluster)
    return HybridComponentPlacement(config, cluster)


def process_env(placement: ComponentPlacement, component: str, process: Placement, master_addr: str) -> dict[str, str]:
    """The full environment of one process: its node group's variables, then the placement's own."""
    group = placement.cluster.get_node_group(process.node_group_label)
    env = group.env_for(process.cluster_node_rank)
    env.update(placement_env(process, placement.get_world_size(component), master_addr))
    return env


def master_addr(placement: ComponentPlacement, processes: list[Placement]) -> str:
    """MASTER_ADDR of a component: the node of its rank-0 process."""
    return placement.cluster.nodes[processes[0].cluster_node_rank].display_name


def shares_with(placement: ComponentPlacement) -> dict[str, list[str]]:
    """For each component, the other components that hold at least one of the same resources."""
    units = {name: placement.get_units(name) for name in placement.components}
    return {
        name: [other for other in units if other != name and not units[name].isdisjoint(units[other])] for name in units
    }


def build_plan(placement: ComponentPlacement, isolate_accelerator: bool = True, with_env: bool = False) -> dict:
    """The placement as JSON-ready data: mode, and per component its strategy and one entry per process."""
    cluster = placement.cluster
    sharing = shares_with(placement)
    components = {}
    for name in placement.components:
        processes = placement.get_placement(name, isolate_accelerator)
        master = master_addr(placement, processes)
        on_nodes = placement.get_strategy(name).kind == "node"
        hardware = {g.label: None if on_nodes else g.hardware_type for g in cluster.node_groups}
        entries = []
        for p in processes:
            entry = {
                "rank": p.rank,
                "cluster_node_rank": p.cluster_node_rank,
                "placement_node_rank": p.placement_node_rank,
                "local_accelerator_rank": p.local_accelerator_rank,
                "accelerator_type": p.accelerator_type,
                "local_rank": p.local_rank,
                "local_world_size": p.local_world_size,
                "visible_accelerators": p.visible_accelerators,
                "isolate_accelerator": p.isolate_accelerator,
                "local_hardware_ranks": p.local_hardware_ranks,
                "node_group_label": p.node_group_label,
                "node_name": cluster.nodes[p.cluster_node_rank].display_name,
                # What local_hardware_ranks count: Accelerator (GPUs), a robot type, or None (whole nodes).
                "hardware_type": hardware[p.node_group_label],
            }
            if with_env:
                entry["env"] = process_env(placement, name, p, master)
            entries.append(entry)
        components[name] = {
            "world_size": len(processes),
            "hardware_ranks": placement.get_hardware_ranks(name),
            "strategy": placement.get_strategy(name).kind,
            "node_groups": list(placement.get_node_groups(name)),
            "shares_with": sharing[name],
            "processes": entries,
        }
    return {"mode": placement.placement_mode.value, "components": components}

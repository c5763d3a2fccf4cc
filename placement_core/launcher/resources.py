"""Checking a plan's demand against what the Ray cluster declares and has free, as one-line messages.

Pure (no Ray), so every message is tested without a cluster.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from placement_core.contract import node_resource, parse_gpu_resource, parse_node_resource
from placement_core.errors import LaunchError
from placement_core.launcher.plan import LaunchPlan


def check_resources(
    plan: LaunchPlan,
    components: Sequence[str],
    total: Mapping[str, float],
    available: Mapping[str, float] | None = None,
) -> None:
    """Raise LaunchError if the Ray cluster lacks a node or GPU the components need, or (given `available`)
    if some are held by running actors. Pure, so the messages are tested without Ray.
    """
    demand = plan.demand(components)
    missing = _missing(demand, total)
    if missing:
        raise LaunchError(
            f"the Ray cluster lacks what {_names(components)} need: {'; '.join(missing)} ({_declared(total)})"
        )
    if available is not None:
        busy = _busy(demand, available)
        if busy:
            raise LaunchError(f"{_names(components)} cannot start, resources held by running actors: {'; '.join(busy)}")


def absent_nodes(plan: LaunchPlan, components: Sequence[str], total: Mapping[str, float]) -> list[int]:
    """The node ranks the components run on that no live Ray node declares (yet)."""
    return _absent_nodes(plan.demand(components), total)


def _absent_nodes(demand: Mapping[str, float], total: Mapping[str, float]) -> list[int]:
    return sorted({r for key in demand if (r := _resource_node(key)) is not None and node_resource(r) not in total})


def _missing(demand: Mapping[str, float], total: Mapping[str, float]) -> list[str]:
    """Absent nodes, then absent GPUs per node, as short phrases."""
    nodes = _absent_nodes(demand, total)
    gpus: dict[int, list[int]] = {}
    for key in demand:
        parsed = parse_gpu_resource(key)
        if parsed and key not in total and parsed[0] not in nodes:
            gpus.setdefault(parsed[0], []).append(parsed[1])
    phrases = [f"node rank {r}" for r in nodes]
    for rank in sorted(gpus):
        have = _gpus_of(rank, total)
        phrases.append(f"GPU {_span(gpus[rank])} on node rank {rank} (it declares {len(have)} GPUs)")
    return phrases


def _busy(demand: Mapping[str, float], available: Mapping[str, float]) -> list[str]:
    """Resources whose free amount is below the demand; Ray omits fully used resources, so absent means 0."""
    phrases = []
    for key in sorted(demand, key=_resource_order):
        free = available.get(key, 0.0)
        if free + 1e-6 < demand[key]:
            phrases.append(f"{_describe(key)} needs {demand[key]:g}, {free:g} free")
    return phrases


def _resource_node(key: str) -> int | None:
    gpu = parse_gpu_resource(key)
    return gpu[0] if gpu else parse_node_resource(key)


def _resource_order(key: str) -> tuple[int, int]:
    gpu = parse_gpu_resource(key)
    return gpu if gpu else (parse_node_resource(key) or 0, -1)


def _describe(key: str) -> str:
    gpu = parse_gpu_resource(key)
    return f"GPU {gpu[1]} on node rank {gpu[0]}" if gpu else f"node rank {parse_node_resource(key)} ('{key}')"


def _gpus_of(rank: int, total: Mapping[str, float]) -> list[int]:
    return sorted(g for key in total if (p := parse_gpu_resource(key)) and p[0] == rank for g in [p[1]])


def _declared(total: Mapping[str, float]) -> str:
    ranks = sorted(r for key in total if (r := parse_node_resource(key)) is not None)
    return (
        f"Ray nodes declare node ranks {_span(ranks)}"
        if ranks
        else f"no Ray node declares a '{node_resource(0)}'-style resource"
    )


def _names(components: Sequence[str]) -> str:
    return ", ".join(f"component '{c}'" for c in components)


def _span(values: Sequence[int]) -> str:
    """`[0, 1, 2, 5]` -> `0-2,5`: compact, like the placement grammar."""
    ordered = sorted(set(values))
    if not ordered:
        return "none"
    runs = [[ordered[0], ordered[0]]]
    for value in ordered[1:]:
        if value == runs[-1][1] + 1:
            runs[-1][1] = value
        else:
            runs.append([value, value])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)

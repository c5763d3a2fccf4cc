"""The binding of a framework that leaves GPU ids to Ray (veRL), observed per resource pool against the plan.

veRL does not take node or GPU ids: each of its resource pools is a list of per-node placement groups of
one-GPU bundles, ordered by node IP, and Ray picks which GPU each actor gets. rlplace shapes the Ray cluster
to the plan (only the planned nodes and GPUs exist) and observes what Ray did; it cannot pin it. So this
check asks what can be held against the plan, not more:

- **pools.** The plan's components that share one placement (the same GPUs of the same nodes) form a pool:
  veRL runs the roles of a pool in one process per GPU (its colocated WorkerDict). A worker group of the
  framework (the actors that share veRL's WG_PREFIX) is matched to the pool whose nodes hold most of its
  processes;
- **per node, per pool:** as many processes as the plan has there, each with as many GPUs as planned, and
  no GPU shared between processes whose planned GPUs are disjoint (a pool of the plan that collocates
  processes on one GPU may share it). The planned process a check is written for is the one of the same
  node, in rank order: veRL's ranks follow its IP order, so which node gets which veRL rank is Ray's and IP's
  choice, not the plan's, and is not compared;
- **both views:** each process's own record (observe/probe.py's worker setup hook: its node, and the GPU
  ids and CUDA_VISIBLE_DEVICES Ray gave it) and Ray's State API (its actor on a Ray node of the same rank).

Every component of a pool gets the same verdict for each of its processes. The GPU ids are reported
(ProcessCheck.gpu_ids; the RLJob's status.observedPlacement) but never compared with the plan's ids: they
were observed, not enforced. As in observe/processes.py, there is no report (None) until every planned process
was seen in both views, unless one seen already differs or `final`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import combinations

from placement_core.contract import KUBE_NODE_ENV, NODE_RANK_ENV
from placement_core.observe.processes import probe_lines
from placement_core.observe.verify import BindingReport, ProcessCheck
from placement_core.plan import Plan, ProcessPlan

#: veRL's worker actor names: `<prefix><class>_<placement group index>:<local rank>`.
_POOL_ACTOR = re.compile(r"^(?P<group>.+)_\d+:\d+$")


@dataclass(frozen=True, slots=True)
class PoolProcess:
    """One GPU process of the framework, as its own record showed it."""

    actor: str
    """Its Ray actor name."""
    group: str
    """Its worker group: veRL's WG_PREFIX, else the actor name before `_<pg>:<rank>`."""
    rank: int
    """RANK the framework gave it within the group."""
    node_rank: int | None
    """The plan node rank of its pod (None: a pod without one, i.e. the head)."""
    kube_node: str
    gpu_ids: tuple[str, ...]
    """The GPU ids Ray assigned it."""
    cuda_visible_devices: str | None
    uuids: tuple[str, ...] | None = None


@dataclass(frozen=True)
class ObservedPools:
    """What the driver's log showed: GPU processes by actor name, and the State API's node rank per actor."""

    processes: Mapping[str, PoolProcess] = field(default_factory=dict)
    actors: Mapping[str, int | None] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.processes and not self.actors


@dataclass(frozen=True, slots=True)
class Pool:
    """Components of the plan with one placement, and that placement's processes (the first component's)."""

    components: tuple[str, ...]
    processes: tuple[ProcessPlan, ...]

    @property
    def name(self) -> str:
        return ",".join(self.components)


def pools(plan: Plan) -> list[Pool]:
    """The plan's pools, in the order of their first component."""
    by_shape: dict[tuple, tuple[list[str], tuple[ProcessPlan, ...]]] = {}
    for component in plan.components:
        shape = tuple((p.node_rank, p.placement.visible_accelerators) for p in component.processes)
        by_shape.setdefault(shape, ([], component.processes))[0].append(component.name)
    return [Pool(tuple(names), processes) for names, processes in by_shape.values()]


def _int(value: object) -> int | None:
    return int(value) if isinstance(value, str | int) and str(value).isdigit() else None


def _process(raw: dict) -> PoolProcess | None:
    env, actor, gpus = raw.get("env"), raw.get("actor"), raw.get("gpu_ids")
    if not isinstance(env, dict) or not isinstance(actor, str) or not isinstance(gpus, list) or not gpus:
        return None  # not an actor, or one without GPUs (veRL's TaskRunner, its register center)
    named = _POOL_ACTOR.match(actor)
    group = str(env.get("WG_PREFIX") or (named.group("group") if named else actor))
    rank = _int(env.get("RANK"))
    uuids = raw.get("uuids")
    return PoolProcess(
        actor,
        group,
        rank if rank is not None else 0,
        _int(env.get(NODE_RANK_ENV)),
        str(env.get(KUBE_NODE_ENV, "")),
        tuple(str(g) for g in gpus),
        None if env.get("CUDA_VISIBLE_DEVICES") is None else str(env["CUDA_VISIBLE_DEVICES"]),
        tuple(str(u) for u in uuids) if isinstance(uuids, list) else None,
    )


def observed_pools_in(log: str) -> ObservedPools:
    """The worker setup hook's records and the State API's views in a driver's log (observe.probe_lines)."""
    processes: dict[str, PoolProcess] = {}
    actors: dict[str, int | None] = {}
    for record, entries in probe_lines(log):
        process = None if record is None else _process(record)
        if process is not None:
            processes[process.actor] = process
        for entry in entries:
            if isinstance(entry.get("name"), str):
                node_rank = entry.get("node_rank")
                actors[entry["name"]] = node_rank if isinstance(node_rank, int) else None
    return ObservedPools(processes, actors)


def _matched(plan_pools: list[Pool], groups: dict[str, list[PoolProcess]]) -> dict[str, Pool | None]:
    """Each worker group's pool: the one whose planned nodes hold most of its processes (larger groups
    choose first; a pool goes to one group)."""
    planned = {pool.name: Counter(p.node_rank for p in pool.processes) for pool in plan_pools}
    taken: set[str] = set()
    matched: dict[str, Pool | None] = {}
    for group in sorted(groups, key=lambda g: (-len(groups[g]), g)):
        seen = Counter(p.node_rank for p in groups[group])
        best, best_overlap = None, -1
        for pool in plan_pools:
            if pool.name in taken:
                continue
            overlap = sum((seen & planned[pool.name]).values())
            if overlap > best_overlap:
                best, best_overlap = pool, overlap
        matched[group] = best
        if best is not None:
            taken.add(best.name)
    return matched


def pool_report(plan: Plan, observed: ObservedPools, *, final: bool = False) -> BindingReport | None:
    """The binding report of a framework job whose GPU ids Ray assigns, or None while it cannot be told yet
    (see the module's rules)."""
    plan_pools = pools(plan)
    groups: dict[str, list[PoolProcess]] = {}
    for process in observed.processes.values():
        groups.setdefault(process.group, []).append(process)
    matched = _matched(plan_pools, groups)
    paired: dict[tuple[str, int], PoolProcess] = {}  # (pool, planned rank) -> the process on its node
    extra: list[tuple[Pool | None, PoolProcess]] = []
    for group, processes in groups.items():
        pool = matched[group]
        if pool is None:
            extra += [(None, p) for p in processes]
            continue
        planned_by_node: dict[int, list[ProcessPlan]] = {}
        for planned in pool.processes:
            planned_by_node.setdefault(planned.node_rank, []).append(planned)
        for process in sorted(processes, key=lambda p: p.rank):
            free = planned_by_node.get(process.node_rank) if process.node_rank is not None else None
            if free:
                paired[(pool.name, free.pop(0).rank)] = process
            else:
                extra.append((pool, process))
    shared = _shared_gpus(plan_pools, paired)
    pairs: list[tuple[ProcessCheck, ProcessPlan]] = []
    complete, mismatch = True, False
    for pool in plan_pools:
        for planned in pool.processes:
            process = paired.get((pool.name, planned.rank))
            problems = _problems(planned, process, observed.actors, final) + shared.get((pool.name, planned.rank), ())
            both = process is not None and process.actor in observed.actors
            complete = complete and both
            seen = bool(problems) or final or both
            mismatch = mismatch or (bool(problems) and seen)
            for component in pool.components:
                check = ProcessCheck(
                    component,
                    planned.rank,
                    planned.node_name,
                    problems if seen else ("not seen in both views yet",),
                    None if process is None else process.uuids,
                    None if process is None or process.uuids is None else "nvml",
                    seen,
                    None if process is None else process.gpu_ids,
                )
                pairs.append((check, planned))
    report = BindingReport.of(pairs, enforced=False)
    extra_checks = tuple(_extra(plan_pools, pool, process) for pool, process in extra)
    if not complete and not final and not mismatch and not extra_checks:
        return None
    return BindingReport((*report.checks, *extra_checks), report.components, enforced=False)


def _problems(
    planned: ProcessPlan, process: PoolProcess | None, actors: Mapping[str, int | None], final: bool
) -> tuple[str, ...]:
    if process is None:
        return ("no process of the framework on this node (its worker group is smaller than planned)",) if final else ()
    problems: list[str] = []
    wanted = len(planned.placement.visible_accelerators)
    if len(process.gpu_ids) != wanted:
        problems.append(f"Ray gave actor '{process.actor}' {len(process.gpu_ids)} GPUs, planned {wanted}")
    if process.uuids is not None and len(process.uuids) != wanted:
        problems.append(f"nvml shows actor '{process.actor}' {len(process.uuids)} GPUs, planned {wanted}")
    if process.kube_node and process.kube_node != planned.node_name:
        problems.append(f"actor '{process.actor}' runs on Kubernetes node '{process.kube_node}', planned "
                        f"'{planned.node_name}'")  # fmt: skip
    if process.actor not in actors:
        if final:
            problems.append(f"no live Ray actor '{process.actor}' in Ray's State API")
    elif actors[process.actor] != process.node_rank:
        problems.append(
            f"Ray's State API shows actor '{process.actor}' on node rank {actors[process.actor]}, its own record "
            f"on {process.node_rank}"
        )
    return tuple(problems)


def _shared_gpus(
    plan_pools: list[Pool], paired: Mapping[tuple[str, int], PoolProcess]
) -> dict[tuple[str, int], tuple[str, ...]]:
    """Processes on one node given a GPU in common while their planned GPUs are disjoint (compared within each
    node only: a job of thousands of processes has a few per node)."""
    planned = {(pool.name, p.rank): p for pool in plan_pools for p in pool.processes}
    problems: dict[tuple[str, int], tuple[str, ...]] = {}
    by_node: dict[int | None, list[tuple[str, int]]] = {}
    for key in sorted(paired):
        by_node.setdefault(paired[key].node_rank, []).append(key)
    for one, other in (pair for keys in by_node.values() for pair in combinations(keys, 2)):
        a, b = paired[one], paired[other]
        if a.actor == b.actor:
            continue
        common = sorted(set(a.gpu_ids) & set(b.gpu_ids))
        if common and not set(planned[one].held_gpus) & set(planned[other].held_gpus):
            problems[one] = (
                *problems.get(one, ()),
                f"shares GPU {common[0]} with actor '{b.actor}' ({other[0]} rank {other[1]}); the plan gives "
                "them different GPUs",
            )
    return problems


def _extra(plan_pools: list[Pool], pool: Pool | None, process: PoolProcess) -> ProcessCheck:
    where = f"node rank {process.node_rank}" if process.node_rank is not None else "the head"
    if pool is None:
        planned = "; ".join(f"{p.name}: {len(p.processes)}" for p in plan_pools)
        problem = f"actor '{process.actor}' of a worker group that matches no pool of the plan ({planned})"
        component = plan_pools[0].components[0] if plan_pools else process.group
    else:
        there = sum(1 for p in pool.processes if p.node_rank == process.node_rank)
        problem = f"actor '{process.actor}' runs on {where}, where the plan has {there} processes of {pool.name}"
        component = pool.components[0]
    return ProcessCheck(
        component, process.rank, process.kube_node or where, (problem,), None, None, True, process.gpu_ids
    )

"""Auto placement on node groups of different GPUs (docs/autoplace.md, "Node groups of different GPUs").

Used when a job gives per-type data: a node group's `accelerator_type` / `accelerator_memory_gb`, or in
`profile_data` a `<component>_cost_by_type`, `<component>_memory_gb`, `model_size_gb`,
`sync_bandwidth_gb_s` or `collocated_offload`. Without any of them autotune runs today's search unchanged.

The model. A *pool* is one GPU node group (the implicit `cluster` group when none is declared); a component
runs inside one pool, never across two. On a pool of type t a component's cost per batch is the scaling or
linear model of `cost.py` with c = (its `_cost_by_type[t]`) / rbs measured on W_t GPUs (every GPU of type t
in the cluster), or with the single `<component>_cost` on the profiled W GPUs, the same time on every type
(an assumption the output states). A component never goes where its `<component>_memory_gb` exceeds the
pool's GPU memory; collocated components add up (or, with `collocated_offload`, the largest counts, as they
take turns on the GPUs). After each iteration the actor's weights (`model_size_gb`) go to the rollout over
the slowest link between them: the same node (collocated, or both ranges on one node), across nodes of one
group, or across node groups.

The space. Collocated: every component on all GPUs of one pool (`{node_group: X, placement: all}`), when
the placement class accepts it. Disaggregated: each component on its own pool and GPU count; inside a pool
the components take contiguous ranges from its GPU 0 in chain order (so the rollout, first in the chain,
starts there and its engines must not straddle nodes), and a pool's GPUs may be left idle. The search is
exact over this space: `best_counts` finds min sum + (rbs-1) max of the per-batch costs under per-pool GPU
budgets for every assignment of components to pools. Only GPU counts on each component's *frontier* (a
count whose cost is lower than every smaller count's) can be needed, since a smaller count never breaks a
budget and the objective only grows with each cost; the last component's best is a prefix minimum of its
cost table. The weight sync depends on whether rollout and actor share a node; that case is searched on its
own (pool budget = its first node's GPUs) and the rest with the across-nodes price, which over-prices only
points the first case already prices right (the same node is never slower than across nodes: checked).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np

from placement_core.autoplace.cost import CostModel, StageCost, collocated_total, pipelined_total
from placement_core.autoplace.inputs import (
    ROLLOUT,
    ReasoningTask,
    collocated_fits,
    engines_fit,
    gpus_per_node,
    reasoning_chain,
    reasoning_task,
    seconds,
)
from placement_core.autoplace.search import COLLOCATED, DISAGGREGATED, TIE_RTOL, Progress, Schedule, contiguous_ranges
from placement_core.cluster import ACCELERATOR, CLUSTER_GROUP, NODE_GROUP, Cluster, NodeGroup
from placement_core.errors import PlacementError
from placement_core.jobconfig import Job

#: profile_data keys of this model (besides `<component>_cost`).
COST_BY_TYPE = "_cost_by_type"
MEMORY = "_memory_gb"
MODEL_SIZE = "model_size_gb"
BANDWIDTH = "sync_bandwidth_gb_s"
OFFLOAD = "collocated_offload"
NETWORK = "network_levels"
COLLECTIVE = "_collective_gb"

SAME_NODE = "same_node"
ACROSS_NODES = "across_nodes"
ACROSS_GROUPS = "across_groups"
# Where the nodes' network domains are known (Node.domains: the operator reads the NodeGroup's levels; the CLI
# reads profile_data.network_levels), the link is the narrowest domain both sides share instead.
SAME_RACK = "same_rack"
SAME_BLOCK = "same_block"
ACROSS_BLOCKS = "across_blocks"
#: GB/s assumed for the weight sync when the profile does not say (docs/autoplace.md): NVLink-class inside a
#: node, a 100 Gb/s network between nodes of a group, 25 Gb/s Ethernet between node groups; with domains known,
#: a 200 Gb/s non-blocking rack, the 100 Gb/s network within a block, a 4:1 oversubscribed spine between blocks.
DEFAULT_BANDWIDTH_GB_S = {
    SAME_NODE: 100.0,
    ACROSS_NODES: 12.5,
    ACROSS_GROUPS: 3.125,
    SAME_RACK: 25.0,
    SAME_BLOCK: 12.5,
    ACROSS_BLOCKS: 3.125,
}
LINK_WORDS = {
    SAME_NODE: "same node",
    ACROSS_NODES: "across nodes",
    ACROSS_GROUPS: "across node groups",
    SAME_RACK: "within one rack",
    SAME_BLOCK: "across racks of one block",
    ACROSS_BLOCKS: "across blocks",
}
#: Links from nearer to farther that must not get faster (checked on input): the search prices a group kept within
#: its first node, rack or block at the nearer link, which is only right if nearer is never slower.
LINK_ORDER = ((SAME_NODE, ACROSS_NODES), (SAME_NODE, SAME_RACK, SAME_BLOCK, ACROSS_BLOCKS))


def profile_keys(chain: Sequence[str] = ("rollout", "inference", "actor")) -> tuple[str, ...]:
    """Every profile_data key this model reads (for the unknown-key check of the config reader)."""
    per_component = tuple(f"{name}{suffix}" for name in chain for suffix in (COST_BY_TYPE, MEMORY, COLLECTIVE))
    return (*per_component, MODEL_SIZE, BANDWIDTH, OFFLOAD, NETWORK)


def wants_hetero(job: Job) -> bool:
    """Whether the job gives per-type data: a per-type profile key, or GPU node groups that differ in their
    `accelerator_type` / `accelerator_memory_gb`. Otherwise the single-type search answers, exactly as before
    (a cluster whose every GPU group is labelled `a800`, 80 GB, is a single-type cluster)."""
    names = ("rollout", "inference", "actor")
    if any(job.profile.get(key) is not None for key in profile_keys(names)):
        return True
    described = {
        (group.accelerator_type, group.accelerator_memory_gb)
        for group in job.cluster.node_groups
        if group.label not in (CLUSTER_GROUP, NODE_GROUP) and group.hardware_type == ACCELERATOR
    }
    return len(described) > 1 and any(kind is not None or memory is not None for kind, memory in described)


@dataclass(frozen=True, slots=True)
class Pool:
    """One GPU node group the search may place components on."""

    label: str
    accelerator_type: str
    memory_gb: float | None
    node_gpus: tuple[int, ...]
    """GPUs of each of its nodes (with GPUs), in the group's rank order."""
    collocated_ok: bool
    node_domains: tuple[tuple[str, ...], ...] = ()
    """Network domains of each of those nodes, widest first; empty when not known."""

    @property
    def gpus(self) -> int:
        return sum(self.node_gpus)


@dataclass(frozen=True, slots=True)
class Option:
    """One component on one pool: its cost model there (None when it cannot run there, and why)."""

    component: str
    pool: int
    cost: StageCost | None
    why_not: str | None
    memory_gb: float | None
    assumed_same_time: bool


@dataclass(frozen=True)
class HeteroTask:
    base: ReasoningTask
    pools: tuple[Pool, ...]
    options: tuple[tuple[Option, ...], ...]
    """options[i][p]: chain component i on pool p."""
    model_size_gb: float
    bandwidth_gb_s: Mapping[str, float]
    offload: bool
    notes: tuple[str, ...]
    collective_gb: tuple[float, ...]
    """Per chain component, the GB each of its GPUs sends in its own collectives per iteration (0: not priced)."""

    @property
    def chain(self) -> tuple[str, ...]:
        return self.base.chain

    @cached_property
    def tables(self) -> tuple[tuple[np.ndarray, ...], ...]:
        """`tables[i][p]`: `cost_table` of chain component i on pool p, built once for the search, the check of the
        priced search's size and the per-group estimates."""
        return tuple(tuple(cost_table(self, i, p) for p in range(len(self.pools))) for i in range(len(self.chain)))

    def sync_seconds(self, link: str) -> float:
        return self.model_size_gb / self.bandwidth_gb_s[link] if self.model_size_gb else 0.0

    def collective_seconds(self, component: int, link: str) -> float:
        """Seconds per iteration of a component's collectives over `link` (none on one GPU: link '')."""
        gb = self.collective_gb[component]
        return gb / self.bandwidth_gb_s[link] if gb and link else 0.0


# -- inputs ---------------------------------------------------------------------------------------------------


def _positive(profile: Mapping[str, object], key: str) -> float | None:
    value = profile.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise PlacementError(f"profile_data.{key} must be a number of GB > 0, got {value!r}")
    return float(value)


def _pools(job: Job) -> list[Pool]:
    cluster: Cluster = job.cluster
    declared = [
        g
        for g in cluster.node_groups
        if g.label not in (CLUSTER_GROUP, NODE_GROUP)
        and g.hardware_type == ACCELERATOR
        and gpus_per_node(cluster, g.node_ranks)
    ]
    groups: list[NodeGroup] = declared or [cluster.get_node_group(CLUSTER_GROUP)]
    seen: dict[int, str] = {}
    for group in groups:
        for rank in group.node_ranks:
            if rank in seen:
                raise PlacementError(
                    f"node groups '{seen[rank]}' and '{group.label}' share node {rank}: auto placement over node "
                    "groups needs GPU groups that share no nodes"
                )
            seen[rank] = group.label
    settings = job.model_parallel
    sizes = _network_levels(job.profile)
    return [
        Pool(
            label=group.label,
            accelerator_type=group.accelerator_type or group.label,
            memory_gb=group.accelerator_memory_gb,
            node_gpus=tuple(gpus_per_node(cluster, group.node_ranks)),
            collocated_ok=collocated_fits(gpus_per_node(cluster, group.node_ranks), settings),
            node_domains=_node_domains(cluster, group.node_ranks, sizes),
        )
        for group in groups
    ]


def _network_levels(profile: Mapping[str, object]) -> tuple[int, ...]:
    """profile_data.network_levels: nodes per domain, widest first ({block: 32, rack: 4}: node ranks 0-3 are one
    rack, 0-31 one block), for configs whose nodes carry no domains; () when not given."""
    raw = profile.get(NETWORK)
    if raw is None:
        return ()
    example = "{block: 32, rack: 4} (nodes per domain, widest first)"
    if not isinstance(raw, Mapping) or not raw:
        raise PlacementError(f"profile_data.{NETWORK} must be a mapping like {example}, got {raw!r}")
    sizes = []
    for level, value in raw.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise PlacementError(f"profile_data.{NETWORK}.{level} must be a whole number of nodes >= 1, got {value!r}")
        if sizes and value > sizes[-1]:
            raise PlacementError(
                f"profile_data.{NETWORK}: {level} ({value} nodes) is listed after a smaller level: list them widest "
                f"first, like {example}"
            )
        sizes.append(value)
    return tuple(sizes)


def _node_domains(cluster: Cluster, ranks: Sequence[int], sizes: tuple[int, ...]) -> tuple[tuple[str, ...], ...]:
    """The network domains of a group's GPU nodes in rank order: the nodes' own (the operator's), else from
    `network_levels` by node rank, else () (not known: the weight sync is priced per node and group)."""
    nodes = [cluster.nodes[r] for r in ranks if cluster.nodes[r].num_accelerators]
    own = [node.domains for node in nodes]
    if own and all(own) and len({len(d) for d in own}) == 1:
        return tuple(own)
    if sizes:
        return tuple(tuple(str(node.rank // size) for size in sizes) for node in nodes)
    return ()


def _bandwidths(profile: Mapping[str, object]) -> dict[str, float]:
    raw = profile.get(BANDWIDTH)
    if raw is None:
        return dict(DEFAULT_BANDWIDTH_GB_S)
    if not isinstance(raw, Mapping):
        raise PlacementError(
            f"profile_data.{BANDWIDTH} must be a mapping like {{same_node: 100, across_nodes: 12.5, "
            f"across_groups: 3.125}} (GB/s), got {raw!r}"
        )
    unknown = [str(k) for k in raw if k not in DEFAULT_BANDWIDTH_GB_S]
    if unknown:
        raise PlacementError(
            f"profile_data.{BANDWIDTH}: unknown link '{unknown[0]}' (known: {', '.join(DEFAULT_BANDWIDTH_GB_S)})"
        )
    result = dict(DEFAULT_BANDWIDTH_GB_S)
    for link, value in raw.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
            raise PlacementError(f"profile_data.{BANDWIDTH}.{link} must be a number of GB/s > 0, got {value!r}")
        result[str(link)] = float(value)
    for chain in LINK_ORDER:
        for near, far in itertools.pairwise(chain):
            if result[near] < result[far]:
                raise PlacementError(
                    f"profile_data.{BANDWIDTH}: {near} ({result[near]:g} GB/s) must be at least {far} "
                    f"({result[far]:g} GB/s)"
                )
    return result


def _costs_by_type(profile: Mapping[str, object], name: str) -> dict[str, float]:
    key = f"{name}{COST_BY_TYPE}"
    raw = profile.get(key)
    if raw is None:
        return {}
    if not isinstance(raw, Mapping) or not raw:
        raise PlacementError(f"profile_data.{key} must map accelerator types to seconds, like {{a800: 95.7}}")
    return {str(kind): seconds({f"{key}.{kind}": value}, f"{key}.{kind}") for kind, value in raw.items()}


def read_hetero(job: Job, model: CostModel) -> HeteroTask:
    """The job as the node-group model sees it; one-line `PlacementError`s for bad input."""
    profile = job.profile
    chain = reasoning_chain(job)
    pools = _pools(job)
    types = list(dict.fromkeys(pool.accelerator_type for pool in pools))
    by_type = {name: _costs_by_type(profile, name) for name in chain}
    single = {
        name: seconds(profile, f"{name}_cost") if profile.get(f"{name}_cost") is not None else None for name in chain
    }
    missing = [name for name in chain if single[name] is None and not any(kind in types for kind in by_type[name])]
    if missing:
        keys = ", ".join(f"{name}_cost or {name}{COST_BY_TYPE}" for name in missing)
        raise PlacementError(
            f"profile data is not provided: missing {keys} for the GPU types here ({', '.join(types)}; add under "
            "profile_data)"
        )
    base = reasoning_task(job, {name: single[name] or 0.0 for name in chain})
    memory = {name: _positive(profile, f"{name}{MEMORY}") for name in chain}
    for pool in pools:
        if pool.memory_gb is None and any(memory.values()):
            needs = ", ".join(f"{name}{MEMORY}" for name in chain if memory[name])
            raise PlacementError(
                f"node group '{pool.label}' has no accelerator_memory_gb, so profile_data.{needs} cannot be checked "
                "against it (set it on the node group)"
            )
    offload = profile.get(OFFLOAD, False)
    if not isinstance(offload, bool):
        raise PlacementError(f"profile_data.{OFFLOAD} must be true or false, got {offload!r}")
    gpus_of_type = {kind: sum(p.gpus for p in pools if p.accelerator_type == kind) for kind in types}
    options = []
    assumed: list[str] = []
    for stage in base.stages:
        row = []
        for index, pool in enumerate(pools):
            kind = pool.accelerator_type
            need = memory[stage.name]
            if kind in by_type[stage.name]:
                priced = replace(stage, cost=by_type[stage.name][kind], profiled_gpus=gpus_of_type[kind])
                same_time = False
            elif single[stage.name] is not None:
                priced, same_time = stage, len(types) > 1
            else:
                row.append(Option(stage.name, index, None, f"no cost measured on {kind}", need, False))
                continue
            if need is not None and pool.memory_gb is not None and need > pool.memory_gb:
                why = f"needs {need:g} GB per GPU, {kind} has {pool.memory_gb:g} GB"
                row.append(Option(stage.name, index, None, why, need, same_time))
                continue
            if same_time and stage.name not in assumed:
                assumed.append(stage.name)
            row.append(Option(stage.name, index, StageCost.build(base, priced, model), None, need, same_time))
        options.append(tuple(row))
    notes = []
    if assumed:
        notes.append(
            f"assumption: {', '.join(assumed)} take the same time on every GPU type ({', '.join(types)}): only "
            f"{' and '.join(f'{n}_cost' for n in assumed)} is given, add {assumed[0]}{COST_BY_TYPE} to tell them apart"
        )
    elsewhere = sorted({kind for name in chain for kind in by_type[name] if kind not in types})
    if elsewhere:
        notes.append(
            f"no node group here has type {', '.join(elsewhere)} (types: {', '.join(types)}): those costs are not used"
        )
    unchecked = [name for name in chain if memory[name] is None]
    if unchecked and len(pools) > 1:
        notes.append(f"memory not checked for {', '.join(unchecked)} (no {unchecked[0]}{MEMORY} in profile_data)")
    return HeteroTask(
        base=base,
        pools=tuple(pools),
        options=tuple(options),
        model_size_gb=_positive(profile, MODEL_SIZE) or 0.0,
        bandwidth_gb_s=_bandwidths(profile),
        offload=offload,
        notes=tuple(notes),
        collective_gb=tuple(_positive(profile, f"{name}{COLLECTIVE}") or 0.0 for name in chain),
    )


# -- cost tables ----------------------------------------------------------------------------------------------


def cost_table(task: HeteroTask, component: int, pool: int) -> np.ndarray:
    """Seconds per batch of a component on g = 0..pool.gpus GPUs of a pool in a disaggregated placement,
    inf where not allowed (memory, no cost, the model's rules, a rollout engine straddling nodes)."""
    target = task.pools[pool]
    option = task.options[component][pool]
    out = np.full(target.gpus + 1, np.inf)
    if option.cost is None:
        return out
    limit = target.gpus
    if option.cost.stage.kind == ROLLOUT:
        limit = engines_fit(target.node_gpus, option.cost.stage.model_parallel)
    out[: limit + 1] = option.cost.table(limit)
    return out


def collocated_memory(task: HeteroTask) -> float:
    """GB per GPU the collocated components need: the actor recomputes log-probs itself (no inference
    process); without offloading rollout and actor stay resident together."""
    needs = [o[0].memory_gb or 0.0 for o, name in zip(task.options, task.chain, strict=True) if name != "inference"]
    return max(needs) if task.offload else sum(needs)


def collocated_schedule(task: HeteroTask, pool: int) -> Schedule | None:
    target = task.pools[pool]
    if not target.collocated_ok:
        return None
    if target.memory_gb is not None and collocated_memory(task) > target.memory_gb:
        return None
    per_batch = []
    for row in task.options:
        cost = row[pool].cost
        value = cost(target.gpus) if cost is not None else None
        if value is None:
            return None
        per_batch.append(value)
    sync = task.sync_seconds(SAME_NODE)
    k = len(per_batch)
    # every component on every GPU of the group: its collectives span all the group's nodes
    whole = link_of(task, {(pool, i) for i in range(len(target.node_gpus))}) if target.gpus > 1 else ""
    links = (whole,) * k
    collectives = tuple(task.collective_seconds(i, link) for i, link in enumerate(links))
    return Schedule(
        mode=COLLOCATED,
        names=task.chain,
        ranges=((0, target.gpus - 1),) * k,
        per_batch=tuple(per_batch),
        total=collocated_total(per_batch, task.base.rollout_batch_size) + sync + sum(collectives),
        gpu_sets=1,
        node_groups=(target.label,) * k,
        sync=sync,
        sync_link=SAME_NODE,
        collectives=collectives,
        collective_links=links,
    )


def _spanned(task: HeteroTask, pools: Sequence[int], counts: Sequence[int], component: int) -> range:
    """The node indices (in its pool's rank order) a component's GPU range covers: components in one pool take
    contiguous ranges from its GPU 0 in chain order."""
    pool = pools[component]
    start = sum(c for i, (p, c) in enumerate(zip(pools, counts, strict=True)) if p == pool and i < component)
    ends = list(itertools.accumulate(task.pools[pool].node_gpus))
    first = next(i for i, end in enumerate(ends) if end > start)
    last = next(i for i, end in enumerate(ends) if end >= start + counts[component])
    return range(first, last + 1)


def link_of(task: HeteroTask, nodes: set[tuple[int, int]]) -> str:
    """The slowest link traffic among `nodes` ((pool, node index) pairs) crosses: one node is `same_node`;
    with every node's domains known, the narrowest domain they all share; else by node and group."""
    if len(nodes) == 1:
        return SAME_NODE
    if not all(task.pools[p].node_domains for p, _ in nodes):
        return ACROSS_GROUPS if len({p for p, _ in nodes}) > 1 else ACROSS_NODES
    paths = [task.pools[p].node_domains[i] for p, i in nodes]
    depth = min(len(path) for path in paths)
    shared = 0
    while shared < depth and len({path[shared] for path in paths}) == 1:
        shared += 1
    if shared == depth:
        return SAME_RACK
    return SAME_BLOCK if shared else ACROSS_BLOCKS


def sync_link(task: HeteroTask, pools: Sequence[int], counts: Sequence[int]) -> str:
    """The link the weights cross from actor to rollout in a disaggregated placement: the slowest among the
    nodes of the two ranges (and, in one group, of everything between them)."""
    rollout, actor = task.chain.index("rollout"), task.chain.index("actor")
    nodes = {(pools[side], i) for side in (rollout, actor) for i in _spanned(task, pools, counts, side)}
    if pools[rollout] == pools[actor]:
        # Everything between them in the chain lies between them on the nodes too.
        nodes |= {(pools[actor], i) for i in range(min(i for _, i in nodes), max(i for _, i in nodes) + 1)}
    return link_of(task, nodes)


def collective_links(task: HeteroTask, pools: Sequence[int], counts: Sequence[int]) -> tuple[str, ...]:
    """Per component, the slowest link among its own nodes ('' on a single GPU, which has no peers)."""
    return tuple(
        link_of(task, {(pools[i], n) for n in _spanned(task, pools, counts, i)}) if counts[i] > 1 else ""
        for i in range(len(counts))
    )


def _domain_caps(pool: Pool) -> list[int]:
    """The GPUs of the pool's first node, first narrowest domain, and first domain of each wider level: the
    budgets under which a disaggregated placement's weight sync stays on a nearer link."""
    caps = [pool.node_gpus[0]]
    if pool.node_domains:
        first = pool.node_domains[0]
        for depth in range(len(first), 0, -1):
            total = 0
            for gpus, path in zip(pool.node_gpus, pool.node_domains, strict=True):
                if path[:depth] != first[:depth]:
                    break
                total += gpus
            caps.append(total)
    return sorted(set(caps))


def budget_cases(task: HeteroTask, pools: Sequence[int]) -> list[dict[int, int]]:
    """The GPU budgets to search one assignment under: each group's GPUs, and for a group where it can make the
    traffic cross a nearer link (rollout and actor both in it; either of them, when the two groups' domains are
    known; a component with a collectives term) also only its first node, rack or block. Every combination of
    those per group, so two groups kept within their first racks at once are searched too."""
    rollout, actor = task.chain.index("rollout"), task.chain.index("actor")
    apart_known = pools[rollout] != pools[actor] and all(task.pools[pools[s]].node_domains for s in (rollout, actor))
    choices: dict[int, list[int]] = {}
    for p in sorted(set(pools)):
        held = {i for i, q in enumerate(pools) if q == p}
        gpus = task.pools[p].gpus
        nearer = (
            {rollout, actor} <= held
            or (apart_known and bool(held & {rollout, actor}))
            or any(task.collective_gb[i] for i in held)
        )
        caps = _domain_caps(task.pools[p]) if nearer else []
        choices[p] = sorted({gpus, *(min(gpus, cap) for cap in caps)}, reverse=True)
    return [dict(zip(choices, combo, strict=True)) for combo in itertools.product(*choices.values())]


def disaggregated_schedule(task: HeteroTask, pools: Sequence[int], counts: Sequence[int]) -> Schedule:
    """The schedule of one point of the disaggregated space (ranges from each pool's GPU 0, chain order)."""
    per_batch = tuple(
        task.options[i][p].cost(g)  # type: ignore[union-attr]
        for i, (p, g) in enumerate(zip(pools, counts, strict=True))
    )
    ranges = []
    used = dict.fromkeys(pools, 0)
    for p, g in zip(pools, counts, strict=True):
        ranges.append(contiguous_ranges([g], used[p])[0])
        used[p] += g
    link = sync_link(task, pools, counts)
    sync = task.sync_seconds(link)
    links = collective_links(task, pools, counts)
    collectives = tuple(task.collective_seconds(i, own) for i, own in enumerate(links))
    return Schedule(
        mode=DISAGGREGATED,
        names=task.chain,
        ranges=tuple(ranges),
        per_batch=per_batch,
        total=pipelined_total(per_batch, task.base.rollout_batch_size) + sync + sum(collectives),
        gpu_sets=len(counts),
        node_groups=tuple(task.pools[p].label for p in pools),
        sync=sync,
        sync_link=link,
        collectives=collectives,
        collective_links=links,
    )


# -- the search -------------------------------------------------------------------------------------------


def frontier(table: np.ndarray) -> np.ndarray:
    """GPU counts whose cost is lower than that of every smaller count (the only ones a budget can need)."""
    finite = np.isfinite(table)
    if not finite.any():
        return np.empty(0, dtype=np.int64)
    before = np.minimum.accumulate(np.concatenate(([np.inf], table[:-1])))
    return np.flatnonzero(finite & (table < before))


def best_counts(
    tables: Sequence[np.ndarray], pools: Sequence[int], budgets: Mapping[int, int], weight: float
) -> tuple[tuple[int, ...], float] | None:
    """min over counts of sum_i t_i[g_i] + weight * max_i t_i[g_i], with sum of g_i over each pool's
    components <= its budget; ties to the smallest counts in chain order. None when nothing fits."""
    k = len(tables)
    fronts = []
    for table, p in zip(tables, pools, strict=True):
        front = frontier(table[: budgets[p] + 1])
        if len(front) == 0:
            return None
        fronts.append(front)
    order = sorted(range(k), key=lambda i: (len(fronts[i]), i))
    outer, inner, last = order[:-2], order[-2], order[-1]
    last_table = tables[last][: budgets[pools[last]] + 1]
    prefix_min = np.minimum.accumulate(last_table)
    # the smallest count reaching each prefix minimum (the frontier point at or below r)
    last_front = fronts[last]
    rows = list(itertools.product(*(fronts[i].tolist() for i in outer)))

    def row(fixed: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        left = dict(budgets)
        for i, g in zip(outer, fixed, strict=True):
            left[pools[i]] -= g
        if any(v < 0 for v in left.values()):
            return None
        xs = fronts[inner][fronts[inner] <= left[pools[inner]]]
        if len(xs) == 0:
            return None
        rest = left[pools[last]] - (xs if pools[inner] == pools[last] else 0)
        rest = np.broadcast_to(rest, xs.shape)
        ok = rest >= 0
        xs, rest = xs[ok], rest[ok]
        if len(xs) == 0:
            return None
        last_cost = prefix_min[rest]
        fixed_costs = [float(tables[i][g]) for i, g in zip(outer, fixed, strict=True)]
        inner_cost = tables[inner][xs]
        total = inner_cost + last_cost + sum(fixed_costs)
        slowest = np.maximum(inner_cost, last_cost)
        if fixed_costs:
            slowest = np.maximum(slowest, max(fixed_costs))
        return xs, rest, total + weight * slowest

    mins = np.full(len(rows), np.inf)
    for n, fixed in enumerate(rows):
        found = row(fixed)
        if found is not None:
            mins[n] = found[2].min()
    if len(rows) == 0 or not np.isfinite(mins.min()):
        return None
    best = float(mins.min())
    threshold = best + TIE_RTOL * abs(best)
    chosen: tuple[tuple[int, ...], float] | None = None
    for n in np.flatnonzero(mins <= threshold):
        xs, rest, totals = row(rows[n])  # type: ignore[misc]
        for hit in np.flatnonzero(totals <= threshold):
            counts = [0] * k
            for i, g in zip(outer, rows[n], strict=True):
                counts[i] = g
            counts[inner] = int(xs[hit])
            counts[last] = int(last_front[np.searchsorted(last_front, rest[hit], side="right") - 1])
            candidate = (tuple(counts), float(totals[hit]))
            if chosen is None or candidate[0] < chosen[0]:
                chosen = candidate
    return chosen


#: Points (GPU counts of every component, over one assignment) the priced enumeration evaluates at most; past it
#: the search falls back to the per-group caps and says so.
PRICED_POINTS_LIMIT = 20_000_000
#: Points priced in one vectorised pass (a few dozen arrays of this length are alive at once).
PRICED_CHUNK = 250_000
#: Links in the order of `LinkCoder`'s codes.
LINKS = (SAME_NODE, SAME_RACK, SAME_BLOCK, ACROSS_BLOCKS, ACROSS_NODES, ACROSS_GROUPS)


class LinkCoder:
    """`link_of` for many GPU ranges at once, as indices into `LINKS`: a range of one pool covers the contiguous
    node indices first..last, which all share a domain of a level exactly when the first and the last node lie
    in the same run of that level's domain path (nodes in rank order; a domain may recur after others)."""

    def __init__(self, task: HeteroTask) -> None:
        self.ends = [np.cumsum(pool.node_gpus) for pool in task.pools]
        self.depth = [len(pool.node_domains[0]) if pool.node_domains else 0 for pool in task.pools]
        self.runs: list[list[np.ndarray]] = []
        self.prefixes: list[list[np.ndarray]] = []
        ids: dict[tuple[str, ...], int] = {}
        for pool, depth in zip(task.pools, self.depth, strict=True):
            runs, prefixes = [], []
            for d in range(depth):
                paths = [path[: d + 1] for path in pool.node_domains]
                changes = [0] + [int(a != b) for a, b in itertools.pairwise(paths)]
                runs.append(np.cumsum(changes))
                prefixes.append(np.array([ids.setdefault(path, len(ids)) for path in paths]))
            self.runs.append(runs)
            self.prefixes.append(prefixes)

    def nodes(self, pool: int, start: np.ndarray, count: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The first and last node index of each range [start, start + count) of the pool's GPUs."""
        ends = self.ends[pool]
        return np.searchsorted(ends, start, side="right"), np.searchsorted(ends, start + count - 1, side="right")

    def within(self, pool: int, first: np.ndarray, last: np.ndarray) -> np.ndarray:
        """Link codes of each node range first..last of one pool."""
        depth = self.depth[pool]
        if not depth:
            return np.where(first == last, 0, 4)
        shared = sum((run[first] == run[last]).astype(np.int64) for run in self.runs[pool])
        return np.where(first == last, 0, np.where(shared == depth, 1, np.where(shared > 0, 2, 3)))

    def between(
        self, a: int, ranges_a: tuple[np.ndarray, np.ndarray], b: int, ranges_b: tuple[np.ndarray, np.ndarray]
    ) -> np.ndarray:
        """Link codes between node ranges of two different pools (never one node: groups share no nodes)."""
        depth = min(self.depth[a], self.depth[b])
        if not depth:
            return np.full(len(ranges_a[0]), 5)
        (first_a, last_a), (first_b, last_b) = ranges_a, ranges_b
        shared = np.zeros(len(first_a), dtype=np.int64)
        for d in range(depth):
            together = (
                (self.runs[a][d][first_a] == self.runs[a][d][last_a])
                & (self.runs[b][d][first_b] == self.runs[b][d][last_b])
                & (self.prefixes[a][d][first_a] == self.prefixes[b][d][first_b])
            )
            shared += together
        return np.where(shared == depth, 1, np.where(shared > 0, 2, 3))


def priced_candidates(task: HeteroTask, tables: Sequence[np.ndarray], pools: Sequence[int]) -> list[np.ndarray]:
    """The GPU counts `best_priced` tries per component of one assignment (an empty array: it fits nowhere).

    The last component of each group only takes counts on its frontier: shrinking the last range of a group
    never moves another range and only drops nodes from its own traffic, so a cheaper smaller count is never
    priced worse. The others take every count they allow, since a larger range before the actor can move the
    actor into one rack.
    """
    last_in_pool = {p: max(i for i in range(len(pools)) if pools[i] == p) for p in set(pools)}
    candidates = []
    for i, (table, p) in enumerate(zip(tables, pools, strict=True)):
        within = table[: task.pools[p].gpus + 1]
        candidates.append(frontier(within) if last_in_pool[p] == i else np.flatnonzero(np.isfinite(within)))
    return candidates


def position_priced(task: HeteroTask) -> bool:
    """Whether a range's position, not only its size, can change a price: a component's collectives, or the
    weight sync where the nodes' domains are known (the actor's range moves with the inference before it).
    Without either, the per-group caps of `budget_cases` already search every price exactly."""
    return any(task.collective_gb) or bool(task.model_size_gb and any(pool.node_domains for pool in task.pools))


def priced_points(task: HeteroTask) -> int:
    """The most points `best_priced` would evaluate for one assignment (what `PRICED_POINTS_LIMIT` bounds)."""
    k, n_pools, tables = len(task.chain), len(task.pools), task.tables
    return max(
        math.prod(len(c) for c in priced_candidates(task, [tables[i][p] for i, p in enumerate(pools)], pools))
        for pools in itertools.product(range(n_pools), repeat=k)
    )


def best_priced(
    task: HeteroTask, tables: Sequence[np.ndarray], pools: Sequence[int], coder: LinkCoder
) -> tuple[int, ...] | None:
    """The counts of one assignment with the lowest total *including* the weight sync and every component's
    collectives, each priced by where its range lies (None when nothing fits). Every point of
    `priced_candidates` is evaluated, vectorised in chunks of about `PRICED_CHUNK` points; ties go to the
    smallest counts in chain order."""
    candidates = priced_candidates(task, tables, pools)
    if any(len(c) == 0 for c in candidates):
        return None
    rest = math.prod(len(c) for c in candidates[1:])
    step = max(1, PRICED_CHUNK // rest)
    found: list[tuple[float, tuple[int, ...]]] = []
    for begin in range(0, len(candidates[0]), step):
        found += _priced_chunk(task, tables, pools, coder, [candidates[0][begin : begin + step], *candidates[1:]])
    if not found:
        return None
    best = min(total for total, _ in found)
    return min(counts for total, counts in found if total <= best + TIE_RTOL * abs(best))


def _priced_chunk(
    task: HeteroTask,
    tables: Sequence[np.ndarray],
    pools: Sequence[int],
    coder: LinkCoder,
    candidates: Sequence[np.ndarray],
) -> list[tuple[float, tuple[int, ...]]]:
    """The points of one chunk within the tie tolerance of its best total, as (total, counts)."""
    counts = [grid.ravel() for grid in np.meshgrid(*candidates, indexing="ij")]
    starts = []
    used = {p: np.zeros_like(counts[0]) for p in set(pools)}
    for i, p in enumerate(pools):
        starts.append(used[p].copy())
        used[p] = used[p] + counts[i]
    ok = np.ones(len(counts[0]), dtype=bool)
    for p, total in used.items():
        ok &= total <= task.pools[p].gpus
    if not ok.any():
        return []
    counts = [c[ok] for c in counts]
    spans = [coder.nodes(p, start[ok], counts[i]) for i, (p, start) in enumerate(zip(pools, starts, strict=True))]
    bandwidth = np.array([task.bandwidth_gb_s[link] for link in LINKS])
    per_batch = [tables[i][c] for i, c in enumerate(counts)]
    # summed in the order of disaggregated_schedule's total, so the minimum found is the total it reports
    total = per_batch[0]
    for cost in per_batch[1:]:
        total = total + cost
    total = total + np.maximum.reduce(per_batch) * float(task.base.rollout_batch_size - 1)
    if task.model_size_gb:
        rollout, actor = task.chain.index("rollout"), task.chain.index("actor")
        if pools[rollout] == pools[actor]:
            first = np.minimum(spans[rollout][0], spans[actor][0])
            last = np.maximum(spans[rollout][1], spans[actor][1])
            link = coder.within(pools[actor], first, last)
        else:
            link = coder.between(pools[rollout], spans[rollout], pools[actor], spans[actor])
        total = total + task.model_size_gb / bandwidth[link]
    collectives = np.zeros_like(total)
    for i, p in enumerate(pools):
        if task.collective_gb[i]:
            link = coder.within(p, *spans[i])
            collectives = collectives + np.where(counts[i] > 1, task.collective_gb[i] / bandwidth[link], 0.0)
    total = total + collectives
    best = float(total.min())
    hits = np.flatnonzero(total <= best + TIE_RTOL * abs(best))
    return [(float(total[h]), tuple(int(c[h]) for c in counts)) for h in hits]


def search_hetero(task: HeteroTask, progress: Progress | None = None) -> dict[str, Schedule | None]:
    """The best collocated and the best disaggregated schedule over the node groups (None where impossible)."""
    collocated = pick([collocated_schedule(task, p) for p in range(len(task.pools))])
    k, n_pools, tables = len(task.chain), len(task.pools), task.tables
    weight = float(task.base.rollout_batch_size - 1)
    found: list[Schedule] = []
    priced = position_priced(task) and priced_points(task) <= PRICED_POINTS_LIMIT
    coder = LinkCoder(task)
    assignments = list(itertools.product(range(n_pools), repeat=k))
    for done, pools in enumerate(assignments, 1):
        assigned = [tables[i][p] for i, p in enumerate(pools)]
        if priced:
            counts = best_priced(task, assigned, pools, coder)
            if counts is not None:
                found.append(disaggregated_schedule(task, pools, counts))
        else:
            for case in budget_cases(task, pools):
                best = best_counts(assigned, pools, case, weight)
                if best is not None:
                    found.append(disaggregated_schedule(task, pools, best[0]))
        if progress is not None:
            progress(done, len(assignments))
    return {COLLOCATED: collocated, DISAGGREGATED: pick(found)}


def hetero_tie_key(schedule: Schedule) -> tuple[int, tuple[int, ...], tuple[str, ...]]:
    return (schedule.gpu_sets, schedule.gpu_counts, schedule.node_groups)


def pick(schedules: Sequence[Schedule | None]) -> Schedule | None:
    """The fastest; ties to fewer GPU sets, then smaller GPU counts in chain order, then node group labels."""
    found = [s for s in schedules if s is not None]
    if not found:
        return None
    best = min(s.total for s in found)
    return min((s for s in found if s.total <= best + TIE_RTOL * abs(best)), key=hetero_tie_key)


# -- what --explain and the JSON show ---------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TypeEstimate:
    """One component on one node group: its best iteration time there alone, or why it cannot run there."""

    component: str
    node_group: str
    accelerator_type: str
    gpus: int
    """The GPU count of that best time (0 when it cannot run there)."""
    seconds: float | None
    why_not: str | None
    memory_gb: float | None
    accelerator_memory_gb: float | None


@dataclass(frozen=True)
class HeteroSummary:
    estimates: tuple[TypeEstimate, ...]
    notes: tuple[str, ...]
    model_size_gb: float
    bandwidth_gb_s: Mapping[str, float]
    collective_gb: Mapping[str, float]
    """GB per GPU per iteration of each component's collectives, where the profile gives it."""


def summarize(task: HeteroTask) -> HeteroSummary:
    rbs = task.base.rollout_batch_size
    estimates = []
    for i, row in enumerate(task.options):
        for p, option in enumerate(row):
            pool = task.pools[p]
            table = task.tables[i][p]
            finite = np.isfinite(table)
            best = int(np.argmin(table)) if finite.any() else 0
            why = option.why_not or (None if finite.any() else "no GPU count of the group fits its model-parallel size")
            estimates.append(
                TypeEstimate(
                    component=option.component,
                    node_group=pool.label,
                    accelerator_type=pool.accelerator_type,
                    gpus=best,
                    seconds=float(table[best]) * rbs if finite.any() else None,
                    why_not=why,
                    memory_gb=option.memory_gb,
                    accelerator_memory_gb=pool.memory_gb,
                )
            )
    collective_gb = {name: gb for name, gb in zip(task.chain, task.collective_gb, strict=False) if gb}
    notes = task.notes
    if position_priced(task) and (points := priced_points(task)) > PRICED_POINTS_LIMIT:
        notes += (
            f"network: {points:,} GPU-count combinations are too many to price each by where its ranges lie, so the "
            "search tried each group within its first node, rack and block and over all its GPUs: a placement with "
            "a range wholly in a later rack may be missed",
        )
    return HeteroSummary(tuple(estimates), notes, task.model_size_gb, dict(task.bandwidth_gb_s), collective_gb)

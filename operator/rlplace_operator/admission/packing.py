"""How a job's nodes of each NodeGroup are chosen among the free ones: earliest first in rank order, or packed into
the fewest network domains (racks, blocks, NVLink cliques: docs/admission.md, "Racks and blocks"), the groups that
exchange weights under one domain, CPU-only groups off GPU domains.

Pure, like rules.py, which decides which jobs start and calls `choose` for each; the types are rules.py's.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlplace_operator.api.names import TOPOLOGY_LEVELS

if TYPE_CHECKING:
    from rlplace_operator.admission.rules import GroupDemand, Pool, QueuedJob


def match(
    demand: GroupDemand, ranked: Sequence[str], taken: Collection[str], free: Mapping[str, Sequence[int]]
) -> list[str | None]:
    """Nodes for positions 0..n-1, earliest first; a used position needs a node not in `taken` (and on a DRA
    group one with as many `free` GPUs as the position uses).

    Earliest-first is optimal for matching a sequence of position rules in rank order (taking a later node
    never leaves more room for the positions after it; on a DRA group that holds when the positions need
    equal GPU counts, the usual case, and is a good first fit otherwise). None marks a position left unmatched.
    """

    def unfit(node: str, position: int) -> bool:
        if node in taken:
            return True
        return demand.gpus is not None and len(free.get(node, ())) < demand.gpus_at(position)

    chosen: list[str | None] = []
    index = 0
    for position in range(demand.nodes):
        needs_free = position in demand.used
        while index < len(ranked) and needs_free and unfit(ranked[index], position):
            index += 1
        if index >= len(ranked):
            chosen.append(None)
            continue
        chosen.append(ranked[index])
        index += 1
    return chosen


def complete(demand: GroupDemand, chosen: Sequence[str | None]) -> bool:
    return all(chosen[position] is not None for position in demand.used)


def packed(
    demand: GroupDemand,
    ranked: Sequence[str],
    taken: Collection[str],
    free: Mapping[str, Sequence[int]],
    domains: Mapping[str, tuple[str, ...]],
    within: int | None = None,
) -> list[str | None]:
    """`match` on the nodes of the fewest network domains: within one rack when one rack fits the demand (the
    rack with the fewest usable nodes that does: best fit leaves the larger racks to larger jobs), else within one
    block, else over the domains with the most usable nodes first. The nodes keep their rank order within a domain,
    and the domains follow one another, so a job's node ranks are consecutive per rack. Nodes without topology
    labels are all one domain: earliest first, as `match`.

    `within` (a level that is required): only domains of that level or narrower, never the fallback; when none
    holds the demand, the match in the domain of that level with the most usable nodes (what the job would wait
    in: the head of the queue claims it)."""
    depth = max((len(domains.get(node, ())) for node in ranked), default=0)
    if within is not None:
        depth = max(depth, within + 1)
    elif depth == 0 or demand.nodes <= 1 or not any(any(domains.get(node, ())) for node in ranked):
        return match(demand, ranked, taken, free)
    paths = {node: (*domains.get(node, ()), *("",) * depth)[:depth] for node in ranked}

    order = {node: index for index, node in enumerate(ranked)}
    needs = None if demand.gpus is None else max(dict(demand.gpus).values(), default=0)

    def usable(node: str) -> bool:
        return node not in taken and (needs is None or len(free.get(node, ())) >= needs)

    # Usable nodes per domain, at every level: the larger domains come first wherever several are taken.
    counts: dict[tuple[str, ...], int] = {}
    for node in ranked:
        for level in range(1, depth + 1):
            counts[paths[node][:level]] = counts.get(paths[node][:level], 0) + (1 if usable(node) else 0)

    def key(node: str) -> tuple[object, ...]:
        path = paths[node]
        return (*((-counts[path[: i + 1]], path[: i + 1]) for i in range(depth)), order[node])

    widest: list[str | None] = [None] * demand.nodes
    for level in range(depth - 1, -1 if within is None else within - 1, -1):
        members: dict[tuple[str, ...], list[str]] = {}
        for node in ranked:
            path = paths[node][: level + 1]
            if path[-1]:
                members.setdefault(path, []).append(node)
        for path in sorted(members, key=lambda p: (counts[p], order[members[p][0]])):
            holds = counts[path] >= len(demand.used)
            if not holds and (level != within or counts[path] <= sum(1 for n in widest if n is not None)):
                continue
            chosen = match(demand, sorted(members[path], key=key), taken, free)
            if holds and complete(demand, chosen):
                return chosen
            if level == within and counts[path] > sum(1 for n in widest if n is not None):
                widest = chosen
    if within is not None:
        return widest
    # No one domain holds it: the domains with the most usable nodes first, at every level. (A position no worker
    # uses takes whatever node comes next, so another order may fit where rank order does not, or the reverse:
    # packing never turns a fit away.)
    chosen = match(demand, sorted(ranked, key=key), taken, free)
    return chosen if complete(demand, chosen) else match(demand, ranked, taken, free)


#: The most steps `fewest` takes (domains x count x first group's need): beyond it the greedy order stands
#: (a job larger than a block over 32 racks takes about 66k; the work grows with the job's nodes).
FEWEST_BUDGET = 200_000


def fewest(usable: Sequence[Sequence[int]], needs: Sequence[int]) -> list[int] | None:
    """The fewest domains (indices into `usable`: each domain's usable nodes of two groups) whose nodes hold
    `needs` of both: a dynamic program, per count of domains, of the most nodes of the second group reachable for
    each count of the first (capped at the need). None when none hold them, or past FEWEST_BUDGET."""
    first, second = needs
    if len(usable) * len(usable) * (first + 1) > FEWEST_BUDGET:
        return None
    # best[count][have]: (most of the second group, the domains giving it) with `count` domains and `have` of the
    # first group (capped at `first`).
    best: list[list[tuple[int, tuple[int, ...]] | None]] = [[None] * (first + 1) for _ in range(len(usable) + 1)]
    best[0][0] = (0, ())
    for index, (ones, twos) in enumerate(usable):
        for count in range(index + 1, 0, -1):
            for have in range(first + 1):
                before = best[count - 1][have]
                if before is None:
                    continue
                after = min(first, have + ones)
                reach = min(second, before[0] + twos)
                known = best[count][after]
                if known is None or reach > known[0]:
                    best[count][after] = (reach, (*before[1], index))
    for count in range(len(usable) + 1):
        found = best[count][first]
        if found is not None and found[0] >= second:
            return list(found[1])
    return None


@dataclass(frozen=True, slots=True)
class Layout:
    """A group's nodes by network domain, down to `depth` levels: built once per pool (`Pool.memo`), since the
    nodes and their labels stay while one admission pass decides many jobs."""

    paths: Mapping[str, tuple[str, ...]]
    """Node -> its domains, `depth` long ("" where unlabelled)."""
    members: Mapping[tuple[str, ...], Sequence[str]]
    """Domain (a labelled path of any length up to `depth`) -> its nodes in rank order."""
    children: Mapping[tuple[str, ...], Sequence[tuple[str, ...]]]
    """() -> the widest domains; a domain -> the domains one level narrower in it (by name)."""
    unplaced: Sequence[str]
    """Nodes not labelled at every level, in rank order: they come after every domain."""


def _layout(pool: Pool, group: str, depth: int) -> Layout:
    key = (group, depth)
    found = pool.memo.get(key)
    if found is None:
        paths: dict[str, tuple[str, ...]] = {}
        members: dict[tuple[str, ...], list[str]] = {}
        children: dict[tuple[str, ...], set[tuple[str, ...]]] = {}
        unplaced = []
        for node in pool.groups.get(group, ()):
            path = paths[node] = (*pool.domains.get(node, ()), *("",) * depth)[:depth]
            if not all(path):
                unplaced.append(node)
                continue
            for level in range(1, depth + 1):
                members.setdefault(path[:level], []).append(node)
                children.setdefault(path[: level - 1], set()).add(path[:level])
        found = pool.memo[key] = Layout(paths, members, {k: sorted(v) for k, v in children.items()}, unplaced)
    return found


def together(
    job: QueuedJob, pool: Pool, taken: Collection[str], free: Mapping[str, Sequence[int]]
) -> dict[str, list[str | None]]:
    """The nodes of the job's groups that exchange weights (trainer and rollout), under one domain of a level they
    share: the narrowest level where one domain holds them all, and of that level's domains the one where they span
    the fewest narrower domains, then the one with the fewest usable nodes (a best fit). Inside it the groups take
    the fewest narrower domains that hold them both (`fewest`), then the domains with the most usable nodes of
    all the groups first, so they share racks. When no one domain holds them, the same across the whole pool. {}
    when they are fewer than two, share no level, or cannot all be matched so: each group is then packed on its
    own (never a fit lost).

    With a required level each group is packed on its own inside the domain (`packed`), as without the rule."""
    assert job.demand is not None
    demands = [demand for demand in job.demand if demand.exchanges and demand.used]
    if len(demands) < 2:
        return {}
    levels = [pool.levels.get(demand.group, TOPOLOGY_LEVELS) for demand in demands]
    shared = 0
    while shared < min(map(len, levels)) and len({group_levels[shared] for group_levels in levels}) == 1:
        shared += 1
    if shared == 0:
        return {}
    layouts = [_layout(pool, demand.group, shared) for demand in demands]
    paths = {node: path for layout in layouts for node, path in layout.paths.items()}

    # Usable nodes of each group per domain, at every shared level.
    usable: dict[tuple[str, ...], list[int]] = {}
    for index, (demand, layout) in enumerate(zip(demands, layouts, strict=True)):
        needs = None if demand.gpus is None else max(dict(demand.gpus).values(), default=0)
        for path, nodes in layout.members.items():
            if len(path) == shared:
                count = sum(1 for n in nodes if n not in taken and (needs is None or len(free.get(n, ())) >= needs))
                for level in range(1, shared + 1):
                    usable.setdefault(path[:level], [0] * len(demands))[index] += count
    children: dict[tuple[str, ...], list[tuple[str, ...]]] = {}
    for layout in layouts:
        for parent, kids in layout.children.items():
            children[parent] = sorted({*children.get(parent, ()), *kids})
    needs = [len(demand.used) for demand in demands]

    def matched(top: tuple[str, ...] | None) -> dict[str, list[str | None]] | None:
        """Each group's match inside the domain `top` (None: the whole pool): first the fewest narrower domains
        that hold both groups (`fewest`, for two groups), then the domains with the most usable nodes."""
        first: set[tuple[str, ...]] = set()
        frontier = [top or ()]
        if len(demands) == 2:
            while frontier and len(frontier[0]) < shared:
                inside = [kid for parent in frontier for kid in children.get(parent, ())]
                chosen = fewest([usable[path] for path in inside], needs)
                if chosen is None:
                    break
                frontier = [inside[i] for i in chosen]
                first.update(frontier)

        def ordered(parent: tuple[str, ...]) -> list[tuple[str, ...]]:
            """The narrowest domains under `parent`, the chosen ones first, then the fullest."""
            if len(parent) == shared:
                return [parent]
            kids = sorted(children.get(parent, ()), key=lambda p: (p not in first, -sum(usable.get(p, ())), p))
            return [leaf for kid in kids for leaf in ordered(kid)]

        leaves = ordered(top or ())
        picked = {}
        for demand, layout in zip(demands, layouts, strict=True):
            ranked = [n for leaf in leaves for n in layout.members.get(leaf, ())]
            if top is None:
                ranked += layout.unplaced
            if job.within is None:
                chosen = match(demand, ranked, taken, free)
            else:
                kept = set(ranked)
                inside = [n for n in pool.groups.get(demand.group, ()) if n in kept]
                within = pool.level_index(demand.group, job.within)
                chosen = packed(demand, inside, taken, free, pool.domains, within)
            if not complete(demand, chosen):
                return None
            picked[demand.group] = chosen
        return picked

    for depth in range(shared, 0, -1):
        domains = [
            path
            for path, counts in usable.items()
            if len(path) == depth and all(count >= need for count, need in zip(counts, needs, strict=True))
        ]
        best: tuple[tuple[int, int, tuple[str, ...]], dict[str, list[str | None]]] | None = None
        for path in sorted(domains, key=lambda p: (sum(usable[p]), p)):
            picked = matched(path)
            if picked is None:
                continue
            spread = len({paths[n] for chosen in picked.values() for n in chosen if n is not None})
            score = (spread, sum(usable[path]), path)
            if best is None or score < best[0]:
                best = (score, picked)
            if depth == shared:
                break  # one narrowest domain holds them all: nothing spans less
        if best is not None:
            return best[1]
    if job.within is not None:
        return {}
    return matched(None) or {}


def cpu_first(ranked: Sequence[str], pool: Pool, own: Collection[str]) -> list[str]:
    """A CPU-only group's nodes in the order it takes them: CPU-only nodes; then GPU nodes in a domain the job's
    other groups use (`own`: their nodes), its own nodes first (its pod there holds no node more); then other GPU
    nodes (a CPU pod on an empty GPU domain keeps that node's GPUs from every GPU job); each in rank order."""
    near = {pool.domains.get(node, ()) for node in own}
    cpu, mine, close, far = [], [], [], []
    for node in ranked:
        if node not in pool.gpu_nodes:
            cpu.append(node)
        elif node in own:
            mine.append(node)
        else:
            (close if pool.domains.get(node, ()) in near else far).append(node)
    return [*cpu, *mine, *close, *far]


def choose(
    job: QueuedJob, pool: Pool, taken: Collection[str], free: Mapping[str, Sequence[int]]
) -> dict[str, list[str | None]]:
    """Per group, the node for each position (None: none fits): the groups that exchange weights together
    (`together`), the others packed each on its own, the CPU-only groups last, near what the others took."""
    assert job.demand is not None
    chosen = together(job, pool, taken, free)
    for demand in job.demand:
        if demand.group not in chosen and not demand.cpu_only:
            ranked = pool.groups.get(demand.group, ())
            within = pool.level_index(demand.group, job.within)
            chosen[demand.group] = packed(demand, ranked, taken, free, pool.domains, within)
    own = {node for nodes in chosen.values() for node in nodes if node is not None}
    for demand in job.demand:
        if demand.cpu_only:
            ranked = cpu_first(pool.groups.get(demand.group, ()), pool, own)
            within = pool.level_index(demand.group, job.within)
            if within is None:
                chosen[demand.group] = match(demand, ranked, taken, free)
            else:
                chosen[demand.group] = packed(demand, ranked, taken, free, pool.domains, within)
    return chosen

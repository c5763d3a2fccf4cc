"""The exact search over the placements of docs/autoplace.md ("The search and what it guarantees").

Reasoning chains have two kinds of placement: fully collocated (every stage on all G GPUs, one after the
other) and fully disaggregated (stage i on its own g_i GPUs, contiguous, in chain order from GPU 0, with
sum g_i = G, all pipelined). The collocated one is a single number; the disaggregated one minimises

    F(g) = sum_i p_i(g_i) + (rbs - 1) * max_i p_i(g_i)        subject to sum_i g_i = G

over the GPU counts each stage allows. `best_split` solves this exactly for any per-stage costs (no
monotonicity assumed: the scaling model's actor cost jumps at g = W, the rollout's at its capacity threshold):
it enumerates the stages with the fewest allowed counts (for the actor and inference, the valid data-parallel
sizes: the divisors of rbs/n_minibatches, a handful) and evaluates every split of the remaining GPUs between
the last two stages in one vectorised pass, reading the last stage's cost from a dense table indexed by GPU
count. Every point of the space is evaluated, so the result is exact by construction; the work is
|A_1| * |A_2| array elements for the two smallest allowed sets, at most about G^2/2 (G = 8192 with mp = 1
and no valid data-parallel sizes: 0.3 s), and typically a few thousand.

Totals are computed in the same order as `pipelined_total`, so a vectorised value and the value reported for
the chosen split are the same float. Ties (totals within `TIE_RTOL`) go to the fewest distinct GPU sets
(collocated first), then to the smallest GPU counts in chain order, so one input always prints one answer.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from placement_core.autoplace.cost import CostModel, collocated_total, pipelined_total, stage_costs
from placement_core.autoplace.inputs import ReasoningTask

#: Totals closer than this (relative) are the same total: float noise must not decide between placements.
TIE_RTOL = 1e-9

COLLOCATED = "collocated"
DISAGGREGATED = "disaggregated"
HYBRID = "hybrid"

#: Called as progress(done, total) while a search runs, for a progress bar; never needed for the result.
Progress = Callable[[int, int], None]


@dataclass(frozen=True, slots=True)
class Schedule:
    """One placement of a chain and its predicted iteration time.

    `ranges[i]` is the inclusive GPU range of `names[i]`; `per_batch[i]` its seconds per batch there;
    `gpu_sets` the number of distinct GPU sets (1 for collocated), the first tie-breaker. Over node groups of
    different GPUs (hetero.py) `node_groups[i]` is the group whose ranks `ranges[i]` counts, and `sync` the
    seconds per iteration the weight sync over `sync_link` adds (included in `total`), and `collectives[i]`
    the seconds per iteration component i's own collectives add over `collective_links[i]` (included in
    `total`; 0 and '' where not priced); otherwise they are empty and 0.
    """

    mode: str
    names: tuple[str, ...]
    ranges: tuple[tuple[int, int], ...]
    per_batch: tuple[float, ...]
    total: float
    gpu_sets: int
    node_groups: tuple[str, ...] = ()
    sync: float = 0.0
    sync_link: str = ""
    collectives: tuple[float, ...] = ()
    collective_links: tuple[str, ...] = ()

    @property
    def gpu_counts(self) -> tuple[int, ...]:
        return tuple(end - start + 1 for start, end in self.ranges)

    def tie_key(self) -> tuple[int, tuple[int, ...]]:
        return (self.gpu_sets, self.gpu_counts)


def within_tie(total: float, best: float) -> bool:
    return total <= best + TIE_RTOL * abs(best)


def pick_best(schedules: Sequence[Schedule | None]) -> Schedule | None:
    """The fastest schedule; among ties, the one with the smallest `tie_key`."""
    found = [s for s in schedules if s is not None]
    if not found:
        return None
    best = min(s.total for s in found)
    return min((s for s in found if within_tie(s.total, best)), key=Schedule.tie_key)


def contiguous_ranges(counts: Sequence[int], start: int = 0) -> tuple[tuple[int, int], ...]:
    """Back-to-back inclusive ranges from `start`, in the given order."""
    ranges = []
    for count in counts:
        ranges.append((start, start + count - 1))
        start += count
    return tuple(ranges)


def best_split(tables: Sequence[np.ndarray], num_gpus: int, batches: int, progress: Progress | None = None):
    """The split (g_1..g_k) of `num_gpus` minimising F above, with its total, or None when no split exists.

    `tables[i][g]` is stage i's cost per batch on g GPUs (inf where not allowed), for g = 0..num_gpus.
    Returns `(counts, total)` with counts in the order of `tables`; ties as the module docstring says.
    """
    k = len(tables)
    if k < 2:
        raise ValueError("a pipelined split needs at least two stages")
    allowed = [np.flatnonzero(np.isfinite(table[1 : num_gpus + 1])) + 1 for table in tables]
    if any(len(a) == 0 for a in allowed):
        return None
    order = sorted(range(k), key=lambda i: (len(allowed[i]), i))
    outer, inner, last = order[:-2], order[-2], order[-1]
    weight = float(batches - 1)
    rows = list(itertools.product(*(allowed[i].tolist() for i in outer)))

    def row(fixed: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray] | None:
        rest = num_gpus - sum(fixed)
        xs = allowed[inner][: np.searchsorted(allowed[inner], rest)]
        if rest < 2 or len(xs) == 0:
            return None
        parts: dict[int, float | np.ndarray] = {i: float(tables[i][g]) for i, g in zip(outer, fixed, strict=True)}
        parts[inner] = tables[inner][xs]
        parts[last] = tables[last][rest - xs]
        total = parts[0]
        for i in range(1, k):
            total = total + parts[i]
        slowest = np.maximum(parts[inner], parts[last])
        if outer:
            slowest = np.maximum(slowest, max(parts[i] for i in outer))
        return xs, (total + weight * slowest if weight else total + 0.0)

    row_min = np.full(len(rows), np.inf)
    for n, fixed in enumerate(rows):
        evaluated = row(fixed)
        if evaluated is not None:
            row_min[n] = evaluated[1].min()
        if progress is not None:
            progress(n + 1, len(rows))
    best = float(row_min.min()) if len(rows) else np.inf
    if not np.isfinite(best):
        return None
    threshold = best + TIE_RTOL * abs(best)
    chosen: tuple[tuple[int, ...], float] | None = None
    for n in np.flatnonzero(row_min <= threshold):
        fixed = rows[n]
        xs, totals = row(fixed)
        hits = np.flatnonzero(totals <= threshold)
        # Within a row only inner and last vary, in opposite directions: the chain-order-smallest tuple takes
        # the smallest x when the inner stage comes first in the chain, else the smallest y (largest x).
        hit = hits[0] if inner < last else hits[-1]
        counts = [0] * k
        for i, g in zip(outer, fixed, strict=True):
            counts[i] = g
        counts[inner] = int(xs[hit])
        counts[last] = num_gpus - sum(fixed) - int(xs[hit])
        candidate = (tuple(counts), float(totals[hit]))
        if chosen is None or candidate[0] < chosen[0]:
            chosen = candidate
    return chosen


def search_reasoning(
    task: ReasoningTask, model: CostModel, progress: Progress | None = None
) -> dict[str, Schedule | None]:
    """The best collocated and the best disaggregated schedule of a reasoning chain (None where impossible)."""
    costs = stage_costs(task, model)
    G, rbs = task.num_gpus, task.rollout_batch_size
    at_all = [cost(G) for cost in costs]
    collocated = None
    if task.collocated_allowed and all(p is not None for p in at_all):
        collocated = Schedule(
            mode=COLLOCATED,
            names=task.chain,
            ranges=((0, G - 1),) * len(costs),
            per_batch=tuple(at_all),
            total=collocated_total(at_all, rbs),
            gpu_sets=1,
        )
    disaggregated = None
    if len(costs) <= G:
        tables = [cost.table(G) for cost in costs]
        # The rollout comes first in the chain, so it starts at GPU 0: no engine of it may straddle two nodes.
        tables[task.chain.index("rollout")][task.rollout_gpu_limit + 1 :] = np.inf
        split = best_split(tables, G, rbs, progress)
        if split is not None:
            counts, _ = split
            per_batch = tuple(cost(g) for cost, g in zip(costs, counts, strict=True))
            disaggregated = Schedule(
                mode=DISAGGREGATED,
                names=task.chain,
                ranges=contiguous_ranges(counts),
                per_batch=per_batch,
                total=pipelined_total(per_batch, rbs),
                gpu_sets=len(costs),
            )
    return {COLLOCATED: collocated, DISAGGREGATED: disaggregated}

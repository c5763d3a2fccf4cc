"""Which queued RLJobs start now, on which free nodes: all or nothing, in queue order, no starvation.

Pure: plain dataclasses in, decisions out (no kopf, no API client), so the rules are unit-tested on plain data
and the handlers only gather the inputs and apply the result.

Words used here:
- A node is **busy** when a pod bound to it (any owner) requests its units, or an admitted RLJob holds it.
  Every other ready node of a group is **free**.
- A job's **demand** per NodeGroup: how many of the group's nodes its cluster has (positions 0..n-1, in the
  group's rank order) and which of those positions run a worker pod. Only those need to be free: a position
  no process uses may be filled by a busy node, so two jobs that use different nodes of one group (ranks 0-7
  and 8-15 of a800) run side by side.
- **Admission** picks, for each group, the nodes that fit the demand (a free node for every used position: the
  earliest in rank order, or packed into the fewest racks and blocks where the nodes are labelled with them:
  packing.py) and reserves the used ones together; a job that does not fit gets nothing.

On a NodeGroup whose GPUs come from DRA (gpuAllocation: dra) jobs share nodes: a used position needs a node with
as many **free GPUs** as the job's plan uses there (GPUs no claim holds and no admitted job reserved), and the job
reserves exactly those GPUs (the lowest free ones), not the node.

Queue order: higher `spec.priority` first, then older `creationTimestamp`, then namespace/name.
No starvation: the first job in the queue that does not fit (the head) claims the free nodes it would use, so
jobs behind it can only take nodes the head does not need (backfill). The head's claim only grows as nodes
are freed, so it starts once the jobs that hold its nodes end; then the next waiting job becomes the head.
Only a job of higher priority can pass a waiting job.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace

from rlplace_operator.admission.packing import Layout, choose, match
from rlplace_operator.api.names import TOPOLOGY_LEVELS, JobKey


@dataclass(frozen=True, slots=True)
class GroupDemand:
    """What a job needs of one NodeGroup."""

    group: str
    nodes: int
    """How many of the group's nodes the job's cluster has (positions 0..nodes-1 in rank order)."""
    used: frozenset[int]
    """Positions that run a worker pod and so must be free nodes."""
    gpus: tuple[tuple[int, int], ...] | None = None
    """On a DRA group: (position, GPUs the plan uses on that node) per used position; None: whole nodes."""
    exchanges: bool = False
    """Its processes exchange weights with the job's other such groups (trainer and rollout): they are packed
    together under one domain of a level they share when one holds them all (`packing.together`)."""
    cpu_only: bool = False
    """It counts no GPUs (env, reward, a CPU-only group): CPU-only nodes first, then nodes in the domains the
    job's other groups use, and a GPU node elsewhere last (`packing.cpu_first`)."""

    def gpus_at(self, position: int) -> int:
        return dict(self.gpus or ()).get(position, 0)


@dataclass(frozen=True, slots=True)
class QueuedJob:
    """A job that waits for admission."""

    key: JobKey
    priority: int
    created: str
    """metadata.creationTimestamp (RFC 3339 in UTC, so it sorts as text)."""
    demand: tuple[GroupDemand, ...] | None
    """None while the operator has not planned the job yet (just after a restart)."""
    excluded: Mapping[str, str] = field(default_factory=dict)
    """Nodes this job's workers cannot run on, and why (a taint they do not tolerate: selection.py)."""
    within: str | None = None
    """spec.topology Required: the level (a node label key among its groups' levels) one domain of which must hold
    each of its groups' nodes; None: packed where it can be, never waiting for it."""

    def order(self) -> tuple[int, str, JobKey]:
        return (-self.priority, self.created, self.key)


@dataclass(frozen=True, slots=True)
class Pool:
    """The nodes jobs can get: each group's ready nodes in rank order, and who keeps which node busy."""

    groups: Mapping[str, Sequence[str]]
    busy: Mapping[str, str] = field(default_factory=dict)
    """Busy node -> what holds it, e.g. `job ns/name` or `pod ns/name`."""
    free_gpus: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    """Nodes of DRA groups -> their free GPUs (host GPU numbers, ascending); a node not here has none free."""
    domains: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Node -> its network domains, widest first (its group's `levels`); a node not here, or with an empty label,
    is in no domain of that level. Admission packs a job's nodes into the fewest of them."""
    levels: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    """Group -> its network levels, widest first (the node label keys of `domains`); a group not here has the
    default ones (api.names.TOPOLOGY_LEVELS)."""
    gpu_nodes: frozenset[str] = frozenset()
    """Nodes that have GPUs, whichever group counts them: a CPU-only group takes them last."""
    memo: dict[tuple[str, int], Layout] = field(default_factory=dict, compare=False, repr=False)
    """The groups' `Layout`s, built when first asked (share one dict between the pools of one snapshot)."""

    def level_index(self, group: str, level: str | None) -> int | None:
        """Where `level` is in the group's domain paths (None: no level required). A level the group does not
        have is one past its last: no node is in a domain of it, so a job requiring it is never admitted there
        (provisioning refuses such a job before it queues: `unmeetable`)."""
        if level is None:
            return None
        levels = self.levels.get(group, TOPOLOGY_LEVELS)
        return levels.index(level) if level in levels else len(levels)


@dataclass(frozen=True, slots=True)
class Admitted:
    """The job starts now on these nodes."""

    key: JobKey
    cluster: tuple[tuple[str, tuple[str, ...]], ...]
    """Per group in the job's order: the nodes of the job's cluster in rank order (used or not)."""
    nodes: frozenset[str]
    """The nodes that run the job's worker pods and are reserved whole (device-plugin groups)."""
    gpus: tuple[tuple[str, tuple[int, ...]], ...] = ()
    """The nodes of DRA groups that run its worker pods, with the GPUs reserved on each (host GPU numbers)."""

    @property
    def worker_nodes(self) -> frozenset[str]:
        """Every node that runs one of the job's worker pods."""
        return self.nodes | {node for node, _ in self.gpus}


@dataclass(frozen=True, slots=True)
class Waiting:
    """The job stays queued."""

    key: JobKey
    position: int
    """1 for the head of the queue."""
    shortfall: tuple[tuple[str, int], ...]
    """(group, how many more free nodes it needs), in the job's group order."""
    notes: tuple[str, ...] = ()
    """Why nodes of those groups cannot take the job, e.g. `node X has taint k=v:NoSchedule, not tolerated`."""
    per_gpu: tuple[str, ...] = ()
    """Those of the groups whose GPUs jobs share (DRA): it waits for free GPUs there, not free nodes."""

    @property
    def reason(self) -> str:
        """What the job waits for, e.g. `1 free node of 4090`, `1 node of a800 with enough free GPUs`."""
        if not self.shortfall:
            return "the jobs ahead of it in the queue"
        parts = [
            f"{count} node{'s' if count != 1 else ''} of {group} with enough free GPUs"
            if group in self.per_gpu
            else f"{count} free node{'s' if count != 1 else ''} of {group}"
            for group, count in self.shortfall
        ]
        notes = f" ({'; '.join(self.notes[:MAX_NOTES])}{'; ...' if len(self.notes) > MAX_NOTES else ''})"
        return ", ".join(parts) + (notes if self.notes else "")


Decision = Admitted | Waiting


def unmeetable(job: QueuedJob, pool: Pool) -> str | None:
    """Why the job's required level could not hold it even with every ready node of its groups free (None: it
    could): a level one of its groups does not have, or whose largest domain has fewer nodes than the job uses
    there. Such a job never enters the queue, where as its head it would claim a domain it can never fill."""
    if job.within is None or job.demand is None:
        return None
    for demand in job.demand:
        levels = pool.levels.get(demand.group, TOPOLOGY_LEVELS)
        if job.within not in levels:
            listed = ", ".join(levels) or "none"
            return (
                f"spec.topology.level {job.within} is not a level of NodeGroup {demand.group} (its levels: {listed};"
                " the NodeGroup's spec.topology declares them)"
            )
        depth = levels.index(job.within) + 1
        sizes: dict[tuple[str, ...], int] = {}
        for node in pool.groups.get(demand.group, ()):
            path = pool.domains.get(node, ())[:depth]
            if node not in job.excluded and len(path) == depth and path[-1]:
                sizes[path] = sizes.get(path, 0) + 1
        needs = len(demand.used)
        largest = max(sizes.items(), key=lambda item: item[1], default=None)  # the first in rank order
        if largest is None or largest[1] < needs:
            where = (
                f"its largest, {'/'.join(largest[0])}, has {largest[1]} ready node{'s' if largest[1] != 1 else ''}"
                if largest
                else "no ready node of the group carries that label"
            )
            return f"spec.topology requires the job's {needs} nodes of {demand.group} in one {job.within}: {where}"
    return None


#: Notes a waiting reason quotes at most (it is a status field and a printer column).
MAX_NOTES = 2


def _notes(
    job: QueuedJob,
    pool: Pool,
    shortfall: tuple[tuple[str, int], ...],
    taken: Collection[str],
    free: Mapping[str, Sequence[int]],
) -> tuple[str, ...]:
    """Why the short groups' excluded nodes cannot take the job, and for a required level that level and how many
    of its domains the free nodes would have it span."""
    nodes = dict.fromkeys(n for group, _ in shortfall for n in pool.groups.get(group, ()) if n in job.excluded)
    within: tuple[str, ...] = ()
    if job.within is not None:
        within = (f"all of a group's nodes in one {job.within}",)
        loose = fit(replace(job, within=None), pool, taken, free)
        if isinstance(loose, Admitted):
            spans = []
            for group, chosen in loose.cluster:
                depth = pool.level_index(group, job.within)
                assert depth is not None
                count = len({pool.domains.get(n, ())[: depth + 1] for n in chosen if n in loose.worker_nodes})
                spans.append(count)
            within = (f"{within[0]}: the free nodes would span {max(spans)}",)
    return (*within, *(job.excluded[n] for n in nodes))


def fit(
    job: QueuedJob, pool: Pool, taken: Collection[str], free: Mapping[str, Sequence[int]] | None = None
) -> Admitted | tuple[tuple[str, int], ...]:
    """The job's cluster on the nodes not in `taken` (and the `free` GPUs of DRA nodes, by default the pool's),
    or per group how many more free nodes it needs."""
    assert job.demand is not None
    taken = {*taken, *job.excluded}
    free = pool.free_gpus if free is None else free
    cluster, nodes, shortfall = [], set(), []
    gpus: dict[str, tuple[int, ...]] = {}
    choices = choose(job, pool, taken, free)
    for demand in job.demand:
        # Two positions of one job on one node never happen: a node is one position of the job's cluster.
        chosen = choices[demand.group]
        missing = sum(1 for position in demand.used if chosen[position] is None)
        if missing:
            shortfall.append((demand.group, missing))
            continue
        cluster.append((demand.group, tuple(n for n in chosen if n is not None)))
        for position in demand.used:
            node = chosen[position]
            assert node is not None
            if demand.gpus is None:
                nodes.add(node)
            else:
                gpus[node] = tuple(sorted(free.get(node, ()))[: demand.gpus_at(position)])
    if shortfall:
        return tuple(shortfall)
    return Admitted(job.key, tuple(cluster), frozenset(nodes), tuple(sorted(gpus.items())))


def _claim(job: QueuedJob, pool: Pool, taken: Collection[str], free: Mapping[str, Sequence[int]]) -> Admitted:
    """What the head of the queue would use now (free nodes, free GPUs of DRA nodes): kept from the jobs
    behind it."""
    assert job.demand is not None
    taken = {*taken, *job.excluded}
    claimed: set[str] = set()
    gpus: dict[str, tuple[int, ...]] = {}
    choices = choose(job, pool, taken, free)
    for demand in job.demand:
        ranked = pool.groups.get(demand.group, ())
        chosen = choices[demand.group]
        if demand.gpus is not None and any(chosen[position] is None for position in demand.used):
            # No node has all the GPUs it waits for yet: it keeps the free ones of its earliest nodes, so jobs
            # behind it cannot take GPUs as they are freed one by one (its claim grows until it fits).
            chosen = match(GroupDemand(demand.group, demand.nodes, demand.used), ranked, taken, free)
        for position, node in enumerate(chosen):
            if position not in demand.used or node is None:
                continue
            if demand.gpus is None:
                claimed.add(node)
            else:
                gpus[node] = tuple(sorted(free.get(node, ()))[: demand.gpus_at(position)])
    return Admitted(job.key, (), frozenset(claimed), tuple(gpus.items()))


def _take(free: dict[str, tuple[int, ...]], gpus: Sequence[tuple[str, tuple[int, ...]]]) -> None:
    """Take reserved GPUs out of the free ones of their nodes."""
    for node, reserved in gpus:
        free[node] = tuple(g for g in free.get(node, ()) if g not in reserved)


def decide(queue: Sequence[QueuedJob], pool: Pool) -> dict[JobKey, Decision]:
    """One pass over the queue: which jobs start (and where) and which wait (position, what for).

    A job whose demand is not known yet (the operator restarted and has not planned it) blocks every job
    behind it for this pass, so a restart never lets a later job take an earlier one's place.
    """
    taken: set[str] = set(pool.busy)
    free = dict(pool.free_gpus)
    decisions: dict[JobKey, Decision] = {}
    position = 0
    blocked = False
    for job in sorted(queue, key=QueuedJob.order):
        if job.demand is None or blocked:
            position += 1
            decisions[job.key] = Waiting(job.key, position, ())
            blocked = True
            continue
        result = fit(job, pool, taken, free)
        if isinstance(result, Admitted):
            decisions[job.key] = result
            taken.update(result.nodes)
            _take(free, result.gpus)
            continue
        position += 1
        per_gpu = tuple(d.group for d in job.demand if d.gpus is not None)
        decisions[job.key] = Waiting(job.key, position, result, _notes(job, pool, result, taken, free), per_gpu)
        if position == 1:
            claim = _claim(job, pool, taken, free)
            taken.update(claim.nodes)
            _take(free, claim.gpus)
    return decisions


def busy_nodes(
    pod_units: Mapping[str, Mapping[str, Mapping[str, int]]],
    unit_resources: set[str],
    held: Mapping[str, JobKey],
) -> dict[str, str]:
    """Busy node -> what holds it, from the pods bound to each node and the nodes admitted jobs hold.

    `pod_units` maps node -> pod ("ns/name") -> the extended resources it requests. A pod makes its node busy
    when it requests any unit resource the groups count (nvidia.com/gpu, a robot resource); our worker pods
    request all of a node's units, so a node with some units taken cannot host one.
    """
    busy = {node: f"job {key[0]}/{key[1]}" for node, key in held.items()}
    for node, pods in pod_units.items():
        if node in busy:
            continue
        for pod, requests in pods.items():
            if any(requests.get(resource, 0) > 0 for resource in unit_resources):
                busy[node] = f"pod {pod}"
                break
    return busy


def demand_from_workers(
    groups: Sequence[tuple[str, Sequence[str]]],
    worker_nodes: set[str],
    keep_whole: set[str],
    gpus: Mapping[str, int] | None = None,
    per_gpu: Collection[str] = (),
) -> tuple[GroupDemand, ...]:
    """A job's demand from the nodes its plan on the groups' ready nodes uses.

    `groups` are the job's groups in order with their ready nodes in rank order. A node in two of the job's
    groups counts in the first (as in the job's cluster). Groups in `keep_whole` keep all their nodes: a
    placement that counts ranks across several groups (`nodeGroup: a800,4090`) numbers the later group's
    ranks after all of the earlier group's, so the earlier group cannot be cut short. Groups in `per_gpu` (DRA)
    need on each used node only the GPUs the plan uses there (`gpus`: node -> count).
    """
    seen: set[str] = set()
    demands = []
    for group, ranked in groups:
        used = frozenset(i for i, node in enumerate(ranked) if node in worker_nodes and node not in seen)
        seen.update(ranked)
        count = len(ranked) if group in keep_whole else (max(used) + 1 if used else 0)
        needs = tuple((i, (gpus or {}).get(ranked[i], 0)) for i in sorted(used)) if group in per_gpu else None
        demands.append(GroupDemand(group, count, used, needs))
    return tuple(demands)

"""Placement strategies (docs/placement.md, "Strategies"): from resource ranks to one `Placement` per process.

Flexible and Packed place processes on hardware units (GPUs or robots); Node places them on whole nodes.
Every strategy checks its input against the cluster in `get_placement`, which `ComponentPlacement` calls
when it is built, so a bad placement fails at parse time, not at launch.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Sequence

from placement_core.cluster import ACCELERATOR, CLUSTER_GROUP, Cluster, RankSpace
from placement_core.errors import CapacityError, PlacementError
from placement_core.placement import NO_RANKS, Placement, RankTuple


def _labels(node_group: str | Sequence[str] | None, default: str) -> tuple[str, ...]:
    if node_group is None:
        return (default,)
    if isinstance(node_group, str):
        return tuple(label.strip() for label in node_group.split(","))
    return tuple(str(label) for label in node_group)


class PlacementStrategy(ABC):
    """Turns a list of resource ranks per process into `Placement` records for a given cluster."""

    kind: str

    def __init__(self, node_group: str | Sequence[str] | None, default_group: str) -> None:
        self.node_group_labels = _labels(node_group, default_group)
        self._cache: tuple[Cluster, bool, list[Placement]] | None = None

    def get_placement(self, cluster: Cluster, isolate_accelerator: bool = True) -> list[Placement]:
        """One Placement per process, in rank order. Raises PlacementError if the ranks do not fit."""
        return list(self._placements(cluster, isolate_accelerator))

    def num_processes(self, cluster: Cluster) -> int:
        """How many processes the strategy makes on `cluster`; checks the placement like `get_placement`."""
        cached = self._cache
        if cached is not None and cached[0] is cluster:
            return len(cached[2])  # the count does not depend on isolate_accelerator
        return len(self._placements(cluster, True))

    def _placements(self, cluster: Cluster, isolate_accelerator: bool) -> list[Placement]:
        """The cached records (immutable, so they are shared); get_placement hands out a new list of them."""
        cached = self._cache
        if cached is None or cached[0] is not cluster or cached[1] != isolate_accelerator:
            cached = self._cache = (cluster, isolate_accelerator, self._place(cluster, isolate_accelerator))
        return cached[2]

    @abstractmethod
    def _place(self, cluster: Cluster, isolate: bool) -> list[Placement]: ...


class _HardwareStrategy(PlacementStrategy):
    """Shared by Flexible and Packed: every process owns (or shares) units of one type on one node."""

    def __init__(self, node_group: str | Sequence[str] | None) -> None:
        super().__init__(node_group, CLUSTER_GROUP)

    @abstractmethod
    def _rank_lists(self, space: RankSpace) -> list[list[int]]:
        """Each process's ranks in the space, processes in rank order."""

    def _space(self, cluster: Cluster) -> RankSpace:
        space = cluster.rank_space(self.node_group_labels)
        if space.is_node_space:
            raise PlacementError(
                f"node group '{','.join(self.node_group_labels)}' has no hardware to place on "
                "(no accelerators and no hardware type); use a node placement"
            )
        return space

    def _place(self, cluster: Cluster, isolate: bool) -> list[Placement]:
        space = self._space(cluster)
        rank_lists = self._rank_lists(space)
        nodes, locals_, types, owners = space.node, space.local, space.hardware_type, space.group
        size = len(space)
        counts = _NodeCounts([nodes[r[0]] for r in rank_lists if 0 <= r[0] < size])
        cluster_nodes = cluster.nodes
        placements: list[Placement] = []
        # One RankTuple per distinct local-rank tuple (and its CUDA_VISIBLE_DEVICES strings), shared by every
        # process that has it: a cluster has few distinct ones, and a dict lookup is cheaper than building.
        shared: dict[tuple[int, ...], tuple[RankTuple, RankTuple]] = {}
        for process, ranks in enumerate(rank_lists):
            first = ranks[0]
            if not 0 <= first < size or not 0 <= ranks[-1] < size:
                bad = next(r for r in ranks if not 0 <= r < size)
                raise CapacityError(f"process {process}: rank {bad} is out of range ({space.describe()})")
            node = nodes[first]
            hw_type = types[first]
            for r in ranks:
                if nodes[r] != node:
                    raise PlacementError(
                        f"process {process} spans nodes {node} and {nodes[r]} (ranks {_ranks(ranks)}); "
                        "a process must stay on one node"
                    )
                if types[r] != hw_type:
                    raise PlacementError(
                        f"process {process} mixes hardware types {hw_type} and {types[r]} (ranks {_ranks(ranks)})"
                    )
            # tuple([...]) and map: a generator into tuple() costs twice as much on this hot path.
            key = tuple([locals_[r] for r in ranks])
            made = shared.get(key)
            if made is None:
                made = shared[key] = (RankTuple(key), RankTuple(map(str, key)))
            local = made[0]
            if hw_type == ACCELERATOR and isolate:
                visible = made[1]
                accel_rank = local[0]
            else:
                visible = cluster.visible_devices[node]
                accel_rank = 0 if visible else -1
            placement_node, local_rank, local_world_size = counts.next(node)
            placements.append(
                Placement(
                    process,
                    node,
                    placement_node,
                    accel_rank,
                    cluster_nodes[node].accelerator_type,
                    local_rank,
                    local_world_size,
                    visible,
                    isolate,
                    local,
                    owners[first],
                )
            )
        return placements


class _NodeCounts:
    """Per node, in the order processes come: the node's index among the strategy's nodes (by first
    appearance), and each next process's local rank and the node's process count."""

    def __init__(self, process_nodes: Sequence[int]) -> None:
        self.per_node = Counter(process_nodes)  # keeps first-appearance order
        self.index = {node: i for i, node in enumerate(self.per_node)}
        self.seen = dict.fromkeys(self.per_node, 0)

    def next(self, node: int) -> tuple[int, int, int]:
        local_rank = self.seen[node]
        self.seen[node] = local_rank + 1
        return self.index[node], local_rank, self.per_node[node]


def _ranks(ranks: Sequence[int]) -> str:
    return ",".join(map(str, ranks))


class FlexiblePlacementStrategy(_HardwareStrategy):
    """One list of hardware ranks per process; ranks count over the selected node groups (default: all)."""

    kind = "flexible"

    def __init__(
        self,
        hardware_ranks_list: Sequence[Sequence[int]],
        node_group_label: str | Sequence[str] | None = None,
    ) -> None:
        super().__init__(node_group_label)
        lists = []
        for process, ranks in enumerate(hardware_ranks_list):
            ranks = sorted(ranks)
            if not ranks:
                raise PlacementError(f"process {process} has no hardware ranks")
            if any(isinstance(r, bool) or not isinstance(r, int) or r < 0 for r in ranks):
                raise PlacementError(f"process {process}: hardware ranks must be integers >= 0, got {ranks}")
            if len(set(ranks)) != len(ranks):
                raise PlacementError(f"process {process} lists a hardware rank twice ({_ranks(ranks)})")
            lists.append(ranks)
        if not lists:
            raise PlacementError("a flexible placement needs at least one process")
        # Stable: processes that share their first rank keep their given order.
        lists.sort(key=lambda ranks: ranks[0])
        self.hardware_ranks_list: list[list[int]] = lists

    def _rank_lists(self, space: RankSpace) -> list[list[int]]:
        return self.hardware_ranks_list


class PackedPlacementStrategy(_HardwareStrategy):
    """Ranks start..end, `num_hardware_per_process` each, every process's units `stride` apart."""

    kind = "packed"

    def __init__(
        self,
        start_hardware_rank: int,
        end_hardware_rank: int,
        num_hardware_per_process: int = 1,
        stride: int = 1,
        node_group: str | Sequence[str] | None = None,
    ) -> None:
        super().__init__(node_group)
        given = (start_hardware_rank, end_hardware_rank, num_hardware_per_process, stride)
        if any(isinstance(v, bool) or not isinstance(v, int) for v in given):
            raise PlacementError(
                "packed placement: start, end, num_hardware_per_process and stride must be integers, "
                f"got {', '.join(map(repr, given))}"
            )
        if start_hardware_rank < 0 or end_hardware_rank < start_hardware_rank:
            raise PlacementError(
                f"packed placement needs 0 <= start <= end, got start {start_hardware_rank}, end {end_hardware_rank}"
            )
        if num_hardware_per_process < 1 or stride < 1:
            raise PlacementError(
                f"packed placement needs num_hardware_per_process >= 1 and stride >= 1, "
                f"got {num_hardware_per_process} and {stride}"
            )
        count = end_hardware_rank - start_hardware_rank + 1
        block = num_hardware_per_process * stride
        if count % block:
            raise PlacementError(
                f"packed placement: {count} ranks ({start_hardware_rank}-{end_hardware_rank}) are not divisible "
                f"by num_hardware_per_process*stride = {block}"
            )
        self.start_hardware_rank = start_hardware_rank
        self.end_hardware_rank = end_hardware_rank
        self.num_hardware_per_process = num_hardware_per_process
        self.stride = stride

    def _rank_lists(self, space: RankSpace) -> list[list[int]]:
        if self.end_hardware_rank >= len(space):
            raise CapacityError(
                f"packed placement: end rank {self.end_hardware_rank} is out of range ({space.describe()})"
            )
        n, stride = self.num_hardware_per_process, self.stride
        # Taking the smallest unused rank each time fills each block of n*stride ranks `stride` processes
        # at a time: block b, offset j -> b+j, b+j+stride, ...
        return [
            list(range(block + offset, block + offset + n * stride, stride))
            for block in range(self.start_hardware_rank, self.end_hardware_rank + 1, n * stride)
            for offset in range(stride)
        ]


class NodePlacementStrategy(PlacementStrategy):
    """One process per listed node; every accelerator of the node is visible to it."""

    kind = "node"

    def __init__(self, node_ranks: Sequence[int], node_group_label: str | Sequence[str] | None = None) -> None:
        super().__init__(node_group_label, CLUSTER_GROUP)
        if not node_ranks:
            raise PlacementError("a node placement needs at least one node rank")
        if any(isinstance(r, bool) or not isinstance(r, int) or r < 0 for r in node_ranks):
            raise PlacementError(f"node ranks must be integers >= 0, got {list(node_ranks)}")
        self.node_ranks: list[int] = sorted(node_ranks)

    def _place(self, cluster: Cluster, isolate: bool) -> list[Placement]:
        space = cluster.rank_space(self.node_group_labels, nodes_only=True)
        if self.node_ranks[-1] >= len(space):
            raise CapacityError(f"node rank {self.node_ranks[-1]} is out of range ({space.describe()})")
        counts = _NodeCounts([space.node[index] for index in self.node_ranks])
        placements = []
        for process, index in enumerate(self.node_ranks):
            node = space.node[index]
            visible = cluster.visible_devices[node]
            placement_node, local_rank, local_world_size = counts.next(node)
            placements.append(
                Placement(
                    process,
                    node,
                    placement_node,
                    0 if visible else -1,
                    cluster.nodes[node].accelerator_type,
                    local_rank,
                    local_world_size,
                    visible,
                    isolate,
                    NO_RANKS,
                    space.group[index],
                )
            )
        return placements

"""The Placement record: where one process runs and which accelerators it sees, and the environment a launched
process gets from it (docs/placement.md, "The Placement record")."""

from __future__ import annotations

from typing import NamedTuple


class RankTuple(tuple):  # type: ignore[type-arg]
    """An immutable tuple that also compares equal to a list with the same items.

    The reference documents `visible_accelerators` and `local_hardware_ranks` as lists, and code written
    against it compares them with lists (`p.local_hardware_ranks == [0, 1]`); records stay immutable and
    hashable. Strategies make one per distinct value and share it, so it costs nothing per process.
    """

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, list):
            return tuple.__eq__(self, tuple(other))
        return tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = tuple.__hash__

    def __repr__(self) -> str:
        return list.__repr__(list(self))


#: The empty RankTuple (node placements hold no hardware ranks).
NO_RANKS = RankTuple()


class Placement(NamedTuple):
    """Where one process of a component runs and which accelerators it sees.

    Immutable, so strategies cache these records and hand the same ones to every caller. A NamedTuple rather
    than a frozen dataclass: a frozen dataclass's constructor sets each field through object.__setattr__,
    which made building 36,864 records seven times slower.
    """

    rank: int
    """Process rank in the component (its position in the strategy's list)."""
    cluster_node_rank: int
    """Global node rank."""
    placement_node_rank: int
    """Index of the node among the distinct nodes the strategy uses, in order of first appearance."""
    local_accelerator_rank: int
    """First visible accelerator; -1 on a node without accelerators."""
    accelerator_type: str
    """The node's accelerator type (`NV_GPU`, `NO_ACCEL`)."""
    local_rank: int
    """Index of the process among the strategy's processes on its node."""
    local_world_size: int
    """Number of the strategy's processes on the node (processes sharing a GPU included)."""
    visible_accelerators: RankTuple
    """What CUDA_VISIBLE_DEVICES holds for the process (a tuple equal to the documented list)."""
    isolate_accelerator: bool
    """The flag `get_placement` was called with."""
    local_hardware_ranks: RankTuple
    """The process's hardware ranks, local to its node (empty for node placements; equal to the list)."""
    node_group_label: str
    """Label of the node group that owns the process's first rank."""

    def to_dict(self) -> dict[str, object]:
        """JSON-ready fields (tuples as lists)."""
        fields: dict[str, object] = self._asdict()
        fields["visible_accelerators"] = list(self.visible_accelerators)
        fields["local_hardware_ranks"] = list(self.local_hardware_ranks)
        return fields


def placement_env(placement: Placement, world_size: int, master_addr: str) -> dict[str, str]:
    """The variables that let a worker start without this library, all as strings.

    `RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES=1` keeps Ray from overwriting the planned visibility.
    """
    visible = ",".join(placement.visible_accelerators)
    return {
        "RANK": str(placement.rank),
        "WORLD_SIZE": str(world_size),
        "NODE_RANK": str(placement.placement_node_rank),
        "CLUSTER_NODE_RANK": str(placement.cluster_node_rank),
        "LOCAL_ACCELERATOR_RANK": str(placement.local_accelerator_rank),
        "NODE_LOCAL_RANK": str(placement.local_rank),
        "NODE_LOCAL_WORLD_SIZE": str(placement.local_world_size),
        "VISIBLE_DEVICES": visible,
        "CUDA_VISIBLE_DEVICES": visible,
        "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES": "1",
        "ISOLATE_ACCELERATOR": "1" if placement.isolate_accelerator else "0",
        "LOCAL_HARDWARE_RANKS": ",".join(map(str, placement.local_hardware_ranks)),
        "NODE_GROUP_LABEL": placement.node_group_label,
        "MASTER_ADDR": master_addr,
    }

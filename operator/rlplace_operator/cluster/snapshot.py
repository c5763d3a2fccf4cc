"""What the operator's watches hold, copied at one moment: the `Snapshot` one reconcile or queue pass reads.

kopf keeps an in-memory index per watched kind (controllers/indexes.py); handlers and timers run in threads while
kopf changes those indexes from the watch streams, so every reader works on copies taken in one go, never on a
live index. Each index maps a key to a list of values; ours hold one value per key (`indexed`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rlplace_operator.api.names import JobKey
from rlplace_operator.cluster.selection import with_slices

#: The indexes by name (kopf names an index after the function that fills it: controllers/indexes.py).
NODE_INDEX = "node_index"
RESOURCE_SLICE_INDEX = "resourceslice_index"
NODEGROUP_INDEX = "nodegroup_index"
RLJOB_INDEX = "rljob_index"
JOB_PODS_INDEX = "job_pods_index"
RAYCLUSTER_INDEX = "ray_children_index"
RAYJOB_INDEX = "rayjob_children_index"
POD_UNITS_INDEX = "pod_units_index"
HOLDINGS_INDEX = "raycluster_nodes_index"
RESOURCE_CLAIM_INDEX = "resourceclaim_index"
DEVICE_CLASS_INDEX = "deviceclass_index"


class IndexChanging(RuntimeError):
    """An index kept changing while it was copied (a burst of watch events): look again in a moment."""


def indexed(index: Mapping[Any, Any], key: object) -> Any | None:
    """The one value an index (or its copy) holds for `key`, or None."""
    store = index.get(key)
    return next(iter(store), None) if store is not None else None


def copy_index(index: Mapping[Any, Any]) -> dict[Any, list[Any]]:
    """A plain copy of an index (key -> the list of its values), taken in one go.

    Iterating a live index raises "dictionary changed size during iteration" under a burst. The key list and each
    store are copied by `list()` (one C call each, so no other thread runs in between); a key gone in the meantime
    is skipped; the copy is retried if the runtime still reports a change.
    """
    for _ in range(10):
        try:
            copied: dict[Any, list[Any]] = {}
            for key in list(index):
                store = index.get(key)
                if store is not None:
                    values = list(store)
                    if values:
                        copied[key] = values
            return copied
        except RuntimeError:
            continue
    raise IndexChanging("an index kept changing while it was copied")


def one(indexes: Mapping[str, Any], index: str, key: object) -> Any | None:
    """A copy of the one value the live index `index` holds for `key` (None: none), without copying the index."""
    store = indexes[index].get(key)
    values = list(store) if store is not None else []
    return values[0] if values else None


@dataclass(frozen=True, eq=False)
class Snapshot:
    """Copies of the operator's indexes taken at one moment: what one reconcile or queue pass reads.

    Compared and hashed by identity: what is derived from one snapshot (the admission `AdmissionWorld`) is kept
    per snapshot, once for every job of a pass."""

    nodes: Mapping[str, list[Any]]
    """Node name -> [cluster.selection.NodeInfo], each carrying its ResourceSlices."""
    nodegroups: Mapping[str, list[Any]]
    """NodeGroup name -> [(spec, status)] as on the wire."""
    rljobs: Mapping[JobKey, list[Any]]
    """Job key -> [its index entry: uid, generation, spec, status, priority, ...]."""
    rayclusters: Mapping[JobKey, list[Any]]
    """Job key -> [admission.ledger.Holding]: what each RayCluster of rlplace's holds."""
    pods: Mapping[str, list[Any]]
    """Node -> [admission.queue.PodUse]: bound pods that request extended resources."""
    claims: Mapping[tuple[str, str], list[Any]] = field(default_factory=dict)
    """(driver, pool) -> the devices allocated claims hold there."""

    @classmethod
    def of(cls, indexes: Mapping[str, Any]) -> Snapshot:
        """From a handler's indexes (kopf passes each by its function's name); nodes carry their ResourceSlices."""
        return cls(
            nodes=with_slices(copy_index(indexes[NODE_INDEX]), copy_index(indexes.get(RESOURCE_SLICE_INDEX, {}))),
            nodegroups=copy_index(indexes[NODEGROUP_INDEX]),
            rljobs=copy_index(indexes[RLJOB_INDEX]),
            rayclusters=copy_index(indexes[HOLDINGS_INDEX]),
            pods=copy_index(indexes[POD_UNITS_INDEX]),
            claims=copy_index(indexes.get(RESOURCE_CLAIM_INDEX, {})),
        )

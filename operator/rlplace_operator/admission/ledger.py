"""The reservations of this operator process and what it remembers of each job's planning, under one lock.

Every handler thread shares one Ledger (made at start-up), so two jobs admitted at the same moment never get the
same node. After a restart it starts empty and is rebuilt from what exists: every RayCluster the operator made
carries the `rlplace.io/nodes` annotation (and `rlplace.io/gpus` on DRA nodes), which the holdings index reads,
and kopf fills the indexes before any handler runs.
"""

from __future__ import annotations

import functools
import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from rlplace_operator.admission.rules import Admitted, GroupDemand
from rlplace_operator.api.names import JobKey
from rlplace_operator.api.nodegroup import NodeGroupSpec, NodeGroupStatus
from rlplace_operator.api.rljob import RLJobSpec
from rlplace_operator.cluster.selection import JobGroup
from rlplace_operator.cluster.snapshot import Snapshot

#: Job shapes whose demand is kept for other jobs of the same shape (a new node set makes new shapes).
MAX_SHAPES = 64


@dataclass(frozen=True, slots=True)
class Holding:
    """What an admitted job holds: whole nodes, and GPUs of DRA nodes."""

    nodes: frozenset[str] = frozenset()
    gpus: Mapping[str, frozenset[int]] = field(default_factory=dict)


@dataclass(frozen=True)
class PlannedDemand:
    """A job planned on all its groups' ready nodes: what it needs, and the spec to plan its admitted nodes
    with (auto placement resolved to the entries the search chose, so the search does not run again on
    the smaller cluster of admitted nodes)."""

    demand: tuple[GroupDemand, ...]
    spec: RLJobSpec
    predicted_iteration_time: float | None
    excluded: Mapping[str, str] = field(default_factory=dict)
    """Nodes of its groups whose taints its workers do not tolerate, and why (selection.untolerated_nodes)."""

    @functools.cached_property
    def tolerations_key(self) -> tuple[tuple[str, ...], str]:
        """What decides the nodes its taints keep the job off: its groups and its pod settings (jobs of a burst
        share one, so a pass checks the taints once for all of them)."""
        return tuple(self.spec.node_groups), self.spec.pods.model_dump_json()


@dataclass
class Ledger:
    """Reservations of this operator process and the planned demand of each job, under one lock."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    #: Nodes admitted jobs hold whole (device-plugin groups).
    reserved: dict[JobKey, frozenset[str]] = field(default_factory=dict)
    #: GPUs of DRA nodes reserved by admitted jobs (node -> host GPU numbers), until their claims hold them.
    reserved_gpus: dict[JobKey, Mapping[str, frozenset[int]]] = field(default_factory=dict)
    demands: dict[JobKey, tuple[tuple, PlannedDemand]] = field(default_factory=dict)
    #: Demands by job shape, shared by jobs planned the same (the oldest dropped past MAX_SHAPES).
    shapes: dict[tuple, tuple] = field(default_factory=dict)
    #: Each NodeGroup's index entry parsed, by name: (the entry parsed, its JobGroup). kopf makes a new entry
    #: when the group changes, so an entry seen before is the same group: validating a status of 1,000 nodes
    #: costs milliseconds, and every admission reads every group.
    groups: dict[str, tuple[object, JobGroup]] = field(default_factory=dict)
    #: The admission world of each live snapshot: a queue pass admits every job of its snapshot against it.
    worlds: weakref.WeakKeyDictionary[Snapshot, Any] = field(default_factory=weakref.WeakKeyDictionary)

    def release(self, key: JobKey) -> None:
        with self.lock:
            self.reserved.pop(key, None)
            self.reserved_gpus.pop(key, None)

    def forget(self, key: JobKey) -> None:
        with self.lock:
            self.reserved.pop(key, None)
            self.reserved_gpus.pop(key, None)
            self.demands.pop(key, None)

    def reserve(self, key: JobKey, admitted: Admitted) -> None:
        """Hold what `admitted` picked for its job (the caller holds the lock)."""
        self.reserved[key] = admitted.nodes
        self.reserved_gpus[key] = {node: frozenset(ids) for node, ids in admitted.gpus}

    def hold(self, key: JobKey, nodes: frozenset[str]) -> None:
        """Hold nodes another admitter granted the job (Kueue), so rlplace's queue never gives them to another."""
        with self.lock:
            self.reserved[key] = nodes

    def group(self, name: str, entry: tuple[dict, dict]) -> JobGroup:
        """A NodeGroup's index entry as a JobGroup, parsed once per entry."""
        with self.lock:
            known = self.groups.get(name)
        if known is not None and known[0] is entry:
            return known[1]
        group = JobGroup(name, NodeGroupSpec.model_validate(entry[0]), NodeGroupStatus.model_validate(entry[1]))
        with self.lock:
            self.groups[name] = (entry, group)
        return group

    def demand(self, key: JobKey, fingerprint: tuple) -> PlannedDemand | None:
        with self.lock:
            known = self.demands.get(key)
        return known[1] if known is not None and known[0] == fingerprint else None

    def remember_demand(self, key: JobKey, fingerprint: tuple, demand: PlannedDemand) -> None:
        with self.lock:
            self.demands[key] = (fingerprint, demand)

    def shared_demand(self, shape: tuple) -> tuple | None:
        """The demand planned for another job of the same shape (placement fields, profile, nodes)."""
        with self.lock:
            return self.shapes.get(shape)

    def remember_shared_demand(self, shape: tuple, demand: tuple) -> None:
        with self.lock:
            self.shapes[shape] = demand
            while len(self.shapes) > MAX_SHAPES:
                self.shapes.pop(next(iter(self.shapes)))

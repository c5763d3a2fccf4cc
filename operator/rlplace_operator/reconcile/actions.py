"""What a reconcile decides to do, as data: the actions `apply.py` carries out and the status it writes.

Every decision of the reconcile is an `Outcome`: the actions (children to apply or delete, Events, the Workload's
conditions, the node reservation to drop) and the status that describes the job afterwards. Nothing here calls
the API: a recorded snapshot in, an Outcome out, is how the decisions are tested.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from rlplace_operator.api.status import RLJobStatus


@dataclass(frozen=True)
class Provision:
    """Plan the job, pass it through admission and make its children (provision.py decides how)."""


@dataclass(frozen=True)
class Apply:
    """Make these objects exist as given, in order, each adopted by `owner` (the job: its ownerReference, its
    namespace, and its labels where an object has none of that key): server-side apply for those rlplace keeps in
    step (ConfigMap, RayCluster, RayJob), create-if-absent for the immutable ones (ResourceClaimTemplate, Workload:
    a name says what they hold)."""

    objects: tuple[Mapping[str, Any], ...]
    owner: Mapping[str, Any]


@dataclass(frozen=True)
class DeleteStale:
    """Delete the job's objects of `kind` (ResourceClaimTemplate, Workload) whose names are not in `keep`: what an
    earlier plan or demand made and nothing names now."""

    kind: str
    keep: frozenset[str]


@dataclass(frozen=True)
class DeleteChildren:
    """Delete the job's RayCluster or RayJob: its pods go, its nodes are free for the queue."""


@dataclass(frozen=True)
class SuspendDriver:
    """Suspend the job's RayJob: KubeRay stops the driver and deletes the RayCluster."""


@dataclass(frozen=True)
class ReleaseNodes:
    """Drop this operator's reservation of the job's nodes."""


@dataclass(frozen=True)
class Post:
    """An Event on the RLJob."""

    warning: bool
    reason: str
    message: str


@dataclass(frozen=True)
class RequestCheckpoint:
    """Ask the job's driver to save a checkpoint now (the answer to its next progress report)."""


@dataclass(frozen=True)
class MarkWorkload:
    """Set a condition on the job's Workload (PodsReady, Finished), as the Workload's job reconciler would."""

    workload: str
    condition: str
    reason: str
    message: str


@dataclass(frozen=True)
class LowerWorkload:
    """Lower the PodSet counts of the job's admitted elastic Workload (a running job shrank in place): a JSON patch
    (builders/workload.lowered_counts) that Kueue's webhook lets through for counts that go down only."""

    workload: str
    patch: list[dict[str, Any]]


@dataclass(frozen=True)
class ReleaseWorkload:
    """Give the evicted Workload's quota back (every pod of the job is gone): `requeue` unless it was
    deactivated."""

    workload: str
    requeue: bool


@dataclass(frozen=True)
class Relocate:
    """Move the Replace ranks of lost node `node` (gone for the reason `why`) to node `to` (Kueue granted it in
    the job's Workload), or without one to a free node of its NodeGroup (relocate.py decides on the operator's
    indexes and reservations, as Provision does)."""

    node: str
    why: str
    to: str | None = None


@dataclass(frozen=True)
class MoveWorker:
    """Have KubeRay make the worker pod of `node_from` on `node_to` (builders.raycluster.moved_worker on the job's
    RayCluster `cluster`; the RayJob's held-nodes annotation follows) and delete the lost pods `pods` without a
    grace period, their node being gone."""

    cluster: str
    node_from: str
    node_to: str
    host_from: str
    host_to: str
    pods: tuple[str, ...] = ()


@dataclass(frozen=True)
class ResizeWorkers:
    """A running job's worker pods follow its plan, resized in place (docs/elastic.md): the merge patch `patch`, when
    the plan added nodes (builders.raycluster.resized_workers: the worker groups' replicas and nodes, the held-nodes
    annotation), on its RayCluster `cluster`, the annotation on its RayJob too (KubeRay reads a RayJob's cluster spec
    only when it makes the cluster); and `head`, the head pod, annotated with the plan's digest: a pod changed is a
    pod the kubelet syncs, so the driver's copy of the ConfigMap is the new plan within seconds, not up to its sync
    period."""

    cluster: str
    patch: Mapping[str, Any] | None
    head: str | None = None
    plan_digest: str = ""


@dataclass(frozen=True)
class DropWorkers:
    """Take worker pods the plan no longer has out of the job's RayCluster `cluster` (a resize took their node
    away, and the driver stopped their ranks): `drops` is pod -> (worker group, node);
    builders.raycluster.dropped_workers on the RayCluster as it is (KubeRay deletes exactly those pods), the
    RayJob's held-nodes annotation too."""

    cluster: str
    drops: Mapping[str, tuple[str, str]]


@dataclass(frozen=True)
class SetReplicas:
    """The elastic loop changes a component's replicas in the job's spec (spec.components[index]; docs/elastic.md):
    the job is then planned again and resized in place, as when a user changes them."""

    index: int
    component: str
    replicas: int


Action = (
    Provision
    | Relocate
    | MoveWorker
    | ResizeWorkers
    | DropWorkers
    | SetReplicas
    | Apply
    | DeleteStale
    | DeleteChildren
    | SuspendDriver
    | ReleaseNodes
    | Post
    | RequestCheckpoint
    | MarkWorkload
    | LowerWorkload
    | ReleaseWorkload
)


@dataclass(frozen=True)
class Retry:
    """The job cannot go on now: `permanent` (its spec is wrong: retrying cannot help until it changes), else look
    again after `delay` seconds (a cause that can go away by itself: a NodeGroup appears, nodes join)."""

    message: str
    permanent: bool = False
    delay: float = 0.0


@dataclass(frozen=True)
class Outcome:
    actions: tuple[Action, ...]
    status: RLJobStatus
    #: Look at the job again after this many seconds even if nothing changes (None: the next event will do).
    requeue_after: float | None = None
    #: Set by provision: the job could not be provisioned now (its status says why).
    retry: Retry | None = None

    @property
    def applies_children(self) -> bool:
        """The outcome makes the job's children: they are applied before its status is written (the status says
        what they run), not after."""
        return any(isinstance(a, Apply) for a in self.actions)

"""Node taints and pod tolerations: which nodes a job's pods may run on (the Kubernetes matching rules).

Pure: admission keeps a job off the nodes whose NoSchedule or NoExecute taints its workers do not tolerate
(the scheduler would never bind them there, and the job would hold the other nodes for nothing), and the
builders choose the head's node among those the head tolerates.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from rlplace_operator.api.podspec import Toleration

#: Taint effects that keep a pod off a node; PreferNoSchedule only discourages the scheduler.
BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


@dataclass(frozen=True, slots=True)
class Taint:
    """A node taint (node.spec.taints[])."""

    key: str
    value: str
    effect: str

    @classmethod
    def from_body(cls, body: Mapping) -> Taint:
        return cls(str(body.get("key", "")), str(body.get("value") or ""), str(body.get("effect", "")))

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """Kubernetes' rule: the effect matches (or the toleration names none), the key matches (an empty key
    with Exists matches every key), and the value is equal (or the operator is Exists)."""
    if toleration.effect and toleration.effect != taint.effect:
        return False
    if toleration.key and toleration.key != taint.key:
        return False
    if not toleration.key and toleration.operator != "Exists":
        return False
    return toleration.operator == "Exists" or (toleration.value or "") == taint.value


def untolerated(tolerations: Sequence[Toleration], taints: Iterable[Taint]) -> Taint | None:
    """The first NoSchedule or NoExecute taint no toleration matches, or None when the pod may run there."""
    for taint in taints:
        if taint.effect in BLOCKING_EFFECTS and not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None


def refusal(node: str, taint: Taint) -> str:
    """Why a node cannot take the job, for `waitingFor`."""
    return f"node {node} has taint {taint}, not tolerated"

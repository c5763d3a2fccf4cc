"""Condition types and reasons (named constants, as KubeRay names its own), metav1.Condition lists, and the
merge patch that turns one status into another.

A condition is kept with its lastTransitionTime when its status did not change.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from rlplace_operator.api.base import CamelModel


class Condition(CamelModel):
    """A metav1.Condition."""

    type: str
    """Condition type, e.g. Ready, Validated, Placed, RayClusterReady."""
    status: Literal["True", "False", "Unknown"]
    """True, False or Unknown."""
    reason: str
    """A CamelCase word saying why."""
    message: str = ""
    """A sentence for people."""
    last_transition_time: str
    """When the status last changed (RFC 3339)."""
    observed_generation: int | None = None
    """The metadata.generation the condition was set for."""


# -- condition types -----------------------------------------------------------------------------------------
#: RLJob: the spec (and its NodeGroups) are valid.
VALIDATED = "Validated"
#: RLJob: a plan exists on the live cluster.
PLACED = "Placed"
#: RLJob: every Ray pod of its RayCluster is ready.
RAYCLUSTER_READY = "RayClusterReady"
#: RLJob: True when a NodeGroup it runs on no longer holds one of its nodes, or is being deleted.
NODEGROUP_CHANGED = "NodeGroupChanged"
#: RLJob: False when the API server refused the operator's last status write.
STATUS_WRITTEN = "StatusWritten"
#: RLJob: True once admission reserved every node its plan needs (docs/admission.md).
ADMITTED = "Admitted"
#: RLJob with an entrypoint: the driver's state as KubeRay reports it (True once it succeeded).
DRIVER_SUCCEEDED = "DriverSucceeded"
#: RLJob with an entrypoint: every process ran where its plan entry says, as checked from inside (or observed).
BINDING_VERIFIED = "BindingVerified"
#: RLJob that profiles first (autoPlacement.profileFirst): its profiling run, then its re-placement.
PROFILED = "Profiled"
#: NodeGroup: at least one matched node is ready.
READY = "Ready"

# -- reasons -------------------------------------------------------------------------------------------------
SPEC_VALID = "SpecValid"
INVALID_SPEC = "InvalidSpec"
NODEGROUP_NOT_FOUND = "NodeGroupNotFound"
PLACEMENT_APPLIED = "Placed"
PLACEMENT_INVALID = "PlacementInvalid"
INSUFFICIENT_CAPACITY = "InsufficientCapacity"
KUBERAY_MISSING = "KubeRayMissing"
RAYCLUSTER_PROVISIONING = "RayClusterProvisioning"
RAYCLUSTER_IS_READY = "RayClusterReady"
SUSPENDED = "Suspended"
NODES_LEFT_GROUP = "NodesLeftNodeGroup"
NODEGROUP_DELETING = "NodeGroupDeleting"
STATUS_REJECTED = "StatusRejected"
NODES_READY = "NodesReady"
QUEUED = "Queued"
BIND_TIMEOUT = "BindTimeout"
#: A worker pod's pinned DRA GPUs are held by another claim (docs/dra.md): its reservation goes back to the queue.
GPUS_UNAVAILABLE = "GPUsUnavailable"
NODES_DIFFER = "NodesDiffer"
NO_READY_NODES = "NoReadyNodes"
#: A DRA NodeGroup's DeviceClass does not exist: no claim of its jobs can be allocated (docs/dra.md).
DEVICE_CLASS_NOT_FOUND = "DeviceClassNotFound"
#: A job's worker or head asks more CPU or memory than any node of its group has: no retry helps.
REQUEST_TOO_LARGE = "RequestTooLarge"
#: spec.topology requires a level one of the job's NodeGroups does not have, or whose largest domain is smaller than
#: the job's nodes there (docs/admission.md, "Racks and blocks"): it waits outside the queue until that changes.
TOPOLOGY_UNSATISFIABLE = "TopologyUnsatisfiable"
#: The job's planned Ray pods are not all Running and Ready on their planned nodes (whatever KubeRay's state).
PODS_NOT_READY = "PodsNotReady"
# Replace components (docs/replace.md): RayClusterReady False while lost ranks are replaced and the job runs on;
# Warning Event when ranks are lost, Normal Event when they run again (the Profiled condition's reason
# PROFILED_AND_REPLACED is the same word, on a condition, not an Event); BindingVerified while the driver's
# report of the new ranks is awaited.
REPLACING = "Replacing"
RANKS_LOST = "RanksLost"
RANKS_REPLACED = "Replaced"
#: Lost ranks whose own pod is Ready again (its node was NotReady for a while): nothing was replaced.
RANKS_BACK = "RanksBack"
REVERIFYING = "Reverifying"
# Elastic components (docs/elastic.md): a running job's replicas changed in place (Normal Event), the worker pod of
# a node the change added is Ready (Normal Event).
RESIZED = "Resized"
RANKS_STARTED = "RanksStarted"
#: A running job's spec changed beyond replicas: its driver restarts on the new plan (Normal Event).
SPEC_CHANGED = "SpecChanged"
#: The elastic loop changed a component's replicas (Normal Event; its reason: Grow, Shrink or Undo in the message).
REPLICAS_CHANGED = "ReplicasChanged"
# Kueue admission (docs/kueue.md)
WAITING_FOR_KUEUE = "WaitingForKueue"
ADMITTED_BY_KUEUE = "AdmittedByKueue"
KUEUE_MISSING = "KueueMissing"
LOCALQUEUE_NOT_FOUND = "LocalQueueNotFound"
#: A node Kueue granted is held by a job rlplace's own queue admitted a moment before: the Kueue job waits for it.
GRANTED_NODE_HELD = "GrantedNodeHeld"
PRIORITY_CLASS_NOT_FOUND = "PriorityClassNotFound"
KUEUE_UNSUPPORTED = "KueueUnsupported"
PREEMPTED = "Preempted"
# The closed loop (docs/autoplace.md): Events of a recommendation and a re-placement, the Profiled condition's
PLACEMENT_RECOMMENDED = "PlacementRecommended"
PLACEMENT_REPLACED = "PlacementReplaced"
PROFILING = "Profiling"
PROFILED_AND_REPLACED = "Replaced"

#: A condition's message longer than this is cut: it quotes user input, and a status must stay small.
MAX_MESSAGE_CHARS = 1024
#: status.message and a named cause: one line of at most this many characters (logs stay in logs).
MAX_LINE_CHARS = 300


def timestamp(when: dt.datetime) -> str:
    """`when` as the API's times are written (RFC 3339, UTC, whole seconds)."""
    return when.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_time(value: object) -> dt.datetime | None:
    """An API time (RFC 3339; one without a zone is UTC), or None for none or a malformed one."""
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=dt.UTC)


def brief(message: str, limit: int = MAX_LINE_CHARS) -> str:
    """One line of at most `limit` characters: the first line of a log dump, never the dump."""
    line = " ".join((message or "").strip().splitlines()[:1]).strip()
    if len((message or "").strip().splitlines()) > 1:
        line += " ..."
    return line if len(line) <= limit else line[: limit - 3] + "..."


def now() -> str:
    return timestamp(dt.datetime.now(dt.UTC))


def short(message: str) -> str:
    return message if len(message) <= MAX_MESSAGE_CHARS else message[: MAX_MESSAGE_CHARS - 3] + "..."


def set_condition(
    conditions: Sequence[dict] | None,
    type_: str,
    status: bool | None,
    reason: str,
    message: str = "",
    generation: int | None = None,
    at: str | None = None,
) -> list[dict]:
    """A new list with `type_` set (`status` None: Unknown); the other conditions are kept in order. A transition is
    stamped `at` (RFC 3339; now when not given)."""
    value = "Unknown" if status is None else "True" if status else "False"
    message = short(message)
    stamp = at or now()
    result = [dict(c) for c in conditions or []]
    for condition in result:
        if condition.get("type") == type_:
            if condition.get("status") != value:
                condition["lastTransitionTime"] = stamp
            condition.update(status=value, reason=reason, message=message)
            if generation is not None:
                condition["observedGeneration"] = generation
            return result
    new = {"type": type_, "status": value, "reason": reason, "message": message, "lastTransitionTime": stamp}
    if generation is not None:
        new["observedGeneration"] = generation
    result.append(new)
    return result


def find(conditions: Sequence[dict] | None, type_: str) -> dict | None:
    return next((c for c in conditions or [] if c.get("type") == type_), None)


def is_true(conditions: Sequence[dict] | None, type_: str) -> bool:
    condition = find(conditions, type_)
    return condition is not None and condition.get("status") == "True"


def merge_patch(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON merge patch from `before` to `after`: changed keys, nested maps recursively, and null for a key
    that `after` no longer has (so a status field that becomes empty is removed, not left behind)."""
    patch: dict[str, Any] = {key: None for key in before if key not in after}
    for key, value in after.items():
        old = before.get(key)
        if isinstance(value, Mapping) and isinstance(old, Mapping):
            nested = merge_patch(old, value)
            if nested:
                patch[key] = nested
        elif old != value or key not in before:
            patch[key] = value
    return patch


def apply_merge_patch(target: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, Any]:
    """`target` with the JSON merge patch applied (RFC 7386, what the API server does with `merge_patch`'s
    output): null removes a key, a map merges into a map, anything else replaces."""
    merged = dict(target)
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        elif isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = apply_merge_patch(merged[key], value)
        else:
            merged[key] = value
    return merged

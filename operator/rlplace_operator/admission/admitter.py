"""Which admitter decides for a job, and what it says: the one door of admission for the reconcile.

A job whose labels name a LocalQueue is admitted by Kueue through a Workload (kueue/); every other job by
rlplace's own queue (queue.py, rules.py). The reconcile asks here, never naming the admitter: what to observe for
the job, whether a Workload holds its admission, and what that Workload's state means for a running job (an
eviction to carry out, nodes replaced under it, a condition it must be told).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlplace_operator.admission import kueue
from rlplace_operator.admission.kueue import (  # noqa: F401  (the reconcile's names for the Workload admitter's)
    CHECKPOINT,
    RELEASE,
    STOP,
    WAIT,
    Admission,
    AssignmentError,
    Eviction,
    Granted,
    Grows,
    Mark,
    QueueObjects,
    Refusal,
    Waits,
    WorkloadState,
    admission,
    admitted_word,
    eviction,
    mark,
    queue_name,
    queue_objects_wanted,
    released,
    replaced_nodes,
    with_condition,
)


def by_workload(labels: Mapping[str, str]) -> bool:
    """Whether a Workload (Kueue) admits the job, not rlplace's own queue."""
    return kueue.queue_name(labels) is not None


def workload_name(status: Mapping[str, Any]) -> str | None:
    """The Workload the job's status names (made for it by an earlier look)."""
    return (status.get("kueue") or {}).get("workload") or None


def workload_state(body: Mapping[str, Any]) -> WorkloadState | None:
    """The Workload as its admitter left it, or None for one whose assignment cannot be read (the provision pass
    says why on the job)."""
    try:
        return WorkloadState.of(body)
    except AssignmentError:
        return None


def told(status: Mapping[str, Any], word: Mark) -> Mapping[str, Any] | None:
    """The status fields that record what the Workload was told (None: nothing to record)."""
    said = status.get("kueue")
    if word.condition == kueue.PODS_READY and said is not None:
        return {"kueue": kueue.told_pods_ready(said)}
    return None


def awaits_workload_word(status: Mapping[str, Any]) -> bool:
    """A running job whose Workload has not been told yet that every pod runs: looked at again until it is."""
    return kueue.awaits_pods_ready(status)

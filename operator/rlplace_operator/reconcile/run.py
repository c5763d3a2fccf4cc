"""One look at one job: observe -> decide (or provision) -> write the status -> act; again on a conflict.

Every reason to look at an RLJob ends here (controllers/rljob.py): the job was created, changed or found at
start-up, its RayCluster, RayJob or Workload changed, or the timer's queue pass moved. None calls another handler.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from rlplace_operator.admission.ledger import Ledger
from rlplace_operator.admission.rules import Decision
from rlplace_operator.kube import Kube, StatusConflict
from rlplace_operator.reconcile.actions import Provision, Relocate, Retry
from rlplace_operator.reconcile.apply import MAX_CONFLICTS, act, make_children, reread, write_provisioned, write_status
from rlplace_operator.reconcile.decide import decide, status_wire
from rlplace_operator.reconcile.observe import Observer
from rlplace_operator.reconcile.pods import LOOK_AGAIN_SECONDS
from rlplace_operator.reconcile.provision import provision
from rlplace_operator.reconcile.relocate import relocate
from rlplace_operator.reconcile.world import Job

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Looked:
    """What one look at a job asks of its caller."""

    requeue_after: float | None = None
    """Look again after this many seconds (None: the next event will do)."""
    retry: Retry | None = None
    """The job could not be provisioned now (its status says why): retry as this says."""
    decided_again: tuple[str, ...] = ()
    """Why the look decided again on the job read anew, once per time: `conflict` (the API server refused a write
    of a job read anew: someone wrote in between), `stale` (it had decided on the watch's copy, which was
    behind the job or cannot be provisioned from)."""


def run(
    kube: Kube, ledger: Ledger, observer: Observer, job: Job, *, queue: Decision | None = None, retry: int = 0
) -> Looked:
    """observe -> decide -> write the status (conditional) -> act; again on a conflict. A job to provision is
    decided on as it is now (read from the API), its children applied before its status is written."""
    fresh = False
    again: list[str] = []
    for _ in range(MAX_CONFLICTS):
        world = observer.look(job, queue, fresh)
        outcome = decide(job, world)
        try:
            if any(isinstance(a, Relocate) for a in outcome.actions):
                if not job.fresh:
                    raise StatusConflict(job.name)  # decided on an index entry: decide again on the job as it is
                outcome = relocate(job, observer.for_provision(job, world), ledger, outcome)
                make_children(kube, job, outcome)
                write_provisioned(kube, job, status_wire(outcome.status))
                act(kube, ledger, job, outcome, observer.checkpoint_requests)
                return Looked(outcome.requeue_after, decided_again=tuple(again))
            if any(isinstance(a, Provision) for a in outcome.actions):
                if not job.fresh:
                    # Children are applied before the status is written: decide on the job as it is now, not on an
                    # index entry that may lag behind a write that already ended or requeued it.
                    raise StatusConflict(job.name)
                outcome = provision(job, observer.for_provision(job, world), ledger, retry)
                make_children(kube, job, outcome)
                write_provisioned(kube, job, status_wire(outcome.status))
                act(kube, ledger, job, outcome, observer.checkpoint_requests)
                return Looked(None, outcome.retry, tuple(again))
            write_status(kube, job, outcome)
        except StatusConflict:
            again.append("conflict" if job.fresh else "stale")
            reread_job = reread(kube, job)
            if reread_job is None:
                return Looked(decided_again=tuple(again))
            job, queue, fresh = reread_job, None, True
            continue
        act(kube, ledger, job, outcome, observer.checkpoint_requests)
        return Looked(outcome.requeue_after, decided_again=tuple(again))
    logger.info("RLJob %s/%s: status kept changing under its reconcile; its next trigger looks again", *job.key)
    return Looked(LOOK_AGAIN_SECONDS, decided_again=tuple(again))

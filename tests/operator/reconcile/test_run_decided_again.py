"""A look decided again on the job read anew says why, once per time (the operator counts it in
rlplace_reconcile_retries_total): `stale` when it had decided on the watch's copy, `conflict` when the API server
refused the status write of a job it had just read (someone wrote in between)."""

from __future__ import annotations

import dataclasses

import pytest

from rlplace_operator.api.status import RLJobStatus
from rlplace_operator.kube import StatusConflict
from rlplace_operator.reconcile import run as run_module
from rlplace_operator.reconcile.actions import Outcome
from rlplace_operator.reconcile.world import Job

JOB = Job("ns", "train", "uid", 1, {}, {}, "1")


class Observer:
    def __init__(self) -> None:
        self.checkpoint_requests: set = set()

    def look(self, job: Job, queue: object, fresh: bool) -> object:
        return None


@pytest.mark.parametrize(
    ("refusals", "reasons"),
    [(0, ()), (1, ("stale",)), (2, ("stale", "conflict"))],
)
def test_each_decision_made_again_is_named(monkeypatch: pytest.MonkeyPatch, refusals: int, reasons: tuple) -> None:
    writes: list[Job] = []

    def write_status(kube: object, job: Job, outcome: Outcome) -> None:
        writes.append(job)
        if len(writes) <= refusals:
            raise StatusConflict(job.name)

    monkeypatch.setattr(run_module, "decide", lambda job, world: Outcome((), RLJobStatus()))
    monkeypatch.setattr(run_module, "write_status", write_status)
    monkeypatch.setattr(run_module, "reread", lambda kube, job: dataclasses.replace(job, fresh=True))
    monkeypatch.setattr(run_module, "act", lambda *args: None)
    looked = run_module.run(None, None, Observer(), JOB)  # type: ignore[arg-type]
    assert looked.decided_again == reasons
    assert [job.fresh for job in writes] == [False] + [True] * refusals

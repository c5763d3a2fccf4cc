"""A provision pass's status write when another writer got in first (handlers/lifecycle.py).

The API server is stood in for by an object with a resourceVersion: the two calls the write path makes
(`patch_rljob_status`, `get_rljob`) with the server's conditional-write rule. The conflict itself is shown
live by the e2e re-placement tests; this pins the rule without waiting for a race."""

from __future__ import annotations

import copy

from kubernetes.client.exceptions import ApiException

from rlplace_operator.api.conditions import apply_merge_patch
from rlplace_operator.kube import Kube
from rlplace_operator.reconcile.apply import write_provisioned as _write_provisioned
from rlplace_operator.reconcile.world import job_of_body


class OneRLJobServer(Kube):
    """One RLJob kept in memory, written the way the API server writes a status merge patch."""

    def __init__(self, body: dict) -> None:
        self.body = copy.deepcopy(body)
        self.writes = 0

    def get_rljob(self, namespace: str, name: str) -> dict | None:
        return copy.deepcopy(self.body)

    def patch_rljob_status(self, namespace: str, name: str, patch: dict, resource_version: str | None = None) -> dict:
        if resource_version and resource_version != self.body["metadata"]["resourceVersion"]:
            raise ApiException(status=409, reason="Conflict")
        self.other_writer(patch)
        return self.body

    def other_writer(self, patch: dict) -> None:
        self.writes += 1
        self.body["status"] = apply_merge_patch(self.body.get("status") or {}, patch)
        self.body["metadata"]["resourceVersion"] = str(int(self.body["metadata"]["resourceVersion"]) + 1)


BEFORE = {
    "metadata": {"namespace": "ns", "name": "job", "uid": "u", "generation": 1, "resourceVersion": "1"},
    "spec": {"entrypoint": "python train.py"},
    "status": {"phase": "Restarting", "appliedPlacement": [{"components": "actor", "placement": "all"}]},
}
SEARCHED = [{"components": "actor", "placement": "0-3"}]


def test_the_new_childrens_placement_lands_even_when_another_writer_wrote_first() -> None:
    server = OneRLJobServer(BEFORE)
    job = job_of_body(BEFORE)  # read at version 1
    server.other_writer({"progress": {"iteration": 4}})  # e.g. the progress endpoint, now at version 2
    _write_provisioned(server, job, {**BEFORE["status"], "phase": "Running", "appliedPlacement": SEARCHED})
    assert server.body["status"] == {"phase": "Running", "appliedPlacement": SEARCHED, "progress": {"iteration": 4}}


def test_a_new_spec_meanwhile_is_left_to_its_own_provision_pass() -> None:
    server = OneRLJobServer(BEFORE)
    job = job_of_body(BEFORE)
    server.body["metadata"]["generation"] = 2
    server.other_writer({"phase": "Queued"})
    _write_provisioned(server, job, {**BEFORE["status"], "phase": "Running", "appliedPlacement": SEARCHED})
    assert server.body["status"]["phase"] == "Queued" and server.writes == 1


def test_a_write_without_a_conflict_is_one_request() -> None:
    server = OneRLJobServer(BEFORE)
    _write_provisioned(server, job_of_body(BEFORE), {**BEFORE["status"], "phase": "Running"})
    assert server.writes == 1 and server.body["status"]["phase"] == "Running"


def test_what_another_pass_said_the_job_waits_for_is_gone_once_this_pass_placed_it() -> None:
    """Seen under chaos: a pass wrote "waiting for Kueue" while this one, read before that write, was placing the
    job on Kueue's admission; the job ran with the stale words in `kubectl get`'s Waiting For column."""
    server = OneRLJobServer(BEFORE)
    job = job_of_body(BEFORE)
    server.other_writer({"phase": "Queued", "waitingFor": "Kueue", "queuePosition": 2, "progress": {"iteration": 4}})
    _write_provisioned(server, job, {**BEFORE["status"], "phase": "Provisioning", "appliedPlacement": SEARCHED})
    assert server.body["status"] == {
        "phase": "Provisioning",
        "appliedPlacement": SEARCHED,
        "progress": {"iteration": 4},
    }

"""Restarts on failure (spec.run.restartPolicy, issue 22): `reconcile` over snapshots of a driver that failed
because a process, pod or node was lost, and of a job in the middle of a restart; the queue keeps the
restarting job off the nodes it gave up and in its place; the new attempt's pods get the resume contract.

Pure and fast, like tests/operator/reconcile/test_decide.py (whose snapshot helpers, tests/operator/recorded.py, these
reuse)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from placement_core import contract
from rlplace_operator.admission.ledger import Ledger, PlannedDemand
from rlplace_operator.admission.queue import AdmissionWorld as QueueWorld
from rlplace_operator.admission.queue import queue_pass
from rlplace_operator.admission.rules import Admitted, GroupDemand, Waiting
from rlplace_operator.api.base import dump
from rlplace_operator.api.names import ATTEMPT_ANNOTATION
from rlplace_operator.api.rljob import RLJobSpec
from rlplace_operator.builders.raycluster import CHECKPOINT_VOLUME
from rlplace_operator.builders.rayjob import build_rayjob
from rlplace_operator.planning.plan import WorkerNode
from rlplace_operator.reconcile.actions import DeleteChildren, Post, Provision, ReleaseNodes
from rlplace_operator.reconcile.decide import reconcile
from rlplace_operator.reconcile.restarts import RESTARTING
from rlplace_operator.reconcile.world import World

from recorded import NOW, event, job, pod, ray_pods, rayjob, ready, running_driver_status

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
ENTRYPOINT = "python -m placement_core.launcher.demo --steps 100 --checkpoint-every 10"
WORKER = "train-abcde-node-0-worker-xyz12"
ACTOR_DIED = "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n"


def node(name: str, ready: bool = True, cordoned: bool = False) -> dict:
    condition = {"type": "Ready", "status": "True" if ready else "Unknown", "reason": "NodeStatusUnknown"}
    if not ready:
        condition["message"] = "Kubelet stopped posting node status."
    return {"metadata": {"name": name}, "spec": {"unschedulable": cordoned}, "status": {"conditions": [condition]}}


def failed_world(node_ready: bool = True, cordoned: bool = False) -> World:
    """The driver ended Failed after worker pod WORKER on kwok-0 was deleted (its node as given)."""
    failed = rayjob("Failed", "FAILED", reason="AppFailed", message="Job entrypoint command failed with exit code 1")
    gone = pod(WORKER, phase="Running")
    gone["metadata"] = {**gone["metadata"], "deletionTimestamp": "2026-11-24T00:59:55Z"}
    killing = event("Pod", WORKER, "Killing", "Stopping container ray-worker")
    nodes = {"kwok-0": node("kwok-0", node_ready, cordoned)}
    return World(now=NOW, rayjob=failed, pods=[gone], events=[killing], nodes=nodes, driver_log_tail=ACTOR_DIED)


def test_a_worker_pod_deleted_mid_run_restarts_the_job_as_attempt_2_on_the_same_healthy_node() -> None:
    outcome = reconcile(job(running_driver_status(), ENTRYPOINT), failed_world())
    status = outcome.status
    assert status.phase == "Queued"  # it holds no nodes now: the next reconcile plans it (Provision)
    assert (status.attempts, status.restart_count) == (2, 1)
    assert outcome.actions[:2] == (DeleteChildren(), ReleaseNodes())  # the attempt stops, its nodes are free
    posted = [a for a in outcome.actions if isinstance(a, Post)]
    assert [p.reason for p in posted] == [RESTARTING]
    restart = status.restarts[-1]
    assert (restart.attempt, restart.reason) == (2, "PodDeleted")
    assert WORKER in restart.message and "kwok-0" in restart.message and "attempt 2" in restart.message
    assert restart.nodes_replaced == []  # a deleted pod is no fault of its node: it may be planned again
    assert status.excluded_nodes == []
    assert (status.ray_job, status.ray_cluster, status.binding, status.driver_start_time) == (None, None, [], None)
    # The next look plans it again through the normal path (admission, then the plan on the admitted nodes).
    assert reconcile(job(dump(status), ENTRYPOINT), World(now=NOW, child_known=False)).actions == (Provision(),)


@pytest.mark.parametrize(("ready", "cordoned", "why"), [(False, False, "unreachable"), (True, True, "cordoned")])
def test_a_lost_node_is_left_out_of_the_jobs_next_attempts(ready: bool, cordoned: bool, why: str) -> None:
    status = reconcile(job(running_driver_status(), ENTRYPOINT), failed_world(ready, cordoned)).status
    assert status.phase == "Queued"
    assert status.restarts[-1].nodes_replaced == ["kwok-0"]
    assert [(e.name, e.reason) for e in status.excluded_nodes] == [("kwok-0", f"{why} during attempt 1")]
    assert "left out node kwok-0" in status.message


def test_restart_policy_never_fails_the_job_with_the_cause_named() -> None:
    outcome = reconcile(job(running_driver_status(), ENTRYPOINT, {"restartPolicy": "Never"}), failed_world())
    assert outcome.status.phase == "Failed"
    assert WORKER in outcome.status.message and "kwok-0" in outcome.status.message
    assert DeleteChildren() not in outcome.actions and ReleaseNodes() in outcome.actions
    assert outcome.status.attempts == 1 and outcome.status.restarts == []


def test_past_max_restarts_the_job_fails_with_the_last_cause() -> None:
    spent = running_driver_status() | {"attempts": 3, "restartCount": 2}
    outcome = reconcile(job(spent, ENTRYPOINT, {"maxRestarts": 2}), failed_world())
    assert outcome.status.phase == "Failed"
    assert WORKER in outcome.status.message and "no restarts left (maxRestarts 2)" in outcome.status.message
    assert DeleteChildren() not in outcome.actions
    # One short of the limit it restarts once more.
    once_more = reconcile(
        job(running_driver_status() | {"attempts": 2, "restartCount": 1}, ENTRYPOINT, {"maxRestarts": 2}),
        failed_world(),
    )
    assert (once_more.status.phase, once_more.status.attempts) == ("Queued", 3)


def test_a_driver_that_fails_by_itself_is_not_restarted() -> None:
    failed = rayjob("Failed", "FAILED", reason="AppFailed", message="ZeroDivisionError: division by zero")
    world = World(now=NOW, rayjob=failed, nodes={"kwok-0": node("kwok-0")}, driver_log_tail="ZeroDivisionError\n")
    outcome = reconcile(job(running_driver_status(), ENTRYPOINT), world)
    assert outcome.status.phase == "Failed" and outcome.status.restarts == []


def restarting_status() -> dict:
    """What the restart wrote: Queued, attempt 2, the old attempt's RayJob being stopped."""
    return dump(reconcile(job(running_driver_status(), ENTRYPOINT), failed_world()).status)


def old_rayjob(deleting: bool) -> dict:
    body = rayjob("Failed", "FAILED", reason="AppFailed")
    body["metadata"]["annotations"] = {ATTEMPT_ANNOTATION: "1"}
    if deleting:
        body["metadata"]["deletionTimestamp"] = "2026-11-24T01:00:01Z"
    return body


@pytest.mark.parametrize("deleting", [True, False])
def test_a_restart_waits_for_the_old_attempts_rayjob_and_deletes_it_again_after_an_operator_restart(
    deleting: bool,
) -> None:
    """Operator stopped between writing the restart and deleting the RayJob (deleting=False), or the RayJob's
    finalizer still runs (True): the new attempt is never applied over it, nothing is counted twice."""
    status = restarting_status()
    queued = Admitted(("ns", "train"), (("gpu", ("kwok-0",)),), frozenset({"kwok-0"}))
    outcome = reconcile(
        job(status, ENTRYPOINT), World(now=NOW, rayjob=old_rayjob(deleting), child_known=False, queue=queued)
    )
    assert outcome.actions == (DeleteChildren(),)
    assert outcome.status.attempts == 2 and len(outcome.status.restarts) == 1
    assert outcome.status.waiting_for == "the previous attempt to stop"
    # Once it is gone, the new attempt is provisioned.
    gone = reconcile(job(dump(outcome.status), ENTRYPOINT), World(now=NOW, child_known=False, queue=queued))
    assert gone.actions == (Provision(),)


def test_the_new_attempt_running_is_not_counted_again() -> None:
    status = restarting_status()
    provisioned = {**status, "phase": "Provisioning", "rayJob": "train", "rayCluster": "train-fghij"}
    fresh = rayjob("Running", "RUNNING", started="2026-11-24T01:00:30Z")
    fresh["metadata"]["annotations"] = {ATTEMPT_ANNOTATION: "2"}
    outcome = reconcile(job(provisioned, ENTRYPOINT), World(now=NOW, rayjob=fresh, pods=ray_pods("train-abcde")))
    assert (outcome.status.phase, outcome.status.attempts, outcome.status.restart_count) == ("Running", 2, 1)
    assert len(outcome.status.restarts) == 1
    assert not any(isinstance(a, (DeleteChildren, ReleaseNodes)) for a in outcome.actions)
    # A RayJob of attempt 1 under a job at attempt 2 is stale: deleted, never read as this attempt's.
    stale = reconcile(job(provisioned, ENTRYPOINT), World(now=NOW, rayjob=old_rayjob(False)))
    assert stale.actions == (DeleteChildren(),)


def test_the_queue_keeps_a_restarting_job_off_its_bad_node_and_ahead_of_newer_jobs() -> None:
    excluded = [{"name": "kwok-0", "reason": "unreachable during attempt 1"}]
    old = ("ns", "old")
    new = ("ns", "new")
    restarting = {"phase": "Queued", "observedGeneration": 1, "excludedNodes": excluded}
    rljobs = {
        old: [{"status": restarting, "generation": 1, "priority": 0, "created": "2026-11-24T00:00:00Z"}],
        new: [{"status": {"phase": "Queued"}, "generation": 1, "priority": 0, "created": "2026-11-24T00:30:00Z"}],
    }
    ledger = Ledger()
    demand = (GroupDemand("gpu", 1, frozenset({0})),)
    for key in rljobs:
        ledger.demands[key] = ((), PlannedDemand(demand, RLJobSpec(node_groups=["gpu"]), None))
    one_free = QueueWorld(rljobs, {}, {}, {"gpu": ["kwok-0", "kwok-1"]}, {"nvidia.com/gpu"})
    decisions = queue_pass(ledger, one_free)
    assert decisions[old] == Admitted(old, (("gpu", ("kwok-1",)),), frozenset({"kwok-1"}))
    assert isinstance(decisions[new], Admitted) and decisions[new].nodes == frozenset({"kwok-0"})
    # No healthy node free: it waits, first in the queue, saying for what.
    waiting = queue_pass(
        Ledger(demands=dict(ledger.demands)), QueueWorld(rljobs, {}, {}, {"gpu": ["kwok-0"]}, {"nvidia.com/gpu"})
    )
    assert isinstance(waiting[old], Waiting) and waiting[old].position == 1
    assert "kwok-0" in " ".join(waiting[old].notes) or "free node" in waiting[old].reason


def spec(**fields: object) -> RLJobSpec:
    base = {
        "nodeGroups": ["a800"],
        "componentPlacement": [{"components": "actor", "placement": "0-7"}],
        "entrypoint": ENTRYPOINT,
    }
    return RLJobSpec.model_validate({**base, **fields})


def env_of(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container.get("env") or []}


def test_every_ray_pod_and_the_submitter_get_the_attempt_and_the_checkpoint_volume() -> None:
    checkpoint = {
        "volume": {"name": "ckpt", "persistentVolumeClaim": {"claimName": "train-ckpt"}},
        "mountPath": "/ckpt",
    }
    nodes = [WorkerNode(0, "a800-0", 8, {"nvidia.com/gpu": 8})]
    body = build_rayjob("train", spec(checkpoint=checkpoint), nodes, attempt=3)
    assert body["metadata"]["annotations"][ATTEMPT_ANNOTATION] == "3"
    cluster = body["spec"]["rayClusterSpec"]
    pods = [cluster["headGroupSpec"]["template"], *(g["template"] for g in cluster["workerGroupSpecs"])]
    for template in pods:
        container = template["spec"]["containers"][0]
        assert env_of(container)[contract.ATTEMPT_ENV] == "3"
        assert env_of(container)[contract.CHECKPOINT_DIR_ENV] == "/ckpt"
        assert {"name": CHECKPOINT_VOLUME, "mountPath": "/ckpt"} in container["volumeMounts"]
        volume = next(v for v in template["spec"]["volumes"] if v["name"] == CHECKPOINT_VOLUME)
        assert volume["persistentVolumeClaim"] == {"claimName": "train-ckpt"}
    submitter = body["spec"]["submitterPodTemplate"]["spec"]["containers"][0]
    assert env_of(submitter) == {contract.ATTEMPT_ENV: "3", contract.CHECKPOINT_DIR_ENV: "/ckpt"}
    # Without a checkpoint: the attempt only, no volume.
    plain = build_rayjob("train", spec(), nodes)["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    assert contract.CHECKPOINT_DIR_ENV not in env_of(plain["containers"][0])
    assert env_of(plain["containers"][0])[contract.ATTEMPT_ENV] == "1"
    assert all(v["name"] != CHECKPOINT_VOLUME for v in plain["volumes"])


def test_run_settings_refuse_kuberay_retries_beside_rlplace_restarts() -> None:
    with pytest.raises(ValidationError, match="restartPolicy Never"):
        spec(run={"backoffLimit": 2})
    assert spec(run={"backoffLimit": 2, "restartPolicy": "Never"}).run.backoff_limit == 2
    assert (spec().run.restart_policy, spec().run.max_restarts) == ("OnFailure", 3)
    with pytest.raises(ValidationError):
        spec(run={"maxRestarts": 101})
    with pytest.raises(ValidationError):
        spec(checkpoint={"volume": {"name": "c", "emptyDir": {}}, "mountPath": "/etc/rlplace"})


def test_the_resumable_example_checkpoints_on_a_volume_and_restarts_on_failure() -> None:
    (body,) = [d for d in yaml.safe_load_all((EXAMPLES / "rljob-resumable-run.yaml").read_text()) if d]
    job = RLJobSpec.model_validate(body["spec"])
    assert job.checkpoint is not None and job.checkpoint.volume.host_path is not None
    assert job.run.restart_policy == "OnFailure" and job.run.max_restarts >= 1
    assert "--checkpoint-every" in (job.entrypoint or "") and "--steps" in (job.entrypoint or "")
    assert "--checkpoint-dir" not in (job.entrypoint or "")  # the directory comes from RLPLACE_CHECKPOINT_DIR


def test_pods_kuberay_deletes_after_the_driver_failed_by_itself_are_not_a_restart() -> None:
    """ttlSecondsAfterFinished 0: KubeRay deletes the cluster as soon as the driver ended, so its pods may show
    a deletion by the time the failure is read; that deletion followed the failure and is not its cause."""
    failed = rayjob("Failed", "FAILED", reason="AppFailed", message="ZeroDivisionError", endTime="2026-11-24T00:59:58Z")
    cleanup = pod(WORKER, phase="Running")
    cleanup["metadata"] |= {"deletionTimestamp": "2026-11-24T01:00:29Z", "deletionGracePeriodSeconds": 30}
    killing = event("Pod", WORKER, "Killing", "Stopping container ray-worker", when="2026-11-24T00:59:59Z")
    world = World(now=NOW, rayjob=failed, pods=[cleanup], events=[killing], nodes={"kwok-0": node("kwok-0")})
    outcome = reconcile(job(running_driver_status(), ENTRYPOINT), world)
    assert outcome.status.phase == "Failed" and outcome.status.restarts == []
    # The same pod deleted before the driver ended (the loss that made it fail) is a restart.
    lost = pod(WORKER, phase="Running")
    lost["metadata"] |= {"deletionTimestamp": "2026-11-24T00:59:55Z", "deletionGracePeriodSeconds": 0}
    early = event("Pod", WORKER, "Killing", "Stopping container ray-worker", when="2026-11-24T00:59:55Z")
    world = World(now=NOW, rayjob=failed, pods=[lost], events=[early], nodes={"kwok-0": node("kwok-0")})
    assert reconcile(job(running_driver_status(), ENTRYPOINT), world).status.phase == "Queued"


def test_a_worker_exit_from_before_the_attempt_began_is_not_why_it_failed() -> None:
    """A worker container that exited before this attempt's driver started (it lost the old head's GCS while
    KubeRay made a new head) is history: the driver's own error after it is not taken for a lost process."""
    failed = rayjob("Failed", "FAILED", reason="AppFailed", message="ZeroDivisionError")  # started 00:59:45
    nodes = {"kwok-0": node("kwok-0")}

    def world(exited_at: str) -> World:
        exit_ = {"exitCode": 1, "reason": "Error", "finishedAt": exited_at}
        statuses = [
            {"name": "ray-worker", "restartCount": 1, "state": {"running": {}}, "lastState": {"terminated": exit_}}
        ]
        worker = pod(WORKER, phase="Running", containerStatuses=statuses)
        return World(now=NOW, rayjob=failed, pods=[worker], nodes=nodes, driver_log_tail="ZeroDivisionError\n")

    before = reconcile(job(running_driver_status(), ENTRYPOINT), world("2026-11-24T00:59:30Z")).status
    assert (before.phase, before.restarts) == ("Failed", [])
    assert "ray-worker" not in before.message
    # The same exit during the attempt is a lost process: a restart.
    during = reconcile(job(running_driver_status(), ENTRYPOINT), world("2026-11-24T00:59:50Z")).status
    assert (during.phase, during.restarts[-1].reason) == ("Queued", "ContainerExited")


def test_a_driver_kuberay_submits_again_after_a_lost_head_counts_as_a_restart() -> None:
    """KubeRay's own resubmission (a new head on the same, healthy node) is recorded and counted like a restart
    (RESTARTS column); the driver resumes from the checkpoint volume all the same."""
    new_head = pod("train-abcde-head-new01", kind="head", node="kwok-0", phase="Running")
    new_head["metadata"]["creationTimestamp"] = "2026-11-24T00:59:58Z"
    resubmitted = rayjob("Running", "RUNNING", started="2026-11-24T01:00:00Z")
    pods = [ready(new_head, "train-abcde"), ray_pods("train-abcde")[1]]
    status = reconcile(job(running_driver_status(), ENTRYPOINT), World(now=NOW, rayjob=resubmitted, pods=pods))
    assert (status.status.phase, status.status.attempts, status.status.restart_count) == ("Running", 2, 1)
    assert not any(isinstance(a, (DeleteChildren, ReleaseNodes)) for a in status.actions)


def test_a_new_rayjob_is_made_for_the_jobs_current_attempt() -> None:
    """Whatever makes the RayJob again (a restart, a re-placement, a RayJob deleted under a running job), it carries
    the attempt the status counts; a RayJob made for attempt 1 under a status at 3 is stale and deleted again."""
    from rlplace_operator.reconcile.restarts import attempt_for_new_child

    running = {"phase": "Running", "rayJob": "train", "attempts": 3, "observedGeneration": 2}
    assert attempt_for_new_child(running, 2) == 3
    queued_for_restart = {"phase": "Queued", "attempts": 3, "restartCount": 2, "observedGeneration": 2}
    assert attempt_for_new_child(queued_for_restart, 2) == 3
    # A new spec, or a job that gave its nodes back before its driver ran: attempt 1.
    assert attempt_for_new_child(running, 3) == 1
    assert attempt_for_new_child({"phase": "Queued", "observedGeneration": 2}, 2) == 1

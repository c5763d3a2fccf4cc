"""`reconcile(job, world)` over recorded snapshots: each failure of issue 21 is a case.

The snapshots are API JSON as the operator reads it (RLJob status, RayJob/RayCluster, pods, Warning events);
the cases that need a cause named (a refused pod, an unpullable image, a lost worker) run the real
`diagnosis` module.
"""

from __future__ import annotations

import datetime as dt
import threading
import time

import pytest

from placement_core.components import component_placement
from placement_core.observe.verify import BindingReport, ProcessCheck
from placement_core.plan import build_plan
from rlplace_operator.admission.ledger import Ledger, PlannedDemand
from rlplace_operator.admission.queue import AdmissionWorld as QueueWorld
from rlplace_operator.admission.queue import queue_pass
from rlplace_operator.admission.rules import Admitted, GroupDemand, Waiting
from rlplace_operator.api.base import dump
from rlplace_operator.api.conditions import MAX_LINE_CHARS as MAX_STATUS_MESSAGE
from rlplace_operator.api.rljob import RLJobSpec
from rlplace_operator.cluster.snapshot import copy_index
from rlplace_operator.reconcile.actions import DeleteChildren, Post, Provision, ReleaseNodes
from rlplace_operator.reconcile.decide import reconcile
from rlplace_operator.reconcile.world import Job, World

from recorded import (
    KEY,
    NOW,
    condition,
    event,
    job,
    live_status,
    pod,
    ray_pods,
    raycluster,
    rayjob,
    ready,
    running_driver_status,
)

# -- 1. the burst: the queue never stalls -------------------------------------------------------------------


def one_node_demand() -> tuple[GroupDemand, ...]:
    return (GroupDemand("gpu", 1, frozenset({0})),)


def test_a_queue_pass_over_1000_queued_jobs_admits_one_per_free_node_well_under_its_period() -> None:
    nodes = [f"kwok-{i}" for i in range(1000)]
    ledger = Ledger()
    rljobs = {}
    for i in range(1000):
        key = ("ns", f"job-{i:04d}")
        rljobs[key] = [{"status": {"phase": "Queued"}, "priority": 0, "created": f"2026-11-24T00:00:{i % 60:02d}Z"}]
        ledger.demands[key] = ((), PlannedDemand(one_node_demand(), RLJobSpec(node_groups=["gpu"]), None))
    world = QueueWorld(rljobs, {}, {}, {"gpu": nodes}, {"nvidia.com/gpu"})
    # The pass's own CPU time: it is pure computation, and wall time on a machine shared with starting
    # clusters measured the load (8.3 s at load 30; 0.06 s idle), not the pass.
    started = time.thread_time()
    decisions = queue_pass(ledger, world)
    took = time.thread_time() - started
    admitted = [d for d in decisions.values() if isinstance(d, Admitted)]
    assert len(admitted) == 1000
    assert len({node for d in admitted for node in d.nodes}) == 1000  # never the same node twice
    assert len(ledger.reserved) == 1000
    assert took < 1.0, f"a queue pass at 1,000 queued jobs took {took:.2f} s of CPU (its period is 2 s)"


def test_an_index_is_copied_whole_while_other_threads_change_it() -> None:
    # The burst bug: the recheck iterated a live index ("dictionary changed size during iteration").
    index: dict = {("ns", f"job-{i}"): [{"status": {}}] for i in range(2000)}
    stop = threading.Event()

    def churn() -> None:
        i = 2000
        while not stop.is_set():
            index[("ns", f"job-{i}")] = [{"status": {}}]
            index.pop(("ns", f"job-{i - 1000}"), None)
            i += 1

    writer = threading.Thread(target=churn)
    writer.start()
    try:
        for _ in range(200):
            copied = copy_index(index)
            assert all(isinstance(values, list) and values for values in copied.values())
    finally:
        stop.set()
        writer.join()


def test_a_queued_job_the_pass_placed_is_provisioned_and_one_that_waits_only_gets_its_place() -> None:
    queued = {"phase": "Queued", "observedGeneration": 1, "conditions": []}
    admitted = reconcile(
        job(queued),
        World(now=NOW, child_known=False, queue=Admitted(KEY, (("gpu", ("kwok-0",)),), frozenset({"kwok-0"}))),
    )
    assert admitted.actions == (Provision(),)
    waiting = reconcile(job(queued), World(now=NOW, child_known=False, queue=Waiting(KEY, 3, (("gpu", 1),))))
    assert not any(isinstance(a, Provision) for a in waiting.actions)
    assert (waiting.status.queue_position, waiting.status.waiting_for) == (3, "1 free node of gpu")
    assert "position 3" in waiting.status.message


def test_a_job_backing_off_after_a_provisioning_failure_is_not_admitted_before_its_time() -> None:
    later = (NOW + dt.timedelta(seconds=20)).strftime("%Y-%m-%dT%H:%M:%SZ")
    queued = {"phase": "Queued", "observedGeneration": 1, "retryAfter": later, "conditions": []}
    outcome = reconcile(job(queued), World(now=NOW, child_known=False))
    assert outcome.actions == ()
    assert outcome.requeue_after == pytest.approx(20)


# -- 2. pods that can never be created ----------------------------------------------------------------------

POD_SECURITY = (
    'Failed to create worker Pod for the cluster ns/train, pods "train-node-0-worker-abcde" is forbidden: '
    'violates PodSecurity "restricted:latest": allowPrivilegeEscalation != false (containers "ray-worker" must '
    'set securityContext.allowPrivilegeEscalation=false), unrestricted capabilities (container "ray-worker" '
    'must set securityContext.capabilities.drop=["ALL"])'
)


def test_a_pod_refused_by_pod_security_fails_the_job_naming_the_cause_and_frees_its_nodes() -> None:
    events = [event("RayCluster", "train", "FailedToCreateWorkerPod", POD_SECURITY)]
    outcome = reconcile(job(live_status()), World(now=NOW, raycluster=raycluster(), events=events))
    status = outcome.status
    assert status.phase == "Failed"
    assert "PodSecurity" in status.message and len(status.message) <= MAX_STATUS_MESSAGE
    assert condition(outcome.status.model_dump(by_alias=True), "RayClusterReady")["reason"] == "PodSecurityRefused"
    assert DeleteChildren() in outcome.actions and ReleaseNodes() in outcome.actions
    assert status.ray_cluster is None


def test_an_image_that_cannot_be_pulled_requeues_the_job_with_backoff_and_says_so() -> None:
    waiting = {"waiting": {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "nope.invalid/ray:1"'}}
    pulling = pod(
        "train-node-0-worker-abcde",
        containerStatuses=[{"name": "ray-worker", "ready": False, "restartCount": 0, "state": waiting}],
    )
    events = [
        # The first pull failed 22 s ago: past the grace a registry hiccup gets.
        event(
            "Pod",
            "train-node-0-worker-abcde",
            "Failed",
            'Failed to pull image "nope.invalid/ray:1": not found',
            first="2026-11-24T00:59:38Z",
        )
    ]
    outcome = reconcile(job(live_status()), World(now=NOW, raycluster=raycluster(), pods=[pulling], events=events))
    status = outcome.status
    assert status.phase == "Queued"
    assert "retrying in 10 s" in status.message
    assert status.provisioning_retries == 1 and status.retry_after == "2026-11-24T01:00:10Z"
    assert status.waiting_for == "its retry at 2026-11-24T01:00:10Z"  # Queued, never silent
    assert (status.restarts[-1].attempt, status.restarts[-1].reason) == (1, "ImagePullFailed")
    assert DeleteChildren() in outcome.actions and ReleaseNodes() in outcome.actions
    assert any(isinstance(a, Post) and a.warning for a in outcome.actions)


MISSING_SECRET = 'MountVolume.SetUp failed for volume "creds" : secret "hf-token" not found'


def bound(name: str, since: str = "2026-11-24T00:59:45Z", **status: object) -> dict:
    """A worker pod bound to its node at `since` (15 s before NOW) whose containers have not started."""
    made = pod(name, **status)
    made["status"]["conditions"] = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": since}]
    return made


def test_a_pod_missing_its_secret_fails_the_job_naming_the_secret_and_frees_its_nodes() -> None:
    events = [event("Pod", "train-node-0-worker-abcde", "FailedMount", MISSING_SECRET)]
    world = World(now=NOW, raycluster=raycluster(), pods=[bound("train-node-0-worker-abcde")], events=events)
    outcome = reconcile(job(live_status()), world)
    status = outcome.status
    assert status.phase == "Failed", status.message
    assert status.message.startswith("Secret 'hf-token' not found: worker pod 'train-node-0-worker-abcde'")
    assert condition(status.model_dump(by_alias=True), "RayClusterReady")["reason"] == "SecretNotFound"
    assert DeleteChildren() in outcome.actions and ReleaseNodes() in outcome.actions


def test_a_missing_object_the_job_says_will_appear_requeues_it_with_backoff() -> None:
    events = [event("Pod", "train-node-0-worker-abcde", "FailedMount", MISSING_SECRET)]
    world = World(now=NOW, raycluster=raycluster(), pods=[bound("train-node-0-worker-abcde")], events=events)
    waiting_job = job(live_status())
    waiting_job = Job(**{**waiting_job.__dict__, "spec": {**waiting_job.spec, "pods": {"onMissingObject": "Retry"}}})
    outcome = reconcile(waiting_job, world)
    status = outcome.status
    assert status.phase == "Queued", status.message
    assert "pods.onMissingObject Retry waits for Secret 'hf-token'" in status.message
    assert status.provisioning_retries == 1 and status.retry_after == "2026-11-24T01:00:10Z"
    assert DeleteChildren() in outcome.actions and ReleaseNodes() in outcome.actions


def test_a_volume_still_attaching_is_said_while_the_job_keeps_its_nodes_then_given_up() -> None:
    said = 'AttachVolume.Attach failed for volume "pvc-1" : timed out waiting for external-attacher'
    events = [event("Pod", "train-node-0-worker-abcde", "FailedAttachVolume", said)]
    world = World(now=NOW, raycluster=raycluster(), pods=[bound("train-node-0-worker-abcde")], events=events)
    outcome = reconcile(job(live_status()), world)
    status = outcome.status
    assert status.phase == "Provisioning" and status.ray_cluster == "train"
    assert "not started 15 s after it was bound: FailedAttachVolume" in status.message
    assert condition(status.model_dump(by_alias=True), "RayClusterReady")["reason"] == "VolumeNotReady"
    assert DeleteChildren() not in outcome.actions and outcome.requeue_after is not None
    assert [a.reason for a in outcome.actions if isinstance(a, Post)] == ["VolumeNotReady"]
    again = reconcile(job(dump(status)), world)  # said once: no second Event for the same reason
    assert not [a for a in again.actions if isinstance(a, Post)]
    late = World(now=NOW + dt.timedelta(seconds=200), raycluster=raycluster(), pods=world.pods, events=events)
    given_up = reconcile(job(live_status()), late)
    assert given_up.status.phase == "Queued" and DeleteChildren() in given_up.actions


def admitted_35_s_ago() -> dict:
    return live_status(conditions=[
        {"type": "Admitted", "status": "True", "reason": "Admitted", "lastTransitionTime": "2026-11-24T00:59:25Z"},
    ])  # fmt: skip


def test_a_pod_waiting_for_its_claim_is_not_taken_for_a_bind_race() -> None:
    status = admitted_35_s_ago()
    unbound = pod("w", node=None)
    unbound["metadata"]["creationTimestamp"] = "2026-11-24T00:59:20Z"  # 40 s before NOW
    unbound["status"]["conditions"] = [
        {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": "0/9 nodes are available: pod has unbound immediate PersistentVolumeClaims.",
            "lastTransitionTime": "2026-11-24T00:59:21Z",
        }
    ]
    outcome = reconcile(job(status), World(now=NOW, raycluster=raycluster(), pods=[unbound]))
    assert outcome.status.phase == "Provisioning", outcome.status.message
    assert "waits for its volume claim 40 s after it was created" in outcome.status.message


def test_worker_pods_not_bound_30_s_after_admission_give_the_nodes_back_and_queue_again() -> None:
    status = admitted_35_s_ago()
    unbound = pod("w", node=None)
    unbound["metadata"]["creationTimestamp"] = "2026-11-24T00:59:28Z"  # 32 s before NOW
    outcome = reconcile(job(status), World(now=NOW, raycluster=raycluster(), pods=[unbound]))
    assert outcome.status.phase == "Queued"
    assert "0 of 1 worker pods bound, w unbound 30 s after it was created" in outcome.status.message
    assert outcome.status.retry_after is None  # no backoff: another workload took the node, nothing is wrong
    assert outcome.status.waiting_for == "nodes again, after BindTimeout"  # Queued, never silent
    assert DeleteChildren() in outcome.actions
    # The cause is the scheduler's, not a guess.
    assert "(the scheduler: it has not placed the pod yet)" in outcome.status.message
    taken = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
             "message": "0/10 nodes are available: 1 Insufficient nvidia.com/gpu."}  # fmt: skip
    unbound["status"]["conditions"] = [taken]
    named = reconcile(job(status), World(now=NOW, raycluster=raycluster(), pods=[unbound])).status.message
    assert "(the scheduler: 0/10 nodes are available: 1 Insufficient nvidia.com/gpu.)" in named


def test_a_missing_deviceclass_is_named_at_once_and_the_job_keeps_its_gpus_without_a_retry() -> None:
    """The scheduler's word for a claim whose DeviceClass does not exist: no retry fixes it (a new RayCluster
    every 33 s, as before, only churned), and once the class exists the scheduler places the pod by itself."""
    said = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": "0/10 nodes are available: 1 device class gpu.example.com does not exist."}  # fmt: skip
    for age in ("2026-11-24T00:59:58Z", "2026-11-24T00:50:00Z"):  # just made, and ten minutes on
        unbound = pod("train-dra-worker-0", node=None, conditions=[said])
        unbound["metadata"]["creationTimestamp"] = age
        outcome = reconcile(job(admitted_35_s_ago()), World(now=NOW, raycluster=raycluster(), pods=[unbound]))
        ready = condition(dump(outcome.status), "RayClusterReady")
        assert (outcome.status.phase, ready["reason"]) == ("Provisioning", "DeviceClassNotFound"), outcome.status
        assert "DeviceClass gpu.example.com does not exist" in ready["message"]
        assert not any(isinstance(a, (DeleteChildren, ReleaseNodes)) for a in outcome.actions)
        assert outcome.status.restarts == [] and outcome.requeue_after is not None


def test_worker_pods_kuberay_makes_late_get_their_own_30_s() -> None:
    status = admitted_35_s_ago()
    # Admitted 35 s ago, but KubeRay (busy with a burst) has made no pod yet, or one 20 s ago: nothing was taken.
    for pods in ([], [pod("w", node=None)]):
        outcome = reconcile(job(status), World(now=NOW, raycluster=raycluster(), pods=pods))
        assert outcome.status.phase == "Provisioning" and outcome.actions == (), outcome.status.message


def test_a_provisioning_job_whose_pods_are_fine_keeps_waiting_and_is_looked_at_again() -> None:
    running = pod("w", phase="Running")
    outcome = reconcile(job(live_status()), World(now=NOW, raycluster=raycluster(), pods=[running]))
    assert outcome.status.phase == "Provisioning"
    assert outcome.actions == ()
    assert outcome.requeue_after is not None
    up = reconcile(job(live_status()), World(now=NOW, raycluster=raycluster(ready=True), pods=ray_pods()))
    assert up.status.phase == "Running" and condition(dump(up.status), "RayClusterReady")["status"] == "True"


def test_kuberays_early_ready_is_not_running_while_a_planned_pod_waits_and_says_which_and_why() -> None:
    """KubeRay judges the pods it has listed (ray-project/kuberay#2188): a RayCluster `ready` with its worker pod
    unschedulable, or not made yet, is no running job, and Kueue is not told PodsReady."""
    head, worker = ray_pods()
    unschedulable = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                     "message": "0/10 nodes are available: 1 Insufficient cpu."}  # fmt: skip
    pending = pod("train-gpu-worker-0", node=None, conditions=[unschedulable])
    for pods, said in (
        (
            [head, pending],
            "worker pod train-gpu-worker-0: not scheduled: 0/10 nodes are available: 1 Insufficient cpu.",
        ),
        ([head], "no worker pod on node kwok-0 yet"),
        ([worker], "the Ray head pod does not exist yet"),
    ):
        outcome = reconcile(job(live_status()), World(now=NOW, raycluster=raycluster(ready=True), pods=pods))
        assert outcome.status.phase == "Provisioning", said
        assert condition(dump(outcome.status), "RayClusterReady")["message"] == said
    # A pod of another Ray cluster of the job (a stopped attempt's) or one being deleted does not count.
    gone = {**worker, "metadata": {**worker["metadata"], "deletionTimestamp": "2026-11-24T00:59:59Z"}}
    other = ready(pod("old-gpu-worker-0"), "old")
    outcome = reconcile(job(live_status()), World(now=NOW, raycluster=raycluster(ready=True), pods=[head, gone, other]))
    assert outcome.status.phase == "Provisioning"


# -- 3. a worker pod lost mid-run ---------------------------------------------------------------------------

STATE_DUMP = "\n".join(f"[state-dump] NodeManager: line {i} " + "x" * 80 for i in range(220))


def test_a_driver_failure_keeps_a_short_message_never_the_state_dump() -> None:
    message = f"Job entrypoint command failed with exit code 1, last available logs (truncated):\n{STATE_DUMP}"
    failed = rayjob("Failed", "FAILED", reason="AppFailed", message=message)
    outcome = reconcile(job(running_driver_status(), "python train.py"), World(now=NOW, rayjob=failed))
    status = outcome.status
    assert status.phase == "Failed"
    assert len(status.message) < MAX_STATUS_MESSAGE + 200
    assert "[state-dump]" not in status.message
    assert "driver log: kubectl logs -n ns job/train" in status.message
    assert all(len(c.message or "") <= 1024 for c in status.conditions)
    assert ReleaseNodes() in outcome.actions


def test_a_worker_pod_deleted_mid_run_with_restart_policy_never_fails_the_job_naming_component_rank_node_and_pod() -> (
    None
):
    message = f"Job entrypoint command failed with exit code 1, last available logs (truncated):\n{STATE_DUMP}"
    failed = rayjob("Failed", "FAILED", reason="AppFailed", message=message)
    killing = event("Pod", "train-abcde-node-0-worker-xyz12", "Killing", "Stopping container ray-worker")
    gone = {**pod("train-abcde-node-0-worker-xyz12", phase="Running")}
    gone["metadata"] = {**gone["metadata"], "deletionTimestamp": "2026-11-24T00:59:55Z"}
    tail = "ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task.\n"
    world = World(now=NOW, rayjob=failed, pods=[gone], events=[killing], driver_log_tail=tail)
    status = reconcile(job(running_driver_status(), "python train.py", {"restartPolicy": "Never"}), world).status
    assert status.phase == "Failed"
    assert "train-abcde-node-0-worker-xyz12" in status.message and "kwok-0" in status.message
    assert len(status.message) < MAX_STATUS_MESSAGE + 200


# -- 4. the head pod lost mid-run ---------------------------------------------------------------------------


def binding_report() -> BindingReport:
    """Every process of a one-node plan verified (what the driver prints after it launched them)."""
    config = {"cluster": {"num_nodes": 1, "accelerators_per_node": 8, "component_placement": {"actor": "0-7"}}}
    plan = build_plan(component_placement(config))
    return BindingReport.of(
        (ProcessCheck(component.name, process.rank, process.node_name, ()), process)
        for component, process in plan.processes()
    )


def test_a_lost_head_pod_is_recorded_as_attempt_2_and_the_binding_is_checked_again() -> None:
    new_head = pod("train-abcde-head-new01", kind="head", node="kwok-0", phase="Running")
    new_head["metadata"]["creationTimestamp"] = "2026-11-24T00:59:58Z"
    # The worker lost the head's GCS and its container exited (the pod restarts it): a consequence, not the cause.
    exited = {"name": "ray-worker", "restartCount": 1, "lastState": {"terminated": {"exitCode": 1, "reason": "Error"}}}
    worker = pod("train-abcde-node-0-worker-xyz12", phase="Running", containerStatuses=[exited])
    # KubeRay ran the driver again inside the RayJob the operator made for attempt 1.
    resubmitted = rayjob("Running", "RUNNING", started="2026-11-24T01:00:00Z")
    resubmitted["metadata"]["annotations"] = {"rlplace.io/attempt": "1"}
    before = running_driver_status()
    world = World(now=NOW, rayjob=resubmitted, pods=[ready(new_head, "train-abcde"), ready(worker, "train-abcde")])
    outcome = reconcile(job(before, "python train.py"), world)
    status = outcome.status
    assert status.phase == "Running"
    assert status.attempts == 2
    assert status.restarts[-1].attempt == 2 and status.restarts[-1].in_place
    assert status.restarts[-1].reason == "HeadPodReplaced"
    assert "train-abcde-head-new01" in status.restarts[-1].message
    assert not any(isinstance(a, DeleteChildren) for a in outcome.actions)
    assert condition(status.model_dump(by_alias=True), "BindingVerified") is None  # the old attempt's check is gone
    assert status.binding == []
    assert status.driver_start_time == "2026-11-24T01:00:00Z"
    assert outcome.requeue_after is not None  # looked at again until the new attempt verifies
    assert any(isinstance(a, Post) and a.warning for a in outcome.actions)

    # The next look finds attempt 2's own report: BindingVerified again, still attempt 2.
    again = job(dump(status), "python train.py")
    verified = reconcile(again, World(now=NOW, rayjob=resubmitted, pods=[new_head], report=binding_report()))
    # That RayJob is attempt 2's own (never deleted as a stale attempt's: that looped, a new RayJob each time).
    assert not any(isinstance(a, DeleteChildren) for a in verified.actions)
    assert verified.status.restarts == status.restarts
    assert verified.status.attempts == 2
    assert condition(verified.status.model_dump(by_alias=True), "BindingVerified")["status"] == "True"


def test_an_unchanged_running_driver_is_not_a_restart() -> None:
    same = rayjob("Running", "RUNNING")
    outcome = reconcile(job(running_driver_status(), "python train.py"), World(now=NOW, rayjob=same))
    assert outcome.status.attempts == 1
    assert outcome.status.restarts == []
    assert condition(outcome.status.model_dump(by_alias=True), "BindingVerified")["status"] == "True"
    assert outcome.actions == ()


def test_a_driver_on_its_way_is_said_in_its_condition_with_no_event() -> None:
    """Submitting and Running are states of the driver, not outcomes: the condition says them, and only an
    outcome (or the binding check) is worth an Event."""
    for deployment, ray_status, phase in (("Running", "PENDING", "Provisioning"), ("Running", "RUNNING", "Running")):
        world = World(now=NOW, rayjob=rayjob(deployment, ray_status), pods=ray_pods("train-abcde"))
        outcome = reconcile(job(running_driver_status(), "python train.py"), world)
        driver = condition(outcome.status.model_dump(by_alias=True), "DriverSucceeded")
        assert (outcome.status.phase, driver["reason"]) == (
            phase,
            "Submitting" if phase == "Provisioning" else "Running",
        )
        assert not any(isinstance(a, Post) for a in outcome.actions), outcome.actions


def test_an_ended_job_is_left_alone_until_its_spec_changes() -> None:
    ended = {"phase": "Failed", "observedGeneration": 1, "rayJob": "train", "message": "x"}
    assert reconcile(job(ended, "python train.py"), World(now=NOW, rayjob=None)).actions == ()


def test_a_job_whose_cluster_is_gone_is_planned_again() -> None:
    outcome = reconcile(job(live_status("Running")), World(now=NOW, raycluster=None))
    assert outcome.actions == (Provision(),)


def test_a_driver_kuberay_retries_is_not_sent_back_to_the_queue_while_its_new_pods_come_up() -> None:
    retrying = rayjob("Retrying", "")
    unbound = pod("train-abcde-node-0-worker-new02", node=None)
    status = running_driver_status()
    status["conditions"][0]["lastTransitionTime"] = "2026-11-24T00:59:10Z"  # admitted 50 s ago
    outcome = reconcile(job(status, "python train.py"), World(now=NOW, rayjob=retrying, pods=[unbound]))
    assert outcome.status.phase == "Provisioning"
    assert DeleteChildren() not in outcome.actions


def framework_job(status: dict, **spec: object) -> Job:
    body = {"nodeGroups": ["gpu"], "entrypoint": "python train.py", "framework": "rlinf", **spec}
    return Job("ns", "train", "uid-1", 1, body, status, "100")


def mismatch_report() -> BindingReport:
    good = binding_report()
    (first, *rest) = good.checks
    moved = ProcessCheck(first.component, first.rank, first.node_name, ("CUDA_VISIBLE_DEVICES='2', planned '0'",))
    return BindingReport((moved, *rest), good.components)


def test_a_framework_process_placed_elsewhere_stops_the_job_naming_the_rank() -> None:
    unverified = running_driver_status() | {"conditions": running_driver_status()["conditions"][:1]}
    running = rayjob("Running", "RUNNING")
    outcome = reconcile(framework_job(unverified), World(now=NOW, rayjob=running, report=mismatch_report()))
    status = outcome.status
    assert status.phase == "Failed"
    assert status.message.startswith("binding check failed: component 'actor' rank 0 on node 'node-0': CUDA_")
    verified = condition(dump(status), "BindingVerified")
    assert (verified["status"], verified["reason"]) == ("False", "BindingMismatch")
    assert DeleteChildren() in outcome.actions and ReleaseNodes() in outcome.actions
    # Told to report only, the job keeps running with the condition False.
    reported = reconcile(
        framework_job(unverified, onBindingMismatch="Report"),
        World(now=NOW, rayjob=running, report=mismatch_report(), pods=ray_pods("train-abcde")),
    )
    assert reported.status.phase == "Running" and DeleteChildren() not in reported.actions
    assert condition(dump(reported.status), "BindingVerified")["status"] == "False"


def test_a_framework_driver_that_cannot_import_the_framework_is_named() -> None:
    log = (
        "Traceback (most recent call last):\n  File \"train.py\", line 3\nModuleNotFoundError: No module named 'rlinf'"
    )
    failed = rayjob("Failed", "FAILED", reason="AppFailed", message="Job entrypoint command failed with exit code 1")
    outcome = reconcile(framework_job(running_driver_status()), World(now=NOW, rayjob=failed, driver_log_tail=log))
    driver = condition(dump(outcome.status), "DriverSucceeded")
    assert driver["reason"] == "FrameworkMissing"
    assert (
        driver["message"]
        == "the job's image cannot import the framework (No module named 'rlinf'; spec.framework rlinf)"
    )

"""Kueue admission, pure parts: the Workload built from a job's demand, the topologyAssignment decoder (every
encoding Kueue v1beta2 writes), what a Workload's status says, and the eviction state machine of `reconcile`
over recorded Workload statuses (docs/kueue.md)."""

from __future__ import annotations

import copy
import dataclasses
import datetime as dt

import pytest

from rlplace_operator.admission import kueue
from rlplace_operator.api.base import dump
from rlplace_operator.api.names import PRIORITY_CLASS_LABEL, QUEUE_LABEL, UNCONSTRAINED_TOPOLOGY_ANNOTATION
from rlplace_operator.api.nodegroup import LabelSelector, LabelSelectorRequirement
from rlplace_operator.api.podspec import Toleration
from rlplace_operator.api.status import RLJobStatus
from rlplace_operator.builders import workload as built
from rlplace_operator.reconcile.actions import (
    DeleteChildren,
    MarkWorkload,
    Outcome,
    Post,
    ReleaseNodes,
    ReleaseWorkload,
    RequestCheckpoint,
)
from rlplace_operator.reconcile.apply import adopted
from rlplace_operator.reconcile.decide import decide, reconcile, status_wire
from rlplace_operator.reconcile.decide import with_workload_word as with_kueue
from rlplace_operator.reconcile.world import World

from recorded import NOW, job, pod, rayjob, running_driver_status


def wire_status(wire: dict) -> RLJobStatus:
    return RLJobStatus.model_validate(wire)


A800 = built.PodSet(
    "a800",
    2,
    {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "8"},
    LabelSelector(
        match_labels={"rlplace.io/gpu-type": "a800"},
        match_expressions=[LabelSelectorRequirement(key="rlplace.io/broken", operator="DoesNotExist")],
    ),
    (Toleration(key="gpu", operator="Exists", effect="NoSchedule"),),
)
G4090 = built.PodSet("4090", 1, {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "4"}, LabelSelector())


def test_the_workload_has_one_whole_node_pod_set_per_nodegroup_with_its_nodes_and_priority() -> None:
    body = built.build_workload("train", "rl", [A800, G4090], built.Priority("rl-high", 1000))
    spec = body["spec"]
    assert body["apiVersion"] == "kueue.x-k8s.io/v1beta2" and body["kind"] == "Workload"
    assert body["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "rlplace", "rlplace.io/job": "train"}
    assert spec["queueName"] == "rl" and spec["priority"] == 1000
    assert spec["priorityClassRef"] == {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "rl-high"}
    a800, g4090 = spec["podSets"]
    assert (a800["name"], a800["count"], g4090["name"], g4090["count"]) == ("a800", 2, "4090", 1)
    pod_spec = a800["template"]["spec"]
    assert pod_spec["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] == "8"
    terms = pod_spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [
        {
            "matchExpressions": [
                {"key": "rlplace.io/gpu-type", "operator": "In", "values": ["a800"]},
                {"key": "rlplace.io/broken", "operator": "DoesNotExist"},
            ]
        }
    ]
    assert pod_spec["tolerations"] == [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert a800["topologyRequest"] == {"unconstrained": True}
    assert "priorityClassRef" not in built.build_workload("train", "rl", [A800])["spec"]


def test_a_new_demand_is_a_new_workload_and_names_stay_within_limits() -> None:
    bigger = dataclasses.replace(A800, count=3)
    assert built.workload_name("train", [A800]) == built.workload_name("train", [A800])
    assert built.workload_name("train", [A800]) != built.workload_name("train", [bigger])
    assert len(built.workload_name("j" * 253, [A800])) <= 253
    long_group = "gpu." + "x" * 100
    name = built.pod_set_name(long_group)
    assert len(name) <= 63 and "." not in name and name != built.pod_set_name("gpu." + "x" * 99)


@pytest.mark.parametrize(
    ("assignment", "hosts"),
    [
        # Kueue v0.19's hostname prefix encoding (what it wrote on the local cluster).
        (
            {
                "levels": ["kubernetes.io/hostname"],
                "slices": [
                    {
                        "domainCount": 2,
                        "podCounts": {"universal": 1},
                        "valuesPerLevel": [{"individual": {"prefix": "kwok-a800-", "roots": ["0", "1"]}}],
                    }
                ],
            },
            {"kwok-a800-0": 1, "kwok-a800-1": 1},
        ),
        # Prefix and suffix, individual counts, two slices, a rack level above the hosts.
        (
            {
                "levels": ["rack", "kubernetes.io/hostname"],
                "slices": [
                    {
                        "domainCount": 2,
                        "podCounts": {"individual": [1, 2]},
                        "valuesPerLevel": [
                            {"universal": "r1"},
                            {"individual": {"prefix": "n-", "suffix": ".lan", "roots": ["3", "4"]}},
                        ],
                    },
                    {
                        "domainCount": 1,
                        "podCounts": {"universal": 1},
                        "valuesPerLevel": [{"universal": "r2"}, {"universal": "solo"}],
                    },
                ],
            },
            {"n-3.lan": 1, "n-4.lan": 2, "solo": 1},
        ),
        # The older list of domains.
        ({"levels": ["kubernetes.io/hostname"], "domains": [{"values": ["a"], "count": 1}]}, {"a": 1}),
    ],
)
def test_the_topology_assignment_decodes_to_hosts(assignment: dict, hosts: dict) -> None:
    assert kueue.assigned_hosts(assignment) == hosts


def test_an_assignment_without_a_hostname_level_or_with_missing_values_is_refused() -> None:
    with pytest.raises(kueue.AssignmentError, match=r"must end with kubernetes\.io/hostname"):
        kueue.assigned_hosts({"levels": ["rack"], "slices": []})
    short = {
        "levels": ["kubernetes.io/hostname"],
        "slices": [
            {"domainCount": 2, "podCounts": {"universal": 1}, "valuesPerLevel": [{"individual": {"roots": ["a"]}}]}
        ],
    }
    with pytest.raises(kueue.AssignmentError, match="1 values for 2 domains"):
        kueue.assigned_hosts(short)


def condition(type_: str, status: bool, reason: str = "R", message: str = "") -> dict:
    state = "True" if status else "False"
    return {
        "type": type_,
        "status": state,
        "reason": reason,
        "message": message,
        "lastTransitionTime": "2026-11-24T00:59:00Z",
    }


ASSIGNMENT = {
    "levels": ["kubernetes.io/hostname"],
    "slices": [
        {
            "domainCount": 2,
            "podCounts": {"universal": 1},
            "valuesPerLevel": [{"individual": {"prefix": "kwok-", "roots": ["1", "0"]}}],
        }
    ],
}


def workload(*conditions: dict, admission: bool = True, active: bool = True) -> dict:
    status: dict = {"conditions": list(conditions)}
    if admission:
        status["admission"] = {
            "clusterQueue": "rl-cluster-queue",
            "podSetAssignments": [
                {
                    "name": "a800",
                    "count": 2,
                    "flavors": {"nvidia.com/gpu": "a800", "cpu": "a800"},
                    "topologyAssignment": copy.deepcopy(ASSIGNMENT),
                }
            ],
        }
    owner = [{"uid": "uid-1", "kind": "RLJob", "name": "train", "controller": True}]
    return {
        "metadata": {"name": "train-1234abcd", "namespace": "ns", "resourceVersion": "7", "ownerReferences": owner},
        "spec": {"active": active, "queueName": "rl"},
        "status": status,
    }


def test_an_admitted_workload_names_its_cluster_queue_flavors_and_sorted_hosts() -> None:
    state = kueue.WorkloadState.of(workload(condition("QuotaReserved", True), condition("Admitted", True)))
    assert state.admitted and not state.evicted and state.holds_quota
    assert state.cluster_queue == "rl-cluster-queue"
    assert state.hosts() == {"a800": ["kwok-0", "kwok-1"]}
    assert state.grants["a800"].flavors["nvidia.com/gpu"] == "a800"


def test_a_pending_workload_says_what_kueue_said() -> None:
    said = (
        "couldn't assign flavors to pod set a800: insufficient quota for nvidia.com/gpu in flavor a800, 16 more needed"
    )
    state = kueue.WorkloadState.of(workload(condition("QuotaReserved", False, "Pending", said), admission=False))
    assert not state.admitted and not state.holds_quota and state.pending_message == said


def test_quota_without_hosts_is_named_as_a_flavor_without_topology() -> None:
    body = workload(condition("QuotaReserved", True), condition("Admitted", True))
    del body["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]
    with pytest.raises(
        kueue.AssignmentError, match="flavor a800 but no nodes: the ResourceFlavor needs a topologyName"
    ):
        kueue.WorkloadState.of(body).hosts()


def test_release_clears_the_admission_and_requeues_as_kueues_job_reconciler_does() -> None:
    evicted = workload(
        condition("QuotaReserved", True),
        condition("Admitted", True),
        condition("PodsReady", True, "Started"),
        condition("Evicted", True, "Preempted", "Preempted to accommodate a workload"),
    )["status"]
    released = kueue.released(evicted, requeue=True, now="2026-11-24T01:00:00Z")
    assert "admission" not in released
    by_type = {c["type"]: c for c in released["conditions"]}
    assert (by_type["QuotaReserved"]["status"], by_type["QuotaReserved"]["reason"]) == ("False", "Pending")
    assert (by_type["Admitted"]["status"], by_type["Admitted"]["reason"]) == ("False", "NoReservation")
    assert (by_type["PodsReady"]["status"], by_type["PodsReady"]["reason"]) == ("False", "WaitForStart")
    assert by_type["Requeued"]["status"] == "True" and by_type["Evicted"]["status"] == "True"
    assert by_type["QuotaReserved"]["lastTransitionTime"] == "2026-11-24T01:00:00Z"
    assert "Requeued" not in {c["type"] for c in kueue.released(evicted, requeue=False)["conditions"]}
    state = kueue.WorkloadState.of({**workload(admission=False), "status": released})
    assert not state.holds_quota


def test_the_ray_children_of_a_kueue_job_carry_no_queue_label_and_every_pod_is_counted_in_the_workload() -> None:
    child = {
        "kind": "RayJob",
        "metadata": {"name": "train", "labels": {"rlplace.io/job": "train"}},
        "spec": {
            "rayClusterSpec": {"headGroupSpec": {"template": {}}, "workerGroupSpecs": [{"template": {"metadata": {}}}]},
            "submitterPodTemplate": {"spec": {}},
        },
    }
    job_labels = {"team": "rl", QUEUE_LABEL: "rl", PRIORITY_CLASS_LABEL: "hi"}
    body = built.for_workload(child)
    owner = job([], entrypoint="python train.py")
    owner = dataclasses.replace(owner, labels=job_labels)
    (applied,) = adopted((body,), owner.body(labels=built.labels_for_children(job_labels)))
    # The job's labels reach the child (a gang scheduler's), but not its Kueue ones.
    assert applied["metadata"]["labels"] == {"rlplace.io/job": "train", "team": "rl"}
    assert applied["metadata"]["ownerReferences"][0]["uid"] == owner.uid
    cluster = body["spec"]["rayClusterSpec"]
    templates = [
        cluster["headGroupSpec"]["template"],
        cluster["workerGroupSpecs"][0]["template"],
        body["spec"]["submitterPodTemplate"],
    ]
    assert all(t["metadata"]["annotations"] == {UNCONSTRAINED_TOPOLOGY_ANNOTATION: "true"} for t in templates)
    assert "annotations" not in child["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]  # the input is not changed


# -- the eviction state machine --------------------------------------------------------------------------------

EVICTED = workload(
    condition("QuotaReserved", True),
    condition("Admitted", True),
    condition("Evicted", True, "Preempted", "Preempted to accommodate a workload (UID: 9) due to prioritization"),
)
KUEUE_LABELS = {QUEUE_LABEL: "rl"}


def kueue_job(status: dict, checkpoint: bool = True) -> object:
    base = job(status, entrypoint="python train.py")
    spec = dict(base.spec)
    if checkpoint:
        spec["checkpoint"] = {
            "volume": {"name": "ck", "persistentVolumeClaim": {"claimName": "ck"}},
            "preemptionGraceSeconds": 30,
        }
    return dataclasses.replace(base, spec=spec, labels=KUEUE_LABELS)


def evicted_world(body: dict = EVICTED, at: dt.datetime = NOW, child: bool = True, pods: int = 2) -> World:
    return World(
        now=at,
        rayjob=rayjob("Running", "RUNNING") if child else None,
        pods=[pod(f"w-{i}", status="Running") for i in range(pods)],
        workload=kueue.WorkloadState.of(body),
    )


def running(**fields: object) -> dict:
    return running_driver_status(
        kueue={"workload": "train-1234abcd", "clusterQueue": "rl-cluster-queue"},
        progress={"iteration": 7, "iterationSeconds": 1.0, "updatedAt": "2026-11-24T00:59:58Z", "checkpointStep": 5},
        **fields,
    )


def test_an_evicted_running_job_asks_its_driver_to_checkpoint_first() -> None:
    outcome = reconcile(kueue_job(running()), evicted_world())
    assert RequestCheckpoint() in outcome.actions and not any(isinstance(a, DeleteChildren) for a in outcome.actions)
    assert outcome.status.preemption is not None and outcome.status.preemption.checkpoint_step == 5
    assert outcome.status.preemption.reason == "Preempted"
    assert "asking its driver to checkpoint (up to 30 s)" in outcome.status.message


def preempting(since: str = "2026-11-24T00:59:50Z", step: int = 5, **fields: object) -> dict:
    status = running(preemption={"reason": "Preempted", "since": since, "checkpointStep": 5}, **fields)
    status["progress"]["checkpointStep"] = step
    return status


def test_the_job_waits_for_its_checkpoint_within_the_grace() -> None:
    outcome = reconcile(kueue_job(preempting()), evicted_world())
    assert outcome.actions == () and outcome.requeue_after is not None and outcome.requeue_after <= 2.0


def test_a_new_checkpoint_ends_the_grace_and_the_ray_children_are_deleted() -> None:
    outcome = reconcile(kueue_job(preempting(step=8)), evicted_world())
    assert DeleteChildren() in outcome.actions
    assert "checkpointed at step 8: stopping its Ray pods" in outcome.status.message


def test_past_the_grace_the_children_are_deleted_without_a_checkpoint() -> None:
    outcome = reconcile(kueue_job(preempting()), evicted_world(at=NOW + dt.timedelta(seconds=31)))
    assert DeleteChildren() in outcome.actions and "no checkpoint within 30 s" in outcome.status.message


def test_a_job_without_a_checkpoint_volume_is_stopped_at_once() -> None:
    outcome = reconcile(kueue_job(running(), checkpoint=False), evicted_world())
    assert DeleteChildren() in outcome.actions and RequestCheckpoint() not in outcome.actions


def test_the_quota_is_released_only_once_no_pod_is_left() -> None:
    waiting = reconcile(kueue_job(preempting(step=8)), evicted_world(child=False, pods=1))
    assert waiting.actions == () and "waiting for its 1 Ray pods to stop" in waiting.status.message
    done = reconcile(kueue_job(preempting(step=8)), evicted_world(child=False, pods=0))
    assert ReleaseWorkload("train-1234abcd", True) in done.actions and ReleaseNodes() in done.actions
    status = done.status
    assert status.phase == "Queued" and status.attempts == 2 and status.preemptions == 1
    assert status.ray_job is None and status.preemption is None and status.kueue is None
    # Queued from this write on, and saying what for (seen under chaos: a requeued job said nothing until its next
    # pass, and the invariant checker named it silent).
    assert status.waiting_for == "Kueue to admit Workload train-1234abcd again"
    admitted = next(c for c in status.conditions if c.type == "Admitted")
    assert (admitted.status, admitted.reason) == ("False", "Preempted")
    assert status.restarts[-1].reason == "Preempted" and status.restart_count is None  # not a restart


def test_a_deactivated_workload_suspends_the_job_without_requeue() -> None:
    body = workload(
        condition("QuotaReserved", True),
        condition("Evicted", True, "Deactivated", "The workload is deactivated"),
        active=False,
    )
    outcome = reconcile(kueue_job(preempting(step=8)), evicted_world(body, child=False, pods=0))
    assert ReleaseWorkload("train-1234abcd", False) in outcome.actions
    assert outcome.status.phase == "Suspended"


def test_pods_ready_when_the_job_runs_and_finished_when_it_ends() -> None:
    admitted = kueue.WorkloadState.of(workload(condition("QuotaReserved", True), condition("Admitted", True)))
    world = World(now=NOW, workload=admitted)
    status = kueue_job(running()).status
    ran = with_kueue(world, Outcome((), wire_status(dict(status))))
    assert MarkWorkload("train-1234abcd", "PodsReady", "Started", "every Ray pod of the RLJob runs") in ran.actions
    assert ran.status.kueue is not None and ran.status.kueue.pods_ready  # the timer stops looking
    ended = with_kueue(world, Outcome((), wire_status({**status, "phase": "Succeeded"})))
    assert [a.condition for a in ended.actions if isinstance(a, MarkWorkload)] == ["Finished"]
    ready = dataclasses.replace(admitted, pods_ready=True)
    again = with_kueue(World(now=NOW, workload=ready), Outcome((), wire_status(dict(status))))
    assert again.actions == ()


def test_a_node_kueue_replaced_under_the_running_job_restarts_it_on_the_granted_nodes() -> None:
    # The job runs on kwok-0 (live_status); Kueue's assignment now names kwok-1 and kwok-2 instead.
    body = workload(condition("QuotaReserved", True), condition("Admitted", True))
    slices = body["status"]["admission"]["podSetAssignments"][0]["topologyAssignment"]["slices"]
    slices[0]["valuesPerLevel"] = [{"individual": {"prefix": "kwok-", "roots": ["1", "2"]}}]
    world = World(now=NOW, rayjob=rayjob("Running", "RUNNING"), workload=kueue.WorkloadState.of(body))
    outcome = reconcile(kueue_job(running()), world)
    assert DeleteChildren() in outcome.actions and ReleaseNodes() in outcome.actions
    status = outcome.status
    assert status.phase == "Queued" and status.attempts == 2 and status.preemptions == 1
    assert [e.name for e in status.excluded_nodes] == ["kwok-0"]
    assert status.restarts[-1].reason == "NodeReplaced" and status.restarts[-1].nodes_replaced == ["kwok-0"]
    assert "Kueue replaced node kwok-0" in status.message and "(now kwok-1, kwok-2)" in status.message
    # Kueue's assignment still holding the job's node: nothing to follow.
    same = kueue.WorkloadState.of(workload(condition("QuotaReserved", True), condition("Admitted", True)))
    kept = reconcile(kueue_job(running()), dataclasses.replace(world, workload=same))
    assert not kept.status.restarts or kept.status.restarts[-1].reason != "NodeReplaced", kept


def test_a_spec_changed_during_an_eviction_is_planned_anew_once_the_quota_is_back() -> None:
    """Bad input in the middle of an eviction: the user edits the job while its driver checkpoints. The eviction
    goes on (the old spec's attempt stops and its quota goes back), and the new spec is then planned as any new
    spec is: its own Workload, a new history, every node again."""
    edited = dataclasses.replace(kueue_job(preempting(step=8)), generation=2)
    done = reconcile(edited, evicted_world(child=False, pods=0))
    assert ReleaseWorkload("train-1234abcd", True) in done.actions and ReleaseNodes() in done.actions
    status = done.status
    assert status.phase == "Queued" and status.observed_generation == 1  # the new spec is not planned yet
    assert "its spec changed meanwhile and is planned anew" in status.message
    # The next look provisions the new spec (observedGeneration behind: a new spec's history starts over).
    again = reconcile(dataclasses.replace(edited, status=dump(status)), World(now=NOW, child_known=False))
    assert [type(a).__name__ for a in again.actions] == ["Provision"]


def test_a_localqueue_deleted_under_an_admitted_job_is_named_and_the_job_runs_on() -> None:
    """Kueue keeps a Workload admitted when its LocalQueue is deleted: the job runs on (nothing stopped, its quota
    freed when it ends), and its Admitted condition says the queue is gone until it is back."""
    admitted = kueue.WorkloadState.of(workload(condition("QuotaReserved", True), condition("Admitted", True)))
    job = kueue_job(running())
    found = World(now=NOW, rayjob=rayjob("Running", "RUNNING"), workload=admitted)
    gone = decide(job, dataclasses.replace(found, queue_found=False))
    said = next(c for c in gone.status.conditions if c.type == "Admitted")
    assert gone.status.phase == decide(job, found).status.phase  # the queue's deletion changes nothing else
    assert (said.status, said.reason) == ("True", "LocalQueueNotFound")
    assert "LocalQueue ns/rl has since been deleted" in said.message and "keeps its admission" in said.message
    assert [(p.warning, p.reason) for p in gone.actions if isinstance(p, Post)] == [(True, "LocalQueueNotFound")]
    assert not any(isinstance(a, (DeleteChildren, ReleaseNodes, ReleaseWorkload)) for a in gone.actions)
    # Said once: the next look with the queue still gone changes nothing.
    later = dataclasses.replace(job, status=status_wire(gone.status))
    again = decide(later, dataclasses.replace(found, queue_found=False))
    assert not any(isinstance(p, Post) for p in again.actions)
    # The LocalQueue made again: Admitted says so, with a Normal Event.
    back = decide(later, found)
    said = next(c for c in back.status.conditions if c.type == "Admitted")
    assert said.reason == "AdmittedByKueue" and said.message == "admitted by Kueue (ClusterQueue rl-cluster-queue)"
    assert [(p.warning, p.reason) for p in back.actions if isinstance(p, Post)] == [(False, "AdmittedByKueue")]

"""Provisioning over recorded snapshots of the local cluster (its nodes, the example NodeGroups, the example
driver's ResourceSlice, Kueue's queues): the desired children and the status, with no API server. What the e2e
suite once checked on a live cluster for these decisions alone is here (the note of issue 40 lists them)."""

from __future__ import annotations

import copy
import dataclasses

from rlplace_operator.admission.kueue import QueueObjects
from rlplace_operator.admission.ledger import Holding, Ledger
from rlplace_operator.api.base import dump
from rlplace_operator.api.names import (
    ATTEMPT_ANNOTATION,
    NODES_ANNOTATION,
    PRIORITY_CLASS_LABEL,
    QUEUE_LABEL,
    UNCONSTRAINED_TOPOLOGY_ANNOTATION,
)
from rlplace_operator.api.status import JobPhase
from rlplace_operator.cluster.snapshot import Snapshot
from rlplace_operator.reconcile.actions import Apply, DeleteChildren, DeleteStale, Post, ReleaseNodes, SuspendDriver
from rlplace_operator.reconcile.apply import adopted
from rlplace_operator.reconcile.provision import provision
from rlplace_operator.reconcile.world import Job, Settings, World

from recorded import (
    DRA_NODE,
    NOW,
    cluster_snapshot,
    dra_node,
    example_spec,
    local_groups,
    local_nodes,
    manifests,
    new_job,
    rljob_entry,
)

COLLOCATED = example_spec("examples/rljob-collocated.yaml")
HETEROGENEOUS = example_spec("examples/rljob-heterogeneous.yaml")
DISAGGREGATED = example_spec("examples/rljob-disaggregated.yaml")
SHARED = next(d for d in manifests("examples/rljob-shared-node.yaml") if d["kind"] == "RLJob")["spec"]


def world(snapshot: Snapshot | None = None, **fields: object) -> World:
    return World(now=NOW, child_known=False, snapshot=snapshot or cluster_snapshot(), **fields)  # type: ignore[arg-type]


def applied(outcome: object) -> list[dict]:
    """The objects the outcome makes, in order, as the API server gets them (owned by the job)."""
    found = []
    for action in outcome.actions:  # type: ignore[attr-defined]
        if isinstance(action, Apply):
            found += adopted(action.objects, action.owner)
    return found


def kinds(outcome: object) -> list[str]:
    return [body["kind"] for body in applied(outcome)]


def condition(outcome: object, type_: str) -> object:
    return next((c for c in outcome.status.conditions if c.type == type_), None)  # type: ignore[attr-defined]


# -- rlplace's queue ----------------------------------------------------------------------------------------------


def test_a_new_job_gets_its_configmap_and_raycluster_on_the_nodes_admission_reserved() -> None:
    ledger = Ledger()
    job = new_job("collocated", COLLOCATED, labels={"team": "rl"})
    outcome = provision(job, world(), ledger)
    assert outcome.retry is None
    assert kinds(outcome) == ["ConfigMap", "RayCluster"]
    # The claim templates of an earlier pin go, between the ConfigMap and the RayCluster that names new ones.
    stale = [a for a in outcome.actions if isinstance(a, DeleteStale)]
    assert stale == [DeleteStale("ResourceClaimTemplate", frozenset())]
    configmap, cluster = applied(outcome)
    assert configmap["metadata"]["name"] == "collocated-placement" and "plan.json" in configmap["data"]
    assert cluster["metadata"]["annotations"][NODES_ANNOTATION] == "a800-0"
    # Owned by the job, in its namespace, carrying its labels (a gang scheduler's reach the pods' owner).
    assert cluster["metadata"]["ownerReferences"][0] == {
        "apiVersion": "rlplace.io/v1alpha1",
        "kind": "RLJob",
        "name": "collocated",
        "uid": "uid-collocated",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    assert cluster["metadata"]["namespace"] == "ns" and cluster["metadata"]["labels"]["team"] == "rl"
    status = outcome.status
    assert (status.phase, status.ray_cluster, status.gpus, status.nodes) == (JobPhase.PROVISIONING, "collocated", 8, 1)
    assert condition(outcome, "Admitted").reason == "Admitted" and condition(outcome, "Placed").status == "True"
    assert ledger.reserved[job.key] == frozenset({"a800-0"})
    assert [a.reason for a in outcome.actions if isinstance(a, Post)] == ["Admitted", "Placed"]


def test_a_job_with_an_entrypoint_gets_a_rayjob_of_its_attempt_and_waits_for_kuberay_to_start_its_driver() -> None:
    spec = {**COLLOCATED, "entrypoint": "python -m placement_core.launcher.demo"}
    outcome = provision(new_job("run", spec), world(), Ledger())
    assert kinds(outcome) == ["ConfigMap", "RayJob"]
    rayjob = applied(outcome)[1]
    assert rayjob["metadata"]["annotations"][ATTEMPT_ANNOTATION] == "1"
    assert rayjob["spec"]["entrypoint"] == spec["entrypoint"]
    status = outcome.status
    assert (status.phase, status.ray_job, status.attempts) == (JobPhase.PROVISIONING, "run", None)
    assert condition(outcome, "DriverSucceeded").reason == "Initializing"


def test_a_job_larger_than_its_groups_is_pending_not_queued() -> None:
    spec = {**COLLOCATED, "componentPlacement": [{"components": "actor,rollout,reward", "placement": "0-23"}]}
    outcome = provision(new_job("huge", spec), world(), Ledger(), retry=2)
    assert outcome.status.phase == JobPhase.PENDING and kinds(outcome) == []
    assert condition(outcome, "Placed").reason == "InsufficientCapacity"
    assert outcome.retry is not None and not outcome.retry.permanent and outcome.retry.delay == 20.0


def test_the_three_examples_together_queue_instead_of_deadlocking() -> None:
    """Collocated (a800-0), disaggregated (the 4090) and heterogeneous (a800-1 and the 4090 among others), created in
    that order: one provision pass each against one snapshot and one ledger, as the operator's handlers run them.
    (tests/e2e/test_shared_cluster.py shows the same on the live cluster, and that the job starts within 10 s of
    its node being freed.)"""
    ledger = Ledger()
    jobs = [
        new_job("collocated", COLLOCATED, created="2026-11-24T00:59:00Z"),
        new_job("disaggregated", DISAGGREGATED, created="2026-11-24T00:59:01Z"),
        new_job("heterogeneous", HETEROGENEOUS, created="2026-11-24T00:59:02Z"),
    ]
    # kopf indexes every job before a handler runs: each pass sees the others.
    snapshot = dataclasses.replace(cluster_snapshot(), rljobs={j.key: [rljob_entry(j)] for j in jobs})
    outcomes = [provision(j, world(snapshot), ledger) for j in jobs]
    assert [o.status.phase for o in outcomes] == [JobPhase.PROVISIONING, JobPhase.PROVISIONING, JobPhase.QUEUED]
    waiting = outcomes[2].status
    assert (waiting.waiting_for, waiting.queue_position) == ("1 free node of 4090", 1)
    assert [kinds(o) for o in outcomes] == [["ConfigMap", "RayCluster"], ["ConfigMap", "RayCluster"], []]
    assert any(
        isinstance(a, Post) and a.reason == "Queued" and "1 free node of 4090" in a.message for a in outcomes[2].actions
    )


def test_a_missing_nodegroup_is_pending_and_retried_until_it_exists() -> None:
    spec = {**COLLOCATED, "nodeGroups": ["a801"]}
    outcome = provision(new_job("typo", spec), world(), Ledger())
    assert outcome.status.phase == JobPhase.PENDING and outcome.status.message == "NodeGroup a801 not found"
    assert condition(outcome, "Validated").reason == "NodeGroupNotFound"
    assert outcome.retry is not None and not outcome.retry.permanent


def test_without_kuberay_the_job_is_pending_and_says_what_to_install() -> None:
    outcome = provision(new_job("c", COLLOCATED), world(kuberay_served=False), Ledger())
    assert outcome.status.phase == JobPhase.PENDING and kinds(outcome) == []
    assert outcome.status.message == "the ray.io RayCluster CRD is not installed (install KubeRay)"


def test_a_suspended_job_stops_its_driver_and_gives_its_nodes_back() -> None:
    spec = {**COLLOCATED, "entrypoint": "python train.py", "suspend": True}
    outcome = provision(new_job("s", spec), world(), Ledger())
    assert SuspendDriver() in outcome.actions and ReleaseNodes() in outcome.actions and kinds(outcome) == []
    assert outcome.status.phase == JobPhase.SUSPENDED
    cluster = provision(new_job("s", {**COLLOCATED, "suspend": True}), world(), Ledger())
    assert DeleteChildren() in cluster.actions


def test_the_progress_endpoint_is_named_in_the_head_pod_when_the_operator_serves_it() -> None:
    served = world(settings=Settings(progress_url="http://rlplace-operator.rlplace-system.svc:8081"))
    cluster = applied(provision(new_job("c", COLLOCATED), served, Ledger()))[1]
    env = {
        e["name"]: e.get("value") for e in cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["env"]
    }
    assert env["RLPLACE_PROGRESS_URL"] == (
        "http://rlplace-operator.rlplace-system.svc:8081/v1/namespaces/$(RLPLACE_NAMESPACE)/rljobs/c/progress"
    )


# -- DRA: exact GPUs of a shared node ---------------------------------------------------------------------------


def dra_world(snapshot: Snapshot | None = None) -> World:
    node, slice_ = dra_node()
    return world(snapshot or cluster_snapshot([*local_nodes(), node], local_groups(), [slice_]))


def test_two_jobs_on_a_dra_node_each_claim_four_exact_gpus_through_their_own_claim_templates() -> None:
    ledger = Ledger()
    jobs = [new_job("shared-a", SHARED, created="2026-11-24T00:59:00Z"), new_job("shared-b", SHARED)]
    snapshot = dataclasses.replace(dra_world().snapshot, rljobs={j.key: [rljob_entry(j)] for j in jobs})
    first, second = (provision(j, dra_world(snapshot), ledger) for j in jobs)
    for outcome, devices in (
        (first, ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]),
        (second, ["gpu-4", "gpu-5", "gpu-6", "gpu-7"]),
    ):
        assert kinds(outcome) == ["ConfigMap", "ResourceClaimTemplate", "RayJob"]
        (claim,) = outcome.status.gpu_claims
        assert (claim.node, claim.devices) == (DRA_NODE, devices)
        template = applied(outcome)[1]
        assert template["metadata"]["name"] == claim.template
        expression = template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["selectors"][0]["cel"]["expression"]
        assert expression.endswith(f"index in [{', '.join(d.removeprefix('gpu-') for d in devices)}]")
        worker = applied(outcome)[2]["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
        assert worker["resourceClaims"] == [{"name": "gpus", "resourceClaimTemplateName": claim.template}]
    assert ledger.reserved_gpus[("ns", "shared-b")] == {DRA_NODE: frozenset({4, 5, 6, 7})}


def test_a_framework_job_on_a_dra_group_is_refused_before_admission() -> None:
    spec = {**SHARED, "framework": "rlinf"}
    ledger = Ledger()
    outcome = provision(new_job("rlinf-shared", spec), dra_world(), ledger)
    assert outcome.status.phase == JobPhase.FAILED and outcome.retry is not None and outcome.retry.permanent
    assert "framework jobs run on devicePlugin NodeGroups only" in outcome.status.message
    assert ledger.reserved == {} and ledger.reserved_gpus == {}


# -- Kueue ----------------------------------------------------------------------------------------------------


KUEUE_OBJECTS = {d["kind"]: d for d in manifests("examples/kueue-queues.yaml")}


def queue_objects(**fields: object) -> QueueObjects:
    values = {
        "served": True,
        "local_queue": KUEUE_OBJECTS["LocalQueue"],
        "cluster_queue": {
            **KUEUE_OBJECTS["ClusterQueue"],
            "status": {"conditions": [{"type": "Active", "status": "True"}]},
        },
        **fields,
    }
    return QueueObjects(**values)  # type: ignore[arg-type]


def kueue_job(name: str = "q", **labels: str) -> Job:
    return new_job(name, COLLOCATED, labels={QUEUE_LABEL: "rl", **labels})


def test_a_job_naming_a_missing_localqueue_or_priority_class_is_pending_and_says_which() -> None:
    missing = provision(kueue_job(), world(queue_objects=queue_objects(local_queue=None, cluster_queue=None)), Ledger())
    assert missing.status.phase == JobPhase.PENDING and missing.status.message == "LocalQueue ns/rl not found"
    assert kinds(missing) == [] and missing.retry is not None and not missing.retry.permanent
    no_class = provision(
        kueue_job(**{PRIORITY_CLASS_LABEL: "rl-nonexistent"}), world(queue_objects=queue_objects()), Ledger()
    )
    assert no_class.status.message == "WorkloadPriorityClass rl-nonexistent not found"
    absent = provision(kueue_job(), world(queue_objects=QueueObjects(served=False)), Ledger())
    assert "Kueue is not installed" in absent.status.message


def test_a_new_kueue_job_gets_its_workload_and_waits_for_kueue() -> None:
    outcome = provision(kueue_job(), world(queue_objects=queue_objects()), Ledger())
    assert (
        kinds(outcome) == ["Workload"]
        and DeleteStale("Workload", frozenset({outcome.status.kueue.workload})) in outcome.actions
    )
    workload = applied(outcome)[0]
    assert workload["spec"]["queueName"] == "rl" and workload["spec"]["podSets"][0]["count"] == 1
    assert workload["metadata"]["ownerReferences"][0]["uid"] == "uid-q"
    assert outcome.status.phase == JobPhase.QUEUED and condition(outcome, "Admitted").reason == "WaitingForKueue"
    assert outcome.status.waiting_for == "Kueue (ClusterQueue rl-cluster-queue): Kueue has not looked at it yet"


def test_a_stopped_clusterqueue_is_named_as_what_the_job_waits_for() -> None:
    held = copy.deepcopy(queue_objects().cluster_queue)
    held["spec"]["stopPolicy"] = "Hold"
    outcome = provision(kueue_job(), world(queue_objects=queue_objects(cluster_queue=held)), Ledger())
    assert "ClusterQueue rl-cluster-queue is stopped (stopPolicy Hold)" in outcome.status.waiting_for


def admitted_workload(job: Job, hosts: list[str]) -> dict:
    """The job's Workload as Kueue leaves it once admitted: quota reserved, topology assigned to `hosts`."""
    body = applied(provision(job, world(queue_objects=queue_objects()), Ledger()))[0]
    body["status"] = {
        "conditions": [
            {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"},
            {"type": "Admitted", "status": "True", "reason": "Admitted"},
        ],
        "admission": {
            "clusterQueue": "rl-cluster-queue",
            "podSetAssignments": [
                {
                    "name": "a800",
                    "flavors": {"cpu": "a800", "memory": "a800", "nvidia.com/gpu": "a800"},
                    "topologyAssignment": {
                        "levels": ["kubernetes.io/hostname"],
                        "slices": [
                            {
                                "domainCount": len(hosts),
                                "valuesPerLevel": [{"individual": {"roots": hosts}}],
                                "podCounts": {"universal": 1},
                            }
                        ],
                    },
                }
            ],
        },
    }
    return body


def test_a_job_kueue_admitted_runs_on_the_granted_host_and_its_children_are_not_kueues() -> None:
    job = kueue_job("q", team="rl")
    workload = admitted_workload(job, ["a800-1"])
    ledger = Ledger()
    outcome = provision(job, world(queue_objects=queue_objects(workloads=(workload,))), ledger)
    assert kinds(outcome) == ["ConfigMap", "RayCluster"]  # the Workload exists: nothing more of it
    cluster = applied(outcome)[1]
    assert cluster["metadata"]["annotations"][NODES_ANNOTATION] == "a800-1"  # Kueue's host, not rlplace's first
    assert QUEUE_LABEL not in cluster["metadata"]["labels"] and cluster["metadata"]["labels"]["team"] == "rl"
    head = cluster["spec"]["headGroupSpec"]["template"]["metadata"]
    assert head["annotations"][UNCONSTRAINED_TOPOLOGY_ANNOTATION] == "true"
    kueue = outcome.status.kueue
    assert (kueue.workload, kueue.cluster_queue, kueue.flavors) == (
        workload["metadata"]["name"],
        "rl-cluster-queue",
        {"a800": "a800"},
    )
    assert condition(outcome, "Admitted").reason == "AdmittedByKueue"
    assert ledger.reserved[job.key] == frozenset({"a800-1"})  # rlplace's own queue keeps off it


def test_a_node_kueue_granted_that_rlplaces_queue_gave_a_job_a_moment_before_is_waited_for_not_shared() -> None:
    """Seen in the chaos run: a job of rlplace's own queue was admitted on the 4090 node one second before Kueue
    granted it to a Kueue job (Kueue sees another job's pods only once they exist). Made at once, the Kueue job's
    pods waited unbound, two RayClusters named the node, and each bind timeout made the job's RayJob again on the
    same grant. The Kueue job now waits for the node, naming the job that holds it, and makes nothing."""
    job = kueue_job("q", team="rl")
    workload = admitted_workload(job, ["a800-1"])
    ledger = Ledger()
    other = Holding(frozenset({"a800-1"}))
    snapshot = cluster_snapshot(holdings={("ns", "rlinf"): [other]})
    outcome = provision(job, world(snapshot, queue_objects=queue_objects(workloads=(workload,))), ledger)
    assert kinds(outcome) == [] and outcome.status.phase == JobPhase.QUEUED
    assert outcome.status.waiting_for == "node a800-1, which Kueue granted, to be freed by RLJob ns/rlinf"
    assert condition(outcome, "Admitted").reason == "GrantedNodeHeld"
    assert [p.reason for p in outcome.actions if isinstance(p, Post)] == ["GrantedNodeHeld"]
    # It holds its grant meanwhile: once the other job ends, rlplace's queue does not give the node away again.
    assert ledger.reserved[job.key] == frozenset({"a800-1"})
    # Once the other job's RayCluster is gone, the grant is used.
    freed = provision(job, world(queue_objects=queue_objects(workloads=(workload,))), ledger)
    assert kinds(freed) == ["ConfigMap", "RayCluster"] and ledger.reserved[job.key] == frozenset({"a800-1"})


def test_a_kueue_job_on_a_dra_group_is_refused() -> None:
    job = new_job("q", SHARED, labels={QUEUE_LABEL: "rl"})
    outcome = provision(job, dataclasses.replace(dra_world(), queue_objects=queue_objects()), Ledger())
    assert outcome.status.phase == JobPhase.FAILED and condition(outcome, "Admitted").reason == "KueueUnsupported"


def test_a_new_demand_makes_a_new_workload_and_deletes_the_old_one() -> None:
    job = kueue_job()
    old = admitted_workload(job, ["a800-0"])
    wider = dataclasses.replace(
        job, spec={**COLLOCATED, "componentPlacement": [{"components": "actor,rollout,reward", "placement": "0-15"}]}
    )
    outcome = provision(wider, world(queue_objects=queue_objects(workloads=(old,))), Ledger())
    (created,) = applied(outcome)
    assert created["metadata"]["name"] != old["metadata"]["name"] and created["spec"]["podSets"][0]["count"] == 2
    assert DeleteStale("Workload", frozenset({created["metadata"]["name"]})) in outcome.actions


# -- re-placement ---------------------------------------------------------------------------------------------


def test_a_re_placed_job_is_planned_on_its_last_re_placement_with_its_predicted_time() -> None:
    spec = {**COLLOCATED, "autoPlacement": {"apply": "Auto"}}
    placed = [{"components": "actor", "placement": "0-3"}, {"components": "rollout,reward", "placement": "4-7"}]
    status = {
        "phase": "Queued",
        "observedGeneration": 1,
        "attempts": 2,
        "replacements": [
            {
                "time": "2026-11-24T00:59:30Z",
                "iteration": 9,
                "previous": [{"components": "actor,rollout,reward", "placement": "0-7"}],
                "componentPlacement": placed,
                "predictedIterationSeconds": 41.5,
                "observedIterationSeconds": 60.0,
            }
        ],
    }
    outcome = provision(new_job("re", spec, status=status), world(), Ledger())
    assert [e.placement for e in outcome.status.applied_placement] == ["0-3", "4-7"]
    assert outcome.status.predicted_iteration_time == 41.5
    assert [c.name for c in outcome.status.placement.components] == ["actor", "rollout", "reward"]


# -- causes no retry can fix: said, not retried ---------------------------------------------------------------


def test_a_dra_group_whose_deviceclass_is_missing_queues_its_jobs_naming_it_and_admits_them_once_it_exists() -> None:
    node, slice_ = dra_node()
    nodes, groups = [*local_nodes(), node], local_groups()
    missing = cluster_snapshot(nodes, groups, [slice_], device_classes=set())
    ledger = Ledger()
    outcome = provision(new_job("shared-a", SHARED), world(missing), ledger)
    assert outcome.status.phase == JobPhase.QUEUED and kinds(outcome) == [] and outcome.retry is None
    assert condition(outcome, "Admitted").reason == "DeviceClassNotFound"
    assert outcome.status.waiting_for.startswith("NodeGroup real-dra: DeviceClass gpu.example.com does not exist")
    assert ledger.reserved == {} and ledger.reserved_gpus == {}
    created = cluster_snapshot(nodes, groups, [slice_], device_classes={"gpu.example.com"})
    again = provision(new_job("shared-a", SHARED, status=dump(outcome.status)), world(created), ledger)
    assert again.status.phase == JobPhase.PROVISIONING and kinds(again)[-1] == "RayJob"


def test_a_worker_no_node_of_its_group_can_hold_is_pending_naming_the_request() -> None:
    spec = {**COLLOCATED, "ray": {"workerResources": {"cpu": "1000", "memory": "1Gi"}}}
    outcome = provision(new_job("huge-cpu", spec), world(), Ledger())
    assert outcome.status.phase == JobPhase.PENDING and kinds(outcome) == []
    assert condition(outcome, "Placed").reason == "RequestTooLarge"
    assert outcome.status.message == (
        "a worker pod of the job asks 1000 CPUs; no node of NodeGroup a800 has that many (the largest has 64)"
    )
    assert outcome.retry is not None and not outcome.retry.permanent  # a bigger node may join
    head = {**COLLOCATED, "ray": {"headResources": {"cpu": "1", "memory": "1Ti"}}}
    said = provision(new_job("huge-head", head), world(), Ledger()).status.message
    assert (
        said
        == "the Ray head pod asks 1Ti of memory; no node of the job's NodeGroups has that many (the largest has 512Gi)"
    )


def test_nodes_too_small_for_a_worker_are_left_out_and_the_job_takes_a_bigger_one() -> None:
    nodes = local_nodes()
    a800_0 = next(n for n in nodes if n["metadata"]["name"] == "a800-0")
    a800_0["status"]["allocatable"]["cpu"] = "2"
    spec = {**COLLOCATED, "ray": {"workerResources": {"cpu": "4", "memory": "16Gi"}}}
    outcome = provision(new_job("c", spec), world(cluster_snapshot(nodes)), Ledger())
    assert applied(outcome)[1]["metadata"]["annotations"][NODES_ANNOTATION] == "a800-1"


def test_a_job_admitted_on_a_nodegroup_deleted_since_gives_its_reservation_back_and_says_so() -> None:
    """Bad input during a DRA re-admission: the queue pass reserved GPUs of real-dra-0 for the job, then its
    NodeGroup was deleted. Nothing holds those GPUs afterwards, and the job names the group."""
    ledger = Ledger()
    job = new_job("shared-a", SHARED)
    ledger.reserved_gpus[job.key] = {DRA_NODE: frozenset({0, 1, 2, 3})}
    groups = {k: v for k, v in local_groups().items() if k != "real-dra"}
    outcome = provision(job, world(cluster_snapshot(groups=groups)), ledger)
    assert outcome.status.phase == JobPhase.PENDING and outcome.status.message == "NodeGroup real-dra not found"
    assert ReleaseNodes() in outcome.actions


def test_a_resumed_job_whose_rayjob_kuberay_has_not_resumed_yet_is_provisioning_not_suspended() -> None:
    """The observed RayJob still says suspend and Suspended (KubeRay has not seen the new spec): the status is
    computed from the RayJob as it is once applied, so the job waits for KubeRay's resume, and the timer keeps
    looking at it (a Suspended phase would have left it there: found by the e2e suspend test)."""
    spec = {**COLLOCATED, "entrypoint": "python train.py"}
    suspended = {"metadata": {"name": "s", "ownerReferences": [{"uid": "uid-s"}]}, "spec": {"suspend": True},
                 "status": {"jobDeploymentStatus": "Suspended"}}  # fmt: skip
    outcome = provision(new_job("s", spec), world(rayjob=suspended), Ledger())
    assert outcome.status.phase == JobPhase.PROVISIONING
    assert condition(outcome, "DriverSucceeded").reason == "Resuming"


def test_a_grant_that_names_a_node_kueue_is_replacing_is_waited_for_not_used() -> None:
    """After a node loss restarted a job, Kueue (TASFailedNodeReplacementFailFast off) keeps its Workload admitted
    on the failed node while it looks for another (status.unhealthyNodes). Pods made there would never run: the
    job waits for Kueue's replacement, naming the node, and makes nothing; once Kueue grants another node it runs
    there."""
    job = kueue_job("q", team="rl")
    workload = admitted_workload(job, ["a800-1"])
    workload["status"]["unhealthyNodes"] = [{"name": "a800-1"}]
    outcome = provision(job, world(queue_objects=queue_objects(workloads=(workload,))), Ledger())
    assert kinds(outcome) == [] and outcome.status.phase == JobPhase.QUEUED
    name = workload["metadata"]["name"]
    said = f"Kueue to replace failed node a800-1 in Workload {name} (no other node of its flavor is free)"
    assert outcome.status.waiting_for == said
    assert condition(outcome, "Admitted").reason == "WaitingForKueue"
    replaced = admitted_workload(job, ["a800-0"])
    granted = provision(job, world(queue_objects=queue_objects(workloads=(replaced,))), Ledger())
    assert kinds(granted) == ["ConfigMap", "RayCluster"]
    assert applied(granted)[1]["metadata"]["annotations"][NODES_ANNOTATION] == "a800-0"

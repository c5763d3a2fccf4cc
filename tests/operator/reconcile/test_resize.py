"""A running job's Replace component resized in place (reconcile/resize.py, docs/elastic.md), over the recorded
local cluster with a third a800 node: the pass that plans the new count (the job stays Running on its attempt, the
RayCluster follows, the head pod is nudged, the ranks added are awaited, an Event), the passes after it (a node
added is starting, not lost, until its pod is Ready; the driver's report verifies the new ranks), and a shrink
(the node taken away is free for the queue, and its pod is deleted only once the driver stopped its ranks)."""

from __future__ import annotations

import copy
import dataclasses

import pytest
from test_relocate import nodes

from placement_core.observe.verify import BindingReport, ProcessCheck
from placement_core.plan import Plan
from rlplace_operator.admission.ledger import Ledger
from rlplace_operator.api.base import dump
from rlplace_operator.api.names import NODES_ANNOTATION, PLAN_DIGEST_ANNOTATION, SPEC_DIGEST_ANNOTATION
from rlplace_operator.api.rljob import RLJobSpec
from rlplace_operator.builders.raycluster import dropped_workers
from rlplace_operator.reconcile.actions import Apply, DropWorkers, Post, Relocate, ResizeWorkers, SetReplicas
from rlplace_operator.reconcile.decide import decide, needs_look, reconcile
from rlplace_operator.reconcile.observe import Observer
from rlplace_operator.reconcile.provision import provision
from rlplace_operator.reconcile.resize import plan_digest
from rlplace_operator.reconcile.world import Job, World

from recorded import NOW, cluster_snapshot, condition, new_job, ray_pods, rayjob, rljob_entry

CLUSTER = "split-abcde"
ACTOR, ROLLOUT, ADDED = "a800-0", "a800-1", "a800-2"


def spec(replicas: int) -> dict:
    return {
        "nodeGroups": ["a800"],
        "componentPlacement": [
            {"components": "actor", "placement": "0-7"},
            {"components": "rollout", "placement": "8-11"},
        ],
        "components": [{"name": "rollout", "onLoss": "Replace", "replicas": replicas, "maxReplicas": 12}],
        "entrypoint": "python -m placement_core.launcher.demo --steps 60",
    }


def objects(outcome: object) -> dict[str, dict]:
    return {o["kind"]: o for a in outcome.actions if isinstance(a, Apply) for o in a.objects}  # type: ignore[attr-defined]


def posts(outcome: object, reason: str) -> list[str]:
    return [a.message for a in outcome.actions if isinstance(a, Post) and a.reason == reason]  # type: ignore[attr-defined]


def running_rayjob() -> dict:
    driver = rayjob("Running", "RUNNING")
    driver["metadata"]["name"] = "split"
    driver["status"]["rayClusterName"] = CLUSTER
    return driver


def running_job(replicas: int, ledger: Ledger) -> tuple[Job, Plan, list[dict]]:
    """The job provisioned with `replicas` rollout replicas and running: its job (status as written), plan, pods."""
    snapshot = cluster_snapshot(nodes())
    outcome = provision(new_job("split", spec(replicas)), World(now=NOW, child_known=False, snapshot=snapshot), ledger)
    plan = Plan.from_json(objects(outcome)["ConfigMap"]["data"]["plan.json"])
    status = dump(outcome.status) | {"phase": "Running", "rayCluster": CLUSTER, "attempts": 1}
    status["driverStartTime"] = "2026-11-24T00:59:45Z"
    held = sorted({p.node_name for _, p in plan.processes()})
    report = BindingReport.of((ProcessCheck(c.name, p.rank, p.node_name, ()), p) for c, p in plan.processes())
    status["binding"] = [
        {"name": n, "verified": v, "processes": report.totals()[n]} for n, v in report.verified().items()
    ]
    status["conditions"].append(
        {
            "type": "BindingVerified",
            "status": "True",
            "reason": "Verified",
            "lastTransitionTime": "2026-11-24T00:59:50Z",
        }
    )
    pods = ray_pods(CLUSTER, tuple(held))
    for pod in pods:  # KubeRay labels a worker pod with its group (the job's NodeGroup: one pod shape)
        if pod["metadata"]["labels"]["ray.io/node-type"] == "worker":
            pod["metadata"]["labels"]["ray.io/group"] = "a800"
    return dataclasses.replace(new_job("split", spec(replicas)), status=status), plan, pods


def resized(job: Job, replicas: int, pods: list[dict], ledger: Ledger) -> tuple[object, Job, Plan]:
    """The user patched the replicas: the pass that plans the new spec (generation 2), and the job after it."""
    changed = dataclasses.replace(job, spec=spec(replicas), generation=2)
    driver = running_rayjob()
    world = World(now=NOW, rayjob=driver, pods=pods, snapshot=cluster_snapshot(nodes()))
    assert [type(a).__name__ for a in reconcile(changed, world).actions] == ["Provision"]
    outcome = provision(changed, world, ledger)
    plan = Plan.from_json(objects(outcome)["ConfigMap"]["data"]["plan.json"])
    return outcome, dataclasses.replace(changed, status=dump(outcome.status)), plan


def looked(job: Job, plan: Plan, pods: list[dict], report: BindingReport | None = None) -> object:
    """A later pass over the running job (the nodes of pods not running read, as the observer reads them)."""
    found = {n["metadata"]["name"]: n for n in nodes()}
    world = World(now=NOW, rayjob=running_rayjob(), pods=pods, plan=plan, report=report, nodes=found)
    return reconcile(job, world)


def rollout_of(status: dict) -> dict:
    return next(c for c in status["components"] if c["name"] == "rollout")


def test_growing_onto_a_node_it_did_not_hold_keeps_the_job_running_and_the_node_starting_until_verified() -> None:
    ledger = Ledger()
    job, _, pods = running_job(4, ledger)
    outcome, job, grown = resized(job, 12, pods, ledger)
    status = dump(outcome.status)
    # The same attempt runs on: nothing deleted or restarted, the kept ranks where they were.
    assert (status["phase"], status["attempts"], status.get("restartCount")) == ("Running", 1, None), status
    assert [p.node_name for p in grown.component("rollout").processes[:4]] == [ROLLOUT] * 4
    assert [p.node_name for p in grown.component("rollout").processes[8:]] == [ADDED] * 4
    assert ledger.reserved[job.key] == frozenset({ACTOR, ROLLOUT, ADDED})
    (resize,) = [a for a in outcome.actions if isinstance(a, ResizeWorkers)]  # type: ignore[attr-defined]
    assert (resize.cluster, resize.head, resize.plan_digest) == (CLUSTER, f"{CLUSTER}-head-a1b2c", plan_digest(grown))
    assert resize.patch["metadata"]["annotations"][NODES_ANNOTATION] == f"{ACTOR},{ROLLOUT},{ADDED}"
    assert [g["replicas"] for g in resize.patch["spec"]["workerGroupSpecs"]] == [3]
    assert posts(outcome, "Resized") == [
        f"component 'rollout' 4 -> 12 replicas in place: ranks 4-11 start on node {ROLLOUT}, node {ADDED} (added) "
        "at the driver's next step"
    ]
    rollout = rollout_of(status)
    assert (rollout["desired"], rollout["live"], rollout["unverified"]) == (12, 8, list(range(4, 12)))
    assert [(s["node"], s["ranks"]) for s in rollout["starting"]] == [(ADDED, [8, 9, 10, 11])]
    assert PLAN_DIGEST_ANNOTATION == "rlplace.io/plan-digest"

    # KubeRay makes the pod: not there yet, the ranks are starting, not lost, and nothing moves.
    waiting = looked(job, grown, pods)
    status = dump(waiting.status)
    assert status["phase"] == "Running" and posts(waiting, "RanksLost") == []
    assert not [a for a in waiting.actions if isinstance(a, Relocate | DropWorkers)]  # type: ignore[attr-defined]
    ready = condition(status, "RayClusterReady")
    assert (
        ready["status"] == "False"
        and f"ranks 8-11 on node {ADDED} start (no worker pod on node {ADDED} yet)" in (ready["message"])
    )
    assert rollout_of(status)["live"] == 8 and needs_look({"spec": {}, "status": status})

    # Its pod Ready: the ranks wait for the driver's report, which then verifies them.
    all_pods = ray_pods(CLUSTER, (ACTOR, ROLLOUT, ADDED))
    started = looked(dataclasses.replace(job, status=status), grown, all_pods)
    status = dump(started.status)
    assert posts(started, "RanksStarted") == [
        f"component 'rollout' ranks 8-11 on node {ADDED}: its worker pod is Ready"
    ]
    rollout = rollout_of(status)
    assert "starting" not in rollout and rollout["live"] == 12 and rollout["unverified"] == list(range(4, 12))
    assert condition(status, "BindingVerified")["status"] == "Unknown"
    report = BindingReport.of((ProcessCheck(c.name, p.rank, p.node_name, ()), p) for c, p in grown.processes())
    verified = dump(looked(dataclasses.replace(job, status=status), grown, all_pods, report).status)
    assert condition(verified, "BindingVerified")["status"] == "True" and "unverified" not in rollout_of(verified)


def test_growing_on_the_nodes_it_holds_needs_no_new_pod() -> None:
    ledger = Ledger()
    job, _, pods = running_job(4, ledger)
    outcome, _, grown = resized(job, 6, pods, ledger)
    (resize,) = [a for a in outcome.actions if isinstance(a, ResizeWorkers)]  # type: ignore[attr-defined]
    assert resize.patch is None and resize.plan_digest == plan_digest(grown)  # the head nudged, the pods as they are
    rollout = rollout_of(dump(outcome.status))
    assert (rollout["desired"], rollout["unverified"], "starting" in rollout) == (6, [4, 5], False)
    assert {p.node_name for p in grown.component("rollout").processes} == {ROLLOUT}


def test_shrinking_frees_the_node_at_once_and_takes_its_pod_out_once_the_driver_stopped_its_ranks() -> None:
    ledger = Ledger()
    job, _, pods = running_job(12, ledger)
    assert ledger.reserved[job.key] == frozenset({ACTOR, ROLLOUT, ADDED})
    grown_cluster = {"metadata": {"annotations": {NODES_ANNOTATION: f"{ACTOR},{ROLLOUT},{ADDED}"}}}
    outcome, job, small = resized(job, 4, pods, ledger)
    status = dump(outcome.status)
    assert status["phase"] == "Running" and status["attempts"] == 1
    assert ledger.reserved[job.key] == frozenset({ACTOR, ROLLOUT})  # the queue may give a800-2 away now
    # The RayCluster keeps its pods for now (with fewer replicas KubeRay would delete pods of its own choosing); the
    # head pod is nudged to see the plan.
    (resize,) = [a for a in outcome.actions if isinstance(a, ResizeWorkers)]  # type: ignore[attr-defined]
    assert resize.patch is None and resize.plan_digest == plan_digest(small)
    assert posts(outcome, "Resized") == [
        "component 'rollout' 12 -> 4 replicas in place: ranks 4-11 stop at the driver's next step"
    ]
    assert rollout_of(status)["desired"] == 4

    # The driver still reports 12 rollout processes: its step in flight finishes first, the pod stays.
    still = looked(job, small, pods)
    assert not [a for a in still.actions if isinstance(a, DropWorkers)]  # type: ignore[attr-defined]
    assert posts(still, "RanksLost") == [] and dump(still.status)["phase"] == "Running"
    assert needs_look({"spec": {}, "status": dump(still.status)})  # looked at until the driver says so
    # Its report over the 4 ranks left: the pod of a800-2 goes, exactly it.
    report = BindingReport.of((ProcessCheck(c.name, p.rank, p.node_name, ()), p) for c, p in small.processes())
    status = dump(still.status)
    status["binding"] = [
        {"name": n, "verified": v, "processes": report.totals()[n]} for n, v in report.verified().items()
    ]
    done = looked(dataclasses.replace(job, status=status), small, pods)
    (drop,) = [a for a in done.actions if isinstance(a, DropWorkers)]  # type: ignore[attr-defined]
    (pod,) = [p for p in pods if p["spec"].get("nodeName") == ADDED]
    assert (drop.cluster, dict(drop.drops)) == (CLUSTER, {pod["metadata"]["name"]: ("a800", ADDED)})
    # A pod only not Ready yet on a node the plan left stays (right after a Replace move the status read may still
    # name the lost node, and KubeRay's new pod on the node moved to would look surplus)...
    not_ready = copy.deepcopy(pods)
    for p in not_ready:
        if p["spec"].get("nodeName") == ADDED:
            p["status"]["conditions"] = [{"type": "Ready", "status": "False"}]
    starting = looked(dataclasses.replace(job, status=status), small, not_ready)
    assert not [a for a in starting.actions if isinstance(a, DropWorkers)]  # type: ignore[attr-defined]
    # ...but one that crash-loops goes: a grow's pod a shrink overtook before it started (its entry script refuses
    # a node the plan no longer has).
    for p in not_ready:
        if p["spec"].get("nodeName") == ADDED:
            p["status"]["containerStatuses"] = [{"name": "ray-worker", "restartCount": 3, "ready": False}]
    overtaken = looked(dataclasses.replace(job, status=status), small, not_ready)
    (drop,) = [a for a in overtaken.actions if isinstance(a, DropWorkers)]  # type: ignore[attr-defined]
    assert dict(drop.drops) == {pod["metadata"]["name"]: ("a800", ADDED)}
    # Nothing in the status says a pod is left to take out (the driver reported, no rank is pending), and a
    # container's restart tells the job's handlers nothing: the timer looks while the RayCluster holds the node.
    entry = {"spec": {}, "status": dump(overtaken.status)}
    assert needs_look(entry, {ACTOR, ROLLOUT, ADDED}) and not needs_look(entry, {ACTOR, ROLLOUT})

    # On the RayCluster as it runs (the three nodes' worker group): one replica fewer, that pod named, the node out.
    group = {
        "groupName": "a800",
        "replicas": 3,
        "minReplicas": 3,
        "template": {"spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [ACTOR, ROLLOUT, ADDED]}
            ]}]
        }}}}},
    }  # fmt: skip
    patch = dropped_workers({**grown_cluster, "spec": {"workerGroupSpecs": [group]}}, drop.drops)
    (after,) = patch["spec"]["workerGroupSpecs"]
    assert (after["replicas"], after["minReplicas"], after["scaleStrategy"]) == (
        2, 2, {"workersToDelete": [pod["metadata"]["name"]]}
    )  # fmt: skip
    terms = after["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"][0]["matchExpressions"][0]["values"] == [ACTOR, ROLLOUT]
    assert patch["metadata"]["annotations"][NODES_ANNOTATION] == f"{ACTOR},{ROLLOUT}"
    assert group["replicas"] == 3  # the RayCluster read is not changed in place
    # The same drop again, on the cluster as the first patch left it (a pass that still saw the pod before KubeRay
    # deleted it): no second replica goes, or KubeRay would delete a kept pod of its own choosing.
    once = {**grown_cluster, "metadata": {**grown_cluster["metadata"], **patch["metadata"]}, "spec": patch["spec"]}
    (again,) = dropped_workers(once, drop.drops)["spec"]["workerGroupSpecs"]
    assert (again["replicas"], again["minReplicas"]) == (2, 2)


@pytest.mark.parametrize("phase", ["Provisioning", "Queued"])
def test_a_resize_of_a_job_not_running_is_its_next_plan_not_a_change_in_place(phase: str) -> None:
    """A restart in progress (or a job not started): the new count is simply the plan its next attempt runs."""
    ledger = Ledger()
    job, _, pods = running_job(4, ledger)
    status = copy.deepcopy(job.status) | {"phase": phase}
    outcome, _, _ = resized(dataclasses.replace(job, status=status), 12, pods, ledger)
    assert posts(outcome, "Resized") == []
    assert all("starting" not in c for c in dump(outcome.status).get("components") or [])


def reporting(job: Job) -> Job:
    """The running job with the driver's step times reported: the rollout (2.0 s of 2.5 s) the bottleneck."""
    progress = {
        "iteration": 12,
        "iterationSeconds": 2.5,
        "components": [{"name": "actor", "seconds": 0.5}, {"name": "rollout", "seconds": 2.0}],
        "bottleneck": "rollout",
        "updatedAt": "2026-11-24T00:59:59Z",
    }
    return dataclasses.replace(job, status={**job.status, "progress": progress})


def test_the_elastic_loop_writes_its_grow_to_the_spec_and_records_the_promise() -> None:
    """spec.elastic on: the rollout (4 replicas) is the bottleneck of the reported step times, so the pass records a
    Grow to 8 (its work split over twice the replicas promises 1.5 s instead of 2.5 s) and writes it to the spec;
    the pass after the spec change resizes the job in place (the tests above)."""
    ledger = Ledger()
    job, plan, pods = running_job(4, ledger)
    job.spec["elastic"] = {"enabled": True, "cooldown": 0}
    job = reporting(job)
    found = {n["metadata"]["name"]: n for n in nodes()}
    outcome = decide(job, World(now=NOW, rayjob=running_rayjob(), pods=pods, plan=plan, nodes=found))
    (change,) = [a for a in outcome.actions if isinstance(a, SetReplicas)]  # type: ignore[attr-defined]
    assert (change.index, change.component, change.replicas) == (0, "rollout", 8)
    (resize,) = dump(outcome.status)["resizes"]
    assert (resize["previous"], resize["replicas"], resize["reason"], resize["iteration"]) == (4, 8, "Grow", 12)
    assert (resize["observedIterationSeconds"], resize["predictedIterationSeconds"]) == (2.5, 1.5)
    assert posts(outcome, "ReplicasChanged") == [
        "Grow: component 'rollout' 4 -> 8 replicas: the bottleneck (2.00 s of 2.50 s), predicted 1.50 s per iteration "
        "(40% faster)"
    ]
    assert needs_look({"spec": job.spec, "status": dump(outcome.status)})


def test_the_loop_is_told_the_room_the_queue_would_give_its_job_and_nothing_is_reserved_by_asking() -> None:
    """The observer's room for a running elastic job is rlplace's queue's own answer on the recorded nodes: 4 -> 12
    rollout replicas fit while a800-2 is free (8 on the node it holds, 4 on a800-2); once another job holds a800-2,
    8 is the most; asking reserves nothing (the other job, queued behind it, still gets a800-2 after the first
    question). A job waiting ahead of it would hold the grow back the same way (admit's queue order)."""
    ledger = Ledger()
    job, _, _ = running_job(4, ledger)
    job = dataclasses.replace(job, spec={**job.spec, "elastic": {"enabled": True}})
    blocker_job = new_job(
        "blocker",
        {"nodeGroups": ["a800"], "componentPlacement": [{"components": "actor", "placement": "0-7"}]},
        created="2026-11-24T01:00:00Z",  # after the running job: behind it in the queue
    )
    rljobs = {j.key: [rljob_entry(j)] for j in (job, blocker_job)}
    snapshot = dataclasses.replace(cluster_snapshot(nodes()), rljobs=rljobs)
    observer = Observer(None, {}, ledger, snapshot=snapshot)  # type: ignore[arg-type]  (no API read)
    room = observer.with_room(job, World(now=NOW)).room
    assert room is not None
    assert room(0, 4, 12) == 12
    outcome = provision(blocker_job, World(now=NOW, child_known=False, snapshot=snapshot), ledger)
    assert dump(outcome.status)["placement"]["components"][0]["nodes"] == [ADDED]
    assert room(0, 4, 12) == 8
    assert room(0, 8, 12) == 8
    # Not asked for a job the loop does not drive, nor one not running.
    assert observer.with_room(dataclasses.replace(job, spec=spec(4)), World(now=NOW)).room is None
    pending = dataclasses.replace(job, status={**job.status, "phase": "Provisioning"})
    assert observer.with_room(pending, World(now=NOW)).room is None


def test_a_running_jobs_new_spec_that_changes_more_than_replicas_restarts_it_on_the_new_plan() -> None:
    """The RayJob says which spec it was made for (rlplace.io/spec-digest, replicas left out): a new spec that
    changes only replicas is planned and resized in place; one that moves the rollout's GPUs deletes the RayJob
    (an Event, the job Provisioning with nothing of the old driver reported), and once it is gone the job is
    planned again as a new RayJob for the new spec, not resized in place (its driver resumes from the checkpoint)."""
    ledger = Ledger()
    job, _, pods = running_job(4, ledger)
    made = running_rayjob()
    made["metadata"]["annotations"] = {SPEC_DIGEST_ANNOTATION: RLJobSpec.model_validate(job.spec).restart_digest()}
    world = World(now=NOW, rayjob=made, pods=pods, snapshot=cluster_snapshot(nodes()))
    grown = dataclasses.replace(job, spec=spec(8), generation=2)
    assert [type(a).__name__ for a in reconcile(grown, world).actions] == ["Provision"]

    moved_spec = spec(4)
    moved_spec["componentPlacement"][1]["placement"] = "12-15"
    moved = dataclasses.replace(job, spec=moved_spec, generation=2)
    outcome = reconcile(moved, world)
    assert [type(a).__name__ for a in outcome.actions] == ["DeleteChildren", "Post"]
    assert posts(outcome, "SpecChanged") == [
        "the spec changed beyond replicas: the driver restarts on the new plan from its last checkpoint"
    ]
    stopping = dump(outcome.status)
    assert stopping["phase"] == "Provisioning" and not stopping.get("rayCluster") and not stopping.get("binding")
    assert condition(stopping, "BindingVerified") is None
    deleting = copy.deepcopy(made)
    deleting["metadata"]["deletionTimestamp"] = "2026-11-24T01:00:01Z"
    again = reconcile(dataclasses.replace(moved, status=stopping), dataclasses.replace(world, rayjob=deleting))
    assert [type(a).__name__ for a in again.actions] == ["DeleteChildren"]  # no second Event

    gone = World(now=NOW, pods=[], snapshot=cluster_snapshot(nodes()))
    stopped = dataclasses.replace(moved, status=stopping)
    assert [type(a).__name__ for a in reconcile(stopped, gone).actions] == ["Provision"]
    planned = provision(stopped, gone, ledger)
    assert not [a for a in planned.actions if isinstance(a, ResizeWorkers)]
    annotations = objects(planned)["RayJob"]["metadata"]["annotations"]
    assert annotations[SPEC_DIGEST_ANNOTATION] == RLJobSpec.model_validate(moved_spec).restart_digest()
    assert annotations[SPEC_DIGEST_ANNOTATION] != made["metadata"]["annotations"][SPEC_DIGEST_ANNOTATION]


def test_the_loop_is_told_which_of_its_groups_a_job_of_higher_priority_waits_for() -> None:
    """waiting_above: the job's NodeGroup -> a job rlplace's queue holds Queued with a higher priority, for a group
    that shares a node with it (here the same one); not one of equal or lower priority, not one a Workload admits
    (Kueue preempts by its own rules), not one waiting for other nodes."""
    ledger = Ledger()
    job, _, _ = running_job(4, ledger)
    job = dataclasses.replace(job, spec={**job.spec, "elastic": {"enabled": True}})

    def queued(name: str, priority: int, labels: dict | None = None) -> Job:
        waiting = new_job(name, {"nodeGroups": ["a800"], "priority": priority, "componentPlacement": []}, labels)
        return dataclasses.replace(waiting, status={"phase": "Queued"})

    others = [queued("urgent", 5), queued("later", 0), queued("kueued", 9, {"kueue.x-k8s.io/queue-name": "q"})]
    elsewhere = new_job("elsewhere", {"nodeGroups": ["4090"], "priority": 7, "componentPlacement": []})
    others.append(dataclasses.replace(elsewhere, status={"phase": "Queued"}))
    rljobs = {j.key: [rljob_entry(j)] for j in (job, *others)}
    snapshot = dataclasses.replace(cluster_snapshot(nodes()), rljobs=rljobs)
    world = Observer(None, {}, ledger, snapshot=snapshot).with_room(job, World(now=NOW))  # type: ignore[arg-type]
    assert world.waiting_above == {"a800": "job ns/urgent of priority 5"}
    only_elsewhere = {j.key: [rljob_entry(j)] for j in (job, others[-1])}
    snapshot = dataclasses.replace(cluster_snapshot(nodes()), rljobs=only_elsewhere)
    world = Observer(None, {}, ledger, snapshot=snapshot).with_room(job, World(now=NOW))  # type: ignore[arg-type]
    assert world.waiting_above == {}


def test_a_yield_is_written_to_the_spec_and_recorded_kept_as_it_is_made() -> None:
    """A job of higher priority waits for the rollout's NodeGroup: the pass writes the rollout's minimum (4) to the
    spec and records the Yield kept at once (it promises nothing; the loop never judges or undoes it)."""
    ledger = Ledger()
    job, plan, pods = running_job(12, ledger)
    job.spec["elastic"] = {"enabled": True}
    job.spec["components"][0]["minReplicas"] = 4
    job = reporting(job)
    found = {n["metadata"]["name"]: n for n in nodes()}
    world = World(now=NOW, rayjob=running_rayjob(), pods=pods, plan=plan, nodes=found)
    outcome = decide(job, dataclasses.replace(world, waiting_above={"a800": "job ns/urgent of priority 10"}))
    (change,) = [a for a in outcome.actions if isinstance(a, SetReplicas)]  # type: ignore[attr-defined]
    assert (change.component, change.replicas) == ("rollout", 4)
    (resize,) = dump(outcome.status)["resizes"]
    assert (resize["previous"], resize["replicas"], resize["reason"], resize["kept"]) == (12, 4, "Yield", True)
    assert posts(outcome, "ReplicasChanged") == [
        "Yield: component 'rollout' 12 -> 4 replicas: job ns/urgent of priority 10 waits for its GPUs"
    ]


def kueue_admitted(body: dict, hosts: list[str], finished: str | None = None) -> dict:
    """`body` (a Workload rlplace made) as Kueue leaves it once admitted on `hosts`, or finished for `finished`."""
    body = copy.deepcopy(body)
    body["metadata"]["namespace"] = "ns"
    conditions = [
        {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"},
        {"type": "Admitted", "status": "True", "reason": "Admitted"},
    ]
    if finished is not None:
        conditions.append({"type": "Finished", "status": "True", "reason": finished})
    assignment = {
        "levels": ["kubernetes.io/hostname"],
        "slices": [
            {
                "domainCount": len(hosts),
                "valuesPerLevel": [{"individual": {"roots": hosts}}],
                "podCounts": {"universal": 1},
            }
        ],
    }
    flavors = {"cpu": "a800", "memory": "a800", "nvidia.com/gpu": "a800"}
    body["status"] = {
        "conditions": conditions,
        "admission": {
            "clusterQueue": "rl-cluster-queue",
            "podSetAssignments": [
                {"name": "a800", "count": len(hosts), "flavors": flavors, "topologyAssignment": assignment}
            ],
        },
    }
    return body


def test_under_kueue_a_grow_is_a_workload_slice_and_a_shrink_lowers_the_admitted_workloads_counts() -> None:
    """A job Kueue admitted whose rollout has a range: its Workload is elastic; growing onto a third node asks Kueue
    for a Workload slice that replaces the admitted one, and the job runs on as it is until Kueue admits it; then it
    grows in place on the hosts of the slice, whose replaced Workload goes; shrinking back lowers the admitted
    slice's PodSet count (Kueue frees the quota) and the job holds its two nodes only."""
    from test_provision import queue_objects

    from rlplace_operator.api.names import ELASTIC_JOB_ANNOTATION, QUEUE_LABEL, SLICE_REPLACEMENT_ANNOTATION
    from rlplace_operator.reconcile.actions import DeleteStale, LowerWorkload

    labels = {QUEUE_LABEL: "rl"}
    snapshot = cluster_snapshot(nodes())
    first = provision(
        new_job("split", spec(4), labels=labels),
        World(now=NOW, child_known=False, snapshot=snapshot, queue_objects=queue_objects()),
        Ledger(),
    )
    made = objects(first)["Workload"]
    assert (
        made["metadata"]["annotations"][ELASTIC_JOB_ANNOTATION] == "true" and made["spec"]["podSets"][0]["count"] == 2
    )
    admitted = kueue_admitted(made, [ACTOR, ROLLOUT])
    ledger = Ledger()
    job = new_job("split", spec(4), labels=labels)
    started = provision(
        job,
        World(now=NOW, child_known=False, snapshot=snapshot, queue_objects=queue_objects(workloads=(admitted,))),
        ledger,
    )
    status = dump(started.status) | {"phase": "Running", "rayCluster": CLUSTER, "attempts": 1}
    job = dataclasses.replace(job, status=status)
    pods = ray_pods(CLUSTER, (ACTOR, ROLLOUT))

    def grown_to(replicas: int, *workloads: dict) -> tuple[object, Job]:
        changed = dataclasses.replace(job, spec=spec(replicas), generation=job.generation + 1)
        world = World(
            now=NOW,
            rayjob=running_rayjob(),
            pods=pods,
            snapshot=snapshot,
            queue_objects=queue_objects(workloads=workloads),
        )
        outcome = provision(changed, world, ledger)
        return outcome, dataclasses.replace(changed, status=dump(outcome.status))

    # 12 replicas need a third node: a slice that replaces the admitted Workload; the job runs on, saying why.
    waiting, _ = grown_to(12, admitted)
    (slice_,) = [o for a in waiting.actions if isinstance(a, Apply) for o in a.objects]  # type: ignore[attr-defined]
    annotations = slice_["metadata"]["annotations"]
    assert annotations[SLICE_REPLACEMENT_ANNOTATION] == f"ns/{admitted['metadata']['name']}"
    assert annotations[ELASTIC_JOB_ANNOTATION] == "true" and slice_["spec"]["podSets"][0]["count"] == 3
    assert (
        DeleteStale("Workload", frozenset({admitted["metadata"]["name"], slice_["metadata"]["name"]}))
        in waiting.actions
    )
    said = dump(waiting.status)
    assert said["phase"] == "Running" and said["kueue"]["workload"] == admitted["metadata"]["name"]
    placed = condition(said, "Placed")
    assert placed["reason"] == "WaitingForKueue" and f"Workload slice {slice_['metadata']['name']}" in placed["message"]
    assert not [a for a in waiting.actions if isinstance(a, ResizeWorkers)]  # type: ignore[attr-defined]
    # Undone before Kueue admitted it (the loop's grow that found no room, or the user's second thought): the
    # pending slice goes, the admitted Workload stays as it is.
    undone, _ = grown_to(4, admitted, slice_)
    assert DeleteStale("Workload", frozenset({admitted["metadata"]["name"]})) in undone.actions
    assert not [a for a in undone.actions if isinstance(a, LowerWorkload)]  # type: ignore[attr-defined]
    made = [o["kind"] for a in undone.actions if isinstance(a, Apply) for o in a.objects]  # type: ignore[attr-defined]
    assert "Workload" not in made

    # Kueue admits the slice (the hosts of the replaced one and a third) and finishes the replaced one.
    replaced = kueue_admitted(admitted, [ACTOR, ROLLOUT], finished="WorkloadSliceReplaced")
    grown_slice = kueue_admitted(slice_, [ACTOR, ROLLOUT, ADDED])
    grown, job = grown_to(12, replaced, grown_slice)
    assert DeleteStale("Workload", frozenset({grown_slice["metadata"]["name"]})) in grown.actions
    (resize,) = [a for a in grown.actions if isinstance(a, ResizeWorkers)]  # type: ignore[attr-defined]
    assert (
        resize.patch is not None
        and resize.patch["metadata"]["annotations"][NODES_ANNOTATION] == f"{ACTOR},{ROLLOUT},{ADDED}"
    )
    said = dump(grown.status)
    assert said["phase"] == "Running" and said["kueue"]["workload"] == grown_slice["metadata"]["name"]
    assert rollout_of(said)["desired"] == 12 and ledger.reserved[job.key] == frozenset({ACTOR, ROLLOUT, ADDED})
    assert posts(grown, "Resized")

    # Back to 4: the admitted slice's count goes down to 2 (a JSON patch Kueue's webhook lets through), nothing new;
    # the slice was told PodsReady once the grown job ran, and the status says so (nothing more to tell it).
    grown_slice["status"]["conditions"].append({"type": "PodsReady", "status": "True", "reason": "Started"})
    shrunk, _ = grown_to(4, replaced, grown_slice)
    assert dump(shrunk.status)["kueue"]["podsReady"] is True
    (lower,) = [a for a in shrunk.actions if isinstance(a, LowerWorkload)]  # type: ignore[attr-defined]
    assert lower.workload == grown_slice["metadata"]["name"]
    assert {"op": "replace", "path": "/spec/podSets/0/count", "value": 2} in lower.patch
    assert not [a for a in shrunk.actions if isinstance(a, Apply) and a.objects[0]["kind"] == "Workload"]  # type: ignore[attr-defined]
    assert dump(shrunk.status)["phase"] == "Running" and ledger.reserved[job.key] == frozenset({ACTOR, ROLLOUT})

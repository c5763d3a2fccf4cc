"""Replace ranks of a lost node move to a free node of their NodeGroup while the job runs (reconcile/relocate.py),
over the recorded local cluster with a third a800 node: the decision to move (the node gone for good), the node
reserved, the ConfigMap's plan and node ranks, the RayCluster's worker group and held nodes, the status and the
Event; and a group with no free node, where the job runs on and says it waits for one."""

from __future__ import annotations

import copy
import dataclasses

from placement_core.contract import NODE_RANKS_KEY, parse_node_ranks
from placement_core.plan import OnLoss, Plan
from rlplace_operator.admission.kueue import Grant, WorkloadState
from rlplace_operator.admission.ledger import Ledger
from rlplace_operator.api.base import dump
from rlplace_operator.api.names import NODES_ANNOTATION
from rlplace_operator.builders.raycluster import moved_worker
from rlplace_operator.reconcile.actions import Apply, DeleteChildren, MoveWorker, Post, Relocate
from rlplace_operator.reconcile.decide import reconcile
from rlplace_operator.reconcile.provision import provision
from rlplace_operator.reconcile.relocate import node_gone, relocate
from rlplace_operator.reconcile.world import Job, World

from recorded import NOW, cluster_snapshot, local_nodes, new_job, pod, ray_pods, rayjob

SPEC = {
    "nodeGroups": ["a800"],
    "componentPlacement": [{"components": "actor", "placement": "0-7"}, {"components": "rollout", "placement": "8-15"}],
    "components": [{"name": "rollout", "onLoss": "Replace"}],
    "entrypoint": "python -m placement_core.launcher.demo --steps 60",
}
LOST = "a800-1"


def nodes(extra: int = 1, lost_ready: str = "True") -> list[dict]:
    """The local cluster's kwok nodes, `extra` more a800 nodes, and a800-1's Ready condition as given."""
    found = local_nodes()
    a800 = next(n for n in found if n["metadata"]["name"] == "a800-1")
    for i in range(2, 2 + extra):
        more = copy.deepcopy(a800)
        more["metadata"]["name"] = more["metadata"]["labels"]["kubernetes.io/hostname"] = f"a800-{i}"
        found.append(more)
    for node in found:
        if node["metadata"]["name"] == LOST:
            node["status"]["conditions"] = [
                {"type": "Ready", "status": lost_ready, "lastTransitionTime": "2026-11-24T00:59:30Z"}
            ]
    return found


def provisioned(extra: int = 1) -> tuple[Job, dict, dict, Plan, Ledger]:
    """The job provisioned on a800-0 (actor) and a800-1 (rollout), as it runs: its job, status, RayJob, plan."""
    ledger = Ledger()
    snapshot = cluster_snapshot(nodes(extra))
    outcome = provision(new_job("split", SPEC), World(now=NOW, child_known=False, snapshot=snapshot), ledger)
    objects = {o["kind"]: o for a in outcome.actions if isinstance(a, Apply) for o in a.objects}
    plan = Plan.from_json(objects["ConfigMap"]["data"]["plan.json"])
    status = dump(outcome.status) | {
        "phase": "Running",
        "rayCluster": "split-abcde",
        "driverStartTime": "2026-11-24T00:59:45Z",
        "attempts": 1,
    }
    status["conditions"].append(
        {
            "type": "BindingVerified",
            "status": "True",
            "reason": "Verified",
            "lastTransitionTime": "2026-11-24T00:59:50Z",
        }
    )
    job = dataclasses.replace(new_job("split", SPEC), status=status)
    return job, status, objects["RayJob"], plan, ledger


def lost_world(plan: Plan, lost_ready: str, extra: int = 1) -> World:
    head, actor, rollout = ray_pods("split-abcde", ("a800-0", LOST))
    rollout["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}
    driver = rayjob("Running", "RUNNING")
    driver["metadata"]["name"] = "split"
    driver["status"]["rayClusterName"] = "split-abcde"
    lost = next(n for n in nodes(extra, lost_ready) if n["metadata"]["name"] == LOST)
    return World(now=NOW, rayjob=driver, pods=[head, actor, rollout], plan=plan, nodes={LOST: lost})


def test_a_node_notready_past_its_grace_moves_its_replace_ranks_to_a_free_node_of_the_group() -> None:
    job, _, child, plan, ledger = provisioned()
    assert plan.component("rollout").on_loss is OnLoss.REPLACE
    assert {p.node_name for p in plan.component("rollout").processes} == {LOST}
    world = lost_world(plan, "False")
    # KubeRay already made the pod again, from the old template: it waits unbound (the lost node's affinity).
    remade = pod("split-abcde-gpu-worker-again", node=None)
    remade["metadata"]["labels"]["ray.io/cluster"] = "split-abcde"
    world = dataclasses.replace(world, pods=[*world.pods, remade])
    decided = reconcile(job, world)
    assert dump(decided.status)["phase"] == "Running"
    (move,) = [a for a in decided.actions if isinstance(a, Relocate)]
    assert move.node == LOST and move.why.startswith("node a800-1 NotReady for 30 s")

    snapshot = cluster_snapshot(nodes(1, "False"))
    moved = relocate(job, dataclasses.replace(world, snapshot=snapshot), ledger, decided)
    (worker,) = [a for a in moved.actions if isinstance(a, MoveWorker)]
    assert (worker.node_from, worker.node_to, worker.host_to, worker.pods) == (
        LOST, "a800-2", "a800-2", ("split-abcde-gpu-worker-1", "split-abcde-gpu-worker-again")
    )  # fmt: skip
    assert ledger.reserved[job.key] == frozenset({"a800-0", "a800-2"})
    (configmap,) = [o for a in moved.actions if isinstance(a, Apply) for o in a.objects]
    new_plan = Plan.from_json(configmap["data"]["plan.json"])
    assert {p.node_name for p in new_plan.component("rollout").processes} == {"a800-2"}
    assert [p.node_rank for p in new_plan.component("rollout").processes] == [
        p.node_rank for p in plan.component("rollout").processes
    ]
    assert parse_node_ranks(configmap["data"][NODE_RANKS_KEY]) == {"a800-0": 0, "a800-2": 1}
    said = dump(moved.status)
    assert said["phase"] == "Running"
    assert next(c for c in said["placement"]["components"] if c["name"] == "rollout")["nodes"] == ["a800-2"]
    (entry,) = next(c for c in said["components"] if c["name"] == "rollout")["lost"]
    assert entry["node"] == "a800-2" and "moved to node a800-2" in entry["why"]
    events = [a.message for a in moved.actions if isinstance(a, Post) and a.reason == "RanksMoved"]
    assert events == ["'rollout' ranks 0, 1, 2, 3, 4, 5, 6, 7 move from node a800-1 (node a800-1 NotReady for 30 s) "
                      "to node a800-2"]  # fmt: skip

    # KubeRay makes the group's next pod on the new node; the held nodes follow.
    cluster = {"metadata": child["metadata"], "spec": child["spec"]["rayClusterSpec"]}
    patch = moved_worker(cluster, LOST, "a800-2", LOST, "a800-2")
    hosts = [
        v
        for g in patch["spec"]["workerGroupSpecs"]
        for t in g["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"
        ]
        for r in t.get("matchExpressions", [])
        for v in r["values"]
    ]
    assert sorted(hosts) == ["a800-0", "a800-2"]
    assert patch["metadata"]["annotations"][NODES_ANNOTATION] == "a800-0,a800-2"


def test_with_no_free_node_the_job_runs_on_with_fewer_replicas_and_says_it_waits_for_one() -> None:
    job, _, _, plan, ledger = provisioned(extra=0)
    world = lost_world(plan, "False", extra=0)
    decided = reconcile(job, world)
    moved = relocate(job, dataclasses.replace(world, snapshot=cluster_snapshot(nodes(0, "False"))), ledger, decided)
    assert not [a for a in moved.actions if isinstance(a, (MoveWorker, Apply))]
    said = dump(moved.status)
    assert said["phase"] == "Running"
    (entry,) = next(c for c in said["components"] if c["name"] == "rollout")["lost"]
    assert "no free node of NodeGroup a800 to move them to yet" in entry["why"]


def test_a_node_not_ready_for_a_moment_keeps_its_ranks() -> None:
    now = NOW.timestamp()
    notready = {
        "status": {"conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": "2026-11-24T00:59:50Z"}]}
    }
    assert node_gone(notready, "n", True, now) is None  # 10 s: may come back
    assert node_gone(notready, "n", True, now + 15) == "node n NotReady for 25 s"
    assert node_gone(None, "n", False, now) == "node n no longer exists"
    cordoned = {"spec": {"unschedulable": True}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    assert node_gone(cordoned, "n", True, now) is None
    assert node_gone(cordoned, "n", False, now) == "node n is cordoned and the job's pod on it is gone"
    job, _, _, plan, _ = provisioned()
    world = lost_world(plan, "True")  # the pod is not Ready but its node is: KubeRay's new pod goes there again
    assert not [a for a in reconcile(job, world).actions if isinstance(a, Relocate)]


def under_kueue(grants: dict[str, int]) -> tuple[Job, World, Ledger]:
    """The provisioned job named in a LocalQueue, its rollout node lost, and its Workload granting `grants`
    (host -> pods) to the a800 group."""
    job, _, _, plan, ledger = provisioned()
    job = dataclasses.replace(job, labels={"kueue.x-k8s.io/queue-name": "rl"})
    workload = WorkloadState(
        "split-w", True, True, True, False, grants={"a800": Grant({"nvidia.com/gpu": "a800"}, grants)}
    )
    return job, dataclasses.replace(lost_world(plan, "False"), workload=workload), ledger


def test_under_kueue_the_ranks_move_to_the_node_kueue_granted_in_the_workload_not_one_rlplace_picks() -> None:
    """Kueue's topology-aware node replacement put a800-2 in the Workload in place of the lost a800-1: the rollout
    ranks follow it while the job runs (no restart), and rlplace holds what Kueue granted."""
    job, world, ledger = under_kueue({"a800-0": 1, "a800-2": 1})
    decided = reconcile(job, world)
    assert dump(decided.status)["phase"] == "Running"
    (move,) = [a for a in decided.actions if isinstance(a, Relocate)]
    assert (move.node, move.to) == (LOST, "a800-2") and "Kueue replaced node a800-1 in Workload split-w" in move.why
    moved = relocate(job, dataclasses.replace(world, snapshot=cluster_snapshot(nodes(1, "False"))), ledger, decided)
    (worker,) = [a for a in moved.actions if isinstance(a, MoveWorker)]
    assert (worker.node_from, worker.node_to) == (LOST, "a800-2")
    assert ledger.reserved[job.key] == frozenset({"a800-0", "a800-2"})

    # Before Kueue granted a replacement, the job runs on and says it waits for Kueue (rlplace picks no node).
    _, waiting, _ = under_kueue({"a800-0": 1, LOST: 1})
    decided = reconcile(job, waiting)
    assert not [a for a in decided.actions if isinstance(a, Relocate)]
    (entry,) = next(c for c in dump(decided.status)["components"] if c["name"] == "rollout")["lost"]
    assert "waiting for Kueue to replace it" in entry["why"]

    # A node still Ready but tainted NoExecute (its pod evicted): not gone by rlplace's own measure, but Kueue
    # marked it unhealthy in the Workload and looks for another (seen live with no free node: the entry named
    # only the unscheduled pod). The entry and RayClusterReady say the job waits for Kueue.
    _, tainted, _ = under_kueue({"a800-0": 1, LOST: 1})
    ready = lost_world(world.plan, "True")  # type: ignore[arg-type]
    unhealthy = dataclasses.replace(tainted.workload, unhealthy_nodes=(LOST,))  # type: ignore[arg-type]
    decided = reconcile(job, dataclasses.replace(ready, workload=unhealthy))
    status = dump(decided.status)
    (entry,) = next(c for c in status["components"] if c["name"] == "rollout")["lost"]
    assert entry["why"].endswith("; waiting for Kueue to replace it"), entry
    assert "waiting for Kueue" in next(c for c in status["conditions"] if c["type"] == "RayClusterReady")["message"]
    plain = dump(reconcile(job, dataclasses.replace(ready, workload=tainted.workload)).status)
    (entry,) = next(c for c in plain["components"] if c["name"] == "rollout")["lost"]
    assert "Kueue" not in entry["why"], entry  # not marked unhealthy: the pod's own words only


def test_a_pass_that_reads_the_moved_plan_before_the_moves_status_restarts_nothing() -> None:
    """Seen live under Kueue: a pass moved the ranks (the ConfigMap applied first, then the status) and another
    pass read the new plan beside the status from before the move. On that status Kueue's swap looked like a node
    whose ranks are not all Replace, and the job was restarted as attempt 2 while it ran. Now that pass moves them
    again, which changes nothing twice and completes a move whose status write never came (the operator stopped
    between the two)."""
    job, world, ledger = under_kueue({"a800-0": 1, "a800-2": 1})
    moved = relocate(
        job, dataclasses.replace(world, snapshot=cluster_snapshot(nodes(1, "False"))), ledger, reconcile(job, world)
    )
    (configmap,) = [o for a in moved.actions if isinstance(a, Apply) for o in a.objects]
    moved_plan = Plan.from_json(configmap["data"]["plan.json"])
    # The status from before the move (still naming a800-1), the plan from after it.
    stale_world = dataclasses.replace(world, plan=moved_plan)
    stale = reconcile(job, stale_world)
    assert dump(stale.status)["phase"] == "Running" and dump(stale.status).get("attempts") == 1
    (move,) = [a for a in stale.actions if isinstance(a, Relocate)]
    assert (move.node, move.to) == (LOST, "a800-2") and not [a for a in stale.actions if isinstance(a, DeleteChildren)]
    again = relocate(job, dataclasses.replace(stale_world, snapshot=cluster_snapshot(nodes(1, "False"))), ledger, stale)
    (configmap,) = [o for a in again.actions if isinstance(a, Apply) for o in a.objects]
    assert Plan.from_json(configmap["data"]["plan.json"]) == moved_plan  # the plan is not moved twice
    said = dump(again.status)
    assert next(c for c in said["placement"]["components"] if c["name"] == "rollout")["nodes"] == ["a800-2"]

"""A running job whose lost pod held only Replace ranks runs on while they are replaced (reconcile/replicas.py),
over recorded snapshots: the status keeps Running and says which ranks are lost and why, the Events of the loss
and of the replacement, the count of replaced ranks, and BindingVerified waits for the driver's report of them.
A loss that takes a RestartJob rank is no such case."""

from __future__ import annotations

from placement_core.components import component_placement
from placement_core.observe.verify import BindingReport, ProcessCheck
from placement_core.plan import OnLoss, Plan, build_plan
from rlplace_operator.api.base import dump
from rlplace_operator.reconcile.actions import Post
from rlplace_operator.reconcile.decide import needs_look, reconcile
from rlplace_operator.reconcile.restarts import attempt_stopped
from rlplace_operator.reconcile.world import Job, World

from recorded import NOW, condition, ray_pods, rayjob, running_driver_status

NODES = ("node-0", "node-1", "node-2")


def plan() -> Plan:
    """Actor on node-0 (4 GPUs), rollout on node-1 and node-2 (ranks 0-3, 4-7), rollout Replace."""
    config = {"cluster": {"num_nodes": 3, "accelerators_per_node": 4,
                          "component_placement": {"actor": "0-3", "rollout": "4-11"}}}  # fmt: skip
    return build_plan(component_placement(config)).with_on_loss({"rollout": OnLoss.REPLACE})


def running(**fields: object) -> dict:
    placement = {"mode": "disaggregated", "components": [
        {"name": "actor", "processes": 4, "gpus": 4, "nodes": ["node-0"]},
        {"name": "rollout", "processes": 8, "gpus": 8, "nodes": ["node-1", "node-2"]},
    ]}  # fmt: skip
    return running_driver_status(placement=placement, nodes=3, **fields)


def replace_job(status: dict) -> Job:
    spec = {"nodeGroups": ["gpu"], "entrypoint": "python -m placement_core.launcher.demo --steps 60",
            "components": [{"name": "rollout", "onLoss": "Replace"}]}  # fmt: skip
    return Job("ns", "train", "uid-1", 1, spec, status, "100")


def world(pods: list[dict], report: BindingReport | None = None) -> World:
    return World(now=NOW, rayjob=rayjob("Running", "RUNNING"), pods=pods, plan=plan(), report=report)


def without(pods: list[dict], node: str) -> list[dict]:
    return [
        p for p in pods if p["spec"].get("nodeName") != node or p["metadata"]["labels"]["ray.io/node-type"] == "head"
    ]


def posts(outcome: object, reason: str) -> list[str]:
    return [a.message for a in outcome.actions if isinstance(a, Post) and a.reason == reason]  # type: ignore[attr-defined]


def test_a_lost_replace_pod_keeps_the_job_running_saying_which_ranks_and_why_then_counts_them_replaced() -> None:
    pods = ray_pods("train-abcde", NODES)
    lost = reconcile(replace_job(running()), world(without(pods, "node-2")))
    status = dump(lost.status)
    assert status["phase"] == "Running", status["message"]
    ready = condition(status, "RayClusterReady")
    assert (ready["status"], ready["reason"]) == ("False", "Replacing"), ready
    assert "component 'rollout' runs 4/8 ranks while ranks 4-7 on node node-2 are replaced" in ready["message"]
    assert "no worker pod on node node-2 yet" in ready["message"]
    rollout = next(c for c in status["components"] if c["name"] == "rollout")
    assert (rollout["desired"], rollout["live"], rollout["lost"][0]["ranks"]) == (8, 4, [4, 5, 6, 7])
    assert posts(lost, "RanksLost") == [
        "component 'rollout' ranks 4-7 on node node-2 lost (no worker pod on node node-2 yet): replacing while the "
        "job runs"
    ]
    assert needs_look({"spec": {}, "status": status})  # looked at until the ranks run again

    again = reconcile(replace_job(status), world(without(pods, "node-2")))  # still lost: no second Event
    assert posts(again, "RanksLost") == [] and dump(again.status)["phase"] == "Running"

    back = reconcile(replace_job(dump(again.status)), world(pods))
    status = dump(back.status)
    rollout = next(c for c in status["components"] if c["name"] == "rollout")
    assert (rollout["live"], rollout["replaced"], rollout["unverified"]) == (8, 4, [4, 5, 6, 7])
    assert "lost" not in rollout
    assert posts(back, "Replaced") == ["component 'rollout' ranks 4-7 run again on node node-2, 0 s after the loss"]
    verified = condition(status, "BindingVerified")
    assert (verified["status"], verified["reason"]) == ("Unknown", "Reverifying"), verified
    assert condition(status, "RayClusterReady")["status"] == "True"

    report = BindingReport.of((ProcessCheck(c.name, p.rank, p.node_name, ()), p) for c, p in plan().processes())
    checked = reconcile(replace_job(status), world(pods, report))
    status = dump(checked.status)
    assert condition(status, "BindingVerified")["status"] == "True"
    assert "unverified" not in next(c for c in status["components"] if c["name"] == "rollout")
    assert not needs_look({"spec": {}, "status": status})


def test_a_lost_pod_with_a_restartjob_rank_is_not_run_on() -> None:
    pods = ray_pods("train-abcde", NODES)
    outcome = reconcile(replace_job(running()), world(without(pods, "node-0")))
    status = dump(outcome.status)
    assert status["phase"] == "Provisioning"
    assert condition(status, "RayClusterReady")["reason"] == "PodsNotReady"
    assert posts(outcome, "RanksLost") == [
        "component 'actor' ranks 0-3 on node node-0 lost (no worker pod on node node-0 yet)"
    ]


def test_a_job_not_yet_running_whose_replace_pod_waits_is_provisioning() -> None:
    pods = ray_pods("train-abcde", NODES)
    status = running()
    status["phase"] = "Provisioning"
    outcome = reconcile(replace_job(status), world(without(pods, "node-1")))
    assert dump(outcome.status)["phase"] == "Provisioning"


def test_a_pod_that_is_ready_again_on_its_node_replaced_nothing_and_waits_for_no_report() -> None:
    """Its node was NotReady for a while (a kubelet stopped): the pod, and the processes in it, were there all
    along, so no rank was started again and the driver prints no new binding report."""
    pods = ray_pods("train-abcde", NODES)
    for i, p in enumerate(pods):
        p["metadata"]["uid"] = f"pod-{i}"
    not_ready = [dict(p) for p in pods]
    not_ready[-1] = {**pods[-1], "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}]}}
    lost = reconcile(replace_job(running()), world(not_ready))
    status = dump(lost.status)
    assert status["phase"] == "Running" and rollout_of(status)["lost"][0]["pod"] == "pod-3"
    back = reconcile(replace_job(status), world(pods))
    status = dump(back.status)
    assert posts(back, "RanksBack") == [
        "component 'rollout' ranks 4-7 on node node-2: their pod is Ready again, 0 s after the loss"
    ]
    assert posts(back, "Replaced") == []
    assert "replaced" not in rollout_of(status) and "unverified" not in rollout_of(status)
    assert condition(status, "BindingVerified")["status"] == "True"


def test_a_deleted_pod_whose_new_pod_is_seen_first_is_replaced_not_back() -> None:
    """Seen live: the force-deleted pod was gone, and KubeRay's new pod already Pending on the node, when the
    operator first saw the loss. The new pod holds none of the lost ranks (made after they were verified): once it
    is Ready they were started again, counted replaced, and the driver's report of them is awaited."""
    pods = ray_pods("train-abcde", NODES)
    for i, p in enumerate(pods):
        p["metadata"]["uid"] = f"pod-{i}"
    new = {
        **pods[-1],
        "metadata": {**pods[-1]["metadata"], "uid": "pod-new", "creationTimestamp": "2026-11-24T00:59:58Z"},
    }
    pending = [*pods[:-1], {**new, "status": {"phase": "Pending"}}]
    lost = reconcile(replace_job(running()), world(pending))
    status = dump(lost.status)
    assert status["phase"] == "Running" and "pod" not in rollout_of(status)["lost"][0], rollout_of(status)
    back = reconcile(replace_job(status), world([*pods[:-1], new]))
    status = dump(back.status)
    assert posts(back, "RanksBack") == [] and posts(back, "Replaced")
    assert (rollout_of(status)["replaced"], rollout_of(status)["unverified"]) == (4, [4, 5, 6, 7])


def rollout_of(status: dict) -> dict:
    return next(c for c in status["components"] if c["name"] == "rollout")


def test_a_new_attempt_after_a_loss_counts_nothing_replaced_and_awaits_no_report_of_it() -> None:
    """Seen live: the trainer's pod lost (its rollout ranks with it) restarts the job; the new attempt's pods are
    all new, so the losses of the last attempt are not replacements, and its own report verifies every rank."""
    pods = ray_pods("train-abcde", NODES)
    lost = dump(reconcile(replace_job(running()), world(without(pods, "node-0"))).status)
    assert [c["name"] for c in lost["components"] if c.get("lost")] == ["actor"]
    attempt_stopped(replace_job(lost), lost, "Restarting", "restarting: a RestartJob rank was lost", attempts=2)
    assert not any(c.get("lost") or c.get("unverified") for c in lost["components"]), lost["components"]
    assert [c["desired"] for c in lost["components"]] == [4, 8]

    new = running(components=lost["components"])  # the new attempt runs, its report verified every rank
    ran = reconcile(replace_job(new), world(pods))
    status = dump(ran.status)
    assert posts(ran, "Replaced") == [] and posts(ran, "RanksBack") == []
    assert condition(status, "BindingVerified")["reason"] == "Verified"
    assert not any(c.get("unverified") or c.get("lost") for c in status["components"])


def test_a_replacement_pod_that_cannot_start_is_named_and_the_job_runs_on_without_a_restart() -> None:
    """The new pod KubeRay made for the lost node cannot start (its image is missing there): the lost ranks' entry
    names the pod and the kubelet's reason at the first look, the job runs on with the live replicas and restarts
    nothing; once the pod runs the ranks count as replaced, nothing half-done left."""
    pods = ray_pods("train-abcde", NODES)
    lost = dump(reconcile(replace_job(running()), world(without(pods, "node-2"))).status)
    stuck = {
        **pods[-1],
        "metadata": {
            **pods[-1]["metadata"],
            "name": "train-abcde-gpu-worker-new",
            "creationTimestamp": "2026-11-24T01:00:00Z",
        },
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "False"}],
            "containerStatuses": [
                {
                    "name": "ray-worker",
                    "ready": False,
                    "state": {"waiting": {"reason": "ErrImageNeverPull", "message": 'image "ray:dev" is not present'}},
                }
            ],
        },
    }
    named = reconcile(replace_job(lost), world([*without(pods, "node-2"), stuck]))
    status = dump(named.status)
    assert status["phase"] == "Running" and not status.get("restarts"), status
    (entry,) = next(c for c in status["components"] if c["name"] == "rollout")["lost"]
    assert entry["ranks"] == [4, 5, 6, 7] and "ErrImageNeverPull" in entry["why"], entry
    assert 'image "ray:dev" is not present' in entry["why"], entry  # the kubelet's words: what to fix
    assert "train-abcde-gpu-worker-new" in entry["why"], entry
    ready = condition(status, "RayClusterReady")
    assert ready["reason"] == "Replacing" and "ErrImageNeverPull" in ready["message"], ready

    started = {**stuck, "status": pods[-1]["status"]}  # the same new pod, its image there now: Running, Ready
    back = dump(reconcile(replace_job(status), world([*without(pods, "node-2"), started])).status)
    rollout = next(c for c in back["components"] if c["name"] == "rollout")
    assert (rollout["live"], rollout["replaced"], "lost" in rollout) == (8, 4, False), rollout

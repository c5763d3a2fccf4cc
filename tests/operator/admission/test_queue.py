"""The operator side of admission on plain index contents: reservations, restarts, concurrent admissions."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from rlplace_operator.admission.ledger import Holding, Ledger, PlannedDemand
from rlplace_operator.admission.queue import AdmissionWorld as World
from rlplace_operator.admission.queue import PodUse, admit, pod_unit_requests, queue_pass
from rlplace_operator.admission.rules import Admitted, GroupDemand, QueuedJob, Waiting
from rlplace_operator.api.rljob import RLJobSpec
from rlplace_operator.controllers.indexes import pod_units_index

NODES = [f"n{i}" for i in range(8)]


def one_node_job(name: str, created: str = "2026-01-01T00:00:00Z") -> QueuedJob:
    return QueuedJob(("ns", name), 0, created, (GroupDemand("gpu", 1, frozenset({0})),))


def planned(job: QueuedJob) -> PlannedDemand:
    assert job.demand is not None
    return PlannedDemand(job.demand, RLJobSpec(node_groups=["gpu"]), None)


def world(
    jobs: dict[tuple[str, str], str | None],
    rayclusters: dict[tuple[str, str], frozenset[str]] | None = None,
    pods: dict[str, list[PodUse]] | None = None,
) -> World:
    """kopf indexes map a key to a store of values; plain dicts of one-item lists behave the same."""
    rljobs = {
        key: [{"status": {"phase": phase} if phase else {}, "priority": 0, "created": "2026-01-01T00:00:00Z"}]
        for key, phase in jobs.items()
    }
    clusters = {key: [Holding(nodes)] for key, nodes in (rayclusters or {}).items()}
    return World(rljobs, clusters, pods or {}, {"gpu": NODES}, {"nvidia.com/gpu"})


def test_pod_requests_count_extended_resources_from_limits_and_requests() -> None:
    spec = {
        "containers": [
            {"resources": {"limits": {"nvidia.com/gpu": "2", "cpu": "4"}}},
            {"resources": {"requests": {"rlplace.io/franka": "1"}, "limits": {"memory": "1Gi"}}},
            {"resources": {"limits": {"nvidia.com/gpu": "0"}}},
        ]
    }
    assert pod_unit_requests(spec) == {"nvidia.com/gpu": 2, "rlplace.io/franka": 1}


def test_a_pod_belongs_to_the_job_its_label_names_whoever_made_its_cluster() -> None:
    """A RayJob's cluster is named `<job>-<suffix>` by KubeRay: the job label, not the cluster name, says whose."""
    gpu = {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "8"}}}], "nodeName": "n1"}
    labels = {"ray.io/cluster": "train-x7k2p", "rlplace.io/job": "train"}
    (use,) = pod_units_index(namespace="ns", name="w", spec=gpu, status={}, labels=labels).values()
    assert use.job == ("ns", "train")
    (use,) = pod_units_index(namespace="ns", name="w", spec=gpu, status={}, labels={"ray.io/cluster": "c"}).values()
    assert use.job == ("ns", "c")
    assert pod_units_index(namespace="ns", name="w", spec={**gpu, "nodeName": None}, status={}, labels={}) is None


def test_after_a_restart_running_jobs_keep_their_nodes_from_their_rayclusters() -> None:
    # A fresh ledger (the operator just started): only the RayCluster index says what is held.
    ledger = Ledger()
    running = {("ns", f"r{i}"): frozenset({f"n{i}"}) for i in range(7)}
    state = world({**dict.fromkeys(running, "Running"), ("ns", "new"): None}, running)
    decision = admit(ledger, state, one_node_job("new"))
    assert decision == Admitted(("ns", "new"), (("gpu", ("n7",)),), frozenset({"n7"}))
    # The running job keeps its own node on resume.
    assert admit(ledger, state, one_node_job("r3")).nodes == {"n3"}


def test_a_foreign_pod_makes_its_node_busy_but_a_jobs_own_pods_do_not() -> None:
    pods = {
        "n0": [PodUse("other/train", None, {"nvidia.com/gpu": 8})],
        "n1": [PodUse("ns/mine-worker", ("ns", "mine"), {"nvidia.com/gpu": 8})],
    }
    ledger = Ledger()
    state = world({("ns", "mine"): "Queued"}, pods=pods)
    assert admit(ledger, state, one_node_job("mine")).nodes == {"n1"}


def test_the_queue_pass_leaves_a_node_with_a_foreign_pod_alone() -> None:
    # A pod of no RLJob once counted for no job in the pass (its job, None, was the job left out): the pass
    # reserved the busy node and the job's worker would have waited there for GPUs that pod holds.
    pods = {"n0": [PodUse("other/train", None, {"nvidia.com/gpu": 8})]}
    ledger = Ledger()
    state = world({("ns", "mine"): "Queued"}, pods=pods)
    ledger.remember_demand(("ns", "mine"), (), planned(one_node_job("mine")))
    decision = queue_pass(ledger, state)[("ns", "mine")]
    assert isinstance(decision, Admitted) and decision.nodes == {"n1"}


def test_jobs_admitted_at_the_same_moment_never_share_a_node() -> None:
    ledger = Ledger()
    jobs = {("ns", f"j{i}"): None for i in range(12)}
    state = world(jobs)
    for key in jobs:  # as each handler does before it asks for admission
        ledger.remember_demand(key, (), planned(one_node_job(key[1])))
    with ThreadPoolExecutor(12) as pool:
        decisions = list(pool.map(lambda i: admit(ledger, state, one_node_job(f"j{i}")), range(12)))
    admitted = [d for d in decisions if isinstance(d, Admitted)]
    assert len(admitted) == 8
    assert len(set().union(*(d.nodes for d in admitted))) == 8
    assert sorted(d.position for d in decisions if isinstance(d, Waiting)) == [1, 2, 3, 4]


def test_new_jobs_not_planned_yet_keep_their_place() -> None:
    ledger = Ledger()
    state = world({("ns", "a-first"): None, ("ns", "b-second"): None})
    assert admit(ledger, state, one_node_job("b-second")) == Waiting(("ns", "b-second"), 2, ())
    ledger.remember_demand(("ns", "a-first"), (), planned(one_node_job("a-first")))
    assert admit(ledger, state, one_node_job("b-second")).nodes == {"n1"}


def test_a_deleted_jobs_reservation_is_given_back() -> None:
    ledger = Ledger()
    full = {("ns", f"j{i}"): None for i in range(8)}
    for i in range(8):
        admit(ledger, world(full), one_node_job(f"j{i}"))
    assert isinstance(admit(ledger, world({**full, ("ns", "late"): None}), one_node_job("late")), Waiting)
    del full[("ns", "j5")]
    assert admit(ledger, world({**full, ("ns", "late"): None}), one_node_job("late")).nodes == {"n5"}


def test_a_taint_gone_since_the_job_was_planned_does_not_keep_it_waiting() -> None:
    """A burst on fresh nodes: each node carries node.kubernetes.io/not-ready until it is Ready, so jobs planned
    then found every node tainted. The queue pass reads the taints as they are now (measured: 21 of 100 jobs
    waited forever on a taint gone for minutes when the pass reused the ones found at planning)."""
    from rlplace_operator.admission.queue import queue_pass
    from rlplace_operator.cluster.taints import Taint

    job = one_node_job("fresh")
    assert job.demand is not None
    not_ready = {f"n{i}": "node has taint node.kubernetes.io/not-ready:NoSchedule, not tolerated" for i in range(8)}
    ledger = Ledger()
    ledger.demands[job.key] = ((), PlannedDemand(job.demand, RLJobSpec(node_groups=["gpu"]), None, not_ready))
    state = world({job.key: "Queued"})
    assert isinstance(queue_pass(ledger, state)[job.key], Admitted)
    # A taint that is there now still keeps the job off that node (and off every node that has it).
    ledger.reserved.clear()
    taint = (Taint("gpu-maintenance", "", "NoSchedule"),)
    tainted = World(
        state.rljobs,
        {},
        {},
        {"gpu": NODES},
        {"nvidia.com/gpu"},
        dict.fromkeys(NODES, taint),
        dict.fromkeys(NODES, frozenset({"gpu"})),
    )
    waiting = queue_pass(ledger, tainted)[job.key]
    assert isinstance(waiting, Waiting) and "gpu-maintenance:NoSchedule, not tolerated" in waiting.reason

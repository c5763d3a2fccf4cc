"""Admission rules on plain data: free nodes, all or nothing, queue order, no starvation (no cluster)."""

from __future__ import annotations

from rlplace_operator.admission.rules import (
    Admitted,
    GroupDemand,
    Pool,
    QueuedJob,
    Waiting,
    busy_nodes,
    decide,
    demand_from_workers,
)

# The local e2e cluster: two a800 nodes, one 4090 node, one robot node, two CPU nodes.
LOCAL = {"a800": ["a800-0", "a800-1"], "4090": ["4090-0"], "robot": ["robot-0"], "cpu": ["cpu-0", "cpu-1"]}


def job(name: str, *demand: GroupDemand, priority: int = 0, created: str = "2026-01-01T00:00:00Z") -> QueuedJob:
    return QueuedJob(("ns", name), priority, created, tuple(demand))


def nodes(group: str, count: int, *used: int) -> GroupDemand:
    return GroupDemand(group, count, frozenset(used))


COLLOCATED = job("collocated", nodes("a800", 1, 0), created="2026-01-01T00:00:01Z")
DISAGGREGATED = job("disaggregated", nodes("4090", 1, 0), created="2026-01-01T00:00:02Z")
# Ranks 8-15 of a800 (its second node), the 4090 node, the robot, both CPU nodes.
HETEROGENEOUS = job(
    "heterogeneous",
    nodes("a800", 2, 1),
    nodes("4090", 1, 0),
    nodes("robot", 1, 0),
    nodes("cpu", 2, 0, 1),
    created="2026-01-01T00:00:03Z",
)


def test_the_three_examples_two_start_and_the_third_waits_for_the_4090_node() -> None:
    decisions = decide([HETEROGENEOUS, DISAGGREGATED, COLLOCATED], Pool(LOCAL))
    assert decisions[COLLOCATED.key] == Admitted(COLLOCATED.key, (("a800", ("a800-0",)),), frozenset({"a800-0"}))
    assert decisions[DISAGGREGATED.key].nodes == {"4090-0"}
    waiting = decisions[HETEROGENEOUS.key]
    assert waiting == Waiting(HETEROGENEOUS.key, 1, (("4090", 1),))
    assert waiting.reason == "1 free node of 4090"


def test_an_unused_position_may_be_a_busy_node_so_jobs_share_a_group() -> None:
    busy = {"a800-0": "job ns/collocated", "4090-0": "job ns/disaggregated"}
    decisions = decide([HETEROGENEOUS], Pool(LOCAL, busy))
    assert decisions[HETEROGENEOUS.key] == Waiting(HETEROGENEOUS.key, 1, (("4090", 1),))
    decisions = decide([HETEROGENEOUS], Pool(LOCAL, {"a800-0": "job ns/collocated"}))
    admitted = decisions[HETEROGENEOUS.key]
    assert isinstance(admitted, Admitted)
    assert dict(admitted.cluster)["a800"] == ("a800-0", "a800-1")
    assert admitted.nodes == {"a800-1", "4090-0", "robot-0", "cpu-0", "cpu-1"}


def test_a_job_takes_the_earliest_free_nodes_in_rank_order() -> None:
    pool = Pool({"gpu": [f"n{i}" for i in range(6)]}, {"n0": "pod x/a", "n2": "pod x/b"})
    decisions = decide([job("two", nodes("gpu", 2, 0, 1))], pool)
    assert decisions[("ns", "two")] == Admitted(("ns", "two"), (("gpu", ("n1", "n3")),), frozenset({"n1", "n3"}))


def test_all_or_nothing_a_job_that_does_not_fit_gets_no_node() -> None:
    pool = Pool({"gpu": ["n0", "n1", "n2"]}, {"n2": "pod x/a"})
    big = job("big", nodes("gpu", 3, 0, 1, 2))
    decisions = decide([big], pool)
    assert decisions[big.key] == Waiting(big.key, 1, (("gpu", 1),))
    assert decisions[big.key].reason == "1 free node of gpu"


def test_two_jobs_in_one_pass_never_get_the_same_node() -> None:
    pool = Pool({"gpu": [f"n{i}" for i in range(8)]})
    jobs = [job(f"j{i}", nodes("gpu", 3, 0, 1, 2), created=f"2026-01-01T00:00:0{i}Z") for i in range(3)]
    decisions = decide(jobs, pool)
    first, second = decisions[("ns", "j0")], decisions[("ns", "j1")]
    assert isinstance(first, Admitted) and isinstance(second, Admitted)
    assert not first.nodes & second.nodes
    assert decisions[("ns", "j2")] == Waiting(("ns", "j2"), 1, (("gpu", 1),))


def test_queue_order_is_priority_then_creation_time_then_name() -> None:
    pool = Pool({"gpu": ["n0"]}, {"n0": "job ns/holder"})
    old = job("old", nodes("gpu", 1, 0), created="2026-01-01T00:00:01Z")
    new = job("new", nodes("gpu", 1, 0), created="2026-01-01T00:00:09Z")
    urgent = job("urgent", nodes("gpu", 1, 0), priority=5, created="2026-01-01T00:00:10Z")
    twin = job("a-twin", nodes("gpu", 1, 0), created="2026-01-01T00:00:09Z")
    decisions = decide([new, old, urgent, twin], pool)
    assert [(k[1], d.position) for k, d in decisions.items() if isinstance(d, Waiting)] == [
        ("urgent", 1),
        ("old", 2),
        ("a-twin", 3),
        ("new", 4),
    ]
    # The node frees: the job of highest priority gets it, the others stay in order.
    decisions = decide([new, old, urgent, twin], Pool({"gpu": ["n0"]}))
    assert isinstance(decisions[urgent.key], Admitted)
    assert decisions[old.key].position == 1


def test_the_head_claims_its_free_nodes_so_small_jobs_cannot_starve_it() -> None:
    # The large job waits for n3, held by a running job. Small jobs keep arriving; without the head's
    # claim each would take n0..n2 and the large job would never see four free nodes at once.
    large = job("large", nodes("gpu", 4, 0, 1, 2, 3), created="2026-01-01T00:00:01Z")
    small = job("small", nodes("gpu", 1, 0), created="2026-01-01T00:00:02Z")
    pool = Pool({"gpu": ["n0", "n1", "n2", "n3"]}, {"n3": "job ns/running"})
    decisions = decide([large, small], pool)
    assert decisions[large.key] == Waiting(large.key, 1, (("gpu", 1),))
    assert decisions[small.key] == Waiting(small.key, 2, (("gpu", 1),))
    # The running job ends: the large job starts before the small one.
    decisions = decide([large, small], Pool(pool.groups))
    assert decisions[large.key].nodes == {"n0", "n1", "n2", "n3"}
    assert decisions[small.key].position == 1


def test_jobs_behind_the_head_backfill_nodes_the_head_does_not_need() -> None:
    head = job("head", nodes("a800", 1, 0), nodes("4090", 1, 0), created="2026-01-01T00:00:01Z")
    small = job("small", nodes("a800", 1, 0), created="2026-01-01T00:00:02Z")
    pool = Pool({"a800": ["a0", "a1"], "4090": ["g0"]}, {"g0": "job ns/other"})
    decisions = decide([head, small], pool)
    assert decisions[head.key] == Waiting(head.key, 1, (("4090", 1),))
    # The head claims a0 (the a800 node it would use); the small job backfills a1.
    assert decisions[small.key] == Admitted(small.key, (("a800", ("a1",)),), frozenset({"a1"}))


def test_only_the_head_claims_so_a_second_waiting_job_does_not_block_backfill() -> None:
    head = job("head", nodes("gpu", 1, 0), nodes("cpu", 1, 0), created="2026-01-01T00:00:01Z")
    second = job("second", nodes("gpu", 1, 0), nodes("cpu", 1, 0), created="2026-01-01T00:00:02Z")
    small = job("small", nodes("gpu", 1, 0), created="2026-01-01T00:00:03Z")
    pool = Pool({"gpu": ["n0", "n1"], "cpu": ["c0"]}, {"c0": "job ns/running"})
    decisions = decide([head, second, small], pool)
    assert decisions[head.key] == Waiting(head.key, 1, (("cpu", 1),))
    assert decisions[second.key] == Waiting(second.key, 2, (("cpu", 1),))
    # The head keeps n0; the second job claims nothing, so the small one starts on n1.
    assert decisions[small.key] == Admitted(small.key, (("gpu", ("n1",)),), frozenset({"n1"}))


def test_a_job_not_planned_yet_after_a_restart_keeps_its_place() -> None:
    pool = Pool({"gpu": ["n0", "n1"]})
    unknown = QueuedJob(("ns", "first"), 0, "2026-01-01T00:00:01Z", None)
    later = job("later", nodes("gpu", 1, 0), created="2026-01-01T00:00:02Z")
    decisions = decide([later, unknown], pool)
    assert decisions[unknown.key] == Waiting(unknown.key, 1, ())
    assert decisions[later.key] == Waiting(later.key, 2, ())
    assert decisions[later.key].reason == "the jobs ahead of it in the queue"


def test_a_node_is_busy_when_a_pod_requests_its_units_or_a_job_holds_it() -> None:
    pods = {
        "n0": {"x/gpu-pod": {"nvidia.com/gpu": 1}},
        "n1": {"x/cpu-pod": {}},
        "n2": {"x/other": {"example.com/fpga": 2}},
        "r0": {"x/arm": {"rlplace.io/franka": 1}},
    }
    busy = busy_nodes(pods, {"nvidia.com/gpu", "rlplace.io/franka"}, {"n3": ("ns", "job")})
    assert busy == {"n0": "pod x/gpu-pod", "r0": "pod x/arm", "n3": "job ns/job"}


def test_demand_counts_positions_up_to_the_last_used_node() -> None:
    groups = [("a800", ["a0", "a1", "a2"]), ("4090", ["g0", "g1"]), ("cpu", ["c0", "c1"])]
    demand = demand_from_workers(groups, {"a1", "g0", "c0", "c1"}, set())
    assert demand == (nodes("a800", 2, 1), nodes("4090", 1, 0), nodes("cpu", 2, 0, 1))
    # A group whose ranks are counted before another group's keeps all its nodes.
    assert demand_from_workers(groups, {"a1", "g0"}, {"a800"})[0] == nodes("a800", 3, 1)
    # A group the plan does not use needs no node.
    assert demand_from_workers(groups, {"a0"}, set())[1] == nodes("4090", 0)

"""Admission that knows the network (issue 45, docs/admission.md "Racks and blocks"): a job's nodes in the fewest
racks and blocks, its node ranks consecutive per rack; nodes without topology labels as before."""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rlplace_operator.admission import kueue
from rlplace_operator.admission.demand import planned_demand
from rlplace_operator.admission.ledger import Holding, Ledger
from rlplace_operator.admission.queue import AdmissionWorld, spare_node
from rlplace_operator.admission.rules import Admitted, GroupDemand, Pool, QueuedJob, Waiting, decide
from rlplace_operator.api.names import NODES_ANNOTATION, NVLINK_CLIQUE_LABEL, TOPOLOGY_LEVELS
from rlplace_operator.api.nodegroup import LabelSelector, NodeGroupSpec
from rlplace_operator.api.rljob import RLJobSpec
from rlplace_operator.builders.workload import PodSet
from rlplace_operator.cluster.selection import (
    NodeInfo,
    covering_flavor,
    job_cluster,
    nodegroup_status,
    topology_levels,
)
from rlplace_operator.reconcile.actions import Apply
from rlplace_operator.reconcile.provision import provision
from rlplace_operator.reconcile.world import World

from recorded import NOW, cluster_snapshot, new_job, rljob_entry

#: Three racks in two blocks, the nodes named so that rank order (by name) interleaves the racks.
RACKS = {
    "gpu-00": ("b1", "r1"),
    "gpu-01": ("b1", "r2"),
    "gpu-02": ("b2", "r3"),
    "gpu-03": ("b1", "r1"),
    "gpu-04": ("b1", "r2"),
    "gpu-05": ("b2", "r3"),
    "gpu-06": ("b1", "r2"),
    "gpu-07": ("b2", "r3"),
    "gpu-08": ("b1", "r2"),
    "gpu-09": ("b2", "r3"),
}
BLOCK, RACK = TOPOLOGY_LEVELS
GROUPS = {"gpu": sorted(RACKS)}


def job(name: str, count: int, created: str = "2026-01-01T00:00:00Z") -> QueuedJob:
    return QueuedJob(("ns", name), 0, created, (GroupDemand("gpu", count, frozenset(range(count))),))


def admitted_nodes(decision: object) -> tuple[str, ...]:
    assert isinstance(decision, Admitted), decision
    return dict(decision.cluster)["gpu"]


def racks(nodes: tuple[str, ...]) -> list[str]:
    return [RACKS[n][1] for n in nodes]


def test_a_job_goes_to_the_one_rack_that_holds_it_not_the_earliest_nodes() -> None:
    """Four nodes: the earliest four in rank order span three racks; r2 and r3 hold four each, and r2 (the
    earlier) is taken whole. Without labels the same job takes the earliest four, as before."""
    chosen = admitted_nodes(decide([job("a", 4)], Pool(GROUPS, domains=RACKS))[("ns", "a")])
    assert racks(chosen) == ["r2"] * 4 and chosen == ("gpu-01", "gpu-04", "gpu-06", "gpu-08")
    blind = admitted_nodes(decide([job("a", 4)], Pool(GROUPS))[("ns", "a")])
    assert blind == ("gpu-00", "gpu-01", "gpu-02", "gpu-03")


def test_the_smallest_rack_that_fits_is_taken_leaving_larger_racks_whole() -> None:
    """Two nodes: r1 (two nodes) fits exactly; r2 and r3 stay whole for four-node jobs."""
    chosen = admitted_nodes(decide([job("a", 2)], Pool(GROUPS, domains=RACKS))[("ns", "a")])
    assert racks(chosen) == ["r1", "r1"]
    both = decide(
        [job("a", 2), job("b", 4, "2026-01-01T00:00:01Z"), job("c", 4, "2026-01-01T00:00:02Z")],
        Pool(GROUPS, domains=RACKS),
    )
    assert [len(set(racks(admitted_nodes(both[("ns", n)])))) for n in "abc"] == [1, 1, 1]


def test_a_job_no_rack_holds_stays_in_one_block_its_ranks_consecutive_per_rack() -> None:
    """Six nodes: no rack holds six; block b1 (r1 and r2: six nodes) does. Its ranks take one rack, then the
    other, never interleaved as the names are."""
    chosen = admitted_nodes(decide([job("a", 6)], Pool(GROUPS, domains=RACKS))[("ns", "a")])
    assert {RACKS[n][0] for n in chosen} == {"b1"}
    assert [rack for rack, _ in itertools.groupby(racks(chosen))] in (["r1", "r2"], ["r2", "r1"])


def test_a_job_larger_than_any_block_spans_the_fewest_largest_domains_consecutively() -> None:
    busy = {"gpu-06": "job ns/other"}  # b1 has 5 usable nodes, b2 has 4
    chosen = admitted_nodes(decide([job("a", 8)], Pool(GROUPS, busy, domains=RACKS))[("ns", "a")])
    assert "gpu-06" not in chosen and len(chosen) == 8
    blocks = [block for block, _ in itertools.groupby(RACKS[n][0] for n in chosen)]
    assert blocks == ["b1", "b2"]  # the larger block first, each block's nodes together
    assert len([rack for rack, _ in itertools.groupby(racks(chosen))]) == 3


@given(
    st.lists(st.sampled_from(["r1", "r2", "r3", ""]), min_size=1, max_size=12),
    st.sets(st.integers(0, 11)),
    st.integers(1, 8),
)
def test_packing_never_gives_a_busy_node_and_fits_exactly_when_earliest_first_fits(
    labels: list[str], busy_at: set[int], count: int
) -> None:
    """Whatever the labels: a job admitted with topology gets only free nodes, and it is admitted exactly when it
    would be without (packing chooses among the same free nodes, it never turns a fit away)."""
    names = [f"n{i:02d}" for i in range(len(labels))]
    domains = {n: ("", rack) for n, rack in zip(names, labels, strict=True) if rack}
    busy = {names[i]: "pod x" for i in busy_at if i < len(names)}
    packed = decide([job("a", count)], Pool({"gpu": names}, busy, domains=domains))[("ns", "a")]
    blind = decide([job("a", count)], Pool({"gpu": names}, busy))[("ns", "a")]
    assert isinstance(packed, Admitted) == isinstance(blind, Admitted)
    if isinstance(packed, Admitted):
        assert not set(admitted_nodes(packed)) & set(busy) and len(admitted_nodes(packed)) == count


# -- the groups that exchange weights, and CPU-only groups ---------------------------------------------------------

#: Two blocks of two racks each; trainer nodes (a800) and rollout nodes (4090) in every rack.
FLEET = {
    f"{kind}-{block}{rack}{i}": (block, f"{block}{rack}")
    for kind in ("a800", "4090")
    for block in ("b1", "b2")
    for rack in ("x", "y")
    for i in range(2)
}
KINDS = {kind: sorted(n for n in FLEET if n.startswith(kind)) for kind in ("a800", "4090")}


def two_groups(name: str, trainer: int, rollout: int, exchanges: bool = True) -> QueuedJob:
    demand = (
        GroupDemand("a800", trainer, frozenset(range(trainer)), exchanges=exchanges),
        GroupDemand("4090", rollout, frozenset(range(rollout)), exchanges=exchanges),
    )
    return QueuedJob(("ns", name), 0, "2026-01-01T00:00:00Z", demand)


def blocks_of(decision: object) -> dict[str, set[str]]:
    assert isinstance(decision, Admitted), decision
    return {group: {FLEET[n][0] for n in nodes} for group, nodes in decision.cluster}


def test_trainer_and_rollout_go_under_one_domain_where_each_alone_would_take_another_block() -> None:
    """Alone, the one trainer node best-fits into rack b1x (one a800 free there) and the two rollout nodes into a
    rack of b2 (b1's racks have one 4090 free each): two blocks, weights crossing the spine every iteration.
    Exchanging weights, both go to one rack of b2, where all three fit."""
    busy = {"a800-b1x0": "pod x", "4090-b1x0": "pod x", "4090-b1y0": "pod x"}
    pool = Pool(KINDS, busy, domains=FLEET)
    alone = decide([two_groups("a", 1, 2, exchanges=False)], pool)[("ns", "a")]
    assert blocks_of(alone) == {"a800": {"b1"}, "4090": {"b2"}}
    together = decide([two_groups("a", 1, 2)], pool)[("ns", "a")]
    assert isinstance(together, Admitted)
    assert dict(together.cluster) == {"a800": ("a800-b2x0",), "4090": ("4090-b2x0", "4090-b2x1")}


def test_inside_the_block_the_groups_take_the_fewest_racks_that_hold_them_both() -> None:
    """One block, free nodes per rack (a800, 4090): x (3, 0), y (1, 3), z (2, 2). Four trainer and three rollout
    nodes fit in no one rack; x and y hold them (two racks), where filling the fullest racks first (z, y, then x)
    would take all three."""
    free = {"x": (3, 0), "y": (1, 3), "z": (2, 2)}
    domains = {}
    groups: dict[str, list[str]] = {"a800": [], "4090": []}
    for rack, counts in free.items():
        for kind, count in zip(("a800", "4090"), counts, strict=True):
            for i in range(count):
                name = f"{kind}-{rack}{i}"
                domains[name] = ("b1", rack)
                groups[kind].append(name)
    decision = decide([two_groups("a", 4, 3)], Pool(groups, {}, domains=domains))[("ns", "a")]
    assert isinstance(decision, Admitted)
    assert {domains[n][1] for _, nodes in decision.cluster for n in nodes} == {"x", "y"}, decision.cluster


def test_groups_that_no_one_block_holds_are_packed_each_on_its_own_and_still_admitted() -> None:
    """Six trainer nodes: no block holds six a800 nodes with the rollout's two: each group packed on its own, as
    without the rule (it never turns a fit away)."""
    pool = Pool(KINDS, {}, domains=FLEET)
    assert isinstance(decide([two_groups("a", 6, 2)], pool)[("ns", "a")], Admitted)
    assert isinstance(decide([two_groups("a", 9, 2)], pool)[("ns", "a")], Waiting)


@given(st.sets(st.sampled_from(sorted(FLEET))), st.integers(1, 8), st.integers(1, 8))
def test_weight_exchange_admits_exactly_when_packing_each_group_alone_does(
    busy: set[str], trainer: int, rollout: int
) -> None:
    pool = Pool(KINDS, dict.fromkeys(busy, "pod x"), domains=FLEET)
    together = decide([two_groups("a", trainer, rollout)], pool)[("ns", "a")]
    alone = decide([two_groups("a", trainer, rollout, exchanges=False)], pool)[("ns", "a")]
    assert isinstance(together, Admitted) == isinstance(alone, Admitted)
    if isinstance(together, Admitted):
        assert not together.nodes & busy


def test_cpu_pods_take_cpu_nodes_first_then_the_jobs_own_domain_never_an_empty_gpu_rack() -> None:
    """An env group that spans every node (GPU nodes first in rank order, two CPU-only nodes last): its pod takes a
    CPU-only node; with those busy, a node the trainer already holds in its rack, where without the rule it takes
    the first free GPU node in rank order (a 4090 of another rack: that node's GPUs lost to every GPU job)."""
    cpu_nodes = {"cpu-0": ("b1", "b1z"), "cpu-1": ("b1", "b1z")}
    domains = {**FLEET, **cpu_nodes}
    groups = {"a800": KINDS["a800"], "env": [*KINDS["4090"], *KINDS["a800"], *cpu_nodes]}

    def env_job(cpu_only: bool) -> QueuedJob:
        demand = (
            GroupDemand("a800", 2, frozenset(range(2)), exchanges=True),
            GroupDemand("env", 1, frozenset({0}), cpu_only=cpu_only),
        )
        return QueuedJob(("ns", "a"), 0, "2026-01-01T00:00:00Z", demand)

    pool = Pool(groups, {}, domains=domains, gpu_nodes=frozenset(FLEET))
    free = decide([env_job(True)], pool)[("ns", "a")]
    assert isinstance(free, Admitted) and dict(free.cluster)["env"] == ("cpu-0",)
    busy = {"cpu-0": "pod x", "cpu-1": "pod x", "a800-b1x0": "pod x", "a800-b1x1": "pod x"}
    pool = Pool(groups, busy, domains=domains, gpu_nodes=frozenset(FLEET))
    near = decide([env_job(True)], pool)[("ns", "a")]
    assert isinstance(near, Admitted)
    assert dict(near.cluster)["a800"] == ("a800-b1y0", "a800-b1y1") and dict(near.cluster)["env"] == ("a800-b1y0",)
    blind = decide([env_job(False)], pool)[("ns", "a")]
    assert isinstance(blind, Admitted) and dict(blind.cluster)["env"] == ("4090-b1x0",)


# -- through a provision pass: the labels read from the nodes ---------------------------------------------------


def labelled_node(name: str, block: str, rack: str) -> dict:
    labels = {
        "kubernetes.io/hostname": name,
        "rlplace.io/gpu-type": "h100",
        "network.topology.kubernetes.io/block": block,
        "network.topology.kubernetes.io/rack": rack,
    }
    return {
        "metadata": {"name": name, "labels": labels},
        "status": {
            "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def test_a_job_of_four_nodes_is_planned_on_the_one_rack_that_holds_it() -> None:
    """Eight nodes whose names alternate between two racks: the NodeGroup ranks them rack by rack; another job
    holds one node of the first rack, so the job's 32 GPUs (4 nodes) go to the second rack, whole, not to the three
    free nodes of the first and one of the second (the earliest in rank order)."""
    nodes = [labelled_node(f"h100-{i}", "b1", f"r{i % 2}") for i in range(8)]
    group = {"nodeSelector": {"matchLabels": {"rlplace.io/gpu-type": "h100"}}}
    other = {("ns", "other"): [Holding(frozenset({"h100-0"}))]}
    snapshot = cluster_snapshot(nodes=nodes, groups={"h100": group}, holdings=other)
    ((_, status),) = snapshot.nodegroups["h100"]
    ranked = [entry["name"] for entry in status["nodes"]]
    assert ranked == ["h100-0", "h100-2", "h100-4", "h100-6", "h100-1", "h100-3", "h100-5", "h100-7"]
    spec = {"nodeGroups": ["h100"], "componentPlacement": [{"components": "actor,rollout", "placement": "0-31"}]}
    outcome = provision(new_job("packed", spec), World(now=NOW, child_known=False, snapshot=snapshot), Ledger())
    (cluster,) = [o for a in outcome.actions if isinstance(a, Apply) for o in a.objects if o["kind"] == "RayCluster"]
    pinned = cluster["metadata"]["annotations"][NODES_ANNOTATION].split(",")
    assert pinned == ["h100-1", "h100-3", "h100-5", "h100-7"], pinned


# -- spec.topology: a level that is required --------------------------------------------------------------------


def test_a_job_that_requires_one_rack_waits_for_one_naming_the_level_and_what_it_lacks() -> None:
    """Five nodes required in one rack (r2 has four free, r3 three: one is busy): it waits, short of one node,
    saying the level; as the head of the queue it claims r2's four, so a four-node job behind it takes the free
    nodes of r1 and r3, not r2 (which it would take whole otherwise)."""
    five = QueuedJob(
        ("ns", "five"), 0, "2026-01-01T00:00:00Z", (GroupDemand("gpu", 5, frozenset(range(5))),), within=RACK
    )
    later = job("four", 4, "2026-01-01T00:00:01Z")
    pool = Pool(GROUPS, {"gpu-09": "pod x"}, domains=RACKS)
    decisions = decide([five, later], pool)
    waiting = decisions[("ns", "five")]
    said = "1 free node of gpu (all of a group's nodes in one network.topology.kubernetes.io/rack: the free nodes would span 2)"
    assert waiting.reason == said
    assert "r2" not in racks(admitted_nodes(decisions[("ns", "four")]))
    assert racks(admitted_nodes(decide([later], pool)[("ns", "four")])) == ["r2"] * 4
    preferred = decide([job("five", 5)], Pool(GROUPS, domains=RACKS))[("ns", "five")]
    assert len({RACKS[n][0] for n in admitted_nodes(preferred)}) == 1  # not required: one block, two racks


def test_a_job_that_requires_one_block_runs_over_its_racks() -> None:
    six = QueuedJob(
        ("ns", "six"), 0, "2026-01-01T00:00:00Z", (GroupDemand("gpu", 6, frozenset(range(6))),), within=BLOCK
    )
    chosen = admitted_nodes(decide([six], Pool(GROUPS, domains=RACKS))[("ns", "six")])
    assert {RACKS[n][0] for n in chosen} == {"b1"}


def test_a_required_level_no_node_is_labelled_with_is_never_met() -> None:
    two = QueuedJob(
        ("ns", "two"), 0, "2026-01-01T00:00:00Z", (GroupDemand("gpu", 2, frozenset(range(2))),), within=RACK
    )
    waiting = decide([two], Pool(GROUPS))[("ns", "two")]
    assert waiting.reason.startswith("2 free nodes of gpu (all of a group's nodes in one network.topology"), waiting


def test_the_workloads_podsets_ask_kueue_for_the_jobs_level() -> None:
    selector = LabelSelector(match_labels={"rlplace.io/gpu-type": "h100"})
    assert PodSet("h100", 4, {"cpu": "1"}, selector).wire()["topologyRequest"] == {"unconstrained": True}
    rack = "network.topology.kubernetes.io/rack"
    required = PodSet("h100", 4, {"cpu": "1"}, selector, level=rack, required=True).wire()
    assert required["topologyRequest"] == {"required": rack}
    preferred = PodSet("h100", 4, {"cpu": "1"}, selector, level=rack).wire()
    assert preferred["topologyRequest"] == {"preferred": rack}


def podsets_of(spec: dict) -> list[dict]:
    """The Workload PodSets of a job on the recorded local cluster (two a800 nodes, one 4090, two CPU-only)."""
    snapshot = cluster_snapshot()
    parsed = RLJobSpec.model_validate(spec)
    ledger = Ledger()
    groups = [ledger.group(name, snapshot.nodegroups[name][0]) for name in parsed.node_groups]
    demand = planned_demand(("ns", "a"), 1, parsed, {}, groups, snapshot.nodes, {}, ledger)
    found = kueue.pod_sets(parsed, groups, demand, snapshot.nodes)
    assert isinstance(found, list), found
    return [pod_set.wire() for pod_set in found]


def test_kueue_gets_a_podset_group_only_where_it_admits_one() -> None:
    """Kueue v0.19.2's PodSet groups are two PodSets at a level, one of a single pod, and one ResourceFlavor for
    both: a job of two a800 nodes (actor) and one 4090 node (rollout) cannot be one group (Kueue never admits it:
    benchmarks/topology.py found 18 such Workloads waiting with "flavor ... doesn't match node affinity"), so each
    PodSet asks for the level on its own; two PodSets on the same nodes, one of a single pod, are one group."""
    spec = {
        "nodeGroups": ["a800", "4090", "cpu"],
        "componentPlacement": [
            {"components": "actor", "nodeGroup": "a800", "placement": "0-15"},
            {"components": "rollout", "nodeGroup": "4090", "placement": "0-7"},
            {"components": "reward", "nodeGroup": "cpu", "placement": "0:0-1"},
        ],
        "topology": {"level": RACK},
    }
    assert [p["topologyRequest"] for p in podsets_of(spec)] == [{"preferred": RACK}] * 3
    assert [p["topologyRequest"] for p in podsets_of({**spec, "topology": None})] == [{"unconstrained": True}] * 3
    same = LabelSelector(match_labels={"rlplace.io/gpu-type": "h100"})
    trainer = PodSet("trainer", 4, {"cpu": "1"}, same, level=RACK)
    rollout = PodSet("rollout", 1, {"cpu": "1"}, same, level=RACK)
    both = kueue.grouped([trainer, rollout], [0, 1])
    assert [p.wire()["topologyRequest"] for p in both] == [
        {"preferred": RACK, "podSetGroupName": "weight-exchange"}
    ] * 2
    other = PodSet("rollout", 1, {"cpu": "1"}, LabelSelector(match_labels={"rlplace.io/gpu-type": "h20"}), level=RACK)
    assert kueue.grouped([trainer, other], [0, 1]) == [trainer, other]
    assert kueue.grouped([trainer, dataclasses.replace(rollout, count=2)], [0, 1])[1].group_name is None


def test_a_required_level_no_domain_holds_even_empty_is_refused_at_once_naming_the_largest() -> None:
    """Two racks of three nodes, a job of four nodes requiring one rack: no rack could ever hold it, so it does not
    queue (as the head it would claim a rack it can never fill): Pending, Placed False TopologyUnsatisfiable, naming
    the largest rack. Preferred: admitted over both racks."""
    nodes = [labelled_node(f"h100-{i}", "b1", f"r{i % 2}") for i in range(6)]  # two racks of three
    group = {"nodeSelector": {"matchLabels": {"rlplace.io/gpu-type": "h100"}}}
    snapshot = cluster_snapshot(nodes=nodes, groups={"h100": group})
    spec = {
        "nodeGroups": ["h100"],
        "componentPlacement": [{"components": "actor,rollout", "placement": "0-31"}],
        "topology": {"level": RACK, "mode": "Required"},
    }
    ledger = Ledger()
    outcome = provision(new_job("racked", spec), World(now=NOW, child_known=False, snapshot=snapshot), ledger)
    assert outcome.status.phase == "Pending", outcome.status.message  # type: ignore[attr-defined]
    placed = condition(outcome, "Placed")
    assert (placed.status, placed.reason) == ("False", "TopologyUnsatisfiable")
    assert (
        placed.message
        == f"spec.topology requires the job's 4 nodes of h100 in one {RACK}: its largest, b1/r0, has 3 ready nodes"
    )
    assert not ledger.reserved and not [a for a in outcome.actions if isinstance(a, Apply)]
    spec["topology"]["mode"] = "Preferred"  # type: ignore[index]
    preferred = provision(new_job("racked", spec), World(now=NOW, child_known=False, snapshot=snapshot), Ledger())
    assert preferred.status.phase not in ("Queued", "Pending"), preferred.status.message  # type: ignore[attr-defined]


def clique_node(name: str, clique: str | None) -> dict:
    """A GB200-like node: one NVLink domain per clique label (NVIDIA's GPU feature discovery), no rack labels."""
    body = labelled_node(name, "", "")
    labels = {k: v for k, v in body["metadata"]["labels"].items() if not k.startswith("network.topology")}
    body["metadata"]["labels"] = labels | ({NVLINK_CLIQUE_LABEL: clique} if clique else {})
    return body


def test_a_level_the_group_does_not_declare_is_named_and_a_declared_nvlink_level_packs_the_job() -> None:
    """The NVLink clique label is a level once the NodeGroup lists it (spec.topology.levels); before that a job
    requiring it is refused with the group's levels named. Cliques of 2 (c1) and 3 (c2) nodes in rank order c1 c2
    c1 c2 c2: a job of three nodes requiring one clique gets c2's three. The NodeGroup's status lists the levels
    and the nodes per clique."""
    cliques = ["c1", "c2", "c1", "c2", "c2"]
    nodes = [clique_node(f"gb-{i}", clique) for i, clique in enumerate(cliques)]
    selector = {"matchLabels": {"rlplace.io/gpu-type": "h100"}}
    spec = {
        "nodeGroups": ["gb"],
        "componentPlacement": [{"components": "actor,rollout", "placement": "0-23"}],
        "topology": {"level": NVLINK_CLIQUE_LABEL, "mode": "Required"},
    }
    undeclared = cluster_snapshot(nodes=nodes, groups={"gb": {"nodeSelector": selector}})
    refused = provision(new_job("nvl", spec), World(now=NOW, child_known=False, snapshot=undeclared), Ledger())
    assert condition(refused, "Placed").message == (
        f"spec.topology.level {NVLINK_CLIQUE_LABEL} is not a level of NodeGroup gb (its levels: {BLOCK}, {RACK}; "
        "the NodeGroup's spec.topology declares them)"
    )
    declared = {"nodeSelector": selector, "topology": {"levels": [NVLINK_CLIQUE_LABEL, "kubernetes.io/hostname"]}}
    snapshot = cluster_snapshot(nodes=nodes, groups={"gb": declared})
    ((_, status),) = snapshot.nodegroups["gb"]
    assert status["topology"]["levels"] == [NVLINK_CLIQUE_LABEL]  # the hostname level is the node itself
    assert status["topology"]["domains"] == [
        {"path": "c1", "nodes": 2, "readyNodes": 2},
        {"path": "c2", "nodes": 3, "readyNodes": 3},
    ]
    outcome = provision(new_job("nvl", spec), World(now=NOW, child_known=False, snapshot=snapshot), Ledger())
    assert pinned_nodes(outcome) == ["gb-1", "gb-3", "gb-4"]


def test_levels_read_from_the_kueue_topology_a_group_names_and_what_is_wrong_with_them_named() -> None:
    """spec.topology.kueueTopology: the levels of Kueue's Topology (declared once, in Kueue), hostname dropped; a
    Topology that does not exist, and nodes lacking a level's label, are named in the status."""
    nodes = [labelled_node(f"h100-{i}", "b1", f"r{i % 2}") for i in range(4)]
    del nodes[3]["metadata"]["labels"][RACK]
    group = {"nodeSelector": {"matchLabels": {"rlplace.io/gpu-type": "h100"}}, "topology": {"kueueTopology": "dc"}}
    kueue = {"dc": {"spec": {"levels": [{"nodeLabel": RACK}, {"nodeLabel": "kubernetes.io/hostname"}]}}}
    ((_, status),) = cluster_snapshot(nodes=nodes, groups={"h100": group}, kueue_topologies=kueue).nodegroups["h100"]
    assert status["topology"]["levels"] == [RACK]
    assert status["topology"]["domains"] == [
        {"path": "", "nodes": 1, "readyNodes": 1},
        {"path": "r0", "nodes": 2, "readyNodes": 2},
        {"path": "r1", "nodes": 1, "readyNodes": 1},
    ]
    assert status["topology"]["problem"] == (
        f"1 of 4 nodes have no {RACK} label (h100-3): they are in no domain of that level, so a job requiring it "
        "never gets them"
    )
    ((_, missing),) = cluster_snapshot(nodes=nodes, groups={"h100": group}).nodegroups["h100"]
    assert missing["topology"]["levels"] == [] and missing["topology"]["problem"].startswith(
        "Kueue Topology dc does not exist (spec.topology.kueueTopology)"
    )
    with pytest.raises(ValueError, match="one of the two"):
        NodeGroupSpec.model_validate({**group, "topology": {"levels": [RACK], "kueueTopology": "dc"}})


def test_labels_changed_under_a_placed_job_are_read_by_its_next_placement_and_the_next_job() -> None:
    """A job admitted into rack r1; its nodes are relabelled into two racks that cut across it. Nothing re-places a
    running job for a label (only a new spec or its lost RayCluster does: reconcile/decide.py): its next placement
    reads the new labels (one new rack, s0), and so does the next job requiring one rack (s1's free nodes)."""
    nodes = [labelled_node(f"h100-{i}", "b1", "r1" if i < 4 else "r2") for i in range(8)]
    group = {"nodeSelector": {"matchLabels": {"rlplace.io/gpu-type": "h100"}}}
    spec = {
        "nodeGroups": ["h100"],
        "componentPlacement": [{"components": "actor,rollout", "placement": "0-31"}],
        "topology": {"level": RACK, "mode": "Required"},
    }
    ledger = Ledger()
    two = {**spec, "componentPlacement": [{"components": "actor,rollout", "placement": "0-15"}]}
    jobs = {("ns", "first"): new_job("first", spec), ("ns", "second"): new_job("second", two)}
    rljobs = {key: [rljob_entry(job)] for key, job in jobs.items()}
    labelled = cluster_snapshot(nodes=nodes, groups={"h100": group}, rljobs=rljobs)
    first = provision(jobs["ns", "first"], World(now=NOW, child_known=False, snapshot=labelled), ledger)
    assert pinned_nodes(first) == ["h100-0", "h100-1", "h100-2", "h100-3"]
    for i, node in enumerate(nodes):
        node["metadata"]["labels"][RACK] = f"s{i % 2}"  # racks cut across the job's nodes
    relabelled = cluster_snapshot(nodes=nodes, groups={"h100": group}, rljobs=rljobs)
    again = provision(jobs["ns", "first"], World(now=NOW, child_known=False, snapshot=relabelled), ledger)
    assert pinned_nodes(again) == ["h100-0", "h100-2", "h100-4", "h100-6"]
    second = provision(jobs["ns", "second"], World(now=NOW, child_known=False, snapshot=relabelled), ledger)
    assert pinned_nodes(second) == ["h100-1", "h100-3"]


def pinned_nodes(outcome: object) -> list[str]:
    (cluster,) = [o for a in outcome.actions if isinstance(a, Apply) for o in a.objects if o["kind"] == "RayCluster"]  # type: ignore[attr-defined]
    return cluster["metadata"]["annotations"][NODES_ANNOTATION].split(",")


def condition(outcome: object, kind: str) -> Any:
    return next(c for c in outcome.status.conditions if c.type == kind)  # type: ignore[attr-defined]


def test_a_lost_nodes_replacement_is_a_free_node_of_its_rack_before_an_earlier_one_elsewhere() -> None:
    """The job runs on gpu-01 and gpu-04 (rack r2); gpu-04 is lost. The spare is gpu-06 (r2, free), not gpu-00 or
    gpu-02 (free, earlier in rank order, racks r1 and r3); with r2 full, one of block b1 (gpu-00, r1) before b2."""
    world = AdmissionWorld({}, {}, {}, GROUPS, {"nvidia.com/gpu"}, domains=RACKS)
    running = frozenset({"gpu-01", "gpu-04"})
    assert spare_node(Ledger(), world, ("ns", "a"), "gpu", running, "gpu-04") == "gpu-06"
    full = AdmissionWorld(
        {}, {}, {}, {"gpu": [n for n in GROUPS["gpu"] if n not in ("gpu-06", "gpu-08")]}, set(), domains=RACKS
    )
    assert spare_node(Ledger(), full, ("ns", "a"), "gpu", running, "gpu-04") == "gpu-00"


def test_the_jobs_cluster_carries_each_nodes_network_domains_for_auto_placement() -> None:
    """Auto placement prices the weight sync by rack and block (docs/autoplace.md): the placement_core cluster the
    operator builds for a job gives each node its domains by its NodeGroup's levels, none where unlabelled."""
    nodes = [labelled_node("h100-0", "b1", "r1"), labelled_node("h100-1", "b1", "r2"), labelled_node("h100-2", "", "")]
    group = {"nodeSelector": {"matchLabels": {"rlplace.io/gpu-type": "h100"}}}
    snapshot = cluster_snapshot(nodes=nodes, groups={"h100": group})
    ledger = Ledger()
    groups = [ledger.group("h100", snapshot.nodegroups["h100"][0])]
    cluster = job_cluster(groups, {name: infos[0] for name, infos in snapshot.nodes.items()})
    assert {node.name: node.domains for node in cluster.nodes} == {
        "h100-0": ("b1", "r1"),
        "h100-1": ("b1", "r2"),
        "h100-2": (),
    }


def test_a_group_that_declares_nothing_takes_the_kueue_topology_covering_its_nodes_else_the_operators_levels() -> None:
    """Declared once: with no spec.topology, the levels come from the Topology of the ResourceFlavor whose
    nodeLabels every node of the group carries (the most specific one), else from the operator's
    --topology-levels, else block and rack."""
    nodes = [NodeInfo.from_body(labelled_node(f"h100-{i}", "b1", f"r{i}")) for i in range(2)]
    spec = NodeGroupSpec.model_validate({"nodeSelector": {"matchLabels": {"rlplace.io/gpu-type": "h100"}}})
    flavors = [
        {"metadata": {"name": "any"}, "spec": {"nodeLabels": {"kubernetes.io/os": "linux"}, "topologyName": "x"}},
        {"metadata": {"name": "h100"}, "spec": {"nodeLabels": {"rlplace.io/gpu-type": "h100"}, "topologyName": "dc"}},
        {
            "metadata": {"name": "h100-b1"},
            "spec": {"nodeLabels": {"rlplace.io/gpu-type": "h100", BLOCK: "b1"}, "topologyName": "dc-b1"},
        },
        {"metadata": {"name": "flat"}, "spec": {"nodeLabels": {"rlplace.io/gpu-type": "h100", BLOCK: "b1"}}},
    ]
    assert covering_flavor(flavors, nodes)["metadata"]["name"] == "h100-b1"  # type: ignore[index]
    assert covering_flavor(flavors[:1], nodes) is None  # the nodes carry no kubernetes.io/os label
    kueue = {"spec": {"levels": [{"nodeLabel": RACK}, {"nodeLabel": "kubernetes.io/hostname"}]}}
    assert topology_levels(spec, kueue) == ((RACK,), None)
    assert topology_levels(spec, None, ("nvidia.com/gpu.clique",)) == (("nvidia.com/gpu.clique",), None)
    assert topology_levels(spec, None) == ((BLOCK, RACK), None)
    status = nodegroup_status(spec, nodes, 1, None, None, (RACK,))
    assert status.topology is not None and status.topology.levels == [RACK]

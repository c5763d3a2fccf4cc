"""Placement that knows the network: racks and blocks a job spans, against the fewest possible, on a fragmented
1,024-node fleet (issue 45, docs/admission.md "Racks and blocks").

    .venv/bin/python benchmarks/topology.py [--jobs 500] [--states 25] [--seed 45] [--kueue]

The fleet: 4 blocks x 8 racks x 32 nodes, each rack 15 trainer nodes (NodeGroup a800), 15 rollout nodes (h20)
and 2 CPU-only nodes; node names are shuffled against the racks, as cloud node names are. It is fragmented
`--states` times by random other jobs (each state 30-70% of the nodes busy: runs of 1-32 nodes of one rack);
in each state `--jobs / --states` jobs are admitted one at a time against the same free nodes, each 1 to 64
nodes with a trainer group, a rollout group (weights exchanged between them) and 0-4 CPU-only env pods (a
NodeGroup over every node, as a CPU pool that selects GPU nodes too). Per job:

- **rlplace**: the operator's own admission (`admission/rules.decide` on the pool `admission/queue.py` builds:
  the NodeGroups' rank order and levels from `cluster/selection.nodegroup_status`, the nodes' domains from
  their labels, the weight-exchange and CPU-only flags `admission/demand.py` sets);
- **today**: the same code as before issue 45: nodes ranked by name, earliest free first, no domains;
- **minimum**: the fewest racks, and separately the fewest blocks, whose free nodes hold the job's trainer and
  rollout nodes (exact: a dynamic program over racks or blocks on (trainer nodes, rollout nodes));
- **Kueue TAS** (`--kueue`, on the local cluster with its Kueue v0.19.2, or the one in KUBECONFIG): the same
  fleet as kwok nodes (Topology block/rack/hostname, one ResourceFlavor per node type), each state's busy
  nodes tainted NoSchedule, each job a Workload of two PodSets asking `preferred: rack` (the nearest Kueue has
  to "fewest racks"), its granted hosts read from the topologyAssignment.

Printed: the share of jobs at the minimum (racks, blocks, both) per method, the mean and worst excess, jobs
where rlplace spans more than Kueue TAS, the admission latency (one `decide` call per job, best of 3: rlplace
against today, the ratio), and the GPUs the env pods keep from GPU jobs (a GPU node a CPU pod holds) with and
without the CPU-first rule. Prints figures; it is not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import random
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "operator"))

from kubernetes import client  # noqa: E402
from kubernetes.client.exceptions import ApiException  # noqa: E402

from rlplace_operator.admission.demand import planned_demand  # noqa: E402
from rlplace_operator.admission.kueue import grouped  # noqa: E402
from rlplace_operator.admission.kueue.status import assigned_hosts  # noqa: E402
from rlplace_operator.admission.ledger import Ledger  # noqa: E402
from rlplace_operator.admission.rules import Admitted, GroupDemand, Pool, QueuedJob, decide  # noqa: E402
from rlplace_operator.api.names import HOSTNAME_LABEL, TOPOLOGY_LEVELS  # noqa: E402
from rlplace_operator.api.nodegroup import LabelSelector, NodeGroupSpec  # noqa: E402
from rlplace_operator.api.rljob import RLJobSpec  # noqa: E402
from rlplace_operator.builders.workload import PodSet, build_workload  # noqa: E402
from rlplace_operator.cluster.selection import (  # noqa: E402
    GPU_RESOURCE,
    JobGroup,
    NodeInfo,
    group_nodes,
    nodegroup_status,
)

from _harness import bench_cluster, delete_nodes, wait_for  # noqa: E402
from e2e_cluster import fake_node_manifest  # noqa: E402

BLOCK, RACK = TOPOLOGY_LEVELS
BLOCKS, RACKS_PER_BLOCK = 4, 8
TRAINER_PER_RACK, ROLLOUT_PER_RACK, CPU_PER_RACK = 15, 15, 2
TYPE_LABEL = "bench.rlplace.io/type"
GPUS_PER_NODE = 8
DEBUG = False


def fleet(rng: random.Random) -> list[NodeInfo]:
    """The 1,024 nodes, labelled with block, rack and type; names shuffled against the racks."""
    slots = []
    for block in range(BLOCKS):
        for rack in range(RACKS_PER_BLOCK):
            kinds = ["a800"] * TRAINER_PER_RACK + ["h20"] * ROLLOUT_PER_RACK + ["cpu"] * CPU_PER_RACK
            slots += [(f"b{block}", f"b{block}r{rack}", kind) for kind in kinds]
    numbers = list(range(len(slots)))
    rng.shuffle(numbers)
    nodes = []
    for number, (block, rack, kind) in zip(numbers, slots, strict=True):
        name = f"node-{number:04d}"
        labels = {HOSTNAME_LABEL: name, BLOCK: block, RACK: rack, TYPE_LABEL: kind}
        gpus = "0" if kind == "cpu" else str(GPUS_PER_NODE)
        nodes.append(NodeInfo(name, labels, {GPU_RESOURCE: gpus, "cpu": "64", "memory": "512Gi"}, True))
    return nodes


GROUP_SPECS = {
    "a800": NodeGroupSpec.model_validate({"nodeSelector": {"matchLabels": {TYPE_LABEL: "a800"}}}),
    "h20": NodeGroupSpec.model_validate({"nodeSelector": {"matchLabels": {TYPE_LABEL: "h20"}}}),
    # A CPU pool over every node (ignoreHardware): what env and reward workers often get, GPU nodes included.
    "env": NodeGroupSpec.model_validate(
        {"nodeSelector": {"matchExpressions": [{"key": TYPE_LABEL, "operator": "Exists"}]}, "ignoreHardware": True}
    ),
}


@dataclass(frozen=True)
class Fleet:
    """What both admissions read of the fleet: each group's nodes in its rank order, the nodes' domains."""

    ranked: Mapping[str, Sequence[str]]
    """rlplace: the NodeGroups' rank order (block, rack, name)."""
    by_name: Mapping[str, Sequence[str]]
    """Today: ranked by name."""
    domains: Mapping[str, tuple[str, ...]]
    levels: Mapping[str, tuple[str, ...]]
    gpu_nodes: frozenset[str]
    rack_of: Mapping[str, str]
    block_of: Mapping[str, str]
    kind_of: Mapping[str, str]


def read_fleet(nodes: Sequence[NodeInfo]) -> Fleet:
    ranked, by_name, levels = {}, {}, {}
    for name, spec in GROUP_SPECS.items():
        status = nodegroup_status(spec, nodes, 1)
        ranked[name] = [entry.name for entry in status.nodes]
        by_name[name] = [node.name for node in group_nodes(spec, nodes, ())]
        levels[name] = tuple(status.topology.levels) if status.topology else TOPOLOGY_LEVELS
    return Fleet(
        ranked,
        by_name,
        {node.name: node.network_path(TOPOLOGY_LEVELS) for node in nodes},
        levels,
        frozenset(node.name for node in nodes if node.count(GPU_RESOURCE)),
        {node.name: node.labels[RACK] for node in nodes},
        {node.name: node.labels[BLOCK] for node in nodes},
        {node.name: node.labels[TYPE_LABEL] for node in nodes},
    )


def fragment(rng: random.Random, world: Fleet, share: float) -> set[str]:
    """Busy nodes: runs of 1-32 nodes of one rack (other jobs), until `share` of the nodes are busy."""
    racks: dict[str, list[str]] = {}
    for node in world.ranked["env"]:
        racks.setdefault(world.rack_of[node], []).append(node)
    busy: set[str] = set()
    total = len(world.rack_of)
    names = sorted(racks)
    while len(busy) < share * total:
        members = racks[rng.choice(names)]
        start = rng.randrange(len(members))
        busy.update(members[start : start + rng.randint(1, 32)])
    return busy


@dataclass(frozen=True)
class Job:
    trainer: int
    rollout: int
    env: int


def draw_job(rng: random.Random) -> Job:
    nodes = rng.randint(1, 64)
    trainer = max(1, round(nodes * rng.uniform(0.3, 0.7)))
    return Job(trainer, nodes - trainer, rng.randint(0, 4))


def fewest(domains: Mapping[str, tuple[int, int]], trainer: int, rollout: int) -> int | None:
    """The fewest domains whose free (trainer, rollout) nodes hold the job (None: no set does): a dynamic program,
    per count of domains, of the most rollout nodes reachable for each trainer count (capped at the need)."""
    unreachable = -1
    best = [[unreachable] * (trainer + 1) for _ in range(len(domains) + 1)]
    best[0][0] = 0
    for used, (free_trainer, free_rollout) in enumerate(domains.values()):
        for count in range(used + 1, 0, -1):
            for have in range(trainer + 1):
                before = best[count - 1][have]
                if before == unreachable:
                    continue
                after = min(trainer, have + free_trainer)
                best[count][after] = max(best[count][after], min(rollout, before + free_rollout))
    return next((count for count in range(len(domains) + 1) if best[count][trainer] >= rollout), None)


def fewest_racks_in_fewest_blocks(
    racks: Mapping[str, tuple[int, int]], block_of_rack: Mapping[str, str], trainer: int, rollout: int, blocks: int
) -> int:
    """The fewest racks among the choices that span the fewest blocks (`blocks`): racks are judged where blocks
    are already the fewest, as a network's levels are (a rack saved across the spine costs more than it saves)."""
    names = sorted(set(block_of_rack.values()))
    found = []
    for chosen in itertools.combinations(names, blocks):
        inside = {rack: free for rack, free in racks.items() if block_of_rack[rack] in chosen}
        count = fewest(inside, trainer, rollout)
        if count is not None:
            found.append(count)
    return min(found)


def free_per(world: Fleet, busy: set[str], domain_of: Mapping[str, str]) -> dict[str, tuple[int, int]]:
    counts: dict[str, list[int]] = {}
    for node, kind in world.kind_of.items():
        if node in busy or kind == "cpu":
            continue
        count = counts.setdefault(domain_of[node], [0, 0])
        count[0 if kind == "a800" else 1] += 1
    return {domain: (a, h) for domain, (a, h) in counts.items()}


def planning_seconds(job: Job, groups: Sequence[JobGroup], index: Mapping[str, list[NodeInfo]]) -> float:
    """What the operator spends before `decide` for this job: its plan on all its groups' ready nodes
    (`admission/demand.planned_demand`, a fresh ledger: nothing remembered), the same with or without topology."""
    entries = [{"components": "actor", "nodeGroup": "a800", "placement": f"0-{8 * job.trainer - 1}"}]
    if job.rollout:
        entries.append({"components": "rollout", "nodeGroup": "h20", "placement": f"0-{8 * job.rollout - 1}"})
    if job.env:
        entries.append({"components": "env", "nodeGroup": "env", "placement": f"0-{job.env - 1}"})
    spec = RLJobSpec.model_validate({"nodeGroups": ["a800", "h20", "env"], "componentPlacement": entries})
    started = time.perf_counter()
    planned_demand(("bench", "job"), 1, spec, {}, groups, index, {}, Ledger())
    return time.perf_counter() - started


def queued(job: Job, exchanges: bool, cpu_only: bool) -> QueuedJob:
    demand = [GroupDemand("a800", job.trainer, frozenset(range(job.trainer)), exchanges=exchanges)]
    if job.rollout:
        demand.append(GroupDemand("h20", job.rollout, frozenset(range(job.rollout)), exchanges=exchanges))
    if job.env:
        demand.append(GroupDemand("env", job.env, frozenset(range(job.env)), cpu_only=cpu_only))
    return QueuedJob(("bench", "job"), 0, "2026-01-01T00:00:00Z", tuple(demand))


def admit(job: QueuedJob, pool: Pool) -> tuple[Admitted | None, float]:
    """The decision, and the best of 3 timings of it."""
    timings = []
    decision = None
    for _ in range(3):
        started = time.perf_counter()
        decision = decide([job], pool)[job.key]
        timings.append(time.perf_counter() - started)
    return (decision if isinstance(decision, Admitted) else None), min(timings)


@dataclass
class Outcome:
    racks: int
    blocks: int
    seconds: float
    """One `decide` for the job (best of 3)."""
    env_gpu_nodes: int
    """GPU nodes the job's env (CPU-only) pods hold that none of its GPU groups uses."""


def outcome(world: Fleet, decision: Admitted, seconds: float) -> Outcome:
    gpu = [n for group, nodes in decision.cluster if group != "env" for n in nodes if n in decision.nodes]
    env = [n for group, nodes in decision.cluster if group == "env" for n in nodes if n in decision.nodes]
    return Outcome(
        len({world.rack_of[n] for n in gpu}),
        len({world.block_of[n] for n in gpu}),
        seconds,
        len({n for n in env if n in world.gpu_nodes} - set(gpu)),
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--states", type=int, default=25)
    parser.add_argument("--seed", type=int, default=45)
    parser.add_argument("--kueue", action="store_true", help="also through Kueue TAS on a live cluster")
    args = parser.parse_args()
    rng = random.Random(args.seed)
    nodes = fleet(rng)
    world = read_fleet(nodes)
    per_state = max(1, args.jobs // args.states)
    rows: list[tuple[Job, int, int, Outcome, Outcome, Outcome]] = []
    planning: list[float] = []
    groups = [JobGroup(name, spec, nodegroup_status(spec, nodes, 1)) for name, spec in GROUP_SPECS.items()]
    index = {node.name: [node] for node in nodes}
    states: list[tuple[set[str], list[Job]]] = []
    # The groups' layouts by domain, shared as the operator shares them between the admissions of one snapshot
    # (built once here: the fleet's nodes and labels do not change).
    layouts: dict = {}
    for _ in range(args.states):
        busy = fragment(rng, world, rng.uniform(0.3, 0.7))
        jobs: list[Job] = []
        racks, blocks = free_per(world, busy, world.rack_of), free_per(world, busy, world.block_of)
        while len(jobs) < per_state:
            job = draw_job(rng)
            fewest_racks = fewest(racks, job.trainer, job.rollout)
            if fewest_racks is None:
                continue  # the free nodes cannot hold it: another job
            fewest_blocks = fewest(blocks, job.trainer, job.rollout)
            assert fewest_blocks is not None
            block_of_rack = {world.rack_of[n]: world.block_of[n] for n in world.rack_of}
            fewest_racks = fewest_racks_in_fewest_blocks(racks, block_of_rack, job.trainer, job.rollout, fewest_blocks)
            held = dict.fromkeys(busy, "job other/other")
            packed = Pool(
                world.ranked, held, domains=world.domains, levels=world.levels, gpu_nodes=world.gpu_nodes, memo=layouts
            )
            blind = Pool(world.by_name, held)
            ours, ours_s = admit(queued(job, True, True), packed)
            today, today_s = admit(queued(job, False, False), blind)
            no_cpu_rule, _ = admit(queued(job, True, False), packed)
            if ours is None or today is None or no_cpu_rule is None:
                continue  # the env pods found no free node: another job
            if DEBUG and outcome(world, ours, 0).racks > fewest_racks:
                print(
                    "over",
                    job,
                    fewest_racks,
                    fewest_blocks,
                    outcome(world, ours, 0),
                    {r: racks[r] for r in sorted(racks)},
                )
            jobs.append(job)
            planning.append(planning_seconds(job, groups, index))
            rows.append(
                (
                    job,
                    fewest_racks,
                    fewest_blocks,
                    outcome(world, ours, ours_s),
                    outcome(world, today, today_s),
                    outcome(world, no_cpu_rule, 0.0),
                )
            )
        states.append((busy, jobs))
    kueue_spans: list[tuple[int, int] | None] = []
    if args.kueue:
        kueue_spans = through_kueue(nodes, states, world)
    report(rows, kueue_spans, planning)


# -- Kueue's topology-aware scheduling on the same fleet --------------------------------------------------------

BUSY_TAINT = {"key": "bench.rlplace.io/busy", "value": "true", "effect": "NoSchedule"}
KUEUE = ("kueue.x-k8s.io", "v1beta2")
NAMESPACE = "bench-topology"
#: How long one Workload may wait for Kueue's admission before it counts as not admitted.
ADMIT_TIMEOUT_S = 30.0
KIND_OF = {"topologies": "Topology", "resourceflavors": "ResourceFlavor", "clusterqueues": "ClusterQueue"}


def kueue_objects() -> list[tuple[str, dict]]:
    """The Topology (block, rack, hostname), one ResourceFlavor per node type and a ClusterQueue over both
    (quota to spare: only the nodes' room decides)."""
    levels = [{"nodeLabel": BLOCK}, {"nodeLabel": RACK}, {"nodeLabel": HOSTNAME_LABEL}]
    objects = [("topologies", {"metadata": {"name": NAMESPACE}, "spec": {"levels": levels}})]
    flavors = []
    for kind in ("a800", "h20"):
        name = f"{NAMESPACE}-{kind}"
        flavor = {"metadata": {"name": name}, "spec": {"nodeLabels": {TYPE_LABEL: kind}, "topologyName": NAMESPACE}}
        objects.append(("resourceflavors", flavor))
        quota = [
            {"name": "cpu", "nominalQuota": 100_000},
            {"name": "memory", "nominalQuota": "1000Ti"},
            {"name": GPU_RESOURCE, "nominalQuota": 100_000},
        ]
        flavors.append({"name": name, "resources": quota})
    groups = [{"coveredResources": ["cpu", "memory", GPU_RESOURCE], "flavors": flavors}]
    queue = {"metadata": {"name": NAMESPACE}, "spec": {"namespaceSelector": {}, "resourceGroups": groups}}
    objects.append(("clusterqueues", queue))
    return [(plural, {"apiVersion": "/".join(KUEUE), "kind": KIND_OF[plural], **body}) for plural, body in objects]


def workload(job: Job, index: int) -> dict:
    """The Workload rlplace would make for the job's trainer and rollout (builders/workload.py), asking for the
    fewest racks as Kueue can: `preferred` rack (and one PodSet group where Kueue v0.19.2 takes one:
    admission/kueue.grouped; never here, the trainer's and the rollout's nodes differ)."""
    requests = {"cpu": "1", "memory": "1Gi", GPU_RESOURCE: str(GPUS_PER_NODE)}
    sets = [
        PodSet(kind, count, requests, LabelSelector(match_labels={TYPE_LABEL: kind}), level=RACK)
        for kind, count in (("a800", job.trainer), ("h20", job.rollout))
        if count
    ]
    sets = grouped(sets, range(len(sets)))
    body = build_workload(f"job-{index}", NAMESPACE, sets)
    body["metadata"]["name"] = f"job-{index}"
    return body


def through_kueue(nodes: Sequence[NodeInfo], states: list[tuple[set[str], list[Job]]], world: Fleet) -> list:
    """Per job of each state, the (racks, blocks) of the hosts Kueue's TAS granted (None: not admitted in time):
    the fleet as kwok nodes, each state's busy nodes tainted NoSchedule (TAS leaves nodes whose taints a PodSet
    does not tolerate), the jobs' Workloads one at a time, each deleted before the next."""
    spans: list[tuple[int, int] | None] = []
    with bench_cluster() as (api, _):
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)

        def create(node: NodeInfo) -> None:
            labels = {k: v for k, v in node.labels.items() if k != HOSTNAME_LABEL}
            core.create_node(fake_node_manifest(node.name, labels=labels, gpus=node.count(GPU_RESOURCE)))

        def taint(change: tuple[str, bool]) -> None:
            name, busy = change
            core.patch_node(name, {"spec": {"taints": [BUSY_TAINT] if busy else None}})

        made: list[tuple[str, str]] = []
        try:
            with ThreadPoolExecutor(8) as pool:
                list(pool.map(create, nodes))
            core.create_namespace({"metadata": {"name": NAMESPACE}})
            for plural, body in kueue_objects():
                custom.create_cluster_custom_object(*KUEUE, plural, body)
                made.append((plural, body["metadata"]["name"]))
            local = {"apiVersion": "/".join(KUEUE), "kind": "LocalQueue", "metadata": {"name": NAMESPACE}}
            custom.create_namespaced_custom_object(
                *KUEUE, NAMESPACE, "localqueues", {**local, "spec": {"clusterQueue": NAMESPACE}}
            )
            tainted: set[str] = set()
            index = 0
            for busy, jobs in states:
                changes = [(n, True) for n in busy - tainted] + [(n, False) for n in tainted - busy]
                with ThreadPoolExecutor(8) as pool:
                    list(pool.map(taint, changes))
                tainted = set(busy)
                time.sleep(3)  # Kueue's cache follows the nodes' taints from its watch
                for job in jobs:
                    index += 1
                    name = f"job-{index}"
                    spans.append(admitted_span(custom, workload(job, index), world))
                    with contextlib.suppress(ApiException):
                        custom.delete_namespaced_custom_object(*KUEUE, NAMESPACE, "workloads", name)
                    wait_for(lambda n=name: workload_gone(custom, n), 60, f"Workload {name} deleted")
                print(f"  Kueue: {index} jobs done", flush=True)
        finally:
            with contextlib.suppress(ApiException):
                core.delete_namespace(NAMESPACE)
            for plural, name in reversed(made):
                with contextlib.suppress(ApiException):
                    custom.delete_cluster_custom_object(*KUEUE, plural, name)
            delete_nodes(core, [node.name for node in nodes])
    return spans


def workload_gone(custom: Any, name: str) -> bool:
    try:
        custom.get_namespaced_custom_object(*KUEUE, NAMESPACE, "workloads", name)
    except ApiException as err:
        return err.status == 404
    return False


def admitted_span(custom: Any, body: dict, world: Fleet) -> tuple[int, int] | None:
    """Create the Workload, wait for Kueue's admission, and the (racks, blocks) its granted hosts span."""
    name = body["metadata"]["name"]
    custom.create_namespaced_custom_object(*KUEUE, NAMESPACE, "workloads", body)
    deadline = time.monotonic() + ADMIT_TIMEOUT_S
    while time.monotonic() < deadline:
        status = custom.get_namespaced_custom_object(*KUEUE, NAMESPACE, "workloads", name).get("status") or {}
        assignments = (status.get("admission") or {}).get("podSetAssignments") or []
        if assignments:
            hosts = [h for a in assignments for h in assigned_hosts(a.get("topologyAssignment") or {})]
            return len({world.rack_of[h] for h in hosts}), len({world.block_of[h] for h in hosts})
        time.sleep(0.1)
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    said = (conditions.get("QuotaReserved") or conditions.get("Admitted") or {}).get("message") or "no condition"
    NOT_ADMITTED.append(
        f"{name} ({body['spec']['podSets'][0]['count']}+{sum(p['count'] for p in body['spec']['podSets'][1:])} nodes): {said}"
    )
    return None


#: Why Workloads were not admitted in time (printed with the figures).
NOT_ADMITTED: list[str] = []


def share(count: int, total: int) -> str:
    return f"{count}/{total} ({100 * count / total:.1f}%)"


def report(
    rows: list[tuple[Job, int, int, Outcome, Outcome, Outcome]],
    kueue: list[tuple[int, int] | None],
    planning: list[float],
) -> None:
    total = len(rows)
    print(
        f"{total} jobs of {min(r[0].trainer + r[0].rollout for r in rows)}-"
        f"{max(r[0].trainer + r[0].rollout for r in rows)} nodes on 1,024 nodes (4 blocks x 8 racks x 32)"
    )
    methods = {"rlplace": 3, "today": 4}
    for name, index in methods.items():
        racks = [r[index].racks - r[1] for r in rows]
        blocks = [r[index].blocks - r[2] for r in rows]
        both = sum(1 for a, b in zip(racks, blocks, strict=True) if a == 0 and b == 0)
        print(
            f"  {name:8s} at the fewest racks {share(racks.count(0), total)}, blocks {share(blocks.count(0), total)},"
            f" both {share(both, total)}; racks over the fewest: mean {statistics.mean(racks):.2f}, worst "
            f"{max(racks)}; blocks over: mean {statistics.mean(blocks):.2f}, worst {max(blocks)}"
        )
    if kueue:
        judged = [(r, k) for r, k in zip(rows, kueue, strict=True) if k is not None]
        racks = [k[0] - r[1] for r, k in judged]
        blocks = [k[1] - r[2] for r, k in judged]
        both = sum(1 for a, b in zip(racks, blocks, strict=True) if a == 0 and b == 0)
        worse = [(r[3].racks, r[3].blocks, k) for r, k in judged if (r[3].racks, r[3].blocks) > k]
        print(
            f"  {'Kueue':8s} at the fewest racks {share(racks.count(0), len(judged))}, blocks "
            f"{share(blocks.count(0), len(judged))}, both {share(both, len(judged))}; racks over the fewest: mean "
            f"{statistics.mean(racks):.2f}, worst {max(racks)} ({len(kueue) - len(judged)} not admitted in time)"
        )
        print(f"  rlplace spans more (racks, then blocks) than Kueue TAS for {share(len(worse), len(judged))} jobs")
        for line in NOT_ADMITTED[:3]:
            print(f"  not admitted in {ADMIT_TIMEOUT_S:g} s: {line}")
    ours = [r[3].seconds * 1e3 for r in rows]
    today = [r[4].seconds * 1e3 for r in rows]
    print(
        f"  admission latency (one decide, best of 3): rlplace p50 {statistics.median(ours):.2f} ms, p95 "
        f"{sorted(ours)[int(0.95 * total)]:.2f} ms; today p50 {statistics.median(today):.2f} ms, p95 "
        f"{sorted(today)[int(0.95 * total)]:.2f} ms; ratio of means {statistics.mean(ours) / statistics.mean(today):.2f}x"
    )
    ours_total = [p + r[3].seconds for p, r in zip(planning, rows, strict=True)]
    today_total = [p + r[4].seconds for p, r in zip(planning, rows, strict=True)]
    print(
        f"  admission latency (planning + decide, as the operator admits a job): rlplace p50 "
        f"{1e3 * statistics.median(ours_total):.1f} ms, today p50 {1e3 * statistics.median(today_total):.1f} ms; "
        f"ratio of means {statistics.mean(ours_total) / statistics.mean(today_total):.3f}x"
    )
    with_rule = sum(r[3].env_gpu_nodes for r in rows)
    without = sum(r[5].env_gpu_nodes for r in rows)
    blind = sum(r[4].env_gpu_nodes for r in rows)
    envs = sum(r[0].env for r in rows)
    print(
        f"  {envs} env (CPU-only) pods: GPUs kept from GPU jobs by GPU nodes they hold: {with_rule * GPUS_PER_NODE}"
        f" with the CPU-first rule, {without * GPUS_PER_NODE} without it (packed), {blind * GPUS_PER_NODE} today"
    )


if __name__ == "__main__":
    main()

"""Moving the Replace ranks of a lost node to a free node of its NodeGroup while the job runs (docs/replace.md).

decide.py (through driver.py and replicas.py) asks for it with a `Relocate` action once the node is gone: deleted,
NotReady for RELOCATE_AFTER_SECONDS, or cordoned with the job's pod gone from it. Here, on the operator's indexes
and reservations as a provision pass reads them, the first free node of the group in rank order is reserved for
the job (rlplace's queue never gives it to another), the plan says the ranks run there (same ranks, node rank and
GPU numbers), the job's ConfigMap carries it (the new worker pod reads its node rank there before Ray starts), the
RayCluster's worker group may run on the new node instead of the lost one, and the lost pod is deleted at once so
KubeRay makes the new one. With no free node the job runs on with fewer replicas and says it waits for one.

A job a Workload admits (Kueue) moves its ranks to the node Kueue's own node replacement granted in the Workload
(restarts.follow_replaced_nodes asks with `Relocate.to`), never to one rlplace picks: the quota stays Kueue's. DRA
groups are left to wait for their node: their pods claim exactly the GPUs admission reserved, node by node.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlplace_operator.admission.ledger import Ledger
from rlplace_operator.admission.queue import admission_world, spare_node
from rlplace_operator.api import conditions as cond
from rlplace_operator.api.base import dump
from rlplace_operator.api.names import HOSTNAME_LABEL
from rlplace_operator.builders.configmap import build_placement_configmap
from rlplace_operator.cluster.selection import selector_matches
from rlplace_operator.cluster.snapshot import indexed
from rlplace_operator.reconcile.actions import Apply, MoveWorker, Outcome, Post, Relocate
from rlplace_operator.reconcile.pods import LOOK_AGAIN_SECONDS, planned_nodes, status_of, worker_pods
from rlplace_operator.reconcile.world import Job, World

#: A node NotReady this long has lost its ranks for good: they move (the kubelet's own eviction of its pods waits
#: five minutes, the taints' default toleration, which is a job's whole iteration budget many times over).
RELOCATE_AFTER_SECONDS = 20.0
#: Event reason of a move.
RANKS_MOVED = "RanksMoved"


def node_gone(node: Mapping[str, Any] | None, name: str, has_pod: bool, now_seconds: float) -> str | None:
    """Why the job's ranks on node `name` are lost for good (None: the node may come back under them).
    `now_seconds`: seconds since the epoch, to age its NotReady condition."""
    if node is None:
        return f"node {name} no longer exists"
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready" and condition.get("status") != "True":
            since = cond.parse_time(condition.get("lastTransitionTime"))
            if since is not None and now_seconds - since.timestamp() >= RELOCATE_AFTER_SECONDS:
                state = "NotReady" if condition.get("status") == "False" else "unreachable"
                return f"node {name} {state} for {now_seconds - since.timestamp():.0f} s"
    if (node.get("spec") or {}).get("unschedulable") and not has_pod:
        return f"node {name} is cordoned and the job's pod on it is gone"
    return None


def relocate(job: Job, world: World, ledger: Ledger, decided: Outcome) -> Outcome:
    """`decided` (a running job's outcome with Relocate actions) with the moves made: a node reserved for each lost
    node where the group has one, the ConfigMap, RayCluster and status that say so, and an Event per move."""
    assert world.snapshot is not None and world.plan is not None
    status = dump(decided.status)
    moves = [a for a in decided.actions if isinstance(a, Relocate)]
    actions: list[Any] = [a for a in decided.actions if not isinstance(a, Relocate)]
    plan = world.plan
    planned = frozenset(planned_nodes(status))
    admission = admission_world(ledger, world.snapshot)
    cluster = status.get("rayCluster") or ""
    for move in moves:
        groups = node_groups(job, world, ledger, move.node)
        if move.to is not None:
            spare = move.to
            ledger.hold(job.key, (planned - {move.node}) | {spare})
        else:
            spare = next(
                (n for g in groups if (n := spare_node(ledger, admission, job.key, g, planned, move.node))), None
            )
        entries = [e for c in status.get("components") or [] for e in c.get("lost") or [] if e["node"] == move.node]
        if spare is None:
            where = " or ".join(groups)
            for entry in entries:
                entry["why"] = cond.brief(f"{move.why}; no free node of NodeGroup {where} to move them to yet", 200)
            continue
        plan = plan.moved(move.node, spare)
        planned = (planned - {move.node}) | {spare}
        lost_info = world.nodes.get(move.node) or {}
        host_from = ((lost_info.get("metadata") or {}).get("labels") or {}).get(HOSTNAME_LABEL) or move.node
        spare_info = indexed(world.snapshot.nodes, spare)
        host_to = spare_info.labels.get(HOSTNAME_LABEL, "") if spare_info is not None else ""
        # The lost node's pod, and a pod KubeRay made again that waits unbound: it has the old template (the
        # lost node's affinity) and would wait for ever; KubeRay makes the next one from the new template.
        pods = tuple(
            p["metadata"]["name"]
            for p in worker_pods(world.pods)
            if (p.get("spec") or {}).get("nodeName") in (move.node, None, "")
        )
        actions.append(MoveWorker(cluster, move.node, spare, host_from, host_to, pods))
        for component in (status.get("placement") or {}).get("components") or []:
            component["nodes"] = [spare if n == move.node else n for n in component.get("nodes") or []]
        moved = []
        for component in status.get("components") or []:
            for entry in component.get("lost") or []:
                if entry["node"] == move.node:
                    entry.update(node=spare, why=cond.brief(f"{move.why}; moved to node {spare}", 200))
                    moved.append(f"'{component['name']}' ranks {', '.join(map(str, entry['ranks']))}")
        message = f"{'; '.join(moved) or 'its ranks'} move from node {move.node} ({move.why}) to node {spare}"
        actions.append(Post(True, RANKS_MOVED, message))
    if plan is not world.plan:
        configmap = build_placement_configmap(job.name, plan, job.framework.configmap_files())
        actions.insert(0, Apply((configmap,), job.body()))
    return Outcome(tuple(actions), status_of(status), LOOK_AGAIN_SECONDS)


def node_groups(job: Job, world: World, ledger: Ledger, node: str) -> list[str]:
    """The job's NodeGroups whose selector the lost node matches (its labels as the node index last saw them), in
    the job's order; all of the job's groups when the node is gone from the index too (deleted)."""
    assert world.snapshot is not None
    names = list(job.spec.get("nodeGroups") or [])
    info = indexed(world.snapshot.nodes, node)
    if info is None:
        return names
    found = []
    for name in names:
        entry = indexed(world.snapshot.nodegroups, name)
        if entry is not None and selector_matches(ledger.group(name, entry).spec.node_selector, info.labels):
            found.append(name)
    return found or names


def gone_nodes(world: World, status: Mapping[str, Any], lost: Mapping[str, str]) -> dict[str, str]:
    """The running job's lost Replace nodes (`lost`: node -> why its pod is lost) that are gone for good, with why;
    never a DRA node (its pod claims exactly the GPUs admission reserved there: it waits for the node)."""
    claimed = {c.get("node") for c in status.get("gpuClaims") or []}
    on_node = {(p.get("spec") or {}).get("nodeName") for p in worker_pods(world.pods)}
    gone = {}
    for node in lost:
        if node not in claimed:
            why = node_gone(world.nodes.get(node), node, node in on_node, world.now.timestamp())
            if why is not None:
                gone[node] = why
    return gone

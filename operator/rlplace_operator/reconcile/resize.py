"""A running job whose Replace components' replicas changed, resized in place (docs/elastic.md).

A change of `spec.components[].replicas` is a new spec, planned again by provision.py like any other; the plan
keeps every rank it keeps where it runs (`placement_core.grammar.resized_placement`), so the running driver goes
on: it reads the rewritten plan at its next step and starts the ranks added, or stops the ranks taken away
(`placement_core.launcher.WorkerGroup.resize`). What this module adds to that pass, and to the passes after it:

- the job's RayCluster follows the plan (`ResizeWorkers`): KubeRay makes the pods of the nodes added; the head pod
  is nudged so that the driver's copy of the ConfigMap is the new plan within seconds;
- status.components says which ranks were added: on a node the job holds, they wait for the driver's binding
  report (`unverified`, as replaced ranks do); on a node added, they are `starting` until its pod is Ready (not
  lost: they never ran), then wait for the report;
- a worker pod on a node the plan no longer has is taken out of the RayCluster (KubeRay deletes exactly it) once
  the driver stopped its ranks (its binding report counts no more of each component's processes than the plan
  has), so no step in flight loses its work; the node is free for the queue from the plan on.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from placement_core.plan import OnLoss, Plan
from rlplace_operator.api import conditions as cond
from rlplace_operator.api.names import KUBERAY_GROUP_LABEL, RAY_CLUSTER_POD_LABEL
from rlplace_operator.builders.raycluster import resized_workers
from rlplace_operator.reconcile.actions import DropWorkers, Post, ResizeWorkers
from rlplace_operator.reconcile.pods import head_pods, planned_nodes, running_and_ready, worker_pods

#: What a starting rank's entry says until the pod problems of the next look say more.
POD_TO_COME = "its worker pod is being made"


def plan_digest(plan: Plan) -> str:
    """A short digest of the plan: what the head pod's annotation says it should see."""
    return hashlib.sha256(plan.to_json().encode()).hexdigest()[:16]


def resize_workers(
    before: Mapping[str, Any],
    child: Mapping[str, Any],
    nodes: Sequence[str],
    pods: Sequence[Mapping[str, Any]],
    plan: Plan,
) -> ResizeWorkers | None:
    """What makes a running job follow its plan re-made on `nodes` (`child`: its RayJob as built for that plan): its
    RayCluster's worker groups when the plan added nodes (a shrink keeps its pods until the driver stopped their
    ranks: surplus_pods), and its head pod nudged to see the plan. None when the job holds no RayCluster yet."""
    cluster = before.get("rayCluster")
    if not cluster:
        return None
    heads = head_pods(pods)
    patch = None if set(nodes) <= planned_nodes(before) else resized_workers(child)
    return ResizeWorkers(cluster, patch, heads[0]["metadata"]["name"] if heads else None, plan_digest(plan))


def resized_components(
    before: Mapping[str, Any], plan: Plan, since: str
) -> tuple[list[dict[str, Any]] | None, list[Post]]:
    """status.components once a running job's plan is re-made as `plan`, and an Event per component whose count
    changed: the ranks added wait for the driver's report, those on a node the job did not hold start first
    (`since`: now, RFC 3339).
    (None, []) when no Replace component's count changed."""
    held = planned_nodes(before)
    was = {c.get("name"): c for c in before.get("components") or []}
    # The counts the job ran with: status.placement's, the plan it was last given.
    ran = {c.get("name"): int(c.get("processes") or 0) for c in (before.get("placement") or {}).get("components") or []}
    # The processes the driver's last binding report counted: a change overtaken before the driver acted on it (a
    # quick second patch) leaves ranks below the old count that it never ran; they wait for its report too.
    reported = {b.get("name"): int(b.get("processes") or 0) for b in before.get("binding") or []}
    components: list[dict[str, Any]] = []
    events: list[Post] = []
    for component in plan.components:
        entry = dict(was.get(component.name) or {})
        count = component.world_size
        old = ran.get(component.name, count)
        if component.on_loss is not OnLoss.REPLACE or old == count:
            if entry:
                components.append(entry)
            continue
        added = component.processes[old:]
        by_node: dict[str, list[int]] = {}
        for process in added:
            if process.node_name not in held:
                by_node.setdefault(process.node_name, []).append(process.rank)
        checked = min(old, reported.get(component.name, old))
        unverified = sorted(
            {r for r in entry.get("unverified") or [] if r < count} | {p.rank for p in component.processes[checked:]}
        )
        starting = [
            {"node": node, "ranks": ranks, "since": since, "why": POD_TO_COME} for node, ranks in by_node.items()
        ]
        entry.update(name=component.name, onLoss=str(component.on_loss), desired=count)
        # Ranks lost beyond the new count are not replaced any more.
        lost = [{**e, "ranks": [r for r in e["ranks"] if r < count]} for e in entry.get("lost") or []]
        lost = [e for e in lost if e["ranks"]]
        # Live as replicas.py counts: ranks whose pod runs on their node (the pods of added nodes are to come).
        entry["live"] = count - sum(len(e["ranks"]) for e in (*lost, *starting))
        for key, value in (("unverified", unverified), ("starting", starting)):
            if value:
                entry[key] = value
            else:
                entry.pop(key, None)
        if lost:
            entry["lost"] = lost
        else:
            entry.pop("lost", None)
        components.append(entry)
        if count > old:
            where = ", ".join(
                sorted({f"node {p.node_name}" + (" (added)" if p.node_name not in held else "") for p in added})
            )
            change = f"ranks {old}-{count - 1} start on {where}" if count - old > 1 else f"rank {old} starts on {where}"
        else:
            change = f"ranks {count}-{old - 1} stop" if old - count > 1 else f"rank {count} stops"
        events.append(
            Post(
                False,
                cond.RESIZED,
                f"component '{component.name}' {old} -> {count} replicas in place: {change} at the driver's next step",
            )
        )
    if not events:
        return None, []
    return components, events


def draining(status: Mapping[str, Any]) -> bool:
    """Whether the driver's last binding report counts more processes of a component than the job's placement has:
    a resize took ranks away and the driver has not said yet that it stopped them (its next report will)."""
    planned = {c.get("name"): c.get("processes") for c in (status.get("placement") or {}).get("components") or []}
    return any(
        planned.get(b.get("name")) is not None and int(b.get("processes") or 0) > int(planned[b.get("name")])
        for b in status.get("binding") or []
    )


def _restarted(pod: Mapping[str, Any]) -> bool:
    """Whether a container of the pod restarted (it crash-loops)."""
    return any(int(c.get("restartCount") or 0) > 0 for c in (pod.get("status") or {}).get("containerStatuses") or [])


def surplus_pods(
    status: Mapping[str, Any], cluster: str | None, pods: Sequence[Mapping[str, Any]], plan: Plan | None
) -> DropWorkers | None:
    """The worker pods of the job's Ray cluster on nodes its plan no longer has, to take out of it now: once the
    driver's binding report counts no more processes of any component than the plan has (it stopped the ranks
    taken away). Pods Running and Ready, and pods that crash-loop (a container restarted): a grow's pod that a shrink
    overtook before it started never becomes Ready (its entry script refuses a node the plan no longer has). Not a
    pod that is only not Ready yet: right after a Replace move the status this pass reads may still name the lost
    node, and the pod KubeRay just made on the node moved to would look surplus (dropping it lowers the group's
    count and the ranks have no pod)."""
    if plan is None or not cluster:
        return None
    nodes = planned_nodes(status)
    surplus = {
        p["metadata"]["name"]: ((p["metadata"].get("labels") or {}).get(KUBERAY_GROUP_LABEL, ""), p["spec"]["nodeName"])
        for p in worker_pods(pods)
        if (p["metadata"].get("labels") or {}).get(RAY_CLUSTER_POD_LABEL) == cluster
        and (p.get("spec") or {}).get("nodeName")
        and p["spec"]["nodeName"] not in nodes
        and (running_and_ready(p) is None or _restarted(p))
    }
    if not surplus or draining(status):
        return None  # none, or the driver still runs ranks the plan took away: their step finishes first
    return DropWorkers(cluster, surplus)

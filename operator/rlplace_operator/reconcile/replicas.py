"""Replicas of Replace components (spec.components[].onLoss: Replace) lost while the job runs (docs/replace.md).

A running job whose lost pods hold only ranks of Replace components stays Running: its driver goes on with the
live replicas while KubeRay makes the pod again (on the same node once it is back, or on the node the operator
moves the ranks to) and the launcher starts the lost ranks in it. This module says, from the plan and the pods,
which ranks are lost and whether the job may run on without them, keeps status.components (desired, live,
replaced, lost) and the Events of a loss and a replacement, and names the replaced ranks whose binding the
driver has not reported yet (the next binding report after them must cover them).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from placement_core.plan import OnLoss, Plan
from rlplace_operator.api import conditions as cond
from rlplace_operator.reconcile.actions import Post
from rlplace_operator.reconcile.pods import PodProblems


def has_replace(spec: Mapping[str, Any]) -> bool:
    """Whether the job's spec makes any component Replace."""
    return any(c.get("onLoss") == OnLoss.REPLACE for c in spec.get("components") or [])


def replaced_unverified(status: Mapping[str, Any]) -> dict[str, list[int]]:
    """Component -> its replaced ranks whose binding the driver has not reported yet (status.components)."""
    return {c["name"]: list(c["unverified"]) for c in status.get("components") or [] if c.get("unverified")}


def replicas_pending(status: Mapping[str, Any]) -> bool:
    """Whether the job runs without some of its ranks or waits for their binding report: looked at again soon."""
    return any(c.get("lost") or c.get("unverified") or c.get("starting") for c in status.get("components") or [])


def for_new_attempt(status: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    """status.components as a new attempt starts: no rank lost or awaiting its binding report (every process of
    the attempt is new, and its own report verifies them all); the counts of replaced ranks stay."""
    components = status.get("components")
    if not components:
        return components
    return [{k: v for k, v in c.items() if k not in ("lost", "unverified", "starting")} for c in components]


def ranks_by_node(plan: Plan) -> dict[str, list[tuple[str, int, OnLoss]]]:
    """Node -> (component, rank, onLoss) of every process planned on it."""
    found: dict[str, list[tuple[str, int, OnLoss]]] = {}
    for component, process in plan.processes():
        found.setdefault(process.node_name, []).append((component.name, process.rank, component.on_loss))
    return found


def only_replace_ranks(plan: Plan, nodes: Sequence[str]) -> bool:
    """Whether every process planned on `nodes` belongs to a Replace component (and there is one)."""
    found = [on_loss for node, ranks in ranks_by_node(plan).items() if node in nodes for _, _, on_loss in ranks]
    return bool(found) and all(on_loss is OnLoss.REPLACE for on_loss in found)


def _ranks_text(ranks: Sequence[int]) -> str:
    ranks = sorted(ranks)
    if len(ranks) > 1 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"ranks {ranks[0]}-{ranks[-1]}"
    return f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}"


@dataclass
class Replicas:
    """What the pods say of the job's replicas now."""

    components: list[dict[str, Any]]
    """status.components (wire form)."""
    replaceable: bool
    """Every lost pod holds only Replace ranks (and the head runs): the job runs on while they are replaced."""
    lost: dict[str, str]
    """Node -> why its pod is lost."""
    events: list[Post] = field(default_factory=list)
    unverified: dict[str, list[int]] = field(default_factory=dict)
    """Component -> ranks replaced whose binding the driver has not reported yet."""

    def summary(self) -> str:
        """One line: which ranks are lost or starting and how many of each component run."""
        parts = [
            f"component '{c['name']}' runs {c['live']}/{c['desired']} ranks while "
            + "; ".join(
                [
                    *(
                        f"{_ranks_text(lost['ranks'])} on node {lost['node']} are replaced ({lost['why']})"
                        for lost in c.get("lost") or []
                    ),
                    *(
                        f"{_ranks_text(new['ranks'])} on node {new['node']} start ({new['why']})"
                        for new in c.get("starting") or []
                    ),
                ]
            )
            for c in self.components
            if c.get("lost") or c.get("starting")
        ]
        return "; ".join(parts)


def _ranks_verified_at(status: Mapping[str, Any]) -> dt.datetime | None:
    """When the ranks that run now were last verified (BindingVerified became True), else when the driver started."""
    for condition in status.get("conditions") or []:
        if condition.get("type") == cond.BINDING_VERIFIED and condition.get("status") == "True":
            return cond.parse_time(condition.get("lastTransitionTime"))
    return cond.parse_time(status.get("driverStartTime"))


def _holder(problems: PodProblems, node: str, held_since: dt.datetime | None) -> str | None:
    """The uid of the pod on `node` if it is the one whose processes held the lost ranks: made before they were last
    verified. A pod made since (KubeRay's new pod for a deleted one, seen before the loss was) holds none of them:
    once it is Ready its ranks were started again, not back."""
    created = cond.parse_time(problems.created.get(node))
    if held_since is None or created is None or created > held_since:
        return None
    return problems.pods.get(node)


def replicas(plan: Plan, before: Mapping[str, Any], problems: PodProblems, now: dt.datetime) -> Replicas:
    """The replicas of a running job with Replace components, from its plan and what `pod_problems` found; `before`
    is its status as last written (the losses seen then, the count of replaced ranks)."""
    on_node = ranks_by_node(plan)
    lost_nodes = dict(problems.workers)
    replaceable = problems.head is None and all(
        on_loss is OnLoss.REPLACE for node in lost_nodes for _, _, on_loss in on_node.get(node, ())
    )
    previous = {c.get("name"): c for c in before.get("components") or []}
    held_since = _ranks_verified_at(before)
    components: list[dict[str, Any]] = []
    events: list[Post] = []
    unverified: dict[str, list[int]] = {}
    for component in plan.components:
        was = previous.get(component.name) or {}
        was_lost = {entry["node"]: entry for entry in was.get("lost") or []}
        was_starting = {entry["node"]: entry for entry in was.get("starting") or []}
        lost = []
        starting = []
        for node, why in lost_nodes.items():
            ranks = [rank for name, rank, _ in on_node.get(node, ()) if name == component.name]
            if not ranks:
                continue
            if node in was_starting:  # added by a resize: its pod is still to come (its ranks await their report)
                starting.append({**was_starting[node], "ranks": ranks, "why": cond.brief(why, 200)})
                continue
            since = (was_lost.get(node) or {}).get("since") or cond.timestamp(now)
            if node not in was_lost:
                events.append(
                    Post(
                        True,
                        cond.RANKS_LOST,
                        f"component '{component.name}' {_ranks_text(ranks)} on node {node} lost ({why})"
                        + (": replacing while the job runs" if component.on_loss is OnLoss.REPLACE else ""),
                    )
                )
            pod = (was_lost.get(node) or {}).get("pod") if node in was_lost else _holder(problems, node, held_since)
            entry = {"node": node, "ranks": ranks, "since": since, "why": cond.brief(why, 200)}
            lost.append({**entry, **({"pod": pod} if pod else {})})
        replaced = int(was.get("replaced") or 0)
        back = [entry for node, entry in was_lost.items() if node not in lost_nodes]
        # Ranks beyond the plan's count (a resize took them away) are awaited no more.
        pending = [rank for rank in was.get("unverified") or [] if rank < component.world_size]
        for node, entry in was_starting.items():
            if node not in lost_nodes and node in on_node:
                ranks = f"component '{component.name}' {_ranks_text(entry['ranks'])}"
                events.append(Post(False, cond.RANKS_STARTED, f"{ranks} on node {node}: its worker pod is Ready"))
        for entry in back:
            started = cond.parse_time(entry.get("since"))
            after = f", {(now - started).total_seconds():.0f} s after the loss" if started else ""
            ranks = f"component '{component.name}' {_ranks_text(entry['ranks'])}"
            if entry.get("pod") and problems.pods.get(entry["node"]) == entry["pod"]:
                # The same pod is Ready again (its node was NotReady for a while): its processes never stopped,
                # so nothing was replaced and no new binding report will come.
                events.append(
                    Post(False, cond.RANKS_BACK, f"{ranks} on node {entry['node']}: their pod is Ready again{after}")
                )
                continue
            replaced += len(entry["ranks"])
            pending += entry["ranks"]
            events.append(Post(False, cond.RANKS_REPLACED, f"{ranks} run again on node {entry['node']}{after}"))
        if pending:
            unverified[component.name] = sorted(set(pending))
        components.append(
            {
                "name": component.name,
                "onLoss": str(component.on_loss),
                "desired": component.world_size,
                "live": component.world_size - sum(len(entry["ranks"]) for entry in (*lost, *starting)),
                **({"replaced": replaced} if replaced else {}),
                **({"lost": lost} if lost else {}),
                **({"starting": starting} if starting else {}),
                **({"unverified": unverified[component.name]} if component.name in unverified else {}),
            }
        )
    return Replicas(components, replaceable, lost_nodes, events, unverified)

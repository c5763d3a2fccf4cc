"""Which of a job's processes died, and why: the pod's deletionTimestamp, phase Failed (evicted), a terminated
container (OOMKilled, exit code), its node's Ready condition, or, for a pod already gone, the kubelet's events
about it (Killing, Evicted, ...). The driver's log adds the launcher's own line (WorkerDiedError names the
component and rank)."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Mapping, Sequence

from placement_core.plan import Plan
from rlplace_operator.api.conditions import parse_time
from rlplace_operator.api.names import SUBMITTER_CONTAINER
from rlplace_operator.diagnosis.causes import (
    CONTAINER_EXITED,
    NODE_NOT_READY,
    OOM_KILLED,
    POD_DELETED,
    POD_EVICTED,
    WORKER_DIED,
    Cause,
    PodView,
    container_limit,
    container_statuses,
    cut,
    event_first_time,
    event_note,
    group_rank,
    involved_object,
    make_cause,
    pod_views,
    role_from_name,
)

# -- a lost process ------------------------------------------------------------------------------------------

#: The launcher's one-line errors in a driver's log (placement_core.errors), WorkerDiedError first.
_LAUNCHER_LINE = re.compile(r"\b(WorkerDiedError|LaunchError): (.+)$")
_DIED_RANK = re.compile(r"component '([^']+)' rank (\d+) \(node rank (\d+)\)")
#: Kubelet and controller events that say a pod (maybe gone since) was stopped, and why.
_LOSS_EVENTS = {
    "Killing": POD_DELETED,
    "Evicted": POD_EVICTED,
    "Preempted": POD_EVICTED,
    "TaintManagerEviction": NODE_NOT_READY,
    "NodeNotReady": NODE_NOT_READY,
    "OOMKilling": OOM_KILLED,
}


def _launcher_line(driver_log_tail: str) -> str | None:
    """The last line of the launcher's own error in the driver's log ([state-dump] lines never match)."""
    found = None
    for line in driver_log_tail.splitlines():
        if "[state-dump]" in line:
            continue
        match = _LAUNCHER_LINE.search(line)
        if match and (found is None or match.group(1) == "WorkerDiedError" or found[0] != "WorkerDiedError"):
            found = (match.group(1), match.group(2).strip())
    return found[1] if found else None


def _node_not_ready(nodes: Mapping[str, Mapping], name: str | None) -> tuple[dt.datetime | None, str] | None:
    if not name or name not in nodes:
        return None
    status = nodes[name].get("status") or {}
    taints = [t.get("key", "") for t in (nodes[name].get("spec") or {}).get("taints") or []]
    for condition in status.get("conditions") or []:
        if condition.get("type") == "Ready" and condition.get("status") != "True":
            state = "NotReady" if condition.get("status") == "False" else "unreachable"
            detail = condition.get("message") or condition.get("reason") or ""
            return parse_time(condition.get("lastTransitionTime")), f"node '{name}' {state}: {detail}"
    if "node.kubernetes.io/unreachable" in taints or "node.kubernetes.io/not-ready" in taints:
        return None, f"node '{name}' {'unreachable' if 'node.kubernetes.io/unreachable' in taints else 'NotReady'}"
    return None


def _terminated(pod: Mapping, oldest: dt.datetime | None) -> tuple[dt.datetime | None, str, Mapping, str] | None:
    """The first terminated container of a pod that did not exit cleanly, at `oldest` or later when given:
    (when, container, state, kind)."""
    for status in container_statuses(pod):
        if status.get("name") == SUBMITTER_CONTAINER:
            continue  # SidecarMode's submitter in the head pod exits with the driver: the failure, not its cause
        for state in ((status.get("state") or {}).get("terminated"), (status.get("lastState") or {}).get("terminated")):
            if state and (state.get("exitCode") not in (0, None) or state.get("reason") == "OOMKilled"):
                when = parse_time(state.get("finishedAt"))
                if oldest is not None and when is not None and when < oldest:
                    continue
                return when, status.get("name") or "?", state, state.get("reason") or ""
    return None


def _pod_loss(
    info: PodView, pod: Mapping, nodes: Mapping[str, Mapping], oldest: dt.datetime | None
) -> tuple[dt.datetime | None, str, str] | None:
    """(when, reason, what happened) for a pod of the job that is lost or losing its processes (a container's
    exit only at `oldest` or later when given)."""
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    if info.role == "submitter":
        return None  # the submitter ends with the driver; its exit is the failure, not its cause
    node = _node_not_ready(nodes, info.node)
    if node is not None:
        return node[0], NODE_NOT_READY, node[1]
    if status.get("phase") == "Failed" and status.get("reason") == "Evicted":
        return None, POD_EVICTED, f"evicted: {status.get('message', '')}"
    deleted_at = _deletion_started(meta)
    terminated = _terminated(pod, oldest)
    if terminated is not None and deleted_at is not None and terminated[0] is not None and terminated[0] >= deleted_at:
        # The container stopped because its pod was being deleted (its SIGTERM's exit code): the deletion is why.
        terminated = None
    if terminated is not None:
        when, container, state, kind = terminated
        if kind == "OOMKilled":
            limit = container_limit(pod, container, "memory")
            return (
                when,
                OOM_KILLED,
                f"container '{container}' OOMKilled" + (f" (memory limit {limit})" if limit else ""),
            )
        code = state.get("exitCode")
        signal = f", signal {state['signal']}" if state.get("signal") else ""
        return (
            when,
            CONTAINER_EXITED,
            f"container '{container}' exited with code {code}" + (f" ({kind}{signal})" if kind else signal),
        )
    if meta.get("deletionTimestamp"):
        return deleted_at, POD_DELETED, "deleted"
    return None


def _deletion_started(meta: Mapping) -> dt.datetime | None:
    """When the pod's deletion was asked for (its deletionTimestamp less the grace period), if it is being deleted."""
    deleted = parse_time(meta.get("deletionTimestamp"))
    if deleted is None:
        return None
    return deleted - dt.timedelta(seconds=meta.get("deletionGracePeriodSeconds") or 0)


def _gone_pod(name: str, host: str | None, clusters: set[str]) -> PodView | None:
    """A pod known only by name: the head or a worker of one of `clusters` (KubeRay names them
    <cluster>-head-<random> and <cluster>-<group>-worker-<random>); None when it is no pod of theirs. Without
    clusters (none of the job's pods is left) any Ray-looking name counts."""
    rests = [name[len(cluster) + 1 :] for cluster in clusters if name.startswith(f"{cluster}-")] or (
        [] if clusters else [name]
    )
    for rest in rests:
        role = "head" if rest.startswith("head-") or "-head-" in rest else role_from_name(rest)
        if role != "pod":
            return PodView(name, role, group_rank(rest) if role == "worker" else None, host, None)
    return None


def _gone_pod_loss(
    events: Sequence[Mapping], present: set[str], clusters: set[str], nodes: Mapping[str, Mapping]
) -> list[tuple[dt.datetime | None, PodView, str, str]]:
    """Losses of the job's pods that no longer exist, from the events about them (the kubelet names the node
    it runs on as the event's source host)."""
    losses: dict[str, tuple[dt.datetime | None, PodView, str, str]] = {}
    for event in events:
        involved = involved_object(event)
        name = involved.get("name") or ""
        reason = _LOSS_EVENTS.get(event.get("reason") or "")
        if involved.get("kind") != "Pod" or name in present or reason is None:
            continue
        host = (event.get("source") or {}).get("host") or event.get("reportingInstance") or None
        info = _gone_pod(name, host, clusters)
        if info is None:
            continue
        when = event_first_time(event)
        node = _node_not_ready(nodes, host)
        what = {
            POD_DELETED: "deleted",
            POD_EVICTED: f"evicted: {event_note(event)}",
            NODE_NOT_READY: node[1] if node else event_note(event),
            OOM_KILLED: f"OOMKilled: {event_note(event)}",
        }[reason]
        if node is not None:
            reason = NODE_NOT_READY
            what = node[1]
        earlier = losses.get(name)
        if earlier is None or (when is not None and (earlier[0] is None or when < earlier[0])):
            losses[name] = (when, info, reason, what)
    return list(losses.values())


def seen_before(
    pods: Sequence[Mapping], events: Sequence[Mapping], ended: dt.datetime
) -> tuple[list[Mapping], list[Mapping]]:
    """The pods and events as they were before the driver ended at `ended`: a pod whose deletion began then or
    later (KubeRay deleting the cluster of a finished RayJob) and its events are left out, as are events first
    seen then or later: what happened after the driver's end is not why it failed."""
    late: set[str] = set()
    kept_pods = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        deleted = _deletion_started(meta)
        if deleted is not None and deleted >= ended:
            late.add(meta.get("name") or "")
            continue
        kept_pods.append(pod)
    kept_events = [
        e
        for e in events
        if involved_object(e).get("name") not in late and ((when := event_first_time(e)) is None or when < ended)
    ]
    return kept_pods, kept_events


def lost_process(
    pods: Sequence[Mapping],
    events: Sequence[Mapping],
    nodes: Mapping[str, Mapping],
    plan: Plan | None,
    driver_log_tail: str,
    since: dt.datetime | None = None,
) -> Cause | None:
    """Which of the job's pods died first and why, with the plan's processes on it and the launcher's own line
    from the driver's log; None when nothing shows a loss.

    `pods` are the job's current Ray pods, `events` the events about them (including pods already deleted, whose
    names start with their RayCluster's name), `nodes` the job's nodes by name, `plan` the job's plan (None
    when unreadable), `driver_log_tail` the end of the driver's log. The earliest loss is the cause: when the
    head dies its workers follow, not the other way round. `since` is when the failed attempt's driver started:
    a loss known to be older (a worker container that exited and restarted while KubeRay made a new head, an
    event of the attempt before) is not why it failed. A node that is not Ready counts whenever it turned so.
    """
    # Kubernetes times have whole seconds, Ray's start time milliseconds: a loss in the driver's first second
    # may read up to 1 s earlier than the start.
    oldest = since - dt.timedelta(seconds=1) if since is not None else None
    ordered = pod_views(pods)
    present = {info.name for info, _ in ordered}
    clusters = {
        cluster
        for _, pod in ordered
        if (cluster := ((pod.get("metadata") or {}).get("labels") or {}).get("ray.io/cluster"))
    }
    losses: list[tuple[dt.datetime | None, PodView, str, str]] = []
    for info, pod in ordered:
        loss = _pod_loss(info, pod, nodes, oldest)
        if loss is not None:
            losses.append((loss[0], info, loss[1], loss[2]))
    losses += _gone_pod_loss(events, present, clusters, nodes)
    if oldest is not None:
        losses = [loss for loss in losses if loss[2] == NODE_NOT_READY or loss[0] is None or loss[0] >= oldest]
    launcher = _launcher_line(driver_log_tail)
    if losses:
        far_future = dt.datetime.max.replace(tzinfo=dt.UTC)
        _, info, reason, what = min(losses, key=lambda item: (item[0] or far_future, item[1].order))
        message = f"{info.describe(plan)} {what}"
        if launcher:
            message = f"{cut(message, 180)}; launcher: {launcher}"
        return make_cause(reason, message, node=info.node)
    if launcher:
        died = _DIED_RANK.search(launcher)
        if died and plan is not None:
            node = next(
                (p.node_name for c, p in plan.processes() if c.name == died.group(1) and p.rank == int(died.group(2))),
                None,
            )
            if node:
                return make_cause(WORKER_DIED, f"{launcher} (on node '{node}')", node=node)
        return make_cause(WORKER_DIED, launcher)
    return None

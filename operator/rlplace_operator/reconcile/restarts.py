"""A job's attempts: restarts on a lost process, pod or node (spec.run.restartPolicy; docs/restarts.md), and the
moves its Workload admitter makes (an eviction, nodes replaced under it). Each stops the current attempt, gives
its nodes back and queues the job again as its next attempt, which resumes from its checkpoint.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlplace_operator.admission import admitter
from rlplace_operator.api import conditions as cond
from rlplace_operator.api.names import ATTEMPT_ANNOTATION
from rlplace_operator.api.rljob import DEFAULT_MAX_RESTARTS, RestartPolicy
from rlplace_operator.api.status import MAX_RESTARTS_KEPT, JobPhase, holds_nodes
from rlplace_operator.diagnosis.causes import (
    CONTAINER_EXITED,
    NODE_NOT_READY,
    OOM_KILLED,
    POD_DELETED,
    POD_EVICTED,
    WORKER_DIED,
    Cause,
)
from rlplace_operator.diagnosis.losses import lost_process, seen_before
from rlplace_operator.reconcile.actions import (
    DeleteChildren,
    Outcome,
    Post,
    ReleaseNodes,
    ReleaseWorkload,
    Relocate,
    RequestCheckpoint,
)
from rlplace_operator.reconcile.pods import LOOK_AGAIN_SECONDS, status_of
from rlplace_operator.reconcile.replicas import for_new_attempt, only_replace_ranks, ranks_by_node
from rlplace_operator.reconcile.world import Job, World

#: The condition reason and Event of a restart the operator makes.
RESTARTING = "Restarting"
#: The failure causes (diagnosis.lost_process) a restart can help with: something was lost, not the driver's
#: own error (that would fail again the same way).
RESTARTABLE = frozenset(
    {
        POD_DELETED,
        POD_EVICTED,
        OOM_KILLED,
        NODE_NOT_READY,
        CONTAINER_EXITED,
        WORKER_DIED,
    }
)


def attempt_of(status: Mapping[str, Any]) -> int:
    """The attempt the job's current (or next) RayJob runs: 1 until a restart."""
    return int(status.get("attempts") or 1)


def attempt_for_new_child(status: Mapping[str, Any], generation: int | None) -> int:
    """The attempt a RayJob made now runs (its rlplace.io/attempt annotation and RLPLACE_ATTEMPT): the job's
    current one when the status already counts attempts of this spec (a restart waiting for its nodes, a
    re-placement, a RayJob deleted under a running job), else 1. Anything lower reads as a stale attempt and is
    deleted again (`stale_attempt`)."""
    same_spec = status.get("observedGeneration") == generation
    continuing = holds_nodes(status) or bool(status.get("restartCount")) or bool(status.get("preemptions"))
    return attempt_of(status) if same_spec and continuing else 1


def rayjob_attempt(status: Mapping[str, Any]) -> int:
    """The attempt the operator made the job's current RayJob for: the current attempt, less the attempts KubeRay
    began since within that same RayJob (restarts recorded inPlace: a new head pod, a retried submitter)."""
    in_place = 0
    for restart in reversed(status.get("restarts") or []):
        if not restart.get("inPlace"):
            break
        in_place += 1
    return max(1, attempt_of(status) - in_place)


def stale_attempt(job: Job, rayjob: Mapping[str, Any]) -> bool:
    """Whether the RayJob belongs to an attempt before the one the operator last made a RayJob for (its
    rlplace.io/attempt annotation is older; a RayJob without it predates restarts and is the current one)."""
    metadata = rayjob.get("metadata") or {}
    if metadata.get("deletionTimestamp"):
        return True  # the operator deletes a RayJob only to end its attempt
    made_for = (metadata.get("annotations") or {}).get(ATTEMPT_ANNOTATION)
    return made_for is not None and made_for.isdigit() and int(made_for) < rayjob_attempt(job.status)


def _run_settings(job: Job) -> tuple[RestartPolicy, int]:
    run = job.spec.get("run") or {}
    policy = RestartPolicy(run.get("restartPolicy") or RestartPolicy.ON_FAILURE)
    limit = run.get("maxRestarts")
    return policy, DEFAULT_MAX_RESTARTS if limit is None else int(limit)


def _node_fault(name: str, world: World, cause: Cause) -> str | None:
    """Why the job should leave node `name` out of its next attempts, or None (the node is not at fault: a pod
    deleted by hand, a process that ran out of memory or crashed)."""
    node = world.nodes.get(name)
    if node is None:
        return "gone" if world.nodes and name == cause.node else None
    for condition in (node.get("status") or {}).get("conditions") or []:
        if condition.get("type") == "Ready" and condition.get("status") != "True":
            return "NotReady" if condition.get("status") == "False" else "unreachable"
    if (node.get("spec") or {}).get("unschedulable"):
        return "cordoned"
    if name == cause.node and cause.reason == POD_EVICTED:
        return "evicted the job's pod"
    return None


def bad_nodes(world: World, cause: Cause) -> dict[str, str]:
    """The job's nodes at fault for a lost process, with why: NotReady, unreachable, cordoned, gone, evicting."""
    names = [*world.nodes, *([cause.node] if cause.node and cause.node not in world.nodes else [])]
    found = {}
    for name in names:
        fault = _node_fault(name, world, cause)
        if fault is not None:
            found[name] = fault
    return found


def restart_on_failure(job: Job, world: World, status: dict[str, Any], failed: dict[str, Any]) -> Outcome | None:
    """The driver failed (`failed` is its status as Failed): a new attempt when a process, pod or node was lost,
    run.restartPolicy is OnFailure and restarts are left; None to end Failed as `failed` says.

    The attempt is stopped (its RayJob deleted, its reservation dropped at once), the nodes at fault are recorded
    in status.excludedNodes (left out of every later plan of this spec), and the job is Queued with its own
    creation time and priority, so it is ahead of every job of its priority created after it; the next reconcile
    plans it through the normal Provision path on healthy free nodes."""
    conditions = failed.get("conditions") or []
    if any(c.get("type") == cond.BINDING_VERIFIED and c.get("status") == "False" for c in conditions):
        return None  # the plan did not hold inside the pods: a new attempt would fail the same way
    pods, events = list(world.pods), list(world.events)
    ended = cond.parse_time(failed.get("driverEndTime")) or cond.parse_time(
        ((world.rayjob or {}).get("status") or {}).get("endTime")
    )
    if ended is not None:
        # KubeRay deletes a finished RayJob's cluster at once (ttlSecondsAfterFinished 0): those deletions
        # followed the failure, they did not cause it.
        pods, events = seen_before(pods, events, ended)
    since = cond.parse_time(failed.get("driverStartTime"))
    cause = lost_process(pods, events, world.nodes, world.plan, world.driver_log_tail, since)
    if cause is None or cause.reason not in RESTARTABLE:
        return None
    policy, limit = _run_settings(job)
    restarts = int(status.get("restartCount") or 0)
    if policy is RestartPolicy.NEVER:
        return None
    if restarts >= limit:
        failed["message"] = cond.brief(
            f"{failed.get('message') or cause.message}; no restarts left (maxRestarts {limit})"
        )
        return None
    bad = bad_nodes(world, cause)
    excluded = {e["name"]: e for e in status.get("excludedNodes") or []}
    for name, why in bad.items():
        excluded[name] = {"name": name, "reason": f"{why} during attempt {attempt_of(status)}"}
    attempt = attempt_of(status) + 1
    given_up = f"; left out node {', '.join(sorted(bad))}" if bad else ""
    message = cond.brief(f"{cause.message}{given_up}; restarting as attempt {attempt} ({restarts + 1} of {limit})")
    record = {
        "attempt": attempt,
        "time": cond.timestamp(world.now),
        "reason": cause.reason,
        "message": message,
        "nodesReplaced": sorted(bad),
    }
    attempt_stopped(
        job,
        status,
        RESTARTING,
        message,
        phase=str(JobPhase.QUEUED),
        attempts=attempt,
        restartCount=restarts + 1,
        restarts=[*list(status.get("restarts") or []), record][-MAX_RESTARTS_KEPT:],
        excludedNodes=list(excluded.values()),
        retryAfter=None,
    )
    status["conditions"] = cond.set_condition(
        status["conditions"], cond.DRIVER_SUCCEEDED, False, cause.reason, message, job.generation
    )
    actions = (DeleteChildren(), ReleaseNodes(), Post(True, RESTARTING, message))
    return Outcome(actions, status_of(status), LOOK_AGAIN_SECONDS)


def attempt_stopped(job: Job, status: dict[str, Any], reason: str, message: str, **fields: Any) -> None:
    """`status` as of a job whose attempt is being stopped (its children deleted, its nodes given back): Admitted
    False with `reason`, and nothing left of the attempt (binding, driver times, progress, children, place in the
    queue, ranks lost or awaiting their report); `fields` set the rest (phase, attempts, restarts, ...)."""
    fields.setdefault("observedGeneration", job.generation)
    status["conditions"] = cond.set_condition(
        [c for c in status.get("conditions") or [] if c.get("type") != cond.BINDING_VERIFIED],
        cond.ADMITTED,
        False,
        reason,
        message,
        job.generation,
    )
    stopped = {
        "message": cond.brief(message),
        "rayCluster": None,
        "rayJob": None,
        "binding": None,
        "driverStartTime": None,
        "driverEndTime": None,
        "progress": None,
        "queuePosition": None,
        "waitingFor": None,
        "components": for_new_attempt(status),
    }
    status.update({**stopped, **fields})


#: Restart reason of a job whose node its Workload admitter replaced inside the admitted Workload.
NODE_REPLACED = "NodeReplaced"


def follow_eviction(job: Job, world: World, status: dict[str, Any], workload: admitter.WorkloadState) -> Outcome:
    """The job's Workload was evicted (preempted by a job of higher priority, its PodsReady timeout, deactivated):
    a checkpointed move, not a kill (admitter.eviction says which step now). The driver is asked to checkpoint and
    given spec.checkpoint's grace, then the job's Ray children are deleted; once none of its pods is left the
    Workload's quota is released (its admitter waits for that before it admits the preemptor) and the job is
    Queued again as its next attempt, which resumes from the checkpoint wherever it is admitted next. A
    deactivated Workload suspends the job instead."""
    child = world.rayjob if job.entrypoint else world.raycluster
    stopping = child is not None and not (child.get("metadata") or {}).get("deletionTimestamp")
    step = admitter.eviction(workload, job.spec, status, stopping, len(world.pods), world.now)
    if step.preemption is not None:
        status["preemption"] = dict(step.preemption)
    if step.step == admitter.CHECKPOINT:
        status["message"] = step.message
        return Outcome(
            (RequestCheckpoint(), Post(True, cond.PREEMPTED, step.message)), status_of(status), step.wait_seconds
        )
    if step.step == admitter.WAIT:
        if step.message:
            status["message"] = step.message
        return Outcome((), status_of(status), step.wait_seconds)
    if step.step == admitter.STOP:
        status["message"] = step.message
        return Outcome(
            (DeleteChildren(), Post(False, cond.PREEMPTED, step.message)), status_of(status), LOOK_AGAIN_SECONDS
        )
    running = holds_nodes(status)
    attempt = attempt_of(status) + 1 if running and job.entrypoint else attempt_of(status)
    preemptions = int(status.get("preemptions") or 0) + (1 if running else 0)
    if step.requeue:
        message = f"{step.message}; its quota is released and it is queued again as attempt {attempt}"
        phase, reason = JobPhase.QUEUED, cond.PREEMPTED
    else:
        message = step.message
        phase, reason = JobPhase.SUSPENDED, cond.SUSPENDED
    changed = status.get("observedGeneration") not in (None, job.generation)
    if changed:
        # The spec changed while the eviction was carried out: the stopped attempt is the old spec's, and the new
        # spec is planned anew (a new Workload, a new history) once this one's quota is given back.
        message = f"{message}; its spec changed meanwhile and is planned anew"
    restarts = list(status.get("restarts") or [])
    if running:
        record = {
            "attempt": attempt,
            "time": cond.timestamp(world.now),
            "reason": reason,
            "message": cond.brief(message),
        }
        restarts = [*restarts, record][-MAX_RESTARTS_KEPT:]
    attempt_stopped(
        job,
        status,
        reason,
        message,
        phase=str(phase),
        attempts=attempt if job.entrypoint and attempt > 1 else status.get("attempts"),
        preemptions=preemptions or None,
        restarts=restarts or None,
        observedGeneration=status.get("observedGeneration") if changed else job.generation,
        **step.released,
    )
    actions = (ReleaseWorkload(workload.name, step.requeue), ReleaseNodes(), Post(True, reason, message))
    return Outcome(actions, status_of(status), LOOK_AGAIN_SECONDS)


def follow_replaced_nodes(job: Job, world: World, status: dict[str, Any]) -> Outcome | None:
    """The Workload admitter replaced a node of the running job inside its admitted Workload (topology-aware
    scheduling's node replacement: the node became NotReady or tainted): the job follows, as after a lost node. Its
    attempt is stopped, the node is left out of its next plans, and it is planned again at once on the hosts now
    granted, as its next attempt (resuming from its checkpoint). Not counted against run.maxRestarts: the admitter,
    not the job, moved it."""
    workload = world.workload
    if workload is None or not holds_nodes(status):
        return None
    planned = {n for c in (status.get("placement") or {}).get("components") or [] for n in c.get("nodes") or []}
    replaced = admitter.replaced_nodes(workload, planned)
    if replaced is None:
        return None
    gone, new = replaced
    # A plan with no rank left on the replaced nodes was moved already: relocate.py applies the ConfigMap before it
    # writes the status, so this status is from before the move (its write is on its way, or the operator stopped
    # between the two). Moving again completes it, as a move changes nothing twice; a restart would stop a job
    # that runs on.
    plan = world.plan
    moved = plan is not None and not set(gone) & set(ranks_by_node(plan))
    if plan is not None and len(gone) == len(new) and only_replace_ranks(plan, new if moved else gone):
        # Every rank on the replaced nodes is a Replace rank: they move to the granted nodes while the job runs.
        moves = tuple(
            Relocate(node, f"Kueue replaced node {node} in Workload {workload.name}", to=granted)
            for node, granted in zip(gone, new, strict=True)
        )
        return Outcome(moves, status_of(status), LOOK_AGAIN_SECONDS)
    attempt = attempt_of(status) + 1
    message = cond.brief(
        f"Kueue replaced node {', '.join(gone)} of the job's Workload {workload.name} (now {', '.join(new) or 'none'}): "
        f"restarting as attempt {attempt} on the granted nodes"
    )
    excluded = {e["name"]: e for e in status.get("excludedNodes") or []}
    for name in gone:
        excluded[name] = {"name": name, "reason": f"replaced by Kueue during attempt {attempt_of(status)}"}
    record = {
        "attempt": attempt,
        "time": cond.timestamp(world.now),
        "reason": NODE_REPLACED,
        "message": message,
        "nodesReplaced": gone,
    }
    attempt_stopped(
        job,
        status,
        NODE_REPLACED,
        message,
        phase=str(JobPhase.QUEUED),
        attempts=attempt if job.entrypoint else status.get("attempts"),
        preemptions=int(status.get("preemptions") or 0) + 1,
        restarts=[*list(status.get("restarts") or []), record][-MAX_RESTARTS_KEPT:],
        excludedNodes=list(excluded.values()),
    )
    actions = (DeleteChildren(), ReleaseNodes(), Post(True, NODE_REPLACED, message))
    return Outcome(actions, status_of(status), LOOK_AGAIN_SECONDS)

"""Decide: one level-triggered reconcile of an RLJob, `decide(job, world) -> Outcome(actions, status)`.

The shape is KubeRay's `Reconcile` -> `calculateStatus`: every handler and timer that has a reason to look at a
job (it was created or changed, its RayCluster or RayJob changed, the queue moved, time passed) builds the same
snapshot of what exists (observe.py) and calls this pure function, which decides what to do and what the status
is; apply.py makes the calls and writes the status once, with optimistic concurrency. A failure seen in a real
cluster is a unit test over its recorded snapshot (tests/operator/reconcile/).

Decided here: a queued job's place, the job's pods (pods.py), its driver (driver.py), its restarts and the moves
its Workload admitter makes (restarts.py), and its recommendation; planning and admission, which nodes it gets,
is the Provision action (provision.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from typing import Any

from rlplace_operator.admission import admitter
from rlplace_operator.admission.rules import Admitted, Waiting
from rlplace_operator.api import conditions as cond
from rlplace_operator.api.base import dump
from rlplace_operator.api.conditions import Condition
from rlplace_operator.api.names import SPEC_DIGEST_ANNOTATION
from rlplace_operator.api.rljob import RLJobSpec
from rlplace_operator.api.status import ComponentReplicas, JobPhase, Resize, RLJobStatus, holds_nodes
from rlplace_operator.planning import elastic, recommend
from rlplace_operator.reconcile.actions import (
    Action,
    DeleteChildren,
    MarkWorkload,
    Outcome,
    Post,
    Provision,
    SetReplicas,
)
from rlplace_operator.reconcile.driver import with_driver
from rlplace_operator.reconcile.observe import recommendation_due
from rlplace_operator.reconcile.pods import LOOK_AGAIN_SECONDS, planned_nodes, status_of, with_cluster
from rlplace_operator.reconcile.replicas import for_new_attempt, replicas_pending
from rlplace_operator.reconcile.resize import draining, surplus_pods
from rlplace_operator.reconcile.restarts import attempt_of, follow_eviction, follow_replaced_nodes, stale_attempt
from rlplace_operator.reconcile.world import Job, World


def _driver_done(job: Job) -> bool:
    status = job.status
    if status.get("observedGeneration") != job.generation:
        return False
    return status.get("phase") in (JobPhase.SUCCEEDED, JobPhase.FAILED)


def _restart_for_new_spec(job: Job, world: World, status: dict[str, Any]) -> Outcome | None:
    """A running job whose new spec changes more than replicas (another RLJobSpec.restart_digest than its RayJob's):
    its RayJob is deleted, so that the job is planned again once it is gone and its new driver (resuming from
    its checkpoint) runs the new plan. A change of replicas alone is resized in place by provisioning instead (for a
    job Kueue admitted, through its Workload's slices). Not for a RayJob made before the annotation."""
    rayjob = world.rayjob
    if not job.entrypoint or rayjob is None or not holds_nodes(status):
        return None
    if status.get("observedGeneration") == job.generation:
        return None
    made_for = ((rayjob.get("metadata") or {}).get("annotations") or {}).get(SPEC_DIGEST_ANNOTATION)
    try:
        digest = RLJobSpec.model_validate(job.spec).restart_digest()
    except ValueError:
        return None  # an invalid spec: provisioning refuses it and the job runs on
    if made_for is None or made_for == digest:
        return None
    said = "the spec changed beyond replicas: the driver restarts on the new plan from its last checkpoint"
    actions: list[Any] = [DeleteChildren()]
    if not (rayjob.get("metadata") or {}).get("deletionTimestamp"):
        actions.append(Post(False, cond.SPEC_CHANGED, said))
    # Until the new plan's RayJob runs, nothing of the old one is reported as the job's (as for a re-placement).
    stopping = {
        **status,
        "phase": JobPhase.PROVISIONING,
        "message": said,
        "rayCluster": None,
        "binding": [],
        "progress": None,
        "driverStartTime": None,
        "driverEndTime": None,
        "conditions": [c for c in status.get("conditions") or [] if c.get("type") != cond.BINDING_VERIFIED],
    }
    return Outcome(tuple(actions), status_of(stopping), LOOK_AGAIN_SECONDS)


def reconcile(job: Job, world: World) -> Outcome:
    """What to do about `job` in `world`, and the status that describes it (see the module docstring)."""
    status = dict(job.status)
    if _driver_done(job) and not job.profile_changed:
        return Outcome((), status_of(status))  # ended for this spec: nothing to do until the spec changes
    if job.spec.get("suspend"):
        if status.get("phase") == JobPhase.SUSPENDED and status.get("observedGeneration") == job.generation:
            return Outcome((), status_of(status))
        return Outcome((Provision(),), status_of(status))
    if world.workload is not None and world.workload.evicted and world.workload.holds_quota:
        return follow_eviction(job, world, status, world.workload)
    moved = follow_replaced_nodes(job, world, status)
    if moved is not None:
        return moved
    restart = _restart_for_new_spec(job, world, status)
    if restart is not None:
        return restart
    if not holds_nodes(status) or status.get("observedGeneration") != job.generation or job.profile_changed:
        return _waiting(job, world, status)
    child = world.rayjob if job.entrypoint else world.raycluster
    if job.entrypoint and child is not None and stale_attempt(job, child):
        # A RayJob of an attempt before a restart (being deleted, or left by an operator that stopped between
        # writing the restart and deleting it): delete it (again); the new attempt is made once it is gone.
        return Outcome((DeleteChildren(),), status_of(status), LOOK_AGAIN_SECONDS)
    if world.child_known and child is None:
        return Outcome((Provision(),), status_of(status))  # its RayCluster or RayJob is gone: plan it again
    if not world.child_known:
        return Outcome((), status_of(status), LOOK_AGAIN_SECONDS)
    assert child is not None
    if job.entrypoint:
        return with_surplus_pods(world, with_driver(job, world, status, child))
    return with_surplus_pods(world, with_cluster(job, world, status, child))


def with_surplus_pods(world: World, outcome: Outcome) -> Outcome:
    """`outcome` with the deletion of worker pods on nodes the plan no longer has (a resize took them away,
    resize.py), once the driver stopped their ranks."""
    status = outcome.status
    if status.phase != JobPhase.RUNNING or world.plan is None:
        return outcome  # surplus_pods needs the plan, read for jobs with Replace components (the ones resized)
    delete = surplus_pods(status_wire(status), status.ray_cluster, world.pods, world.plan)
    if delete is None:
        return outcome
    return dataclasses.replace(outcome, actions=(*outcome.actions, delete))


def _waiting(job: Job, world: World, status: dict[str, Any]) -> Outcome:
    """A job that holds no nodes: through admission, unless its backoff runs or the queue pass placed it."""
    retry_after = cond.parse_time(status.get("retryAfter"))
    backing_off = retry_after is not None and world.now < retry_after
    if status.get("phase") == JobPhase.QUEUED and status.get("observedGeneration") == job.generation and backing_off:
        return Outcome((), status_of(status), (retry_after - world.now).total_seconds())
    if job.entrypoint and world.rayjob is not None and stale_attempt(job, world.rayjob):
        # The last attempt's RayJob is still there (its KubeRay finalizer runs, or an operator that restarted
        # never deleted it): applying the new one now would patch it. Delete it (again) and look again.
        message = "waiting for the previous attempt's RayJob to be deleted"
        status.update(message=message, waitingFor="the previous attempt to stop")
        return Outcome((DeleteChildren(),), status_of(status), LOOK_AGAIN_SECONDS)
    if status.get("phase") == JobPhase.QUEUED and isinstance(world.queue, Waiting):
        waiting = world.queue
        message = f"waiting for {waiting.reason} (position {waiting.position} in the queue)"
        status["conditions"] = cond.set_condition(
            status.get("conditions"), cond.ADMITTED, False, cond.QUEUED, message, job.generation
        )
        actions: tuple[Action, ...] = ()
        if status.get("waitingFor") != waiting.reason:
            actions = (Post(False, cond.QUEUED, message),)
        status.update(message=message, queuePosition=waiting.position, waitingFor=waiting.reason)
        return Outcome(actions, status_of(status))
    if isinstance(world.queue, Admitted) or world.queue is None:
        return Outcome((Provision(),), status_of(status))
    return Outcome((), status_of(status))


def with_recommendation(job: Job, world: World, outcome: Outcome) -> Outcome:
    """`outcome` with the running job's recommendation brought up to date (planning/recommend.py): its Events posted, and
    when Auto re-places the job now, the re-placement recorded and its children deleted (the next look plans it
    again through Provision, on the re-placement's entries). Unchanged without `world.cluster`."""
    status = outcome.status
    if (
        world.cluster is None
        or status.phase != JobPhase.RUNNING
        or any(isinstance(a, Provision) for a in outcome.actions)
    ):
        return outcome
    try:
        spec = RLJobSpec.model_validate(job.spec)
    except ValueError:
        return outcome
    step = recommend.step(spec, status, world.cluster, world.now)
    update: dict[str, Any] = {"recommendation": step.recommendation}
    actions: list[Action] = [*outcome.actions, *(Post(False, reason, message) for reason, message in step.events)]
    if step.replacement is not None:
        update["replacements"] = recommend.with_replacement(status, step.replacement)
        update["message"] = cond.brief(step.events[0][1]) if step.events else None
        # The re-placement is the job's next attempt (RLPLACE_ATTEMPT; the driver resumes from its checkpoint):
        # counted now, so the RayJob made for it carries that number, and nothing of the last driver is kept
        # (its start time would read the new driver as a resubmission, its binding as the new one's, its progress
        # as the new attempt's iterations going back). A RayJob's RayCluster is named anew per attempt: cleared,
        # so the stopped driver's late reports are refused (Kube.write_progress tests it) until the new one is
        # made; a job without an entrypoint keeps its one RayCluster's name (its nodes are held through it).
        update.update(
            attempts=attempt_of(dump(status)) + 1,
            driver_start_time=None,
            driver_end_time=None,
            progress=None,
            ray_cluster=None if job.entrypoint else status.ray_cluster,
            binding=[],
            conditions=[c for c in status.conditions if c.type != cond.BINDING_VERIFIED],
            components=[ComponentReplicas.model_validate(c) for c in for_new_attempt(dump(status)) or []],
        )
        actions.append(DeleteChildren())
    new = status.model_copy(update=update)
    profiled = recommend.profiling_condition(spec, new)
    if profiled is not None:
        conditions = cond.set_condition([dump(c) for c in new.conditions], cond.PROFILED, *profiled, job.generation)
        new = new.model_copy(update={"conditions": [Condition.model_validate(c) for c in conditions]})
    return Outcome(tuple(actions), new, outcome.requeue_after)


def with_elastic_loop(job: Job, world: World, outcome: Outcome) -> Outcome:
    """`outcome` with the elastic loop's step (planning/elastic.py): the last change judged, and a change of a
    component's replicas recorded in status.resizes, announced and written to the spec (the next pass resizes the
    job in place)."""
    status = outcome.status
    if status.phase != JobPhase.RUNNING or any(isinstance(a, Provision) for a in outcome.actions):
        return outcome
    try:
        spec = RLJobSpec.model_validate(job.spec)
    except ValueError:
        return outcome
    step = elastic.loop_step(spec, status, world.now, world.room, world.waiting_above)
    if step.change is None and step.judged is None:
        return outcome
    resizes = list(status.resizes)
    if step.judged is not None:
        resizes[-1] = step.judged
    actions = list(outcome.actions)
    change, progress = step.change, status.progress
    if change is not None and progress is not None:
        resizes.append(
            Resize(
                time=cond.timestamp(world.now),
                iteration=progress.iteration,
                component=change.component,
                previous=change.previous,
                replicas=change.replicas,
                reason=change.reason,
                observed_iteration_seconds=progress.iteration_seconds,
                predicted_iteration_seconds=change.predicted,
                # A yield promises nothing: it is kept as it is made, never judged or undone.
                kept=True if change.reason == "Yield" else None,
            )
        )
        actions += [SetReplicas(change.index, change.component, change.replicas)]
        actions += [Post(False, cond.REPLICAS_CHANGED, f"{change.reason}: {change.why}")]
    new = status.model_copy(update={"resizes": resizes[-elastic.MAX_RESIZES_KEPT :]})
    return dataclasses.replace(outcome, actions=tuple(actions), status=new)


def with_workload_word(world: World, outcome: Outcome) -> Outcome:
    """`outcome` with what the job's Workload must be told, as the Workload's job reconciler would: PodsReady once
    the job runs (an admin's waitForPodsReady evicts a Workload without it), Finished when it ends (the quota
    frees at once)."""
    workload = world.workload
    if workload is None:
        return outcome
    word = admitter.mark(workload, outcome.status.phase)
    if word is None:
        return outcome
    status = outcome.status
    recorded = admitter.told(dump(status), word)
    if recorded is not None:
        # Said in the job's status too: the timer looks again at a running job until it is (needs_look).
        status = status_of({**status_wire(status), **recorded})
    action = MarkWorkload(workload.name, word.condition, word.reason, word.message)
    return dataclasses.replace(outcome, actions=(*outcome.actions, action), status=status)


def with_queue_word(job: Job, world: World, outcome: Outcome) -> Outcome:
    """`outcome` with the Admitted condition of a job its Workload admitted saying whether the LocalQueue it names
    still exists (a Warning Event when it is deleted, a Normal one when it is back)."""
    workload, status, queue = world.workload, outcome.status, admitter.queue_name(job.labels)
    if workload is None or not workload.admitted or queue is None:
        return outcome
    if status.phase not in (JobPhase.PROVISIONING, JobPhase.RUNNING):
        return outcome
    current = next((c for c in status.conditions if c.type == cond.ADMITTED), None)
    was_gone = current is not None and current.reason == cond.LOCALQUEUE_NOT_FOUND
    if world.queue_found and not was_gone:
        return outcome  # the usual case: the Admitted condition provisioning wrote stays as it is
    reason, message = admitter.admitted_word(job.namespace, queue, workload.cluster_queue, world.queue_found)
    if current is not None and current.reason == reason and current.message == message:
        return outcome
    wire = status_wire(status)
    wire["conditions"] = cond.set_condition(
        wire.get("conditions"), cond.ADMITTED, True, reason, message, job.generation
    )
    post = Post(not world.queue_found, reason, message)
    return dataclasses.replace(outcome, actions=(*outcome.actions, post), status=status_of(wire))


def decide(job: Job, world: World) -> Outcome:
    """The whole decision for a job in `world`: its reconcile, its recommendation brought up to date, and what its
    Workload must be told and its Admitted condition says of its LocalQueue."""
    outcome = with_workload_word(
        world, with_elastic_loop(job, world, with_recommendation(job, world, reconcile(job, world)))
    )
    return with_queue_word(job, world, outcome)


def needs_look(entry: Mapping[str, Any], held: Collection[str] = ()) -> bool:
    """Jobs the timer looks at (by their index entry and the nodes their RayCluster holds): Queued ones,
    Provisioning ones, running drivers not verified yet, jobs whose Workload eviction is being carried out or who
    have not told their Workload yet, running jobs whose recommendation is due or whose elastic loop is on, running
    jobs whose replicas are being replaced, started or stopped, and running jobs whose RayCluster still holds a node
    their placement left (a shrink's pod to take out: it goes once it crash-loops, and a restart of a pod's container
    changes nothing the job's handlers are told of)."""
    status = entry["status"]
    if status.get("phase") == JobPhase.RUNNING and set(held) - planned_nodes(status):
        return True
    phase = status.get("phase")
    if phase in (JobPhase.QUEUED, JobPhase.PROVISIONING) or recommendation_due(entry["spec"], status):
        return True
    if phase == JobPhase.RUNNING and (entry["spec"].get("elastic") or {}).get("enabled") and status.get("progress"):
        return True  # the elastic loop looks at each report (planning/elastic.py)
    if status.get("preemption") or admitter.awaits_workload_word(status):
        return True
    unverified = not any(c.get("type") == cond.BINDING_VERIFIED for c in status.get("conditions") or [])
    pending = unverified or replicas_pending(status) or draining(status)
    return phase == JobPhase.RUNNING and bool(status.get("rayJob")) and pending


def status_wire(status: RLJobStatus) -> dict[str, Any]:
    """The status as written: camelCase, no nulls, and no empty top-level lists (an unset list is absent on
    the wire, so an unchanged job compares equal and costs no write)."""
    return {key: value for key, value in dump(status).items() if value != []}

"""The driver of a job with an entrypoint: what its RayJob says (phase, restarts by KubeRay, the binding report,
what died when it failed), in the RLJob's terms.

KubeRay's RayJob status gives the phase (jobStatus, jobDeploymentStatus); the DriverSucceeded condition carries
KubeRay's reason; driverLog is the command that prints the driver's log. The binding report comes from that log
(placement_core.observe; the observer reads it through the job's framework): BindingVerified and per-component
verified counts, and a mismatch fails the job naming the first bad rank.

The log is the one place a driver writes that the operator can read without granting the Ray pods any Kubernetes
permission (the operator needs `get` on pods and pods/log). In K8sJobMode that log is in the submitter Job's pods
(KubeRay's `ray job submit` streams the driver's output); in SidecarMode, the head pod's submitter container.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from placement_core.observe.verify import BindingReport
from rlplace_operator.api import conditions as cond
from rlplace_operator.api.base import dump
from rlplace_operator.api.names import KUBERAY_NODE_TYPE_LABEL, SUBMITTER_CONTAINER, rayjob_name
from rlplace_operator.api.rljob import SubmissionMode
from rlplace_operator.api.status import MAX_RESTARTS_KEPT, ComponentBinding, JobPhase, ObservedProcesses
from rlplace_operator.diagnosis.losses import lost_process
from rlplace_operator.reconcile.actions import Action, DeleteChildren, Outcome, Post, ReleaseNodes, Relocate
from rlplace_operator.reconcile.pods import LOOK_AGAIN_SECONDS, pod_problems, provisioning_checks, status_of
from rlplace_operator.reconcile.relocate import gone_nodes
from rlplace_operator.reconcile.replicas import Replicas, for_new_attempt, has_replace, replicas
from rlplace_operator.reconcile.restarts import restart_on_failure
from rlplace_operator.reconcile.world import Job, World

#: How much of the driver's log is searched for the report (the driver prints it right after launching).
REPORT_LOG_BYTES = 4 * 1024 * 1024
#: How much of a failed driver's log the diagnosis reads: enough that Ray's own shutdown lines, printed after the
#: launcher's error, do not push that error out (they took more than 1 KiB in one CI run).
DRIVER_LOG_TAIL_LINES = 200


@dataclass(frozen=True)
class DriverState:
    """What the RayJob says about the driver, in the RLJob's terms."""

    phase: JobPhase
    reason: str
    message: str

    @property
    def finished(self) -> bool:
        return self.phase in (JobPhase.SUCCEEDED, JobPhase.FAILED)

    @property
    def started(self) -> bool:
        return self.phase is JobPhase.RUNNING or self.finished


def driver_state(rayjob: Mapping[str, Any]) -> DriverState:
    """KubeRay's RayJob status -> phase, reason and message. KubeRay marks an ended job Complete (the Ray job
    SUCCEEDED or STOPPED) or Failed (AppFailed, DeadlineExceeded, SubmissionFailed, ...)."""
    spec = rayjob.get("spec") or {}
    status = rayjob.get("status") or {}
    deployment = status.get("jobDeploymentStatus") or ""
    ray_status = status.get("jobStatus") or ""
    message = status.get("message") or ""
    if deployment == "Complete" and ray_status == "SUCCEEDED":
        return DriverState(JobPhase.SUCCEEDED, "Succeeded", message or "the driver succeeded")
    if deployment == "Complete":
        return DriverState(JobPhase.FAILED, "Stopped", message or f"the Ray job ended {ray_status or 'unknown'}")
    if deployment in ("Failed", "ValidationFailed"):
        reason = status.get("reason") or ("ValidationFailed" if deployment == "ValidationFailed" else "DriverFailed")
        return DriverState(JobPhase.FAILED, reason, message or "the driver failed")
    if spec.get("suspend"):
        return DriverState(JobPhase.SUSPENDED, "Suspended", "the job is suspended; its driver was stopped")
    if deployment in ("Suspending", "Suspended"):
        # Resumed (spec.suspend false) but KubeRay has not acted on it yet: the driver is about to start again.
        # Read as Suspended, the job would leave the phases anything looks at again and stay Suspended.
        return DriverState(JobPhase.PROVISIONING, "Resuming", "resumed: waiting for KubeRay to start the driver again")
    if deployment == "Running" and ray_status in ("", "PENDING"):
        # KubeRay's deployment runs (the cluster is up, its submitter starts) but Ray has not started the
        # entrypoint yet: the driver is not running, and the job's Running time must not count that wait.
        return DriverState(JobPhase.PROVISIONING, "Submitting", "KubeRay is submitting the driver to the Ray cluster")
    if deployment == "Running":
        return DriverState(JobPhase.RUNNING, "Running", "the driver is running")
    if deployment == "Retrying":
        return DriverState(JobPhase.PROVISIONING, "Retrying", message or "the driver failed and is retried")
    return DriverState(JobPhase.PROVISIONING, "Initializing", "waiting for the Ray cluster to run the driver")


def driver_log_command(namespace: str, job: str, mode: SubmissionMode, ray_cluster: str | None) -> str:
    """The kubectl command that prints the driver's log."""
    if mode is SubmissionMode.SIDECAR:
        selector = f"ray.io/cluster={ray_cluster or '<rayCluster>'},ray.io/node-type=head"
        return f"kubectl logs -n {namespace} -l {selector} -c {SUBMITTER_CONTAINER}"
    return f"kubectl logs -n {namespace} job/{rayjob_name(job)}"


def driver_log_selector(job: str, mode: SubmissionMode, ray_cluster: str | None) -> str | None:
    """Label selector of the pod whose submitter container has the driver's log (None: not known yet)."""
    if mode is SubmissionMode.SIDECAR:
        return f"ray.io/cluster={ray_cluster},ray.io/node-type=head" if ray_cluster else None
    return f"batch.kubernetes.io/job-name={rayjob_name(job)}"


def driver_status(
    job_status: Mapping[str, Any],
    rayjob: Mapping[str, Any],
    report: BindingReport | None,
    namespace: str,
    job: str,
    mode: SubmissionMode,
    generation: int | None,
    mismatch_fails: bool = True,
) -> dict[str, Any]:
    """The RLJob status fields that follow the RayJob and the driver's binding report (wire form; None
    removes a field). A report with a mismatch fails the job unless `mismatch_fails` is False (a framework
    job told to report only: the BindingVerified condition says it, the phase follows the driver)."""
    state = driver_state(rayjob)
    status = rayjob.get("status") or {}
    ray_cluster = status.get("rayClusterName") or None
    log = driver_log_command(namespace, job, mode, ray_cluster)
    conditions = list(job_status.get("conditions") or [])
    phase, reason, message = state.phase, state.reason, state.message
    binding: list[dict[str, Any]] | None = None
    observed: list[dict[str, Any]] | None = None
    if not state.started:
        # A driver that has not started yet (again: resumed or retried) has not verified anything.
        conditions = [c for c in conditions if c.get("type") != cond.BINDING_VERIFIED]
    elif report is not None:
        totals = report.totals()
        binding = [
            dump(ComponentBinding(name=n, verified=v, processes=totals[n])) for n, v in report.verified().items()
        ]
        observed = observed_placement(report) or None
        bad = report.first_failure()
        verified = "Verified" if report.enforced else "Observed"
        conditions = cond.set_condition(
            conditions, cond.BINDING_VERIFIED, bad is None, verified if bad is None else "BindingMismatch",
            report.summary(), generation,
        )  # fmt: skip
        if bad is not None and mismatch_fails:
            phase, reason, message = JobPhase.FAILED, "BindingMismatch", f"binding check failed: {bad.describe()}"
    else:
        binding = job_status.get("binding")
        observed = job_status.get("observedPlacement")
    # The condition follows the driver in every state, not only once it runs: the phase alone cannot tell a
    # job waiting for its Ray cluster (Initializing) from one whose driver KubeRay is submitting (Submitting),
    # and a condition left from before a suspend or a retry would say Running of a driver that is not.
    conditions = cond.set_condition(
        conditions, cond.DRIVER_SUCCEEDED, phase is JobPhase.SUCCEEDED, reason, message, generation
    )
    if phase in (JobPhase.SUCCEEDED, JobPhase.FAILED):
        message = f"{message} (driver log: {log})"
    info = status.get("rayJobInfo") or {}
    return {
        "phase": str(phase),
        "message": message,
        "conditions": conditions,
        "rayJob": rayjob["metadata"]["name"],
        "rayCluster": ray_cluster,
        "driverLog": log,
        "driverStartTime": info.get("startTime") or job_status.get("driverStartTime"),
        "driverEndTime": info.get("endTime") if state.finished else None,
        "binding": binding,
        "observedPlacement": observed,
    }


def observed_placement(report: BindingReport) -> list[dict[str, Any]]:
    """Per component and node, the processes seen and the GPU ids Ray gave each (only for a report whose GPU
    ids were Ray's: observe/pools.py), in wire form."""
    by_place: dict[tuple[str, str], list[tuple[int, str]]] = {}
    for check in report.checks:
        if check.gpu_ids is not None:
            by_place.setdefault((check.component, check.node_name), []).append((check.rank, ",".join(check.gpu_ids)))
    return [
        dump(ObservedProcesses(component=component, node=node, ranks=[r for r, _ in seen], gpus=[g for _, g in seen]))
        for (component, node), seen in by_place.items()
    ]


def with_driver(job: Job, world: World, status: dict[str, Any], rayjob: Mapping[str, Any]) -> Outcome:
    """A job with an entrypoint: its phase follows the RayJob; restarts, binding and what died are recorded."""
    state = driver_state(rayjob)
    if not state.started and not state.finished:
        failed = provisioning_checks(job, world, status)
        if failed is not None:
            return failed
    actions: list[Action] = []
    restart = _new_attempt(job, world, rayjob)
    if restart is not None:
        status["attempts"] = restart["attempt"]
        status["restartCount"] = restart["attempt"] - 1
        status["restarts"] = [*list(status.get("restarts") or []), restart][-MAX_RESTARTS_KEPT:]
        # The new attempt has not verified anything yet: its own report is looked for again, for every rank.
        status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != cond.BINDING_VERIFIED]
        status["binding"] = None
        status["components"] = for_new_attempt(status)
        status["driverStartTime"] = None
        actions.append(Post(True, restart["reason"], restart["message"]))
    report = world.report
    mismatch_fails = job.framework.mismatch_fails_job(job.on_binding_mismatch)
    new = driver_status(
        status, rayjob, report, job.namespace, job.name, job.submission_mode, job.generation, mismatch_fails
    )
    if state.started and not status.get("attempts"):
        new["attempts"] = 1
    if new["phase"] == JobPhase.RUNNING:
        # Running means every planned pod runs, not KubeRay's word alone (pods.pod_problems); a running job whose
        # lost pods hold only Replace ranks runs on while they are replaced (replicas.py).
        problems = pod_problems(status, new.get("rayCluster"), world.pods)
        waiting = problems.first()
        kept = replicas(world.plan, status, problems, world.now) if world.plan and has_replace(job.spec) else None
        runs_on = (
            waiting is not None and kept is not None and kept.replaceable and status.get("phase") == JobPhase.RUNNING
        )
        if kept is not None:
            new["components"] = kept.components
            actions += kept.events
        gone: dict[str, str] = {}
        if runs_on and kept is not None:
            gone = gone_nodes(world, status, kept.lost) if world.plan is not None else {}
            if job.by_workload:
                # Kueue's node replacement grants the new node in the Workload (restarts.follow_replaced_nodes):
                # a node gone for good, or one Kueue marked unhealthy (a NoExecute taint it does not wait out).
                replacing = set(world.workload.unhealthy_nodes) if world.workload is not None else set()
                suffix = "; waiting for Kueue to replace it"
                for component in kept.components:
                    for entry in component.get("lost") or []:
                        if entry["node"] in gone or entry["node"] in replacing:
                            why = gone.get(entry["node"]) or entry["why"]
                            entry["why"] = cond.brief(why, 200 - len(suffix)) + suffix
        reason = cond.RAYCLUSTER_IS_READY if waiting is None else cond.REPLACING if runs_on else cond.PODS_NOT_READY
        said = "all Ray pods are ready" if waiting is None else kept.summary() if runs_on and kept else waiting
        new["conditions"] = cond.set_condition(
            new["conditions"], cond.RAYCLUSTER_READY, waiting is None, reason, said, job.generation
        )
        if runs_on and kept is not None:
            new["message"] = f"the driver is running; {kept.summary()}"
            if not job.by_workload:
                actions += [Relocate(node, why) for node, why in gone.items()]
        elif waiting is not None:
            new.update(phase=str(JobPhase.PROVISIONING), message=f"the driver started, but {waiting}")
        if kept is not None and kept.unverified:
            new["conditions"] = _reverified(new["conditions"], kept, report, job.generation)
    stops = job.framework.operator_stops_on_mismatch()
    if stops and mismatch_fails and not state.finished and report is not None and not report.ok:
        # The framework's own program put a process elsewhere than planned: nothing in it stops it (an rlplace
        # driver exits on its own check), so the operator does; the job is Failed, the rank named.
        actions.append(DeleteChildren())
    elif new["phase"] == JobPhase.FAILED and status.get("phase") != JobPhase.FAILED:
        new = _failure_named(job, world, new, state.reason)
        restarted = restart_on_failure(job, world, status, new)
        if restarted is not None:
            return restarted
    for condition in new.get("conditions") or []:
        condition["message"] = cond.brief(condition.get("message") or "", cond.MAX_MESSAGE_CHARS)
    status.update(new)
    status["message"] = cond.brief(status.get("message") or "", cond.MAX_LINE_CHARS + 200)
    status["phase"] = str(status["phase"])
    if status["phase"] == JobPhase.RUNNING and status.get("nodes") is not None:
        status["queuePosition"] = None
    status["observedGeneration"] = job.generation
    finished = state.finished or status["phase"] in (JobPhase.SUCCEEDED, JobPhase.FAILED)
    before = {c.get("type"): (c.get("status"), c.get("reason")) for c in job.status.get("conditions") or []}
    for condition in status.get("conditions") or []:
        kind = condition.get("type")
        # An Event for the binding check's result and for the driver's outcome; the driver's way there
        # (Initializing, Submitting, Running, ...) is in the condition and the phase.
        if kind not in (cond.DRIVER_SUCCEEDED, cond.BINDING_VERIFIED) or (
            kind == cond.DRIVER_SUCCEEDED and not finished
        ):
            continue
        if before.get(kind) != (condition.get("status"), condition.get("reason")):
            actions.append(Post(condition.get("status") != "True", condition["reason"], condition["message"]))
    if finished:
        actions.append(ReleaseNodes())
    unverified = state.started and not any(
        c.get("type") == cond.BINDING_VERIFIED for c in status.get("conditions") or []
    )
    return Outcome(tuple(actions), status_of(status), LOOK_AGAIN_SECONDS if unverified or not state.started else None)


def _reverified(
    conditions: list[dict[str, Any]], kept: Replicas, report: BindingReport | None, generation: int | None
) -> list[dict[str, Any]]:
    """BindingVerified of a job whose replaced ranks the driver has not reported yet: the report found after their
    replacement (observe.py reads only that one then) verifies them, and they are no longer awaited; without it
    the condition says what it waits for."""
    if report is not None:
        for component in kept.components:
            component.pop("unverified", None)
        return conditions
    waiting = ", ".join(f"{name} {_ranks(ranks)}" for name, ranks in kept.unverified.items())
    message = f"waiting for the driver's binding report of the replaced ranks: {waiting}"
    return cond.set_condition(conditions, cond.BINDING_VERIFIED, None, cond.REVERIFYING, message, generation)


def _ranks(ranks: list[int]) -> str:
    return "rank " + ", ".join(map(str, ranks)) if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


def _failure_named(job: Job, world: World, new: dict[str, Any], kuberay_reason: str) -> dict[str, Any]:
    """A failed driver's status says what died when a process or pod did, in one line; else KubeRay's reason
    with the first line of its message (the full log stays where driverLog points)."""
    conditions = new.get("conditions") or []
    if any(c.get("type") == cond.BINDING_VERIFIED and c.get("status") == "False" for c in conditions):
        return new  # the binding check failed: its message names the rank already
    since = cond.parse_time(new.get("driverStartTime"))
    cause = lost_process(list(world.pods), list(world.events), world.nodes, world.plan, world.driver_log_tail, since)
    if cause is None:
        cause = job.framework.missing_from_image(world.driver_log_tail)
    log = new.get("driverLog")
    if cause is None:
        new["message"] = f"{cond.brief(new['message'].split(' (driver log: ')[0])} (driver log: {log})"
        return new
    message = cond.brief(cause.message)
    new["conditions"] = cond.set_condition(
        conditions, cond.DRIVER_SUCCEEDED, False, cause.reason, message, job.generation
    )
    new["message"] = f"{message} (driver log: {log})"
    return new


def _new_attempt(job: Job, world: World, rayjob: Mapping[str, Any]) -> dict[str, Any] | None:
    """A restart record when KubeRay submitted the driver again since the status was written: the driver's
    start time (KubeRay's rayJobInfo.startTime, from the Ray job's own record) differs from the one recorded.
    A new head pod (the old one lost) or KubeRay's retry count tells why."""
    info = (rayjob.get("status") or {}).get("rayJobInfo") or {}
    started, recorded = info.get("startTime"), job.status.get("driverStartTime")
    if not started or not recorded or started == recorded:
        return None
    attempt = int(job.status.get("attempts") or 1) + 1
    base = {"attempt": attempt, "time": cond.timestamp(world.now), "inPlace": True}
    # A new head first: when the head goes, the workers lose its GCS and exit too, so a worker's exit beside a
    # new head is the consequence, not the cause.
    recorded_at = cond.parse_time(recorded)
    heads = [
        p
        for p in world.pods
        if (p.get("metadata", {}).get("labels") or {}).get(KUBERAY_NODE_TYPE_LABEL) == "head"
        and (cond.parse_time(p["metadata"].get("creationTimestamp")) or world.now) > (recorded_at or world.now)
    ]
    if heads:
        head = heads[0]
        node = (head.get("spec") or {}).get("nodeName") or "an unbound node"
        message = (
            f"the head pod was lost and replaced by {head['metadata']['name']} on {node}; "
            f"KubeRay submitted the driver again (attempt {attempt})"
        )
        return {**base, "reason": "HeadPodReplaced", "message": message}
    cause = lost_process(list(world.pods), list(world.events), world.nodes, world.plan, "", recorded_at)
    if cause is not None:
        return {
            **base,
            "reason": cause.reason,
            "message": cond.brief(f"{cause.message}; the driver was submitted again"),
        }
    failed = int((rayjob.get("status") or {}).get("failed") or 0)
    reason = "DriverRetried" if failed else "DriverResubmitted"
    message = f"KubeRay submitted the driver again (attempt {attempt}, started {started})"
    return {**base, "reason": reason, "message": message}

"""Mirror a job's RayJob (its driver) into the RLJob.

Phase Succeeded or Failed when the driver ends (KubeRay's jobStatus and jobDeploymentStatus), the
DriverSucceeded condition with KubeRay's reason, the command that prints the driver's log, and the binding
report the driver printed (placement_core.launcher.verify): the BindingVerified condition and per-component
verified counts; a mismatch fails the job naming the first bad rank.

The report is read from the driver's log, the one place a driver writes that the operator can read without
granting the Ray pods any Kubernetes permission (the operator needs `get` on pods and pods/log). In K8sJobMode
that log is in the submitter Job's pods (KubeRay's `ray job submit` streams the driver's output; a failed one is
retried, see report_in); in SidecarMode, the head pod's submitter container.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import kopf

from placement_core.launcher.verify import BindingReport, find_report
from rlplace_operator.conditions import set_condition
from rlplace_operator.handlers.nodegroup import indexed
from rlplace_operator.handlers.queue import Ledger
from rlplace_operator.k8s import Kube
from rlplace_operator.models import GROUP, VERSION, ComponentBinding, JobPhase, RLJobSpec, SubmissionMode, dump
from rlplace_operator.names import (
    API_VERSION,
    JOB_LABEL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    NODEGROUP_PLURAL,
    RAY_GROUP,
    RAY_VERSION,
    RAYJOB_PLURAL,
    SUBMITTER_CONTAINER,
    rayjob_name,
)

DRIVER_CONDITION = "DriverSucceeded"
BINDING_CONDITION = "BindingVerified"
#: How much of the driver's log is searched for the report (the driver prints it right after launching).
REPORT_LOG_BYTES = 4 * 1024 * 1024
#: How often a running driver's log is looked at until its binding report appears.
BINDING_RECHECK_SECONDS = 5.0


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
    if spec.get("suspend") or deployment in ("Suspending", "Suspended"):
        return DriverState(JobPhase.SUSPENDED, "Suspended", "the job is suspended; its driver was stopped")
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
) -> dict[str, Any]:
    """The RLJob status fields that follow the RayJob and the driver's binding report (wire form; None
    removes a field)."""
    state = driver_state(rayjob)
    status = rayjob.get("status") or {}
    ray_cluster = status.get("rayClusterName") or None
    log = driver_log_command(namespace, job, mode, ray_cluster)
    conditions = list(job_status.get("conditions") or [])
    phase, reason, message = state.phase, state.reason, state.message
    binding: list[dict[str, Any]] | None = None
    if not state.started:
        # A driver that has not started yet (again: resumed or retried) has not verified anything.
        conditions = [c for c in conditions if c.get("type") != BINDING_CONDITION]
    elif report is not None:
        totals = report.totals()
        binding = [
            dump(ComponentBinding(name=n, verified=v, processes=totals[n])) for n, v in report.verified().items()
        ]
        bad = report.first_failure()
        conditions = set_condition(
            conditions, BINDING_CONDITION, bad is None, "Verified" if bad is None else "BindingMismatch",
            report.summary(), generation,
        )  # fmt: skip
        if bad is not None:
            phase, reason, message = JobPhase.FAILED, "BindingMismatch", f"binding check failed: {bad.describe()}"
    else:
        binding = job_status.get("binding")
    if phase in (JobPhase.SUCCEEDED, JobPhase.FAILED, JobPhase.RUNNING):
        conditions = set_condition(
            conditions, DRIVER_CONDITION, phase is JobPhase.SUCCEEDED, reason, message, generation
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
    }


def report_in(logs: Iterable[str], rayjob_message: str) -> BindingReport | None:
    """The binding report in the first of `logs` that has one, else in KubeRay's status message (which quotes
    the end of a failed driver's log); None if neither has one.

    Every submitter pod is looked at, newest first: KubeRay's submitter Job retries a pod that exits non-zero,
    so when a driver fails the newest pod is often a retry that has not started (or only started following
    the log) while the pod before it printed the whole run."""
    for log in logs:
        report = find_report(log)
        if report is not None:
            return report
    return find_report(rayjob_message)


def read_report(
    kube: Kube, namespace: str, job: str, mode: SubmissionMode, rayjob: Mapping[str, Any]
) -> BindingReport | None:
    """The binding report the driver printed (see report_in), or None (no log yet, or the driver printed
    none)."""
    status = rayjob.get("status") or {}
    selector = driver_log_selector(job, mode, status.get("rayClusterName"))
    logs = (
        () if selector is None else kube.container_log_heads(namespace, selector, SUBMITTER_CONTAINER, REPORT_LOG_BYTES)
    )
    return report_in(logs, status.get("message") or "")


def refresh(
    kube: Kube,
    namespace: str,
    job: str,
    spec: RLJobSpec,
    job_status: Mapping[str, Any],
    generation: int | None,
    rayjob: Mapping[str, Any],
    read_log_while_running: bool,
) -> dict[str, Any] | None:
    """The status patch that brings the RLJob in step with its RayJob and driver log; None if nothing changed.
    The log is read only once the driver ended (or while it runs, when asked) and no report was found yet."""
    mode = spec.run.submission_mode
    verified = any(c.get("type") == BINDING_CONDITION for c in job_status.get("conditions") or [])
    state = driver_state(rayjob)
    report = None
    if not verified and (state.finished or (state.started and read_log_while_running)):
        report = read_report(kube, namespace, job, mode, rayjob)
    new = driver_status(job_status, rayjob, report, namespace, job, mode, generation)
    if all(job_status.get(key) == value for key, value in new.items()):
        return None
    return new


def announce(namespace: str, job: str, uid: str, before: Mapping[str, Any], after: Mapping[str, Any]) -> None:
    """An Event on the RLJob when the driver ends or the binding check reports."""
    ref = {"apiVersion": API_VERSION, "kind": "RLJob", "metadata": {"namespace": namespace, "name": job, "uid": uid}}
    for condition in after.get("conditions") or []:
        if condition["type"] not in (DRIVER_CONDITION, BINDING_CONDITION):
            continue
        old = next((c for c in before.get("conditions") or [] if c.get("type") == condition["type"]), {})
        if (old.get("status"), old.get("reason")) == (condition["status"], condition["reason"]):
            continue
        if condition["reason"] == "Running":
            continue
        post = kopf.info if condition["status"] == "True" else kopf.warn
        post(ref, reason=condition["reason"], message=condition["message"])


def _owned_by(body: Mapping[str, Any], uid: str) -> bool:
    return uid in {ref.get("uid") for ref in body.get("metadata", {}).get("ownerReferences") or []}


@kopf.on.event(RAY_GROUP, RAY_VERSION, RAYJOB_PLURAL, labels={MANAGED_BY_LABEL: MANAGED_BY})
def rayjob_mirror(body: kopf.Body, namespace: str, labels: kopf.Labels, type: str, memo: kopf.Memo, **_: Any) -> None:
    """Follow the RayJob's status. The RLJob is read fresh (not from an index): the status written here
    replaces its conditions, and a RayJob changes state only a few times in its life."""
    if type == "DELETED" or JOB_LABEL not in labels:
        return
    kube: Kube = memo.kube
    name = labels[JOB_LABEL]
    job = kube.get_rljob(namespace, name)
    if job is None or not _owned_by(body, job["metadata"]["uid"]) or not job["spec"].get("entrypoint"):
        return
    status = job.get("status") or {}
    spec = RLJobSpec.model_validate(job["spec"])
    # A driver that just started has rarely printed its report yet; the timer below looks while it runs, so
    # the phase change is written without waiting on a log read.
    new = refresh(kube, namespace, name, spec, status, job["metadata"].get("generation"), dict(body), False)
    if new is not None:
        kube.patch_rljob_status(namespace, name, new)
        announce(namespace, name, job["metadata"]["uid"], status, new)
    if driver_state(dict(body)).finished:
        # KubeRay deletes the cluster of an ended driver (or keeps it, then it still holds its nodes through
        # its rlplace.io/nodes annotation): this process's reservation is no longer needed either way.
        ledger: Ledger = memo.ledger
        ledger.release((namespace, name))


def _driver_unverified(entry: Mapping[str, Any]) -> bool:
    status = entry["status"]
    return (
        status.get("rayJob") is not None
        and status.get("phase") == JobPhase.RUNNING
        and not any(c.get("type") == BINDING_CONDITION for c in status.get("conditions") or [])
    )


# A timer on NodeGroups, not on RLJobs: kopf puts a finalizer on every object a timer watches, and deleting a
# job must not need the operator. Each job is looked at by the timer of its first NodeGroup only.
@kopf.timer(GROUP, VERSION, NODEGROUP_PLURAL, interval=BINDING_RECHECK_SECONDS)
def nodegroup_binding_recheck(name: str, memo: kopf.Memo, rljob_index: kopf.Index, **_: Any) -> None:
    """A running driver's RayJob may not change for hours after the driver printed its report, so jobs
    Running without a BindingVerified condition look at the driver's log now and then."""
    kube: Kube = memo.kube
    for key in rljob_index:
        entry = indexed(rljob_index, key)
        if entry is None or entry["nodeGroups"][:1] != [name] or not _driver_unverified(entry):
            continue
        namespace, job_name = key
        job = kube.get_rljob(namespace, job_name)
        live = kube.get_rayjob(namespace, rayjob_name(job_name))
        if job is None or live is None or not _owned_by(live, job["metadata"]["uid"]):
            continue
        status = job.get("status") or {}
        spec = RLJobSpec.model_validate(job["spec"])
        new = refresh(kube, namespace, job_name, spec, status, job["metadata"].get("generation"), live, True)
        if new is not None:
            kube.patch_rljob_status(namespace, job_name, new)
            announce(namespace, job_name, job["metadata"]["uid"], status, new)

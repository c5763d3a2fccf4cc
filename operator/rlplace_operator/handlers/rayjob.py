"""Mirror a job's RayJob (its driver) into the RLJob.

Phase Succeeded or Failed when the driver ends (KubeRay's jobStatus and jobDeploymentStatus), the
DriverSucceeded condition with KubeRay's reason, the command that prints the driver's log, and the binding
report the driver printed (placement_core.observe.verify): the BindingVerified condition and per-component
verified counts; a mismatch fails the job naming the first bad rank.

The decisions are in `reconcile.py`; the handlers that follow RayJobs are in `handlers/lifecycle.py`.

The report is read from the driver's log, the one place a driver writes that the operator can read without
granting the Ray pods any Kubernetes permission (the operator needs `get` on pods and pods/log). In K8sJobMode
that log is in the submitter Job's pods (KubeRay's `ray job submit` streams the driver's output; a failed one is
retried, see report_in); in SidecarMode, the head pod's submitter container.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from placement_core.observe.pools import ObservedPools, observed_pools_in, pool_report
from placement_core.observe.processes import Observed, framework_report, observed_in
from placement_core.observe.verify import BindingReport, find_report
from placement_core.plan import Plan
from rlplace_operator.api.base import dump
from rlplace_operator.api.conditions import set_condition
from rlplace_operator.api.names import (
    SUBMITTER_CONTAINER,
    rayjob_name,
)
from rlplace_operator.api.rljob import Framework, SubmissionMode
from rlplace_operator.api.status import ComponentBinding, JobPhase, ObservedProcesses
from rlplace_operator.kube import Kube

DRIVER_CONDITION = "DriverSucceeded"
BINDING_CONDITION = "BindingVerified"
#: How much of the driver's log is searched for the report (the driver prints it right after launching).
REPORT_LOG_BYTES = 4 * 1024 * 1024
#: How much of a failed driver's log the diagnosis reads: enough that Ray's own shutdown lines, printed after the
#: launcher's error, do not push that error out (they took more than 1 KiB in one CI run).
DRIVER_LOG_TAIL_LINES = 200
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
        conditions = [c for c in conditions if c.get("type") != BINDING_CONDITION]
    elif report is not None:
        totals = report.totals()
        binding = [
            dump(ComponentBinding(name=n, verified=v, processes=totals[n])) for n, v in report.verified().items()
        ]
        observed = observed_placement(report) or None
        bad = report.first_failure()
        verified = "Verified" if report.enforced else "Observed"
        conditions = set_condition(
            conditions, BINDING_CONDITION, bad is None, verified if bad is None else "BindingMismatch",
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
    conditions = set_condition(conditions, DRIVER_CONDITION, phase is JobPhase.SUCCEEDED, reason, message, generation)
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
    none). While the driver runs, only the newest submitter pod is read: after a restart (a lost head pod)
    the pods before it hold the previous attempt's report, and the new attempt must verify its own."""
    logs, running = _report_logs(kube, namespace, job, mode, rayjob)
    return report_in(logs, "" if running else (rayjob.get("status") or {}).get("message") or "")


def _report_logs(
    kube: Kube, namespace: str, job: str, mode: SubmissionMode, rayjob: Mapping[str, Any]
) -> tuple[Iterable[str], bool]:
    """The heads of the driver's logs where a report is looked for (newest submitter pod first; only it while
    the driver runs), and whether the driver still runs."""
    selector = driver_log_selector(job, mode, (rayjob.get("status") or {}).get("rayClusterName"))
    running = not driver_state(rayjob).finished
    if selector is None:
        return (), running
    return kube.container_log_heads(namespace, selector, SUBMITTER_CONTAINER, REPORT_LOG_BYTES, running), running


def read_framework_report(
    kube: Kube,
    namespace: str,
    job: str,
    mode: SubmissionMode,
    rayjob: Mapping[str, Any],
    plan: Plan,
    final: bool,
    framework: Framework,
) -> BindingReport | None:
    """A framework job's binding report, from the probe's lines in the driver's log (observe/processes.py; for
    veRL, whose GPU ids Ray assigns, observe/pools.py): None while no planned process was seen to
    differ and some are not seen yet, unless `final` (the driver ended, or the bound on its workers' start
    passed), when a process not seen is a problem too."""
    logs, _ = _report_logs(kube, namespace, job, mode, rayjob)
    if framework is Framework.VERL:
        pooled = next((seen for seen in map(observed_pools_in, logs) if not seen.empty), ObservedPools())
        return pool_report(plan, pooled, final=final)
    observed = next((seen for seen in map(observed_in, logs) if not seen.empty), Observed())
    return framework_report(plan, observed, final=final)


def driver_log_tail(kube: Kube, namespace: str, job: str, mode: SubmissionMode, rayjob: Mapping[str, Any]) -> str:
    """The end of the driver's log (what a failed driver printed last), '' when there is none."""
    selector = driver_log_selector(job, mode, (rayjob.get("status") or {}).get("rayClusterName"))
    return (
        ""
        if selector is None
        else kube.container_log_tail(namespace, selector, SUBMITTER_CONTAINER, DRIVER_LOG_TAIL_LINES)
    )

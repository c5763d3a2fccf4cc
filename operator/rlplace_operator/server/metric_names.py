"""The names and labels of every metric the operator serves at /metrics: one list that the collector
(server/metrics.py), the dashboards and the alert rules (monitoring/) all read, so a renamed metric breaks
the generated files' check instead of a panel in production.

Labels are the job (`namespace`, `rljob`), its `component`, a `node_group`, and small closed sets
(`phase`, `reason`, `state`, `use`, `cause`); never a process, rank or pod, whose count grows with the job.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class MetricName:
    name: str
    """The series name as Prometheus stores it: a counter's ends in _total, a histogram's series are
    name_bucket, name_sum and name_count."""
    labels: tuple[str, ...]
    help: str


JOB_LABELS = ("namespace", "rljob")
COMPONENT_LABELS = (*JOB_LABELS, "component")

# -- what the driver reports (progress windows) ------------------------------------------------------------------

JOB_ITERATION = MetricName("rlplace_job_iteration", JOB_LABELS, "Latest iteration the job's driver reported")
JOB_LAST_STEP_SECONDS = MetricName(
    "rlplace_job_last_step_seconds", JOB_LABELS, "Wall-clock seconds of the latest reported iteration"
)
JOB_STEP_SECONDS = MetricName(
    "rlplace_job_step_seconds", JOB_LABELS, "Median wall-clock seconds per iteration (status.progress)"
)
COMPONENT_BUSY_SECONDS = MetricName(
    "rlplace_component_busy_seconds", COMPONENT_LABELS, "Median seconds a component is busy per iteration"
)
COMPONENT_IDLE_RATIO = MetricName(
    "rlplace_component_idle_ratio",
    COMPONENT_LABELS,
    "Share of the median iteration a component is not busy (1 - busy / iteration)",
)
COMPONENT_IDLE_STREAK = MetricName(
    "rlplace_component_idle_streak",
    COMPONENT_LABELS,
    "Latest reported iterations in a row in which the component was idle over half of the iteration",
)
JOB_BOTTLENECK = MetricName(
    "rlplace_job_bottleneck",
    COMPONENT_LABELS,
    "1, one series per job: its component with the largest median busy seconds (status.progress.bottleneck)",
)
COMPONENT_GPU_SECONDS = MetricName(
    "rlplace_component_gpu_seconds",
    (*COMPONENT_LABELS, "use"),
    "Per median iteration, GPU-seconds the component holds (use=held: its GPUs x the iteration) and uses "
    "(use=busy: its GPUs x its busy seconds); 1 - busy / held is its GPU idle share",
)

# -- what the job's status says (the operator's indexes, at scrape time) ----------------------------------------

JOBS = MetricName("rlplace_jobs", ("namespace", "phase", "reason"), "RLJobs by phase and the reason of their state")
JOB_PHASE = MetricName(
    "rlplace_job_phase", (*JOB_LABELS, "phase", "reason"), "1 for the job's phase and the reason of its state"
)
JOB_WAITING_SECONDS = MetricName(
    "rlplace_job_waiting_seconds",
    JOB_LABELS,
    "Seconds a Pending or Queued job has waited for admission (since it was made or last gave its nodes back)",
)
JOB_GPUS = MetricName("rlplace_job_gpus", JOB_LABELS, "GPUs the job's placement uses (status.gpus)")
JOB_REQUESTED_GPUS = MetricName(
    "rlplace_job_requested_gpus",
    JOB_LABELS,
    "GPUs a Pending or Queued job asks for: its plan on its node groups' ready nodes (whole nodes count all their "
    "GPUs)",
)
COMPONENT_GPUS = MetricName("rlplace_component_gpus", COMPONENT_LABELS, "GPUs of the component's processes")
JOB_PREDICTED_SECONDS = MetricName(
    "rlplace_job_predicted_iteration_seconds",
    JOB_LABELS,
    "Predicted seconds per iteration of the placement the job runs (auto placement or its recommendation)",
)
JOB_RESTARTS = MetricName(
    "rlplace_job_restarts", (*JOB_LABELS, "reason"), "Restarts of the job's driver for its current spec, by reason"
)
JOB_PREEMPTIONS = MetricName(
    "rlplace_job_preemptions", JOB_LABELS, "Times Kueue moved the job (preempted it or swapped a node) for its spec"
)
JOB_REPLACEMENTS = MetricName(
    "rlplace_job_replacements",
    (*JOB_LABELS, "cause"),
    "Changes to a running job's processes without a restart, by cause: replan (a recommendation applied), "
    "lost (ranks of a lost pod replaced in place), resize (the elastic loop changed replicas)",
)
JOB_BINDING_VERIFIED = MetricName(
    "rlplace_job_binding_verified",
    JOB_LABELS,
    "1 when every process verified its placement from inside (BindingVerified True), 0 on a mismatch",
)
COMPONENT_PROCESSES = MetricName(
    "rlplace_component_processes",
    (*COMPONENT_LABELS, "state"),
    "A component's processes: state=launched by the driver, state=verified matched their plan from inside",
)
NODEGROUP_GPUS = MetricName(
    "rlplace_nodegroup_gpus",
    ("node_group", "state"),
    "GPUs (hardware units) of a NodeGroup's ready nodes: state=total, admitted (held by admitted RLJobs), "
    "free (held by no pod)",
)
NODEGROUP_NODES = MetricName(
    "rlplace_nodegroup_nodes", ("node_group", "state"), "Nodes of a NodeGroup: state=total, ready"
)
QUEUE_WAIT_SECONDS = MetricName(
    "rlplace_queue_wait_seconds",
    ("namespace",),
    "Histogram of seconds from a job's creation to its admission (each admission counted once per operator run)",
)

# -- the operator itself -----------------------------------------------------------------------------------------

RECONCILE_SECONDS = MetricName(
    "rlplace_reconcile_duration_seconds", ("trigger",), "Histogram of the seconds one look at a job takes"
)
RECONCILE_ERRORS = MetricName(
    "rlplace_reconcile_errors_total",
    ("trigger", "kind"),
    "Looks at a job that failed: kind=api (the API server refused a call), kind=error (anything else)",
)
RECONCILE_RETRIES = MetricName(
    "rlplace_reconcile_retries_total",
    ("reason",),
    "Looks at a job decided again on the job read anew: reason=conflict (a status write refused with 409 Conflict: "
    "someone wrote in between), reason=stale (decided on the watch's copy, which was behind the job)",
)
QUEUE_PASS_SECONDS = MetricName(
    "rlplace_queue_pass_duration_seconds", (), "Histogram of the seconds one queue pass (every waiting job) takes"
)
API_ERRORS = MetricName(
    "rlplace_api_errors_total", ("code",), "Kubernetes API calls of the operator's looks that failed, by HTTP status"
)
PROGRESS_REPORTS = MetricName("rlplace_progress_reports_total", ("code",), "Progress reports received, by HTTP status")
PROGRESS_WRITES = MetricName("rlplace_progress_writes_total", ("result",), "status.progress writes")
PROGRESS_TOKEN_REVIEWS = MetricName(
    "rlplace_progress_token_reviews_total", (), "Tokens reviewed (identity cache misses)"
)

ALL = tuple(value for value in list(globals().values()) if isinstance(value, MetricName))

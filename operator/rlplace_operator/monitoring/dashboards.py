"""The Grafana dashboards of rlplace, built with grafana-foundation-sdk: fleet (every job and node group), job (one
RLJob, picked by the namespace and rljob variables) and operator (the operator's own work).

Each panel's PromQL is built from server/metric_names.py through promql.py, so a renamed metric or label fails the
generator instead of leaving an empty panel. `python -m rlplace_operator.monitoring` writes the JSON into the chart
(charts/rlplace/dashboards/), which ships them as ConfigMaps for Grafana's dashboard sidecar.
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Iterator, Mapping
from typing import Any, Literal

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import dashboard as dashboard_builders
from grafana_foundation_sdk.builders import prometheus, stat, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync,
    DataSourceRef,
    VariableRefresh,
    VariableSort,
)

from rlplace_operator.monitoring.promql import by, equals, histogram_quantile, series
from rlplace_operator.server import metric_names as m

#: The Prometheus datasource every panel reads: the dashboard's `datasource` variable, so one file serves any
#: Grafana whatever its datasource is named.
DATASOURCE_VARIABLE = "datasource"
DATASOURCE = DataSourceRef(type_val="prometheus", uid=f"${{{DATASOURCE_VARIABLE}}}")
#: Grafana's rate window: at least four scrape intervals of the datasource (resolved by Grafana at query time).
RATE_WINDOW = "$__rate_interval"
#: The job dashboard's variables, and the matchers its queries use.
JOB = {"namespace": equals("$namespace"), "rljob": equals("$rljob")}
QUANTILES = (0.5, 0.9, 0.99)
#: Grid width of a dashboard row (Grafana's).
ROW_WIDTH = 24

PanelKind = Literal["timeseries", "stat"]


@dataclasses.dataclass(frozen=True)
class Query:
    expr: str
    legend: str


@dataclasses.dataclass(frozen=True)
class PanelSpec:
    title: str
    description: str
    queries: tuple[Query, ...]
    unit: str = "short"
    kind: PanelKind = "timeseries"
    width: int = 12
    stacked: bool = False


@dataclasses.dataclass(frozen=True)
class DashboardSpec:
    name: str
    """The file name's stem in charts/rlplace/dashboards/ and the end of the dashboard's uid."""
    title: str
    description: str
    rows: tuple[tuple[str, tuple[PanelSpec, ...]], ...]
    job_variables: bool = False
    """namespace and rljob variables (label_values of the job's phase), for the job dashboard."""


def quantile_queries(metric: m.MetricName, by_labels: tuple[str, ...] = ()) -> tuple[Query, ...]:
    legend_labels = "".join(f" {{{{{label}}}}}" for label in by_labels)
    return tuple(
        Query(histogram_quantile(q, metric, RATE_WINDOW, by_labels), f"p{round(q * 100)}{legend_labels}")
        for q in QUANTILES
    )


def fleet() -> DashboardSpec:
    gpu_seconds = m.COMPONENT_GPU_SECONDS
    busy = f"sum {by(gpu_seconds, 'component')} ({series(gpu_seconds, use=equals('busy'))})"
    held = f"sum {by(gpu_seconds, 'component')} ({series(gpu_seconds, use=equals('held'))})"
    jobs_panels = (
        PanelSpec(
            "Jobs by phase",
            "RLJobs in each phase, from the operator's view of their status.",
            (Query(f"sum {by(m.JOBS, 'phase')} ({series(m.JOBS)})", "{{phase}}"),),
            stacked=True,
        ),
        PanelSpec(
            "Jobs by phase and reason",
            "Why jobs are where they are: the reason of each phase (Queued for capacity, Pending for a pod, ...).",
            (Query(f"sum {by(m.JOBS, 'phase', 'reason')} ({series(m.JOBS)})", "{{phase}} {{reason}}"),),
            stacked=True,
        ),
        PanelSpec(
            "Queue wait before admission",
            "Quantiles of the seconds from a job's creation to its admission, over the admissions of the window.",
            quantile_queries(m.QUEUE_WAIT_SECONDS),
            unit="s",
        ),
        PanelSpec(
            "Longest-waiting jobs",
            "The ten Pending or Queued jobs that have waited longest for admission.",
            (Query(f"topk(10, {series(m.JOB_WAITING_SECONDS)})", "{{namespace}}/{{rljob}}"),),
            unit="s",
        ),
        PanelSpec(
            "GPUs asked for by waiting jobs",
            "Per Pending or Queued job, the GPUs its plan asks for (whole nodes count all their GPUs).",
            (Query(f"topk(10, {series(m.JOB_REQUESTED_GPUS)})", "{{namespace}}/{{rljob}}"),),
        ),
    )
    gpu_panels = (
        PanelSpec(
            "Admitted vs free GPUs per node group",
            "GPUs of each NodeGroup's ready nodes held by admitted RLJobs, and held by no pod, against the total.",
            tuple(
                Query(
                    f"sum {by(m.NODEGROUP_GPUS, 'node_group')} ({series(m.NODEGROUP_GPUS, state=equals(state))})",
                    f"{{{{node_group}}}} {state}",
                )
                for state in ("admitted", "free", "total")
            ),
        ),
        PanelSpec(
            "Nodes per node group",
            "Ready and total nodes of each NodeGroup.",
            (
                Query(
                    f"sum {by(m.NODEGROUP_NODES, 'node_group', 'state')} ({series(m.NODEGROUP_NODES)})",
                    "{{node_group}} {{state}}",
                ),
            ),
        ),
        PanelSpec(
            "GPU idle share by component role",
            "Over all running jobs, the share of the GPU-seconds each component role holds that it does not use "
            "(1 - busy / held); high means GPUs waiting on another component.",
            (Query(f"1 - {busy} / {held}", "{{component}}"),),
            unit="percentunit",
        ),
        PanelSpec(
            "GPUs of running jobs by component role",
            "GPUs the processes of each component role use, summed over jobs.",
            (Query(f"sum {by(m.COMPONENT_GPUS, 'component')} ({series(m.COMPONENT_GPUS)})", "{{component}}"),),
            stacked=True,
        ),
    )
    disruption_panels = (
        PanelSpec(
            "Restarts by reason",
            "Driver restarts of the jobs' current specs, summed by reason.",
            (Query(f"sum {by(m.JOB_RESTARTS, 'reason')} ({series(m.JOB_RESTARTS)})", "{{reason}}"),),
            width=8,
        ),
        PanelSpec(
            "Replacements by cause",
            "Changes to running jobs' processes without a restart: replan, lost (ranks replaced), resize.",
            (Query(f"sum {by(m.JOB_REPLACEMENTS, 'cause')} ({series(m.JOB_REPLACEMENTS)})", "{{cause}}"),),
            width=8,
        ),
        PanelSpec(
            "Preemptions by namespace",
            "Times Kueue moved a job (preempted it or swapped a node), summed per namespace.",
            (Query(f"sum {by(m.JOB_PREEMPTIONS, 'namespace')} ({series(m.JOB_PREEMPTIONS)})", "{{namespace}}"),),
            width=8,
        ),
    )
    verified = series(m.JOB_BINDING_VERIFIED)
    binding_panels = (
        PanelSpec(
            "Jobs with a verified binding",
            "Jobs whose every process verified its placement from inside (BindingVerified True).",
            (Query(f"count({verified} == 1) or vector(0)", "verified"),),
            kind="stat",
            width=6,
        ),
        PanelSpec(
            "Jobs with a binding mismatch",
            "Jobs with a process whose GPUs or node differ from its plan (the RLJobBindingMismatch alert).",
            (Query(f"count({verified} == 0) or vector(0)", "mismatched"),),
            kind="stat",
            width=6,
        ),
        PanelSpec(
            "Mismatched jobs",
            "Each job with a binding mismatch: `kubectl rlplace why` names the process.",
            (Query(f"{verified} == 0", "{{namespace}}/{{rljob}}"),),
        ),
    )
    return DashboardSpec(
        name="fleet",
        title="rlplace / Fleet",
        description="Every RLJob and NodeGroup: phases, the queue, GPUs admitted and free, disruptions, bindings.",
        rows=(
            ("Jobs and the queue", jobs_panels),
            ("GPUs", gpu_panels),
            ("Restarts, replacements, preemptions", disruption_panels),
            ("Binding", binding_panels),
        ),
    )


def job() -> DashboardSpec:
    gpu_seconds = series(m.COMPONENT_GPU_SECONDS, **JOB)
    state_panels = (
        PanelSpec(
            "Phase",
            "The job's phase and the reason of its state.",
            (
                Query(
                    f"max {by(m.JOB_PHASE, 'phase', 'reason')} ({series(m.JOB_PHASE, **JOB)}) == 1",
                    "{{phase}} {{reason}}",
                ),
            ),
            kind="stat",
            width=6,
        ),
        PanelSpec(
            "Iteration",
            "Latest iteration the job's driver reported.",
            (Query(series(m.JOB_ITERATION, **JOB), "iteration"),),
            kind="stat",
            width=6,
        ),
        PanelSpec(
            "GPUs",
            "GPUs the job's placement uses.",
            (Query(series(m.JOB_GPUS, **JOB), "GPUs"),),
            kind="stat",
            width=6,
        ),
        PanelSpec(
            "Binding verified",
            "1 when every process verified its placement from inside, 0 on a mismatch.",
            (Query(series(m.JOB_BINDING_VERIFIED, **JOB), "verified"),),
            kind="stat",
            width=6,
        ),
    )
    time_panels = (
        PanelSpec(
            "Iteration time: observed vs predicted",
            "Seconds of the latest iteration, the median iteration, and the placement's predicted iteration.",
            (
                Query(series(m.JOB_LAST_STEP_SECONDS, **JOB), "latest"),
                Query(series(m.JOB_STEP_SECONDS, **JOB), "median"),
                Query(series(m.JOB_PREDICTED_SECONDS, **JOB), "predicted"),
            ),
            unit="s",
        ),
        PanelSpec(
            "Bottleneck",
            "The component with the largest median busy seconds.",
            (Query(f"{series(m.JOB_BOTTLENECK, **JOB)} == 1", "{{component}}"),),
            kind="stat",
        ),
        PanelSpec(
            "Busy seconds per component",
            "Median seconds each component is busy per iteration.",
            (Query(series(m.COMPONENT_BUSY_SECONDS, **JOB), "{{component}}"),),
            unit="s",
        ),
        PanelSpec(
            "Idle ratio per component",
            "Share of the median iteration each component is not busy.",
            (Query(series(m.COMPONENT_IDLE_RATIO, **JOB), "{{component}}"),),
            unit="percentunit",
        ),
        PanelSpec(
            "Idle streak per component",
            "Iterations in a row in which the component was idle over half of the iteration "
            "(the RLJobComponentIdle alert).",
            (Query(series(m.COMPONENT_IDLE_STREAK, **JOB), "{{component}}"),),
        ),
        PanelSpec(
            "GPU-seconds held vs busy per component",
            "Per median iteration, the GPU-seconds each component holds (its GPUs x the iteration) and uses.",
            (Query(gpu_seconds, "{{component}} {{use}}"),),
            unit="s",
        ),
    )
    placement_panels = (
        PanelSpec(
            "GPUs per component",
            "GPUs of each component's processes.",
            (Query(series(m.COMPONENT_GPUS, **JOB), "{{component}}"),),
            stacked=True,
        ),
        PanelSpec(
            "Processes launched vs verified",
            "Per component, processes the driver launched and those that matched their plan from inside.",
            (Query(series(m.COMPONENT_PROCESSES, **JOB), "{{component}} {{state}}"),),
        ),
        PanelSpec(
            "Restarts by reason",
            "Restarts of the job's driver for its current spec.",
            (Query(series(m.JOB_RESTARTS, **JOB), "{{reason}}"),),
            width=8,
        ),
        PanelSpec(
            "Replacements by cause",
            "Changes to the job's processes without a restart.",
            (Query(series(m.JOB_REPLACEMENTS, **JOB), "{{cause}}"),),
            width=8,
        ),
        PanelSpec(
            "Preemptions and waiting",
            "Times Kueue moved the job, and seconds it has waited for admission while Pending or Queued.",
            (
                Query(series(m.JOB_PREEMPTIONS, **JOB), "preemptions"),
                Query(series(m.JOB_WAITING_SECONDS, **JOB), "waiting seconds"),
            ),
            width=8,
        ),
    )
    return DashboardSpec(
        name="job",
        title="rlplace / Job",
        description="One RLJob: its phase, iteration time against the prediction, each component's busy and idle "
        "time, GPU-seconds held and used, restarts and binding.",
        rows=(
            ("State", state_panels),
            ("Iteration time", time_panels),
            ("Placement and disruptions", placement_panels),
        ),
        job_variables=True,
    )


def operator() -> DashboardSpec:
    rate = f"[{RATE_WINDOW}]"
    reconcile_panels = (
        PanelSpec(
            "Reconcile duration",
            "Quantiles of the seconds one look at a job takes, by what triggered it.",
            quantile_queries(m.RECONCILE_SECONDS, ("trigger",)),
            unit="s",
        ),
        PanelSpec(
            "Reconciles per second",
            "Looks at a job per second, by trigger.",
            (
                Query(
                    f"sum {by(m.RECONCILE_SECONDS, 'trigger')} (rate({series(m.RECONCILE_SECONDS, '_count')}{rate}))",
                    "{{trigger}}",
                ),
            ),
            unit="ops",
        ),
        PanelSpec(
            "Reconcile errors per second",
            "Looks that failed: kind=api (the API server refused a call), kind=error (anything else; see the log).",
            (
                Query(
                    f"sum {by(m.RECONCILE_ERRORS, 'trigger', 'kind')} (rate({series(m.RECONCILE_ERRORS)}{rate}))",
                    "{{trigger}} {{kind}}",
                ),
            ),
            unit="ops",
        ),
        PanelSpec(
            "Queue pass duration",
            "Quantiles of the seconds one pass over every waiting job takes.",
            quantile_queries(m.QUEUE_PASS_SECONDS),
            unit="s",
        ),
    )
    api_panels = (
        PanelSpec(
            "API errors by code",
            "Kubernetes API calls of the operator's looks that failed, per second, by HTTP status.",
            (Query(f"sum {by(m.API_ERRORS, 'code')} (rate({series(m.API_ERRORS)}{rate}))", "{{code}}"),),
            unit="ops",
            width=8,
        ),
        PanelSpec(
            "Looks decided again",
            "Looks at a job decided again on the job read anew, per second: conflict (a status write refused "
            "with 409: someone wrote in between), stale (decided on the watch's copy, behind the job).",
            (
                Query(
                    f"sum {by(m.RECONCILE_RETRIES, 'reason')} (rate({series(m.RECONCILE_RETRIES)}{rate}))",
                    "{{reason}}",
                ),
            ),
            unit="ops",
            width=8,
        ),
        PanelSpec(
            "Progress reports by code",
            "Step-time reports the jobs' head pods POSTed, per second, by the HTTP status they got.",
            (
                Query(
                    f"sum {by(m.PROGRESS_REPORTS, 'code')} (rate({series(m.PROGRESS_REPORTS)}{rate}))",
                    "{{code}}",
                ),
                Query(f"sum(rate({series(m.PROGRESS_TOKEN_REVIEWS)}{rate}))", "token reviews"),
            ),
            unit="ops",
            width=8,
        ),
        PanelSpec(
            "Progress writes by result",
            "status.progress writes per second, by result.",
            (
                Query(
                    f"sum {by(m.PROGRESS_WRITES, 'result')} (rate({series(m.PROGRESS_WRITES)}{rate}))",
                    "{{result}}",
                ),
            ),
            unit="ops",
            width=8,
        ),
    )
    return DashboardSpec(
        name="operator",
        title="rlplace / Operator",
        description="The operator's own work: how long looks at jobs and queue passes take, their errors, the "
        "Kubernetes API's refusals, and the progress reports it receives and writes.",
        rows=(("Reconcile", reconcile_panels), ("API and progress", api_panels)),
    )


DASHBOARDS = (fleet, job, operator)


def _panel(spec: PanelSpec, panel_id: int) -> timeseries.Panel | stat.Panel:
    panel: timeseries.Panel | stat.Panel
    if spec.kind == "stat":
        # A stat of a label (phase, bottleneck) shows the series name, which its legend makes the label's value.
        text_mode = common.BigValueTextMode.NAME if "{{" in spec.queries[0].legend else common.BigValueTextMode.AUTO
        panel = stat.Panel().text_mode(text_mode).graph_mode(common.BigValueGraphMode.NONE)
    else:
        panel = timeseries.Panel().legend(
            common_builders.VizLegendOptions()
            .display_mode(common.LegendDisplayMode.TABLE)
            .placement(common.LegendPlacement.RIGHT)
            .show_legend(True)
            .calcs(["lastNotNull", "max"])
        )
        if spec.stacked:
            panel = panel.stacking(common_builders.StackingConfig().mode(common.StackingMode.NORMAL)).fill_opacity(30)
    panel = panel.id(panel_id).title(spec.title).description(spec.description).datasource(DATASOURCE)
    panel = panel.unit(spec.unit).span(spec.width).height(5 if spec.kind == "stat" else 8)
    for index, query in enumerate(spec.queries):
        target = prometheus.Dataquery().expr(query.expr).legend_format(query.legend).ref_id(chr(ord("A") + index))
        panel = panel.with_target(target.instant() if spec.kind == "stat" else target.range())
    return panel


def _variables(spec: DashboardSpec) -> list[Any]:
    variables: list[Any] = [
        dashboard_builders.DatasourceVariable(DATASOURCE_VARIABLE).label("Data source").type("prometheus")
    ]
    if spec.job_variables:
        phase = m.JOB_PHASE.name
        for name, query in (
            ("namespace", f"label_values({phase}, namespace)"),
            ("rljob", f'label_values({phase}{{namespace="$namespace"}}, rljob)'),
        ):
            variables.append(
                dashboard_builders.QueryVariable(name)
                .label(name)
                .datasource(DATASOURCE)
                .query({"query": query, "refId": f"{name}-variable"})
                .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
                .sort(VariableSort.ALPHABETICAL_ASC)
            )
    return variables


def build(spec: DashboardSpec) -> dict[str, Any]:
    """The dashboard as Grafana's JSON model (a dict)."""
    board = (
        dashboard_builders.Dashboard(spec.title)
        .uid(f"rlplace-{spec.name}")
        .description(spec.description)
        .tags(["rlplace"])
        .editable()
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .time("now-6h", "now")
        .refresh("30s")
        .timezone("browser")
        .variables(_variables(spec))
    )
    panel_id = 1
    for row_title, panels in spec.rows:
        board = board.with_row(dashboard_builders.Row(row_title).id(panel_id))
        panel_id += 1
        for panel in panels:
            board = board.with_panel(_panel(panel, panel_id))
            panel_id += 1
    return json.loads(json.dumps(board.build(), cls=JSONEncoder))


def render(spec: DashboardSpec) -> str:
    """The file's text: sorted keys, so a change to the code is a readable diff of the file."""
    return json.dumps(build(spec), indent=2, sort_keys=True) + "\n"


def panels(board: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    for panel in board.get("panels", []):
        yield panel
        yield from panel.get("panels", [])  # a collapsed row holds its panels


def panel_queries() -> list[tuple[str, str, str]]:
    """(dashboard title, panel title, PromQL) of every query of every dashboard, read back from the JSON that ships,
    for the e2e test that evaluates each on a real Prometheus (see `resolve_variables`)."""
    found = []
    for make in DASHBOARDS:
        board = build(make())
        for panel in panels(board):
            for target in panel.get("targets", []):
                found.append((board["title"], panel["title"], target["expr"]))
    return found


_VARIABLE = re.compile(r"\$\{(\w+)\}|\$(\w+)")


def resolve_variables(expr: str, values: Mapping[str, str]) -> str:
    """`expr` with Grafana's variables ($namespace, ${rljob}, $__rate_interval) replaced by `values`, as Grafana
    does before it sends a query; an unknown variable raises, naming it."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in values:
            raise KeyError(f"no value for Grafana variable {name!r} in {expr!r} (given: {', '.join(values)})")
        return values[name]

    return _VARIABLE.sub(value, expr)

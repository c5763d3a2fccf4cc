"""Prometheus metrics of the operator, served on its metrics port (`/metrics`); names and labels in
metric_names.py (docs/monitoring.md).

Three sources, each read at scrape time, so nothing is kept twice and a forgotten job's series go with it:
- the progress windows the endpoint keeps (progress.ProgressService): step and busy times per component;
- the operator's indexes as the latest queue pass copied them (`OperatorMetrics.observe_pass`): each job's phase,
  the reason of its state, restarts, binding, GPUs; each NodeGroup's GPUs admitted and free;
- the operator's own counters and histograms (reconcile time and errors, queue pass time, API errors), kept by
  prometheus-client and fed by the controllers (`OperatorMetrics.look`).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from aiohttp import web
from kubernetes.client.exceptions import ApiException
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from pydantic import ValidationError

from rlplace_operator.admission.ledger import Ledger
from rlplace_operator.admission.queue import GroupGpus, group_gpus, requested_gpus
from rlplace_operator.api import conditions
from rlplace_operator.api.names import JobKey
from rlplace_operator.api.status import JobPhase, RLJobStatus
from rlplace_operator.cluster.snapshot import Snapshot, indexed
from rlplace_operator.server import metric_names as names
from rlplace_operator.server.progress import ProgressService, Window, iteration_seconds

# No `_created` series beside each counter and histogram: no dashboard or alert reads them, and they would double
# the series of every labelled counter.
disable_created_metrics()

#: A component idle over this share of an iteration counts towards its idle streak.
IDLE_SHARE = 0.5
#: The conditions whose reason says why a job is where it is, in the order a job passes them: the first False
#: one is the reason of its state.
REASON_CONDITIONS = (
    conditions.VALIDATED,
    conditions.PLACED,
    conditions.ADMITTED,
    conditions.RAYCLUSTER_READY,
    conditions.DRIVER_SUCCEEDED,
    conditions.BINDING_VERIFIED,
)
#: Buckets of the queue wait (created -> admitted), seconds: a burst admitted at once to a day's wait.
QUEUE_WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400)
#: Buckets of one look at a job and of one queue pass, seconds.
RECONCILE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


def _family(metric: names.MetricName, kind: type[GaugeMetricFamily] = GaugeMetricFamily) -> Any:
    """A metric family for one of metric_names' metrics (a counter's family takes its name without _total)."""
    name = metric.name.removesuffix("_total") if kind is CounterMetricFamily else metric.name
    return kind(name, metric.help, labels=list(metric.labels))


def _seconds(value: object) -> float | None:
    when = conditions.parse_time(value)
    return when.timestamp() if when is not None else None


@dataclasses.dataclass(frozen=True)
class JobView:
    """What the metrics read of one job: its status parsed once per version of its index entry."""

    created: float | None
    status: RLJobStatus
    raw_phase: str
    entry: Mapping[str, Any] = dataclasses.field(compare=False, repr=False)
    """The index entry it was read from (a job whose entry is the same object has not changed)."""

    @classmethod
    def of(cls, entry: Mapping[str, Any]) -> JobView:
        raw = entry.get("status") or {}
        try:
            status = RLJobStatus.model_validate(raw)
        except ValidationError:  # a status this operator did not write (another version's): its phase only
            status = RLJobStatus()
        return cls(_seconds(entry.get("created")), status, str(raw.get("phase") or "Unknown"), entry)

    def condition(self, type_: str) -> conditions.Condition | None:
        return next((c for c in self.status.conditions if c.type == type_), None)

    @property
    def phase(self) -> str:
        """Its phase as written (a status this operator could not read keeps the phase it says)."""
        return self.status.phase.value if self.status.phase is not None else self.raw_phase

    @property
    def reason(self) -> str:
        """The reason of the first condition a job has not passed; for an ended job, how its driver ended."""
        for type_ in REASON_CONDITIONS:
            found = self.condition(type_)
            if found is not None and found.status == "False":
                return found.reason
        if self.status.phase in (JobPhase.SUCCEEDED, JobPhase.FAILED):
            ended = self.condition(conditions.DRIVER_SUCCEEDED)
            return ended.reason if ended is not None else ""
        return ""

    def waiting_since(self) -> float | None:
        """When a Pending or Queued job began to wait: when it last lost its admission, else when it was made."""
        if self.status.phase not in (JobPhase.PENDING, JobPhase.QUEUED):
            return None
        admitted = self.condition(conditions.ADMITTED)
        if admitted is not None and admitted.status == "False":
            since = _seconds(admitted.last_transition_time)
            if since is not None and (self.created is None or since > self.created):
                return since
        return self.created

    def admitted_after(self) -> tuple[str, float] | None:
        """(when, seconds from creation) of its current admission."""
        admitted = self.condition(conditions.ADMITTED)
        if admitted is None or admitted.status != "True" or self.created is None:
            return None
        at = _seconds(admitted.last_transition_time)
        return (admitted.last_transition_time, max(0.0, at - self.created)) if at is not None else None

    def component_gpus(self) -> dict[str, int]:
        placement = self.status.placement
        return {c.name: c.gpus for c in placement.components} if placement is not None else {}


@dataclasses.dataclass
class Fleet:
    """The latest queue pass's copy of the indexes, with each job's view (parsed again only when its entry
    changed: kopf makes a new entry per change)."""

    snapshot: Snapshot
    ledger: Ledger
    views: dict[JobKey, JobView]


class OperatorMetrics:
    """The operator's metrics: its own counters, and what the latest queue pass saw (read at scrape time)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.registry = CollectorRegistry()
        self.reconcile_seconds = self._histogram(names.RECONCILE_SECONDS, RECONCILE_BUCKETS)
        self.reconcile_errors = self._counter(names.RECONCILE_ERRORS)
        self.queue_pass_seconds = self._histogram(names.QUEUE_PASS_SECONDS, RECONCILE_BUCKETS)
        self.api_errors = self._counter(names.API_ERRORS)
        self.reconcile_retries = self._counter(names.RECONCILE_RETRIES)
        self.queue_wait = self._histogram(names.QUEUE_WAIT_SECONDS, QUEUE_WAIT_BUCKETS)
        self.fleet: Fleet | None = None
        self._lock = threading.Lock()
        self._admissions: dict[JobKey, str] = {}
        """Per job, the admission (its Admitted condition's transition time) the queue wait has counted."""

    def _histogram(self, metric: names.MetricName, buckets: tuple[float, ...]) -> Histogram:
        return Histogram(metric.name, metric.help, metric.labels, registry=self.registry, buckets=buckets)

    def _counter(self, metric: names.MetricName) -> Counter:
        # prometheus-client adds the _total a counter's series carry.
        return Counter(metric.name.removesuffix("_total"), metric.help, metric.labels, registry=self.registry)

    @contextlib.contextmanager
    def look(self, trigger: str) -> Iterator[None]:
        """Time one look at a job and count its failure (the exception goes on)."""
        start = time.perf_counter()
        try:
            yield
        except ApiException as err:
            self.api_errors.labels(str(err.status)).inc()
            if err.status != 404:  # the job or its child went meanwhile: nothing failed
                self.reconcile_errors.labels(trigger, "api").inc()
            raise
        except Exception as err:
            # kopf's own TemporaryError/PermanentError are how a look says it waits: not a failure of the look.
            if type(err).__module__.split(".")[0] != "kopf":
                self.reconcile_errors.labels(trigger, "error").inc()
            raise
        finally:
            self.reconcile_seconds.labels(trigger).observe(time.perf_counter() - start)

    def decided_again(self, reasons: Iterable[str]) -> None:
        """A look decided again on the job read anew, for each of `reasons` (reconcile.run.Looked.decided_again)."""
        for reason in reasons:
            self.reconcile_retries.labels(reason).inc()

    def observe_pass(self, snapshot: Snapshot, ledger: Ledger, seconds: float) -> None:
        """A queue pass ran on `snapshot`: keep it for the next scrape and count the admissions it shows."""
        self.queue_pass_seconds.observe(seconds)
        with self._lock:
            known = self.fleet.views if self.fleet is not None else {}
        views: dict[JobKey, JobView] = {}
        for key in list(snapshot.rljobs):
            entry = indexed(snapshot.rljobs, key)
            if entry is None:
                continue
            view = known.get(key)
            views[key] = view if view is not None and view.entry is entry else JobView.of(entry)
        admitted = []
        with self._lock:
            self.fleet = Fleet(snapshot, ledger, views)
            for key, view in views.items():
                after = view.admitted_after()
                if after is not None and self._admissions.get(key) != after[0]:
                    self._admissions[key] = after[0]
                    admitted.append((key[0], after[1]))
            for key in [k for k in self._admissions if k not in views]:
                del self._admissions[key]
        for namespace, seconds_waited in admitted:
            self.queue_wait.labels(namespace).observe(seconds_waited)


def job_families(key: JobKey, view: JobView | None, window: Window | None) -> list[Metric]:
    """Every family of one job's series (in JOB_FAMILIES' order): from its status (when the latest pass saw the job)
    and its progress window (when its driver reports). Not its waiting time, which grows with the clock."""
    families = {metric.name: _family(metric) for metric in JOB_FAMILIES}
    labels = list(key)
    held: dict[str, int] = {}
    if view is not None:
        status = view.status
        phase = view.phase
        families[names.JOB_PHASE.name].add_metric([*labels, phase, view.reason], 1)
        if status.gpus is not None:
            families[names.JOB_GPUS.name].add_metric(labels, status.gpus)
        held = view.component_gpus()
        for component, count in held.items():
            families[names.COMPONENT_GPUS.name].add_metric([*labels, component], count)
        expected = status.predicted_iteration_time
        if expected is None and status.recommendation is not None:
            expected = status.recommendation.current_predicted_seconds
        if expected is not None:
            families[names.JOB_PREDICTED_SECONDS.name].add_metric(labels, expected)
        by_reason: dict[str, int] = {}
        for restart in status.restarts:
            by_reason[restart.reason] = by_reason.get(restart.reason, 0) + 1
        for why, count in sorted(by_reason.items()):
            families[names.JOB_RESTARTS.name].add_metric([*labels, why], count)
        families[names.JOB_PREEMPTIONS.name].add_metric(labels, status.preemptions or 0)
        replacements = families[names.JOB_REPLACEMENTS.name]
        replacements.add_metric([*labels, "replan"], len(status.replacements))
        replacements.add_metric([*labels, "lost"], sum(c.replaced or 0 for c in status.components))
        replacements.add_metric([*labels, "resize"], len(status.resizes))
        verified = view.condition(conditions.BINDING_VERIFIED)
        if verified is not None and verified.status != "Unknown":
            families[names.JOB_BINDING_VERIFIED.name].add_metric(labels, 1 if verified.status == "True" else 0)
        for component in status.binding:
            processes = families[names.COMPONENT_PROCESSES.name]
            processes.add_metric([*labels, component.name, "launched"], component.processes)
            processes.add_metric([*labels, component.name, "verified"], component.verified)
    progress = window.progress() if window is not None else None
    if window is not None and progress is not None:
        families[names.JOB_ITERATION.name].add_metric(labels, progress.iteration)
        families[names.JOB_LAST_STEP_SECONDS.name].add_metric(labels, iteration_seconds(window.reports[-1]))
        families[names.JOB_STEP_SECONDS.name].add_metric(labels, progress.iteration_seconds)
        if progress.bottleneck is not None:
            families[names.JOB_BOTTLENECK.name].add_metric([*labels, progress.bottleneck], 1)
        for component in progress.components:
            named = [*labels, component.name]
            families[names.COMPONENT_BUSY_SECONDS.name].add_metric(named, component.seconds)
            if progress.iteration_seconds > 0:
                ratio = max(0.0, 1.0 - component.seconds / progress.iteration_seconds)
                families[names.COMPONENT_IDLE_RATIO.name].add_metric(named, round(ratio, 4))
            families[names.COMPONENT_IDLE_STREAK.name].add_metric(named, idle_streak(window, component.name))
            if component.name in held:
                count = held[component.name]
                gpu_seconds = families[names.COMPONENT_GPU_SECONDS.name]
                gpu_seconds.add_metric([*named, "held"], round(count * progress.iteration_seconds, 4))
                gpu_seconds.add_metric([*named, "busy"], round(count * component.seconds, 4))
    return list(families.values())


#: The families of each job's own series, in the order they are served.
JOB_FAMILIES = (
    names.JOB_PHASE,
    names.JOB_GPUS,
    names.COMPONENT_GPUS,
    names.JOB_PREDICTED_SECONDS,
    names.JOB_RESTARTS,
    names.JOB_PREEMPTIONS,
    names.JOB_REPLACEMENTS,
    names.JOB_BINDING_VERIFIED,
    names.COMPONENT_PROCESSES,
    names.JOB_ITERATION,
    names.JOB_LAST_STEP_SECONDS,
    names.JOB_STEP_SECONDS,
    names.JOB_BOTTLENECK,
    names.COMPONENT_BUSY_SECONDS,
    names.COMPONENT_IDLE_RATIO,
    names.COMPONENT_IDLE_STREAK,
    names.COMPONENT_GPU_SECONDS,
)


class _Families:
    """A registry of the given families only, for prometheus-client's renderer."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


def _sections(families: list[Metric]) -> list[bytes]:
    """The families rendered by prometheus-client in one go, cut into one section per family (its HELP and TYPE
    lines, then its samples): each section starts at a HELP line."""
    text = generate_latest(_Families(families))  # type: ignore[arg-type]
    sections, start = [], 0
    while start < len(text):
        end = text.find(b"\n# HELP ", start)
        end = len(text) if end < 0 else end + 1
        sections.append(text[start:end])
        start = end
    return sections


def _samples(section: bytes) -> bytes:
    """A section without its HELP and TYPE lines."""
    return section.split(b"\n", 2)[2]


@dataclasses.dataclass
class _Rendered:
    """One job's samples as text, per family, and what they were rendered from."""

    entry: Mapping[str, Any] | None
    received: float | None
    samples: list[bytes]


class Exposition:
    """/metrics: each job's series rendered once per change of its status or its progress window and kept as text
    (a scrape of a thousand jobs joins them in milliseconds, where rendering 40,000 samples anew took a third of
    a second); the rest, small or changing with the clock (the NodeGroups, the waiting times, the operator's
    counters), rendered at each scrape."""

    def __init__(self, service: ProgressService, metrics: OperatorMetrics) -> None:
        self.service = service
        self.metrics = metrics
        self.headers = _sections([_family(m) for m in JOB_FAMILIES])  # each family's HELP and TYPE lines
        self.rendered: dict[JobKey, _Rendered] = {}
        self.lock = threading.Lock()
        self.live = CollectorRegistry()
        self.live.register(LiveCollector(service, metrics))

    def _job(self, key: JobKey, view: JobView | None, window: Window | None) -> list[bytes]:
        entry = view.entry if view is not None else None
        received = window.received if window is not None else None
        known = self.rendered.get(key)
        if known is None or known.entry is not entry or known.received != received:
            samples = [_samples(section) for section in _sections(job_families(key, view, window))]
            known = self.rendered[key] = _Rendered(entry, received, samples)
        return known.samples

    def render(self) -> bytearray:
        fleet = self.metrics.fleet
        views = fleet.views if fleet is not None else {}
        windows = dict(self.service.windows)
        keys = list(dict.fromkeys([*views, *windows]))
        with self.lock:
            jobs = [self._job(key, views.get(key), windows.get(key)) for key in keys]
            for gone in self.rendered.keys() - set(keys):
                del self.rendered[gone]
        # Family by family, every job's kept text, copied once into a buffer of the body's size: the body is the
        # only copy a scrape makes (bytes.join of 17,000 parts first allocates 80 bytes of bookkeeping per part).
        parts = [generate_latest(self.live)]
        for at, header in enumerate(self.headers):
            parts.append(header)
            parts.extend(samples[at] for samples in jobs if samples[at])
        body = bytearray(sum(len(part) for part in parts))
        at = 0
        for part in parts:
            body[at : at + len(part)] = part
            at += len(part)
        return body


class LiveCollector(Collector):
    """What is rendered at each scrape: jobs counted by phase and reason, the waiting jobs' seconds and the GPUs they
    ask for, the NodeGroups' GPUs and nodes, the progress endpoint's counters."""

    def __init__(self, service: ProgressService, metrics: OperatorMetrics) -> None:
        self.service = service
        self.metrics = metrics

    def collect(self) -> Iterator[Metric]:
        fleet = self.metrics.fleet
        jobs, waiting = _family(names.JOBS), _family(names.JOB_WAITING_SECONDS)
        requested = _family(names.JOB_REQUESTED_GPUS)
        if fleet is not None:
            now = self.metrics.clock()
            counts: dict[tuple[str, str, str], int] = {}
            asked = requested_gpus(fleet.ledger, fleet.snapshot)
            for (namespace, job), view in fleet.views.items():
                phase = view.phase
                counts[(namespace, phase, view.reason)] = counts.get((namespace, phase, view.reason), 0) + 1
                since = view.waiting_since()
                if since is not None:
                    waiting.add_metric([namespace, job], round(max(0.0, now - since), 3))
                    if (namespace, job) in asked:
                        requested.add_metric([namespace, job], asked[(namespace, job)])
            for labels, count in sorted(counts.items()):
                jobs.add_metric(list(labels), count)
        yield from (jobs, waiting, requested)
        if fleet is not None:
            yield from _group_families(group_gpus(fleet.ledger, fleet.snapshot))
        stats = self.service.stats
        reports = _family(names.PROGRESS_REPORTS, CounterMetricFamily)
        reports.add_metric(["202"], stats.accepted)
        for code, count in sorted(stats.refused.items()):
            reports.add_metric([str(code)], count)
        yield reports
        writes = _family(names.PROGRESS_WRITES, CounterMetricFamily)
        writes.add_metric(["ok"], stats.writes)
        writes.add_metric(["failed"], stats.write_failures)
        yield writes
        reviews = _family(names.PROGRESS_TOKEN_REVIEWS, CounterMetricFamily)
        reviews.add_metric([], self.service.identities.reviews)
        yield reviews
        yield from self.metrics.registry.collect()


def _group_families(groups: Mapping[str, GroupGpus]) -> Iterator[Metric]:
    gpus, nodes = _family(names.NODEGROUP_GPUS), _family(names.NODEGROUP_NODES)
    for name, group in sorted(groups.items()):
        gpus.add_metric([name, "total"], group.total)
        gpus.add_metric([name, "admitted"], group.admitted)
        gpus.add_metric([name, "free"], group.free)
        nodes.add_metric([name, "total"], group.nodes)
        nodes.add_metric([name, "ready"], group.ready_nodes)
    yield from (gpus, nodes)


def idle_streak(window: Window, component: str) -> int:
    """The latest reported iterations in a row in which `component` was busy under half of the iteration."""
    streak = 0
    for report in reversed(window.reports):
        busy = report.seconds().get(component)
        total = iteration_seconds(report)
        if busy is None or total <= 0 or busy >= (1 - IDLE_SHARE) * total:
            break
        streak += 1
    return streak


def metrics_app(service: ProgressService, metrics: OperatorMetrics | None = None) -> web.Application:
    """/metrics in Prometheus' text format."""
    exposition = Exposition(service, metrics if metrics is not None else OperatorMetrics())

    async def serve_metrics(_: web.Request) -> web.Response:
        # Rendered beside the event loop: at a thousand jobs the first scrape renders every job, which kopf's
        # watches and the progress endpoint would otherwise wait for.
        body = await asyncio.get_running_loop().run_in_executor(None, exposition.render)
        response = web.Response(body=body)
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return response

    app = web.Application()
    app.router.add_get("/metrics", serve_metrics)
    return app

"""Prometheus metrics of the operator, served on its metrics port (`/metrics`).

The per-job figures are computed at scrape time from the progress windows the endpoint keeps
(progress.ProgressService): no second copy of them, and a forgotten job's series go with it.
"""

from __future__ import annotations

from collections.abc import Iterator

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from rlplace_operator.server.progress import ProgressService, iteration_seconds

_JOB = ["namespace", "rljob"]


class ProgressCollector(Collector):
    """Per job: its last step time, iteration, and per component the busy seconds and idle ratio (medians of
    the window, as in status.progress); for the operator: reports accepted and refused, status writes."""

    def __init__(self, service: ProgressService) -> None:
        self.service = service

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        iteration = GaugeMetricFamily(
            "rlplace_job_iteration", "Latest iteration the job's driver reported", labels=_JOB
        )
        last_step = GaugeMetricFamily(
            "rlplace_job_last_step_seconds", "Wall-clock seconds of the latest reported iteration", labels=_JOB
        )
        step = GaugeMetricFamily(
            "rlplace_job_step_seconds", "Median wall-clock seconds per iteration (status.progress)", labels=_JOB
        )
        busy = GaugeMetricFamily(
            "rlplace_component_busy_seconds",
            "Median seconds a component is busy per iteration",
            labels=[*_JOB, "component"],
        )
        idle = GaugeMetricFamily(
            "rlplace_component_idle_ratio",
            "Share of the median iteration a component is not busy (1 - busy / iteration)",
            labels=[*_JOB, "component"],
        )
        for (namespace, job), window in list(self.service.windows.items()):
            progress = window.progress()
            if progress is None:
                continue
            labels = [namespace, job]
            iteration.add_metric(labels, progress.iteration)
            last_step.add_metric(labels, iteration_seconds(window.reports[-1]))
            step.add_metric(labels, progress.iteration_seconds)
            for component in progress.components:
                busy.add_metric([*labels, component.name], component.seconds)
                if progress.iteration_seconds > 0:
                    ratio = max(0.0, 1.0 - component.seconds / progress.iteration_seconds)
                    idle.add_metric([*labels, component.name], round(ratio, 4))
        yield from (iteration, last_step, step, busy, idle)
        stats = self.service.stats
        reports = CounterMetricFamily(
            "rlplace_progress_reports", "Progress reports received, by HTTP status", labels=["code"]
        )
        reports.add_metric(["202"], stats.accepted)
        for code, count in sorted(stats.refused.items()):
            reports.add_metric([str(code)], count)
        yield reports
        writes = CounterMetricFamily("rlplace_progress_writes", "status.progress writes", labels=["result"])
        writes.add_metric(["ok"], stats.writes)
        writes.add_metric(["failed"], stats.write_failures)
        yield writes
        reviews = CounterMetricFamily("rlplace_progress_token_reviews", "Tokens reviewed (identity cache misses)")
        reviews.add_metric([], self.service.identities.reviews)
        yield reviews


def metrics_app(service: ProgressService) -> web.Application:
    """/metrics in Prometheus' text format, from a registry of rlplace's own figures."""
    registry = CollectorRegistry()
    registry.register(ProgressCollector(service))

    async def metrics(_: web.Request) -> web.Response:
        response = web.Response(body=generate_latest(registry))
        response.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return response

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    return app

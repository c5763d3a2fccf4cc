"""The operator's start-up and shutdown: kopf's settings, the shared state every handler reads from its memo (the
API gateway, the Ledger, the settings a reconcile reads, the checkpoint requests), and the progress and metrics
endpoints served in kopf's event loop (server/)."""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import kopf

from rlplace_operator.admission.ledger import Ledger
from rlplace_operator.diagnosis.causes import StartBounds
from rlplace_operator.kube import Kube, api_client
from rlplace_operator.reconcile.world import Settings
from rlplace_operator.server import progress
from rlplace_operator.server.metrics import OperatorMetrics, metrics_app

#: Threads that run the (synchronous) handlers, and the size of the API client's connection pool.
MAX_WORKERS = 32
#: Threads one queue pass reconciles its jobs on; they share the API client's pool with the handler threads.
PASS_WORKERS = 16
#: Annotation prefix of kopf's own state on RLJobs and NodeGroups.
KOPF_PREFIX = "kopf.rlplace.io"
#: Strings longer than this are kept in kopf's last-handled state as their digest only.
DIGEST_OVER_CHARS = 128


@dataclasses.dataclass
class Serving:
    """What the operator serves besides kopf's liveness endpoint (from the command line)."""

    progress_port: int | None = None
    """Port of the progress endpoint (None: not served, and jobs' pods get no progress URL)."""
    progress_url: str | None = None
    """Base URL at which pods reach that port (the chart's Service)."""
    metrics_port: int | None = None
    """Port of /metrics."""


def _serving(memo: kopf.Memo) -> Serving:
    """What `main` asked to serve (none when the module runs under `kopf run`, which passes no memo)."""
    serving = memo.get("serving")
    return serving if isinstance(serving, Serving) else Serving()


def _digested(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _digested(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_digested(item) for item in value]
    if isinstance(value, str) and len(value) > DIGEST_OVER_CHARS:
        return "sha256:" + hashlib.sha256(value.encode()).hexdigest()
    return value


class DigestDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    """kopf's last-handled state in an annotation, with every long string (an entrypoint, a large annotation)
    replaced by its digest: a change is still seen, but the annotation stays a few KiB however large the
    object is, so it never pushes the object past the API server's 256 KiB limit on annotations."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        # kopf deep-copies the whole body before it drops the status and the system metadata: under a burst
        # that copy (a NodeGroup's status lists every node; managedFields grow with every writer) was a sixth of
        # the event loop's time. The essence never holds either, so they are left out before the copy (the
        # status only when no handler asks for a field of it).
        metadata = {k: v for k, v in (body.get("metadata") or {}).items() if k != "managedFields"}
        trimmed = {k: v for k, v in body.items() if k != "metadata" and (k != "status" or extra_fields)}
        essence = super().build(body=kopf.Body({**trimmed, "metadata": metadata}), extra_fields=extra_fields)
        return _digested(essence)


def operator_metrics(memo: kopf.Memo) -> OperatorMetrics:
    """The operator's metrics (`configure` makes them at start-up; a bare memo, as `kopf run` of a controller module
    alone passes, gets a set nobody serves)."""
    if memo.get("metrics") is None:
        memo.metrics = OperatorMetrics()
    return memo.metrics


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    # Progress and last-handled state live in annotations, so the structural status schema never has to
    # accept kopf's bookkeeping. Not under rlplace.io/: kopf ignores every annotation under its storage
    # prefix when it diffs, and a change of rlplace.io/profile must re-plan the job.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=KOPF_PREFIX)
    settings.persistence.diffbase_storage = DigestDiffBaseStorage(prefix=KOPF_PREFIX)
    settings.persistence.finalizer = f"{KOPF_PREFIX}/finalizer"
    settings.posting.level = logging.INFO
    settings.execution.max_workers = MAX_WORKERS
    # kopf waits this long for more events of one object before handling them; a job is one create event.
    settings.batching.batch_window = 0.02
    settings.watching.server_timeout = 300
    settings.networking.request_timeout = 60
    serving = _serving(memo)
    progress_url = serving.progress_url if serving.progress_port else None
    memo.kube = Kube(api_client(MAX_WORKERS + PASS_WORKERS))
    # What a reconcile reads of the operator's settings (reconcile/world.py).
    memo.settings = Settings(memo.get("start_bounds") or StartBounds(), progress_url)
    # One ledger of node reservations for every handler thread (its lock makes admissions one at a time).
    memo.ledger = Ledger()
    # Jobs whose driver is asked to checkpoint now (a preempted job), read by the progress endpoint's answers.
    memo.checkpoint_requests = set()
    # The threads a queue pass reconciles its jobs on (controllers/rljob.py, nodegroup_jobs_recheck).
    memo.pass_pool = ThreadPoolExecutor(PASS_WORKERS, thread_name_prefix="rlplace-pass")
    # Reconcile times and errors, and the latest queue pass's view of the jobs, served at /metrics.
    memo.metrics = OperatorMetrics()


@kopf.on.startup()
async def serve_progress(memo: kopf.Memo, logger: logging.Logger, **_: Any) -> None:
    """The progress endpoint and /metrics, in kopf's event loop (their Kubernetes calls run in their own
    threads); see progress.py."""
    memo.servers = []
    serving = _serving(memo)
    if serving.progress_port is None and serving.metrics_port is None:
        return
    kube = Kube(api_client(MAX_WORKERS + PASS_WORKERS))
    service = progress.ProgressService(
        progress.KubeIdentify(kube),
        progress.kube_write_progress(kube),
        checkpoint_wanted=lambda key: key in memo.checkpoint_requests,
    )
    memo.progress = service
    if serving.progress_port is not None:
        memo.servers.append(await progress.serve(service.app(), "0.0.0.0", serving.progress_port))
        if not serving.progress_url:
            logger.warning("progress endpoint served, but no --progress-url: jobs' pods are not told where it is")
        logger.info("progress endpoint on port %d (pods report to %s)", serving.progress_port, serving.progress_url)
    if serving.metrics_port is not None:
        memo.servers.append(
            await progress.serve(metrics_app(service, operator_metrics(memo)), "0.0.0.0", serving.metrics_port)
        )
        logger.info("metrics on port %d (/metrics)", serving.metrics_port)
    memo.forgetter = asyncio.get_running_loop().create_task(progress.forget_idle_forever(service))


@kopf.on.cleanup()
async def stop_serving(memo: kopf.Memo, **_: Any) -> None:
    for runner in getattr(memo, "servers", []):
        await runner.cleanup()
    if getattr(memo, "progress", None) is not None:
        memo.forgetter.cancel()
        memo.progress.close()


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    return kopf.login_via_client(**kwargs)


class QuietTimers(logging.Filter):
    """Drop the "Timer ... succeeded" line that NodeGroup resyncs would log every few seconds per group."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.getMessage().startswith("Timer ") and record.getMessage().endswith(" succeeded."))

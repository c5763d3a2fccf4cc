"""Per-component step times from a job's pods into its `status.progress` (docs/progress.md).

The transport (Kubeflow Trainer's pattern): the Ray head pod of a job, where the driver runs, gets a projected
ServiceAccount token with the audience `PROGRESS_AUDIENCE` and the URL of this endpoint for its own job
(builders.raycluster.with_progress_reporting). The driver POSTs each iteration's report
(placement_core.observe.progress.IterationReport JSON) with that token. The operator:

1. asks the API server whether the token is valid for the rlplace audience (TokenReview); the token is bound
   to its pod, so the review names the pod (`authentication.kubernetes.io/pod-name` and `pod-uid`);
2. maps the pod to its job: the pod's `rlplace.io/job` label names the job, and its controller owners
   (RayCluster, then RayJob) lead to that RLJob's uid, so a pod of another owner cannot claim a job by label;
3. refuses (403) a report for any job but that one, and accepts (202) the rest into a per-job window;
4. writes `status.progress` at most once per `WRITE_INTERVAL_S` per job (the latest report wins), a patch of
   `status.progress` alone that lands only while the job runs on the reporting pod's Ray cluster (a stopped
   attempt's driver, still running where the kubelet is away, is refused from then on: 409); a report with a
   new checkpoint step is written at once (the operator waits for it before it stops a preempted job);
5. answers an accepted report with `ProgressAnswer`, which asks the driver to checkpoint now while
   `checkpoint_wanted(job)` says so (a preempted job: docs/driver.md).

The user needs no RBAC grant: the token is the pod's own ServiceAccount's, and only the operator's
ServiceAccount creates TokenReviews. A review (and the pod and owner reads behind it) is cached per token until
the token expires (at most `IDENTITY_CACHE_S`), so a running job costs one review per token rotation, not one
per report: 1,000 jobs reporting every 5 s cost the API server about 200 status patches a second and a review
now and then.

Why the progress patch cannot drop another writer's fields: it changes `status.progress` only, and the
reconcile's own status write (reconcile/apply.py) is conditional on the resourceVersion it read, so a progress
write in between makes it read the job again (409) rather than overwrite `progress` with the old value; the
reconcile carries `progress` through since it is a field of RLJobStatus.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import datetime as dt
import hashlib
import json
import logging
import statistics
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import urllib3
from aiohttp import web
from kubernetes.client.exceptions import ApiException

from placement_core.observe.progress import IterationReport, ProgressAnswer
from rlplace_operator.api.base import GROUP, VERSION, dump
from rlplace_operator.api.names import (
    JOB_LABEL,
    PROGRESS_AUDIENCE,
    RAY_CLUSTER_POD_LABEL,
    RAY_GROUP,
    RAY_VERSION,
    RAYCLUSTER_PLURAL,
    RAYJOB_PLURAL,
    RLJOB_PLURAL,
    progress_path,
)
from rlplace_operator.api.status import ComponentSeconds, Progress
from rlplace_operator.frameworks import framework_named
from rlplace_operator.kube import Kube, ProgressWrite

logger = logging.getLogger("rlplace.progress")

#: Iterations each job's figures are the median of.
WINDOW = 10
#: A job's status.progress is written at most this often (the latest report wins). With the driver's own
#: 5 s throttle, status is at most about 10 s behind the driver.
WRITE_INTERVAL_S = 5.0
#: An identity (token -> pod -> job) is trusted this long at most, and never past the token's expiry: a
#: deleted pod's token stops working within this time even though the cache does not ask again meanwhile.
IDENTITY_CACHE_S = 600.0
#: A refused token (401/403) is answered from memory this long: a pod retrying with a bad token, or a flood of
#: garbage tokens, costs the API server one review per token per this period, not one per request.
REFUSAL_CACHE_S = 30.0
#: A job with no report for this long is forgotten (its window and metrics): it ended or was deleted.
FORGET_AFTER_S = 900.0
#: Largest request body accepted (a report is a few hundred bytes).
MAX_BODY_BYTES = 64 * 1024
#: Threads that run the (blocking) Kubernetes calls of the endpoint, apart from kopf's handler threads.
API_THREADS = 8

JobKey = tuple[str, str]
"""(namespace, name) of an RLJob."""


# -- the figures: pure --------------------------------------------------------------------------------------


def iteration_seconds(report: IterationReport) -> float:
    """The wall-clock seconds of an iteration: as measured, else its phases in a row (sum of components and
    weight sync), which is what a driver that does not time the whole iteration ran one after another."""
    if report.iteration_seconds is not None:
        return report.iteration_seconds
    return sum(c.seconds for c in report.components) + (report.weight_sync_seconds or 0.0)


def rfc3339(seconds: float) -> str:
    return dt.datetime.fromtimestamp(seconds, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def summarize(reports: Iterable[IterationReport]) -> Progress | None:
    """status.progress from a job's last reports (oldest first): the latest iteration, the medians of the
    iteration time and of each component's busy seconds, the component with the largest median, the slowest
    iteration (the earliest of equals), and when the latest iteration ended. A component missing from some reports
    is the median of those that have it."""
    window = list(reports)
    if not window:
        return None
    latest = window[-1]
    names: list[str] = []
    for report in window:
        names += [c.name for c in report.components if c.name not in names]
    busy = {name: [r.seconds()[name] for r in window if name in r.seconds()] for name in names}
    components = [ComponentSeconds(name=name, seconds=round(statistics.median(busy[name]), 4)) for name in names]
    bottleneck = max(components, key=lambda c: c.seconds).name if components else None
    slowest = max(window, key=iteration_seconds)
    return Progress(
        iteration=latest.iteration,
        iteration_seconds=round(statistics.median(iteration_seconds(r) for r in window), 4),
        components=components,
        bottleneck=bottleneck,
        weight_sync_seconds=latest.weight_sync_seconds,
        checkpoint_step=latest.checkpoint_step,
        slowest_iteration=slowest.iteration,
        slowest_iteration_seconds=round(iteration_seconds(slowest), 4),
        updated_at=rfc3339(latest.time),
    )


def posted_report(body: bytes) -> IterationReport:
    """What a job's driver POSTed: an IterationReport (an rlplace driver's), or a framework's own metrics of one
    step as a framework job's probe sends them, `{"framework": "rlinf", "iteration": 3, "metrics": {...}}`, mapped
    by that framework (Framework.iteration_report). A one-line ValueError for anything else."""
    try:
        raw = json.loads(body)
    except ValueError as err:
        raise ValueError(f"not JSON: {err}") from None
    if not isinstance(raw, dict) or "framework" not in raw:
        return IterationReport.from_json(body)
    metrics, iteration = raw.get("metrics"), raw.get("iteration")
    if not isinstance(metrics, dict) or not isinstance(iteration, int) or isinstance(iteration, bool):
        raise ValueError("a framework's metrics need 'metrics' (an object) and 'iteration' (an integer)")
    return framework_named(str(raw["framework"])).iteration_report(metrics, iteration)


class Window:
    """A job's last `WINDOW` reports, one per iteration (a report for an iteration already held replaces it;
    one for an earlier iteration means the driver started over, and starts a new window)."""

    def __init__(self, size: int = WINDOW) -> None:
        self.reports: deque[IterationReport] = deque(maxlen=size)
        self.received = 0.0
        """When the latest report arrived (monotonic seconds)."""
        self.cluster: str | None = None
        """The Ray cluster whose driver sent the reports: another one's start a new window (another attempt)."""

    def add(self, report: IterationReport, now: float, cluster: str | None = None) -> None:
        if cluster != self.cluster:
            self.reports.clear()
            self.cluster = cluster
        if self.reports and report.iteration < self.reports[-1].iteration:
            self.reports.clear()
        if self.reports and report.iteration == self.reports[-1].iteration:
            self.reports.pop()
        self.reports.append(report)
        self.received = now

    def progress(self) -> Progress | None:
        return summarize(self.reports)

    def checkpoint_step(self) -> int | None:
        """The checkpoint step of the latest report."""
        return self.reports[-1].checkpoint_step if self.reports else None


class Throttle:
    """When each job's next status write may go: at most one per `interval` seconds per job, but at once for a
    report that must not wait (a new checkpoint, which a preemption waits for).

    `due(key, now)` answers the delay before the write of a report that arrived `now`, or None when a write
    is already planned (it will carry this report: the latest wins); `due(key, now, at_once=True)` answers 0.0
    even then (the planned write still goes). `wrote(key, now)` records a write."""

    def __init__(self, interval: float = WRITE_INTERVAL_S) -> None:
        self.interval = interval
        self._last: dict[JobKey, float] = {}
        self._planned: dict[JobKey, int] = {}
        """Writes planned and not yet done, per job."""

    def due(self, key: JobKey, now: float, at_once: bool = False) -> float | None:
        planned = self._planned.get(key, 0)
        if planned and not at_once:
            return None
        self._planned[key] = planned + 1
        last = self._last.get(key)
        return 0.0 if last is None or at_once else max(0.0, last + self.interval - now)

    def wrote(self, key: JobKey, now: float) -> None:
        planned = self._planned.pop(key, 0) - 1
        if planned > 0:
            self._planned[key] = planned
        self._last[key] = now

    def forget(self, key: JobKey) -> None:
        self._planned.pop(key, None)
        self._last.pop(key, None)


# -- who is asking: token -> pod -> job -------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Caller:
    """The job a token's pod belongs to, as far as the operator checked."""

    job: JobKey
    pod: str
    expires: float
    """Monotonic time after which the token is reviewed again."""
    cluster: str | None = None
    """The Ray cluster of the pod (its ray.io/cluster label): which attempt's driver reports."""


class Refused(Exception):
    """A request the endpoint refuses: `status` is the HTTP status, the message says why in one line."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


#: Resolves a bearer token to the job of its pod; raises Refused (401 invalid token, 403 not a job's pod,
#: 503 the operator cannot review tokens). Blocking: the endpoint runs it in a thread.
Identify = Callable[[str], Caller]


def token_expiry(token: str) -> float | None:
    """The `exp` claim of a JWT (Unix seconds), read without checking the signature: only to bound how long
    a token the API server already accepted stays cached."""
    try:
        payload = token.split(".")[1]
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
        exp = claims.get("exp")
        return float(exp) if isinstance(exp, int | float) else None
    except (IndexError, ValueError, TypeError):
        return None


class IdentityCache:
    """Callers by token digest, until `Caller.expires`, and refusals for `REFUSAL_CACHE_S`; the tokens themselves
    are not kept."""

    def __init__(self, identify: Identify, clock: Callable[[], float] = time.monotonic) -> None:
        self.identify = identify
        self.clock = clock
        self.reviews = 0
        """Tokens resolved through `identify` (cache misses)."""
        self._callers: dict[str, Caller] = {}
        self._refused: dict[str, tuple[Refused, float]] = {}

    def caller(self, token: str) -> Caller:
        digest = hashlib.sha256(token.encode()).hexdigest()
        now = self.clock()
        cached = self._callers.get(digest)
        if cached is not None and cached.expires > now:
            return cached
        refused = self._refused.get(digest)
        if refused is not None and refused[1] > now:
            raise refused[0]
        self.reviews += 1
        if len(self._callers) + len(self._refused) > 4 * 1024:  # drop expired entries: rotated tokens accumulate
            self._callers = {k: v for k, v in self._callers.items() if v.expires > now}
            self._refused = {k: v for k, v in self._refused.items() if v[1] > now}
        try:
            caller = self.identify(token)
        except Refused as err:
            if err.status in (401, 403):  # the token's answer; a 503 is the operator's and may pass at once
                self._refused[digest] = (err, now + REFUSAL_CACHE_S)
            raise
        self._callers[digest] = caller
        return caller


POD_NAME_EXTRA = "authentication.kubernetes.io/pod-name"
POD_UID_EXTRA = "authentication.kubernetes.io/pod-uid"


class KubeIdentify:
    """`Identify` through the API server: TokenReview with the rlplace audience, then the pod and its owners."""

    def __init__(self, kube: Kube, clock: Callable[[], float] = time.monotonic) -> None:
        self.kube = kube
        self.clock = clock

    def __call__(self, token: str) -> Caller:
        try:
            return self._identify(token)
        except urllib3.exceptions.HTTPError as err:
            # The API server is away (restarting, overloaded): the operator's problem, and one the driver's next
            # report may not meet. Not the token's answer, so not cached as one.
            raise Refused(503, f"the API server could not be reached ({type(err).__name__})") from None

    def _identify(self, token: str) -> Caller:
        try:
            status = self.kube.review_token(token, PROGRESS_AUDIENCE)
        except ApiException as err:
            if err.status in (401, 403):
                raise Refused(
                    503,
                    "the operator may not create tokenreviews (authentication.k8s.io/v1); grant its "
                    "ServiceAccount `create` on tokenreviews (the chart's ClusterRole does) to accept progress",
                ) from None
            raise Refused(503, f"TokenReview failed: {err.status} {err.reason}") from None
        if not status.authenticated:
            raise Refused(401, f"token not valid for audience {PROGRESS_AUDIENCE}: {status.error or 'refused'}")
        if PROGRESS_AUDIENCE not in (status.audiences or []):
            raise Refused(401, f"token not valid for audience {PROGRESS_AUDIENCE}")
        username = status.user.username or ""
        extra = status.user.extra or {}
        pods, uids = extra.get(POD_NAME_EXTRA) or [], extra.get(POD_UID_EXTRA) or []
        parts = username.split(":")
        if len(parts) != 4 or parts[:2] != ["system", "serviceaccount"] or not pods or not uids:
            raise Refused(403, f"{username} is not a pod's ServiceAccount token (no bound pod)")
        namespace, pod_name, pod_uid = parts[2], pods[0], uids[0]
        job, cluster = self._job_of_pod(namespace, pod_name, pod_uid)
        lifetime = IDENTITY_CACHE_S
        expiry = token_expiry(token)
        if expiry is not None:
            lifetime = min(lifetime, expiry - time.time())
        return Caller(job, pod_name, self.clock() + max(0.0, lifetime), cluster)

    def _job_of_pod(self, namespace: str, pod_name: str, pod_uid: str) -> tuple[JobKey, str | None]:
        try:
            pod = self.kube.read_pod(namespace, pod_name)
        except ApiException as err:
            raise Refused(403, f"pod {namespace}/{pod_name} cannot be read: {err.status} {err.reason}") from None
        if pod.metadata.uid != pod_uid:
            raise Refused(403, f"pod {namespace}/{pod_name} was replaced since its token was issued")
        job = (pod.metadata.labels or {}).get(JOB_LABEL)
        if not job:
            raise Refused(403, f"pod {namespace}/{pod_name} belongs to no RLJob")
        owners = [o.to_dict() for o in pod.metadata.owner_references or []]
        if not self._owned_by(namespace, owners, job):
            raise Refused(403, f"pod {namespace}/{pod_name} is labelled for RLJob {job} but not owned by it")
        return (namespace, job), (pod.metadata.labels or {}).get(RAY_CLUSTER_POD_LABEL)

    def _owned_by(self, namespace: str, owners: list[dict[str, Any]], job: str, depth: int = 3) -> bool:
        """Whether the controller owners lead to the RLJob `job` (pod -> RayCluster [-> RayJob] -> RLJob)."""
        owner = next((o for o in owners if o.get("controller")), None)
        if owner is None or depth == 0:
            return False
        kind, name = owner.get("kind"), owner.get("name")
        if kind == "RLJob":
            rljob = self._get(GROUP, VERSION, namespace, RLJOB_PLURAL, name)
            return name == job and rljob is not None and rljob["metadata"]["uid"] == owner.get("uid")
        plural = {"RayCluster": RAYCLUSTER_PLURAL, "RayJob": RAYJOB_PLURAL}.get(str(kind))
        if plural is None:
            return False
        parent = self._get(RAY_GROUP, RAY_VERSION, namespace, plural, name)
        if parent is None or parent["metadata"].get("uid") != owner.get("uid"):
            return False
        return self._owned_by(namespace, parent["metadata"].get("ownerReferences") or [], job, depth - 1)

    def _get(self, group: str, version: str, namespace: str, plural: str, name: str) -> dict | None:
        try:
            return self.kube.get_custom(group, version, namespace, plural, name)
        except ApiException as err:
            raise Refused(503, f"reading {plural}/{name} failed: {err.status} {err.reason}") from None


# -- the endpoint -----------------------------------------------------------------------------------------------

#: Writes a job's status.progress (wire form), reported by the driver of Ray cluster `cluster` (None: unknown); says
#: what became of it. Blocking.
WriteProgress = Callable[[JobKey, dict[str, Any], str | None], ProgressWrite]


def kube_write_progress(kube: Kube) -> WriteProgress:
    """status.progress alone, only while the job runs on the reporting driver's Ray cluster (Kube.write_progress;
    the module docstring says why it drops nothing)."""
    return lambda key, progress, cluster: kube.write_progress(key[0], key[1], progress, cluster)


@dataclasses.dataclass
class Stats:
    """What the endpoint did, for the metrics and the benchmark."""

    accepted: int = 0
    refused: dict[int, int] = dataclasses.field(default_factory=dict)
    writes: int = 0
    write_failures: int = 0
    staleness: deque[float] = dataclasses.field(default_factory=lambda: deque(maxlen=4096))
    """Seconds from a report's arrival to the status write that carried it (the latest ones)."""


def no_checkpoint_wanted(_key: JobKey) -> bool:
    return False


class ProgressService:
    """The reports of every job: the endpoint that takes them, their windows, and the throttled writes.

    `checkpoint_wanted(job)` says whether the operator wants the job's driver to checkpoint now (it is about to
    stop the job); the answer to each of that job's accepted reports then asks for it. Called in the event
    loop: it must not block."""

    def __init__(
        self,
        identify: Identify,
        write: WriteProgress,
        interval: float = WRITE_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
        threads: int = API_THREADS,
        *,
        checkpoint_wanted: Callable[[JobKey], bool] = no_checkpoint_wanted,
    ) -> None:
        self.identities = IdentityCache(identify, clock)
        self.write = write
        self.checkpoint_wanted = checkpoint_wanted
        self.throttle = Throttle(interval)
        self.clock = clock
        self.windows: dict[JobKey, Window] = {}
        self.stats = Stats()
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="rlplace-progress")
        self._tasks: set[asyncio.Task[None]] = set()
        self._writing: dict[JobKey, asyncio.Lock] = {}
        self._warned: dict[str, float] = {}
        self.stopped: dict[JobKey, set[str]] = {}
        """Per job, the Ray clusters it no longer runs on (a write told so): their drivers' reports are refused."""

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES)
        app.router.add_post(progress_path("{namespace}", "{name}"), self.handle)
        return app

    async def _blocking(self, call: Callable[..., Any], *args: Any) -> Any:
        return await asyncio.get_running_loop().run_in_executor(self._executor, call, *args)

    def _refuse(self, status: int, message: str) -> web.Response:
        self.stats.refused[status] = self.stats.refused.get(status, 0) + 1
        if status == 503:  # the operator's own problem: say so in its log, once a minute
            now = self.clock()
            if now - self._warned.get(message, -60.0) >= 60.0:
                self._warned[message] = now
                logger.warning("progress refused: %s", message)
        return web.json_response({"error": message}, status=status)

    async def handle(self, request: web.Request) -> web.Response:
        key: JobKey = (request.match_info["namespace"], request.match_info["name"])
        header = request.headers.get("Authorization", "")
        if not header.startswith("Bearer ") or not header[7:].strip():
            return self._refuse(401, "no bearer token (Authorization: Bearer <projected token>)")
        try:
            caller = await self._blocking(self.identities.caller, header[7:].strip())
        except Refused as refused:
            return self._refuse(refused.status, str(refused))
        if caller.job != key:
            return self._refuse(403, f"pod {caller.pod} belongs to RLJob {'/'.join(caller.job)}, not {'/'.join(key)}")
        if caller.cluster in self.stopped.get(key, ()):
            return self._refuse(
                409,
                f"pod {caller.pod} is of Ray cluster {caller.cluster}, which RLJob {'/'.join(key)} no longer runs on",
            )
        try:
            body = await request.read()
        except ConnectionResetError:  # the driver's connection went while it sent (its pod stopping, say)
            return self._refuse(400, "the report's body was cut off: the connection was lost")
        try:
            report = posted_report(body)
        except ValueError as err:
            return self._refuse(400, str(err))
        self.accept(key, report, caller.cluster)
        answer = ProgressAnswer(report.iteration, checkpoint=self.checkpoint_wanted(key))
        return web.json_response(text=answer.to_json(), status=202)

    def accept(self, key: JobKey, report: IterationReport, cluster: str | None = None) -> None:
        """Take a report of the driver on Ray cluster `cluster` into its job's window and plan the job's next write
        (at once for a new checkpoint)."""
        now = self.clock()
        window = self.windows.setdefault(key, Window())
        previous = window.checkpoint_step() if window.cluster == cluster else None
        new_checkpoint = report.checkpoint_step is not None and (previous is None or report.checkpoint_step > previous)
        window.add(report, now, cluster)
        self.stats.accepted += 1
        delay = self.throttle.due(key, now, at_once=new_checkpoint)
        if delay is not None:
            task = asyncio.get_running_loop().create_task(self._write_later(key, delay))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _write_later(self, key: JobKey, delay: float) -> None:
        if delay > 0:
            await asyncio.sleep(delay)
        # One write per job at a time, its progress taken once the one before landed: a write held up by the API
        # server (a restart) must not land after a newer one, or the job's iteration would go back.
        async with self._writing.setdefault(key, asyncio.Lock()):
            window = self.windows.get(key)
            progress = window.progress() if window is not None else None
            try:
                if window is not None and progress is not None:
                    received, cluster = window.received, window.cluster
                    written = await self._blocking(self.write, key, dump(progress), cluster)
                    if written is ProgressWrite.GONE:
                        self.forget(key)
                        return
                    if written is ProgressWrite.OTHER_CLUSTER and cluster is not None:
                        # A stopped attempt's driver (its pod kept running where the kubelet is away): its reports
                        # are refused from now on, and the window waits for the current driver's.
                        self.stopped.setdefault(key, set()).add(cluster)
                        if window.cluster == cluster:
                            window.reports.clear()
                        return
                    if written is ProgressWrite.WRITTEN:
                        self.stats.writes += 1
                        self.stats.staleness.append(self.clock() - received)
            except Exception as err:  # a failed write is retried with the next report, never lost silently
                self.stats.write_failures += 1
                logger.warning("RLJob %s/%s: writing status.progress failed: %s", *key, err)
            finally:
                self.throttle.wrote(key, self.clock())

    def forget(self, key: JobKey) -> None:
        self.windows.pop(key, None)
        self.throttle.forget(key)
        self._writing.pop(key, None)
        self.stopped.pop(key, None)

    def forget_idle(self) -> None:
        """Drop jobs with no report for FORGET_AFTER_S (ended or deleted)."""
        now = self.clock()
        for key in [k for k, w in self.windows.items() if now - w.received > FORGET_AFTER_S]:
            self.forget(key)

    async def drain(self) -> None:
        """Wait for the planned writes (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        self._executor.shutdown(wait=False, cancel_futures=True)


async def serve(app: web.Application, host: str, port: int) -> web.AppRunner:
    """Serve `app` on host:port in the running loop (kopf's); the runner stops it."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner


async def forget_idle_forever(service: ProgressService, period: float = 60.0) -> None:
    while True:
        await asyncio.sleep(period)
        with contextlib.suppress(Exception):
            service.forget_idle()

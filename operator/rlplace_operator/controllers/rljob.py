"""The RLJob controller: every reason to look at a job, each ending in one look (reconcile/run.py).

- `rljob_changed`: the job was created, changed (spec or profile annotation) or found at start-up;
- `raycluster_changed`, `rayjob_changed`: its RayCluster or RayJob changed (readiness, the driver's state);
- `workload_changed`: its Workload's admitter changed it (admitted, evicted, a node swapped);
- `localqueue_changed`: the LocalQueue it names was made or deleted (an admitted job says it is gone);
- `nodegroup_jobs_recheck`: time passed: the queue pass (one admission decision over every waiting job), then a
  look at each job that waits, provisions or has not verified its driver's binding yet.

The timers are on NodeGroups, not on RLJobs: kopf puts a finalizer on every object a timer watches, and deleting a
job must not need the operator. Each job is looked at by the timer of its first NodeGroup only. Shared state is
read from copies of the indexes (cluster/snapshot.py), never from a live index the watch streams change meanwhile.
"""

from __future__ import annotations

import contextvars
import logging
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException

from rlplace_operator.admission.admitter import queue_name
from rlplace_operator.admission.ledger import Ledger
from rlplace_operator.admission.queue import admission_world, queue_pass
from rlplace_operator.admission.rules import Decision
from rlplace_operator.api.base import GROUP, VERSION
from rlplace_operator.api.names import (
    JOB_LABEL,
    LOCALQUEUE_PLURAL,
    MANAGED_BY,
    MANAGED_BY_LABEL,
    NODEGROUP_PLURAL,
    PROFILE_ANNOTATION,
    RAY_GROUP,
    RAY_VERSION,
    RAYCLUSTER_PLURAL,
    RAYJOB_PLURAL,
    RLJOB_PLURAL,
    WORKLOAD_GROUP,
    WORKLOAD_PLURAL,
    WORKLOAD_VERSION,
)
from rlplace_operator.api.status import holds_nodes
from rlplace_operator.cluster.snapshot import RLJOB_INDEX, IndexChanging, Snapshot, indexed, one
from rlplace_operator.controllers.operator import operator_metrics
from rlplace_operator.kube import api_message
from rlplace_operator.reconcile.decide import needs_look
from rlplace_operator.reconcile.observe import Observer
from rlplace_operator.reconcile.run import run
from rlplace_operator.reconcile.world import Job, job_of, job_of_body

logger = logging.getLogger(__name__)

#: How often the NodeGroup timer looks at its jobs: Queued ones (a freed node is used within about this long),
#: Provisioning ones (a failure is named within about this long after its cause shows) and drivers that have not
#: verified their binding yet.
TIMER_SECONDS = 2.0

#: How soon a job's look that the API server refused is tried again.
API_RETRY_SECONDS = 10.0

_PROFILE_PATH = ("metadata", "annotations", PROFILE_ANNOTATION)


def _at(value: object, path: tuple[str, ...]) -> object:
    for key in path:
        value = value.get(key) if isinstance(value, Mapping) else None
    return value


def profile_changed(diff: kopf.Diff | None) -> bool:
    """Whether kopf's diff changes the profile annotation; a diff entry may name it, or a map holding it (the first
    annotation of an object is added as the whole `metadata.annotations`)."""
    for _, field, old, new in diff or ():
        field = tuple(field)
        if field[: len(_PROFILE_PATH)] == _PROFILE_PATH:
            return True
        if _PROFILE_PATH[: len(field)] == field:
            rest = _PROFILE_PATH[len(field) :]
            if _at(old, rest) != _at(new, rest):
                return True
    return False


def snapshot_of(indexes: Mapping[str, Any]) -> Snapshot:
    """The indexes copied now, or a TemporaryError when they kept changing (kopf looks again in a second)."""
    try:
        return Snapshot.of(indexes)
    except IndexChanging as err:
        raise kopf.TemporaryError(str(err), delay=1.0) from None


def observer_of(memo: kopf.Memo, indexes: Mapping[str, Any], snapshot: Snapshot | None = None) -> Observer:
    """An Observer for one handler call, with the operator's settings and its checkpoint requests (set up by
    controllers/operator.py: the progress endpoint answers from them)."""
    return Observer(memo.kube, indexes, memo.ledger, snapshot, memo.settings, memo.checkpoint_requests)


def look(
    memo: kopf.Memo,
    observer: Observer,
    job: Job,
    trigger: str,
    *,
    queue: Decision | None = None,
    retry: int = 0,
) -> None:
    """One look at the job (timed, and counted when it fails, under `trigger`: what made the operator look); a job
    that cannot be provisioned now raises kopf's error once its status says why."""
    metrics = operator_metrics(memo)
    with metrics.look(trigger):
        looked = run(memo.kube, memo.ledger, observer, job, queue=queue, retry=retry)
    metrics.decided_again(looked.decided_again)
    if looked.retry is not None:
        if looked.retry.permanent:
            raise kopf.PermanentError(looked.retry.message)
        raise kopf.TemporaryError(looked.retry.message, delay=looked.retry.delay)


def _safely(memo: kopf.Memo, observer: Observer, job: Job, trigger: str, queue: Decision | None = None) -> None:
    """One look for a job of a pass: its failure is logged and written to its status, never the pass's."""
    try:
        look(memo, observer, job, trigger, queue=queue)
    except (kopf.TemporaryError, kopf.PermanentError):
        return  # its status says why already
    except ApiException as err:
        if err.status == 404:
            return
        # The API's own message names the refused verb and resource (a missing RBAC rule, say): say it whole.
        logger.warning(
            "RLJob %s/%s: reconcile failed (%s: %s); the next pass looks again", *job.key, err.status, api_message(err)
        )
    except Exception:  # one job's failure must not stop the pass (the queue never stalls): said, then go on
        logger.exception("RLJob %s/%s: reconcile failed; the next pass looks again", *job.key)


@kopf.on.create(GROUP, VERSION, RLJOB_PLURAL, retries=None)
@kopf.on.update(GROUP, VERSION, RLJOB_PLURAL, retries=None)
@kopf.on.resume(GROUP, VERSION, RLJOB_PLURAL, retries=None)
def rljob_changed(
    body: kopf.Body, memo: kopf.Memo, diff: kopf.Diff | None = None, retry: int = 0, **kwargs: Any
) -> None:
    """A job created, changed (spec or profile annotation) or found at start-up: look at it. A call the API server
    refuses (a missing RBAC rule, say) is said in one line and retried, as a timer's look says it, not as a
    traceback."""
    job = job_of_body(body, profile_changed(diff))
    try:
        look(memo, observer_of(memo, kwargs), job, "rljob", retry=retry)
    except ApiException as err:
        message = f"RLJob {job.namespace}/{job.name}: the API server refused a call ({err.status}: {api_message(err)})"
        raise kopf.TemporaryError(message, delay=API_RETRY_SECONDS) from None


def _child_changed(
    namespace: str, labels: kopf.Labels, memo: kopf.Memo, kwargs: Mapping[str, Any], trigger: str
) -> None:
    """Look at the job a RayCluster or RayJob belongs to (its deletion too: a job that still holds nodes and lost
    its child is planned again)."""
    if JOB_LABEL not in labels:
        return
    key = (namespace, labels[JOB_LABEL])
    entry = one(kwargs, RLJOB_INDEX, key)
    if entry is None or not holds_nodes(entry["status"]):
        return
    _safely(memo, observer_of(memo, kwargs), job_of(key, entry), trigger)


@kopf.on.event(RAY_GROUP, RAY_VERSION, RAYCLUSTER_PLURAL, labels={MANAGED_BY_LABEL: MANAGED_BY})
def raycluster_changed(namespace: str, labels: kopf.Labels, memo: kopf.Memo, **kwargs: Any) -> None:
    """A job's RayCluster changed (readiness, KubeRay's events): look at the job."""
    _child_changed(namespace, labels, memo, kwargs, "raycluster")


@kopf.on.event(RAY_GROUP, RAY_VERSION, RAYJOB_PLURAL, labels={MANAGED_BY_LABEL: MANAGED_BY})
def rayjob_changed(namespace: str, labels: kopf.Labels, memo: kopf.Memo, **kwargs: Any) -> None:
    """A job's RayJob changed (the driver started, ended or was submitted again): look at the job."""
    _child_changed(namespace, labels, memo, kwargs, "rayjob")


@kopf.on.event(WORKLOAD_GROUP, WORKLOAD_VERSION, WORKLOAD_PLURAL, labels={MANAGED_BY_LABEL: MANAGED_BY})
def workload_changed(namespace: str, labels: kopf.Labels, memo: kopf.Memo, **kwargs: Any) -> None:
    """A job's Workload changed (Kueue admitted or evicted it, swapped a node): look at the job, waiting or not."""
    if JOB_LABEL not in labels:
        return
    key = (namespace, labels[JOB_LABEL])
    entry = one(kwargs, RLJOB_INDEX, key)
    if entry is not None:
        _safely(memo, observer_of(memo, kwargs), job_of(key, entry), "workload")


@kopf.on.event(WORKLOAD_GROUP, WORKLOAD_VERSION, LOCALQUEUE_PLURAL)
def localqueue_changed(namespace: str, name: str, memo: kopf.Memo, **kwargs: Any) -> None:
    """A LocalQueue was made, changed or deleted: look at each job of its namespace that names it and holds its
    admission (nothing else tells a running job that its queue is gone: Kueue keeps its Workload admitted)."""
    index = kwargs[RLJOB_INDEX]
    for key in [k for k in list(index) if k[0] == namespace]:
        entry = one(kwargs, RLJOB_INDEX, key)
        if entry is not None and queue_name(entry.get("labels") or {}) == name and holds_nodes(entry["status"]):
            _safely(memo, observer_of(memo, kwargs), job_of(key, entry), "localqueue")


@kopf.timer(GROUP, VERSION, NODEGROUP_PLURAL, interval=TIMER_SECONDS)
def nodegroup_jobs_recheck(name: str, memo: kopf.Memo, **kwargs: Any) -> None:
    """The queue pass (one admission decision over every waiting job), then a look at each job of this NodeGroup
    that waits, provisions or has not verified its driver's binding yet."""
    snapshot = snapshot_of(kwargs)
    ledger: Ledger = memo.ledger
    started = time.perf_counter()
    decisions = queue_pass(ledger, admission_world(ledger, snapshot))
    operator_metrics(memo).observe_pass(snapshot, ledger, time.perf_counter() - started)
    observer = observer_of(memo, kwargs, snapshot)
    looks: list[tuple[Job, Decision | None]] = []
    for key in list(snapshot.rljobs):
        entry = indexed(snapshot.rljobs, key)
        if entry is None or entry["nodeGroups"][:1] != [name]:
            continue
        holding = indexed(snapshot.rayclusters, key)
        if not needs_look(entry, holding.nodes if holding is not None else ()):
            continue
        planned = key in ledger.demands  # a job whose demand this process knows can wait without re-planning
        looks.append((job_of(key, entry), decisions.get(key) if planned else None))
    # The jobs are independent once the pass has decided (their nodes are reserved): each look is a few API calls,
    # so a burst's admitted jobs are provisioned side by side, not one call after another. Each runs in a copy of
    # this handler's context: kopf's Events (kopf.info) read their settings from it.
    pool: ThreadPoolExecutor = memo.pass_pool
    runs = [
        pool.submit(contextvars.copy_context().run, _safely, memo, observer, job, "timer", queue)
        for job, queue in looks
    ]
    for done in runs:
        done.result()


@kopf.on.delete(GROUP, VERSION, RLJOB_PLURAL, optional=True)
def rljob_release(namespace: str, name: str, memo: kopf.Memo, **_: Any) -> None:
    """A deleted job's reservation goes (its RayCluster goes with it through the garbage collector)."""
    ledger: Ledger = memo.ledger
    ledger.forget((namespace, name))

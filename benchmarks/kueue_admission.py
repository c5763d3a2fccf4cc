"""RLJobs admitted by Kueue, beside Kueue's own Ray integration, on one API server with 8-GPU kwok nodes.

    .venv/bin/python benchmarks/kueue_admission.py [--jobs 100] [--preemptions 20] [--baselines raycluster rayjob]

Adds `--jobs` kwok nodes in one NodeGroup and `--preemptions` more in a second one; for each a ResourceFlavor
(`topologyName`: a Topology whose one level is kubernetes.io/hostname), a ClusterQueue with every GPU of its
nodes (cpu and memory to spare) and a LocalQueue; WorkloadPriorityClasses low and high; starts the operator as
a local process from the working tree. Then, one after the other:

1. rlplace: `--jobs` RLJobs created at once, each one whole node (no entrypoint: a RayCluster job, which kwok
   runs), labelled with the first LocalQueue. Per job, seconds from its create call to its Workload (made by
   the operator), Kueue's admission, its RayCluster, and its worker pod bound (checked: on the granted node).
2. baselines, on the same nodes once step 1's jobs and pods are gone: as many KubeRay RayClusters (Kueue's
   ray.io/raycluster integration), then RayJobs (ray.io/rayjob; its webhook suspends them), labelled with the
   same LocalQueue, a head (1 CPU, 2Gi) and one worker group of 1 replica (4 CPU, 16Gi, 8 GPUs), like an
   RLJob's pods. Per job: to the Workload Kueue makes, its admission, the job un-suspended, the RayCluster
   (RayJobs), and the worker pod bound.
3. eviction: `--preemptions` low-priority RLJobs (no checkpoint: their pods are stopped at once) fill the second
   ClusterQueue (preemption.withinClusterQueue: LowerPriority), then as many high-priority ones are created at
   once for the same nodes. Per low job, from the first high create call to its Workload seen Evicted=True, and
   from there to its quota released (QuotaReserved False, no status.admission: the operator writes that once the
   job's pods are gone); per high job, from its create call to its admission, its RayCluster and its worker pod
   bound. Baseline: the same with RayClusters of Kueue's integration (Kueue suspends an evicted one, KubeRay
   deletes its pods, Kueue releases the quota).

Times are taken when a watch on the API server delivers the change (Evicted's lastTransitionTime has whole
seconds only), with a monotonic clock; p50/p95/max over the jobs. Ratios are to the baseline of the same run.
kwok runs no containers: this measures admission, placement and binding, not Ray.

Uses the cluster in KUBECONFIG if set (the baselines need Kueue's Ray integration there: skipped otherwise),
else starts a kwok-only local control plane in .e2e/bench-kueue with RLPLACE_KUEUE_RAY_INTEGRATION=1 (and stops
it; Kueue's log is kept as .e2e/kueue-<namespace>.log, the operator's as .e2e/operator-<namespace>.log). Prints
figures; it is not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

import urllib3  # noqa: E402
from kubernetes import client, config, watch  # noqa: E402
from kubernetes.client.exceptions import ApiException  # noqa: E402

from rlplace_operator.admission import kueue  # noqa: E402
from rlplace_operator.api.names import (  # noqa: E402
    JOB_LABEL,
    PRIORITY_CLASS_LABEL,
    QUEUE_LABEL,
    WORKLOAD_GROUP,
    WORKLOAD_VERSION,
)

from _harness import (  # noqa: E402
    BENCH_LABEL,
    GROUP,
    VERSION,
    Operator,
    add_nodes,
    bench_nodegroup,
    delete_nodes,
    exists,
    percentile,
    wait_for,
    wait_group_ready,
)

STATE = REPO / ".e2e" / "bench-kueue"
KUEUE = (WORKLOAD_GROUP, WORKLOAD_VERSION)
RAY = ("ray.io", "v1")
RAY_IMAGE = "rayproject/ray:2.60.0"
#: KubeRay's label on the RayCluster it makes for a RayJob: the RayJob's name.
ORIGINATED_FROM = "ray.io/originated-from-cr-name"
WORKER_SELECTOR = "ray.io/node-type=worker"
#: The LocalQueues of steps 1-2 and of step 3. Never `default`: Kueue's LocalQueueDefaulting would then label
#: every RayCluster of the namespace with it, rlplace's own too.
QUEUE, PREEMPT_QUEUE = "rl", "rl-preempt"
LOW, HIGH = 100, 1000
#: Seconds a watch stays open before it is opened again where it ended: how soon a stopped one goes away.
WATCH_SECONDS = 5


class FirstSeen:
    """When each object of one kind first showed each mark, from a watch (opened again where it ended, from a
    fresh list when its resourceVersion expired). `marks(object)` yields (mark, key, value)."""

    def __init__(
        self,
        list_call: Callable[..., Any],
        *args: str,
        marks: Callable[[dict], Iterable[tuple[str, str, object]]],
        **kwargs: str,
    ) -> None:
        self._list, self._args, self._kwargs, self._marks = list_call, args, kwargs, marks
        self._seen: dict[str, dict[str, tuple[float, object]]] = {}
        self._failed: BaseException | None = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def times(self, mark: str) -> dict[str, float]:
        with self._lock:
            self._raise_failure()
            return {key: at for key, (at, _) in self._seen.get(mark, {}).items()}

    def values(self, mark: str) -> dict[str, object]:
        with self._lock:
            self._raise_failure()
            return {key: value for key, (_, value) in self._seen.get(mark, {}).items()}

    def _raise_failure(self) -> None:
        # A watch that died would otherwise look like objects that never changed, and the caller would time out.
        if self._failed is not None:
            raise RuntimeError(f"the watch of {self._args} failed") from self._failed

    def stop(self) -> None:
        self._stop.set()

    def _mark(self, body: dict, at: float) -> None:
        with self._lock:
            for mark, key, value in self._marks(body):
                self._seen.setdefault(mark, {}).setdefault(key, (at, value))

    def _run(self) -> None:
        try:
            self._watch()
        except BaseException as err:
            with self._lock:
                self._failed = err
            raise

    def _watch(self) -> None:
        version = None
        while not self._stop.is_set():
            try:
                if version is None:
                    listed = json.loads(self._list(*self._args, **self._kwargs, _preload_content=False).data)
                    now = time.monotonic()
                    for item in listed.get("items") or []:
                        self._mark(item, now)
                    version = listed["metadata"]["resourceVersion"]
                events = watch.Watch().stream(
                    self._list,
                    *self._args,
                    **self._kwargs,
                    resource_version=version,
                    timeout_seconds=WATCH_SECONDS,
                    allow_watch_bookmarks=True,
                    deserialize=False,
                )
                for event in events:
                    now = time.monotonic()
                    version = event["object"]["metadata"]["resourceVersion"]
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self._mark(event["object"], now)
                    if self._stop.is_set():
                        break
            except (ApiException, urllib3.exceptions.HTTPError):
                # Expired (410) or a dropped connection on a loaded machine: list again, so nothing is missed.
                version = None
                time.sleep(0.2)


# -- what each watch marks -----------------------------------------------------------------------------------


def workload_marks(body: dict) -> Iterator[tuple[str, str, object]]:
    """Keyed by the Workload's owner: the RLJob (rlplace), or the RayCluster or RayJob (Kueue's integration)."""
    owner = next(iter(body["metadata"].get("ownerReferences") or []), {}).get("name", body["metadata"]["name"])
    state = kueue.WorkloadState.of(body)
    yield "workload", owner, None
    if state.admitted:
        yield "admitted", owner, {host for hosts in state.hosts().values() for host in hosts}
    if state.evicted:
        yield "evicted", owner, None
        if not state.holds_quota:
            yield "released", owner, None


def raycluster_marks(body: dict) -> Iterator[tuple[str, str, object]]:
    """Keyed by the RLJob (same name), the RayCluster itself, or the RayJob that made it."""
    key = (body["metadata"].get("labels") or {}).get(ORIGINATED_FROM) or body["metadata"]["name"]
    yield "raycluster", key, None
    if not body["spec"].get("suspend"):
        yield "unsuspended", key, None


def rayjob_marks(body: dict) -> Iterator[tuple[str, str, object]]:
    if not body["spec"].get("suspend"):
        yield "unsuspended", body["metadata"]["name"], None


def bound_marks(job_of: Callable[[Mapping[str, str]], str]) -> Callable[[dict], Iterator[tuple[str, str, object]]]:
    """A worker pod bound to a node (the value), keyed by `job_of(its labels)`."""

    def marks(pod: dict) -> Iterator[tuple[str, str, object]]:
        node = pod["spec"].get("nodeName")
        if node and not pod["metadata"].get("deletionTimestamp"):
            yield "bound", job_of(pod["metadata"]["labels"]), node

    return marks


def rlplace_job_of(labels: Mapping[str, str]) -> str:
    return labels[JOB_LABEL]


def raycluster_of(labels: Mapping[str, str]) -> str:
    return labels["ray.io/cluster"]


def rayjob_of(labels: Mapping[str, str]) -> str:
    # KubeRay names a RayJob's RayCluster `<rayjob>-<5 random characters>`.
    return labels["ray.io/cluster"].rsplit("-", 1)[0]


# -- the objects --------------------------------------------------------------------------------------------


def topology(name: str) -> dict:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Topology",
        "metadata": {"name": name},
        "spec": {"levels": [{"nodeLabel": "kubernetes.io/hostname"}]},
    }


def resource_flavor(group: str, topology_name: str) -> dict:
    """The flavor of NodeGroup `group`'s nodes (named after it), placed per node."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": group},
        "spec": {"nodeLabels": {BENCH_LABEL: group}, "topologyName": topology_name},
    }


def cluster_queue(name: str, flavor: str, gpus: int, preempt: bool) -> dict:
    """Every GPU of the flavor; cpu and memory to spare (GPUs are what is rationed)."""
    resources = [
        {"name": "cpu", "nominalQuota": 100_000},
        {"name": "memory", "nominalQuota": "1000Ti"},
        {"name": "nvidia.com/gpu", "nominalQuota": gpus},
    ]
    spec: dict[str, Any] = {
        "namespaceSelector": {},
        "resourceGroups": [
            {
                "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                "flavors": [{"name": flavor, "resources": resources}],
            }
        ],
    }
    if preempt:
        spec["preemption"] = {"withinClusterQueue": "LowerPriority"}
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec}


def local_queue(name: str, cluster_queue_name: str) -> dict:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": name},
        "spec": {"clusterQueue": cluster_queue_name},
    }


def priority_class(name: str, value: int) -> dict:
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": name},
        "value": value,
    }


def rljob(name: str, group: str, queue: str, priority: str | None = None) -> dict:
    """An RLJob on one whole node of `group` (actor and rollout on its 8 GPUs), no entrypoint: a RayCluster."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "RLJob",
        "metadata": {"name": name, "labels": kueue_labels(queue, priority)},
        "spec": {"nodeGroups": [group], "componentPlacement": [{"components": "actor,rollout", "placement": "0-7"}]},
    }


def ray_cluster_spec() -> dict:
    """A head and one worker of an RLJob's default size (spec.ray.headResources, workerResources) with 8 GPUs."""

    def container(name: str, cpu: str, memory: str, gpus: int = 0) -> dict:
        resources = {"cpu": cpu, "memory": memory, **({"nvidia.com/gpu": str(gpus)} if gpus else {})}
        return {"name": name, "image": RAY_IMAGE, "resources": {"requests": resources, "limits": resources}}

    return {
        "headGroupSpec": {
            "rayStartParams": {},
            "template": {"spec": {"containers": [container("ray-head", "1", "2Gi")]}},
        },
        "workerGroupSpecs": [
            {
                "groupName": "workers",
                "replicas": 1,
                "minReplicas": 1,
                "maxReplicas": 1,
                "rayStartParams": {},
                "template": {"spec": {"containers": [container("ray-worker", "4", "16Gi", gpus=8)]}},
            }
        ],
    }


def kueue_labels(queue: str, priority: str | None) -> dict[str, str]:
    return {QUEUE_LABEL: queue, **({PRIORITY_CLASS_LABEL: priority} if priority else {})}


def kueue_raycluster(name: str, queue: str, priority: str | None = None) -> dict:
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayCluster",
        "metadata": {"name": name, "labels": kueue_labels(queue, priority)},
        "spec": ray_cluster_spec(),
    }


def kueue_rayjob(name: str, queue: str, priority: str | None = None) -> dict:
    # Kueue admits a RayJob only with shutdownAfterJobFinishes (its webhook refuses it otherwise).
    spec = {"entrypoint": "python -c pass", "shutdownAfterJobFinishes": True, "rayClusterSpec": ray_cluster_spec()}
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name, "labels": kueue_labels(queue, priority)},
        "spec": spec,
    }


@dataclass(frozen=True)
class JobKind:
    """How one kind of job is made and watched."""

    title: str
    resource: tuple[str, str, str]
    """Group, version, plural."""
    build: Callable[[str, str, str | None], dict]
    """(name, LocalQueue, WorkloadPriorityClass) -> the body."""
    job_of: Callable[[Mapping[str, str]], str]
    """A worker pod's labels -> its job's name."""
    started: tuple[str, str]
    """(watch, mark) at which the job may make its pods: rlplace's RayCluster exists, Kueue's job is un-suspended."""

    def job_name(self, index: int, priority: str = "") -> str:
        """`rljob-007`, `rayjob-high-007`: each kind its own names, so that no object of a run before, still on its
        way out, is ever taken for this run's."""
        return "-".join(part for part in (self.resource[2].removesuffix("s"), priority, f"{index:03d}") if part)


def rlplace_kind(group: str) -> JobKind:
    return JobKind(
        "rlplace RLJobs (no checkpoint)",
        (GROUP, VERSION, "rljobs"),
        lambda name, queue, priority: rljob(name, group, queue, priority),
        rlplace_job_of,
        ("rayclusters", "raycluster"),
    )


BASELINES = {
    "raycluster": JobKind(
        "Kueue's RayCluster integration",
        (*RAY, "rayclusters"),
        kueue_raycluster,
        raycluster_of,
        ("rayclusters", "unsuspended"),
    ),
    "rayjob": JobKind(
        "Kueue's RayJob integration", (*RAY, "rayjobs"), kueue_rayjob, rayjob_of, ("rayjobs", "unsuspended")
    ),
}


# -- cluster and setup ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BenchCluster:
    api: client.ApiClient
    kubeconfig: str
    ray_integration: bool
    """Whether Kueue's webhooks take RayJobs and RayClusters: the baselines can run."""
    kueue_log: Path | None
    """The log of the Kueue this benchmark started (None on the cluster in KUBECONFIG)."""


@contextlib.contextmanager
def kueue_cluster(keep_kueue_log: Path) -> Iterator[BenchCluster]:
    """The cluster in KUBECONFIG, else a kwok-only local control plane in .e2e/bench-kueue with Kueue's Ray
    integration (stopped afterwards; Kueue's log copied to `keep_kueue_log` first); rlplace's CRDs applied
    from crds/."""
    kubeconfig = os.environ.get("KUBECONFIG")
    env = {
        **os.environ,
        "RLPLACE_E2E_DIR": str(STATE),
        "RLPLACE_E2E_REAL_NODES": "0",
        "RLPLACE_KUEUE_RAY_INTEGRATION": "1",
    }
    started = kubeconfig is None
    if started:
        subprocess.run(["bash", str(REPO / "e2e/cluster/tools.sh")], check=True, env=env)
        subprocess.run(["bash", str(REPO / "e2e/cluster/up.sh")], check=True, env=env)
        kubeconfig = str(STATE / "kubeconfig")
    try:
        kubectl = STATE / "bin" / "kubectl" if started else REPO / ".e2e" / "bin" / "kubectl"
        apply = ("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
        subprocess.run([str(kubectl), "--kubeconfig", kubeconfig, *apply], check=True, capture_output=True)
        api = config.new_client_from_config(config_file=kubeconfig)
        kueue_log = STATE / "cluster" / "logs" / "kueue.log" if started else None
        yield BenchCluster(api, kubeconfig, kueue_ray_webhooks(api), kueue_log)
    finally:
        if started:
            with contextlib.suppress(OSError):
                shutil.copyfile(STATE / "cluster" / "logs" / "kueue.log", keep_kueue_log)
            subprocess.run(["bash", str(REPO / "e2e/cluster/down.sh")], check=False, env=env)


def kueue_ray_webhooks(api: client.ApiClient) -> bool:
    """Whether some mutating webhook takes RayJobs and RayClusters (Kueue's Ray integration is registered)."""
    resources = {
        resource
        for configuration in client.AdmissionregistrationV1Api(api).list_mutating_webhook_configuration().items
        for hook in configuration.webhooks or []
        for rule in hook.rules or []
        if "ray.io" in (rule.api_groups or [])
        for resource in rule.resources or []
    }
    return {"rayjobs", "rayclusters"} <= resources


def _ignore_missing(call: Callable[..., object], *args: str) -> None:
    with contextlib.suppress(ApiException):
        call(*args)


@contextlib.contextmanager
def bench_setup(
    api: client.ApiClient, kubeconfig: str, namespace: str, nodes: int, preempt_nodes: int
) -> Iterator[Operator]:
    """Namespace `namespace` with LocalQueues QUEUE and PREEMPT_QUEUE; NodeGroups `namespace` (`nodes` 8-GPU kwok
    nodes) and `namespace`-p (`preempt_nodes`), each with its ResourceFlavor and ClusterQueue (the second one
    preempts by priority); WorkloadPriorityClasses `namespace`-low and -high; the operator. All removed
    afterwards: the namespace first (deletions wait on the operator's finalizers), then Kueue's cluster-wide
    objects (a ClusterQueue goes once its Workloads are gone), the nodes, and the operator last."""
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    groups = {namespace: (nodes, QUEUE, False), f"{namespace}-p": (preempt_nodes, PREEMPT_QUEUE, True)}
    hosts = f"{namespace}-hosts"
    node_names: list[str] = []
    cluster_wide: list[tuple[str, str]] = []  # (plural, name), deleted in reverse order
    with contextlib.ExitStack() as stack:
        operator = Operator(kubeconfig, REPO / ".e2e" / f"operator-{namespace}.log")
        stack.callback(operator.stop)
        stack.callback(lambda: delete_nodes(core, node_names))
        stack.callback(lambda: _delete_cluster_wide(custom, cluster_wide))
        core.create_namespace({"metadata": {"name": namespace}})
        stack.callback(lambda: _delete_namespace(core, namespace))
        wait_for(lambda: core.list_namespaced_service_account(namespace).items, 60, "default ServiceAccount")

        def create(plural: str, body: dict) -> None:
            custom.create_cluster_custom_object(*KUEUE, plural, body)
            cluster_wide.append((plural, body["metadata"]["name"]))

        create("topologies", topology(hosts))
        for name, value in (("low", LOW), ("high", HIGH)):
            create("workloadpriorityclasses", priority_class(f"{namespace}-{name}", value))
        for group, (size, queue, preempt) in groups.items():
            node_names += add_nodes(core, size, group)
            custom.create_cluster_custom_object(GROUP, VERSION, "nodegroups", bench_nodegroup(group))
            stack.callback(
                lambda g=group: _ignore_missing(custom.delete_cluster_custom_object, GROUP, VERSION, "nodegroups", g)
            )
            create("resourceflavors", resource_flavor(group, hosts))
            create("clusterqueues", cluster_queue(group, group, 8 * size, preempt))
            custom.create_namespaced_custom_object(*KUEUE, namespace, "localqueues", local_queue(queue, group))
        for group, (size, _, _) in groups.items():
            wait_group_ready(api, group, size)
            wait_for(lambda g=group: _active(custom, g), 60, f"ClusterQueue {group} active")
        yield operator


def _active(custom: client.CustomObjectsApi, cluster_queue_name: str) -> bool:
    body = custom.get_cluster_custom_object(*KUEUE, "clusterqueues", cluster_queue_name)
    return any(
        c["type"] == "Active" and c["status"] == "True" for c in (body.get("status") or {}).get("conditions") or []
    )


def _delete_namespace(core: client.CoreV1Api, namespace: str) -> None:
    _ignore_missing(core.delete_namespace, namespace)
    with contextlib.suppress(TimeoutError):
        wait_for(lambda: not exists(lambda: core.read_namespace(namespace)), 300, f"namespace {namespace} gone")


def _delete_cluster_wide(custom: client.CustomObjectsApi, objects: list[tuple[str, str]]) -> None:
    for plural, name in reversed(objects):
        _ignore_missing(custom.delete_cluster_custom_object, *KUEUE, plural, name)
    for plural, name in objects:
        with contextlib.suppress(TimeoutError):
            wait_for(lambda p=plural, n=name: _gone(custom, p, n), 60, f"{plural}/{name} gone")


def _gone(custom: client.CustomObjectsApi, plural: str, name: str) -> bool:
    return not exists(lambda: custom.get_cluster_custom_object(*KUEUE, plural, name))


# -- the runs -----------------------------------------------------------------------------------------------


def create_all(create: Callable[[dict], object], bodies: list[dict]) -> dict[str, float]:
    """Name -> the moment its create call was made (16 calls at a time, as in operator_scale.py)."""
    created: dict[str, float] = {}

    def one(body: dict) -> None:
        created[body["metadata"]["name"]] = time.monotonic()
        create(body)

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(one, bodies))
    return created


@contextlib.contextmanager
def watching(
    api: client.ApiClient, namespace: str, job_of: Callable[[Mapping[str, str]], str]
) -> Iterator[dict[str, FirstSeen]]:
    """Watches on the namespace's Workloads, RayClusters, RayJobs and worker pods, stopped afterwards."""
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    watches = {
        "workloads": FirstSeen(
            custom.list_namespaced_custom_object, *KUEUE, namespace, "workloads", marks=workload_marks
        ),
        "rayclusters": FirstSeen(
            custom.list_namespaced_custom_object, *RAY, namespace, "rayclusters", marks=raycluster_marks
        ),
        "rayjobs": FirstSeen(custom.list_namespaced_custom_object, *RAY, namespace, "rayjobs", marks=rayjob_marks),
        "pods": FirstSeen(
            core.list_namespaced_pod, namespace, marks=bound_marks(job_of), label_selector=WORKER_SELECTOR
        ),
    }
    try:
        yield watches
    finally:
        for seen in watches.values():
            seen.stop()


def until(created: Mapping[str, float], reached: Mapping[str, float]) -> list[float]:
    """Seconds from each job's create call to the moment it reached something (only those that did)."""
    return [reached[name] - at for name, at in created.items() if name in reached]


def spread(values: list[float]) -> str:
    if not values:
        return "n/a"
    return f"{statistics.median(values):.2f} / {percentile(values, 0.95):.2f} / {max(values):.2f}"


def wait_all(seen: FirstSeen, mark: str, names: Iterable[str], timeout: float, what: str) -> float:
    """Waits until every one of `names` shows `mark`; the moment the last one did."""
    wanted = set(names)
    wait_for(lambda: wanted <= set(seen.times(mark)), timeout, what)
    times = seen.times(mark)
    return max(times[name] for name in wanted)


def delete_and_wait(api: client.ApiClient, namespace: str, group: str, version: str, plural: str) -> None:
    """Every object of `plural` in the namespace deleted; waits until they, the namespace's RayClusters, pods and
    Workloads are gone (so Kueue's topology-aware scheduling sees the nodes free again)."""
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    custom.delete_collection_namespaced_custom_object(group, version, namespace, plural)
    wait_for(
        lambda: not custom.list_namespaced_custom_object(group, version, namespace, plural)["items"],
        600,
        f"{plural} gone",
    )
    wait_for(
        lambda: not custom.list_namespaced_custom_object(*RAY, namespace, "rayclusters")["items"],
        600,
        "RayClusters gone",
    )
    wait_for(lambda: not core.list_namespaced_pod(namespace).items, 600, "pods gone")
    wait_for(
        lambda: not custom.list_namespaced_custom_object(*KUEUE, namespace, "workloads")["items"], 600, "Workloads gone"
    )


def run_admission(api: client.ApiClient, namespace: str, kind: JobKind, jobs: int) -> dict[str, Any]:
    """`jobs` jobs of `kind` created at once in LocalQueue QUEUE; the figures once every worker pod is bound."""
    custom = client.CustomObjectsApi(api)
    bodies = [kind.build(kind.job_name(i), QUEUE, None) for i in range(jobs)]
    watch_name, mark = kind.started
    with watching(api, namespace, kind.job_of) as seen:
        created = create_all(
            lambda b: custom.create_namespaced_custom_object(*kind.resource[:2], namespace, kind.resource[2], b), bodies
        )
        last_started = wait_all(seen[watch_name], mark, created, 900, f"{jobs} jobs started ({mark})")
        last_bound = wait_all(seen["pods"], "bound", created, 900, f"{jobs} worker pods bound")
    first = min(created.values())
    result = {
        "workload": until(created, seen["workloads"].times("workload")),
        "admitted": until(created, seen["workloads"].times("admitted")),
        "started": until(created, seen[watch_name].times(mark)),
        "raycluster": until(created, seen["rayclusters"].times("raycluster")),
        "bound": until(created, seen["pods"].times("bound")),
        "all_started_s": last_started - first,
        "all_bound_s": last_bound - first,
        "off_grant": off_grant(seen, created),
    }
    delete_and_wait(api, namespace, *kind.resource)
    return result


def run_preemption(api: client.ApiClient, namespace: str, kind: JobKind, jobs: int) -> dict[str, Any]:
    """`jobs` low-priority jobs of `kind` fill LocalQueue PREEMPT_QUEUE, then as many high-priority ones come;
    the figures once every high one's worker pod is bound."""
    custom = client.CustomObjectsApi(api)

    def create(body: dict) -> object:
        return custom.create_namespaced_custom_object(*kind.resource[:2], namespace, kind.resource[2], body)

    def bodies(priority: str) -> list[dict]:
        return [kind.build(kind.job_name(i, priority), PREEMPT_QUEUE, f"{namespace}-{priority}") for i in range(jobs)]

    watch_name, mark = kind.started
    with watching(api, namespace, kind.job_of) as seen:
        low = create_all(create, bodies("low"))
        wait_all(seen["pods"], "bound", low, 900, f"{jobs} low-priority worker pods bound")
        high = create_all(create, bodies("high"))
        last_bound = wait_all(seen["pods"], "bound", high, 900, f"{jobs} high-priority worker pods bound")
    first = min(high.values())
    evicted = {name: at for name, at in seen["workloads"].times("evicted").items() if name in low}
    result = {
        "evicted": len(evicted),
        "to_evicted": [at - first for at in evicted.values()],
        "released": until(evicted, seen["workloads"].times("released")),
        "admitted": until(high, seen["workloads"].times("admitted")),
        "started": until(high, seen[watch_name].times(mark)),
        "bound": until(high, seen["pods"].times("bound")),
        "all_bound_s": last_bound - first,
        "off_grant": off_grant(seen, high),
    }
    delete_and_wait(api, namespace, *kind.resource)
    return result


def off_grant(seen: dict[str, FirstSeen], jobs: Iterable[str]) -> list[str]:
    """The jobs whose worker pod was first bound to a node Kueue did not grant them."""
    granted, bound = seen["workloads"].values("admitted"), seen["pods"].values("bound")
    return sorted(name for name in jobs if name in bound and bound[name] not in (granted.get(name) or ()))


def log_problems(path: Path, needles: tuple[str, ...]) -> list[str]:
    if not path.exists():
        return []
    return [line for line in path.read_text(errors="replace").splitlines() if any(n in line for n in needles)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100, help="jobs (and nodes) of steps 1 and 2")
    parser.add_argument("--preemptions", type=int, default=20, help="low- and high-priority jobs (and nodes) of step 3")
    parser.add_argument("--baselines", nargs="*", choices=sorted(BASELINES), default=["raycluster", "rayjob"])
    args = parser.parse_args()
    namespace = f"admit-{uuid.uuid4().hex[:4]}"
    operator_log = REPO / ".e2e" / f"operator-{namespace}.log"
    kept_kueue_log = REPO / ".e2e" / f"kueue-{namespace}.log"
    with kueue_cluster(kept_kueue_log) as cluster:
        api = cluster.api
        baselines = [BASELINES[b] for b in args.baselines] if cluster.ray_integration else []
        if not cluster.ray_integration:
            print("baselines skipped: no Kueue webhook takes ray.io RayJobs and RayClusters on this cluster")
        with bench_setup(api, cluster.kubeconfig, namespace, args.jobs, args.preemptions):
            print(
                f"admission: {args.jobs} jobs created at once, each one 8-GPU kwok node, in one ClusterQueue with the "
                f"GPUs of {args.jobs} nodes (TAS, hostname level); seconds from each create call, p50 / p95 / max:",
                flush=True,
            )
            ours = run_admission(api, namespace, rlplace_kind(namespace), args.jobs)
            print_admission(rlplace_kind(namespace), ours)
            for kind in baselines:
                base = run_admission(api, namespace, kind, args.jobs)
                print_admission(kind, base)
                print(
                    f"    rlplace / {kind.title}: to RayCluster vs un-suspended {_ratios(ours['started'], base['started'])}"
                    f"; to worker bound {_ratios(ours['bound'], base['bound'])}; all bound "
                    f"{ours['all_bound_s'] / base['all_bound_s']:.2f}x",
                    flush=True,
                )
            print(
                f"eviction: {args.preemptions} low-priority jobs fill a ClusterQueue of {args.preemptions} nodes "
                f"(withinClusterQueue: LowerPriority), then {args.preemptions} high-priority ones are created at once; "
                "seconds, p50 / p95 / max:",
                flush=True,
            )
            ours = run_preemption(api, namespace, rlplace_kind(f"{namespace}-p"), args.preemptions)
            print_preemption(rlplace_kind(f"{namespace}-p"), ours)
            # Kueue's RayCluster integration suspends an evicted RayCluster (KubeRay deletes its pods) and releases
            # the quota itself; a RayJob on kwok fails on its own (no Ray), so it is left out here.
            for kind in [k for k in baselines if k is BASELINES["raycluster"]]:
                base = run_preemption(api, namespace, kind, args.preemptions)
                print_preemption(kind, base)
                print(
                    f"    rlplace / {kind.title}: Evicted -> released {_ratios(ours['released'], base['released'])}; "
                    f"high to worker bound {_ratios(ours['bound'], base['bound'])}; all high bound "
                    f"{ours['all_bound_s'] / base['all_bound_s']:.2f}x",
                    flush=True,
                )
        problems = log_problems(operator_log, ("Traceback", "[ERROR"))
        print(f"operator log {operator_log.relative_to(REPO)}: {len(problems)} Traceback/ERROR lines")
        if cluster.kueue_log is not None:
            errors = log_problems(cluster.kueue_log, ("\tERROR\t", '"level":"error"'))
            print(f"Kueue log (kept as {kept_kueue_log.relative_to(REPO)}): {len(errors)} ERROR lines")
            for message in sorted({line.split("\t")[4] if line.count("\t") >= 4 else line for line in errors})[:5]:
                print(f"  {message[:160]}")


def _started(kind: JobKind) -> str:
    return "RayCluster" if kind.started[1] == "raycluster" else "un-suspended"


def print_admission(kind: JobKind, r: Mapping[str, Any]) -> None:
    started = _started(kind)
    print(
        f"  {kind.title}: Workload {spread(r['workload'])} | admitted {spread(r['admitted'])} | {started} "
        f"{spread(r['started'])}"
        + (f" | RayCluster {spread(r['raycluster'])}" if kind.resource[2] == "rayjobs" else "")
        + f" | worker bound {spread(r['bound'])} | all {started} {r['all_started_s']:.1f} s, all bound "
        f"{r['all_bound_s']:.1f} s{_off(r['off_grant'])}",
        flush=True,
    )


def print_preemption(kind: JobKind, r: Mapping[str, Any]) -> None:
    print(
        f"  {kind.title}: {r['evicted']} low evicted, first high create -> low Evicted {spread(r['to_evicted'])} | "
        f"Evicted -> quota released {spread(r['released'])} | high create -> admitted {spread(r['admitted'])}, "
        f"-> {_started(kind)} {spread(r['started'])}, -> worker bound {spread(r['bound'])} | all high bound "
        f"{r['all_bound_s']:.1f} s{_off(r['off_grant'])}",
        flush=True,
    )


def _ratios(ours: list[float], theirs: list[float]) -> str:
    if not ours or not theirs:
        return "n/a"
    return f"p50 {statistics.median(ours) / statistics.median(theirs):.2f}x, p95 {percentile(ours, 0.95) / percentile(theirs, 0.95):.2f}x"


def _off(names: list[str]) -> str:
    return f"; NOT on the granted node: {', '.join(names)}" if names else ""


if __name__ == "__main__":
    main()

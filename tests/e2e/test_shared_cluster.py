"""The queue on a real API server with kwok nodes: jobs wait for free nodes and start all at once.

Nodes of the local cluster (e2e/nodes.yaml): two a800, one 4090, one robot node, two CPU nodes. The three
example jobs together need the 4090 node twice (disaggregated, heterogeneous), so one of them queues.
"""

from __future__ import annotations

import contextlib
import copy
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from kubernetes.client.exceptions import ApiException

from e2e_cluster import e2e_dir, wait_for
from rlplace_fixtures import Jobs, OperatorProcess, example_job

pytestmark = pytest.mark.e2e

#: The operator's bound on a partial cluster (BIND_TIMEOUT_SECONDS + BIND_CHECK_SECONDS in handlers/rljob.py).
PARTIAL_BOUND_SECONDS = 35.0
GPU_4090_NODE = "4090-0"


def status(jobs: Jobs, name: str) -> dict:
    return jobs.get(name).get("status") or {}


def wait_queued(jobs: Jobs, name: str, timeout: float = 30) -> dict:
    return wait_for(lambda: (s := status(jobs, name)).get("phase") == "Queued" and s, timeout, f"{name} Queued")


def worker_pods(jobs: Jobs) -> dict[str, tuple[int, int]]:
    """RayCluster -> (worker pods bound to a node, worker groups it asks for)."""
    custom = jobs.custom
    clusters = custom.list_namespaced_custom_object("ray.io", "v1", jobs.namespace, "rayclusters")["items"] or []
    expected = {rc["metadata"]["name"]: len(rc["spec"].get("workerGroupSpecs") or []) for rc in clusters}
    bound = dict.fromkeys(expected, 0)
    for pod in jobs.core.list_namespaced_pod(jobs.namespace, label_selector="ray.io/node-type=worker").items:
        cluster = (pod.metadata.labels or {}).get("ray.io/cluster")
        if cluster in bound and pod.spec.node_name and pod.metadata.deletion_timestamp is None:
            bound[cluster] += 1
    return {name: (bound[name], expected[name]) for name in expected}


class PartialClusterWatch:
    """Samples every second how long each job has had some, but not all, of its worker pods bound."""

    def __init__(self, jobs: Jobs) -> None:
        self.jobs = jobs
        self.partial_since: dict[str, float] = {}
        self.longest: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            now = time.monotonic()
            with contextlib.suppress(ApiException):
                for name, (bound, expected) in worker_pods(self.jobs).items():
                    if 0 < bound < expected:
                        since = self.partial_since.setdefault(name, now)
                        self.longest[name] = max(self.longest.get(name, 0.0), now - since)
                    else:
                        self.partial_since.pop(name, None)

    def __enter__(self) -> PartialClusterWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        over = {name: round(s) for name, s in self.longest.items() if s > PARTIAL_BOUND_SECONDS}
        assert not over, f"partial clusters held longer than {PARTIAL_BOUND_SECONDS:g} s: {over}"


def gpu_job(name: str, priority: int = 0, labels: dict[str, str] | None = None) -> dict:
    """A one-node job on the 4090 node's 8 GPUs (the disaggregated example under another name)."""
    body = copy.deepcopy(example_job("rljob-disaggregated.yaml"))
    body["metadata"] = {"name": name, "labels": labels or {}}
    body["spec"]["priority"] = priority
    return body


def test_the_three_examples_together_queue_instead_of_deadlocking(jobs: Jobs) -> None:
    with PartialClusterWatch(jobs) as watch:
        for example in ("rljob-collocated.yaml", "rljob-disaggregated.yaml", "rljob-heterogeneous.yaml"):
            jobs.create(example_job(example))
        jobs.wait_phase("collocated", "Running", timeout=60)
        jobs.wait_phase("disaggregated", "Running", timeout=60)
        # Level-triggered: while the other two start, a pass may still say it waits behind them; it settles on
        # what it waits for once they run.
        queued = wait_for(
            lambda: (s := status(jobs, "heterogeneous")).get("waitingFor") == "1 free node of 4090" and s,
            30,
            "heterogeneous Queued for 1 free node of 4090",
        )
        assert queued["phase"] == "Queued", queued
        assert queued["waitingFor"] == "1 free node of 4090"
        assert queued["queuePosition"] == 1
        assert jobs.raycluster("heterogeneous") is None
        # Nothing of heterogeneous holds a node meanwhile: no pods at all.
        assert not jobs.pods("heterogeneous")
        events = jobs.core.list_namespaced_event(jobs.namespace, field_selector="involvedObject.name=heterogeneous")
        assert any(e.reason == "Queued" and "1 free node of 4090" in e.message for e in events.items)
        jobs.delete("disaggregated")
        deleted = time.monotonic()
        wait_for(lambda: jobs.raycluster("heterogeneous"), 10, "heterogeneous's RayCluster within 10 s")
        started = time.monotonic() - deleted
        running = jobs.wait_phase("heterogeneous", "Running", timeout=60)["status"]
        # It shares the a800 group with collocated: ranks 8-15 are the second a800 node.
        actor = next(c for c in running["placement"]["components"] if c["name"] == "actor")
        assert actor["nodes"] == ["a800-1"]
    assert started <= 10
    assert watch.longest.get("heterogeneous", 0.0) <= PARTIAL_BOUND_SECONDS


def test_priority_reorders_the_queue_and_gang_labels_pass_through(jobs: Jobs) -> None:
    jobs.create(gpu_job("holder"))
    jobs.wait_phase("holder", "Running", timeout=60)
    jobs.create(gpu_job("older"))
    wait_queued(jobs, "older")
    # A gang scheduler's labels (Kueue's queue label is not one: it sends the job through Kueue, docs/kueue.md).
    gang = {"ray.io/gang-scheduling-enabled": "true", "volcano.sh/queue-name": "rl"}
    jobs.create(gpu_job("urgent", priority=10, labels=gang))
    wait_for(lambda: status(jobs, "older").get("queuePosition") == 2, 30, "older pushed to position 2")
    assert wait_queued(jobs, "urgent")["queuePosition"] == 1
    jobs.delete("holder")
    jobs.wait_phase("urgent", "Running", timeout=30)
    assert wait_for(lambda: status(jobs, "older").get("queuePosition") == 1, 15, "older at the head")
    labels = jobs.raycluster("urgent")["metadata"]["labels"]
    assert {k: labels.get(k) for k in gang} == gang


def test_operator_restart_keeps_running_jobs_and_queue_places(jobs: Jobs, rlplace_operator: OperatorProcess) -> None:
    jobs.create(gpu_job("running"))
    jobs.wait_phase("running", "Running", timeout=60)
    jobs.create(gpu_job("first"))
    wait_queued(jobs, "first")
    time.sleep(1.1)  # a later creationTimestamp (whole seconds)
    jobs.create(gpu_job("second"))
    assert wait_queued(jobs, "second")["queuePosition"] == 2
    uid_before = jobs.raycluster("running")["metadata"]["uid"]
    rlplace_operator.restart()
    time.sleep(5)  # several queue rechecks after the restart
    assert status(jobs, "running")["phase"] == "Running"
    assert jobs.raycluster("running")["metadata"]["uid"] == uid_before
    assert jobs.raycluster("first") is None and jobs.raycluster("second") is None
    assert status(jobs, "first")["queuePosition"] == 1
    assert status(jobs, "second")["queuePosition"] == 2
    jobs.delete("running")
    jobs.wait_phase("first", "Running", timeout=30)
    assert status(jobs, "second")["phase"] == "Queued"


@pytest.fixture
def paused_scheduler() -> Iterator[Callable[[], None]]:
    """kube-scheduler stopped (SIGSTOP) so a foreign pod can take a node before our worker pod binds; yields
    the function that resumes it (it is resumed at the end in any case)."""
    pid_file = e2e_dir() / "cluster" / "pids" / "kube-scheduler.pid"
    if os.environ.get("KUBECONFIG") != str(e2e_dir() / "kubeconfig") or not pid_file.exists():
        pytest.skip("needs the local control plane's kube-scheduler process")
    pid = int(pid_file.read_text().split()[0])
    os.kill(pid, signal.SIGSTOP)
    try:
        yield lambda: os.kill(pid, signal.SIGCONT)
    finally:
        os.kill(pid, signal.SIGCONT)


def foreign_gpu_pod(node: str) -> dict:
    """A pod of another workload, bound to `node` directly, holding all its GPUs."""
    return {
        "metadata": {"name": "foreign-gpu-user"},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "main", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "8"}}}],
            "tolerations": [{"operator": "Exists"}],
        },
    }


def test_a_foreign_pod_taking_the_node_before_binding_sends_the_job_back_to_the_queue(
    jobs: Jobs, paused_scheduler: Callable[[], None]
) -> None:
    jobs.create(gpu_job("victim"))
    wait_for(lambda: jobs.raycluster("victim"), 20, "victim's RayCluster (admitted)")
    wait_for(
        lambda: [p for p in jobs.pods("victim") if p.metadata.labels.get("ray.io/node-type") == "worker"],
        30,
        "victim's worker pod (not bound: the scheduler is paused)",
    )
    jobs.core.create_namespaced_pod(jobs.namespace, foreign_gpu_pod(GPU_4090_NODE))
    # The scheduler stays paused until the watchdog has acted. Resumed earlier, it could bind our pod to the
    # node before its cache had seen the foreign pod (its informer and its scheduling loop race after a
    # SIGCONT), and kwok nodes do not refuse an over-committed pod as a kubelet would: the job then ran.
    queued = wait_queued(jobs, "victim", timeout=PARTIAL_BOUND_SECONDS + 15)
    paused_scheduler()
    admitted = next(c for c in queued["conditions"] if c["type"] == "Admitted")
    assert admitted["status"] == "False"
    assert admitted["reason"] in ("BindTimeout", "Queued")
    wait_for(lambda: jobs.raycluster("victim") is None, 20, "victim's RayCluster removed")
    # The next look at the queue says what it waits for: the node the foreign pod holds.
    wait_for(lambda: status(jobs, "victim").get("waitingFor") == "1 free node of 4090", 15, "waiting for 4090")
    jobs.core.delete_namespaced_pod("foreign-gpu-user", jobs.namespace, grace_period_seconds=0)
    jobs.wait_phase("victim", "Running", timeout=60)

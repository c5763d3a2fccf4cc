"""What the benchmarks share: a control plane to measure on (the one in KUBECONFIG, else a local one in
.e2e/bench), the operator as a process, kwok GPU nodes in a NodeGroup, waits, percentiles, and the stamps of when
each job reached each stage. Each benchmark imports it as a sibling module (benchmarks run as scripts:
`python benchmarks/<name>.py`). Not a benchmark itself.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "e2e"))

from kubernetes import client, config  # noqa: E402
from kubernetes.client.exceptions import ApiException  # noqa: E402

from e2e_cluster import fake_node_manifest  # noqa: E402

GROUP, VERSION = "rlplace.io", "v1alpha1"
BENCH_LABEL = "rlplace.io/bench"
METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1"


#: A step line of the reference driver (placement_core/launcher/steps.py): step, attempt, iteration seconds and
#: the rest (how many replicas of each Replace component were live).
STEP_LINE = re.compile(r"^step (\d+)/\d+ \(attempt (\d+)\):.*iteration ([0-9.]+) s(?:; (.*))?$")


@dataclasses.dataclass(frozen=True)
class Line:
    """One line of a driver's log, with when the container runtime stamped it."""

    at: dt.datetime
    text: str


def driver_lines(kubectl: list[str], namespace: str, job: str) -> list[Line]:
    """The driver's log of the RLJob `job` (its submitter Job's pod), each line with its runtime timestamp."""
    out = subprocess.run(
        [*kubectl, "logs", "--timestamps", "-n", namespace, f"job/{job}"], capture_output=True, text=True
    ).stdout
    lines = []
    for raw in out.splitlines():
        stamp, _, text = raw.partition(" ")
        try:
            lines.append(Line(dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")), text))
        except ValueError:
            continue
    return lines


def steps_of(lines: list[Line]) -> list[tuple[int, int, float, dt.datetime, str]]:
    """(step, attempt, iteration seconds, when, the rest of the line) of every step line."""
    found = []
    for line in lines:
        match = STEP_LINE.match(line.text)
        if match:
            found.append((int(match[1]), int(match[2]), float(match[3]), line.at, match[4] or ""))
    return found


def with_real_nodes(api: client.ApiClient, kubeconfig: str) -> None:
    """The local cluster's real nodes and their NodeGroups (examples/nodegroups-real.yaml), or exit saying so."""
    if not client.CoreV1Api(api).list_node(label_selector="rlplace.io/real-node=true").items:
        raise SystemExit("error: needs a cluster with the local real nodes (make cluster-up)")
    kubectl = [str(REPO / ".e2e/bin/kubectl"), "--kubeconfig", kubeconfig]
    subprocess.run(
        [*kubectl, "apply", "-f", str(REPO / "examples/nodegroups-real.yaml")], check=True, capture_output=True
    )


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")


def start_cluster(state: Path) -> str:
    env = {**os.environ, "RLPLACE_E2E_DIR": str(state)}
    subprocess.run(["bash", str(REPO / "e2e/cluster/tools.sh")], check=True, env=env)
    subprocess.run(["bash", str(REPO / "e2e/cluster/up.sh")], check=True, env=env)
    return str(state / "kubeconfig")


def stop_cluster(state: Path) -> None:
    env = {**os.environ, "RLPLACE_E2E_DIR": str(state)}
    subprocess.run(["bash", str(REPO / "e2e/cluster/down.sh")], check=False, env=env)


class Operator:
    """The operator as a subprocess, with its peak RSS sampled from /proc."""

    def __init__(self, kubeconfig: str, log: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-m", "rlplace_operator.main"],
            env={**os.environ, "KUBECONFIG": kubeconfig},
            stdout=log.open("w"),
            stderr=subprocess.STDOUT,
        )
        self.peak_rss_kib = 0
        self._stop = threading.Event()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.2):
            try:
                for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        self.peak_rss_kib = max(self.peak_rss_kib, int(line.split()[1]))
            except OSError:
                return

    def stop(self) -> None:
        self._stop.set()
        self.process.terminate()
        self.process.wait(30)


def configmap_create_latency(core: client.CoreV1Api, namespace: str, count: int = 100) -> list[float]:
    latencies = []
    for i in range(count):
        body = {"metadata": {"name": f"baseline-{i}"}, "data": {"plan.json": "{}"}}
        started = time.perf_counter()
        core.create_namespaced_config_map(namespace, body)
        latencies.append(time.perf_counter() - started)
    return latencies


def add_nodes(core: client.CoreV1Api, count: int, prefix: str) -> list[str]:
    names = [node_name(prefix, i) for i in range(count)]

    def create(index_name: tuple[int, str]) -> None:
        index, name = index_name
        labels = {BENCH_LABEL: prefix, "rlplace.io/node-rank": str(index)}
        core.create_node(fake_node_manifest(name, labels=labels, gpus=8))

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, enumerate(names)))
    return names


def delete_nodes(core: client.CoreV1Api, names: list[str]) -> None:
    def delete(name: str) -> None:
        with contextlib.suppress(ApiException):
            core.delete_node(name)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(delete, names))


def wait_for(probe, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = probe()
        if result:
            return result
        time.sleep(0.5)
    raise TimeoutError(f"timed out waiting for {what}")


@contextlib.contextmanager
def bench_cluster() -> Iterator[tuple[client.ApiClient, str]]:
    """The cluster in KUBECONFIG, else a local control plane in .e2e/bench (stopped afterwards), with
    rlplace's CRDs applied from crds/."""
    state = REPO / ".e2e" / "bench"
    kubeconfig = os.environ.get("KUBECONFIG")
    started = kubeconfig is None
    if started:
        kubeconfig = start_cluster(state)
    try:
        kubectl = str(REPO / ".e2e/bin/kubectl")
        apply = ("apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
        subprocess.run([kubectl, "--kubeconfig", kubeconfig, *apply], check=True, capture_output=True)
        yield config.new_client_from_config(config_file=kubeconfig), kubeconfig
    finally:
        if started:
            stop_cluster(state)


def node_name(prefix: str, index: int) -> str:
    """The name `add_nodes` gives the node of rank `index`."""
    return f"{prefix}-{index:04d}"


def bench_nodegroup(prefix: str) -> dict:
    """The NodeGroup `prefix` over the nodes `add_nodes` made with that prefix."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "NodeGroup",
        "metadata": {"name": prefix},
        "spec": {"nodeSelector": {"matchLabels": {BENCH_LABEL: prefix}}},
    }


@contextlib.contextmanager
def bench_nodes(api: client.ApiClient, nodes: int, prefix: str) -> Iterator[list[str]]:
    """A namespace and a NodeGroup named `prefix` over `nodes` new 8-GPU kwok nodes (yields their names);
    afterwards all of it is removed. An operator must run until this exits: deleting waits on its finalizers."""
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    core.create_namespace({"metadata": {"name": prefix}})
    wait_for(lambda: core.list_namespaced_service_account(prefix).items, 60, "default ServiceAccount")
    node_names = add_nodes(core, nodes, prefix)
    custom.create_cluster_custom_object(GROUP, VERSION, "nodegroups", bench_nodegroup(prefix))
    try:
        yield node_names
    finally:
        with contextlib.suppress(ApiException):
            core.delete_namespace(prefix)
            custom.delete_cluster_custom_object(GROUP, VERSION, "nodegroups", prefix)
        with contextlib.suppress(TimeoutError):
            wait_for(lambda: not exists(lambda: core.read_namespace(prefix)), 120, f"namespace {prefix} gone")
        delete_nodes(core, node_names)


def wait_group_ready(api: client.ApiClient, group: str, nodes: int) -> None:
    custom = client.CustomObjectsApi(api)

    def ready() -> bool:
        status = custom.get_cluster_custom_object(GROUP, VERSION, "nodegroups", group).get("status") or {}
        return status.get("readyNodes") == nodes

    wait_for(ready, 300, f"{nodes} nodes ready in the NodeGroup")


@contextlib.contextmanager
def bench_group(api: client.ApiClient, kubeconfig: str, nodes: int, prefix: str) -> Iterator[Operator]:
    """`bench_nodes` with the operator running and every node ready in the group; the operator stops last, so
    it can finish the deletions that wait on its finalizers."""
    with contextlib.ExitStack() as stack:
        operator = Operator(kubeconfig, REPO / ".e2e" / f"operator-{prefix}.log")
        stack.callback(operator.stop)
        stack.enter_context(bench_nodes(api, nodes, prefix))
        wait_group_ready(api, prefix, nodes)
        yield operator


def exists(read: Callable[[], object]) -> bool:
    """Whether `read` finds its object (False on 404)."""
    try:
        read()
    except ApiException as err:
        if err.status == 404:
            return False
        raise
    return True


class Stamps:
    """First time each (stage, name) was seen, from lists every 0.1 s (timestamps stay honest if a watch drops)."""

    def __init__(self) -> None:
        self.seen: dict[str, dict[str, float]] = {}

    def mark(self, stage: str, name: str) -> None:
        self.seen.setdefault(stage, {}).setdefault(name, time.perf_counter())

    def latencies(self, stage: str, created: dict[str, float]) -> list[float]:
        return [self.seen.get(stage, {})[name] - t for name, t in created.items() if name in self.seen.get(stage, {})]


def poll(custom: client.CustomObjectsApi, namespace: str, stamps: Stamps, stop: threading.Event) -> None:
    while not stop.is_set():
        for job in custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "rljobs")["items"]:
            status = job.get("status") or {}
            name = job["metadata"]["name"]
            if status.get("phase") in ("Running", "Succeeded"):
                stamps.mark("rljob-running", name)
            if status.get("phase") in ("Succeeded", "Failed"):
                stamps.mark("rljob-ended", name)
            if any(c["type"] == "BindingVerified" and c["status"] == "True" for c in status.get("conditions") or []):
                stamps.mark("rljob-verified", name)
        for rayjob in custom.list_namespaced_custom_object("ray.io", "v1", namespace, "rayjobs")["items"]:
            name = rayjob["metadata"]["name"]
            stamps.mark("rayjob", name)
            status = rayjob.get("status") or {}
            if status.get("rayClusterName"):
                stamps.mark("raycluster", name)
            if status.get("jobDeploymentStatus") in ("Running", "Complete"):
                stamps.mark("submitted", name)
            if status.get("jobStatus") in ("SUCCEEDED", "FAILED", "STOPPED"):
                stamps.mark("driver-ended", name)
        time.sleep(0.1)


def figures(values: list[float], total: int) -> str:
    if not values:
        return f"{'n/a':>17}"
    suffix = "" if len(values) == total else f" ({len(values)}/{total})"
    return f"{statistics.median(values):7.2f} / {percentile(values, 0.95):<7.2f}{suffix}"

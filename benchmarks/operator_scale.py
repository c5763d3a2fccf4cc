"""How fast the operator turns RLJobs into RayClusters, on a real API server with fake (kwok) GPU nodes.

    .venv/bin/python benchmarks/operator_scale.py [--nodes 64 1000] [--jobs 100]

For each node count: add that many 8-GPU kwok nodes in one NodeGroup, start the operator, create the RLJobs
at once (each on one node's 8 GPUs, round-robin), and measure from each job's create call to (a) its RayCluster
existing and (b) its phase Running. Only jobs whose node is free can run (the rest wait for GPUs), so (b) is
over the first `min(jobs, nodes)` jobs. Baseline, in the same run: the API server's own latency for creating
a ConfigMap; the figures are reported as ratios to its p95. Also the operator's peak resident memory.

Uses the cluster in KUBECONFIG if set, else starts a local control plane in .e2e/bench (and stops it).
Prints figures; it is not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import threading
import time
import uuid
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


def run(api: client.ApiClient, kubeconfig: str, nodes: int, jobs: int, running_timeout: float) -> dict[str, float]:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    namespace = f"bench{nodes}-{uuid.uuid4().hex[:4]}"
    with bench_group(api, kubeconfig, nodes, namespace) as operator:
        baseline = configmap_create_latency(core, namespace)
        created: dict[str, float] = {}
        raycluster_seen: dict[str, float] = {}
        running_seen: dict[str, float] = {}
        stop = threading.Event()

        def poll() -> None:
            # Listing every 0.1 s (rather than watching) keeps the timestamps honest even if a watch drops.
            while not stop.is_set():
                # Metadata only: parsing 100 full RayClusters ten times a second would load the machine.
                rayclusters = custom.list_namespaced_custom_object(
                    "ray.io", "v1", namespace, "rayclusters", _headers={"Accept": METADATA_ONLY}
                )
                for rc in rayclusters.get("items") or []:  # null while there are none
                    raycluster_seen.setdefault(rc["metadata"]["name"], time.perf_counter())
                for job in custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "rljobs")["items"]:
                    if (job.get("status") or {}).get("phase") == "Running":
                        running_seen.setdefault(job["metadata"]["name"], time.perf_counter())
                time.sleep(0.1)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()

        def create_job(i: int) -> None:
            first = 8 * (i % nodes)
            body = {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "RLJob",
                "metadata": {"name": f"job-{i:03d}"},
                "spec": {
                    "nodeGroups": [namespace],
                    "componentPlacement": [{"components": "actor,rollout", "placement": f"{first}-{first + 7}"}],
                },
            }
            created[body["metadata"]["name"]] = time.perf_counter()
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "rljobs", body)

        with ThreadPoolExecutor(16) as pool:
            list(pool.map(create_job, range(jobs)))
        runnable = min(jobs, nodes)
        try:
            wait_for(lambda: len(raycluster_seen) >= jobs, 300, f"{jobs} RayClusters")
            # Running also needs KubeRay to make the pods and kwok to run them: report how many made it.
            with contextlib.suppress(TimeoutError):
                wait_for(lambda: len(running_seen) >= runnable, running_timeout, f"{runnable} RLJobs Running")
        finally:
            stop.set()
        to_raycluster = [raycluster_seen[name] - t for name, t in created.items()]
        to_running = sorted(running_seen[name] - created[name] for name in running_seen)[:runnable]
        return {
            "nodes": nodes,
            "jobs": jobs,
            "raycluster_p50": statistics.median(to_raycluster),
            "raycluster_p95": percentile(to_raycluster, 0.95),
            "running_count": len(to_running),
            "running_p50": statistics.median(to_running) if to_running else float("nan"),
            "running_p95": percentile(to_running, 0.95),
            "configmap_p50": statistics.median(baseline),
            "configmap_p95": percentile(baseline, 0.95),
            "operator_peak_rss_mib": operator.peak_rss_kib / 1024,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[64, 1000])
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--running-timeout", type=float, default=240, help="seconds to wait for phase Running")
    args = parser.parse_args()
    with bench_cluster() as (api, kubeconfig):
        print(
            f"{'nodes':>6} {'jobs':>5} | {'to RayCluster p50/p95 (s)':>26} | {'to Running p50/p95 (s)':>23} (n) | "
            f"{'ConfigMap create p50/p95 (s)':>29} | {'p95 ratio':>9} | operator peak RSS"
        )
        for nodes in args.nodes:
            r = run(api, kubeconfig, nodes, args.jobs, args.running_timeout)
            print(
                f"{r['nodes']:>6} {r['jobs']:>5} | {r['raycluster_p50']:>12.3f} / {r['raycluster_p95']:<11.3f} | "
                f"{r['running_p50']:>10.3f} / {r['running_p95']:<10.3f} ({r['running_count']}) | "
                f"{r['configmap_p50']:>14.4f} / {r['configmap_p95']:<12.4f} | "
                f"{r['raycluster_p95'] / r['configmap_p95']:>8.0f}x | {r['operator_peak_rss_mib']:.0f} MiB",
                flush=True,
            )


if __name__ == "__main__":
    main()

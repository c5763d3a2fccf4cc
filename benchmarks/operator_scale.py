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
import statistics
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from kubernetes import client

from _harness import (
    GROUP,
    METADATA_ONLY,
    VERSION,
    bench_cluster,
    bench_group,
    configmap_create_latency,
    percentile,
    wait_for,
)


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

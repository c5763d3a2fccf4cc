"""RLJobs queueing for free nodes: 100 jobs on 64 eight-GPU kwok nodes, on a real API server.

    .venv/bin/python benchmarks/admission_scale.py [--nodes 64] [--jobs 100] [--ranks free|fixed]

Every fourth job needs two nodes (ranks 0-15), the others one (ranks 0-7), so more jobs are created than the
nodes hold. Measured:
- create -> RayCluster p50/p95 for the first wave: the jobs that fit the free nodes at once (RayClusters
  stop appearing for 15 s);
- node freed -> next RayCluster: running jobs are deleted one at a time (2 s apart) and each deletion is
  timed to the next RayCluster that appears (with admission the queued jobs get theirs only then);
- node freed -> next job fully bound: the same deletions, timed to the next job whose worker pods are all
  bound to nodes (this one applies with and without admission);
- GPU-seconds held by partial clusters: sampled every second, the GPUs of worker pods bound for jobs whose
  other worker pods are not bound (target 0);
- the operator's peak resident memory.

`--ranks fixed` is the baseline for an operator without admission, which plans on fixed node ranks: job i
asks for the ranks of node i mod nodes (so the jobs spread over the nodes); `free` (default) asks every job
for ranks 0-7 (or 0-15) and lets admission pick free nodes. Uses the cluster in KUBECONFIG if set, else
starts a local control plane in .e2e/bench (and stops it). Prints figures; it is not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

from kubernetes import client  # noqa: E402

from _harness import (  # noqa: E402
    GROUP,
    METADATA_ONLY,
    VERSION,
    bench_cluster,
    bench_group,
    percentile,
    wait_for,
)

GPUS_PER_NODE = 8
DELETIONS = 12


def job_nodes(i: int) -> int:
    return 2 if i % 4 == 3 else 1


def job_body(i: int, group: str, nodes: int, ranks: str) -> dict:
    first = GPUS_PER_NODE * (i % (nodes - 1)) if ranks == "fixed" else 0
    last = first + GPUS_PER_NODE * job_nodes(i) - 1
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "RLJob",
        "metadata": {"name": f"job-{i:03d}"},
        "spec": {
            "nodeGroups": [group],
            "componentPlacement": [{"components": "actor,rollout", "placement": f"{first}-{last}"}],
        },
    }


class Sampler:
    """Every second: which RayClusters exist, which jobs have all worker pods bound, partial GPU-seconds."""

    def __init__(self, core: client.CoreV1Api, custom: client.CustomObjectsApi, namespace: str) -> None:
        self.core, self.custom, self.namespace = core, custom, namespace
        self.raycluster_seen: dict[str, float] = {}
        self.bound_seen: dict[str, float] = {}
        self.partial_gpu_seconds = 0.0
        self.expected: dict[str, int] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        last = time.perf_counter()
        while not self._stop.is_set():
            now = time.perf_counter()
            rayclusters = self.custom.list_namespaced_custom_object(
                "ray.io", "v1", self.namespace, "rayclusters", _headers={"Accept": METADATA_ONLY}
            )
            live = {rc["metadata"]["name"] for rc in rayclusters.get("items") or []}
            for name in live:
                self.raycluster_seen.setdefault(name, now)
            bound: dict[str, int] = {}
            for pod in self.core.list_namespaced_pod(self.namespace, label_selector="ray.io/node-type=worker").items:
                cluster = (pod.metadata.labels or {}).get("ray.io/cluster", "")
                if pod.spec.node_name and pod.metadata.deletion_timestamp is None:
                    bound[cluster] = bound.get(cluster, 0) + 1
            for cluster, count in bound.items():
                expected = self.expected.get(cluster, 0)
                if count >= expected:
                    self.bound_seen.setdefault(cluster, now)
                elif cluster in live:
                    self.partial_gpu_seconds += count * GPUS_PER_NODE * (now - last)
            last = now
            self._stop.wait(1.0)


def run(api: client.ApiClient, kubeconfig: str, nodes: int, jobs: int, ranks: str) -> dict[str, float]:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    namespace = f"adm{nodes}-{uuid.uuid4().hex[:4]}"
    with bench_group(api, kubeconfig, nodes, namespace) as operator:
        sampler = Sampler(core, custom, namespace)
        sampler.expected = {f"job-{i:03d}": job_nodes(i) for i in range(jobs)}
        sampler.start()
        created: dict[str, float] = {}

        def create_job(i: int) -> None:
            body = job_body(i, namespace, nodes, ranks)
            created[body["metadata"]["name"]] = time.perf_counter()
            custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "rljobs", body)

        with ThreadPoolExecutor(16) as pool:
            list(pool.map(create_job, range(jobs)))
        # The first wave: every job that fits the free nodes (fewer than `nodes` jobs, since some need two
        # nodes): RayClusters stop appearing for 15 s.
        settled = {"count": -1, "since": time.perf_counter()}

        def first_wave_done() -> bool:
            count = len(sampler.raycluster_seen)
            if count != settled["count"]:
                settled.update(count=count, since=time.perf_counter())
            return count > 0 and time.perf_counter() - settled["since"] > 15

        wait_for(first_wave_done, 600, "the first wave of RayClusters")
        first_wave = len(sampler.raycluster_seen)
        to_raycluster = sorted(sampler.raycluster_seen[n] - created[n] for n in sampler.raycluster_seen)[:first_wave]
        freed_to_raycluster, freed_to_bound = [], []
        running = sorted(sampler.bound_seen, key=sampler.bound_seen.get)
        for name in running[:DELETIONS]:
            clusters_before, bound_before = set(sampler.raycluster_seen), set(sampler.bound_seen)
            started = time.perf_counter()
            custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "rljobs", name)
            # Without admission every job got its RayCluster at once: nothing new can appear.
            with contextlib.suppress(TimeoutError):
                new = wait_for(
                    lambda before=clusters_before: set(sampler.raycluster_seen) - before,
                    20 if len(clusters_before) < jobs else 0,
                    "a new RayCluster",
                )
                freed_to_raycluster.append(min(sampler.raycluster_seen[n] for n in new) - started)
            with contextlib.suppress(TimeoutError):
                new = wait_for(lambda before=bound_before: set(sampler.bound_seen) - before, 20, "a newly bound job")
                freed_to_bound.append(min(sampler.bound_seen[n] for n in new) - started)
            time.sleep(2)
        sampler.stop()
        return {
            "first_wave": first_wave,
            "raycluster_p50": statistics.median(to_raycluster) if to_raycluster else float("nan"),
            "raycluster_p95": percentile(to_raycluster, 0.95),
            "freed_raycluster_n": len(freed_to_raycluster),
            "freed_raycluster_p50": statistics.median(freed_to_raycluster) if freed_to_raycluster else float("nan"),
            "freed_raycluster_p95": percentile(freed_to_raycluster, 0.95),
            "freed_bound_n": len(freed_to_bound),
            "freed_bound_p50": statistics.median(freed_to_bound) if freed_to_bound else float("nan"),
            "freed_bound_p95": percentile(freed_to_bound, 0.95),
            "partial_gpu_seconds": sampler.partial_gpu_seconds,
            "operator_peak_rss_mib": operator.peak_rss_kib / 1024,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[64])
    parser.add_argument("--jobs", type=int, default=100)
    parser.add_argument("--ranks", choices=["free", "fixed"], default="free")
    args = parser.parse_args()
    with bench_cluster() as (api, kubeconfig):
        print(
            f"ranks {args.ranks} | nodes jobs | create->RayCluster p50/p95 (first wave) | "
            "freed->next RayCluster p50/p95 (n) | freed->next job bound p50/p95 (n) | partial GPU-s | peak RSS"
        )
        for nodes in args.nodes:
            r = run(api, kubeconfig, nodes, args.jobs, args.ranks)
            print(
                f"{'':>11} | {nodes:>5} {args.jobs:>4} | {r['raycluster_p50']:>8.2f} / {r['raycluster_p95']:<8.2f} s ({r['first_wave']}) | "
                f"{r['freed_raycluster_p50']:>6.2f} / {r['freed_raycluster_p95']:<6.2f} s ({r['freed_raycluster_n']}) | "
                f"{r['freed_bound_p50']:>6.2f} / {r['freed_bound_p95']:<6.2f} s ({r['freed_bound_n']}) | "
                f"{r['partial_gpu_seconds']:>8.0f} | {r['operator_peak_rss_mib']:.0f} MiB",
                flush=True,
            )


if __name__ == "__main__":
    main()

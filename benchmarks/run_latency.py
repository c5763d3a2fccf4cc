"""How fast an RLJob with an entrypoint gets its driver going, against KubeRay's own RayJob in the same run.

    .venv/bin/python benchmarks/run_latency.py [--jobs 20]

On a real API server with fake (kwok) 8-GPU nodes: add `--jobs` nodes in one NodeGroup, start the operator,
create the RLJobs at once (each on one node's 8 GPUs, entrypoint set), and measure from each create call to
(a) its RayJob existing (the operator's work), (b) KubeRay's RayCluster for it existing, (c) the driver
submitted (KubeRay's jobDeploymentStatus Running: the RayCluster is up and `ray job submit` started; the RLJob
phase Running), and on clusters with real nodes (d) BindingVerified True (every process checked its own
placement). Baseline, in the same run: as many RayJobs with the same rayClusterSpec created directly (no
rlplace), measured to (b) and (c). Under kwok nothing runs Ray, so (d) is reported only with real nodes.

Uses the cluster in KUBECONFIG if set, else starts a local control plane in .e2e/bench (and stops it).
Prints figures; it is not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import statistics
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from kubernetes import client
from operator_scale import (
    GROUP,
    VERSION,
    bench_cluster,
    bench_group,
    node_name,
    percentile,
    wait_for,
)


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
        time.sleep(0.1)


def measure(
    custom: client.CustomObjectsApi,
    namespace: str,
    count: int,
    create: Callable[[int], str],
    done: Callable[[Stamps], bool],
) -> tuple[dict[str, float], Stamps]:
    """Create `count` objects at once and poll until `done` (or 300 s)."""
    created: dict[str, float] = {}
    stamps = Stamps()
    stop = threading.Event()
    poller = threading.Thread(target=poll, args=(custom, namespace, stamps, stop), daemon=True)
    poller.start()

    def timed(i: int) -> None:
        started = time.perf_counter()
        created[create(i)] = started

    try:
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(timed, range(count)))
        with contextlib.suppress(TimeoutError):
            wait_for(lambda: done(stamps), 300, "every job submitted")
    finally:
        stop.set()
        poller.join()
    return created, stamps


def figures(values: list[float], total: int) -> str:
    if not values:
        return f"{'n/a':>17}"
    suffix = "" if len(values) == total else f" ({len(values)}/{total})"
    return f"{statistics.median(values):7.2f} / {percentile(values, 0.95):<7.2f}{suffix}"


def run(api: client.ApiClient, kubeconfig: str, jobs: int) -> None:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    prefix = f"benchrun-{uuid.uuid4().hex[:4]}"
    with bench_group(api, kubeconfig, jobs, prefix):

        def create_rljob(i: int) -> str:
            first = 8 * i
            body = {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "RLJob",
                "metadata": {"name": f"rl-{i:03d}"},
                "spec": {
                    "nodeGroups": [prefix],
                    "componentPlacement": [{"components": "actor,rollout", "placement": f"{first}-{first + 7}"}],
                    "entrypoint": "python -m placement_core.launcher.demo",
                },
            }
            custom.create_namespaced_custom_object(GROUP, VERSION, prefix, "rljobs", body)
            return body["metadata"]["name"]

        rl_created, rl = measure(
            custom, prefix, jobs, create_rljob, lambda s: len(s.seen.get("rljob-running", {})) >= jobs
        )
        # The baseline: the same RayJobs (cluster spec as the operator built it) created by hand, unowned.
        template = custom.get_namespaced_custom_object("ray.io", "v1", prefix, "rayjobs", "rl-000")
        for job in custom.list_namespaced_custom_object(GROUP, VERSION, prefix, "rljobs")["items"]:
            custom.delete_namespaced_custom_object(GROUP, VERSION, prefix, "rljobs", job["metadata"]["name"])
        wait_for(
            lambda: not core.list_namespaced_pod(prefix, label_selector="ray.io/cluster").items,
            300,
            "RLJobs' pods gone",
        )

        def create_rayjob(i: int) -> str:
            spec = copy.deepcopy(template["spec"])
            node = node_name(prefix, i)
            for worker in spec["rayClusterSpec"]["workerGroupSpecs"]:
                terms = worker["template"]["spec"]["affinity"]["nodeAffinity"]
                terms["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]["matchFields"][0][
                    "values"
                ] = [node]
            body = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": f"kr-{i:03d}"}, "spec": spec}
            custom.create_namespaced_custom_object("ray.io", "v1", prefix, "rayjobs", body)
            return body["metadata"]["name"]

        kr_created, kr = measure(
            custom, prefix, jobs, create_rayjob, lambda s: len(s.seen.get("submitted", {})) >= jobs
        )
        print(f"{jobs} jobs at once, each on one kwok node's 8 GPUs; p50 / p95 seconds from the create call")
        print(f"  {'':<44} {'rlplace RLJob':>22}   {'KubeRay RayJob (baseline)':>26}")
        rows = [
            ("to RayJob (the operator's work)", rl.latencies("rayjob", rl_created), None),
            ("to KubeRay's RayCluster", rl.latencies("raycluster", rl_created), kr.latencies("raycluster", kr_created)),
            (
                "to driver submitted (RayJob Running)",
                rl.latencies("submitted", rl_created),
                kr.latencies("submitted", kr_created),
            ),
            (
                "to RLJob phase Running",
                rl.latencies("rljob-running", rl_created),
                kr.latencies("submitted", kr_created),
            ),
            ("to every process verified", rl.latencies("rljob-verified", rl_created), None),
        ]
        for label, ours, theirs in rows:
            ratio = ""
            if ours and theirs:
                ratio = f"   p50 {statistics.median(ours) / statistics.median(theirs):.2f}x baseline"
            print(f"  {label:<44} {figures(ours, jobs):>22}   {figures(theirs or [], jobs):>26}{ratio}")
        if not rl.latencies("rljob-verified", rl_created):
            print("  (every process verified: n/a, no driver runs without real nodes)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20)
    args = parser.parse_args()
    with bench_cluster() as (api, kubeconfig):
        run(api, kubeconfig, args.jobs)


if __name__ == "__main__":
    main()

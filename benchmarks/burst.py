"""A burst of RLJobs beside a burst of KubeRay RayJobs, created interleaved in the same run.

    .venv/bin/python benchmarks/burst.py [--jobs 100 1000] [--timeout 600]

For each N: N 8-GPU kwok nodes in one NodeGroup for the RLJobs and N more (outside it) for the RayJobs, the
operator started; then N RLJobs (each on one node's 8 GPUs) and N RayJobs made by hand (each pinned to one of
its own nodes, a worker asking 8 GPUs) are created at once, alternating, from 16 threads. Measured from each
create call to the RayCluster for it existing (the operator's RayCluster for an RLJob; KubeRay's for a RayJob),
with the number that never got one within --timeout; and the handler or timer exceptions in the operator's
log. The baseline is KubeRay's own RayJob -> RayCluster in the same run.

Uses the cluster in KUBECONFIG if set, else starts a local control plane in .e2e/bench (and stops it).
Prints figures; it is not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kubernetes import client

from rlplace_operator.api.rljob import RLJobSpec

from _harness import (
    GROUP,
    METADATA_ONLY,
    REPO,
    VERSION,
    add_nodes,
    bench_cluster,
    bench_group,
    delete_nodes,
    percentile,
    wait_for,
)

#: The processes whose CPU time the burst is charged with, by the name /proc gives them (the operator: its pid).
CONTROL_PLANE = ("kube-apiserver", "etcd", "kwok", "ray-operator", "kube-controller", "kube-scheduler")


def cpu_seconds(operator_pid: int) -> dict[str, float]:
    """CPU seconds (user + system) so far of the control plane's processes and of the operator."""
    tick = os.sysconf("SC_CLK_TCK")
    used: dict[str, float] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        comm = text[text.index("(") + 1 : text.rindex(")")]
        fields = text[text.rindex(")") + 2 :].split()
        name = "rlplace operator" if int(stat.parent.name) == operator_pid else comm
        if name == "rlplace operator" or any(name.startswith(p[:15]) for p in CONTROL_PLANE):
            used[name] = used.get(name, 0.0) + (int(fields[11]) + int(fields[12])) / tick
    return used


NOT_READY_TAINT = "node.kubernetes.io/not-ready"

#: What in the operator's log says a handler or timer raised (kopf logs each with this wording).
EXCEPTION_MARKERS = ("failed with an exception", "Traceback (most recent call last)")


def rayjob(name: str, node: str, image: str) -> dict:
    """A plain KubeRay RayJob (no rlplace): a head and one worker pinned to `node` asking its 8 GPUs."""
    pinned = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
            }
        }
    }
    container = {"image": image, "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}
    worker = {
        **container,
        "name": "ray-worker",
        "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "8"}, "limits": {"nvidia.com/gpu": "8"}},
    }
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name},
        "spec": {
            "entrypoint": "python -c 'print(1)'",
            "rayClusterSpec": {
                "headGroupSpec": {
                    "rayStartParams": {},
                    "template": {"spec": {"affinity": pinned, "containers": [{**container, "name": "ray-head"}]}},
                },
                "workerGroupSpecs": [
                    {
                        "groupName": "node-0",
                        "replicas": 1,
                        "minReplicas": 1,
                        "maxReplicas": 1,
                        "rayStartParams": {},
                        "template": {"spec": {"affinity": pinned, "containers": [worker]}},
                    }
                ],
            },
        },
    }


def wait_untainted(core: client.CoreV1Api, timeout: float) -> float:
    """Seconds until no node carries node.kubernetes.io/not-ready (a TimeoutError after `timeout`)."""
    started = time.perf_counter()

    def untainted() -> bool:
        nodes = core.list_node().items
        return not any(t.key == NOT_READY_TAINT for n in nodes for t in n.spec.taints or ())

    wait_for(untainted, timeout, "every node without the not-ready taint")
    return time.perf_counter() - started


def rljob(name: str, group: str) -> dict:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "RLJob",
        "metadata": {"name": name},
        "spec": {"nodeGroups": [group], "componentPlacement": [{"components": "actor,rollout", "placement": "0-7"}]},
    }


def run(api: client.ApiClient, kubeconfig: str, jobs: int, timeout: float) -> dict[str, object]:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    prefix = f"burst{jobs}-{uuid.uuid4().hex[:4]}"
    image = RLJobSpec(node_groups=["x"]).ray.image
    with bench_group(api, kubeconfig, jobs, prefix) as operator:
        kuberay_nodes = add_nodes(core, jobs, f"{prefix}-kr")
        try:
            # "Free nodes" means nodes a pod can be bound to: the controller-manager lifts each new node's
            # not-ready taint after the node is Ready, and at 2,000 nodes on a small machine that lags by minutes
            # (rlplace rightly admits no job onto a tainted node, while KubeRay makes its RayCluster regardless).
            waited = wait_untainted(core, 900)
            print(f"      {2 * jobs} nodes without the not-ready taint after {waited:.0f} s", flush=True)
            created: dict[str, float] = {}
            seen: dict[str, float] = {}
            stop = threading.Event()

            def poll() -> None:
                # Metadata-only lists every 0.1 s: each RayCluster names its owner (the RLJob, or the RayJob).
                while not stop.is_set():
                    listed = custom.list_namespaced_custom_object(
                        "ray.io", "v1", prefix, "rayclusters", _headers={"Accept": METADATA_ONLY}
                    )
                    for rc in listed.get("items") or []:
                        for owner in rc["metadata"].get("ownerReferences") or []:
                            seen.setdefault(owner["name"], time.perf_counter())
                    time.sleep(0.1)

            poller = threading.Thread(target=poll, daemon=True)
            poller.start()

            def create(i: int) -> None:
                # Alternating: even calls make RLJob rl-K, odd ones RayJob kr-K, so both bursts share the moment.
                k = i // 2
                if i % 2 == 0:
                    name, body, plural, group = f"rl-{k:04d}", rljob(f"rl-{k:04d}", prefix), "rljobs", GROUP
                    version = VERSION
                else:
                    name = f"kr-{k:04d}"
                    body, plural, group, version = rayjob(name, kuberay_nodes[k], image), "rayjobs", "ray.io", "v1"
                created[name] = time.perf_counter()
                custom.create_namespaced_custom_object(group, version, prefix, plural, body)

            cpu_before, started = cpu_seconds(operator.process.pid), time.perf_counter()
            with ThreadPoolExecutor(16) as pool:
                list(pool.map(create, range(2 * jobs)))
            with contextlib.suppress(TimeoutError):
                wait_for(lambda: all(name in seen for name in created), timeout, "every RayCluster")
            wall = time.perf_counter() - started
            cpu_after = cpu_seconds(operator.process.pid)
            cpu = {name: cpu_after[name] - cpu_before.get(name, 0.0) for name in cpu_after}
            stop.set()
            poller.join()
            never = sorted(n for n in created if n.startswith("rl-") and n not in seen)
            if never:
                # Why the ones that never got a RayCluster are where they are: their phase and message, grouped.
                why: dict[str, list[str]] = {}
                for name in never:
                    status = custom.get_namespaced_custom_object(GROUP, VERSION, prefix, "rljobs", name).get("status")
                    status = status or {}
                    why.setdefault(f"{status.get('phase')}: {status.get('message')}", []).append(name)
                for reason, names in why.items():
                    print(f"  never ({len(names)}, e.g. {names[0]}): {reason}", flush=True)
            ours = [seen[n] - t for n, t in created.items() if n.startswith("rl-") and n in seen]
            theirs = [seen[n] - t for n, t in created.items() if n.startswith("kr-") and n in seen]
            log = (REPO / ".e2e" / f"operator-{prefix}.log").read_text(errors="replace")
            return {
                "jobs": jobs,
                "ours": ours,
                "theirs": theirs,
                "ours_missing": jobs - len(ours),
                "theirs_missing": jobs - len(theirs),
                "exceptions": sum(log.count(marker) for marker in EXCEPTION_MARKERS),
                "rss_mib": operator.peak_rss_kib / 1024,
                "wall": wall,
                "cpu": cpu,
            }
        finally:
            with contextlib.suppress(Exception):
                for i in range(jobs):
                    custom.delete_namespaced_custom_object("ray.io", "v1", prefix, "rayjobs", f"kr-{i:04d}")
            delete_nodes(core, kuberay_nodes)


def pq(values: list[float]) -> str:
    if not values:
        return "n/a"
    return f"{statistics.median(values):6.2f} / {percentile(values, 0.95):<6.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, nargs="+", default=[100])
    parser.add_argument("--timeout", type=float, default=600, help="seconds to wait for every RayCluster")
    args = parser.parse_args()
    with bench_cluster() as (api, kubeconfig):
        print("create -> RayCluster exists, p50 / p95 seconds (never: none within the timeout)")
        print(f"{'N':>5} | {'rlplace RLJob':>16} never | {'KubeRay RayJob':>16} never | p95 ratio | exceptions | RSS")
        for jobs in args.jobs:
            r = run(api, kubeconfig, jobs, args.timeout)
            ours, theirs = r["ours"], r["theirs"]
            ratio = percentile(ours, 0.95) / percentile(theirs, 0.95) if ours and theirs else float("nan")
            print(
                f"{jobs:>5} | {pq(ours):>16} {r['ours_missing']:>5} | {pq(theirs):>16} {r['theirs_missing']:>5} | "
                f"{ratio:>8.2f}x | {r['exceptions']:>10} | {r['rss_mib']:.0f} MiB",
                flush=True,
            )
            # Who the machine's cores worked for while the burst ran: a control plane busy on every core slows both
            # controllers alike, whatever either does.
            busiest = sorted(r["cpu"].items(), key=lambda item: -item[1])
            shares = ", ".join(f"{name} {seconds:.0f} s" for name, seconds in busiest if seconds >= 0.5)
            print(
                f"      CPU in the {r['wall']:.0f} s until every RayCluster ({os.cpu_count()} cores): {shares}",
                flush=True,
            )


if __name__ == "__main__":
    main()

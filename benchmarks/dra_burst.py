"""A burst of RLJobs that share nodes through DRA beside a burst of whole-node RLJobs, created interleaved in one run.

    .venv/bin/python benchmarks/dra_burst.py [--nodes 50] [--timeout 600]

Makes `--nodes` 8-GPU kwok nodes in a devicePlugin NodeGroup (nvidia.com/gpu: 8) and as many in a DRA NodeGroup
(no nvidia.com/gpu; a ResourceSlice of 8 devices each, shaped like the local cluster's fake-GPU driver's, and
the DeviceClass gpu.example.com), starts the operator as a local process from the working tree, then creates
at once, alternating, from 16 threads: one whole-node RLJob (GPUs 0-7) per devicePlugin node, and two 4-GPU
RLJobs (GPUs 0-3) per DRA node. Measured per job from its create call to its worker pod bound to a node (the
scheduler allocated its claim first on the DRA side): p50 / p95 / max and the jobs never bound within
--timeout; the DRA side's ratio to the whole-node side of the same run. Afterwards it checks that no two DRA
claims hold the same device.

kwok runs no containers: this measures admission, the claim controller and the scheduler, not Ray. The local
control plane runs kube-controller-manager and kube-scheduler with --kube-api-qps=200 --kube-api-burst=400
(e2e/cluster/up.sh): each DRA pod costs a claim and more writes. Uses the cluster in KUBECONFIG if set, else
starts one in .e2e/bench (and stops it). Prints figures; it is not a test.
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
from kubernetes.client.exceptions import ApiException

from _harness import (
    BENCH_LABEL,
    GROUP,
    REPO,
    VERSION,
    Operator,
    bench_cluster,
    bench_nodes,
    delete_nodes,
    percentile,
    wait_for,
    wait_group_ready,
)
from e2e_cluster import DRA_DRIVER, fake_node_manifest, fake_resource_slice

DRA = ("resource.k8s.io", "v1")


def rljob(name: str, group: str, placement: str) -> dict:
    spec = {"nodeGroups": [group], "componentPlacement": [{"components": "actor,rollout", "placement": placement}]}
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "RLJob", "metadata": {"name": name}, "spec": spec}


@contextlib.contextmanager
def dra_group(api: client.ApiClient, nodes: int, name: str):
    """A DRA NodeGroup `name` over `nodes` new kwok nodes, each with a ResourceSlice of 8 devices."""
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    names = [f"{name}-{i:04d}" for i in range(nodes)]

    def create(index: int) -> None:
        labels = {BENCH_LABEL: name, "rlplace.io/node-rank": str(index)}
        core.create_node(fake_node_manifest(names[index], labels=labels))
        custom.create_cluster_custom_object(*DRA, "resourceslices", fake_resource_slice(names[index]))

    with contextlib.suppress(ApiException):
        selector = {"cel": {"expression": f'device.driver == "{DRA_DRIVER}"'}}
        device_class = {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": DRA_DRIVER}}
        custom.create_cluster_custom_object(*DRA, "deviceclasses", {**device_class, "spec": {"selectors": [selector]}})
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(create, range(nodes)))
    spec = {
        "nodeSelector": {"matchLabels": {BENCH_LABEL: name}},
        "gpuAllocation": "dra",
        "dra": {"driver": DRA_DRIVER, "pinAttribute": "index"},
    }
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "NodeGroup", "metadata": {"name": name}, "spec": spec}
    custom.create_cluster_custom_object(GROUP, VERSION, "nodegroups", body)
    try:
        yield names
    finally:
        with contextlib.suppress(ApiException):
            custom.delete_cluster_custom_object(GROUP, VERSION, "nodegroups", name)
        for node in names:
            with contextlib.suppress(ApiException):
                custom.delete_cluster_custom_object(
                    *DRA, "resourceslices", fake_resource_slice(node)["metadata"]["name"]
                )
        delete_nodes(core, names)


def run(api: client.ApiClient, kubeconfig: str, nodes: int, timeout: float) -> dict[str, object]:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    prefix = f"drab{nodes}-{uuid.uuid4().hex[:4]}"
    whole, shared = prefix, f"{prefix}-dra"
    with contextlib.ExitStack() as stack:
        operator = Operator(kubeconfig, REPO / ".e2e" / f"operator-{prefix}.log")
        stack.callback(operator.stop)
        stack.enter_context(bench_nodes(api, nodes, whole))  # the namespace `prefix` and the whole-node group
        stack.enter_context(dra_group(api, nodes, shared))
        wait_group_ready(api, whole, nodes)
        wait_group_ready(api, shared, nodes)
        names = [f"w-{i:04d}" for i in range(nodes)] + [f"d-{i:04d}" for i in range(2 * nodes)]
        order = sorted(names, key=lambda n: (int(n[2:]) / (1 if n[0] == "w" else 2), n))  # interleaved
        created: dict[str, float] = {}
        bound: dict[str, float] = {}
        stop = threading.Event()

        def poll() -> None:
            while not stop.is_set():
                for pod in core.list_namespaced_pod(prefix, label_selector="ray.io/node-type=worker").items:
                    job = (pod.metadata.labels or {}).get("rlplace.io/job")
                    if job and pod.spec.node_name:
                        bound.setdefault(job, time.perf_counter())
                time.sleep(0.2)

        poller = threading.Thread(target=poll, daemon=True)
        poller.start()

        def create(name: str) -> None:
            body = rljob(name, whole, "0-7") if name.startswith("w-") else rljob(name, shared, "0-3")
            created[name] = time.perf_counter()
            custom.create_namespaced_custom_object(GROUP, VERSION, prefix, "rljobs", body)

        started = time.perf_counter()
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(create, order))
        with contextlib.suppress(TimeoutError):
            wait_for(lambda: all(name in bound for name in created), timeout, "every worker pod bound")
        wall = time.perf_counter() - started
        stop.set()
        poller.join()
        claims = custom.list_namespaced_custom_object(*DRA, prefix, "resourceclaims")["items"]
        held = [
            (r["pool"], r["device"])
            for c in claims
            for r in (((c.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
        ]
        return {
            "whole": [bound[n] - created[n] for n in created if n.startswith("w-") and n in bound],
            "dra": [bound[n] - created[n] for n in created if n.startswith("d-") and n in bound],
            "whole_never": sum(1 for n in created if n.startswith("w-") and n not in bound),
            "dra_never": sum(1 for n in created if n.startswith("d-") and n not in bound),
            "devices": len(held),
            "distinct": len(set(held)),
            "wall": wall,
            "rss_mib": operator.peak_rss_kib / 1024,
        }
    raise AssertionError("unreachable")


def pq(values: list[float]) -> str:
    if not values:
        return "n/a"
    return f"{statistics.median(values):6.2f} / {percentile(values, 0.95):6.2f} / {max(values):6.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--timeout", type=float, default=600, help="seconds to wait for every worker pod bound")
    args = parser.parse_args()
    with bench_cluster() as (api, kubeconfig):
        r = run(api, kubeconfig, args.nodes, args.timeout)
    whole, dra = r["whole"], r["dra"]
    print(f"{args.nodes} devicePlugin nodes, {args.nodes} DRA nodes (8 GPUs each); create -> worker pod bound, seconds")
    print(f"  whole-node jobs ({args.nodes}, 8 GPUs):  p50 / p95 / max {pq(whole)}  never {r['whole_never']}")
    print(f"  DRA jobs ({2 * args.nodes}, 4 GPUs, 2 per node): p50 / p95 / max {pq(dra)}  never {r['dra_never']}")
    if whole and dra:
        ratio = percentile(dra, 0.95) / percentile(whole, 0.95)
        print(f"  p95 ratio DRA / whole-node: {ratio:.2f}x; all bound after {r['wall']:.1f} s")
    print(
        f"  DRA claims hold {r['devices']} devices, {r['distinct']} distinct; operator peak RSS {r['rss_mib']:.0f} MiB"
    )


if __name__ == "__main__":
    main()

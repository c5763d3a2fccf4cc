"""How fast an RLJob with an entrypoint gets its driver going, against KubeRay's own RayJob in the same run.

    .venv/bin/python benchmarks/run_latency.py [--jobs 20]
    KUBECONFIG=.e2e/kubeconfig .venv/bin/python benchmarks/run_latency.py --real 5

On a real API server with fake (kwok) 8-GPU nodes: add `--jobs` nodes in one NodeGroup, start the operator,
create the RLJobs at once (each on one node's 8 GPUs, entrypoint set), and measure from each create call to
(a) its RayJob existing (the operator's work), (b) KubeRay's RayCluster for it existing, (c) the driver
submitted (KubeRay's jobDeploymentStatus Running: the RayCluster is up and `ray job submit` started; the RLJob
phase Running), and on clusters with real nodes (d) BindingVerified True (every process checked its own
placement). Baseline, in the same run: as many RayJobs with the same rayClusterSpec created directly (no
rlplace), measured to (b) and (c). Under kwok nothing runs Ray, so (d) is reported only with real nodes.

With `--real N` (a cluster with real nodes, e.g. `make cluster-up`): N runs one after another of
examples/rljob-collocated-run.yaml to Succeeded, measured to (b), (c), (d) and the driver's end; baseline, in
the same run: N RayJobs with the operator's rayClusterSpec and a copy of the plan ConfigMap (the same driver,
same nodes, no rlplace), measured to (b), (c) and the driver's end.

Uses the cluster in KUBECONFIG if set, else starts a local control plane in .e2e/bench (and stops it).
Prints figures; it is not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import statistics
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import yaml
from kubernetes import client

from rlplace_operator.api.names import placement_configmap_name

from _harness import (
    GROUP,
    REPO,
    VERSION,
    Operator,
    Stamps,
    bench_cluster,
    bench_group,
    figures,
    node_name,
    poll,
    wait_for,
)


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
                (term,) = terms["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
                (requirement,) = [*term.get("matchExpressions", []), *term.get("matchFields", [])]
                requirement["values"] = [node]
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


def renamed_configmap(value: object, old: str, new: str) -> object:
    """`value` (a pod spec tree) with every configMap volume named `old` pointing at `new`."""
    if isinstance(value, dict):
        if value.get("configMap", {}).get("name") == old:
            return {**value, "configMap": {**value["configMap"], "name": new}}
        return {k: renamed_configmap(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [renamed_configmap(v, old, new) for v in value]
    return value


def run_real(api: client.ApiClient, kubeconfig: str, runs: int) -> None:
    """One job at a time on the real nodes, so every figure is the path of one job through an idle cluster."""
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    kubectl = [str(REPO / ".e2e/bin/kubectl"), "--kubeconfig", kubeconfig]
    if not core.list_node(label_selector="rlplace.io/real-node=true").items:
        raise SystemExit("error: --real needs a cluster with real nodes (make cluster-up)")
    subprocess.run([*kubectl, "apply", "-f", str(REPO / "examples/nodegroups-real.yaml")], check=True)
    (example,) = [d for d in yaml.safe_load_all((REPO / "examples/rljob-collocated-run.yaml").read_text()) if d]
    namespace = f"benchreal-{uuid.uuid4().hex[:4]}"
    core.create_namespace({"metadata": {"name": namespace}})
    operator = Operator(kubeconfig, REPO / ".e2e" / f"operator-{namespace}.log")
    ours, theirs = Stamps(), Stamps()
    rl_created: dict[str, float] = {}
    kr_created: dict[str, float] = {}
    template: dict = {}

    def one(stamps: Stamps, created: dict[str, float], name: str, plural: str, group: str, body: dict) -> None:
        stop = threading.Event()
        poller = threading.Thread(target=poll, args=(custom, namespace, stamps, stop), daemon=True)
        poller.start()
        try:
            created[name] = time.perf_counter()
            custom.create_namespaced_custom_object(group, body["apiVersion"].split("/")[1], namespace, plural, body)
            wait_for(lambda: name in stamps.seen.get("driver-ended", {}), 600, f"{name}'s driver ended")
            wait_for(lambda: plural == "rayjobs" or name in stamps.seen.get("rljob-ended", {}), 60, f"{name} ended")
            outcome = custom.get_namespaced_custom_object(
                group, body["apiVersion"].split("/")[1], namespace, plural, name
            )
            status = outcome.get("status") or {}
            if status.get("phase", status.get("jobStatus")) not in ("Succeeded", "SUCCEEDED"):
                raise SystemExit(f"error: {name} did not succeed: {status.get('message') or status}")
        finally:
            stop.set()
            poller.join()

    try:
        wait_for(lambda: core.list_namespaced_service_account(namespace).items, 60, "default ServiceAccount")
        for i in range(runs):
            name = f"rl-{i:02d}"
            body = {**example, "metadata": {"name": name}}
            one(ours, rl_created, name, "rljobs", GROUP, body)
            if not template:
                # Captured before the RLJob (and its ConfigMap) goes: the baseline runs the same driver on the
                # same plan and nodes.
                rayjob = custom.get_namespaced_custom_object("ray.io", "v1", namespace, "rayjobs", name)
                plan = core.read_namespaced_config_map(placement_configmap_name(name), namespace)
                core.create_namespaced_config_map(namespace, {"metadata": {"name": "kr-plan"}, "data": plan.data})
                template = renamed_configmap(rayjob["spec"], placement_configmap_name(name), "kr-plan")
            custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "rljobs", name)
            wait_for(lambda: not core.list_namespaced_pod(namespace).items, 300, f"{name}'s pods gone")
        for i in range(runs):
            name = f"kr-{i:02d}"
            body = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": name}, "spec": template}
            one(theirs, kr_created, name, "rayjobs", "ray.io", body)
            custom.delete_namespaced_custom_object("ray.io", "v1", namespace, "rayjobs", name)
            wait_for(lambda: not core.list_namespaced_pod(namespace).items, 300, f"{name}'s pods gone")
    finally:
        operator.stop()
        core.delete_namespace(namespace)
    # RLJob names and RayJob names differ only in the baseline; the RLJob's RayJob has the RLJob's name.
    print(f"{runs} runs, one at a time, of examples/rljob-collocated-run.yaml on the real nodes;")
    print("p50 / p95 seconds from the create call")
    print(f"  {'':<44} {'rlplace RLJob':>22}   {'KubeRay RayJob (baseline)':>26}")
    rows = [
        ("to KubeRay's RayCluster", "raycluster", "raycluster"),
        ("to driver submitted (RayJob Running)", "submitted", "submitted"),
        ("to every process verified", "rljob-verified", None),
        ("to the driver's end (RayJob SUCCEEDED)", "driver-ended", "driver-ended"),
        ("to RLJob phase Succeeded", "rljob-ended", None),
    ]
    for label, stage, base in rows:
        mine = ours.latencies(stage, rl_created)
        base_values = theirs.latencies(base, kr_created) if base else []
        ratio = ""
        if mine and base_values:
            ratio = f"   p50 {statistics.median(mine) / statistics.median(base_values):.2f}x baseline"
        print(f"  {label:<44} {figures(mine, runs):>22}   {figures(base_values, runs):>26}{ratio}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--real", type=int, metavar="N", help="N runs, one at a time, on the real nodes")
    args = parser.parse_args()
    with bench_cluster() as (api, kubeconfig):
        if args.real:
            run_real(api, kubeconfig, args.real)
        else:
            run(api, kubeconfig, args.jobs)


if __name__ == "__main__":
    main()

"""One RLJob the size of the largest RL runs, on kwok nodes, beside a KubeRay RayJob of the same size.

    .venv/bin/python benchmarks/large_job.py [--nodes 1024]

Adds `--nodes` 8-GPU kwok nodes in three NodeGroups (half a800, a quarter h800, a quarter 4090), starts the
operator, then on the same API server, one after the other:

1. baseline: a KubeRay RayJob with one worker group of `--nodes` replicas (8 GPUs each, no placement: the
   scheduler picks the nodes), from its create call to every worker pod bound to a node;
2. rlplace: an RLJob over the three NodeGroups (actor on every a800 GPU, rollout on every 4090 GPU, reward on
   every h800 GPU: 8 processes a node), from its create call to Admitted, to its RayJob, to every worker pod
   bound (each on a planned node, one per node), and to RayClusterReady.

Prints the times (and the ratio of rlplace's to the baseline's time to every pod bound), the operator's peak
resident memory, the largest objects the operator wrote (RayJob, ConfigMap, RLJob), and the plan ConfigMap's
size for a plan of 36,864 processes on the same nodes. kwok runs no containers: Ray never starts, so this
measures admission, placement and binding, not training (kwok completes KubeRay's submitter pod, so KubeRay
then fails the RayJob: "Ray job not found").

Uses the cluster in KUBECONFIG if set, else starts a local control plane in .e2e/bench (and stops it).
Prints figures; it is not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

from kubernetes import client  # noqa: E402
from kubernetes.client.exceptions import ApiException  # noqa: E402

from placement_core import contract  # noqa: E402
from placement_core.components import component_placement  # noqa: E402
from placement_core.plan import build_plan  # noqa: E402
from rlplace_operator.builders.configmap import build_placement_configmap  # noqa: E402

from _harness import (  # noqa: E402
    GROUP,
    VERSION,
    Operator,
    add_nodes,
    bench_cluster,
    bench_nodegroup,
    delete_nodes,
    exists,
    wait_for,
    wait_group_ready,
)

#: The three NodeGroups' shares of the nodes, and the component on each.
GROUPS = (("a800", 2, "actor"), ("h800", 4, "reward"), ("4090", 4, "rollout"))
RAY_IMAGE = "rayproject/ray:2.60.0"


def _json_size(body: object) -> int:
    return len(json.dumps(body, separators=(",", ":")))


@contextlib.contextmanager
def three_groups(api: client.ApiClient, kubeconfig: str, nodes: int, namespace: str) -> Iterator[Operator]:
    """The namespace, the kwok nodes in three NodeGroups (`<namespace>-<gpu>`), and the operator; all removed
    afterwards (the operator last: deletions wait on its finalizers)."""
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    sizes = [nodes // share for _, share, _ in GROUPS]
    sizes[0] += nodes - sum(sizes)
    names: list[str] = []
    with contextlib.ExitStack() as stack:
        operator = Operator(kubeconfig, REPO / ".e2e" / f"operator-{namespace}.log")
        stack.callback(operator.stop)
        core.create_namespace({"metadata": {"name": namespace}})
        stack.callback(lambda: delete_nodes(core, names))
        stack.callback(lambda: _delete_namespace(core, namespace))
        for (gpu, _, _), size in zip(GROUPS, sizes, strict=True):
            group = f"{namespace}-{gpu}"
            names += add_nodes(core, size, group)
            custom.create_cluster_custom_object(GROUP, VERSION, "nodegroups", bench_nodegroup(group))
            stack.callback(
                lambda g=group: _ignore_missing(custom.delete_cluster_custom_object, GROUP, VERSION, "nodegroups", g)
            )
        for (gpu, _, _), size in zip(GROUPS, sizes, strict=True):
            wait_group_ready(api, f"{namespace}-{gpu}", size)
        yield operator


def _ignore_missing(call, *args: object) -> None:  # type: ignore[no-untyped-def]
    with contextlib.suppress(ApiException):
        call(*args)


def _delete_namespace(core: client.CoreV1Api, namespace: str) -> None:
    _ignore_missing(core.delete_namespace, namespace)
    with contextlib.suppress(TimeoutError):
        wait_for(lambda: not exists(lambda: core.read_namespace(namespace)), 300, f"namespace {namespace} gone")


def _created(core: client.CoreV1Api, namespace: str, selector: str) -> int:
    return len(core.list_namespaced_pod(namespace, label_selector=f"{selector},ray.io/node-type=worker").items)


def _bound(core: client.CoreV1Api, namespace: str, selector: str) -> dict[str, str]:
    """Worker pod -> node, for the bound ones."""
    pods = core.list_namespaced_pod(namespace, label_selector=f"{selector},ray.io/node-type=worker").items
    return {p.metadata.name: p.spec.node_name for p in pods if p.spec.node_name and not p.metadata.deletion_timestamp}


def _gone(core: client.CoreV1Api, namespace: str, selector: str) -> bool:
    return not core.list_namespaced_pod(namespace, label_selector=selector).items


def baseline(api: client.ApiClient, namespace: str, nodes: int) -> tuple[float, float]:
    """Seconds from a plain KubeRay RayJob's create call to every one of its worker pods created, and bound."""
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    container = {"image": RAY_IMAGE, "resources": {"limits": {"cpu": "500m", "memory": "2Gi"}}}
    worker = {**container, "name": "ray-worker"}
    worker["resources"] = {"limits": {**container["resources"]["limits"], "nvidia.com/gpu": "8"}}
    body = {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": "baseline", "labels": {"bench": "baseline"}},
        "spec": {
            "entrypoint": "python -c pass",
            "rayClusterSpec": {
                "headGroupSpec": {
                    "rayStartParams": {},
                    "template": {
                        "metadata": {"labels": {"bench": "baseline"}},
                        "spec": {"containers": [{**container, "name": "ray-head"}]},
                    },
                },
                "workerGroupSpecs": [
                    {
                        "groupName": "workers",
                        "replicas": nodes,
                        "minReplicas": nodes,
                        "maxReplicas": nodes,
                        "rayStartParams": {},
                        "template": {"metadata": {"labels": {"bench": "baseline"}}, "spec": {"containers": [worker]}},
                    }
                ],
            },
        },
    }
    started = time.perf_counter()
    custom.create_namespaced_custom_object("ray.io", "v1", namespace, "rayjobs", body)
    wait_for(lambda: _created(core, namespace, "bench=baseline") >= nodes, 900, f"{nodes} baseline pods created")
    created = time.perf_counter() - started
    wait_for(lambda: len(_bound(core, namespace, "bench=baseline")) >= nodes, 900, f"{nodes} baseline pods bound")
    elapsed = time.perf_counter() - started
    custom.delete_namespaced_custom_object("ray.io", "v1", namespace, "rayjobs", "baseline")
    wait_for(lambda: _gone(core, namespace, "bench=baseline"), 600, "the baseline's pods gone")
    return created, elapsed


def rlplace_job(api: client.ApiClient, namespace: str, nodes: int) -> dict[str, float | int]:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "RLJob",
        "metadata": {"name": "large"},
        "spec": {
            "nodeGroups": [f"{namespace}-{gpu}" for gpu, _, _ in GROUPS],
            "componentPlacement": [
                {"components": component, "nodeGroup": f"{namespace}-{gpu}", "placement": "all"}
                for gpu, _, component in GROUPS
            ],
            "entrypoint": "python -c pass",
            "ray": {"image": RAY_IMAGE},
        },
    }
    times: dict[str, float] = {}
    started = time.perf_counter()
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "rljobs", body)

    def job() -> dict:
        return custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "rljobs", "large")

    def condition(kind: str) -> bool:
        return any(
            c["type"] == kind and c["status"] == "True" for c in (job().get("status") or {}).get("conditions") or []
        )

    wait_for(lambda: condition("Admitted"), 600, "Admitted")
    times["admitted_s"] = time.perf_counter() - started

    def read_rayjob() -> dict:
        return custom.get_namespaced_custom_object("ray.io", "v1", namespace, "rayjobs", "large")

    wait_for(lambda: exists(read_rayjob), 600, "the RayJob")
    times["rayjob_s"] = time.perf_counter() - started
    wait_for(lambda: _created(core, namespace, "rlplace.io/job=large") >= nodes, 900, f"{nodes} pods created")
    times["created_s"] = time.perf_counter() - started
    bound: dict[str, str] = {}

    def all_bound() -> bool:
        bound.update(_bound(core, namespace, "rlplace.io/job=large"))
        return len(bound) >= nodes

    wait_for(all_bound, 900, f"{nodes} pods bound")
    times["bound_s"] = time.perf_counter() - started
    # Every pod on a planned node, one per node: the plan's node -> rank map against where the pods run.
    configmap = core.read_namespaced_config_map("large-placement", namespace)
    planned = contract.parse_node_ranks(configmap.data[contract.NODE_RANKS_KEY])
    on = list(bound.values())
    assert len(on) == nodes and set(on) == set(planned), (len(on), len(set(on)), len(planned))
    rayjob = read_rayjob()
    with contextlib.suppress(TimeoutError):
        # kwok runs no Ray: KubeRay may call the cluster ready, or end the RayJob, whose driver never ran.
        wait_for(lambda: condition("RayClusterReady"), 120, "RayClusterReady")
        times["ready_s"] = time.perf_counter() - started
    status = job().get("status") or {}
    return {
        **times,
        "rayjob_bytes": _json_size(
            {"spec": rayjob["spec"], "metadata": {"annotations": rayjob["metadata"].get("annotations")}}
        ),
        "worker_groups": len(rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"]),
        "configmap_bytes": _json_size({"data": configmap.data, "binaryData": configmap.binary_data}),
        "rljob_status_bytes": _json_size(status),
        "phase": f"{status.get('phase')} ({status.get('message')})",
    }


def configmap_at(nodes: int) -> tuple[int, int]:
    """(processes, bytes) of the plan ConfigMap for 36 processes on every 8 nodes' GPUs: actor, rollout, ref and
    critic on every GPU, the reward on half of them (36,864 processes at 1,024 nodes)."""
    gpus = nodes * 8
    plan = build_plan(
        component_placement(
            {
                "cluster": {
                    "num_nodes": nodes,
                    "accelerators_per_node": 8,
                    "component_placement": {
                        "actor,rollout,ref,critic": f"0-{gpus - 1}",
                        "reward": f"0-{gpus // 2 - 1}",
                    },
                }
            }
        )
    )
    configmap = build_placement_configmap("large", plan)
    return sum(1 for _ in plan.processes()), _json_size(
        {"data": configmap.get("data"), "binaryData": configmap.get("binaryData")}
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1024)
    args = parser.parse_args()
    processes, size = configmap_at(args.nodes)
    print(
        f"plan ConfigMap for {processes:,} processes on {args.nodes:,} nodes: {size / 1024:.0f} KiB (limit 1,024 KiB)"
    )
    with bench_cluster() as (api, kubeconfig):
        namespace = f"large-{uuid.uuid4().hex[:4]}"
        with three_groups(api, kubeconfig, args.nodes, namespace) as operator:
            created, base = baseline(api, namespace, args.nodes)
            print(
                f"KubeRay RayJob, 1 worker group of {args.nodes} replicas: every worker pod created {created:.1f} s, "
                f"bound {base:.1f} s",
                flush=True,
            )
            ours = rlplace_job(api, namespace, args.nodes)
            print(
                f"RLJob of {args.nodes} nodes ({args.nodes * 8:,} GPUs, 3 NodeGroups, {ours['worker_groups']} worker "
                f"groups): Admitted {ours['admitted_s']:.1f} s, RayJob {ours['rayjob_s']:.1f} s, every worker pod "
                f"created {ours['created_s']:.1f} s, bound on "
                f"its planned node {ours['bound_s']:.1f} s ({ours['bound_s'] / base:.2f}x the baseline), "
                f"RayClusterReady {ours.get('ready_s', float('nan')):.1f} s, phase {ours['phase']}"
            )
            print(
                f"largest objects written: RayJob {ours['rayjob_bytes'] / 1024:.0f} KiB, plan ConfigMap "
                f"{ours['configmap_bytes'] / 1024:.0f} KiB, RLJob status {ours['rljob_status_bytes'] / 1024:.1f} KiB; "
                f"operator peak RSS {operator.peak_rss_kib / 1024:.0f} MiB",
                flush=True,
            )


if __name__ == "__main__":
    main()

"""How fast a job is running again after losing a pod or a node, and how much work it repeats.

    KUBECONFIG=.e2e/kubeconfig .venv/bin/python benchmarks/node_loss.py [--loss node|pod] [--steps 40] [--every 5]

On a cluster with the local real nodes (e2e/cluster/nodes.sh): a NodeGroup of the two real GPU nodes, the
operator started from this tree, and examples/rljob-resumable-run.yaml (steps of about one second, a checkpoint
every `--every` steps, its checkpoint volume a host directory every real node sees). Once a checkpoint exists,
the loss: `node` cordons the job's node and force-deletes its worker pod (the node is left out, so the job
moves to the other node), `pod` force-deletes the worker only (the node stays usable). Measured from the loss
to (a) the restart seen (status.restartCount 1), (b) the new attempt Running (phase Running, attempts 2),
(c) its first step after the resume (the driver's `step N/M (attempt 2)` line); and the steps repeated (the
driver's summary line). Baseline, in the same run: the first attempt's own start, from the create call to
Running and to its first step (a restart cannot be faster than a start). Prints figures; it is not a test.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import time
import uuid
from pathlib import Path

import yaml
from kubernetes import client

from _harness import GROUP, REPO, VERSION, Operator, bench_cluster, wait_for

CHECKPOINTS = Path("/var/tmp/rlplace-bench-checkpoints")
GPU_NODES = ("real-4090-0", "real-a800-0")


def driver_log(kubectl: list[str], namespace: str, job: str) -> str:
    return subprocess.run([*kubectl, "logs", "-n", namespace, f"job/{job}"], capture_output=True, text=True).stdout


def job_body(namespace: str, group: str, steps: int, every: int) -> dict:
    (body,) = [d for d in yaml.safe_load_all((REPO / "examples/rljob-resumable-run.yaml").read_text()) if d]
    directory = CHECKPOINTS / namespace / "resumable"
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o1777)
    body["metadata"] = {"name": "resumable"}
    body["spec"]["nodeGroups"] = [group]
    body["spec"]["checkpoint"]["volume"]["hostPath"]["path"] = str(directory)
    body["spec"]["entrypoint"] = (
        f"python -m placement_core.launcher.demo --steps {steps} --checkpoint-every {every} --workload synthetic "
        "--law actor=0.5 --law rollout=0.3 --law reward=0.2"
    )
    return body


def run(api: client.ApiClient, kubeconfig: str, loss: str, steps: int, every: int) -> None:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    kubectl = [str(REPO / ".e2e/bin/kubectl"), "--kubeconfig", kubeconfig]
    if not core.list_node(label_selector="rlplace.io/real-node=true").items:
        raise SystemExit("error: needs a cluster with the local real nodes (e2e/cluster/nodes.sh)")
    namespace = f"benchloss-{uuid.uuid4().hex[:4]}"
    group = f"bench-gpus-{namespace[-4:]}"
    selector = {"matchExpressions": [{"key": "rlplace.io/real-gpu-type", "operator": "In", "values": ["a800", "4090"]}]}
    custom.create_cluster_custom_object(
        GROUP,
        VERSION,
        "nodegroups",
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "NodeGroup",
            "metadata": {"name": group},
            "spec": {"nodeSelector": selector},
        },
    )
    core.create_namespace({"metadata": {"name": namespace}})
    operator = Operator(kubeconfig, REPO / ".e2e" / f"operator-{namespace}.log")

    def status() -> dict:
        return custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "rljobs", "resumable").get("status") or {}

    lost = ""
    try:
        wait_for(lambda: core.list_namespaced_service_account(namespace).items, 60, "default ServiceAccount")
        created = time.perf_counter()
        custom.create_namespaced_custom_object(
            GROUP, VERSION, namespace, "rljobs", job_body(namespace, group, steps, every)
        )
        wait_for(lambda: status().get("phase") == "Running", 300, "attempt 1 Running")
        first_running = time.perf_counter() - created
        wait_for(lambda: "step 1/" in driver_log(kubectl, namespace, "resumable"), 300, "attempt 1's first step")
        first_step = time.perf_counter() - created
        store = CHECKPOINTS / namespace / "resumable"
        wait_for(lambda: any(p.name >= f"step-{2 * every:08d}" for p in store.glob("step-*")), 300, "a checkpoint")
        (lost,) = {n for c in status()["placement"]["components"] for n in c["nodes"]}
        selector = "rlplace.io/job=resumable,ray.io/node-type=worker"
        workers = core.list_namespaced_pod(namespace, label_selector=selector).items
        lost_at = time.perf_counter()
        if loss == "node":
            core.patch_node(lost, {"spec": {"unschedulable": True}})
        for pod in workers:
            core.delete_namespaced_pod(pod.metadata.name, namespace, grace_period_seconds=0)
        wait_for(lambda: (status().get("restartCount") or 0) >= 1, 300, "the restart")
        detected = time.perf_counter() - lost_at
        wait_for(lambda: status().get("phase") == "Running" and status().get("attempts") == 2, 300, "attempt 2")
        running = time.perf_counter() - lost_at
        wait_for(lambda: "(attempt 2)" in driver_log(kubectl, namespace, "resumable"), 300, "attempt 2's first step")
        stepping = time.perf_counter() - lost_at
        wait_for(lambda: status().get("phase") in ("Succeeded", "Failed"), 600, "the job's end")
        end = status()
        summary = [line for line in driver_log(kubectl, namespace, "resumable").splitlines() if "summary:" in line]
        moved = {n for c in end["placement"]["components"] for n in c["nodes"]}
    finally:
        operator.stop()
        if lost:
            core.patch_node(lost, {"spec": {"unschedulable": None}})
        core.delete_namespace(namespace)
        custom.delete_cluster_custom_object(GROUP, VERSION, "nodegroups", group)
        shutil.rmtree(CHECKPOINTS / namespace, ignore_errors=True)
    print(f"loss of a {loss} ({lost}) under examples/rljob-resumable-run.yaml, {steps} steps, checkpoint every {every}")
    print(f"  ended {end['phase']}, attempts {end.get('attempts')}, now on {', '.join(sorted(moved))}")
    print(f"  {summary[-1] if summary else 'no summary line'}")
    print("seconds from the loss                          baseline: the first attempt's start, from its create call")
    print(f"  (a) restart seen (restartCount 1)     {detected:6.1f}")
    print(
        f"  (b) attempt 2 Running                 {running:6.1f}   baseline to Running     {first_running:6.1f}"
        f"   {running / first_running:.2f}x"
    )
    print(
        f"  (c) attempt 2's first step            {stepping:6.1f}   baseline to first step  {first_step:6.1f}"
        f"   {stepping / first_step:.2f}x"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loss", choices=("node", "pod"), default="node")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--every", type=int, default=5)
    args = parser.parse_args()
    with bench_cluster() as (api, kubeconfig):
        run(api, kubeconfig, args.loss, args.steps, args.every)


if __name__ == "__main__":
    main()

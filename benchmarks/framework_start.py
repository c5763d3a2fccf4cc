"""How fast a framework job (an RLinf program, unchanged) proves its binding, beside an rlplace-driver job of
the same shape in the same run.

    KUBECONFIG=.e2e/kubeconfig .venv/bin/python benchmarks/framework_start.py [--runs 2]

On a cluster with real nodes and the test images (make cluster-up): runs, one at a time and alternating,
examples/rljob-rlinf-run.yaml (spec.framework rlinf: RLinf's own scheduler launches the processes; the probe
and Ray's State API prove them) and the baseline examples/rljob-heterogeneous-run.yaml (rlplace's driver, the
same nodeGroups and componentPlacement: actor on 2 a800 GPUs, rollout on 2 4090 GPUs, 2 reward processes on the
CPU node). Each is measured from the create call to its driver submitted (RayJob Running), to BindingVerified
True (every process proven where the plan says) and to phase Succeeded. The two drivers do different work after
the check (RLinf's program 12 synthetic steps, the demo driver its concurrent calls), so the last row compares
whole runs, not the check.

The operator runs here as a subprocess (no progress endpoint). Prints figures; it is not a test.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import threading
import time
import uuid

import yaml
from kubernetes import client

from _harness import GROUP, REPO, VERSION, Operator, Stamps, bench_cluster, figures, poll, wait_for

JOBS = {"framework": "rljob-rlinf-run.yaml", "baseline": "rljob-heterogeneous-run.yaml"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2, help="runs of each job (alternating)")
    args = parser.parse_args()
    with bench_cluster() as (api, kubeconfig):
        core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        if not core.list_node(label_selector="rlplace.io/real-node=true").items:
            raise SystemExit("error: needs a cluster with real nodes (make cluster-up)")
        kubectl = [str(REPO / ".e2e/bin/kubectl"), "--kubeconfig", kubeconfig]
        subprocess.run([*kubectl, "apply", "-f", str(REPO / "examples/nodegroups-real.yaml")], check=True)
        bodies = {
            kind: next(d for d in yaml.safe_load_all((REPO / "examples" / name).read_text()) if d)
            for kind, name in JOBS.items()
        }
        namespace = f"benchfw-{uuid.uuid4().hex[:4]}"
        core.create_namespace({"metadata": {"name": namespace}})
        operator = Operator(kubeconfig, REPO / ".e2e" / f"operator-{namespace}.log")
        stamps = {kind: Stamps() for kind in JOBS}
        created: dict[str, dict[str, float]] = {kind: {} for kind in JOBS}
        try:
            wait_for(lambda: core.list_namespaced_service_account(namespace).items, 60, "default ServiceAccount")
            for i in range(args.runs):
                for kind, body in bodies.items():
                    name = f"{kind[:2]}-{i:02d}"
                    stop = threading.Event()
                    poller = threading.Thread(target=poll, args=(custom, namespace, stamps[kind], stop), daemon=True)
                    poller.start()
                    try:
                        created[kind][name] = time.perf_counter()
                        custom.create_namespaced_custom_object(
                            GROUP, VERSION, namespace, "rljobs", {**body, "metadata": {"name": name}}
                        )
                        wait_for(
                            lambda n=name, k=kind: n in stamps[k].seen.get("rljob-ended", {}), 600, f"{name} ended"
                        )
                        status = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "rljobs", name)[
                            "status"
                        ]
                        if status.get("phase") != "Succeeded":
                            raise SystemExit(f"error: {name} did not succeed: {status.get('message')}")
                    finally:
                        stop.set()
                        poller.join()
                    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "rljobs", name)
                    wait_for(lambda: not core.list_namespaced_pod(namespace).items, 300, f"{name}'s pods gone")
        finally:
            operator.stop()
            core.delete_namespace(namespace)
    print(f"{args.runs} runs of each, one at a time, on the real nodes; p50 / p95 seconds from the create call")
    print(f"  {'':<40} {'RLinf program (framework)':>26}   {'rlplace driver (baseline)':>26}")
    for label, stage in (
        ("to driver submitted (RayJob Running)", "submitted"),
        ("to every process verified", "rljob-verified"),
        ("to phase Succeeded", "rljob-ended"),
    ):
        mine = stamps["framework"].latencies(stage, created["framework"])
        base = stamps["baseline"].latencies(stage, created["baseline"])
        ratio = f"   p50 {statistics.median(mine) / statistics.median(base):.2f}x baseline" if mine and base else ""
        print(f"  {label:<40} {figures(mine, args.runs):>26}   {figures(base, args.runs):>26}{ratio}")


if __name__ == "__main__":
    main()

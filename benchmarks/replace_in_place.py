"""A lost rollout replica replaced while the job runs, beside today's restart from the checkpoint, in one run.

    KUBECONFIG=.e2e/kubeconfig .venv/bin/python benchmarks/replace_in_place.py [--steps 60] [--every 10] [--seed 1]

On a local cluster of `make cluster-up` (its real nodes), the operator started from this tree, and
examples/rljob-replace-run.yaml laid out as the issue asks: the actor on one node (the CPU-only real node), the
rollout on two (eight ranks on each real GPU node, `nodeGroup: real-a800,real-4090`), the reference driver's steps
of about a second, a checkpoint every `--every`. Three runs, the loss at a random step of each (the seed's), on
the rollout's pod of a GPU node that does not run the Ray head (half the rollout):

- restart: rollout RestartJob (the job as it was before Replace), its worker pod force-deleted: the job restarts
  from its last checkpoint. Figures: seconds from the loss to the first step after the resume, steps repeated.
- replace, pod: rollout Replace, the same pod force-deleted (KubeRay makes it again on its node).
- replace, node: rollout Replace, its node cordoned and its kubelet stopped for 60 s, then started and uncordoned
  (the pod's processes run on meanwhile, as they do on a node whose kubelet died; Kubernetes marks the node
  NotReady and the pod not Ready).

For the replace runs: the phases seen from the loss on (goal: Running only), steps lost or reported twice (goal:
every step once, in order), seconds from the loss to the replaced ranks' `replaced:` line and to the first step
in which all eight rollout replicas generated again (goal for a deleted pod: 60 s), and the iteration time of the
steps before the loss, while replicas were missing, and after. A pod whose node only went NotReady keeps its
processes (nothing is replaced: the status says `RanksBack` once it is Ready again). Times come from the driver's log as the container
runtime stamped each line (`kubectl logs --timestamps`). Prints figures; it is not a test.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import os
import random
import re
import shutil
import statistics
import subprocess
import threading
import time
import uuid
from pathlib import Path

import yaml
from kubernetes import client

from _harness import (
    GROUP,
    REPO,
    VERSION,
    Line,
    Operator,
    bench_cluster,
    driver_lines,
    steps_of,
    wait_for,
    with_real_nodes,
)

CHECKPOINTS = Path("/var/tmp/rlplace-bench-checkpoints")
ROLLOUT_NODES = ("real-4090-0", "real-a800-0")
#: The actor on the CPU-only real node, the rollout's sixteen ranks over both real GPU nodes.
LAYOUT = [
    {"components": "actor", "nodeGroup": "real-cpu", "placement": "0"},
    {"components": "rollout", "nodeGroup": "real-a800,real-4090", "placement": "0-15"},
]
ROLLOUT_LIVE = re.compile(r"rollout (\d+)/(\d+) live")


@dataclasses.dataclass
class Outcome:
    kind: str
    loss_step: int
    lost_at: dt.datetime
    phases: list[str]
    status: dict
    lines: list[Line]
    """The driver's log of every attempt the run saw, in order."""


def job_body(namespace: str, name: str, steps: int, every: int, replace: bool) -> dict:
    (body,) = [d for d in yaml.safe_load_all((REPO / "examples/rljob-replace-run.yaml").read_text()) if d]
    directory = CHECKPOINTS / namespace / name
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o1777)
    body["metadata"] = {"name": name}
    body["spec"]["checkpoint"]["volume"]["hostPath"]["path"] = str(directory)
    body["spec"]["entrypoint"] = f"python -m placement_core.launcher.demo --steps {steps} --checkpoint-every {every}"
    body["spec"]["nodeGroups"] = ["real-cpu", "real-a800", "real-4090"]
    body["spec"]["componentPlacement"] = LAYOUT
    if not replace:
        del body["spec"]["components"]
    return body


def component(kubeconfig: str, verb: str, name: str) -> None:
    """e2e/cluster/component.sh on the local cluster whose state dir holds `kubeconfig` (cluster-up writes it
    there)."""
    env = {**os.environ, "RLPLACE_E2E_DIR": str(Path(kubeconfig).resolve().parent)}
    subprocess.run(["bash", str(REPO / "e2e/cluster/component.sh"), verb, name], check=True, env=env)


def one_run(
    api: client.ApiClient, kubeconfig: str, namespace: str, kind: str, steps: int, every: int, loss_step: int
) -> Outcome:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    kubectl = [str(REPO / ".e2e/bin/kubectl"), "--kubeconfig", kubeconfig]
    name = kind

    def status() -> dict:
        return custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "rljobs", name).get("status") or {}

    body = job_body(namespace, name, steps, every, replace=kind != "restart")
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "rljobs", body)
    reached = re.compile(rf"^step {loss_step}/", re.MULTILINE)
    wait_for(lambda: reached.search(log_text(kubectl, namespace, name)), 600, f"{kind}: step {loss_step}")
    before = driver_lines(kubectl, namespace, name)
    phases: list[str] = []
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            phase = status().get("phase") or ""
            if not phases or phases[-1] != phase:
                phases.append(phase)
            time.sleep(1)

    watcher = threading.Thread(target=watch, daemon=True)
    pods = core.list_namespaced_pod(namespace, label_selector=f"rlplace.io/job={name}").items
    # Half the rollout: the GPU node whose pod holds no head (the head's loss restarts any job, by design).
    heads = {p.spec.node_name for p in pods if (p.metadata.labels or {}).get("ray.io/node-type") == "head"}
    lost_node = next(n for n in ROLLOUT_NODES if n not in heads)
    workers = [p for p in pods if (p.metadata.labels or {}).get("ray.io/node-type") == "worker"]
    (pod,) = [p for p in workers if p.spec.node_name == lost_node]
    lost_at = dt.datetime.now(dt.UTC)
    if kind == "replace-node":
        core.patch_node(lost_node, {"spec": {"unschedulable": True}})
        component(kubeconfig, "stop", f"kubelet@{lost_node}")
        watcher.start()
        time.sleep(60)
        component(kubeconfig, "start", f"kubelet@{lost_node}")
        core.patch_node(lost_node, {"spec": {"unschedulable": None}})
    else:
        core.delete_namespaced_pod(pod.metadata.name, namespace, grace_period_seconds=0)
        watcher.start()
    try:
        wait_for(lambda: status().get("phase") in ("Succeeded", "Failed"), 900, f"{kind}: the job's end")
    finally:
        stop.set()
        watcher.join()
    after = driver_lines(kubectl, namespace, name)
    # A restart makes a new RayJob (its own log): keep the first attempt's lines read before the loss.
    lines = after if any(line.text == before[0].text for line in after[:1]) else [*before, *after]
    return Outcome(kind, loss_step, lost_at, phases, status(), lines)


def log_text(kubectl: list[str], namespace: str, job: str) -> str:
    return subprocess.run([*kubectl, "logs", "-n", namespace, f"job/{job}"], capture_output=True, text=True).stdout


def mean(values: list[float]) -> str:
    return f"{statistics.fmean(values):5.2f}" if values else "    -"


def report(outcome: Outcome, steps: int) -> None:
    seen = steps_of(outcome.lines)
    numbers = [s for s, *_ in seen]
    print(f"{outcome.kind}: loss at step {outcome.loss_step}, ended {outcome.status.get('phase')}, "
          f"attempts {outcome.status.get('attempts')}, phases from the loss: {' -> '.join(outcome.phases)}")  # fmt: skip
    if outcome.kind == "restart":
        resumed = [at for _, attempt, _, at, _ in seen if attempt == 2]
        summary = [line.text for line in outcome.lines if line.text.startswith("summary:")]
        first = (resumed[0] - outcome.lost_at).total_seconds() if resumed else float("nan")
        print(f"  first step after the resume {first:6.1f} s after the loss; {summary[-1] if summary else ''}")
        return
    missing = sorted(set(range(1, steps + 1)) - set(numbers))
    twice = sorted({n for n in numbers if numbers.count(n) > 1})
    print(f"  steps reported {len(numbers)}, lost {missing or 'none'}, twice {twice or 'none'}, "
          f"in order {numbers == sorted(numbers)}")  # fmt: skip
    replaced = [line.at for line in outcome.lines if line.text.startswith("replaced: component 'rollout'")]
    full_after = [
        at
        for _, _, _, at, rest in seen
        if at > outcome.lost_at and (m := ROLLOUT_LIVE.search(rest)) and m[1] == m[2] and replaced and at > replaced[0]
    ]
    to_replaced = (replaced[-1] - outcome.lost_at).total_seconds() if replaced else float("nan")
    to_full = (full_after[0] - outcome.lost_at).total_seconds() if full_after else float("nan")
    print(
        f"  loss -> ranks replaced {to_replaced:6.1f} s; loss -> first step with every rollout replica {to_full:6.1f} s"
    )
    before = [t for _, _, t, at, _ in seen if at <= outcome.lost_at][-5:]
    during = [t for _, _, t, at, _ in seen if outcome.lost_at < at and (not full_after or at < full_after[0])]
    after = [t for _, _, t, at, _ in seen if full_after and at >= full_after[0]][:5]
    print(f"  iteration s: 5 before the loss {mean(before)}, while replicas were missing {mean(during)} "
          f"({len(during)} steps), 5 after {mean(after)}")  # fmt: skip


RUNS = ("restart", "replace-pod", "replace-node")


def run(api: client.ApiClient, kubeconfig: str, steps: int, every: int, seed: int, runs: list[str]) -> None:
    core = client.CoreV1Api(api)
    with_real_nodes(api, kubeconfig)
    rng = random.Random(seed)
    namespace = f"benchreplace-{uuid.uuid4().hex[:4]}"
    core.create_namespace({"metadata": {"name": namespace}})
    operator = Operator(kubeconfig, REPO / ".e2e" / f"operator-{namespace}.log")
    outcomes = []
    try:
        wait_for(lambda: core.list_namespaced_service_account(namespace).items, 60, "default ServiceAccount")
        for kind in RUNS:
            loss_step = rng.randrange(every + 2, steps // 2)
            if kind in runs:
                outcomes.append(one_run(api, kubeconfig, namespace, kind, steps, every, loss_step))
    finally:
        operator.stop()
        for node in ROLLOUT_NODES:
            core.patch_node(node, {"spec": {"unschedulable": None}})
        core.delete_namespace(namespace)
        shutil.rmtree(CHECKPOINTS / namespace, ignore_errors=True)
    print(f"examples/rljob-replace-run.yaml: {steps} steps, a checkpoint every {every}, seed {seed}")
    for outcome in outcomes:
        report(outcome, steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--every", type=int, default=10)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--runs", default=",".join(RUNS), help="comma-separated, of: " + ", ".join(RUNS))
    args = parser.parse_args()
    runs = [r.strip() for r in args.runs.split(",") if r.strip()]
    if unknown := [r for r in runs if r not in RUNS]:
        parser.error(f"unknown run {unknown[0]!r} (known: {'; '.join(RUNS)})")
    with bench_cluster() as (api, kubeconfig):
        run(api, kubeconfig, args.steps, args.every, args.seed, runs)


if __name__ == "__main__":
    main()

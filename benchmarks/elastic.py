"""A bottleneck rollout grown while the job runs (in place, by the elastic loop), against the same growth by a
restart from the checkpoint and against no growth, in one run on the local cluster's real nodes.

    KUBECONFIG=.e2e/kubeconfig .venv/bin/python benchmarks/elastic.py [--steps 200] [--free-at 30] [--runs ...]

On a local cluster of `make cluster-up` (its real nodes), the operator installed with its chart from the image
of this tree (as the e2e runs it). The job is the
reference driver's synthetic workload (its step times follow declared laws, placement_core/launcher/synthetic.py:
not a model): the actor on the CPU-only real node (0.1 s per step), the rollout on a NodeGroup of the two real GPU
nodes (real-4090-0 first), eight replicas of one GPU on real-4090-0 at the start, `8/g` s per step (1 s on eight
GPUs, 0.5 s on sixteen): the rollout is the bottleneck. real-a800-0 is held by another job at the start (a RayCluster
of its own); at step `--free-at` that job is deleted: free GPUs appear mid-run (free for the queue once the
job is gone; its pods may still be stopping). The runs, one after the other:

- static: the job as written, no elastic loop: eight replicas to the end.
- restart: the rollout RestartJob, a checkpoint every 10 steps; once real-a800-0 is free its placement is widened
  to sixteen GPUs as soon as that job is gone (what a restart-based re-placement does, with no time spent
  deciding): a change beyond replicas, so the job restarts on the new plan from its last checkpoint.
- in-place: the rollout Replace with the range 8..16, spec.elastic on: the loop grows it 8 -> 16 when the queue
  has room for it, the new ranks start on real-a800-0, and the driver uses them from its next step.
- shrink: the job at sixteen replicas, a job queued for real-a800-0 behind it; at step 10 the rollout is patched
  to 8: seconds until the queued job is admitted and until its pods run.

Figures per run: the time from step 1 to the last step (against static, of the same run), the iteration time
before and after the change; for the changes, seconds from the decision (the loop's status.resizes entry, or the
patch) to the first step that used sixteen rollout GPUs, and the steps lost (reported twice or not at all in
place; redone after the restart). Times come from the driver's log as the container runtime stamped each line.
Prints figures; it is not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime as dt
import re
import shutil
import statistics
import threading
import uuid
from pathlib import Path

import yaml
from kubernetes import client

from _harness import GROUP, REPO, VERSION, Line, bench_cluster, driver_lines, steps_of, wait_for, with_real_nodes
from rlplace_fixtures import InClusterOperator, operator_image_on_real_nodes

CHECKPOINTS = Path("/var/tmp/rlplace-bench-checkpoints")
GROWN_ON = "real-a800-0"
LAWS = "--workload synthetic --law actor=0.1 --law rollout=8/g"
ROLLOUT_LIVE = re.compile(r"rollout (\d+)/(\d+) live")
RUNS = ("static", "restart", "in-place", "shrink")
#: The job of the a800 node: a RayCluster only (no driver), so it holds the node and costs little CPU.
BLOCKER = {"nodeGroups": ["real-a800"], "componentPlacement": [{"components": "actor", "placement": "0-7"}]}


@dataclasses.dataclass
class Outcome:
    kind: str
    lines: list[Line]
    status: dict
    decided_at: dt.datetime | None = None
    """When the change was decided: the loop's resize, or the benchmark's patch."""
    freed_at: dt.datetime | None = None
    """When real-a800-0 was free (the other job's pods gone)."""
    admitted_after: float | None = None
    """shrink: seconds from the patch to the queued job's admission."""
    running_after: float | None = None
    """shrink: seconds from the patch to the queued job's pods running."""


class Bench:
    def __init__(self, api: client.ApiClient, kubeconfig: str, namespace: str, pair: str, steps: int) -> None:
        self.core, self.custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
        self.kubectl = [str(REPO / ".e2e/bin/kubectl"), "--kubeconfig", kubeconfig]
        self.namespace, self.pair, self.steps = namespace, pair, steps

    def status(self, name: str) -> dict:
        return (
            self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, "rljobs", name).get("status") or {}
        )

    def create(self, body: dict) -> None:
        self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, "rljobs", body)

    def delete(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, "rljobs", name)

    def patch(self, name: str, patch: list[dict]) -> dt.datetime:
        self.custom.patch_namespaced_custom_object(
            GROUP, VERSION, self.namespace, "rljobs", name, patch, _content_type="application/json-patch+json"
        )
        return dt.datetime.now(dt.UTC)

    def job(self, name: str, kind: str) -> dict:
        (body,) = [d for d in yaml.safe_load_all((REPO / "examples/rljob-replace-run.yaml").read_text()) if d]
        directory = CHECKPOINTS / self.namespace / name
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o1777)
        spec = body["spec"]
        body["metadata"] = {"name": name}
        spec["checkpoint"]["volume"]["hostPath"]["path"] = str(directory)
        spec["entrypoint"] = f"python -m placement_core.launcher.demo --steps {self.steps} --checkpoint-every 10 {LAWS}"
        spec["nodeGroups"] = ["real-cpu", self.pair]
        rollout = {"components": "rollout", "nodeGroup": self.pair, "placement": "0-7"}
        spec["componentPlacement"] = [{"components": "actor", "nodeGroup": "real-cpu", "placement": "0"}, rollout]
        spec["run"]["activeDeadlineSeconds"] = 1800
        ranged = {"name": "rollout", "onLoss": "Replace", "minReplicas": 8, "maxReplicas": 16}
        if kind == "restart":
            del spec["components"]
        elif kind == "in-place":
            spec["components"] = [ranged]
            spec["elastic"] = {"enabled": True}
        elif kind == "shrink":
            spec["components"] = [{**ranged, "replicas": 16}]
        else:
            spec["components"] = [ranged]
        return body

    def blocker(self, name: str) -> dict:
        (example,) = [d for d in yaml.safe_load_all((REPO / "examples/rljob-replace-run.yaml").read_text()) if d]
        spec = {**BLOCKER, "ray": example["spec"]["ray"]}  # the example's small pods
        return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "RLJob", "metadata": {"name": name}, "spec": spec}

    def exists(self, name: str) -> bool:
        try:
            self.status(name)
        except client.ApiException:
            return False
        return True

    def node_free(self) -> bool:
        pods = self.core.list_namespaced_pod(self.namespace, field_selector=f"spec.nodeName={GROWN_ON}").items
        return not pods

    def at_step(self, name: str, step: int, timeout: float) -> None:
        reached = re.compile(rf"^step {step}/", re.MULTILINE)
        wait_for(lambda: any(reached.match(line.text) for line in driver_lines(self.kubectl, self.namespace, name)),
                 timeout, f"{name}: step {step}")  # fmt: skip


class LogKeeper:
    """The driver's log, read every few seconds while the job runs: a restart's new driver replaces the old one's
    submitter Job (and its log), so the lines are kept as they are read."""

    def __init__(self, bench: Bench, name: str) -> None:
        self.bench, self.name = bench, name
        self.seen: dict[tuple[dt.datetime, str], Line] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def read(self) -> None:
        for line in driver_lines(self.bench.kubectl, self.bench.namespace, self.name):
            self.seen.setdefault((line.at, line.text), line)

    def run(self) -> None:
        while not self.stop.wait(3):
            self.read()

    def lines(self) -> list[Line]:
        self.stop.set()
        self.thread.join()
        self.read()
        return sorted(self.seen.values(), key=lambda line: line.at)


def one_run(bench: Bench, kind: str, free_at: int) -> Outcome:
    name, held = kind, f"{kind}-a800"
    bench.create(bench.blocker(held))
    wait_for(lambda: bench.status(held).get("phase") == "Running", 300, f"{held} running")
    if kind == "shrink":
        bench.delete(held)
        wait_for(bench.node_free, 180, f"{GROWN_ON} free")
    bench.create(bench.job(name, kind))
    wait_for(lambda: bench.status(name).get("phase") == "Running", 300, f"{name} running")
    keeper = LogKeeper(bench, name)
    outcome = Outcome(kind, [], {})
    if kind == "shrink":
        bench.at_step(name, 10, 600)
        bench.create(bench.blocker(held))
        wait_for(lambda: bench.status(held).get("phase") == "Queued", 60, f"{held} queued")
        patch = [{"op": "replace", "path": "/spec/components/0/replicas", "value": 8}]
        outcome.decided_at = at = bench.patch(name, patch)
        wait_for(lambda: bench.status(held).get("phase") in ("Provisioning", "Running"), 300, f"{held} admitted")
        outcome.admitted_after = (dt.datetime.now(dt.UTC) - at).total_seconds()
        wait_for(lambda: bench.status(held).get("phase") == "Running", 300, f"{held} running")
        outcome.running_after = (dt.datetime.now(dt.UTC) - at).total_seconds()
        outcome.lines, outcome.status = keeper.lines(), bench.status(name)
        for job in (name, held):  # measured: its steps to the end would say nothing more
            bench.delete(job)
        return outcome
    else:
        bench.at_step(name, free_at, 600)
        bench.delete(held)
        # Free for the queue once the other job is gone (its pods may still be stopping).
        wait_for(lambda: not bench.exists(held), 180, f"{held} gone")
        outcome.freed_at = dt.datetime.now(dt.UTC)
        if kind == "restart":
            rollout = {"components": "rollout", "nodeGroup": bench.pair, "placement": "0-15"}
            outcome.decided_at = bench.patch(
                name, [{"op": "replace", "path": "/spec/componentPlacement/1", "value": rollout}]
            )
    wait_for(lambda: bench.status(name).get("phase") in ("Succeeded", "Failed"), 1800, f"{name}: the end")
    outcome.lines, outcome.status = keeper.lines(), bench.status(name)
    if kind == "in-place":
        resizes = outcome.status.get("resizes") or []
        if resizes:
            outcome.decided_at = dt.datetime.fromisoformat(resizes[0]["time"].replace("Z", "+00:00"))
    with contextlib.suppress(client.ApiException):  # the shrink's queued job, or a job never deleted
        bench.delete(held)
    return outcome


def mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def report(outcome: Outcome, static_seconds: float | None) -> float | None:
    seen = steps_of(outcome.lines)
    phase, attempts = outcome.status.get("phase"), outcome.status.get("attempts")
    print(f"{outcome.kind}: ended {phase}, attempts {attempts}")
    if not seen:
        print("  no step line read")
        return None
    last = max(seen, key=lambda s: (s[0], s[3]))
    took = (last[3] - seen[0][3]).total_seconds()
    against = f" ({took / static_seconds:.2f}x static)" if static_seconds else ""
    print(f"  step 1 -> step {last[0]}: {took:6.1f} s{against}")
    if outcome.kind == "shrink":
        print(f"  patch 16 -> 8 -> the queued job admitted {outcome.admitted_after:5.1f} s, "
              f"its pods running {outcome.running_after:5.1f} s")  # fmt: skip
        return took
    if outcome.decided_at is None:
        first = [s[2] for s in seen[2:12]]
        rest = [s[2] for s in seen[-10:]]
        print(f"  iteration s: steps 3-12 {mean(first):5.2f}, last 10 {mean(rest):5.2f}")
        return took
    decided = outcome.decided_at
    if outcome.kind == "in-place":
        grown = [s for s in seen if s[3] > decided and (m := ROLLOUT_LIVE.search(s[4])) and m[1] == m[2] == "16"]
    else:
        # The new driver prints its process table before its first step.
        started = [
            line.at for line in outcome.lines if line.at > decided and line.text.split()[:2] == ["component", "RANK"]
        ]
        grown = [s for s in seen if started and s[3] > started[0]]
    to_grown = (grown[0][3] - decided).total_seconds() if grown else float("nan")
    freed = (decided - outcome.freed_at).total_seconds() if outcome.freed_at else float("nan")
    numbers = [s[0] for s in seen]
    if outcome.kind == "in-place":
        missing = sorted(set(range(1, last[0] + 1)) - set(numbers))
        twice = sorted({n for n in numbers if numbers.count(n) > 1})
        lost = f"steps missing {len(missing)}, reported twice {len(twice)}"
    else:
        before_restart = [s[0] for s in seen if not grown or s[3] < grown[0][3]]
        redone = max(before_restart) - grown[0][0] + 1 if before_restart and grown else float("nan")
        lost = f"steps redone after the restart {redone}"
    before = [s[2] for s in seen if s[3] <= decided][-10:]
    after = [s[2] for s in grown[2:12]]
    print(
        f"  node free -> decision {freed:5.1f} s; decision -> first step on 16 rollout GPUs {to_grown:5.1f} s; {lost}"
    )
    print(f"  iteration s: 10 before the decision {mean(before):5.2f}, 10 on 16 GPUs {mean(after):5.2f}")
    return took


def run(api: client.ApiClient, kubeconfig: str, steps: int, free_at: int, runs: list[str]) -> None:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    with_real_nodes(api, kubeconfig)
    namespace = f"benchelastic-{uuid.uuid4().hex[:4]}"
    pair = f"{namespace}-pair"
    selector = {"matchExpressions": [{"key": "rlplace.io/real-gpu-type", "operator": "In", "values": ["a800", "4090"]}]}
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "NodeGroup", "metadata": {"name": pair}}
    custom.create_cluster_custom_object(GROUP, VERSION, "nodegroups", {**body, "spec": {"nodeSelector": selector}})
    core.create_namespace({"metadata": {"name": namespace}})
    # In the cluster, as the e2e runs it (the chart on a real node): the drivers' progress reports, which the loop
    # decides on, reach it there (a local process's endpoint no pod can reach).
    image = operator_image_on_real_nodes(kubeconfig)
    if image is None:
        raise SystemExit("error: no real node has the operator image (make cluster-up imports it)")
    operator = InClusterOperator(kubeconfig, image, REPO / ".e2e" / f"operator-{namespace}.log")
    operator.start()
    bench = Bench(api, kubeconfig, namespace, pair, steps)
    try:
        wait_for(lambda: core.list_namespaced_service_account(namespace).items, 60, "default ServiceAccount")
        print(f"synthetic job ({LAWS}), {steps} steps, {GROWN_ON} freed at step {free_at}", flush=True)
        static = None
        for kind in RUNS:
            if kind in runs:
                # Each run's figures as soon as it ends (static's first: the others are compared with it).
                took = report(one_run(bench, kind, free_at), static)
                static = took if kind == "static" else static
    finally:
        core.delete_namespace(namespace)
        wait_for(lambda: not _exists(core, namespace), 300, f"namespace {namespace} gone")
        operator.stop()
        custom.delete_cluster_custom_object(GROUP, VERSION, "nodegroups", pair)
        shutil.rmtree(CHECKPOINTS / namespace, ignore_errors=True)


def _exists(core: client.CoreV1Api, namespace: str) -> bool:
    try:
        core.read_namespace(namespace)
    except client.ApiException:
        return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--free-at", type=int, default=30, help="the step at which real-a800-0 is freed")
    parser.add_argument("--runs", default=",".join(RUNS), help="comma-separated, of: " + ", ".join(RUNS))
    args = parser.parse_args()
    runs = [r.strip() for r in args.runs.split(",") if r.strip()]
    if unknown := [r for r in runs if r not in RUNS]:
        parser.error(f"unknown run {unknown[0]!r} (known: {'; '.join(RUNS)})")
    if not 10 < args.free_at < args.steps:
        parser.error("--free-at must be above 10 and below --steps")
    with bench_cluster() as (api, kubeconfig):
        run(api, kubeconfig, args.steps, args.free_at, runs)


if __name__ == "__main__":
    main()

"""What one scrape of the operator's /metrics costs with many jobs: the time to render it and the memory that
takes, with every job Running, reporting progress and holding a node of one of four NodeGroups.

Each job's series are rendered once per change of its status or progress and kept as text (server/metrics.py,
Exposition); a scrape renders only the rest (NodeGroups, waiting times, the operator's counters) and joins the
kept text. The baseline, measured in the same run, renders every job's series anew at each scrape (what a
registry of collectors does); `first ms` is the first scrape, which renders every job once. The goal is under
100 ms and under 5 MB at 1,000 jobs. Rendering runs in a thread beside kopf's event loop, so its time is the
scrape's latency, not a pause of the operator. `peak MB` is the largest Python allocation during one scrape
(tracemalloc); `body MB` the size of the text Prometheus reads.

    .venv/bin/python benchmarks/metrics_scrape.py [--jobs 100,1000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import time
import tracemalloc
from collections.abc import Callable

from placement_core.observe.progress import ComponentTime, IterationReport
from rlplace_operator.admission.ledger import Holding, Ledger
from rlplace_operator.api.nodegroup import NodeGroupSpec
from rlplace_operator.cluster.selection import NodeInfo, nodegroup_wire_status
from rlplace_operator.cluster.snapshot import Snapshot
from rlplace_operator.server.metrics import Exposition, OperatorMetrics
from rlplace_operator.server.progress import ProgressService, Window

GROUPS = 4
COMPONENTS = ("actor", "rollout", "inference")
NODES_PER_JOB = 1


def node(name: str, group: str) -> dict:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, "bench/group": group}},
        "status": {
            "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110", "nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def status(job: int) -> dict:
    at = "2026-11-29T10:00:00Z"
    return {
        "phase": "Running",
        "rayCluster": f"job-{job}",
        "gpus": 8,
        "predictedIterationTime": 10.0,
        "placement": {
            "mode": "disaggregated",
            "components": [{"name": c, "processes": 2, "gpus": 2, "nodes": [f"n{job}"]} for c in COMPONENTS],
        },
        "binding": [{"name": c, "verified": 2, "processes": 2} for c in COMPONENTS],
        "restarts": [{"attempt": 2, "time": at, "reason": "HeadPodReplaced", "message": "head pod replaced"}],
        "conditions": [
            {"type": t, "status": "True", "reason": t, "message": "", "lastTransitionTime": at}
            for t in ("Validated", "Placed", "Admitted", "RayClusterReady", "BindingVerified")
        ],
    }


def fleet(jobs: int) -> tuple[Snapshot, ProgressService]:
    per_group = -(-jobs * NODES_PER_JOB // GROUPS)
    bodies = [node(f"n{i}", f"g{i // per_group}") for i in range(per_group * GROUPS)]
    infos = [NodeInfo.from_body(b) for b in bodies]
    nodegroups = {}
    for g in range(GROUPS):
        spec = {"nodeSelector": {"matchLabels": {"bench/group": f"g{g}"}}}
        wire = nodegroup_wire_status(NodeGroupSpec.model_validate(spec), infos, 1, set(), {}, None)
        nodegroups[f"g{g}"] = [(spec, wire)]
    rljobs = {
        ("bench", f"job-{j}"): [
            {
                "uid": f"u{j}",
                "spec": {},
                "nodeGroups": [f"g{j // per_group}"],
                "status": status(j),
                "created": "2026-11-29T09:59:00Z",
            }
        ]
        for j in range(jobs)
    }
    holdings = {("bench", f"job-{j}"): [Holding(frozenset({f"n{j}"}))] for j in range(jobs)}
    snapshot = Snapshot({i.name: [i] for i in infos}, nodegroups, rljobs, holdings, {})
    service = ProgressService(lambda token: None, lambda key, progress: None)  # type: ignore[arg-type,return-value]
    for j in range(jobs):
        window = service.windows[("bench", f"job-{j}")] = Window()
        for i in range(10):
            busy = tuple(ComponentTime(c, 2.0 + k + 0.1 * i) for k, c in enumerate(COMPONENTS))
            window.add(IterationReport(i, busy, iteration_seconds=10.0 + 0.1 * i, time=float(i)), now=float(i))
    return snapshot, service


def measure(render: Callable[[], bytes | bytearray], repeat: int) -> tuple[float, float, int]:
    """Best seconds of `render` over `repeat`, the peak MB of one call, the body's bytes."""
    best = float("inf")
    body = b""
    for _ in range(repeat):
        start = time.perf_counter()
        body = render()
        best = min(best, time.perf_counter() - start)
    tracemalloc.start()
    render()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return best, peak / 1e6, len(body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--jobs", default="100,1000")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(
        f"{'jobs':>6} {'series':>8} {'baseline ms':>12} {'first ms':>9} {'scrape ms':>10} {'ratio':>6}"
        f" {'peak MB':>8} {'body MB':>8}"
    )
    for jobs in (int(n) for n in args.jobs.split(",")):
        snapshot, service = fleet(jobs)
        metrics = OperatorMetrics()
        metrics.observe_pass(snapshot, Ledger(), 0.01)
        for trigger in ("timer", "rljob", "raycluster"):
            with metrics.look(trigger):
                pass
        exposition = Exposition(service, metrics)

        def anew(exposition: Exposition = exposition) -> bytes:
            exposition.rendered.clear()
            return exposition.render()

        base_s, _, _ = measure(anew, args.repeat)
        exposition.rendered.clear()
        start = time.perf_counter()
        exposition.render()
        first_s = time.perf_counter() - start
        scrape_s, peak_mb, size = measure(exposition.render, args.repeat)
        series = sum(1 for line in exposition.render().splitlines() if not line.startswith(b"#"))
        print(
            f"{jobs:>6} {series:>8} {base_s * 1e3:>12.1f} {first_s * 1e3:>9.1f} {scrape_s * 1e3:>10.1f}"
            f" {base_s / scrape_s:>6.1f} {peak_mb:>8.2f} {size / 1e6:>8.2f}"
        )


if __name__ == "__main__":
    main()

"""A reference RL driver: what an RLJob's entrypoint runs to start its components where the plan says.

    python -m placement_core.launcher.demo                    # in the Ray head: the plan the operator mounted
    python -m placement_core.launcher.demo --plan plan.json --simulate   # offline, on simulated nodes

It reads the plan, connects to Ray shipping placement_core to the workers (so worker pods may run a stock Ray
image), starts the actor, rollout and reward processes (the components of that list the plan has; all of its
components if none), and every process verifies its own binding at start. Then, as a split-placement trainer
does, the actor trains while the rollout workers call into the reward workers, both at once, and the driver
waits for the two. It prints the binding report on one line for the operator (`rlplace-binding-report: ...`)
and a table of what every process saw from inside. Exit 0: every process ran as planned; 1: a process was not
bound as planned (the report names it); 2: the plan or the Ray cluster is unusable.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import socket
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from placement_core.contract import KUBE_NODE_ENV
from placement_core.errors import PlacementError
from placement_core.launcher.errors import LaunchError
from placement_core.launcher.groups import GroupCall, WorkerGroup, binding_report, connect, launch_all
from placement_core.launcher.plan import LaunchPlan, load_plan, read_plan
from placement_core.launcher.simulated import simulated_cluster
from placement_core.launcher.verify import BindingError, BindingReport, report_line
from placement_core.plan import Plan

#: The components an RL job starts; a plan without any of them starts all of its own.
DEFAULT_COMPONENTS = ("actor", "rollout", "reward")
#: What each process reports about itself, in table order.
SEEN = ("RANK", "WORLD_SIZE", "NODE_RANK", "CLUSTER_NODE_RANK", "CUDA_VISIBLE_DEVICES", "LOCAL_HARDWARE_RANKS")
COLUMNS = ("component", *SEEN, "node", "binding")


class Worker:
    """Stands in for a training, generation or reward worker: reports what its process sees, and works a
    little so that concurrent calls can be seen to overlap."""

    def where(self) -> dict[str, str]:
        seen = {key: os.environ.get(key, "") for key in SEEN}
        return {**seen, "node": os.environ.get(KUBE_NODE_ENV) or socket.gethostname()}

    def train_step(self, seconds: float) -> tuple[float, float]:
        start = time.time()
        time.sleep(seconds)
        return start, time.time()

    def score(self, sample: int) -> float:
        time.sleep(0.05)
        return sample / 10

    def generate(self, scorers: Sequence[Any], samples: int) -> tuple[float, float, float]:
        """Call the scorers (another component's actors) for each sample, all at once: cross-component calls
        from inside a worker. Returns (start, end, total score)."""
        import ray

        start = time.time()
        refs = [scorers[i % len(scorers)].score.remote(i) for i in range(samples)]
        total = sum(ray.get(refs))
        time.sleep(0.3)
        return start, time.time(), total


def pick_components(plan: LaunchPlan, wanted: Sequence[str] | None) -> list[str]:
    """The named components, or those of DEFAULT_COMPONENTS the plan has (all of its own if none)."""
    if wanted:
        for name in wanted:
            plan.processes(name)
        return list(wanted)
    present = [name for name in DEFAULT_COMPONENTS if name in plan.plan.names]
    return present or list(plan.plan.names)


def tamper(plan: Plan, spec: str) -> Plan:
    """`plan` with one process's variable changed (`COMPONENT:RANK:VAR=VALUE`), as a wrong value that reached
    the stored plan: for showing that verification catches it."""
    try:
        where, assignment = spec.rsplit(":", 1)
        component, rank = where.split(":")
        key, value = assignment.split("=", 1)
        index = int(rank)
    except ValueError:
        raise LaunchError(f"--tamper wants COMPONENT:RANK:VAR=VALUE, got '{spec}'") from None
    target = plan.component(component)
    if not 0 <= index < target.world_size:
        raise LaunchError(f"--tamper: component '{component}' has ranks 0-{target.world_size - 1}, got {index}")
    changed = list(target.processes)
    changed[index] = dataclasses.replace(changed[index], env={**changed[index].env, key: value})
    components = tuple(
        dataclasses.replace(c, processes=tuple(changed)) if c.name == component else c for c in plan.components
    )
    return dataclasses.replace(plan, components=components)


def exercise(groups: Mapping[str, WorkerGroup]) -> str:
    """The actor trains while the rollout workers call into the reward workers, concurrently; a line saying
    how long the two overlapped."""
    names = list(groups)
    trainer = groups.get("actor") or groups[names[0]]
    generator = groups.get("rollout") or groups[names[-1]]
    scorer = groups.get("reward") or trainer
    # A worker calling its own group would wait on itself (one call at a time per actor).
    scorers = [] if scorer is generator else scorer.actors
    training: GroupCall = trainer.call("train_step", 1.0)
    generating: GroupCall = generator.call("generate", scorers, 2 * len(scorers))
    spans = [(start, end) for start, end in training.get(timeout=300)]
    spans += [(start, end) for start, end, _ in generating.get(timeout=300)]
    overlap = min(end for _, end in spans) - max(start for start, _ in spans)
    return (
        f"'{trainer.component}' train_step and '{generator.component}' -> '{scorer.component}' calls ran "
        f"concurrently: overlap {max(overlap, 0.0):.2f} s"
    )


def table(groups: Mapping[str, WorkerGroup], report: BindingReport) -> list[dict[str, str]]:
    """One row per process: what it saw from inside, and its binding verdict."""
    verdicts = {(c.component, c.rank): ("ok" if c.ok else c.problems[0]) for c in report.checks}
    calls = {name: group.call("where") for name, group in groups.items()}
    rows = []
    for name, call in calls.items():
        for rank, seen in enumerate(call.get(timeout=120)):
            rows.append({"component": name, **seen, "binding": verdicts.get((name, rank), "not checked")})
    return rows


def print_table(rows: list[dict[str, str]]) -> None:
    widths = [max(len(col), *(len(row[col]) for row in rows)) for col in COLUMNS]
    for line in [dict(zip(COLUMNS, COLUMNS, strict=True)), *rows]:
        print("  ".join(line[col].ljust(width) for col, width in zip(COLUMNS, widths, strict=True)).rstrip())


def data_seen(_actor: object = None, path: str | None = None, names: Sequence[str] = ()) -> str:
    """What this process sees of the job's data, on one line: the first line of the file at `path` (from a
    volume), the named variables (from a Secret or ConfigMap through envFrom) and the size of /dev/shm. Runs in
    the driver and, through Ray's `__ray_call__` (hence the unused actor argument), in every worker."""
    parts = [f"node={os.environ.get(KUBE_NODE_ENV) or socket.gethostname()}"]
    if path:
        try:
            lines = Path(path).read_text(errors="replace").splitlines()
            parts.append(f"{path}={(lines[0] if lines else '')[:120]!r}")
        except OSError as err:
            parts.append(f"{path}=<unreadable: {err.strerror}>")
    parts += [f"{name}={os.environ[name]!r}" if name in os.environ else f"{name}=<unset>" for name in names]
    try:
        parts.append(f"/dev/shm={shutil.disk_usage('/dev/shm').total / 2**20:.0f}MiB")
    except OSError:
        parts.append("/dev/shm=<none>")
    return " ".join(parts)


def show_data(groups: Mapping[str, WorkerGroup], path: str | None, names: Sequence[str]) -> None:
    """Print `data_seen` from the driver (the Ray head) and from every process of every group."""
    import ray

    print(f"data driver: {data_seen(None, path, names)}", flush=True)
    for name, group in groups.items():
        calls = [actor.__ray_call__.remote(data_seen, path, list(names)) for actor in group.actors]
        seen = ray.get(calls, timeout=120)
        for rank, line in enumerate(seen):
            print(f"data {name}[{rank}]: {line}", flush=True)


def run(plan: LaunchPlan, components: Sequence[str], data: tuple[str | None, Sequence[str]] | None = None) -> int:
    """Launch, report, exercise, print (and with `data`, what every process sees of the job's data: see
    `show_data`); the groups are shut down at the end."""
    try:
        groups = launch_all(plan, dict.fromkeys(components, Worker))
    except BindingError as err:
        print(report_line(err.report), flush=True)
        print(f"error: {err}", file=sys.stderr, flush=True)
        return 1
    try:
        report = binding_report(groups)
        print(report_line(report), flush=True)
        print(report.summary(), flush=True)
        print(exercise(groups), flush=True)
        if data is not None:
            show_data(groups, *data)
        print_table(table(groups, report))
    finally:
        for group in groups.values():
            group.shutdown()
    return 0


def simulated_gpus(plan: LaunchPlan) -> list[int]:
    """GPUs per node for --simulate: enough for the highest GPU any process sees (8 when it sees none)."""
    num_nodes = 1 + max(p.node_rank for _, p in plan.plan.processes())
    gpus = [0] * num_nodes
    for _, process in plan.plan.processes():
        visible = [int(v) for v in process.placement.visible_accelerators]
        gpus[process.node_rank] = max(gpus[process.node_rank], 1 + max(visible, default=7))
    return gpus


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m placement_core.launcher.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--plan", help="plan JSON file (default: $RLPLACE_PLAN, $RLPLACE_PLAN_DIR, the mount)")
    parser.add_argument("--address", default="auto", help="Ray cluster address (default: auto)")
    parser.add_argument("--components", nargs="+", help="components to start (default: actor rollout reward)")
    parser.add_argument("--simulate", action="store_true", help="simulate the plan's nodes on this machine")
    parser.add_argument("--tamper", metavar="COMPONENT:RANK:VAR=VALUE", help="inject a wrong value into the plan")
    parser.add_argument("--show-data", metavar="PATH", help="print the first line of PATH as every process reads it")
    parser.add_argument(
        "--show-env", metavar="NAME", action="append", default=[], help="print variable NAME in every process"
    )
    args = parser.parse_args(argv)
    data = (args.show_data, args.show_env) if args.show_data or args.show_env else None
    try:
        plan = load_plan(Path(args.plan).read_bytes()) if args.plan else read_plan()
        if args.tamper:
            plan = load_plan(tamper(plan.plan, args.tamper))
        components = pick_components(plan, args.components)
        if args.simulate:
            with simulated_cluster(simulated_gpus(plan), ship_code=True):
                return run(plan, components, data)
        connect(args.address, ship_code=True, logging_level="WARNING")
        return run(plan, components, data)
    except (LaunchError, PlacementError, ConnectionError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

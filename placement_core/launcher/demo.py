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

With `--steps N` it runs N training steps instead (steps.py: checkpoints and resume, progress reports, a
synthetic workload). The driver opts in to replacing lost replicas (`LaunchOptions.replace_lost`), which its
`--steps` mode supports (steps.py); a dead process of a component that is not Replace fails the driver
(`error: WorkerDiedError: component ...`, exit 2; the operator restarts the job). docs/driver.md, "Replacing lost
replicas".
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import socket
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from placement_core.contract import KUBE_NODE_ENV
from placement_core.errors import LaunchError, PlacementError, WorkerDiedError
from placement_core.launcher.demo_worker import Worker, print_table, roles, table
from placement_core.launcher.groups import (
    GroupCall,
    LaunchOptions,
    WorkerGroup,
    binding_report,
    connect,
    launch_all,
)
from placement_core.launcher.plan import LaunchPlan, load_plan, read_plan
from placement_core.launcher.simulated import simulated_cluster
from placement_core.launcher.steps import StepOptions, add_step_arguments, run_steps, step_options
from placement_core.observe.verify import BindingError, report_line
from placement_core.plan import Plan

#: The components an RL job starts; a plan without any of them starts all of its own.
DEFAULT_COMPONENTS = ("actor", "rollout", "reward")


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


def scorer_name(groups: Mapping[str, WorkerGroup]) -> str:
    return "reward" if "reward" in groups else (groups.get("actor") or groups[next(iter(groups))]).component


def exercise(groups: Mapping[str, WorkerGroup]) -> str:
    """The actor trains while the rollout workers call into the reward workers, concurrently; a line saying
    how long the two overlapped."""
    trainer, generator, scorer = roles(groups)
    scorers = list(scorer.live_actors().values()) if scorer else []
    training: GroupCall = trainer.call("train_step", 1.0)
    generating: GroupCall = generator.call("generate", scorers, 2 * len(scorers))
    spans = [(start, end) for start, end in training.get(timeout=300)]
    spans += [(start, end) for start, end, *_ in generating.get(timeout=300)]
    overlap = min(end for _, end in spans) - max(start for start, _ in spans)
    return (
        f"'{trainer.component}' train_step and '{generator.component}' -> '{scorer_name(groups)}' calls ran "
        f"concurrently: overlap {max(overlap, 0.0):.2f} s"
    )


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


def run(
    plan: LaunchPlan,
    components: Sequence[str],
    steps: StepOptions | None = None,
    data: tuple[str | None, Sequence[str]] | None = None,
) -> int:
    """Launch, report, exercise (or run `steps`), print (and with `data`, what every process sees of the job's
    data: see `show_data`); the groups are shut down at the end."""
    try:
        # Opted in: the components the plan says are Replace go on without a lost replica (run_steps).
        groups = launch_all(plan, dict.fromkeys(components, Worker), options=LaunchOptions(replace_lost=True))
    except BindingError as err:
        print(report_line(err.report), flush=True)
        print(f"error: {err}", file=sys.stderr, flush=True)
        return 1
    try:
        report = binding_report(groups)
        print(report_line(report), flush=True)
        print(report.summary(), flush=True)
        if data is not None:
            show_data(groups, *data)
        if steps is not None:
            print_table(table(groups, report))
            run_steps(groups, plan, steps)
        else:
            print(exercise(groups), flush=True)
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
    add_step_arguments(parser)
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
        steps = step_options(args, components)
        if args.simulate:
            with simulated_cluster(simulated_gpus(plan), ship_code=True):
                return run(plan, components, steps, data)
        connect(args.address, ship_code=True, logging_level="WARNING")
        return run(plan, components, steps, data)
    except WorkerDiedError as err:
        # Named as the operator reads a launcher's line from the driver's log (which rank of which component).
        print(f"error: WorkerDiedError: {err}", file=sys.stderr)
        return 2
    except (LaunchError, PlacementError, ConnectionError, OSError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

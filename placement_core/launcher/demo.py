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

With `--steps N` it runs N training steps instead (see `run_steps`): each step exercises the components, prints
one line, and reports its per-component times (`rlplace-progress: ...`, launcher.progress); with
`--checkpoint-every K` it saves a checkpoint every K steps in $RLPLACE_CHECKPOINT_DIR (or --checkpoint-dir)
and, on a new attempt ($RLPLACE_ATTEMPT), resumes after the last one (launcher.checkpoint). When the operator
asks for a checkpoint (before it stops the job: Kueue preemption) it saves one after the step it is in; every
report carries the newest checkpoint's step. `--workload synthetic --law actor=120/g ...` makes each
component's step time follow a declared law in its GPU count (launcher.synthetic; a synthetic workload, not a
measurement).

The driver opts in to replacing lost replicas (`LaunchOptions.replace_lost`): in `--steps` mode a component
whose plan says `Replace` (rollout, reward) goes on with its live ranks while the launcher starts a lost one
again, a step's work of a rank that dies is done again by the others in the same step, a rank started again gets
the current weights before it generates, and each step line says how many replicas were live (`rollout 2/4
live`). A component that is not Replace still fails the driver (`error: WorkerDiedError: component ...`, exit 2;
the operator restarts the job). docs/driver.md, "Replacing lost replicas".
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import shutil
import socket
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from placement_core.components import sharing_groups
from placement_core.contract import CHECKPOINT_DIR_ENV, KUBE_NODE_ENV
from placement_core.errors import LaunchError, PlacementError, WorkerDiedError
from placement_core.launcher.checkpoint import CheckpointStore, attempt
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
from placement_core.launcher.synthetic import Law, component_gpus, parse_laws
from placement_core.observe.progress import LogReporter, Reporter, StepTimer, reporter_from_env
from placement_core.observe.verify import BindingError, BindingReport, report_line
from placement_core.plan import Plan

#: The components an RL job starts; a plan without any of them starts all of its own.
DEFAULT_COMPONENTS = ("actor", "rollout", "reward")
#: What each process reports about itself, in table order.
SEEN = ("RANK", "WORLD_SIZE", "NODE_RANK", "CLUSTER_NODE_RANK", "CUDA_VISIBLE_DEVICES", "LOCAL_HARDWARE_RANKS")
COLUMNS = ("component", *SEEN, "node", "binding")


class Worker:
    """Stands in for a training, generation or reward worker: reports what its process sees, and works a
    little so that concurrent calls can be seen to overlap."""

    def __init__(self) -> None:
        self.weights_version: int | None = None
        """The version of the weights this process generates with (`sync_weights`); None before the first."""

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

    def sync_weights(self, version: int) -> int:
        """Take the trainer's weights of `version` (stands in for a weight broadcast): every generating rank
        gets them each step, and a rank started again after a loss gets them before it generates."""
        self.weights_version = version
        return version

    def weights(self) -> int | None:
        return self.weights_version

    def generate(
        self, scorers: Sequence[Any], samples: int | Sequence[int], version: int | None = None
    ) -> tuple[float, float, float, dict[int, str], list[int]]:
        """Call the scorers (another component's actors) for each sample (`samples` of them, or these sample
        numbers), all at once: cross-component calls from inside a worker. A scorer that dies has its samples
        scored by the others; with none left, the samples not scored are handed back. `version`: the weights the
        step generates with; a process that has others refuses (it missed a weight sync). Returns (start, end,
        total score, index of each scorer that died -> its error, the samples not scored)."""
        import ray

        if version is not None and self.weights_version != version:
            raise RuntimeError(f"asked to generate with weights {version}, this process has {self.weights_version}")
        start = time.time()
        todo = list(range(samples)) if isinstance(samples, int) else list(samples)
        alive = list(range(len(scorers)))
        dead: dict[int, str] = {}
        total = 0.0
        while todo and alive:
            placed = [(alive[i % len(alive)], sample) for i, sample in enumerate(todo)]
            refs = [scorers[index].score.remote(sample) for index, sample in placed]
            todo = []
            for (index, sample), ref in zip(placed, refs, strict=True):
                try:
                    total += ray.get(ref)
                except ray.exceptions.RayActorError as err:
                    if isinstance(err, ray.exceptions.RayTaskError):
                        raise  # the scorer's own error, not its death
                    dead[index] = type(err).__name__
                    todo.append(sample)
            alive = [index for index in alive if index not in dead]
        time.sleep(0.3)
        return start, time.time(), total, dead, todo


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


def roles(groups: Mapping[str, WorkerGroup]) -> tuple[WorkerGroup, WorkerGroup, WorkerGroup | None]:
    """The trainer (actor, else the first component), the generator (rollout, else the last) and the scorer
    group whose actors the generator calls (reward, else the trainer; None when that is the generator itself,
    since a worker calling its own group would wait on itself: one call at a time per actor)."""
    names = list(groups)
    trainer = groups.get("actor") or groups[names[0]]
    generator = groups.get("rollout") or groups[names[-1]]
    scorer = groups.get("reward") or trainer
    return trainer, generator, None if scorer is generator else scorer


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


def table(groups: Mapping[str, WorkerGroup], report: BindingReport) -> list[dict[str, str]]:
    """One row per process: what it saw from inside, and its binding verdict."""
    verdicts = {(c.component, c.rank): ("ok" if c.ok else c.problems[0]) for c in report.checks}
    calls = {name: group.call("where") for name, group in groups.items()}
    rows = []
    for name, call in calls.items():
        for rank, seen in zip(call.ranks, call.get(timeout=120), strict=True):
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


# -- training steps: checkpoints, resume, progress, synthetic workload ------------------------------------


@dataclass(frozen=True)
class StepOptions:
    """What `--steps` mode runs."""

    steps: int
    """Steps of the whole job (across attempts), numbered 1..steps."""
    checkpoint_every: int = 0
    """Save a checkpoint after every step that is a multiple of this (0: never)."""
    store: CheckpointStore | None = None
    laws: Mapping[str, Law] | None = None
    """The synthetic workload's laws (None: the demo workload)."""
    reporter: Reporter = dataclasses.field(default_factory=LogReporter)


def weights_of(step: int) -> bytes:
    """The bytes blob a checkpoint holds, standing in for weights: derived from the step, so a resume can
    check that it got the blob saved with the step."""
    return hashlib.sha256(f"weights after step {step}".encode()).digest() * 64


def run_steps(groups: Mapping[str, WorkerGroup], plan: LaunchPlan, options: StepOptions) -> int:
    """Steps from just after the last checkpoint to `options.steps`: each exercised, timed per component,
    printed on one line and reported; a checkpoint every `checkpoint_every` steps, and after a step in which the
    reporter says the operator asked for one (the steps go on: the operator stops the job); a summary line at
    the end (steps run in this attempt, the step resumed from, steps repeated from an earlier attempt). Returns
    the number of steps run."""
    store = options.store
    last = store.latest() if store else None
    done_before = (store.last_step() if store else None) or 0
    resumed_from = 0
    total_score = 0.0
    if last is not None:
        if last.blob("weights") != weights_of(last.step):
            raise LaunchError(f"checkpoint of step {last.step} holds other weights than it saved")
        resumed_from, total_score = last.step, float(last.state.get("total_score", 0.0))
    this_attempt = store.attempt if store else 1
    first = resumed_from + 1
    gpus = {name: component_gpus(plan, name) for name in groups}
    # The newest checkpoint (this attempt's, or the one it resumed from): every report carries it.
    checkpoint_step = last.step if last is not None else None
    replaceable = [group for group in groups.values() if group.replaceable]
    for step in range(first, options.steps + 1):
        timer = StepTimer(order=list(groups))
        for group in replaceable:
            # Prints what the launcher replaced since (its lines and a fresh binding report); the generator's
            # new ranks get the step's weights like every other rank of it (synced_ranks).
            group.take_joined()
        if options.laws is None:
            total_score += demo_step(groups, timer, step)
        else:
            synthetic_step(groups, options.laws, gpus, timer, step)
        measured = timer.report(step)  # before a save: the step's time is the step's
        if store is not None:
            # Saved and noted before the step's line, so a printed step is a recorded one.
            regular = bool(options.checkpoint_every) and step % options.checkpoint_every == 0
            # The operator asks before it stops the job (Kueue preemption); the steps go on until it does.
            requested = not regular and options.reporter.checkpoint_requested()
            if regular or requested:
                store.save(step, {"total_score": total_score}, {"weights": weights_of(step)})
                checkpoint_step = step
                why = " on request" if requested else ""
                print(f"checkpoint: step {step} saved in {store.directory}{why}", flush=True)
            store.record_step(step)
        report = dataclasses.replace(measured, checkpoint_step=checkpoint_step)
        times = ", ".join(f"{c.name} {c.seconds:.2f} s" for c in report.components)
        line = (
            f"step {step}/{options.steps} (attempt {this_attempt}): {times}; iteration {report.iteration_seconds:.2f} s"
        )
        if replaceable:  # how many replicas did the work, for a reader of the log
            line += "; " + ", ".join(f"{g.component} {len(g.live_ranks)}/{len(g.processes)} live" for g in replaceable)
        print(line, flush=True)
        options.reporter.report(report)
    options.reporter.close()
    ran = max(options.steps - resumed_from, 0)
    repeated = max(min(done_before, options.steps) - resumed_from, 0)
    span = f" ({first}-{options.steps})" if ran else ""
    print(
        f"summary: attempt {this_attempt} ran {ran} steps{span}, resumed from step {resumed_from}, repeated {repeated}",
        flush=True,
    )
    return ran


def demo_step(groups: Mapping[str, WorkerGroup], timer: StepTimer, step: int = 1) -> float:
    """One step of the demo workload: `exercise`'s concurrent train / generate -> score calls, each component
    timed by its workers' own spans, the generator's ranks first given the weights the step generates with
    (those of the step before). A replaceable component is used through its live ranks (see `generate_live`).
    Returns the step's total score."""
    trainer, generator, scorer = roles(groups)
    wait_live(trainer)
    training = trainer.call("train_step", 0.2)
    score = 0.0
    if generator is not trainer:
        spans, score = generate_live(generator, scorer, step - 1, timer)
        timer.add(generator.component, max(end for _, end in spans) - min(start for start, _ in spans))
    spans = list(training.get_live(timeout=300).values()) or on_live(trainer, "train_step", 0.2)
    timer.add(trainer.component, max(end for _, end in spans) - min(start for start, _ in spans))
    return score


#: How long a step waits for a replaceable component whose every rank is lost to get one back.
LIVE_WAIT_S = 300.0


def wait_live(group: WorkerGroup, timeout_s: float | None = None) -> tuple[int, ...]:
    """The group's live ranks, once it has one: a replaceable group whose every rank is lost waits up to
    `timeout_s` (LIVE_WAIT_S) for the launcher to start one again, then LaunchError naming the component."""
    limit = LIVE_WAIT_S if timeout_s is None else timeout_s
    deadline = time.monotonic() + limit
    while not (live := group.live_ranks):
        left = deadline - time.monotonic()
        if left <= 0:
            raise LaunchError(
                f"component '{group.component}': every rank lost ({', '.join(map(str, group.lost_ranks))}) "
                f"and none started again within {limit:g} s"
            )
        group.wait_for_change(min(left, 5.0))
    return live


def on_live(group: WorkerGroup, method: str, *args: Any) -> list[Any]:
    """`method` on the group's live ranks until some rank answers: their answers (a replaceable group whose
    ranks all died during the call waits for one to be back and calls it again)."""
    while True:
        wait_live(group)
        answers = group.call(method, *args).get_live(timeout=600)
        if answers:
            return list(answers.values())


def synced_ranks(generator: WorkerGroup, synced: set[int], version: int, timer: StepTimer) -> list[int]:
    """The generator's live ranks, each holding the step's weights: the weight sync every rank gets each step,
    and that a rank started again (`take_joined`, or any live rank not synced in this step) gets before it
    generates. `synced` is the step's record of who has them; a rank that does not answer is lost."""
    synced.difference_update(generator.take_joined())  # a new process in an old rank has no weights yet
    wait_live(generator)
    missing = [rank for rank in generator.live_ranks if rank not in synced]
    if missing:
        with timer.phase(generator.component, weight_sync=True):
            sync = generator.call_each("sync_weights", {rank: (version,) for rank in missing})
            synced.update(sync.get_live(timeout=300))
    return [rank for rank in generator.live_ranks if rank in synced]


def generate_live(
    generator: WorkerGroup, scorer: WorkerGroup | None, version: int, timer: StepTimer
) -> tuple[list[tuple[float, float]], float]:
    """The step's generation: its samples (2 per scorer process per generator process, as each generator rank
    scored 2 per scorer) split over the generator's live ranks, each first given the step's weights. The share
    of a rank that dies is done again on the live ranks in the same step, and so are samples whose scorers all
    died; a scorer seen dead is marked lost (on a component that is not replaceable that is the step's
    WorkerDiedError, naming it). Returns each answer's span and the total score."""
    samples = list(range(2 * len(scorer.processes) * len(generator.processes))) if scorer else []
    synced: set[int] = set()
    spans: list[tuple[float, float]] = []
    score = 0.0
    pending = samples
    while pending or not spans:  # every sample scored, and at least one answer to time the step by
        ranks = synced_ranks(generator, synced, version, timer)
        if not ranks:
            continue  # lost while syncing: wait for one again
        scorers = scorer.live_actors() if scorer else {}
        if scorer and not scorers:
            wait_live(scorer)
            continue
        scorer_ranks, scorer_actors = list(scorers), list(scorers.values())
        shares = {rank: pending[i :: len(ranks)] for i, rank in enumerate(ranks)}
        call = generator.call_each(
            "generate", {rank: (scorer_actors, share, version) for rank, share in shares.items()}
        )
        answers = call.get_live(timeout=300)
        pending = []
        for rank, share in shares.items():
            if rank not in answers:
                synced.discard(rank)
                pending += share  # its share again, on the live ranks
                continue
            start, end, total, dead, unscored = answers[rank]
            spans.append((start, end))
            score += total
            pending += unscored
            for index, reason in dead.items():
                assert scorer is not None
                scorer.lose(scorer_ranks[index], "score", reason, scorer_actors[index])
    return spans, score


def synthetic_step(
    groups: Mapping[str, WorkerGroup],
    laws: Mapping[str, Law],
    gpus: Mapping[str, frozenset[tuple[int, int]]],
    timer: StepTimer,
    step: int = 1,
) -> None:
    """One step of the synthetic workload (launcher.synthetic): every process of a component sleeps its law's
    seconds; components sharing GPUs one after another, GPU-disjoint groups at the same time (a thread each).
    The generator's ranks first get the step's weights. On a replaceable component the live ranks also sleep
    the lost ranks' shares, in rounds (a batch split over the replicas left), a share whose rank died included."""
    _, generator, _ = roles(groups)
    errors: list[BaseException] = []

    def run_group(members: list[str]) -> None:
        try:
            for name in members:
                seconds = laws[name].seconds(len(gpus[name]))
                spans = sleep_shares(groups[name], seconds, step - 1 if groups[name] is generator else None, timer)
                timer.add(name, max(end for _, end in spans) - min(start for start, _ in spans))
        except BaseException as err:
            errors.append(err)
            raise

    threads = [threading.Thread(target=run_group, args=(members,)) for members in sharing_groups(gpus)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors and isinstance(errors[0], LaunchError):
        raise errors[0]  # a WorkerDiedError: the driver's last line names the rank
    missing = [name for name in groups if name not in timer.report(0).seconds()]
    if missing:
        raise LaunchError(f"synthetic step: no time from {', '.join(missing)} (a worker failed; see the log above)")


def sleep_shares(
    group: WorkerGroup, seconds: float, version: int | None, timer: StepTimer
) -> list[tuple[float, float]]:
    """One synthetic share (a `seconds` sleep) per process of the group, after the step's weights (`version`,
    None: not the generator); the spans. A replaceable group's live ranks take the lost ranks' shares too."""
    synced: set[int] = set()
    if not group.replaceable:
        if version is not None:
            synced_ranks(group, synced, version, timer)
        return group.run("train_step", seconds, timeout=600)
    spans: list[tuple[float, float]] = []
    left = len(group.processes)
    while left:
        ranks = synced_ranks(group, synced, version, timer) if version is not None else wait_live(group)
        answers = group.call_each("train_step", dict.fromkeys(ranks[:left], (seconds,))).get_live(timeout=600)
        synced.difference_update(set(ranks[:left]) - set(answers))
        spans += answers.values()
        left -= len(answers)
    return spans


def simulated_gpus(plan: LaunchPlan) -> list[int]:
    """GPUs per node for --simulate: enough for the highest GPU any process sees (8 when it sees none)."""
    num_nodes = 1 + max(p.node_rank for _, p in plan.plan.processes())
    gpus = [0] * num_nodes
    for _, process in plan.plan.processes():
        visible = [int(v) for v in process.placement.visible_accelerators]
        gpus[process.node_rank] = max(gpus[process.node_rank], 1 + max(visible, default=7))
    return gpus


def add_step_arguments(parser: argparse.ArgumentParser) -> None:
    steps = parser.add_argument_group("training steps (see docs/driver.md)")
    steps.add_argument("--steps", type=int, metavar="N", help="run N steps (resuming after the last checkpoint)")
    steps.add_argument("--checkpoint-every", type=int, default=0, metavar="K", help="checkpoint every K steps")
    steps.add_argument("--checkpoint-dir", help="checkpoint directory (default: $RLPLACE_CHECKPOINT_DIR)")
    steps.add_argument("--keep", type=int, default=3, help="checkpoints kept (default: 3)")
    steps.add_argument(
        "--workload", choices=("demo", "synthetic"), default="demo", help="what a step does (default: demo)"
    )
    steps.add_argument(
        "--law",
        action="append",
        default=[],
        metavar="COMPONENT=EXPR",
        help="synthetic step time in seconds over the component's GPU count g: A/g, A/g+B or B",
    )


def step_options(args: argparse.Namespace, components: Sequence[str]) -> StepOptions | None:
    """The --steps mode's options, checked together; None without --steps."""
    if args.steps is None:
        for flag, given in (("--checkpoint-every", args.checkpoint_every), ("--law", args.law)):
            if given:
                raise LaunchError(f"{flag} needs --steps")
        if args.workload != "demo":
            raise LaunchError("--workload synthetic needs --steps")
        return None
    if args.steps < 1 or args.checkpoint_every < 0:
        raise LaunchError(
            f"--steps must be 1 or more and --checkpoint-every 0 or more, got {args.steps}, {args.checkpoint_every}"
        )
    if args.law and args.workload != "synthetic":
        raise LaunchError("--law needs --workload synthetic")
    laws = parse_laws(args.law, components) if args.workload == "synthetic" else None
    directory = args.checkpoint_dir or os.environ.get(CHECKPOINT_DIR_ENV)
    if args.checkpoint_every and not directory:
        raise LaunchError(
            f"--checkpoint-every needs a checkpoint directory (--checkpoint-dir or ${CHECKPOINT_DIR_ENV})"
        )
    store = CheckpointStore(directory, args.keep, attempt()) if directory else None
    return StepOptions(args.steps, args.checkpoint_every, store, laws, reporter_from_env())


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

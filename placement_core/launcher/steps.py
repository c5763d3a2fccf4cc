"""The reference driver's `--steps` mode (`python -m placement_core.launcher.demo --steps N`): training steps
up to N, resumable, each timed per component and reported (docs/driver.md, "The reference driver").

Each step exercises the components, prints one line, and reports its per-component times (`rlplace-progress:
...`, observe.progress); with `--checkpoint-every K` it saves a checkpoint every K steps in
$RLPLACE_CHECKPOINT_DIR (or --checkpoint-dir) and, on a new attempt ($RLPLACE_ATTEMPT), resumes after the last
one (launcher.checkpoint). When the operator asks for a checkpoint (before it stops the job: Kueue preemption)
it saves one after the step it is in; every report carries the newest checkpoint's step. `--workload synthetic
--law actor=120/g ...` makes each component's step time follow a declared law in its GPU count
(launcher.synthetic; a synthetic workload, not a measurement).

A component whose plan says `Replace` (rollout, reward) goes on with its live ranks while the launcher starts a
lost one again: a step's work of a rank that dies is done again by the others in the same step, a rank started
again gets the current weights before it generates, and each step line says how many replicas were live
(`rollout 2/4 live`). After a step took replaced ranks the process table is printed again: every live process
with its PID, so that the log shows that the ranks not replaced kept their processes. docs/driver.md,
"Replacing lost replicas".
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from placement_core.components import sharing_groups
from placement_core.contract import CHECKPOINT_DIR_ENV
from placement_core.errors import LaunchError
from placement_core.launcher.checkpoint import CheckpointStore, attempt
from placement_core.launcher.demo_worker import print_table, roles, table
from placement_core.launcher.groups import WorkerGroup, binding_report, resize_groups
from placement_core.launcher.plan import LaunchPlan, MountedPlan
from placement_core.launcher.synthetic import Law, Slowdown, component_gpus, parse_laws, parse_slowdowns
from placement_core.observe.progress import LogReporter, Reporter, StepTimer, reporter_from_env


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
    slowdowns: tuple[Slowdown, ...] = ()
    """The synthetic workload's stragglers (`--slow`)."""
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
    # The operator resizes a replaceable component in place by rewriting the mounted plan (docs/elastic.md).
    mounted = MountedPlan() if any(group.follows_mount for group in replaceable) else None
    # The process of each live rank as the process table last showed it (demo.run prints it before the steps).
    shown = live_processes(groups)
    for step in range(first, options.steps + 1):
        fresh = mounted.changed() if mounted is not None else None
        if fresh is not None:
            # A synthetic component's time follows its GPUs: those of the ranks it runs from now on.
            gpus.update({name: component_gpus(fresh, name) for name in resize_groups(groups, fresh)})
        for group in replaceable:
            # Prints what the launcher replaced since (its lines and a fresh binding report); the generator's
            # new ranks get the step's weights like every other rank of it (synced_ranks).
            group.take_joined()
        # The ranks just taken, and those that synced_ranks took during the last step: every live process again,
        # each with its PID, so that the log shows that the ranks not replaced kept theirs.
        live = live_processes(groups)
        if any(shown.get(key) is not actor for key, actor in live.items()):
            print_table(table(groups, binding_report(groups)))
            shown = live
        timer = StepTimer(order=list(groups))  # after the table: its calls are not the step's time
        if options.laws is None:
            total_score += demo_step(groups, timer, step)
        else:
            synthetic_step(groups, options.laws, gpus, timer, step, options.slowdowns)
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


def live_processes(groups: Mapping[str, WorkerGroup]) -> dict[tuple[str, int], Any]:
    """(component, rank) -> actor of every live rank: a rank started again has another actor."""
    return {(name, rank): actor for name, group in groups.items() for rank, actor in group.live_actors().items()}


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
    slowdowns: Sequence[Slowdown] = (),
) -> None:
    """One step of the synthetic workload (launcher.synthetic): every process of a component sleeps its law's
    seconds (and a straggler's extra in its steps); components sharing GPUs one after another, GPU-disjoint
    groups at the same time (a thread each).
    The generator's ranks first get the step's weights. On a replaceable component the live ranks also sleep
    the lost ranks' shares, in rounds (a batch split over the replicas left), a share whose rank died included."""
    _, generator, _ = roles(groups)
    errors: list[BaseException] = []

    def run_group(members: list[str]) -> None:
        try:
            for name in members:
                seconds = laws[name].seconds(len(gpus[name]))
                seconds += sum(slow.extra(step) for slow in slowdowns if slow.component == name)
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
    steps.add_argument(
        "--slow",
        action="append",
        default=[],
        metavar="COMPONENT=S@FROM-TO",
        help="synthetic straggler: S more seconds per step of the component in steps FROM to TO",
    )


def step_options(args: argparse.Namespace, components: Sequence[str]) -> StepOptions | None:
    """The --steps mode's options, checked together; None without --steps."""
    if args.steps is None:
        for flag, given in (("--checkpoint-every", args.checkpoint_every), ("--law", args.law), ("--slow", args.slow)):
            if given:
                raise LaunchError(f"{flag} needs --steps")
        if args.workload != "demo":
            raise LaunchError("--workload synthetic needs --steps")
        return None
    if args.steps < 1 or args.checkpoint_every < 0:
        raise LaunchError(
            f"--steps must be 1 or more and --checkpoint-every 0 or more, got {args.steps}, {args.checkpoint_every}"
        )
    for flag, given in (("--law", args.law), ("--slow", args.slow)):
        if given and args.workload != "synthetic":
            raise LaunchError(f"{flag} needs --workload synthetic")
    laws = parse_laws(args.law, components) if args.workload == "synthetic" else None
    slowdowns = parse_slowdowns(args.slow, components)
    directory = args.checkpoint_dir or os.environ.get(CHECKPOINT_DIR_ENV)
    if args.checkpoint_every and not directory:
        raise LaunchError(
            f"--checkpoint-every needs a checkpoint directory (--checkpoint-dir or ${CHECKPOINT_DIR_ENV})"
        )
    store = CheckpointStore(directory, args.keep, attempt()) if directory else None
    return StepOptions(args.steps, args.checkpoint_every, store, laws, slowdowns, reporter_from_env())

"""Starting a component's processes as Ray actors where the plan says, and calling them as a group.

`launch_all` checks the plan's nodes and GPUs against the Ray cluster, starts every process of every component
(`actors.Starter`: the actor Ray runs for a worker, placed and given its planned environment, which checks its
binding before the worker's own constructor), waits for them, and gathers their binding checks. A `WorkerGroup`
is one component's actors in rank order, called together (`GroupCall`); a replaceable one goes on without a
lost rank while `replacing.py` starts it again.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import placement_core
from placement_core.contract import node_resource, parse_node_resource
from placement_core.errors import LaunchError, WorkerDiedError
from placement_core.launcher.actors import (
    CHECK_METHOD,
    PLACEMENT_OPTIONS,
    Starter,
    connected_ray,
    constructor_error,
    kill_actor,
)
from placement_core.launcher.membership import Ledger, Membership
from placement_core.launcher.plan import LaunchPlan, load_plan, read_plan
from placement_core.launcher.replacing import (
    REPLACE_POLL_S,
    forget_launched,
    launched_groups,
    remember_launched,
    replace_lost_ranks,
)
from placement_core.launcher.resources import absent_nodes, check_resources
from placement_core.observe.verify import BindingError, BindingReport, ProcessCheck, report_line, resized_line
from placement_core.plan import OnLoss, Plan, ProcessPlan

if TYPE_CHECKING:
    from placement_core.components import ComponentPlacement


def connect(address: str = "auto", ship_code: bool = True, **init_kwargs: Any) -> None:
    """`ray.init` for a driver. With `ship_code`, placement_core travels to every worker of the job in Ray's
    job-level runtime_env (`py_modules`; Ray accepts local code only there, and actors inherit it), so workers
    on a stock Ray image without rlplace run the launcher's actors. Measured in benchmarks/launch_scale.py."""
    try:
        import ray
    except ImportError as err:
        raise LaunchError("Ray is not installed; install the extra: pip install 'rlplace[ray]'") from err
    runtime_env = dict(init_kwargs.pop("runtime_env", None) or {})
    if ship_code:
        # The package's directory, not the module: inside a submitted Ray job, ray.init deep-copies the
        # runtime_env to merge it with the job's, and a module object cannot be copied.
        runtime_env["py_modules"] = [*runtime_env.get("py_modules", []), os.path.dirname(placement_core.__file__)]
    ray.init(address=address, runtime_env=runtime_env or None, **init_kwargs)


def ray_node_addresses() -> dict[int, str]:
    """Node rank -> IP of each live Ray node that declares a node resource."""
    ray = connected_ray()
    addresses: dict[int, str] = {}
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        for key in node.get("Resources", {}):
            rank = parse_node_resource(key)
            if rank is None:
                continue
            if rank in addresses:
                raise LaunchError(f"two live Ray nodes declare node rank {rank} ('{node_resource(rank)}')")
            addresses[rank] = node["NodeManagerAddress"]
    return addresses


def _wait_joined(plan: LaunchPlan, components: Sequence[str], timeout_s: float) -> None:
    """Wait up to `timeout_s` for every node the components run on to be in the Ray cluster: a worker pod joins
    some seconds after its head (at the start, and when its container restarts after a new head replaced a
    lost one, while KubeRay already runs the driver again). Then `_wait_free` says what is still missing."""
    ray = connected_ray()
    deadline = time.monotonic() + timeout_s
    while absent_nodes(plan, components, ray.cluster_resources()) and time.monotonic() < deadline:
        time.sleep(0.5)


def _wait_free(plan: LaunchPlan, components: Sequence[str], timeout_s: float | None) -> None:
    """Check totals now, then wait up to `timeout_s` for held resources to free (a group just shut down
    releases them a moment later); None skips the free check and leaves queueing to Ray."""
    ray = connected_ray()
    check_resources(plan, components, ray.cluster_resources())
    if timeout_s is None:
        return
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            check_resources(plan, components, ray.cluster_resources(), ray.available_resources())
            return
        except LaunchError as err:
            if time.monotonic() >= deadline:
                raise LaunchError(f"{err} (waited {timeout_s:g} s)") from None
        time.sleep(0.1)


# -- worker groups ---------------------------------------------------------------------------------------


class GroupCall:
    """The pending results of one method called on ranks of a group; like the reference's non-blocking calls,
    so two components on split GPU pools run at the same time and the driver gets both afterwards."""

    def __init__(
        self,
        group: WorkerGroup,
        method: str,
        refs: list[Any],
        ranks: Sequence[int] | None = None,
        actors: Sequence[Any] | None = None,
    ) -> None:
        self._group = group
        self._method = method
        self.refs = refs
        self.ranks: tuple[int, ...] = tuple(range(len(refs)) if ranks is None else ranks)
        """The rank each ref belongs to: every rank, or on a replaceable group the live ranks called."""
        # The actor each rank had when called: a result that comes back after the rank was started again must
        # not mark the new actor lost.
        self._actors = tuple(actors) if actors is not None else (None,) * len(refs)
        self._deaths: dict[int, BaseException] = {}

    def wait(self, timeout: float | None = None) -> bool:
        """Block until every rank called has answered (or died); False if `timeout` passed first."""
        if not self.refs:
            return True
        ray = connected_ray()
        _, pending = ray.wait(self.refs, num_returns=len(self.refs), timeout=timeout)
        return not pending

    def done(self) -> bool:
        return self.wait(timeout=0)

    def get(self, timeout: float | None = None) -> list[Any]:
        """Results in rank order. A dead actor raises WorkerDiedError naming component and rank; an
        exception raised by the method itself comes back as Ray raises it. On a replaceable group the ranks are
        the live ranks called, and every dead one is marked lost (and will be started again) before the
        WorkerDiedError of the first is raised; `get_live` goes on without them instead."""
        self._wait_or_raise(timeout)
        ray = connected_ray()
        if not self._group.replaceable:
            results = []
            for rank, ref in zip(self.ranks, self.refs, strict=True):
                try:
                    results.append(ray.get(ref))
                except ray.exceptions.RayActorError as err:
                    raise self._group.died(rank, self._method, err) from err
            return results
        answered = self._collect()
        if len(answered) < len(self.ranks):
            rank = next(r for r in self.ranks if r not in answered)
            raise self._group.died(rank, self._method, self._deaths[rank]) from self._deaths[rank]
        return [answered[rank] for rank in self.ranks]

    def get_live(self, timeout: float | None = None) -> dict[int, Any]:
        """Rank -> result of each rank that answered. On a replaceable group a rank whose actor died (a Ray
        actor error) is left out and marked lost, so the group starts it again (`WorkerGroup.take_joined` says
        when); on any other group a dead rank raises WorkerDiedError, as `get` does. An exception raised by
        the method itself comes back as Ray raises it, also when its cause is another actor's death (a worker
        whose call into another component failed): that is not this rank's death. TimeoutError when some rank
        neither answered nor died within `timeout` seconds."""
        if not self._group.replaceable:
            return dict(zip(self.ranks, self.get(timeout), strict=True))
        self._wait_or_raise(timeout)
        return self._collect()

    def _wait_or_raise(self, timeout: float | None) -> None:
        if not self.wait(timeout):
            raise TimeoutError(
                f"component '{self._group.component}': '{self._method}' did not finish within {timeout:g} s"
            )

    def _collect(self) -> dict[int, Any]:
        """The answers of a replaceable group's call, marking the ranks whose actor died lost."""
        ray = connected_ray()
        results: dict[int, Any] = {}
        for rank, actor, ref in zip(self.ranks, self._actors, self.refs, strict=True):
            try:
                results[rank] = ray.get(ref)
            except ray.exceptions.RayActorError as err:
                # Ray raises a method's exception caused by another actor's death as an instance of both
                # RayTaskError and the cause's class: this actor answered, with an error.
                if isinstance(err, ray.exceptions.RayTaskError):
                    raise
                self._deaths[rank] = err
                self._group.lose(rank, self._method, err, actor)
        return results


class WorkerGroup:
    """The actors of one component, one per process in rank order.

    A group is `replaceable` when it was launched with `LaunchOptions.replace_lost` and its component's plan says
    `OnLoss.REPLACE`. Then a rank whose actor dies is lost, not fatal:

    - `call` and `call_each` call live ranks only (`live_ranks`), and `GroupCall.get_live` returns the answers of
      the ranks that answered, marking those that died lost (`lost_ranks`); their actors are killed, so what they
      held comes back to Ray;
    - a thread of the group (started at the first loss, stopped by `shutdown`) looks every REPLACE_POLL_S for a
      live Ray node of the lost rank's node rank with the rank's GPUs free, re-reads the plan when the group was
      launched from the mounted one (the operator may have moved that node rank to another Kubernetes node),
      and starts the rank again as at launch: its planned environment, MASTER_ADDR as at launch, its binding
      check. Once it is up and its check is ok, the rank is live again: the membership's version grows,
      `take_joined` returns it once (the driver syncs the current weights into it before using it) and prints
      `replaced: component 'rollout' rank 1 on node rank 2 after 12.3 s`, the contract's `rlplace-replaced:`
      line and a fresh binding-report line over the live ranks of every group (the operator reads the last
      one), and `wait_for_change` wakes. A check that fails leaves the rank lost for good (`take_joined` prints
      the BindingError's line).

    Any other group keeps every rank live: a dead one raises WorkerDiedError from `get`, `run` and `get_live`.
    """

    def __init__(
        self,
        component: str,
        actors: list[Any],
        processes: Sequence[ProcessPlan],
        starter: Starter | None = None,
    ) -> None:
        self.component = component
        self.actors = actors
        self.processes = tuple(processes)
        """Each rank's plan entry (a replaced rank's as the plan said when it was started again)."""
        self.checks: list[ProcessCheck | None] = [None] * len(actors)
        """Each rank's binding check, as the actor made it at start (None when not verified)."""
        self._starter = starter
        self._ledger = Ledger(len(actors))
        # Guards actors, checks, processes and notes against the replacement thread, which swaps a rank's entries.
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._replacer: threading.Thread | None = None
        self._starting: dict[int, Any] = {}
        """Actors the replacement thread started that have not joined: shutdown kills them too."""
        self._notes: list[str] = []
        """What the replacement thread has to say in the driver's log, printed by the driver's own thread."""
        self._report_due = False
        """A rank joined since the last binding-report line: print a fresh one after the notes."""

    @property
    def world_size(self) -> int:
        return len(self.actors)

    @property
    def replaceable(self) -> bool:
        """Whether a lost rank is started again while the others go on (see the class docstring)."""
        return self._starter is not None

    @property
    def membership(self) -> Membership:
        """A snapshot: the version (one more per change), the live ranks and the lost ones."""
        return self._ledger.snapshot()

    @property
    def live_ranks(self) -> tuple[int, ...]:
        """The ranks calls go to, in rank order (every rank, on a group that is not replaceable)."""
        return self._ledger.snapshot().live

    @property
    def lost_ranks(self) -> tuple[int, ...]:
        """The ranks that died and do not run again yet, in rank order."""
        return self._ledger.snapshot().lost

    def live_actors(self) -> dict[int, Any]:
        """Rank -> actor of each live rank: what to hand another component's workers that call this one."""
        with self._lock:
            return {rank: self.actors[rank] for rank in self._ledger.snapshot().live if rank < len(self.actors)}

    def take_joined(self) -> list[int]:
        """The ranks started again since the last call, each returned once, in the order they joined. A new
        actor has only what its constructor gave it: sync the current weights into it before using it.

        Also prints what the replacement thread has to say since the last call: a `replaced: ...` line per rank
        that joined and then a fresh binding-report line over the live ranks of every group (the operator reads
        the last one), or why a rank could not be started again. The driver's thread prints them, so they never
        cut into a line the driver is printing; a driver that supports Replace calls this before each step."""
        joined = self._ledger.take_joined()
        self._print_notes()
        return joined

    def _note(self, *lines: str, report: bool = False) -> None:
        """Lines for the driver's log from the replacement thread (`report`: a binding report is due after them)."""
        with self._lock:
            self._notes.extend(lines)
            self._report_due |= report

    def _print_notes(self) -> None:
        with self._lock:
            notes, self._notes = self._notes, []
            report_due, self._report_due = self._report_due, False
        if report_due:
            report = _report_of(launched_groups())
            if report.checks:
                notes.append(report_line(report))
        if notes:
            _say(*notes)

    def wait_for_change(self, timeout: float | None = None) -> bool:
        """Wait for the membership to change (a rank lost or joined) since the last `wait_for_change`: True at
        once when it already has, False when `timeout` passed without one. One waiter per group."""
        return self._ledger.wait_for_change(timeout)

    def call(self, method: str, *args: Any, **kwargs: Any) -> GroupCall:
        """Call `method` on every rank (the live ones, on a replaceable group) without waiting; `.get()` or
        `.get_live()` the result."""
        if not self.replaceable:
            if not self.actors:
                raise LaunchError(f"component '{self.component}': the worker group is shut down")
            refs = [getattr(actor, method).remote(*args, **kwargs) for actor in self.actors]
            return GroupCall(self, method, refs)
        return self.call_each(method, dict.fromkeys(self.live_ranks, args), **kwargs)

    def call_each(self, method: str, args: Mapping[int, Sequence[Any]], **kwargs: Any) -> GroupCall:
        """Call `method` on the given ranks, each with its own positional arguments (the keyword ones the same
        for all), without waiting: how a driver splits one step's work over the live ranks. A rank that is lost
        is not called; it is left out of `get_live`'s answer as a rank that died."""
        with self._lock:
            if not self.actors:
                raise LaunchError(f"component '{self.component}': the worker group is shut down")
            bad = [rank for rank in args if not 0 <= rank < len(self.actors)]
            if bad:
                raise LaunchError(f"component '{self.component}' has ranks 0-{len(self.actors) - 1}, got {bad[0]}")
            called = {rank: self.actors[rank] for rank in args}
        refs, ranks, actors = [], [], []
        for rank, actor in called.items():
            if not self._ledger.is_live(rank):
                continue
            refs.append(getattr(actor, method).remote(*args[rank], **kwargs))
            ranks.append(rank)
            actors.append(actor)
        return GroupCall(self, method, refs, ranks, actors)

    def run(self, method: str, *args: Any, timeout: float | None = None, **kwargs: Any) -> list[Any]:
        """Call `method` on every rank (the live ones, on a replaceable group) and wait: the results in rank
        order."""
        return self.call(method, *args, **kwargs).get(timeout)

    def died(self, rank: int, method: str, err: BaseException | str) -> WorkerDiedError:
        """The error for a dead rank: one line with component, rank and node, the Ray cause chained (or its
        name, as a worker that saw the death reports it)."""
        node = self.processes[rank].node_rank
        reason = err if isinstance(err, str) else type(err).__name__
        return WorkerDiedError(
            f"component '{self.component}' rank {rank} (node rank {node}) died during '{method}' ({reason})",
            self.component,
            rank,
        )

    def lose(self, rank: int, method: str, cause: BaseException | str, actor: Any = None) -> None:
        """Mark a live rank lost: what `get_live` does for a rank whose call found its actor dead, for a driver
        that learned of the death another way (a worker's call into this group failed). On a replaceable group
        the rank's actor is killed (what it held comes back to Ray), a `lost: ...` line is printed and the rank
        will be started again; `actor`, when given, is the actor seen dead: nothing happens when the rank has
        another one by now (it was started again meanwhile). On any other group this raises the
        WorkerDiedError that `get` would. `cause`: the Ray error, or its name as a worker reported it."""
        if not self.replaceable:
            raise self.died(rank, method, cause) from (cause if isinstance(cause, BaseException) else None)
        with self._lock:
            if not self.actors or (actor is not None and self.actors[rank] is not actor):
                return
            if not self._ledger.lose(rank):
                return
            dead = self.actors[rank]
            if self._replacer is None and not self._stop.is_set():
                self._start_replacer()
        kill_actor(dead)
        _say(f"lost: {self.died(rank, method, cause)}; it is started again once its node is back")

    def resize(self, plan: LaunchPlan) -> tuple[range, range]:
        """Run as many ranks as `plan` gives the component, in place: the operator changed its replicas and
        rewrote the plan (docs/elastic.md). Ranks beyond the new count stop at once (their actors are killed:
        call this between steps, never with a call on them in flight); new ranks start as a lost rank is started
        again (their planned binding checked, MASTER_ADDR as at launch), join the live ranks once verified and are
        handed to the driver by `take_joined` like a replaced rank (sync the current weights into them first).
        The ranks kept must run where they run now (a plan resized by `placement_core.grammar.resized_placement`
        keeps them: LaunchError otherwise, and nothing changes). Only a replaceable group can be resized. Returns
        (the ranks added, the ranks removed); both empty when the count is the same."""
        if self._starter is None:
            raise LaunchError(f"component '{self.component}': only a replaceable group (onLoss Replace) is resized")
        processes = plan.processes(self.component)
        with self._lock:
            if not self.actors:
                raise LaunchError(f"component '{self.component}': the worker group is shut down")
            kept = min(len(processes), len(self.processes))
            moved = next(
                (
                    rank
                    for rank in range(kept)
                    if (processes[rank].node_rank, processes[rank].held_gpus)
                    != (self.processes[rank].node_rank, self.processes[rank].held_gpus)
                ),
                None,
            )
            if moved is not None:
                raise LaunchError(
                    f"component '{self.component}': the resized plan moves rank {moved} "
                    f"(node rank {self.processes[moved].node_rank} -> {processes[moved].node_rank}); "
                    "a resize keeps the ranks it keeps where they run"
                )
            before = len(self.processes)
            added, removed = self._ledger.resize(len(processes))
            stopped = [self.actors[rank] for rank in removed] + [
                self._starting.pop(r) for r in removed if r in self._starting
            ]
            self.actors = [*self.actors[:kept], *([None] * len(added))]
            self.checks = [*self.checks[:kept], *([None] * len(added))]
            self.processes = (*self.processes[:kept], *processes[kept:])
            self._starter = dataclasses.replace(self._starter, plan=plan, world_size=len(processes))
            if added and self._replacer is None and not self._stop.is_set():
                self._start_replacer()
        for actor in stopped:
            if actor is not None:
                kill_actor(actor)
        if added or removed:
            change = f"{_span(added)} starting" if added else f"{_span(removed)} stopped"
            self._note(
                f"resized: component '{self.component}' {before} -> {len(processes)} replicas ({change})",
                resized_line(self.component, before, len(processes)),
                report=bool(removed),
            )
            self._print_notes()
        return added, removed

    @property
    def follows_mount(self) -> bool:
        """A replaceable group launched from the mounted plan: the operator's changes of that plan reach it
        (`resize_groups`, a lost rank started from a moved node rank)."""
        return self._starter is not None and self._starter.from_mount

    def _start_replacer(self) -> None:
        """Start the group's replacement thread (under the lock; once)."""
        self._replacer = threading.Thread(
            target=replace_lost_ranks, args=(self,), name=f"rlplace-replace-{self.component}", daemon=True
        )
        self._replacer.start()

    def shutdown(self) -> None:
        """Stop the replacement thread and kill every actor; their resources come back to Ray a moment later.
        Safe to call twice."""
        self._stop.set()
        thread = self._replacer
        if thread is not None and thread is not threading.current_thread():
            # It looks at the stop flag at least every REPLACE_POLL_S.
            thread.join(timeout=10 * REPLACE_POLL_S)
        self._print_notes()  # what the replacement thread did since the driver last took the joined ranks
        with self._lock:
            actors = [actor for actor in (*self.actors, *self._starting.values()) if actor is not None]
            self.actors = []
            self._starting.clear()
        forget_launched(self)
        if not actors:
            return
        ray = connected_ray()
        for actor in actors:
            ray.kill(actor, no_restart=True)

    def _live_checks(self) -> list[tuple[ProcessCheck, ProcessPlan]]:
        """(check, plan entry) of each live verified rank, read together (the replacement thread swaps them)."""
        with self._lock:
            live = self._ledger.snapshot().live
            return [(check, self.processes[rank]) for rank in live if (check := self.checks[rank]) is not None]

    def __enter__(self) -> WorkerGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


def _span(ranks: range) -> str:
    """`rank 3` or `ranks 3-5`: a range of ranks as the log says it."""
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {ranks[0]}-{ranks[-1]}"


#: A driver may call its groups from several threads (the synthetic steps do): their lines are written whole.
_SAY_LOCK = threading.Lock()


def _say(*lines: str) -> None:
    """Print lines on stdout in one write, flushed: the operator reads them from the driver's log. Only the
    driver's own threads print (never the replacement thread, whose lines could cut into one the driver is
    in the middle of printing: `print` writes its text and its newline apart)."""
    with _SAY_LOCK:
        sys.stdout.write("".join(f"{line}\n" for line in lines))
        sys.stdout.flush()


@dataclass(frozen=True)
class LaunchOptions:
    """How the launcher starts actors; kept apart from the worker's own constructor arguments."""

    num_cpus: float = 0
    """CPUs each actor asks for: 0, because the plan, not Ray's CPU count, decides what a node runs."""
    join_timeout_s: float = 120.0
    """How long to wait for the plan's nodes to join the Ray cluster before saying which are missing (a worker
    pod joins after the head, and again after its container restarts); 0: say it at once."""
    free_timeout_s: float | None = 10.0
    """How long to wait for resources held by other actors (a group just shut down frees them a moment
    later); None skips the check and leaves the actors queued by Ray until `ready_timeout_s`."""
    ready_timeout_s: float = 120.0
    """Actors not up by then are killed and reported."""
    env_via: Literal["runtime_env", "constructor"] = "constructor"
    """`constructor` (default): the actor sets the environment first thing, before the worker class is
    unpickled (so before its module and the modules it imports are imported) and before its `__init__`;
    the binding check then fails the process if CUDA had been loaded in it earlier (see the module
    docstring for what that covers). Actors share Ray's worker pool, so they start about as fast as plain
    ones. `runtime_env`: Ray sets the environment when it starts the worker process (for code that runs
    before any actor: a `worker_process_setup_hook`, `sitecustomize`); each distinct runtime_env gets its
    own worker pool and setup round trip. benchmarks/launch_scale.py, 64 processes on 4 simulated nodes, four
    runs on a busy 2-core machine: `constructor` 1.06x plain Ray, `runtime_env` 1.87x (docs/driver.md)."""
    pin_node_by: Literal["label", "resource"] = "label"
    """How an actor is held to its planned node: `label`, Ray's `label_selector` on the node label the operator
    sets (Ray's own node targeting); `resource`, one unit of the node's custom resource. Both are exact;
    benchmarks/launch_scale.py measures them side by side (label was not slower: 0.98x plain Ray against
    1.04x on 32 workers). GPUs are held through the per-GPU resources either way."""
    actor_options: Mapping[str, Any] = field(default_factory=dict)
    """Further Ray actor options (max_concurrency, memory, ...); placement ones are the launcher's."""
    verify: bool = True
    """Every actor checks at start that its environment, node and GPUs are its plan entry's (see
    `placement_core.observe.verify`); a mismatch stops the launch with BindingError naming the rank."""
    replace_lost: bool = False
    """Go on without a lost replica and start it again: the groups of components whose plan says
    `OnLoss.REPLACE` are `replaceable` (WorkerGroup: calls go to the live ranks, a dead rank is marked lost and
    started again once its node is back; docs/driver.md, "Replacing lost replicas"). Other groups, and every
    group when False, keep every rank: a dead one raises WorkerDiedError, and the job restarts."""


def launch(
    plan: LaunchPlan | Plan | ComponentPlacement | str | bytes,
    component: str,
    worker: type,
    *args: Any,
    options: LaunchOptions | None = None,
    **kwargs: Any,
) -> WorkerGroup:
    """Start one `worker(*args, **kwargs)` actor per process of `component` and wait until all are up.

    `worker` is a plain class (the launcher makes it a Ray actor). Missing nodes or GPUs fail before any actor
    starts; see LaunchOptions for waiting on held resources and on slow starts.
    """
    return launch_all(plan, {component: worker}, args=args, kwargs=kwargs, options=options)[component]


def launch_all(
    plan: LaunchPlan | Plan | ComponentPlacement | str | bytes,
    workers: Mapping[str, type],
    *,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    options: LaunchOptions | None = None,
) -> dict[str, WorkerGroup]:
    """Start several components at once (worker class per component, same constructor arguments).

    All components are checked together before any actor starts, and all start before any is waited on,
    so collocated components come up side by side; if one fails, or a process is not bound as planned
    (BindingError), every group started here is shut down.
    """
    opts = options or LaunchOptions()
    launch_plan = load_plan(plan)
    names = list(workers)
    for name in names:
        launch_plan.processes(name)
        _check_worker(name, workers[name])
    clash = sorted(set(opts.actor_options) & set(PLACEMENT_OPTIONS))
    if clash:
        raise LaunchError(f"actor_options may not set {', '.join(clash)} (the plan decides them)")
    _wait_joined(launch_plan, names, opts.join_timeout_s)
    _wait_free(launch_plan, names, opts.free_timeout_s)
    addresses = ray_node_addresses()
    replaceable = {name for name in names if _replaceable(launch_plan, name, opts)}
    # A lost rank is started from the plan as it is then when the operator may have rewritten it: only when
    # this plan is the mounted one.
    from_mount = bool(replaceable) and _is_mounted(launch_plan)
    groups: dict[str, WorkerGroup] = {}
    try:
        for name in names:
            starter = Starter.of(launch_plan, name, workers[name], args, kwargs or {}, opts, addresses, from_mount)
            groups[name] = _start_group(starter, name in replaceable)
        _wait_ready(list(groups.values()), opts.ready_timeout_s)
        if opts.verify:
            report = binding_report(groups)
            if not report.ok:
                raise BindingError(report)
    except BaseException:
        for group in groups.values():
            group.shutdown()
        raise
    remember_launched(groups.values())
    return groups


def resize_groups(groups: Mapping[str, WorkerGroup], plan: LaunchPlan) -> dict[str, tuple[range, range]]:
    """Resize each replaceable group to the number of processes `plan` gives its component (`WorkerGroup.resize`;
    call it between steps). Component -> (ranks added, ranks removed) of each group resized. Other groups are
    left as they are: a plan that changes them is a new plan, which the operator runs by restarting the job."""
    changed: dict[str, tuple[range, range]] = {}
    for name, group in groups.items():
        if not group.replaceable or name not in plan.plan.names:
            continue
        if len(plan.processes(name)) != len(group.processes):
            changed[name] = group.resize(plan)
    return changed


def _replaceable(plan: LaunchPlan, component: str, opts: LaunchOptions) -> bool:
    """A driver that opted in, and a component whose plan says its replicas are independent."""
    return opts.replace_lost and plan.plan.component(component).on_loss is OnLoss.REPLACE


def _is_mounted(plan: LaunchPlan) -> bool:
    """Whether `plan` is the plan mounted in this pod (`read_plan()`), i.e. one the operator may rewrite."""
    try:
        return read_plan().plan == plan.plan
    except LaunchError:
        return False


def binding_report(groups: Mapping[str, WorkerGroup]) -> BindingReport:
    """Every verified live process of the groups (a lost rank's check is no longer what runs), with processes of
    different groups cross-checked for shared GPUs (pass all groups of a job, also those launched separately)."""
    return _report_of(groups.values())


def _report_of(groups: Iterable[WorkerGroup]) -> BindingReport:
    return BindingReport.of(pair for group in groups for pair in group._live_checks())


def _check_worker(component: str, worker: object) -> None:
    """The launcher owns the actor options, so it wants the class itself, not a `@ray.remote` one."""
    if not isinstance(worker, type):
        raise LaunchError(
            f"component '{component}': the worker must be a plain class, got {type(worker).__name__} "
            "(drop @ray.remote; pass actor options in LaunchOptions.actor_options)"
        )


def _start_group(starter: Starter, replaceable: bool) -> WorkerGroup:
    """Submit the component's actors (Ray starts them asynchronously); a replaceable group keeps the starter."""
    processes = starter.plan.processes(starter.component)
    actors = [starter.start(process) for process in processes]
    return WorkerGroup(starter.component, actors, processes, starter if replaceable else None)


def _wait_ready(groups: list[WorkerGroup], timeout_s: float) -> None:
    """Wait until every actor's constructor has run and keep its binding check in its group; name the first
    rank that failed or did not start."""
    ray = connected_ray()
    pending = {}
    for group in groups:
        for rank, actor in enumerate(group.actors):
            pending[getattr(actor, CHECK_METHOD).remote()] = (group, rank)
    deadline = time.monotonic() + timeout_s
    while pending:
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
        if not ready:
            late = sorted(pending.values(), key=lambda gr: (gr[0].component, gr[1]))
            where = "; ".join(f"component '{g.component}' rank {r}" for g, r in late[:8])
            more = f" and {len(late) - 8} more" if len(late) > 8 else ""
            raise LaunchError(f"{where}{more} did not start within {timeout_s:g} s (resources held by other actors?)")
        group, rank = pending.pop(ready[0])
        try:
            group.checks[rank] = ray.get(ready[0])
        except ray.exceptions.RayActorError as err:
            cause = constructor_error(err)
            raise LaunchError(f"component '{group.component}' rank {rank} failed to start: {cause}") from err

"""Starting a component's processes as Ray actors where the plan says, and calling them as a group.

Every actor asks for `num_gpus=0` and for the contract's custom resources: its node's (so it lands on its
planned node) and one share of each GPU it holds (so exclusive processes can never share a GPU, while a GPU the
plan shares among k processes is asked for as 1/k by each). Then, before the worker's own constructor, the
actor checks its binding (`verify.py`) and the launcher gathers the checks.

When the environment (RANK, CUDA_VISIBLE_DEVICES, ...) is in place, by default (`env_via="constructor"`):
Ray runs a launcher-made actor class that holds no reference to the worker class; the worker class travels
as pickled bytes. In the worker process the actor's constructor sets the planned variables in `os.environ`,
then checks the binding, then unpickles the worker class (importing its module and whatever that imports)
and constructs it. So the worker's code (its module's top level, class body, `__init_subclass__`, and
constructor) runs with the planned variables, and nothing of it runs in a process that is not bound as
planned. What ran in the process before the actor existed is outside that: Ray's worker start-up, a
job-level `worker_process_setup_hook` or `sitecustomize`, a task or actor that Ray ran earlier in a
reused worker process, and the deserialisation of the constructor's arguments (Ray unpacks them before the
constructor, importing the modules of the objects in them). Importing a CUDA library (torch, cupy) there is
harmless: CUDA reads CUDA_VISIBLE_DEVICES when it initialises, not on import. Initialising it there is not,
and the binding check catches it: if the CUDA driver library is already loaded in the process when the
launcher sets the variables (and the old value differs), the process fails verification naming its rank
(`verify.cuda_loaded_before`). Values cached by a library before the variables changed without initialising
CUDA (e.g. a device count read through NVML) are not detected. `env_via="runtime_env"` sets the variables
when Ray starts the worker process, covering all of the above, at about twice the start time
(benchmarks/launch_scale.py).
"""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
import threading
import time
import weakref
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import placement_core
from placement_core.contract import NODE_RANKS_MOUNT_DIR, node_labels, node_resource, parse_node_resource
from placement_core.errors import LaunchError, PlacementError, WorkerDiedError
from placement_core.launcher.membership import Ledger, Membership
from placement_core.launcher.plan import LaunchPlan, load_plan, read_plan
from placement_core.launcher.resources import absent_nodes, check_resources
from placement_core.observe.verify import (
    Binding,
    BindingError,
    BindingReport,
    ProcessCheck,
    check_here,
    cuda_loaded_before,
    replaced_line,
    report_line,
)
from placement_core.plan import OnLoss, Plan, ProcessPlan

if TYPE_CHECKING:
    from placement_core.components import ComponentPlacement


def _ray() -> Any:
    """Import Ray on first use, so `import placement_core.launcher` works without the `rlplace[ray]` extra."""
    try:
        import ray
    except ImportError as err:
        raise LaunchError("Ray is not installed; install the extra: pip install 'rlplace[ray]'") from err
    if not ray.is_initialized():
        raise LaunchError("not connected to a Ray cluster; call ray.init(address=...) first")
    return ray


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
    ray = _ray()
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
    ray = _ray()
    deadline = time.monotonic() + timeout_s
    while absent_nodes(plan, components, ray.cluster_resources()) and time.monotonic() < deadline:
        time.sleep(0.5)


def _wait_free(plan: LaunchPlan, components: Sequence[str], timeout_s: float | None) -> None:
    """Check totals now, then wait up to `timeout_s` for held resources to free (a group just shut down
    releases them a moment later); None skips the free check and leaves queueing to Ray."""
    ray = _ray()
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
        ray = _ray()
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
        ray = _ray()
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
        ray = _ray()
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
        starter: _Starter | None = None,
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
            report = _report_of(_launched())
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
                self._replacer = threading.Thread(
                    target=_replace_lost, args=(self,), name=f"rlplace-replace-{self.component}", daemon=True
                )
                self._replacer.start()
        _kill(dead)
        _say(f"lost: {self.died(rank, method, cause)}; it is started again once its node is back")

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
            actors = [*self.actors, *self._starting.values()]
            self.actors = []
            self._starting.clear()
        _forget(self)
        if not actors:
            return
        ray = _ray()
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


def _kill(actor: Any) -> None:
    """Kill an actor that may be dead already, or whose Ray is going away: it does not run either way."""
    with contextlib.suppress(Exception):
        _ray().kill(actor, no_restart=True)


#: A driver may call its groups from several threads (the synthetic steps do): their lines are written whole.
_SAY_LOCK = threading.Lock()


def _say(*lines: str) -> None:
    """Print lines on stdout in one write, flushed: the operator reads them from the driver's log. Only the
    driver's own threads print (never the replacement thread, whose lines could cut into one the driver is
    in the middle of printing: `print` writes its text and its newline apart)."""
    with _SAY_LOCK:
        sys.stdout.write("".join(f"{line}\n" for line in lines))
        sys.stdout.flush()


# -- the driver's groups, for the binding report printed after a replacement ------------------------------

#: The groups launched in this process and not shut down, in launch order (weakly: a group the driver dropped
#: is gone with its actors).
_LAUNCHED: list[weakref.ref[WorkerGroup]] = []
_LAUNCHED_LOCK = threading.Lock()


def _remember(groups: Iterable[WorkerGroup]) -> None:
    with _LAUNCHED_LOCK:
        _LAUNCHED.extend(weakref.ref(group) for group in groups)


def _forget(group: WorkerGroup) -> None:
    with _LAUNCHED_LOCK:
        _LAUNCHED[:] = [ref for ref in _LAUNCHED if ref() is not None and ref() is not group]


def _launched() -> list[WorkerGroup]:
    with _LAUNCHED_LOCK:
        return [group for ref in _LAUNCHED if (group := ref()) is not None and group.actors]


# -- starting one process, at launch and again after a loss -----------------------------------------------


#: How often a replaceable group's thread looks for the node of a lost rank (seconds).
REPLACE_POLL_S = 0.5
#: The longest wait between two tries to start a rank whose start failed (doubling from REPLACE_POLL_S).
REPLACE_BACKOFF_MAX_S = 30.0


@dataclass
class _Starter:
    """What starting one process of a component needs; `_start_group` starts each process with it, and a
    replaceable group keeps it to start a lost rank again exactly the same way."""

    component: str
    plan: LaunchPlan
    opts: LaunchOptions
    master: str
    """MASTER_ADDR as at launch: the Ray address of rank 0's node then."""
    world_size: int
    actor_class: Any
    pickled_worker: bytes
    args: Sequence[Any]
    kwargs: Mapping[str, Any]
    from_mount: bool = False
    """The plan is the mounted one (`read_plan()`): re-read it before starting a rank again."""

    def start(self, process: ProcessPlan, plan: LaunchPlan | None = None) -> Any:
        """Submit one process's actor (Ray starts it asynchronously), placed and set up as `plan` says."""
        plan = plan or self.plan
        by_constructor = self.opts.env_via == "constructor"
        env = {**plan.env(process), "MASTER_ADDR": self.master}
        pod_gpus = plan.pod_gpus.get(process.node_rank)
        binding = Binding(self.component, process, self.world_size, self.master, pod_gpus) if self.opts.verify else None
        resources = plan.resources(process)
        options = _actor_options(self.opts, resources, None if by_constructor else env)
        if self.opts.pin_node_by == "label":
            del resources[node_resource(process.node_rank)]
            options["label_selector"] = node_labels(process.node_rank)
        placed = self.actor_class.options(**options)
        return placed.remote(env if by_constructor else None, binding, self.pickled_worker, *self.args, **self.kwargs)

    def current(self, node_rank: int) -> LaunchPlan:
        """The plan to start a lost rank of `node_rank` again with. The launch's, unless the group was launched
        from the mounted plan, which the operator rewrites when it moves a node rank to another Kubernetes node:
        then the plan as that node's pod mounts it (POD_PLAN_DIR, read by a task on the node: the pod mounted
        it when it started, while the driver's copy of a changed ConfigMap is refreshed by the kubelet up to a
        minute later), else the driver's mounted plan now, else (neither readable) the launch's."""
        if not self.from_mount:
            return self.plan
        for fresh in (_plan_on_node(node_rank, self.opts), _plan_here()):
            if fresh is not None and self.component in fresh.plan.names:
                return fresh
        return self.plan

    def entry(self, plan: LaunchPlan, rank: int, process: ProcessPlan) -> tuple[LaunchPlan, ProcessPlan]:
        """`rank`'s plan and entry in `plan`; the launch's (`process`) when `plan` no longer has the rank on
        the same node rank (a plan made anew: not a node rank moved)."""
        processes = plan.processes(self.component)
        if len(processes) != self.world_size or processes[rank].node_rank != process.node_rank:
            return self.plan, process
        return plan, processes[rank]


#: Where a worker pod mounts the job's ConfigMap (contract.NODE_RANKS_MOUNT_DIR): the plan as the pod saw it
#: when it started. Passed to the task that reads it, so a test may point it elsewhere.
POD_PLAN_DIR = NODE_RANKS_MOUNT_DIR
#: How long the driver waits for a node to say which plan its pod mounts.
POD_PLAN_TIMEOUT_S = 30.0


def _pod_plan(directory: str) -> tuple[str, dict[int, tuple[int, ...]]] | None:
    """On a node: the plan its pod mounts in `directory` (JSON, and the pods' GPUs), None when there is none.
    In plain types: a Plan holds read-only mappings, which do not pickle."""
    try:
        plan = read_plan(directory)
    except LaunchError:
        return None
    return plan.plan.to_json(), dict(plan.pod_gpus)


def _plan_on_node(node_rank: int, opts: LaunchOptions) -> LaunchPlan | None:
    """The plan as the pod of `node_rank` mounts it (`_pod_plan` run there), None when it has none, or does not
    answer within POD_PLAN_TIMEOUT_S."""
    ray = _ray()
    pin: dict[str, Any] = (
        {"label_selector": node_labels(node_rank)}
        if opts.pin_node_by == "label"
        else {"resources": {node_resource(node_rank): 1}}
    )
    ref = ray.remote(_pod_plan).options(num_cpus=0, max_retries=0, **pin).remote(POD_PLAN_DIR)
    try:
        found = ray.get(ref, timeout=POD_PLAN_TIMEOUT_S)
    except (ray.exceptions.GetTimeoutError, ray.exceptions.RayError):
        ray.cancel(ref, force=True)
        return None
    if found is None:
        return None
    try:
        return LaunchPlan.of(Plan.from_json(found[0]), found[1])
    except (PlacementError, LaunchError):
        return None


def _plan_here() -> LaunchPlan | None:
    """The plan mounted where the driver runs (`read_plan()`), None when unreadable."""
    try:
        return read_plan()
    except LaunchError:
        return None


def _replace_lost(group: WorkerGroup) -> None:
    """The replacement thread of a replaceable group: until shutdown, every REPLACE_POLL_S, start again the lost
    ranks whose node is in Ray with what they hold free, all at once (a rank whose start failed waits longer each
    time, up to REPLACE_BACKOFF_MAX_S)."""
    assert group._starter is not None
    starter = group._starter
    retry_at: dict[int, float] = {}
    backoff: dict[int, float] = {}
    while not group._stop.wait(REPLACE_POLL_S):
        now = time.monotonic()
        waiting = [rank for rank in group._ledger.to_replace() if retry_at.get(rank, 0.0) <= now]
        if not waiting:
            continue
        try:
            ray = _ray()
            addresses = ray_node_addresses()
            available = ray.available_resources()
        except Exception:  # Ray going away, or the GCS briefly unreachable: look again later
            continue
        ready = [
            rank
            for rank in waiting
            if (process := group.processes[rank]).node_rank in addresses
            and all(available.get(key, 0.0) + 1e-6 >= amount for key, amount in starter.plan.resources(process).items())
        ]  # the others: their node is not back yet, or what they held is not free yet
        if not ready:
            continue
        try:
            failed = _start_again(group, starter, ready)
        except Exception as err:  # the thread must outlive one bad try
            group._note(f"replace: component '{group.component}' ranks {ready}: {type(err).__name__}: {err}")
            failed = ready
        for rank in ready:
            if rank in failed:
                backoff[rank] = min(2 * backoff.get(rank, REPLACE_POLL_S / 2), REPLACE_BACKOFF_MAX_S)
                retry_at[rank] = time.monotonic() + backoff[rank]
            else:
                retry_at.pop(rank, None)
                backoff.pop(rank, None)


def _start_again(group: WorkerGroup, starter: _Starter, ranks: Sequence[int]) -> list[int]:
    """Start lost ranks again, all at once, each as `_start_group` starts a process: a rank that comes up and
    passes its binding check joins the live ranks, one that fails the check is given up on. Returns the ranks
    to try again later: a constructor that failed, or not up within ready_timeout_s."""
    ray = _ray()
    plans: dict[int, LaunchPlan] = {}  # node rank -> the plan its ranks start from
    pending: dict[Any, tuple[int, Any, ProcessPlan]] = {}
    failed: list[int] = []
    try:
        for rank in ranks:
            node_rank = group.processes[rank].node_rank
            if node_rank not in plans:
                plans[node_rank] = starter.current(node_rank)
            rank_plan, process = starter.entry(plans[node_rank], rank, group.processes[rank])
            actor = starter.start(process, rank_plan)
            with group._lock:
                if group._stop.is_set():
                    _kill(actor)
                    return []
                group._starting[rank] = actor
            pending[getattr(actor, CHECK_METHOD).remote()] = (rank, actor, process)
        deadline = time.monotonic() + starter.opts.ready_timeout_s
        while pending and not group._stop.is_set():
            done, _ = ray.wait(list(pending), num_returns=len(pending), timeout=REPLACE_POLL_S)
            for ref in done:
                rank, actor, process = pending.pop(ref)
                if not _join(group, rank, actor, process, ref):
                    failed.append(rank)
            if pending and time.monotonic() >= deadline:
                late = sorted(rank for rank, _, _ in pending.values())
                timeout = starter.opts.ready_timeout_s
                group._note(
                    f"replace: component '{group.component}' ranks {late} not up within {timeout:g} s; trying again"
                )
                failed += late
                break
        return failed
    finally:
        # What did not come up in time (or was stopped) does not run.
        for rank, actor, _ in pending.values():
            _discard(group, rank, actor)


def _join(group: WorkerGroup, rank: int, actor: Any, process: ProcessPlan, check_ref: Any) -> bool:
    """A restarted rank whose constructor returned: it joins the live ranks if its binding check is ok, and a
    `replaced: ...` line and a fresh binding report are due in the log. False to try again later (its
    constructor failed); True once done with it (joined, given up on after a failed check, or stopped). Its
    actor is killed unless it joined."""
    ray = _ray()
    try:
        check = ray.get(check_ref)
    except ray.exceptions.RayActorError as err:
        group._note(f"replace: component '{group.component}' rank {rank} failed to start: {_first_line(err)}")
        _discard(group, rank, actor)
        return False
    if check is not None:
        # Its own verdict, and the cross-check against every live process (no two may see one GPU).
        others = [pair for g in _launched() for pair in g._live_checks()]
        mine = BindingReport.of([*others, (check, process)]).checks[-1]
        if not mine.ok:
            group._ledger.give_up(rank)
            group._note(str(BindingError(BindingReport((mine,), (group.component,)))))
            _discard(group, rank, actor)
            return True
    with group._lock:
        if group._stop.is_set() or group._starting.get(rank) is not actor:
            return True  # shut down meanwhile: shutdown kills it
        group.actors[rank] = actor
        group.checks[rank] = check
        group.processes = (*group.processes[:rank], process, *group.processes[rank + 1 :])
        del group._starting[rank]
        seconds = group._ledger.join(rank)
        # Noted under the lock that guards the join, so a driver that takes the rank also prints its line.
        where = f"component '{group.component}' rank {rank} on node rank {process.node_rank}"
        group._note(f"replaced: {where} after {seconds:.1f} s", replaced_line(group.component, rank), report=True)
    return True


def _discard(group: WorkerGroup, rank: int, actor: Any) -> None:
    """Kill a restarted actor that does not join (unless shutdown took it already)."""
    with group._lock:
        if group._starting.get(rank) is not actor:
            return
        del group._starting[rank]
    _kill(actor)


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
            starter = _starter(launch_plan, name, workers[name], args, kwargs or {}, opts, addresses, from_mount)
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
    _remember(groups.values())
    return groups


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


def _starter(
    plan: LaunchPlan,
    component: str,
    worker: type,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    opts: LaunchOptions,
    addresses: Mapping[int, str],
    from_mount: bool,
) -> _Starter:
    """How the component's processes are started: its actor class, and MASTER_ADDR from rank 0's node."""
    ray = _ray()
    processes = plan.processes(component)
    return _Starter(
        component,
        plan,
        opts,
        master=addresses[processes[0].node_rank],
        world_size=len(processes),
        actor_class=ray.remote(_host(worker)),
        # Pickled here once: in the worker it is unpickled (its module imported) only after the environment is set.
        pickled_worker=ray.cloudpickle.dumps(worker),
        args=tuple(args),
        kwargs=dict(kwargs),
        from_mount=from_mount,
    )


def _start_group(starter: _Starter, replaceable: bool) -> WorkerGroup:
    """Submit the component's actors (Ray starts them asynchronously); a replaceable group keeps the starter."""
    processes = starter.plan.processes(starter.component)
    actors = [starter.start(process) for process in processes]
    return WorkerGroup(starter.component, actors, processes, starter if replaceable else None)


#: Actor options the placement decides; LaunchOptions.actor_options may not set them.
PLACEMENT_OPTIONS = ("num_cpus", "num_gpus", "resources", "label_selector", "scheduling_strategy")


def _actor_options(opts: LaunchOptions, resources: dict[str, float], env: dict[str, str] | None) -> dict[str, Any]:
    """The user's actor options plus the placement's; planned variables win over a user runtime_env's."""
    options: dict[str, Any] = {"max_restarts": 0, **opts.actor_options}
    options.update(num_cpus=opts.num_cpus, num_gpus=0, resources=resources)
    if env is not None:
        runtime_env = dict(options.get("runtime_env") or {})
        runtime_env["env_vars"] = {**runtime_env.get("env_vars", {}), **env}
        options["runtime_env"] = runtime_env
    return options


#: The method every launched actor gets: its binding check (None when not verified). Calling it is also how
#: the launcher waits for the constructor, so verification costs no extra round trip.
CHECK_METHOD = "rlplace_binding_check"


def _host(worker: type) -> type:
    """The actor class Ray runs for `worker`: it holds no reference to `worker`, only a forwarding method of
    the same name and kind (plain, async, generator) for each of its methods, so that loading it in the worker
    process imports none of the user's code. The worker class itself travels as pickled bytes in the
    constructor's arguments and is unpickled there after the planned environment is set and the binding
    checked: a process that is not where the plan says never imports the worker's module nor runs its
    constructor, and the worker's module sees the planned variables when it is imported."""

    def __init__(
        self: Any,
        rlplace_env: Mapping[str, str] | None,
        rlplace_binding: Binding | None,
        rlplace_worker: bytes,
        *args: Any,
        **kwargs: Any,
    ) -> None:
        cuda_before = None
        if rlplace_env is not None:
            cuda_before = cuda_loaded_before(rlplace_env)
            os.environ.update(rlplace_env)
        self._rlplace_check = None if rlplace_binding is None else check_here(rlplace_binding, cuda_before)
        if self._rlplace_check is None or self._rlplace_check.ok:
            import ray

            self._rlplace_worker = ray.cloudpickle.loads(rlplace_worker)(*args, **kwargs)

    def rlplace_binding_check(self: Any) -> ProcessCheck | None:
        return self._rlplace_check

    def __repr__(self: Any) -> str:
        inner = self.__dict__.get("_rlplace_worker")
        return f"{type(self).__name__}(not started)" if inner is None else repr(inner)

    members: dict[str, Any] = {
        "__init__": __init__,
        CHECK_METHOD: rlplace_binding_check,
        "__repr__": __repr__,
        "__doc__": worker.__doc__,
        "__module__": __name__,
    }
    for name in dir(worker):
        if name in members or name.startswith("__") or not inspect.isfunction(_function(worker, name)):
            continue  # as Ray: methods only (not nested classes or callable attributes); no dunders
        members[name] = _forwarder(worker, name)
    return type(worker.__name__, (), members)


def _forwarder(worker: type, name: str) -> Any:
    """A method that calls `name` on the held worker, of the same kind as the worker's (Ray decides async and
    streaming actors from the kinds), with the worker's Ray method options and its signature (names and
    kinds only: annotations and defaults may be the user's objects, whose modules must not load early)."""
    function = _function(worker, name)
    if inspect.isasyncgenfunction(function):

        async def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
            async for item in getattr(self._rlplace_worker, name)(*args, **kwargs):
                yield item

    elif inspect.iscoroutinefunction(function):

        async def forward(self: Any, *args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
            return await getattr(self._rlplace_worker, name)(*args, **kwargs)

    elif inspect.isgeneratorfunction(function):

        def forward(self: Any, *args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
            # A loop, not `yield from`: Ray resumes a streaming generator with send(), which an iterator a
            # worker's generator delegates to may not have.
            for item in getattr(self._rlplace_worker, name)(*args, **kwargs):  # noqa: UP028
                yield item

    else:

        def forward(self: Any, *args: Any, **kwargs: Any) -> Any:  # type: ignore[misc]
            return getattr(self._rlplace_worker, name)(*args, **kwargs)

    forward.__name__ = forward.__qualname__ = name
    for key, value in vars(function).items() if hasattr(function, "__dict__") else ():
        if key.startswith("__ray_") and isinstance(value, (str, int, float, bool, type(None))):
            setattr(forward, key, value)
    has_self = not isinstance(inspect.getattr_static(worker, name), staticmethod | classmethod)
    signature = _plain_signature(getattr(worker, name), has_self)
    if signature is not None:
        forward.__signature__ = signature  # type: ignore[attr-defined]
    return forward


def _function(worker: type, name: str) -> Any:
    """The function behind attribute `name` of the class (unwrapped from staticmethod / classmethod)."""
    target = inspect.getattr_static(worker, name)
    return target.__func__ if isinstance(target, staticmethod | classmethod) else target


def _plain_signature(method: Any, has_self: bool) -> inspect.Signature | None:
    """`method`'s parameters with a leading `self` (for the host), annotations dropped and defaults None."""
    try:
        signature = inspect.signature(method)
    except (TypeError, ValueError):
        return None
    params = [
        p.replace(annotation=inspect.Parameter.empty, default=None if p.default is not p.empty else p.empty)
        for p in signature.parameters.values()
    ]
    if not has_self:
        params.insert(0, inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD))
    return inspect.Signature(params)


def _wait_ready(groups: list[WorkerGroup], timeout_s: float) -> None:
    """Wait until every actor's constructor has run and keep its binding check in its group; name the first
    rank that failed or did not start."""
    ray = _ray()
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
            cause = _first_line(err)
            raise LaunchError(f"component '{group.component}' rank {rank} failed to start: {cause}") from err


def _first_line(err: BaseException) -> str:
    """Ray's actor errors are many lines; the constructor's exception is the last non-empty one."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[-1] if lines else type(err).__name__

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

import inspect
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import placement_core
from placement_core.contract import node_labels, node_resource, parse_node_resource
from placement_core.errors import LaunchError, WorkerDiedError
from placement_core.launcher.plan import LaunchPlan, load_plan
from placement_core.launcher.resources import absent_nodes, check_resources
from placement_core.observe.verify import (
    Binding,
    BindingError,
    BindingReport,
    ProcessCheck,
    check_here,
    cuda_loaded_before,
)
from placement_core.plan import Plan, ProcessPlan

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
    """The pending results of one method called on every rank; like the reference's non-blocking calls,
    so two components on split GPU pools run at the same time and the driver gets both afterwards."""

    def __init__(self, group: WorkerGroup, method: str, refs: list[Any]) -> None:
        self._group = group
        self._method = method
        self.refs = refs

    def wait(self, timeout: float | None = None) -> bool:
        """Block until every rank has answered (or died); False if `timeout` passed first."""
        ray = _ray()
        _, pending = ray.wait(self.refs, num_returns=len(self.refs), timeout=timeout)
        return not pending

    def done(self) -> bool:
        return self.wait(timeout=0)

    def get(self, timeout: float | None = None) -> list[Any]:
        """Results in rank order. A dead actor raises WorkerDiedError naming component and rank; an
        exception raised by the method itself comes back as Ray raises it."""
        if not self.wait(timeout):
            raise TimeoutError(
                f"component '{self._group.component}': '{self._method}' did not finish within {timeout:g} s"
            )
        ray = _ray()
        results = []
        for rank, ref in enumerate(self.refs):
            try:
                results.append(ray.get(ref))
            except ray.exceptions.RayActorError as err:
                raise self._group.died(rank, self._method, err) from err
        return results


class WorkerGroup:
    """The actors of one component, one per process in rank order."""

    def __init__(self, component: str, actors: list[Any], processes: Sequence[ProcessPlan]) -> None:
        self.component = component
        self.actors = actors
        self.processes = tuple(processes)
        self.checks: list[ProcessCheck | None] = [None] * len(actors)
        """Each rank's binding check, as the actor made it at start (None when not verified)."""

    @property
    def world_size(self) -> int:
        return len(self.actors)

    def call(self, method: str, *args: Any, **kwargs: Any) -> GroupCall:
        """Call `method` on every rank without waiting; `.get()` the result."""
        if not self.actors:
            raise LaunchError(f"component '{self.component}': the worker group is shut down")
        refs = [getattr(actor, method).remote(*args, **kwargs) for actor in self.actors]
        return GroupCall(self, method, refs)

    def run(self, method: str, *args: Any, timeout: float | None = None, **kwargs: Any) -> list[Any]:
        """Call `method` on every rank and wait: the results in rank order."""
        return self.call(method, *args, **kwargs).get(timeout)

    def died(self, rank: int, method: str, err: BaseException) -> WorkerDiedError:
        """The error for a dead rank: one line with component, rank and node, the Ray cause chained."""
        node = self.processes[rank].node_rank
        reason = type(err).__name__
        return WorkerDiedError(
            f"component '{self.component}' rank {rank} (node rank {node}) died during '{method}' ({reason})",
            self.component,
            rank,
        )

    def shutdown(self) -> None:
        """Kill every actor; their resources come back to Ray a moment later. Safe to call twice."""
        if not self.actors:
            return
        ray = _ray()
        for actor in self.actors:
            ray.kill(actor, no_restart=True)
        self.actors = []

    def __enter__(self) -> WorkerGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()


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
    groups: dict[str, WorkerGroup] = {}
    try:
        for name in names:
            groups[name] = _start_group(launch_plan, name, workers[name], args, kwargs or {}, opts, addresses)
        _wait_ready(list(groups.values()), opts.ready_timeout_s)
        if opts.verify:
            report = binding_report(groups)
            if not report.ok:
                raise BindingError(report)
    except BaseException:
        for group in groups.values():
            group.shutdown()
        raise
    return groups


def binding_report(groups: Mapping[str, WorkerGroup]) -> BindingReport:
    """Every verified process of the groups, with processes of different groups cross-checked for shared GPUs
    (pass all groups of a job, also those launched separately)."""
    return BindingReport.of(
        (check, process)
        for group in groups.values()
        for check, process in zip(group.checks, group.processes, strict=True)
        if check is not None
    )


def _check_worker(component: str, worker: object) -> None:
    """The launcher owns the actor options, so it wants the class itself, not a `@ray.remote` one."""
    if not isinstance(worker, type):
        raise LaunchError(
            f"component '{component}': the worker must be a plain class, got {type(worker).__name__} "
            "(drop @ray.remote; pass actor options in LaunchOptions.actor_options)"
        )


def _start_group(
    plan: LaunchPlan,
    component: str,
    worker: type,
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    opts: LaunchOptions,
    addresses: Mapping[int, str],
) -> WorkerGroup:
    """Submit the component's actors (Ray starts them asynchronously)."""
    ray = _ray()
    by_constructor = opts.env_via == "constructor"
    actor_class = ray.remote(_host(worker))
    # Pickled here once: in the worker it is unpickled (its module imported) only after the environment is set.
    pickled_worker = ray.cloudpickle.dumps(worker)
    processes = plan.processes(component)
    master = addresses[processes[0].node_rank]
    actors = []
    for process in processes:
        env = {**plan.env(process), "MASTER_ADDR": master}
        pod_gpus = plan.pod_gpus.get(process.node_rank)
        binding = Binding(component, process, len(processes), master, pod_gpus) if opts.verify else None
        resources = plan.resources(process)
        options = _actor_options(opts, resources, None if by_constructor else env)
        if opts.pin_node_by == "label":
            del resources[node_resource(process.node_rank)]
            options["label_selector"] = node_labels(process.node_rank)
        placed = actor_class.options(**options)
        actors.append(placed.remote(env if by_constructor else None, binding, pickled_worker, *args, **kwargs))
    return WorkerGroup(component, actors, processes)


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

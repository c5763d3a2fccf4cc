"""The actor the launcher runs for each planned process, how one is started where the plan says, and the few
Ray calls the rest of the launcher makes through it (Ray imported on first use, an actor killed, a failed
constructor's error).

Every actor asks for `num_gpus=0` and for the contract's custom resources: its node's (so it lands on its
planned node) and one share of each GPU it holds (so exclusive processes can never share a GPU, while a GPU the
plan shares among k processes is asked for as 1/k by each). Then, before the worker's own constructor, the
actor checks its binding (`verify.py`).

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from placement_core.contract import node_labels, node_resource
from placement_core.errors import LaunchError
from placement_core.observe.verify import Binding, ProcessCheck, check_here, cuda_loaded_before

if TYPE_CHECKING:
    from placement_core.launcher.groups import LaunchOptions
    from placement_core.launcher.plan import LaunchPlan
    from placement_core.plan import ProcessPlan


def connected_ray() -> Any:
    """Ray, imported on first use (so `import placement_core.launcher` works without the `rlplace[ray]` extra), once
    this process is connected to a cluster."""
    try:
        import ray
    except ImportError as err:
        raise LaunchError("Ray is not installed; install the extra: pip install 'rlplace[ray]'") from err
    if not ray.is_initialized():
        raise LaunchError("not connected to a Ray cluster; call ray.init(address=...) first")
    return ray


def kill_actor(actor: Any) -> None:
    """Kill an actor that may be dead already, or whose Ray is going away: it does not run either way."""
    with contextlib.suppress(Exception):
        connected_ray().kill(actor, no_restart=True)


def constructor_error(err: BaseException) -> str:
    """Ray's actor errors are many lines; the constructor's exception is the last non-empty one."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[-1] if lines else type(err).__name__


@dataclass
class Starter:
    """What starting one process of a component needs; the launch starts each process with it, and a
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

    @classmethod
    def of(
        cls,
        plan: LaunchPlan,
        component: str,
        worker: type,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        opts: LaunchOptions,
        addresses: Mapping[int, str],
        from_mount: bool,
    ) -> Starter:
        """How the component's processes are started: its actor class, and MASTER_ADDR from rank 0's node."""
        ray = connected_ray()
        processes = plan.processes(component)
        return cls(
            component,
            plan,
            opts,
            master=addresses[processes[0].node_rank],
            world_size=len(processes),
            actor_class=ray.remote(_host(worker)),
            # Pickled here once: a worker process unpickles it (imports its module) only once its environment is set.
            pickled_worker=ray.cloudpickle.dumps(worker),
            args=tuple(args),
            kwargs=dict(kwargs),
            from_mount=from_mount,
        )


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

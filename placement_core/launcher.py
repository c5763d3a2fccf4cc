"""Start a plan's processes as Ray actors on the nodes and GPUs the plan names (spec kubernetes.md, runtime side).

Ray cannot be asked for specific GPU ids, and mixing `num_gpus>0` actors with self-managed visibility
double-books GPUs. So every actor asks for `num_gpus=0` and for custom resources that the operator makes each
Ray node declare: one per node rank (so an actor lands on its planned node) and one per GPU (so exclusive
processes can never share a GPU, while a GPU the plan shares among k processes is asked for as 1/k by each).
The planned CUDA_VISIBLE_DEVICES and the rest of the placement.md §3 environment travel in
`runtime_env.env_vars`.

The name builders (`node_label`, `node_labels`, `node_resource`, `gpu_resource`, `node_resources`,
`ray_start_params`) and the plan locations (`PLAN_ENV`, `PLAN_FILE_ENV`, `DEFAULT_PLAN_PATH`) are the one
place the operator and the launcher agree on; the operator imports them from here. This module imports Ray
only when it talks to a cluster, so `import placement_core.launcher` works without the `rlplace[ray]` extra.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import math
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from placement_core.cluster import ACCELERATOR
from placement_core.placement import Placement, placement_env

if TYPE_CHECKING:
    from placement_core.components import ComponentPlacement

#: Ray node label holding the node's cluster node rank (`ray start --labels rlplace.io/node-rank=<rank>`).
NODE_LABEL = "rlplace.io/node-rank"
#: How much of its node resource a Ray node declares; each actor takes 1, so this bounds actors per node.
NODE_RESOURCE_CAPACITY = 1000
#: Ray grants custom resources in steps of 1/10000; a shared GPU's share is rounded down to that step.
RESOURCE_STEP = 10_000
#: Environment variable that may hold the plan itself (JSON), for drivers started without the mounted file.
PLAN_ENV = "RLPLACE_PLAN"
#: Environment variable naming the plan file, when it is not at DEFAULT_PLAN_PATH.
PLAN_FILE_ENV = "RLPLACE_PLAN_FILE"
#: Where the operator mounts key `plan.json` of the `<job>-placement` ConfigMap in the head pod.
DEFAULT_PLAN_PATH = "/etc/rlplace/plan.json"

_NODE_RESOURCE = re.compile(r"^rlplace_node_(\d+)$")
_GPU_RESOURCE = re.compile(r"^rlplace_gpu_(\d+)_(\d+)$")


class LaunchError(RuntimeError):
    """A plan the Ray cluster cannot run, or a worker that failed to start; the message is one line."""


class WorkerDiedError(LaunchError):
    """A worker actor died; `component` and `rank` say which, so the caller can tell what to restart."""

    def __init__(self, message: str, component: str, rank: int) -> None:
        super().__init__(message)
        self.component = component
        self.rank = rank


# -- names shared with the operator ----------------------------------------------------------------------


def node_label() -> str:
    """The Ray node label key that carries the cluster node rank."""
    return NODE_LABEL


def node_labels(rank: int) -> dict[str, str]:
    """The labels a Ray node of cluster node rank `rank` declares."""
    return {NODE_LABEL: str(rank)}


def node_resource(rank: int) -> str:
    """The custom resource that pins an actor to the Ray node of cluster node rank `rank`."""
    return f"rlplace_node_{rank}"


def gpu_resource(rank: int, gpu: int) -> str:
    """The custom resource for local GPU `gpu` of node rank `rank`: amount 1, shared out by the plan."""
    return f"rlplace_gpu_{rank}_{gpu}"


def node_resources(rank: int, num_gpus: int) -> dict[str, float]:
    """Every custom resource a Ray node of rank `rank` with `num_gpus` GPUs declares."""
    resources: dict[str, float] = {node_resource(rank): NODE_RESOURCE_CAPACITY}
    resources.update({gpu_resource(rank, gpu): 1 for gpu in range(num_gpus)})
    return resources


def ray_start_params(rank: int, num_gpus: int) -> dict[str, str]:
    """`rayStartParams` for a KubeRay worker group of one node: `--num-gpus` and the `--resources` JSON.

    KubeRay pastes each value after `--<key>=` into a shell command, so the JSON is wrapped in single quotes.
    The node labels go in the group's own `labels` field (`node_labels`): KubeRay 1.5+ rejects
    `rayStartParams['labels']`.
    """
    resources = json.dumps(node_resources(rank, num_gpus), separators=(",", ":"))
    return {"num-gpus": str(num_gpus), "resources": f"'{resources}'"}


def parse_node_resource(name: str) -> int | None:
    """The node rank in a `node_resource` name, or None for any other resource."""
    match = _NODE_RESOURCE.match(name)
    return int(match.group(1)) if match else None


def parse_gpu_resource(name: str) -> tuple[int, int] | None:
    """(node rank, local GPU) in a `gpu_resource` name, or None for any other resource."""
    match = _GPU_RESOURCE.match(name)
    return (int(match.group(1)), int(match.group(2))) if match else None


# -- the plan as the launcher needs it -------------------------------------------------------------------


@dataclass(frozen=True)
class ProcessSpec:
    """One process to start: where it runs, which GPUs it holds, and its environment."""

    component: str
    rank: int
    node_rank: int
    gpus: tuple[int, ...]
    """Local GPUs the process holds (its hardware ranks on accelerator groups); empty for node placements."""
    env: Mapping[str, str] = field(repr=False)


@dataclass(frozen=True)
class LaunchPlan:
    """The processes of every component, and how many processes of the whole plan hold each GPU.

    The sharing count is plan-wide: collocated components ask for 1/k of a GPU each even when launched
    one at a time, so the second one still fits and an exclusive (k=1) process takes the GPU whole.
    """

    components: Mapping[str, tuple[ProcessSpec, ...]]
    holders: Mapping[tuple[int, int], int]

    def processes(self, component: str) -> tuple[ProcessSpec, ...]:
        procs = self.components.get(component)
        if procs is None:
            raise LaunchError(f"unknown component '{component}' (known: {', '.join(self.components)})")
        return procs

    def share(self, node_rank: int, gpu: int) -> float:
        """What one holder of the GPU asks for: 1/k rounded down to Ray's step, so k shares fit in 1."""
        return math.floor(RESOURCE_STEP / self.holders[(node_rank, gpu)]) / RESOURCE_STEP

    def resources(self, proc: ProcessSpec) -> dict[str, float]:
        """The custom resources one actor asks Ray for."""
        resources: dict[str, float] = {node_resource(proc.node_rank): 1}
        resources.update({gpu_resource(proc.node_rank, g): self.share(proc.node_rank, g) for g in proc.gpus})
        return resources

    def demand(self, components: Sequence[str]) -> dict[str, float]:
        """Total custom resources the given components ask for together."""
        total: dict[str, float] = {}
        for name in components:
            for proc in self.processes(name):
                for key, amount in self.resources(proc).items():
                    total[key] = total.get(key, 0.0) + amount
        return total


def load_plan(source: ComponentPlacement | Mapping[str, Any] | str) -> LaunchPlan:
    """A LaunchPlan from a ComponentPlacement, the plan dict `build_plan(..., with_env=True)` makes, or its JSON.

    The ConfigMap's plan and an in-process ComponentPlacement give the same LaunchPlan, so a driver can be
    tried offline on the exact plan the operator stored.
    """
    if isinstance(source, str):
        try:
            source = json.loads(source)
        except json.JSONDecodeError as err:
            raise LaunchError(f"the plan is not valid JSON: {err}") from err
    if not isinstance(source, Mapping):
        source = _plan_from_placement(source)
    components = source.get("components") if isinstance(source, Mapping) else None
    if not isinstance(components, Mapping) or not components:
        raise LaunchError("the plan has no 'components' mapping (expected the output of build_plan)")
    specs = {}
    for name, comp in components.items():
        entries = _entries(name, comp)
        specs[name] = tuple(_process_spec(name, entry, len(entries)) for entry in entries)
    holders: dict[tuple[int, int], int] = {}
    for procs in specs.values():
        for proc in procs:
            for gpu in proc.gpus:
                holders[(proc.node_rank, gpu)] = holders.get((proc.node_rank, gpu), 0) + 1
    crowded = [key for key, count in holders.items() if count > RESOURCE_STEP]
    if crowded:
        node, gpu = crowded[0]
        raise LaunchError(
            f"GPU {gpu} on node rank {node} is shared by {holders[crowded[0]]} processes (at most {RESOURCE_STEP})"
        )
    return LaunchPlan(specs, holders)


def read_plan(path: str | os.PathLike[str] | None = None) -> LaunchPlan:
    """The plan a driver in the RayCluster runs: `path`, else $RLPLACE_PLAN (JSON), else the mounted file."""
    if path is None and os.environ.get(PLAN_ENV):
        return load_plan(os.environ[PLAN_ENV])
    file = Path(path or os.environ.get(PLAN_FILE_ENV) or DEFAULT_PLAN_PATH)
    packed = file.with_name(file.name + ".gz")
    try:
        # The operator stores large plans gzipped (ConfigMap key plan.json.gz), mounted beside plan.json.
        text = (
            gzip.decompress(packed.read_bytes()).decode() if not file.exists() and packed.exists() else file.read_text()
        )
    except OSError as err:
        raise LaunchError(
            f"cannot read the plan '{file}': {err.strerror} (set ${PLAN_ENV} or ${PLAN_FILE_ENV})"
        ) from err
    return load_plan(text)


def _plan_from_placement(placement: ComponentPlacement) -> dict[str, Any]:
    """build_plan's data; its entries carry the hardware type the launcher reads to know GPUs from robots."""
    from placement_core.plan import build_plan

    return build_plan(placement, with_env=True)


def _entries(name: str, component: object) -> list[Mapping[str, Any]]:
    processes = component.get("processes") if isinstance(component, Mapping) else None
    if not isinstance(processes, list) or not processes:
        raise LaunchError(f"component '{name}': the plan lists no processes")
    ranks = [p.get("rank") if isinstance(p, Mapping) else None for p in processes]
    if ranks != list(range(len(processes))):
        raise LaunchError(f"component '{name}': process ranks must be 0..{len(processes) - 1} in order, got {ranks}")
    return processes


def _process_spec(name: str, entry: Mapping[str, Any], world_size: int) -> ProcessSpec:
    rank = entry["rank"]
    try:
        node_rank = int(entry["cluster_node_rank"])
        gpus = _held_gpus(entry)
        env = entry["env"] if "env" in entry else _placement_env(entry, world_size)
    except KeyError as err:
        raise LaunchError(f"component '{name}' rank {rank}: the plan's entry has no '{err.args[0]}'") from err
    except (TypeError, ValueError) as err:
        raise LaunchError(f"component '{name}' rank {rank}: malformed process entry ({err})") from err
    return ProcessSpec(name, rank, node_rank, gpus, {str(k): str(v) for k, v in env.items()})


def _placement_env(entry: Mapping[str, Any], world_size: int) -> dict[str, str]:
    """The §3 variables for a plan saved without env (`rlplace plan -o json`); node groups' env_configs are
    not in such a plan, so only the operator's plan (with_env=True) carries them. MASTER_ADDR is set at launch."""
    fields = {name: entry[name] for name in Placement.__dataclass_fields__}
    return placement_env(Placement(**fields), world_size, master_addr="")


def _held_gpus(entry: Mapping[str, Any]) -> tuple[int, ...]:
    """The local GPUs a process holds, which is what exclusivity is about.

    On accelerator groups these are its hardware ranks; robot groups' hardware ranks are robots, and node
    placements hold none. Plans that carry `hardware_type` say which; for plans without it, a process that
    sees exactly its hardware ranks (isolated GPUs) holds them, and one that sees the whole node while having
    hardware ranks is a robot process when isolated, else a non-isolated GPU process.
    """
    ranks = tuple(int(r) for r in entry.get("local_hardware_ranks") or ())
    if "hardware_type" in entry:
        return ranks if entry["hardware_type"] == ACCELERATOR else ()
    if not ranks or int(entry["local_accelerator_rank"]) < 0:
        return ()
    if entry.get("isolate_accelerator", True):
        return ranks if list(entry["visible_accelerators"]) == [str(r) for r in ranks] else ()
    return ranks


# -- checking the plan against the Ray cluster -----------------------------------------------------------


def check_resources(
    plan: LaunchPlan,
    components: Sequence[str],
    total: Mapping[str, float],
    available: Mapping[str, float] | None = None,
) -> None:
    """Raise LaunchError if the Ray cluster lacks a node or GPU the components need, or (given `available`)
    if some are held by running actors. Pure, so the messages are tested without Ray.
    """
    demand = plan.demand(components)
    missing = _missing(demand, total)
    if missing:
        raise LaunchError(
            f"the Ray cluster lacks what {_names(components)} need: {'; '.join(missing)} ({_declared(total)})"
        )
    if available is not None:
        busy = _busy(demand, available)
        if busy:
            raise LaunchError(f"{_names(components)} cannot start, resources held by running actors: {'; '.join(busy)}")


def _missing(demand: Mapping[str, float], total: Mapping[str, float]) -> list[str]:
    """Absent nodes, then absent GPUs per node, as short phrases."""
    nodes = sorted({r for key in demand if (r := _resource_node(key)) is not None and node_resource(r) not in total})
    gpus: dict[int, list[int]] = {}
    for key in demand:
        parsed = parse_gpu_resource(key)
        if parsed and key not in total and parsed[0] not in nodes:
            gpus.setdefault(parsed[0], []).append(parsed[1])
    phrases = [f"node rank {r}" for r in nodes]
    for rank in sorted(gpus):
        have = _gpus_of(rank, total)
        phrases.append(f"GPU {_span(gpus[rank])} on node rank {rank} (it declares {len(have)} GPUs)")
    return phrases


def _busy(demand: Mapping[str, float], available: Mapping[str, float]) -> list[str]:
    """Resources whose free amount is below the demand; Ray omits fully used resources, so absent means 0."""
    phrases = []
    for key in sorted(demand, key=_resource_order):
        free = available.get(key, 0.0)
        if free + 1e-6 < demand[key]:
            phrases.append(f"{_describe(key)} needs {demand[key]:g}, {free:g} free")
    return phrases


def _resource_node(key: str) -> int | None:
    gpu = parse_gpu_resource(key)
    return gpu[0] if gpu else parse_node_resource(key)


def _resource_order(key: str) -> tuple[int, int]:
    gpu = parse_gpu_resource(key)
    return gpu if gpu else (parse_node_resource(key) or 0, -1)


def _describe(key: str) -> str:
    gpu = parse_gpu_resource(key)
    return f"GPU {gpu[1]} on node rank {gpu[0]}" if gpu else f"node rank {parse_node_resource(key)} ('{key}')"


def _gpus_of(rank: int, total: Mapping[str, float]) -> list[int]:
    return sorted(g for key in total if (p := parse_gpu_resource(key)) and p[0] == rank for g in [p[1]])


def _declared(total: Mapping[str, float]) -> str:
    ranks = sorted(r for key in total if (r := parse_node_resource(key)) is not None)
    return (
        f"Ray nodes declare node ranks {_span(ranks)}"
        if ranks
        else f"no Ray node declares a '{node_resource(0)}'-style resource"
    )


def _names(components: Sequence[str]) -> str:
    return ", ".join(f"component '{c}'" for c in components)


def _span(values: Sequence[int]) -> str:
    """`[0, 1, 2, 5]` -> `0-2,5`: compact, like the placement grammar."""
    ordered = sorted(set(values))
    if not ordered:
        return "none"
    runs = [[ordered[0], ordered[0]]]
    for value in ordered[1:]:
        if value == runs[-1][1] + 1:
            runs[-1][1] = value
        else:
            runs.append([value, value])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


# -- talking to Ray --------------------------------------------------------------------------------------


def _ray() -> Any:
    """Import Ray on first use, so the name builders above work without the extra."""
    try:
        import ray
    except ImportError as err:
        raise LaunchError("Ray is not installed; install the extra: pip install 'rlplace[ray]'") from err
    if not ray.is_initialized():
        raise LaunchError("not connected to a Ray cluster; call ray.init(address=...) first")
    return ray


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

    def __init__(self, component: str, actors: list[Any], processes: Sequence[ProcessSpec]) -> None:
        self.component = component
        self.actors = actors
        self.processes = tuple(processes)

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
    free_timeout_s: float | None = 10.0
    """How long to wait for resources held by other actors (a group just shut down frees them a moment
    later); None skips the check and leaves the actors queued by Ray until `ready_timeout_s`."""
    ready_timeout_s: float = 120.0
    """Actors not up by then are killed and reported."""
    env_via: Literal["runtime_env", "constructor"] = "runtime_env"
    """`runtime_env`: the environment is set when the worker process starts (Ray's guarantee; Ray starts
    such workers through an extra setup process, about twice the start time on a busy machine).
    `constructor`: set in the actor just before the worker's `__init__`; as fast as plain actors, enough
    for anything that reads the variables at run time (CUDA, NCCL, torch.distributed), not for code that
    reads them when its module is imported."""
    actor_options: Mapping[str, Any] = field(default_factory=dict)
    """Further Ray actor options (max_concurrency, memory, ...); placement ones are the launcher's."""


def launch(
    plan: LaunchPlan | ComponentPlacement | Mapping[str, Any] | str,
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
    plan: LaunchPlan | ComponentPlacement | Mapping[str, Any] | str,
    workers: Mapping[str, type],
    *,
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    options: LaunchOptions | None = None,
) -> dict[str, WorkerGroup]:
    """Start several components at once (worker class per component, same constructor arguments).

    All components are checked together before any actor starts, and all start before any is waited on,
    so collocated components come up side by side; if one fails, every group started here is shut down.
    """
    opts = options or LaunchOptions()
    launch_plan = plan if isinstance(plan, LaunchPlan) else load_plan(plan)
    names = list(workers)
    for name in names:
        launch_plan.processes(name)
        _check_worker(name, workers[name])
    clash = sorted(set(opts.actor_options) & set(PLACEMENT_OPTIONS))
    if clash:
        raise LaunchError(f"actor_options may not set {', '.join(clash)} (the plan decides them)")
    _wait_free(launch_plan, names, opts.free_timeout_s)
    addresses = ray_node_addresses()
    groups: dict[str, WorkerGroup] = {}
    try:
        for name in names:
            groups[name] = _start_group(launch_plan, name, workers[name], args, kwargs or {}, opts, addresses)
        _wait_ready(list(groups.values()), opts.ready_timeout_s)
    except BaseException:
        for group in groups.values():
            group.shutdown()
        raise
    return groups


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
    actor_class = ray.remote(_with_env(worker) if by_constructor else worker)
    processes = plan.processes(component)
    master = addresses[processes[0].node_rank]
    actors = []
    for proc in processes:
        env = {**proc.env, "MASTER_ADDR": master}
        placed = actor_class.options(**_actor_options(opts, plan.resources(proc), None if by_constructor else env))
        actors.append(placed.remote(env, *args, **kwargs) if by_constructor else placed.remote(*args, **kwargs))
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


def _with_env(worker: type) -> type:
    """`worker` with a constructor that installs the planned environment before running its own."""

    def __init__(self: Any, rlplace_env: Mapping[str, str], *args: Any, **kwargs: Any) -> None:
        os.environ.update(rlplace_env)
        worker.__init__(self, *args, **kwargs)

    return type(worker.__name__, (worker,), {"__init__": __init__, "__doc__": worker.__doc__})


def _wait_ready(groups: list[WorkerGroup], timeout_s: float) -> None:
    """Wait until every actor's constructor has run; name the first rank that failed or did not start."""
    ray = _ray()
    pending = {}
    for group in groups:
        for rank, actor in enumerate(group.actors):
            pending[actor.__ray_ready__.remote()] = (group, rank)
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
            ray.get(ready[0])
        except ray.exceptions.RayActorError as err:
            cause = _first_line(err)
            raise LaunchError(f"component '{group.component}' rank {rank} failed to start: {cause}") from err


def _first_line(err: BaseException) -> str:
    """Ray's actor errors are many lines; the constructor's exception is the last non-empty one."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[-1] if lines else type(err).__name__


# -- a simulated cluster for tests, benchmarks and trying a driver offline --------------------------------


@contextlib.contextmanager
def simulated_cluster(gpus_per_node: Sequence[int], tmpdir: str | None = None) -> Iterator[Any]:
    """A local `ray.cluster_utils.Cluster` whose node i declares `gpus_per_node[i]` fake GPUs and the
    rlplace label and resources of rank i, connected with ray.init; shut down on exit.

    Ray's socket paths must stay short, so its temp dir comes from RAY_TMPDIR (made under /tmp when unset,
    and removed on exit with the session logs in it).
    """
    import ray
    from ray.cluster_utils import Cluster

    previous = os.environ.get("RAY_TMPDIR")
    made = None if tmpdir or previous else tempfile.mkdtemp(prefix="rlray", dir="/tmp")
    os.environ["RAY_TMPDIR"] = tmpdir or previous or made
    cluster = Cluster()
    try:
        for rank, gpus in enumerate(gpus_per_node):
            cluster.add_node(num_cpus=1, num_gpus=gpus, resources=node_resources(rank, gpus), labels=node_labels(rank))
        ray.init(address=cluster.address, logging_level="WARNING", log_to_driver=False)
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
        if previous is None:
            os.environ.pop("RAY_TMPDIR", None)
        else:
            os.environ["RAY_TMPDIR"] = previous
        if made:
            shutil.rmtree(made, ignore_errors=True)

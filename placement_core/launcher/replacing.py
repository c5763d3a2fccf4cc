"""Starting a lost rank of a replaceable worker group again, while the driver goes on with the live ranks
(`LaunchOptions.replace_lost`; docs/driver.md, "Replacing lost replicas").

The group's thread (`replace_lost_ranks`, started by `WorkerGroup.lose` at the first loss) looks for the lost
rank's node, picks the plan to start it from (the plan as the node's pod mounts it when the groups were launched
from the mounted plan, which the operator rewrites when it moves a node rank), starts it with the group's
`Starter` exactly as at launch, and lets it join once its binding check is ok. These functions are the group's
own, kept apart from groups.py: they work on the WorkerGroup's private state (its lock, ledger, stop flag, the
actors it is starting and the lines it has for the driver's log) as its methods would. The groups launched in
this process are remembered here too: a replaced rank is cross-checked against every live process, and the
binding report printed after it covers them all.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Any

from placement_core.contract import NODE_RANKS_MOUNT_DIR, node_labels, node_resource
from placement_core.errors import LaunchError, PlacementError
from placement_core.launcher.actors import CHECK_METHOD, Starter, connected_ray, constructor_error, kill_actor
from placement_core.launcher.plan import LaunchPlan, read_plan
from placement_core.observe.verify import BindingError, BindingReport, replaced_line
from placement_core.plan import Plan, ProcessPlan

if TYPE_CHECKING:
    from placement_core.launcher.groups import LaunchOptions, WorkerGroup

#: How often a replaceable group's thread looks for the node of a lost rank (seconds).
REPLACE_POLL_S = 0.5
#: The longest wait between two tries to start a rank whose start failed (doubling from REPLACE_POLL_S).
REPLACE_BACKOFF_MAX_S = 30.0


# -- the driver's groups, for the binding report printed after a replacement ------------------------------

#: The groups launched in this process and not shut down, in launch order (weakly: a group the driver dropped
#: is gone with its actors).
_LAUNCHED: list[weakref.ref[WorkerGroup]] = []
_LAUNCHED_LOCK = threading.Lock()


def remember_launched(groups: Iterable[WorkerGroup]) -> None:
    """Note groups just launched (`launch_all`)."""
    with _LAUNCHED_LOCK:
        _LAUNCHED.extend(weakref.ref(group) for group in groups)


def forget_launched(group: WorkerGroup) -> None:
    """Drop a group that is shut down (`WorkerGroup.shutdown`)."""
    with _LAUNCHED_LOCK:
        _LAUNCHED[:] = [ref for ref in _LAUNCHED if ref() is not None and ref() is not group]


def launched_groups() -> list[WorkerGroup]:
    """The groups launched in this process that still run, in launch order."""
    with _LAUNCHED_LOCK:
        return [group for ref in _LAUNCHED if (group := ref()) is not None and group.actors]


# -- the plan a lost rank starts from ---------------------------------------------------------------------

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
    ray = connected_ray()
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


def _restart_plan(starter: Starter, node_rank: int) -> LaunchPlan:
    """The plan to start a lost rank of `node_rank` again with. The launch's, unless the group was launched
    from the mounted plan, which the operator rewrites when it moves a node rank to another Kubernetes node:
    then the plan as that node's pod mounts it (POD_PLAN_DIR, read by a task on the node: the pod mounted
    it when it started, while the driver's copy of a changed ConfigMap is refreshed by the kubelet up to a
    minute later), else the driver's mounted plan now, else (neither readable) the launch's."""
    if not starter.from_mount:
        return starter.plan
    for fresh in (_plan_on_node(node_rank, starter.opts), _plan_here()):
        if fresh is not None and starter.component in fresh.plan.names:
            return fresh
    return starter.plan


def _restart_entry(
    starter: Starter, plan: LaunchPlan, rank: int, process: ProcessPlan
) -> tuple[LaunchPlan, ProcessPlan]:
    """`rank`'s plan and entry in `plan`; else in the group's own plan (the launch's, or the last resize's: a
    `plan` of another size is one the pod mounted before the resize, or a plan made anew, not a node rank moved),
    else `process` as it runs."""
    for candidate in (plan, starter.plan):
        processes = candidate.processes(starter.component)
        if len(processes) == starter.world_size and processes[rank].node_rank == process.node_rank:
            return candidate, processes[rank]
    return starter.plan, process


# -- the replacement thread -------------------------------------------------------------------------------


def replace_lost_ranks(group: WorkerGroup) -> None:
    """The replacement thread of a replaceable group: until shutdown, every REPLACE_POLL_S, start again the lost
    ranks whose node is in Ray with what they hold free, all at once (a rank whose start failed waits longer each
    time, up to REPLACE_BACKOFF_MAX_S)."""
    # Imported here, not at the top: groups.py imports this module (the thread is a group's), and which nodes are
    # in Ray is the launch's question too.
    from placement_core.launcher.groups import ray_node_addresses

    retry_at: dict[int, float] = {}
    backoff: dict[int, float] = {}
    while not group._stop.wait(REPLACE_POLL_S):
        starter = group._starter  # a resize gives the group a starter of its new plan
        assert starter is not None
        now = time.monotonic()
        waiting = [rank for rank in group._ledger.to_replace() if retry_at.get(rank, 0.0) <= now]
        if not waiting:
            continue
        try:
            ray = connected_ray()
            addresses = ray_node_addresses()
            available = ray.available_resources()
        except Exception:  # Ray going away, or the GCS briefly unreachable: look again later
            continue
        processes = group.processes
        ready = [
            rank
            for rank in waiting
            if rank < len(processes)  # not removed by a resize since
            and (process := processes[rank]).node_rank in addresses
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


def _start_again(group: WorkerGroup, starter: Starter, ranks: Sequence[int]) -> list[int]:
    """Start lost ranks again (and the ranks a resize added), all at once, each as the launch starts a process:
    a rank that comes up and passes its binding check joins the live ranks, one that fails the check is given up
    on. Returns the ranks to try again later: a constructor that failed, or not up within ready_timeout_s."""
    ray = connected_ray()
    plans: dict[int, LaunchPlan] = {}  # node rank -> the plan its ranks start from
    pending: dict[Any, tuple[int, Any, ProcessPlan]] = {}
    failed: list[int] = []
    try:
        for rank in ranks:
            with group._lock:
                if rank >= len(group.processes):
                    continue  # removed by a resize meanwhile
                planned = group.processes[rank]
            node_rank = planned.node_rank
            if node_rank not in plans:
                plans[node_rank] = _restart_plan(starter, node_rank)
            rank_plan, process = _restart_entry(starter, plans[node_rank], rank, planned)
            actor = starter.start(process, rank_plan)
            with group._lock:
                stopped, removed = group._stop.is_set(), rank >= len(group.processes)
                if not (stopped or removed):
                    group._starting[rank] = actor
            if stopped or removed:
                kill_actor(actor)
                if stopped:
                    return []
                continue  # removed by a resize while it was being started
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
    ray = connected_ray()
    try:
        check = ray.get(check_ref)
    except ray.exceptions.RayActorError as err:
        group._note(f"replace: component '{group.component}' rank {rank} failed to start: {constructor_error(err)}")
        _discard(group, rank, actor)
        return False
    if check is not None:
        # Its own verdict, and the cross-check against every live process (no two may see one GPU).
        others = [pair for g in launched_groups() for pair in g._live_checks()]
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
        new = group._ledger.is_new(rank)
        seconds = group._ledger.join(rank)
        # Noted under the lock that guards the join, so a driver that takes the rank also prints its line.
        where = f"component '{group.component}' rank {rank} on node rank {process.node_rank}"
        # The contract's line marks any rank started while the job runs, a new replica's too: the operator reads
        # the first binding report after it as the one that verifies the rank.
        said = (
            f"started: {where} after {seconds:.1f} s (a new replica)"
            if new
            else f"replaced: {where} after {seconds:.1f} s"
        )
        group._note(said, replaced_line(group.component, rank), report=True)
    return True


def _discard(group: WorkerGroup, rank: int, actor: Any) -> None:
    """Kill a restarted actor that does not join (unless shutdown took it already)."""
    with group._lock:
        if group._starting.get(rank) is not actor:
            return
        del group._starting[rank]
    kill_actor(actor)

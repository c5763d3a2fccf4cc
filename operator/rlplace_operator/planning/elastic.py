"""The replicas of elastic components (spec.components[].replicas, minReplicas, maxReplicas; docs/elastic.md).

A component's placement is written in units that repeat (placement_core.grammar.replica_shape): one process and
its GPUs, or one GPU and the processes that share it. `replicas` sets how many units run; the first are where
componentPlacement puts them and never move, more continue its last part over the next resources, fewer drop the
last. The range bounds what may change later: its maximum must be placeable and replaceable (plan.plan_job
places it at admission on every ready node of the job's NodeGroups), so that growing later can never meet a
placement error.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from placement_core.errors import PlacementError
from placement_core.grammar import PlacementEntry, replica_shape, resized_placement
from rlplace_operator.api import conditions as cond
from rlplace_operator.api.rljob import ComponentSettings, RLJobSpec
from rlplace_operator.api.status import Resize, RLJobStatus


def elastic_components(spec: RLJobSpec) -> list[ComponentSettings]:
    """The components that set replicas or a range."""
    return [c for c in spec.components if (c.replicas, c.min_replicas, c.max_replicas) != (None, None, None)]


def _entry_of(entries: Sequence[PlacementEntry], name: str) -> int:
    """The index of the one entry that places `name` alone."""
    for index, entry in enumerate(entries):
        if name in entry.names:
            if len(entry.names) > 1:
                raise PlacementError(
                    f"component '{name}': replicas need a componentPlacement entry of its own, but it shares "
                    f"'{entry.key}' with {', '.join(n for n in entry.names if n != name)}"
                )
            return index
    raise PlacementError(f"spec.components names '{name}', which the placement does not place")


def with_replicas(
    spec: RLJobSpec, entries: Sequence[PlacementEntry], count: Callable[[ComponentSettings], int | None]
) -> list[PlacementEntry]:
    """`entries` with each elastic component at `count(settings)` replicas (None: as placed); PlacementError (one
    line, naming the component) for a placement without one shape or a count outside the range."""
    resized = list(entries)
    for settings in elastic_components(spec):
        index = _entry_of(resized, settings.name)
        entry = resized[index]
        try:
            placed = replica_shape(entry.placement).count
        except PlacementError as err:
            raise PlacementError(f"component '{settings.name}': {err}") from None
        wanted = count(settings) or placed
        low, high = settings.min_replicas or 1, settings.max_replicas or max(wanted, placed)
        if not low <= wanted <= high:
            raise PlacementError(
                f"component '{settings.name}': {wanted} replicas (componentPlacement places {placed}) is outside "
                f"minReplicas..maxReplicas {low}..{high}"
            )
        resized[index] = dataclasses.replace(entry, placement=resized_placement(entry.placement, wanted))
    return resized


def running(settings: ComponentSettings) -> int | None:
    """The replicas the spec asks to run now."""
    return settings.replicas


def at_most(settings: ComponentSettings) -> int | None:
    """The most replicas the range allows (None: no maximum, the count now is the most)."""
    return settings.max_replicas or settings.replicas


# -- the loop: the operator's own changes of replicas (spec.elastic) ---------------------------------------------

#: Iterations reported on a change's replicas before it is judged or another change is made.
SETTLE_ITERATIONS = 3
#: A shrink (which promises the same iteration time) is undone when the iteration grew by more than this share.
SHRINK_TOLERANCE = 0.10
#: A change of the loop's not applied this long (and not within the cooldown) found no room: it is undone.
UNPLACED_AFTER_S = 60.0
#: The most changes kept in status.resizes.
MAX_RESIZES_KEPT = 10


@dataclass(frozen=True)
class ReplicasChange:
    """A change of one component's replicas the loop decided: `index` is its entry in spec.components."""

    component: str
    index: int
    previous: int
    replicas: int
    reason: str
    """Grow, Shrink, Undo or Yield."""
    predicted: float
    """The iteration time it promises (seconds)."""
    why: str
    """One line for the Event."""


@dataclass(frozen=True)
class LoopStep:
    """What one look at a running job's step times decides: a change to make, and the last change judged."""

    change: ReplicasChange | None = None
    judged: Resize | None = None


def running_replicas(status: RLJobStatus) -> dict[str, int]:
    """Component -> the replicas the job runs now, from status.appliedPlacement (components placed alone)."""
    counts: dict[str, int] = {}
    for entry in status.applied_placement:
        if "," in entry.components:
            continue
        try:
            counts[entry.components] = replica_shape(entry.placement).count
        except PlacementError:
            continue
    return counts


#: room(index, now, wanted): the most replicas from `now` to `wanted` spec.components[index] could run now
#: (reconcile/world.py World.room).
Room = Callable[[int, int, int], int]


def loop_step(
    spec: RLJobSpec,
    status: RLJobStatus,
    now: dt.datetime,
    room: Room | None = None,
    waiting_above: Mapping[str, str] | None = None,
) -> LoopStep:
    """The elastic loop's decision for a running job (docs/elastic.md, "The loop"): nothing while a change is being
    applied (a count the job does not run yet, ranks starting or awaiting their report) or within the cooldown and
    SETTLE_ITERATIONS of the last change; then the last change judged (an Undo when it did not keep its promise);
    else the bottleneck grown when that promises at least minGain and `room` has room for it (None: any count),
    else an idle component shrunk. Before the cooldown and the judging: a component above its minimum yields its
    extra replicas (down to its minimum) when a job of higher priority waits for one of its NodeGroups
    (`waiting_above`: NodeGroup -> that job), so the queue can give it the GPUs without stopping this one."""
    policy, progress = spec.elastic, status.progress
    if not policy.enabled or progress is None or progress.iteration_seconds <= 0:
        return LoopStep()
    settings = {
        c.name: (i, c)
        for i, c in enumerate(spec.components)
        if c.min_replicas is not None or c.max_replicas is not None
    }
    running = running_replicas(status)
    if not settings or any(name not in running for name in settings):
        return LoopStep()
    last = status.resizes[-1] if status.resizes else None
    made = cond.parse_time(last.time) if last is not None else None
    since = (now - made).total_seconds() if made is not None else math.inf
    pending = [n for n, (_, c) in settings.items() if c.replicas is not None and c.replicas != running[n]]
    if pending:
        # A change not applied yet. The loop's own, still not applied after the cooldown, found no room (its
        # provisioning was refused): undone, so the spec says what runs again.
        ours = last is not None and last.kept is None and last.component in pending
        if ours and since >= max(policy.cooldown, UNPLACED_AFTER_S):
            assert last is not None
            return _judged(last, progress.iteration_seconds, settings, policy.min_gain, placed=False)
        return LoopStep()
    if any(c.starting or c.unverified for c in status.components):
        return LoopStep()
    yielded = _yield(spec, settings, running, progress.iteration_seconds, waiting_above or {})
    if yielded is not None:
        judged = last.model_copy(update={"kept": True}) if last is not None and last.kept is None else None
        return LoopStep(yielded, judged)  # the last change is not judged on iterations its yield will change
    if last is not None:
        if since < policy.cooldown or progress.iteration < last.iteration + SETTLE_ITERATIONS:
            return LoopStep()
        if last.kept is None:
            return _judged(last, progress.iteration_seconds, settings, policy.min_gain)
    seconds = {c.name: c.seconds for c in progress.components}
    observed = progress.iteration_seconds
    waited_for = {n for n in settings if any(g in (waiting_above or {}) for g in _groups_of(spec, n))}
    # Not grown while a job of higher priority waits for its GPUs (rlplace's queue would not give them anyway).
    bottleneck = progress.bottleneck if progress.bottleneck not in waited_for else None
    grown = _grow(settings, running, seconds, observed, bottleneck, policy.min_gain, room)
    return LoopStep(grown or _shrink(settings, running, seconds, observed, progress.bottleneck, policy.idle_share))


def _judged(
    last: Resize,
    observed: float,
    settings: dict[str, tuple[int, ComponentSettings]],
    min_gain: float,
    placed: bool = True,
) -> LoopStep:
    """The last change judged on the iteration time reported since: a grow keeps its promise when the iteration is
    at least half the promised gain shorter, a shrink when it is no more than SHRINK_TOLERANCE longer; an Undo
    itself is not judged again; a change never `placed` did not keep it."""
    if not placed:
        kept = False
    elif last.reason == "Grow":
        kept = observed <= last.observed_iteration_seconds * (1 - min_gain / 2)
    else:
        kept = last.reason in ("Undo", "Yield") or observed <= last.observed_iteration_seconds * (1 + SHRINK_TOLERANCE)
    judged = last.model_copy(update={"kept": kept, "observed_after_seconds": round(observed, 4)})
    if kept or last.component not in settings:
        return LoopStep(None, judged)
    index, _ = settings[last.component]
    outcome = f"observed {observed:.2f} s" if placed else "it found no room (its provisioning was refused)"
    why = (
        f"component '{last.component}' back to {last.previous} replicas: {last.reason.lower()} to {last.replicas} "
        f"promised {last.predicted_iteration_seconds:.2f} s per iteration, {outcome}"
    )
    undo = ReplicasChange(
        last.component, index, last.replicas, last.previous, "Undo", last.observed_iteration_seconds, why
    )
    return LoopStep(undo, judged)


def _groups_of(spec: RLJobSpec, name: str) -> list[str]:
    """The NodeGroups the component's own placement entry counts over."""
    for entry in spec.component_placement:
        if name in entry.components.split(","):
            return entry.node_group.split(",") if entry.node_group else list(spec.node_groups)
    return []


def _yield(
    spec: RLJobSpec,
    settings: dict[str, tuple[int, ComponentSettings]],
    running: dict[str, int],
    observed: float,
    waiting_above: Mapping[str, str],
) -> ReplicasChange | None:
    """The first ranged component above its minimum on a NodeGroup a job of higher priority waits for, down to its
    minimum: its extra replicas are the ones the job may give up without stopping."""
    for name, (index, component) in settings.items():
        now, low = running[name], component.min_replicas or 1
        waiter = next((waiting_above[g] for g in _groups_of(spec, name) if g in waiting_above), None)
        if waiter is None or now <= low:
            continue
        why = f"component '{name}' {now} -> {low} replicas: {waiter} waits for its GPUs"
        return ReplicasChange(name, index, now, low, "Yield", round(observed, 4), why)
    return None


def _grow(
    settings: dict[str, tuple[int, ComponentSettings]],
    running: dict[str, int],
    seconds: dict[str, float],
    observed: float,
    bottleneck: str | None,
    min_gain: float,
    room: Room | None,
) -> ReplicasChange | None:
    """The bottleneck at twice its replicas (at most its maximum, and as many as there is room for now), when its
    work split over them (its busy time scaled by old/new replicas) promises an iteration at least `min_gain`
    shorter. Its time is taken off the iteration's, never below the busiest other component's (components on
    their own GPUs run side by side). No room, no grow: a change that could not be placed would only be undone."""
    if bottleneck not in settings or bottleneck not in seconds:
        return None
    index, component = settings[bottleneck]
    now, busy = running[bottleneck], seconds[bottleneck]
    others = max((s for name, s in seconds.items() if name != bottleneck), default=0.0)

    def predicted_at(target: int) -> float:
        return max(others, observed - busy * (1 - now / target))

    target = min(component.max_replicas or now, 2 * now)
    # Room is asked for only when the grow would be worth it: each answer plans the job again.
    if target <= now or 1 - predicted_at(target) / observed < min_gain:
        return None
    if room is not None:
        target = room(index, now, target)
    if target <= now:
        return None
    predicted = predicted_at(target)
    gain = 1 - predicted / observed
    if gain < min_gain:
        return None
    why = (
        f"component '{bottleneck}' {now} -> {target} replicas: the bottleneck ({busy:.2f} s of {observed:.2f} s), "
        f"predicted {predicted:.2f} s per iteration ({gain:.0%} faster)"
    )
    return ReplicasChange(bottleneck, index, now, target, "Grow", round(predicted, 4), why)


def _shrink(
    settings: dict[str, tuple[int, ComponentSettings]],
    running: dict[str, int],
    seconds: dict[str, float],
    observed: float,
    bottleneck: str | None,
    idle_share: float,
) -> ReplicasChange | None:
    """The first ranged component other than the bottleneck busy less than `idle_share` of the iteration, at the
    fewest replicas (not below its minimum) that keep its busy time under that share."""
    for name, (index, component) in settings.items():
        if name == bottleneck or name not in seconds:
            continue
        now, busy = running[name], seconds[name]
        if busy >= idle_share * observed:
            continue
        target = max(component.min_replicas or 1, math.ceil(now * busy / (idle_share * observed)))
        if target >= now:
            continue
        why = (
            f"component '{name}' {now} -> {target} replicas: busy {busy:.2f} s of {observed:.2f} s per iteration "
            f"(under {idle_share:.0%}); predicted {busy * now / target:.2f} s on {target}"
        )
        return ReplicasChange(name, index, now, target, "Shrink", round(observed, 4), why)
    return None

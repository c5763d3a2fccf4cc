"""status.recommendation and re-placement (docs/autoplace.md, "From measured step times to a new placement").

Pure: from a running job's spec, status (its applied placement, status.progress, earlier re-placements) and its
cluster, what the recommendation is, whether the job is re-placed now, and what to post. The library half
(placement_core/autoplace/observed.py) derives the profile, runs the search and decides; this module maps the
operator's types to it and back.

The boundary: a recommendation that Auto decides to apply is marked `ApplyNow`; the job is re-placed when the
next iteration report arrives after that (status.progress.iteration moves past the recommendation's), so the
placement changes between two iterations the driver completed, never in the middle of one. The re-placement is
recorded in status.replacements and the children are deleted; the job is then planned again through the normal
Provision path, which plans the last re-placement's entries (`replaced_spec`).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from placement_core.autoplace.observed import (
    CONFIRMATIONS,
    Apply,
    ApplyPolicy,
    Decision,
    History,
    Verdict,
    decide,
    next_streak,
    placement_key,
    recommend,
)
from placement_core.cluster import Cluster
from placement_core.errors import PlacementError
from placement_core.grammar import PlacementEntry
from placement_core.jobconfig import REASONING, Job
from rlplace_operator.api import conditions as cond
from rlplace_operator.api.conditions import timestamp
from rlplace_operator.api.rljob import AppliedPlacementEntry, AutoPlacement, PlacementMode, RLJobSpec
from rlplace_operator.api.rljob import PlacementEntry as SpecEntry
from rlplace_operator.api.status import MAX_REPLACEMENTS_KEPT, Recommendation, Replacement, RLJobStatus
from rlplace_operator.planning.plan import batch_settings, model_parallel_settings

#: A recommendation at least this good is announced with an Event (whatever spec.autoPlacement.apply says).
EVENT_GAIN = 0.10


def _parse(value: str) -> dt.datetime:
    return dt.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)


def _grammar(entries: Sequence[AppliedPlacementEntry | SpecEntry]) -> tuple[PlacementEntry, ...]:
    return tuple(PlacementEntry.of(e.components, e.placement, e.node_group) for e in entries)


def _wire(entries: Sequence[PlacementEntry]) -> list[AppliedPlacementEntry]:
    return [
        AppliedPlacementEntry(
            components=e.key, placement=e.placement, node_group=",".join(e.node_groups) if e.node_groups else None
        )
        for e in entries
    ]


def policy_of(auto: AutoPlacement) -> ApplyPolicy:
    return ApplyPolicy(apply=auto.apply, min_gain=auto.min_gain, cooldown_seconds=float(auto.cooldown))


def history_of(status: RLJobStatus, profiled: bool = False) -> History:
    """The policy's history from status.replacements; `profiled`: the job profiled first, so its first
    re-placement left the profiling run."""
    if not status.replacements:
        return History(profiled=profiled)
    last = _parse(status.replacements[-1].time).timestamp()
    left = tuple(placement_key(_grammar(r.previous)) for r in status.replacements)
    return History(last_applied_at=last, left=left, profiled=profiled)


def profiling(spec: RLJobSpec, status: RLJobStatus) -> bool:
    """Whether the job's recommendations come from its collocated profiling run: it profiles first, was not
    re-placed yet, and the last recommendation (if any) was still profiling."""
    if not spec.auto_placement.profile_first or status.replacements:
        return False
    return status.recommendation is None or status.recommendation.profiling


@dataclass(frozen=True)
class Step:
    """What this look at a running job decides: the recommendation to show, a re-placement to record now (the
    children are then deleted and the job planned again), and Events (reason, message)."""

    recommendation: Recommendation | None
    replacement: Replacement | None = None
    events: tuple[tuple[str, str], ...] = ()


def step(spec: RLJobSpec, status: RLJobStatus, cluster: Cluster, now: dt.datetime) -> Step:
    """The recommendation for the job's latest progress, and a re-placement when Auto decided on one at an
    earlier report (the boundary is this later report). A job the model cannot price keeps no recommendation."""
    progress, earlier = status.progress, status.recommendation
    if progress is None or not status.applied_placement:
        return Step(earlier)
    if earlier is not None and earlier.decision == Verdict.apply_now and progress.iteration > earlier.iteration:
        replacement = Replacement(
            time=timestamp(now),
            iteration=progress.iteration,
            previous=list(status.applied_placement),
            component_placement=list(earlier.component_placement),
            predicted_iteration_seconds=earlier.predicted_iteration_seconds,
            observed_iteration_seconds=earlier.observed_iteration_seconds,
        )
        message = (
            f"re-placed at iteration {progress.iteration}: {_text(earlier.component_placement)}, predicted "
            f"{earlier.predicted_iteration_seconds:.2f} s per iteration (observed {earlier.observed_iteration_seconds:.2f} s)"
        )
        return Step(None, replacement, ((cond.PLACEMENT_REPLACED, message),))
    if status.replacements:
        last = status.replacements[-1]
        if status.applied_placement != last.component_placement or progress.updated_at <= last.time:
            # Being re-placed, or figures of the placement before: they price nothing the job runs now.
            return Step(earlier)
    current = _grammar(status.applied_placement)
    job = Job(cluster, current, REASONING, model_parallel_settings(spec), batch_settings(spec), {})
    seconds = {c.name: c.seconds for c in progress.components}
    try:
        found = recommend(
            job, seconds, progress.iteration_seconds, spec.auto_placement.cost_model.value, progress.weight_sync_seconds
        )
    except PlacementError:
        return Step(None)
    policy = policy_of(spec.auto_placement)
    measuring = profiling(spec, status)
    streak = earlier.streak if earlier is not None else 0
    if earlier is None or earlier.iteration != progress.iteration:
        streak = next_streak(streak, found, policy, measuring)  # one count per reported iteration
    history = history_of(status, spec.auto_placement.profile_first)
    decision: Decision = decide(policy, found, current, history, now.timestamp(), streak, measuring)
    entries = _wire(found.placement)
    same = earlier is not None and earlier.component_placement == entries
    recommendation = Recommendation(
        component_placement=entries,
        mode=found.mode,
        predicted_iteration_seconds=round(found.predicted_seconds, 4),
        current_predicted_seconds=round(found.current_predicted_seconds, 4),
        observed_iteration_seconds=found.observed_seconds,
        gain=round(found.gain, 4),
        iteration=progress.iteration,
        streak=streak,
        # Profiling lasts until its iterations are measured, and with Auto until the job leaves the run.
        profiling=measuring and (streak < policy.confirmations or decision.verdict is Verdict.apply_now),
        decision=decision.verdict.value,
        reason=decision.reason,
        since=earlier.since if same and earlier is not None else timestamp(now),
        updated_at=timestamp(now),
    )
    events: list[tuple[str, str]] = []
    announced = same and earlier is not None and earlier.gain >= EVENT_GAIN
    if found.gain >= EVENT_GAIN and not announced:
        events.append(
            (
                cond.PLACEMENT_RECOMMENDED,
                f"{_text(entries)} is predicted {found.gain:.0%} faster: {found.predicted_seconds:.2f} s per iteration "
                f"(now {found.current_predicted_seconds:.2f} s predicted, {found.observed_seconds:.2f} s observed); "
                f"{decision.reason}",
            )
        )
    return Step(recommendation, None, tuple(events))


def _text(entries: Sequence[AppliedPlacementEntry]) -> str:
    return ", ".join(
        f"{e.components}: {e.placement}" + (f" on {e.node_group}" if e.node_group else "") for e in entries
    )


def with_replacement(status: RLJobStatus, replacement: Replacement) -> list[Replacement]:
    return [*status.replacements, replacement][-MAX_REPLACEMENTS_KEPT:]


def _waiting_for_restart(spec: RLJobSpec, status: RLJobStatus) -> Recommendation | None:
    rec = status.recommendation
    if spec.auto_placement.apply is Apply.on_restart and rec is not None and rec.decision == Verdict.at_restart:
        return rec
    return None


def at_restart(spec: RLJobSpec, status: RLJobStatus, now: str) -> Replacement | None:
    """The re-placement an OnRestart recommendation becomes when the job is planned again (None: none waits)."""
    rec = _waiting_for_restart(spec, status)
    if rec is None:
        return None
    return Replacement(
        time=now,
        iteration=status.progress.iteration if status.progress else rec.iteration,
        previous=list(status.applied_placement),
        component_placement=list(rec.component_placement),
        predicted_iteration_seconds=rec.predicted_iteration_seconds,
        observed_iteration_seconds=rec.observed_iteration_seconds,
    )


def replaced_spec(spec: RLJobSpec, status: RLJobStatus) -> RLJobSpec:
    """The spec to plan with: the last re-placement's entries (or, with OnRestart, the recommendation waiting for
    a restart) instead of componentPlacement and the search; the spec itself when there is none.

    This is the seam with the restart path: whatever plans the job again (a lost node, a resubmission, this
    module's own re-placement) goes through Provision, which plans this spec."""
    entries: list[AppliedPlacementEntry] | None = None
    waiting = _waiting_for_restart(spec, status)
    if waiting is not None:
        entries = waiting.component_placement
    elif status.replacements:
        entries = status.replacements[-1].component_placement
    if entries is None:
        return spec
    placement = [SpecEntry(components=e.components, placement=e.placement, node_group=e.node_group) for e in entries]
    auto = spec.auto_placement.model_copy(update={"enabled": False, "profile_first": False})
    return spec.model_copy(
        update={
            "component_placement": placement,
            "auto_placement": auto,
            "placement_mode": PlacementMode.MODEL_PARALLEL,
        }
    )


def profiling_condition(spec: RLJobSpec, status: RLJobStatus) -> tuple[bool, str, str] | None:
    """The Profiled condition (status, reason, message) of a job that profiles first; None for any other job.

    False/Profiling while its collocated profiling run measures ("profiling collocated, N of 3 iterations
    measured") and, with Auto, until it is re-placed; True/Replaced once it was re-placed off the run; True/Profiled
    when the run ended without a move (collocated was the best, or apply Never / OnRestart decided)."""
    if not spec.auto_placement.profile_first:
        return None
    if status.replacements:
        first = status.replacements[0]
        return (
            True,
            cond.PROFILED_AND_REPLACED,
            f"profiled collocated; re-placed at iteration {first.iteration} onto {_text(first.component_placement)}",
        )
    rec = status.recommendation
    if rec is None:
        return False, cond.PROFILING, f"profiling collocated, 0 of {CONFIRMATIONS} iterations measured"
    if rec.profiling and rec.decision == Verdict.apply_now:
        return (
            False,
            cond.PROFILING,
            f"{rec.reason}; re-placing onto {_text(rec.component_placement)} at the next report",
        )
    if rec.profiling:
        return False, cond.PROFILING, f"profiling collocated, {rec.streak} of {CONFIRMATIONS} iterations measured"
    return True, cond.PROFILED, f"profiled collocated over {CONFIRMATIONS} iterations; {rec.reason}"

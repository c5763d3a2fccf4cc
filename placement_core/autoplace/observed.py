"""The closed loop's library half (docs/autoplace.md, "From measured step times"): measured seconds -> profile ->
recommendation -> whether to apply it.

A running job reports each component's busy seconds per iteration under its *current* placement, on however many
GPUs that placement gives it. Auto placement wants each component's seconds measured collocated on all G GPUs.
`derive_profile` converts one into the other with the cost model the search uses: a component measured at T
seconds on g GPUs has cost(g) = k(g) * cost(G) under the model (k(g) = G/g under the linear model; the scaling
model's factor otherwise), so its collocated cost is T / k(g). `recommend` runs the search with that profile and
prices the current placement under the same model, so the gain compares two predictions of one model, never a
prediction with a measurement. `decide` is the apply policy (`Never`, `OnRestart`, `Auto` with `min_gain` and
`cooldown`).

Pure: no clock, no I/O; the caller passes the time.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from placement_core.autoplace import autotune
from placement_core.autoplace.cost import CostModel, StageCost, collocated_total, parse_cost_model, pipelined_total
from placement_core.autoplace.hetero import wants_hetero
from placement_core.autoplace.inputs import reasoning_chain, reasoning_task
from placement_core.autoplace.report import collocated_mapping
from placement_core.cluster import ACCELERATOR
from placement_core.components import ComponentPlacement, sharing_groups
from placement_core.errors import PlacementError
from placement_core.grammar import PlacementEntry, parse_placement_entries
from placement_core.jobconfig import EMBODIED, REASONING, Job

#: Reward runs on the rollout's GPUs in every placement the search returns and the profile has no reward cost:
#: its measured time counts as the rollout's.
FOLDED_INTO = {"reward": "rollout"}

#: The default `min_gain`: a recommendation must promise at least this fraction less time per iteration.
DEFAULT_MIN_GAIN = 0.10
#: The default `cooldown` in seconds: no second re-placement within this long of the last one.
DEFAULT_COOLDOWN_S = 600.0
#: Auto applies a recommendation only after this many consecutive reports recommended it at minGain or more:
#: one noisy report (or the first reports of a new placement) does not move a job. A job that profiles first
#: (`profileFirst`) is profiled over this many reported iterations.
CONFIRMATIONS = 3
#: The most of a process call's time the untimed part of an iteration is taken to be: a Ray actor call costs
#: the driver about 1 to 2 ms (dispatch and gathering the result, on a busy 2-core machine), so untimed time
#: beyond this per call is other work the driver does (moving data, logging) that stays what it is whatever
#: the placement, and is carried over as a constant instead of being multiplied by a placement's calls.
MAX_CALL_SECONDS = 0.01
#: A chain component that has no entry of its own in a placement the model-parallel class accepts, and the one
#: whose GPUs it then runs on: in collocated mode the actor recomputes the log-probs itself, so a driver times
#: that phase as `inference` on the actor's GPUs.
RUNS_ON_GPUS_OF = {"inference": "actor"}


@dataclass(frozen=True, slots=True)
class Measured:
    """One component's median busy seconds per iteration, and the GPUs the current placement gives it."""

    name: str
    seconds: float
    gpus: int
    collocated_seconds: float
    """`seconds` converted to all G GPUs of the cluster under the cost model (what the profile holds)."""


@dataclass(frozen=True, slots=True)
class DerivedProfile:
    """The collocated profile a running job's measurements give, and how each one was converted."""

    cost_model: CostModel
    num_gpus: int
    measured: tuple[Measured, ...]
    ignored: tuple[str, ...]
    """Reported components the model has no cost for (neither in the chain nor folded into one)."""
    rollout_batch_size: int
    """The job's `data.rollout_batch_size` (checked by the task the profile was converted with)."""

    def profile_data(self) -> dict[str, float]:
        """`profile_data` in autoplace's keys (`rollout_cost`, ...), as `Job.profile` reads it."""
        return {f"{m.name}_cost": m.collocated_seconds for m in self.measured}


def _units_by_component(job: Job) -> dict[str, frozenset[tuple[int, int, str]]]:
    placement = ComponentPlacement.from_entries(job.placement, job.cluster)
    units = {name: frozenset(placement.get_units(name)) for name in placement.components}
    for name, host in RUNS_ON_GPUS_OF.items():
        if name not in units and host in units:
            units[name] = units[host]
    return units


def _gpu_count(units: frozenset[tuple[int, int, str]]) -> int:
    return sum(1 for unit in units if unit[2] == ACCELERATOR)


def check_modelled(job: Job, feature: str = "re-placing from measured step times") -> None:
    """Raises PlacementError, naming `feature`, for a job the closed loop does not model: an embodied job, or
    one with per-type data (node groups of different GPUs, per-type profile keys)."""
    if job.task_type == EMBODIED:
        raise PlacementError(f"{feature} is for reasoning jobs; embodied jobs are not modelled")
    if wants_hetero(job):
        raise PlacementError(
            f"{feature} uses the single-type model; this job gives per-type data "
            "(node groups of different GPUs or per-type profile keys)"
        )


def profiling_placement(job: Job) -> tuple[PlacementEntry, ...]:
    """The placement a job that profiles first (`profileFirst`) starts on: every component on all GPUs of
    `job.cluster`, one after the other (seed 000's profiling run). Its measured times are the collocated costs
    themselves: `derive_profile` converts them with factor 1. Raises PlacementError for a job the loop does not
    model."""
    check_modelled(job, "profileFirst (profiling collocated first)")
    return tuple(parse_placement_entries(collocated_mapping(REASONING)))


def _check_job(job: Job) -> None:
    check_modelled(job)
    if not job.placement:
        raise PlacementError("measured step times need the placement they were measured under (none given)")


def derive_profile(
    job: Job, seconds: Mapping[str, float], cost_model: str | CostModel = CostModel.scaling
) -> DerivedProfile:
    """The collocated profile from `seconds` (component -> median busy seconds per iteration) measured under
    `job.placement` on `job.cluster`. Raises PlacementError naming a chain component without a measurement, a
    measurement that is not a positive number, or a GPU count the model has no cost for."""
    _check_job(job)
    model = parse_cost_model(cost_model)
    units = _units_by_component(job)
    chain = reasoning_chain(job)
    totals: dict[str, float] = {}
    ignored: list[str] = []
    for name, value in seconds.items():
        if not value > 0:
            raise PlacementError(f"measured seconds of component '{name}' must be positive, got {value!r}")
        target = FOLDED_INTO.get(name, name)
        if target not in chain:
            ignored.append(name)
            continue
        totals[target] = totals.get(target, 0.0) + value
    missing = [name for name in chain if name not in totals]
    if missing:
        raise PlacementError(f"no measured step time for {', '.join(missing)} (the reports must time every component)")
    unplaced = [name for name in chain if name not in units]
    if unplaced:
        raise PlacementError(f"the current placement does not place {', '.join(unplaced)}")
    # A unit profile (1 s per iteration on all G GPUs) gives each stage's factor k(g) = cost(g) / cost(G).
    unit = reasoning_task(replace(job, placement=()), dict.fromkeys(chain, 1.0))
    measured = []
    for stage in unit.stages:
        gpus = _gpu_count(units[stage.name])
        cost = StageCost.build(unit, stage, model)
        factor = cost(gpus)
        if factor is None:
            raise PlacementError(
                f"component '{stage.name}' measured on {gpus} GPUs: the {model.value} model has no cost there "
                f"({cost.why_not(gpus)})"
            )
        per_iteration = factor * unit.rollout_batch_size  # cost() is per batch; the unit profile is 1 s per iteration
        measured.append(Measured(stage.name, totals[stage.name], gpus, totals[stage.name] / per_iteration))
    return DerivedProfile(model, unit.num_gpus, tuple(measured), tuple(ignored), unit.rollout_batch_size)


@dataclass(frozen=True, slots=True)
class SharingGroup:
    """Chain components whose GPUs overlap (`components.sharing_groups`): they take turns, so their per-batch
    costs add up."""

    members: tuple[str, ...]
    per_batch: float


def _sharing_groups(
    units: Mapping[str, frozenset[tuple[int, int, str]]], per_batch: Mapping[str, float]
) -> list[SharingGroup]:
    """The groups of the components in `per_batch` by the units each holds."""
    held = {name: units[name] for name in per_batch}
    return [SharingGroup(tuple(group), sum(per_batch[name] for name in group)) for group in sharing_groups(held)]


def schedule_total(groups: Sequence[SharingGroup], rollout_batch_size: int) -> float:
    """The model's iteration time: one group is time division, several are pipelined (docs/autoplace.md,
    "Schedules")."""
    per_batch = [g.per_batch for g in groups]
    if len(per_batch) == 1:
        return collocated_total(per_batch, 1) * rollout_batch_size
    return pipelined_total(per_batch, rollout_batch_size)


def _current_groups(
    units: Mapping[str, frozenset[tuple[int, int, str]]], profile: DerivedProfile
) -> list[SharingGroup]:
    """The current placement's groups, each per-batch cost the measurement itself (cost(g) of the derived
    profile is T/rbs by construction)."""
    return _sharing_groups(units, {m.name: m.seconds / profile.rollout_batch_size for m in profile.measured})


def process_calls(
    group: SharingGroup, reported: Iterable[str], units: Mapping[str, frozenset[tuple[int, int, str]]]
) -> int:
    """How many process calls one iteration makes on `group`: each reported component whose time counts in the
    group (reward's in the rollout's) calls each of its processes once a phase, counted as the units it holds
    (at least one)."""
    return sum(max(1, len(units.get(name, ()))) for name in reported if FOLDED_INTO.get(name, name) in group.members)


@dataclass(frozen=True, slots=True)
class Recommendation:
    """The placement auto placement finds for the measured profile, and what it promises.

    `gain` = 1 - predicted / observed: the promise is made against the iteration time the job has now. The
    prediction is the model's price of the new placement plus the time the model does not price (the driver's
    dispatch to and gathering from the processes between phases, reward on other GPUs, weight sync). That
    unpriced time is what an observed iteration takes beyond the busiest group's measured busy seconds. The
    weight sync the driver timed, and what exceeds `MAX_CALL_SECONDS` per call, is carried over as it is; the
    rest is charged per process call (`process_calls`): the calls the current placement makes on its busiest group at
    their measured average, and the calls a new placement adds on its slowest group (collocated: every component's
    processes, one phase after the other) at `MAX_CALL_SECONDS` each. That average is a difference of two medians
    and carries their noise, which the added calls would multiply; charged the most a call is taken to cost, they
    make the promised gain a lower bound (on the local cluster: 1.2 ms a call observed collocated, 1.3 to 1.8 ms
    measured on the split it came from). The current placement priced
    the same way (`current_predicted_seconds`) is never below the observed time, so a job already on the best
    placement has gain 0 whatever noise its times carry.
    """

    placement: tuple[PlacementEntry, ...]
    mode: str
    predicted_seconds: float
    current_predicted_seconds: float
    observed_seconds: float
    profile: DerivedProfile
    unpriced_seconds: float = 0.0
    """Seconds of each observed iteration beyond the busiest group's measured busy time (priced in
    `current_predicted_seconds`)."""
    unpriced_per_call: float = 0.0
    """`unpriced_seconds` less the weight sync, over the process calls the current placement makes on its
    busiest group, at most `MAX_CALL_SECONDS`: what each of as many process calls on the new placement's slowest
    group adds to `predicted_seconds` (each call beyond those adds `MAX_CALL_SECONDS`)."""

    @property
    def gain(self) -> float:
        reference = self.observed_seconds if self.observed_seconds > 0 else self.current_predicted_seconds
        if reference <= 0:
            return 0.0
        return max(0.0, 1.0 - self.predicted_seconds / reference)


def recommend(
    job: Job,
    seconds: Mapping[str, float],
    observed_iteration_seconds: float,
    cost_model: str | CostModel = CostModel.scaling,
    weight_sync_seconds: float | None = None,
) -> Recommendation:
    """The best placement for the profile measured under `job.placement`, its predicted iteration time, the
    current placement's under the same model, and the observed one. `weight_sync_seconds`, when the driver
    timed it, is untimed by the components but not a per-call cost: it is carried to the prediction as it is."""
    profile = derive_profile(job, seconds, cost_model)
    rbs = profile.rollout_batch_size
    searched = replace(job, placement=(), profile=profile.profile_data())
    result = autotune(searched, profile.cost_model)
    placement = tuple(parse_placement_entries(result.component_placement))
    reported = [name for name in seconds if name not in profile.ignored]

    units = _units_by_component(job)
    current = _current_groups(units, profile)
    busiest = max(current, key=lambda g: g.per_batch)
    unpriced = max(0.0, observed_iteration_seconds - busiest.per_batch * rbs)
    calls = process_calls(busiest, reported, units)
    synced = min(unpriced, max(0.0, weight_sync_seconds or 0.0))
    per_call = min(MAX_CALL_SECONDS, (unpriced - synced) / calls)
    constant = unpriced - per_call * calls  # the weight sync, and what exceeds MAX_CALL_SECONDS per call

    new_units = _units_by_component(replace(job, placement=placement))
    new = _sharing_groups(new_units, {name: choice.per_batch for name, choice in result.components.items()})
    slowest = max(new, key=lambda g: g.per_batch)
    new_calls = process_calls(slowest, reported, new_units)
    # Calls the job makes now cost `per_call` on average; calls the new placement adds were never measured and may
    # cost more (fewer processes a phase, each called alone), so they are charged the most a call is taken to cost.
    charged = per_call * min(new_calls, calls) + MAX_CALL_SECONDS * max(0, new_calls - calls)
    return Recommendation(
        placement=placement,
        mode=result.mode,
        predicted_seconds=result.total_cost + constant + charged,
        current_predicted_seconds=schedule_total(current, rbs) + unpriced,
        observed_seconds=observed_iteration_seconds,
        profile=profile,
        unpriced_seconds=unpriced,
        unpriced_per_call=per_call,
    )


def same_placement(a: Iterable[PlacementEntry], b: Iterable[PlacementEntry]) -> bool:
    """Whether two blocks are the same placement written the same way (order of entries aside)."""
    return placement_key(a) == placement_key(b)


def placement_key(entries: Iterable[PlacementEntry]) -> frozenset[tuple[str, str, tuple[str, ...] | None]]:
    return frozenset((e.key, e.placement.strip(), e.node_groups) for e in entries)


# -- the apply policy ----------------------------------------------------------------------------------------


class Apply(enum.StrEnum):
    """When a recommendation is used: never, the next time the job restarts, or at once (at the next boundary)."""

    never = "Never"
    on_restart = "OnRestart"
    auto = "Auto"


@dataclass(frozen=True, slots=True)
class ApplyPolicy:
    apply: Apply = Apply.never
    min_gain: float = DEFAULT_MIN_GAIN
    cooldown_seconds: float = DEFAULT_COOLDOWN_S
    confirmations: int = CONFIRMATIONS


@dataclass(frozen=True, slots=True)
class History:
    """What the policy has done to one job: when it last re-placed it and the placements it moved away from."""

    last_applied_at: float | None = None
    left: tuple[frozenset[tuple[str, str, tuple[str, ...] | None]], ...] = ()
    profiled: bool = False
    """The job profiled first: its first move (off the collocated profiling run) does not raise the gain the
    next one needs (`required_gain`), since that run was a measurement, not a placement chosen for speed."""

    def applied(self, old: Sequence[PlacementEntry], now: float) -> History:
        return History(last_applied_at=now, left=(*self.left, placement_key(old)), profiled=self.profiled)

    @property
    def moves(self) -> int:
        """Re-placements that count towards `required_gain`."""
        return max(0, len(self.left) - (1 if self.profiled else 0))


class Verdict(enum.StrEnum):
    keep = "Keep"
    apply_now = "ApplyNow"
    at_restart = "AtRestart"


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Verdict
    reason: str


def decide(
    policy: ApplyPolicy,
    recommendation: Recommendation | None,
    current: Sequence[PlacementEntry],
    history: History,
    now: float,
    streak: int = 1,
    profiling: bool = False,
) -> Decision:
    """Whether to use `recommendation` now, at the next restart, or not at all, and why.

    A recommendation is used when it differs from the current placement and promises at least `min_gain`.
    A job already re-placed n times needs minGain * 2^n (`required_gain`).
    `Auto` also needs `confirmations` reports in a row that promised `min_gain` (`streak`, this one included:
    the caller keeps the count with `next_streak`), waits `cooldown` after its last re-placement and never goes back to a placement it moved
    the job away from: with measurements that carry noise, two placements of nearly equal time could otherwise
    take turns.

    `profiling`: the job runs its collocated profiling run (`profileFirst`, `profiling_placement`) and `streak`
    counts its reported iterations (`next_streak`). Until `confirmations` of them the answer is Keep. Then the
    recommendation is the search's answer for the measured profile: `Auto` applies it whatever `min_gain` says
    (the collocated run was a measurement, not a placement to keep unless the search says so), unless it is
    collocated itself; `Never` and `OnRestart` decide as they always do.
    """
    if recommendation is None:
        return Decision(Verdict.keep, "no recommendation")
    if profiling and streak < policy.confirmations:
        return Decision(Verdict.keep, f"profiling collocated: {streak} of {policy.confirmations} iterations measured")
    if same_placement(recommendation.placement, current):
        if profiling:
            return Decision(Verdict.keep, "collocated is the best placement for the measured times")
        return Decision(Verdict.keep, "the job already runs the recommended placement")
    gain = recommendation.gain
    if profiling and policy.apply is Apply.auto:
        return Decision(
            Verdict.apply_now,
            f"profiled collocated over {streak} iterations: predicted gain {gain:.1%} (minGain does not apply "
            "to leaving the profiling run)",
        )
    if gain < policy.min_gain:
        return Decision(Verdict.keep, f"predicted gain {gain:.1%} is below minGain {policy.min_gain:.0%}")
    needed = required_gain(policy, history)
    if gain < needed:
        return Decision(
            Verdict.keep,
            f"predicted gain {gain:.1%} is below the {needed:.0%} a re-placement number {history.moves + 1} needs",
        )
    if policy.apply is Apply.never:
        return Decision(Verdict.keep, "apply is Never")
    if placement_key(recommendation.placement) in history.left:
        return Decision(Verdict.keep, "the recommendation is a placement this job was moved away from")
    if policy.apply is Apply.on_restart:
        return Decision(Verdict.at_restart, f"predicted gain {gain:.1%}: used when the job next restarts")
    if history.last_applied_at is not None and now - history.last_applied_at < policy.cooldown_seconds:
        wait = policy.cooldown_seconds - (now - history.last_applied_at)
        return Decision(Verdict.keep, f"within the cooldown ({wait:.0f} s left)")
    if streak < policy.confirmations:
        return Decision(Verdict.keep, f"recommended {streak} of {policy.confirmations} reports in a row")
    return Decision(Verdict.apply_now, f"predicted gain {gain:.1%} >= {needed:.0%}")


def required_gain(policy: ApplyPolicy, history: History) -> float:
    """The gain the next re-placement must promise: minGain, doubled by every re-placement the job already had.

    Noise can make one of two near-equal placements look minGain better than the other; doubling the bar after
    each move keeps a job from drifting between such placements, while a real change (a new bottleneck, a much
    better placement) still moves it."""
    return min(1.0, policy.min_gain * 2**history.moves)


def next_streak(streak: int, recommendation: Recommendation, policy: ApplyPolicy, profiling: bool = False) -> int:
    """The count `decide` reads: reports in a row whose recommendation promised `min_gain` or more (not
    necessarily the same placement: two near-equal placements may take turns as the best, and either is a gain);
    while `profiling`, every reported iteration of the profiling run. The caller starts it over at 0 after a
    re-placement."""
    return streak + 1 if profiling or recommendation.gain >= policy.min_gain else 0

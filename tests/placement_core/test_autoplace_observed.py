"""The closed loop's library half (placement_core/autoplace/observed.py): measured seconds under the current
placement -> the collocated profile -> a recommendation -> the apply policy, including 100 noisy iterations.

The "truth" here is a synthetic law (each component's seconds per iteration = A/g on g GPUs), not a measurement
of any model: it lets the tests know the right answer."""

from __future__ import annotations

import random
import statistics
from collections.abc import Mapping
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_autoplace_configs import reasoning_config

from placement_core.autoplace import autotune
from placement_core.autoplace.observed import (
    MAX_CALL_SECONDS,
    Apply,
    ApplyPolicy,
    History,
    Verdict,
    decide,
    derive_profile,
    next_streak,
    placement_key,
    profiling_placement,
    recommend,
    required_gain,
    same_placement,
)
from placement_core.errors import PlacementError
from placement_core.grammar import parse_placement_entries
from placement_core.jobconfig import read_job

#: Seconds per iteration on g GPUs = LAW[name] / g (synthetic).
LAW = {"rollout": 48.0, "actor": 16.0}
BAD = {"rollout,reward": "0-3", "actor": "4-7"}
COLLOCATED = {"actor,rollout,reward": "all"}


def job_on(placement: Mapping[str, str], **kwargs):
    config = reasoning_config(recompute_logprobs=False, placement=dict(placement), **kwargs)
    return read_job(config, profile={})


def gpus_of(placement: Mapping[str, str]) -> dict[str, int]:
    job = job_on(placement)
    profile = derive_profile(job, {"rollout": 1.0, "actor": 1.0}, "linear")
    return {m.name: m.gpus for m in profile.measured}


def true_seconds(placement: Mapping[str, str]) -> dict[str, float]:
    return {name: LAW[name] / gpus for name, gpus in gpus_of(placement).items()}


def test_linear_conversion_scales_by_g_over_G() -> None:
    profile = derive_profile(job_on(BAD), {"rollout": 12.0, "actor": 4.0}, "linear")
    assert profile.profile_data() == {"rollout_cost": 6.0, "actor_cost": 2.0}  # 12 * 4/8, 4 * 4/8
    assert [(m.name, m.gpus) for m in profile.measured] == [("rollout", 4), ("actor", 4)]


def test_scaling_conversion_inverts_the_search_model() -> None:
    """Converted costs, priced back on the measured GPU counts by the search's own model, give the measurements."""
    job = job_on(BAD)
    profile = derive_profile(job, {"rollout": 12.0, "actor": 4.0}, "scaling")
    # actor on 4 of 8 GPUs: s = 2, cost(4) = c * 2 / 1.2 under the scaling model, so c = 4 * 1.2 / 2
    assert profile.profile_data()["actor_cost"] == pytest.approx(2.4)
    priced = recommend(job, {"rollout": 12.0, "actor": 4.0}, 12.0, "scaling")  # observed: nothing unpriced
    assert priced.current_predicted_seconds == pytest.approx(12.0 + 4.0 / 128)  # pipelined: warm-up + slowest


def test_collocated_measurement_is_the_profile() -> None:
    profile = derive_profile(job_on(COLLOCATED), {"rollout": 6.0, "actor": 2.0, "reward": 0.5})
    assert profile.profile_data() == {"rollout_cost": 6.5, "actor_cost": 2.0}  # reward counts as rollout


@pytest.mark.parametrize("model", ["scaling", "linear"])
@pytest.mark.parametrize("actor_tp", [1, 2])
def test_a_profiling_run_converts_with_factor_one(model: str, actor_tp: int) -> None:
    """profileFirst: times measured on the collocated profiling placement are the profile itself, under either
    model, with inference (the actor's log-prob recomputation, on the actor's GPUs in collocated mode)."""
    config = reasoning_config(recompute_logprobs=True, actor_tp=actor_tp, rollout_tp=2, placement={})
    job = read_job({**config, "cluster": {**config["cluster"]}}, profile={})
    entries = profiling_placement(job)
    assert [(e.key, e.placement) for e in entries] == [("actor,rollout,reward", "all")]
    seconds = {"rollout": 3.0, "reward": 0.25, "inference": 1.5, "actor": 2.0}
    profile = derive_profile(replace(job, placement=entries), seconds, model)
    assert [(m.name, m.gpus, m.collocated_seconds) for m in profile.measured] == [
        ("rollout", 8, 3.25),
        ("inference", 8, 1.5),
        ("actor", 8, 2.0),
    ]


def test_profiling_refuses_what_the_loop_does_not_model() -> None:
    embodied = read_job(
        {
            "runner": {"task_type": "embodied"},
            "cluster": {"num_nodes": 1, "accelerators_per_node": 8},
            "actor": {"model": {"tensor_model_parallel_size": 1}},
            "rollout": {"tensor_parallel_size": 1},
        },
        profile={},
    )
    with pytest.raises(PlacementError) as err:
        profiling_placement(embodied)
    assert (
        str(err.value)
        == "profileFirst (profiling collocated first) is for reasoning jobs; embodied jobs are not modelled"
    )
    typed = read_job(reasoning_config(recompute_logprobs=False), profile={"actor_cost_by_type": {"a800": 1.0}})
    with pytest.raises(PlacementError, match=r"profileFirst .* uses the single-type model"):
        profiling_placement(typed)


def test_recommendation_from_a_bad_split() -> None:
    job = job_on(BAD)
    rec = recommend(job, true_seconds(BAD), 12.02, "linear")
    assert rec.mode == "collocated" and same_placement(rec.placement, parse_placement_entries(COLLOCATED))
    model_current = 12.0 + (12.0 + 4.0) / 128 - 12.0 / 128
    # The busiest group (rollout, 12 s on GPUs 0-3) accounts for 12 of the 12.02 s observed: the other 0.02 s are
    # unpriced, 5 ms per process call of its 4. Collocated, every iteration calls the rollout's 8 processes and
    # then the actor's 8 one after the other: 16 calls, 4 at the measured 5 ms and the 12 it adds at 10 ms.
    assert rec.unpriced_seconds == pytest.approx(0.02)
    assert rec.unpriced_per_call == pytest.approx(0.005)
    calls = 4 * 0.005 + 12 * MAX_CALL_SECONDS
    assert rec.predicted_seconds == pytest.approx(8.0 + calls)  # (48 + 16) / 8, plus the calls
    assert rec.current_predicted_seconds == pytest.approx(model_current + 0.02)
    assert rec.gain == pytest.approx(1 - (8.0 + calls) / 12.02)  # against the observed time
    assert rec.observed_seconds == 12.02
    # the search on the derived profile is the search on the true collocated costs
    config = reasoning_config(recompute_logprobs=False, costs={"rollout_cost": 6.0, "actor_cost": 2.0})
    direct = autotune(read_job(config), "linear")
    assert direct.total_cost == pytest.approx(8.0)


def test_unpriced_time_lowers_the_promised_gain_and_a_faster_observation_adds_none() -> None:
    priced = recommend(job_on(BAD), true_seconds(BAD), 12.0, "linear")
    slower = recommend(job_on(BAD), true_seconds(BAD), 12.03, "linear")
    added = 12 * MAX_CALL_SECONDS  # collocated calls 16 processes where the split called 4
    assert priced.unpriced_seconds == 0.0  # observed within the busiest group's busy time: its calls cost nothing
    assert priced.predicted_seconds == pytest.approx(8.0 + added) and priced.gain == pytest.approx(1 - 8.12 / 12.0)
    assert slower.unpriced_seconds == pytest.approx(0.03)
    assert slower.predicted_seconds == pytest.approx(8.0 + 0.03 + added)  # its 4 calls as measured
    assert slower.gain < priced.gain


def test_untimed_time_beyond_a_call_s_worth_is_carried_as_it_is() -> None:
    """Half a second untimed over 4 calls is not 125 ms per Ray call: MAX_CALL_SECONDS of it per call is call
    overhead (charged per call), the rest other work that stays what it is."""
    rec = recommend(job_on(BAD), true_seconds(BAD), 12.5, "linear")
    assert rec.unpriced_per_call == pytest.approx(MAX_CALL_SECONDS)
    assert rec.predicted_seconds == pytest.approx(8.0 + (0.5 - 4 * MAX_CALL_SECONDS) + 16 * MAX_CALL_SECONDS)


def test_calls_a_placement_adds_are_charged_the_most_a_call_costs() -> None:
    """The measured average of a call is a difference of medians: noise that 12 added calls would multiply by 3.
    Charged at MAX_CALL_SECONDS, a move that adds calls promises less than any measured average would make it."""
    low, high = (recommend(job_on(BAD), true_seconds(BAD), observed, "linear") for observed in (12.004, 12.036))
    assert low.unpriced_per_call == pytest.approx(0.001) and high.unpriced_per_call == pytest.approx(0.009)
    # 4 calls at the measured average each, 12 added calls at 10 ms whatever the average was
    assert high.predicted_seconds - low.predicted_seconds == pytest.approx(4 * (0.009 - 0.001))
    assert low.predicted_seconds == pytest.approx(8.0 + 0.004 + 12 * MAX_CALL_SECONDS)
    assert low.predicted_seconds > 8.0 + 0.001 * 16  # the measured average alone would promise more


def test_the_weight_sync_is_carried_as_it_is_not_per_call() -> None:
    synced = recommend(job_on(BAD), true_seconds(BAD), 12.04, "linear", weight_sync_seconds=0.02)
    assert synced.unpriced_seconds == pytest.approx(0.04) and synced.unpriced_per_call == pytest.approx(0.02 / 4)
    assert synced.predicted_seconds == pytest.approx(8.0 + 0.02 + 0.02 + 12 * MAX_CALL_SECONDS)
    # A weight sync longer than the untimed time itself (medians of different iterations) is not double-counted.
    over = recommend(job_on(BAD), true_seconds(BAD), 12.01, "linear", weight_sync_seconds=0.5)
    assert over.unpriced_per_call == 0.0 and over.predicted_seconds == pytest.approx(8.0 + 0.01 + 12 * MAX_CALL_SECONDS)


def test_a_split_of_fewer_calls_is_charged_fewer_calls() -> None:
    """Profiled collocated (actor, rollout and reward each call 8 processes in turn: 24 calls), re-placed on a
    split whose slowest group is the actor on 4 GPUs: 4 of those calls are charged."""
    shape = {"group_size": 2, "n_minibatches": 2, "rollout_batch_size": 64, "max_running_requests": 128}
    profiling = read_job(reasoning_config(recompute_logprobs=False, placement=dict(COLLOCATED), **shape), profile={})
    rec = recommend(profiling, {"actor": 3.0, "rollout": 3.0, "reward": 0.1}, 6.1 + 0.12, "scaling")
    assert {e.key: e.placement for e in rec.placement} == {"rollout,reward": "0-3", "actor": "4-7"}
    assert rec.unpriced_per_call == pytest.approx(0.005)
    searched = autotune(
        read_job(reasoning_config(recompute_logprobs=False, costs={"rollout_cost": 3.1, "actor_cost": 3.0}, **shape))
    )
    assert rec.predicted_seconds == pytest.approx(searched.total_cost + 4 * 0.005)
    assert rec.gain == pytest.approx(1 - rec.predicted_seconds / 6.22)


def test_best_placement_recommends_itself_with_no_gain() -> None:
    rec = recommend(job_on(COLLOCATED), true_seconds(COLLOCATED), 8.0, "linear")
    assert same_placement(rec.placement, parse_placement_entries(COLLOCATED)) and rec.gain == 0.0


@pytest.mark.parametrize(
    ("seconds", "message"),
    [
        ({"rollout": 1.0}, "no measured step time for actor"),
        ({"rollout": 1.0, "actor": 0.0}, "component 'actor' must be positive"),
    ],
)
def test_bad_measurements_are_one_line_errors(seconds: dict[str, float], message: str) -> None:
    with pytest.raises(PlacementError, match=message):
        derive_profile(job_on(BAD), seconds)


def test_gpu_count_without_a_cost_is_named() -> None:
    # actor on 3 GPUs: data-parallel size 3 does not split the batch (valid: 1, 2, 4, 8)
    with pytest.raises(PlacementError, match=r"'actor' measured on 3 GPUs.*data-parallel size 3"):
        derive_profile(job_on({"rollout,reward": "0-4", "actor": "5-7"}), {"rollout": 1.0, "actor": 1.0})


def test_unknown_components_are_ignored_and_named() -> None:
    profile = derive_profile(job_on(COLLOCATED), {"rollout": 6.0, "actor": 2.0, "critic": 1.0})
    assert profile.ignored == ("critic",)


# -- the policy ------------------------------------------------------------------------------------------------


def _rec(placement: Mapping[str, str], gain_to: float):
    rec = recommend(job_on(BAD), true_seconds(BAD), 12.0, "linear")
    return replace(
        rec,
        placement=tuple(parse_placement_entries(placement)),
        predicted_seconds=rec.observed_seconds * (1 - gain_to),
    )


CURRENT = tuple(parse_placement_entries(BAD))


@pytest.mark.parametrize(
    ("apply", "gain", "history", "now", "verdict", "reason"),
    [
        (Apply.auto, 0.3, History(), 0.0, Verdict.apply_now, "predicted gain 30.0% >= 10%"),
        (Apply.auto, 0.05, History(), 0.0, Verdict.keep, "below minGain"),
        (Apply.never, 0.3, History(), 0.0, Verdict.keep, "apply is Never"),
        (Apply.on_restart, 0.3, History(), 0.0, Verdict.at_restart, "next restarts"),
        (Apply.auto, 0.3, History(last_applied_at=100.0), 400.0, Verdict.keep, "cooldown (300 s left)"),
        (Apply.auto, 0.3, History(last_applied_at=100.0, left=(frozenset(),)), 700.0, Verdict.apply_now, ">= 20%"),
        (
            Apply.auto,
            0.15,
            History(last_applied_at=100.0, left=(frozenset(),)),
            700.0,
            Verdict.keep,
            "below the 20% a re-placement number 2 needs",
        ),
        (
            Apply.auto,
            0.3,
            History(left=(placement_key(parse_placement_entries(COLLOCATED)),)),
            0.0,
            Verdict.keep,
            "moved away from",
        ),
    ],
)
def test_decide(apply: Apply, gain: float, history: History, now: float, verdict: Verdict, reason: str) -> None:
    decision = decide(ApplyPolicy(apply=apply), _rec(COLLOCATED, gain), CURRENT, history, now, streak=3)
    assert decision.verdict is verdict and reason in decision.reason


def test_auto_waits_for_three_reports_in_a_row() -> None:
    policy, rec = ApplyPolicy(apply=Apply.auto), _rec(COLLOCATED, 0.3)
    streaks = []
    streak = 0
    for _ in range(3):
        streak = next_streak(streak, rec, policy)
        streaks.append(decide(policy, rec, CURRENT, History(), 0.0, streak).verdict)
    assert streaks == [Verdict.keep, Verdict.keep, Verdict.apply_now]
    assert "recommended 2 of 3 reports in a row" in decide(policy, rec, CURRENT, History(), 0.0, 2).reason
    assert next_streak(5, _rec(COLLOCATED, 0.05), policy) == 0  # below minGain: the count starts over


def test_profiling_measures_three_iterations_then_auto_leaves_whatever_min_gain_says() -> None:
    collocated = tuple(parse_placement_entries(COLLOCATED))
    rec = _rec(BAD, 0.05)  # the search's split, 5% better than the collocated profiling run
    policy = ApplyPolicy(apply=Apply.auto, min_gain=0.25)
    streak, verdicts = 0, []
    for _ in range(4):
        streak = next_streak(streak, rec, policy, profiling=True)  # every reported iteration counts
        verdicts.append(decide(policy, rec, collocated, History(profiled=True), 0.0, streak, profiling=True))
    assert [d.verdict for d in verdicts] == [Verdict.keep, Verdict.keep, Verdict.apply_now, Verdict.apply_now]
    assert verdicts[1].reason == "profiling collocated: 2 of 3 iterations measured"
    assert "minGain does not apply" in verdicts[2].reason
    # not profiling, the same recommendation is held to minGain
    assert decide(policy, rec, collocated, History(), 0.0, 3).verdict is Verdict.keep
    # collocated as the search's answer: the job stays
    stays = decide(policy, _rec(COLLOCATED, 0.0), collocated, History(profiled=True), 0.0, 3, profiling=True)
    assert (stays.verdict, stays.reason) == (Verdict.keep, "collocated is the best placement for the measured times")
    # Never and OnRestart decide as always once profiled (OnRestart keeps minGain)
    never = ApplyPolicy(apply=Apply.never, min_gain=0.0)
    assert decide(never, rec, collocated, History(), 0.0, 3, profiling=True).reason == "apply is Never"
    later = ApplyPolicy(apply=Apply.on_restart, min_gain=0.25)
    assert decide(later, rec, collocated, History(), 0.0, 3, profiling=True).verdict is Verdict.keep


def test_leaving_the_profiling_run_does_not_double_the_next_bar() -> None:
    policy = ApplyPolicy(apply=Apply.auto, min_gain=0.1)
    left_profiling = History(profiled=True).applied(parse_placement_entries(COLLOCATED), 0.0)
    assert left_profiling.profiled and required_gain(policy, left_profiling) == pytest.approx(0.1)
    assert required_gain(policy, left_profiling.applied(CURRENT, 1.0)) == pytest.approx(0.2)
    assert required_gain(policy, History().applied(CURRENT, 0.0)) == pytest.approx(0.2)


def test_the_current_placement_is_never_applied() -> None:
    decision = decide(ApplyPolicy(apply=Apply.auto), _rec(BAD, 0.5), CURRENT, History(), 0.0)
    assert decision.verdict is Verdict.keep and "already runs" in decision.reason


#: Spec worked example two's job (8 GPUs, rbs 32, gs 4, one minibatch, mrr 128) with its collocated costs as
#: the truth: a component on g GPUs takes what the scaling model says.
EXAMPLE_TWO = {"rollout": 60.0, "inference": 8.0, "actor": 40.0}
#: Costs on that job for which two splits (rollout 2 GPUs, inference 4 or 2, actor 2 or 4) are predicted within
#: a few percent of each other: +-10% noise makes either look better, by up to about 8%. Seconds as in a short
#: synthetic run (an iteration of the best placement takes about 6.6 s).
NEAR_TIE = {"rollout": 2.95, "inference": 2.35, "actor": 2.2}
BAD_THREE = {"rollout,reward": "0-3", "inference": "4-5", "actor": "6-7"}
#: 40% slower than the best under NEAR_TIE.
BAD_NEAR_TIE = {"rollout,reward": "0-5", "inference": "6-6", "actor": "7-7"}
BEST_NEAR_TIE = {"rollout,reward": "0-1", "inference": "2-5", "actor": "6-7"}


def job_two(placement: Mapping[str, str]):
    config = reasoning_config(
        group_size=4, n_minibatches=1, rollout_batch_size=32, max_running_requests=128, placement=dict(placement)
    )
    return read_job(config, profile={})


def scaling_truth(placement: Mapping[str, str], costs: Mapping[str, float]) -> dict[str, float]:
    """Seconds per iteration on the placement's GPU counts under the scaling model (1 / the conversion of 1 s)."""
    unit = derive_profile(job_two(placement), dict.fromkeys(costs, 1.0), "scaling")
    return {m.name: costs[m.name] / m.collocated_seconds for m in unit.measured}


def noisy_loop(
    seed: int, cooldown: float, start: Mapping[str, str], iterations: int = 100, noise: float = 0.10, window: int = 10
) -> list[dict[str, str]]:
    """A job started on `start` under Auto (scaling model, NEAR_TIE's truth): each iteration reports the
    truth with +-noise (uniform, seeded); the figures are medians of the last `window` reports of the current
    placement (as status.progress is); an application takes effect at the next iteration (the boundary).
    Returns the placements it ran on."""
    rng = random.Random(seed)
    policy = ApplyPolicy(apply=Apply.auto, min_gain=0.10, cooldown_seconds=cooldown)
    placement, history, reports = dict(start), History(), []
    ran = [placement]
    streak = 0
    now = 0.0
    for _ in range(iterations):
        truth = scaling_truth(placement, NEAR_TIE)
        reports = [*reports, {n: s * rng.uniform(1 - noise, 1 + noise) for n, s in truth.items()}][-window:]
        medians = {n: statistics.median(r[n] for r in reports) for n in truth}
        rec = recommend(job_two(placement), medians, max(medians.values()), "scaling")
        current = tuple(parse_placement_entries(placement))
        now += rec.current_predicted_seconds  # the clock moves by an iteration of the current placement
        streak = next_streak(streak, rec, policy)
        decision = decide(policy, rec, current, history, now, streak)
        if decision.verdict is Verdict.apply_now:
            history = history.applied(current, now)
            placement = {e.key: e.placement for e in rec.placement}
            ran.append(placement)
            reports, streak = [], 0  # the new placement's figures start afresh
    return ran


def test_the_noiseless_truth_recommends_the_spec_answer() -> None:
    rec = recommend(job_two(BAD_THREE), scaling_truth(BAD_THREE, EXAMPLE_TWO), 0.0, "scaling")
    assert {e.key: e.placement for e in rec.placement} == {"rollout,reward": "0-1", "inference": "2-3", "actor": "4-7"}
    # the spec's 69.256 s, and the 2 calls its slowest group (the actor on 4 GPUs) makes beyond the 2 the busiest
    # group makes now (the actor on GPUs 6-7), at MAX_CALL_SECONDS each: nothing was measured to price them lower
    assert rec.predicted_seconds == pytest.approx(69.256 + 2 * MAX_CALL_SECONDS, abs=1e-3)


def test_100_noisy_iterations_apply_once_and_never_return() -> None:
    ran = noisy_loop(seed=23, cooldown=600.0, start=BAD_NEAR_TIE)
    assert ran[1:] == [BEST_NEAR_TIE]


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_no_flip_flop_under_noise(seed: int) -> None:
    """100 iterations (about 11 minutes) with the default policy: one re-placement, never back."""
    ran = noisy_loop(seed=seed, cooldown=600.0, start=BAD_NEAR_TIE)
    assert len(ran) == 2 and BAD_NEAR_TIE not in ran[1:]


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_without_cooldown_a_job_never_returns(seed: int) -> None:
    """With no cooldown at all, noise does not move a job between near-equal placements either (the bar doubles
    after the first move), and it never returns to a placement it left."""
    ran = noisy_loop(seed=seed, cooldown=0.0, start=BAD_NEAR_TIE)
    keys = [placement_key(parse_placement_entries(p)) for p in ran]
    assert len(keys) == len(set(keys)) and len(ran) == 2


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_the_best_placement_stays_under_noise(seed: int) -> None:
    """Started on the best placement, 100 reports with +-10% noise never move the job (no cooldown)."""
    assert noisy_loop(seed=seed, cooldown=0.0, start=BEST_NEAR_TIE) == [BEST_NEAR_TIE]

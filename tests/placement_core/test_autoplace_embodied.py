"""Embodied auto placement: curve fits of the profiled points, the env/rollout split, the hybrid output."""

import math

import pytest
from test_autoplace_configs import autotune, embodied_config, predict, predict_cost, read_embodied, with_placement

from placement_core import Cluster, HybridComponentPlacement, PlacementError
from placement_core.autoplace.embodied import CurveFit

# -- curve fits ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("curve", "function"),
    [
        ("power law", lambda x: 0.3 * x**1.4),
        ("exponential", lambda x: 0.2 * math.exp(0.15 * x)),
        ("logarithmic", lambda x: 1.0 + 0.8 * math.log(x)),
        ("quadratic", lambda x: 0.02 * x * x - 0.3 * x + 4),
    ],
)
def test_the_generating_curve_fits_best(curve, function):
    points = {x: function(x) for x in (2, 4, 8, 16, 24)}
    fit = CurveFit.from_profile("profile", points)
    assert fit.curve == curve
    assert fit.r_squared == pytest.approx(1.0, abs=1e-9)
    assert fit(12) == pytest.approx(function(12), rel=1e-6)


def test_exact_at_profiled_points_and_fit_between():
    points = {4: 0.5, 8: 1.2, 16: 3.5, 32: 16.0}
    fit = CurveFit.from_profile("profile", points)
    assert fit.r_squared < 1
    assert all(fit(x) == y for x, y in points.items())
    assert 3.5 < fit(24) < 16.0


def test_one_point_or_flat_profile_is_constant():
    assert CurveFit.from_profile("p", {8: 2.5})(3) == 2.5
    flat = CurveFit.from_profile("p", {2: 1.0, 4: 1.0, 8: 1.0})
    assert flat.curve == "constant"
    assert flat(5) == 1.0


def test_two_points_use_a_two_parameter_curve():
    fit = CurveFit.from_profile("p", {4: 1.0, 16: 2.0})
    assert fit.curve != "quadratic"
    assert 1.0 < fit(8) < 2.0


def test_json_string_keys_are_accepted():
    assert CurveFit.from_profile("p", {"4": 1.0, "8": 2.0})(8) == 2.0


@pytest.mark.parametrize("raw", [{}, [1, 2], {0: 1.0}, {"four": 1.0}, {4: "slow"}, {4: -1.0}])
def test_bad_profile_points(raw):
    with pytest.raises(PlacementError, match=r"profile_data\.env_profile_data"):
        CurveFit.from_profile("profile_data.env_profile_data", raw)


# -- costs and the search --------------------------------------------------------------------------------------


def test_env_cost_existence_rules():
    task = read_embodied(embodied_config(env_num=192))
    assert task.env_cost(8) is not None  # 24 per GPU <= 32
    assert task.env_cost(5) is None  # 192 % 5
    assert task.env_cost(4) is None  # 48 per GPU > 32, the largest profiled load
    assert task.env_cost(6, stages=2) == task.env(16)
    assert task.rollout_cost(2, stages=2) == task.rollout(48)
    assert task.rollout_cost(1, stages=1) is None  # 192 per engine > 64


def test_missing_embodied_profile_is_named():
    config = embodied_config()
    del config["profile_data"]["rollout_profile_data"]
    with pytest.raises(PlacementError) as err:
        autotune(config)
    assert str(err.value) == "profile data is not provided: missing rollout_profile_data (add it under profile_data)"
    config = embodied_config()
    del config["data"]["env_num"]
    with pytest.raises(PlacementError, match=r"data\.env_num is required"):
        autotune(config)


def test_hybrid_placement_and_its_block():
    result = autotune(embodied_config())
    assert result.mode == "hybrid"
    assert result.component_placement == {"env": "0-5", "rollout": "6-7", "actor": "all"}
    assert result.components["actor"].gpus == (0, 7)
    assert result.total_cost < result.collocated_cost


def test_search_equals_enumeration():
    config = embodied_config()
    task = read_embodied(config)
    B = task.pipeline_stages
    totals = [task.env_cost(8) + task.rollout_cost(8) + task.actor_cost]
    for env_gpus in range(1, 8):
        e, r = task.env_cost(env_gpus, B), task.rollout_cost(8 - env_gpus, B)
        if e is not None and r is not None:
            totals.append(e + r + max(e, r) * (B - 1) + task.actor_cost)
    assert autotune(config).total_cost == pytest.approx(min(totals), rel=1e-12)


def test_collocated_when_pipelining_does_not_pay():
    config = embodied_config(env_num=256, env_profile={4: 0.9, 8: 1.6, 16: 3.0, 32: 5.9})
    result = autotune(config)
    assert result.mode == "collocated"
    assert result.component_placement == {"actor,env,rollout": "all"}


def test_no_valid_embodied_placement():
    with pytest.raises(PlacementError, match=r"no valid placement for env -> rollout -> actor on 8 GPUs"):
        autotune(embodied_config(env_num=7))


@pytest.mark.parametrize("config", [embodied_config(), embodied_config(env_num=256, stages=None)])
def test_round_trip(config):
    result = autotune(config)
    pasted = with_placement(config, result.component_placement)
    HybridComponentPlacement(pasted, Cluster.from_config(pasted["cluster"]))
    assert predict_cost(pasted) == pytest.approx(result.total_cost, rel=1e-12)


def test_cost_of_embodied_placements():
    config = embodied_config(placement={"env": "0-3", "rollout": "4-7", "actor": "all"})
    schedule = predict(config)
    assert schedule.mode == "hybrid"
    assert schedule.ranges == ((0, 3), (4, 7), (0, 7))
    with pytest.raises(PlacementError, match="actor on all 8 GPUs"):
        predict_cost(embodied_config(placement={"env": "0-3", "rollout": "4-7", "actor": "0-3"}))
    with pytest.raises(PlacementError, match=r"share all GPUs .* or use disjoint GPUs"):
        predict_cost(embodied_config(placement={"env": "0-5", "rollout": "4-7", "actor": "all"}))

"""spec.autoPlacement.profileFirst (docs/autoplace.md, "Profiling first"): the job starts collocated on every GPU
its planning gives it, its first reported iterations are the profile, and with apply Auto it is re-placed onto the
searched placement through the re-placement path, whatever minGain says.

The step times are the synthetic laws of examples/rljob-profile-first.yaml (rollout 3 s on any GPU count, actor
16/g + 1 s, reward 0.1 s), not a measurement of any model.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from placement_core import PlacementError
from placement_core.cluster import Cluster
from rlplace_operator.api.base import dump
from rlplace_operator.api.conditions import PLACEMENT_REPLACED as REPLACED
from rlplace_operator.api.conditions import PROFILED
from rlplace_operator.api.nodegroup import NodeGroupSpec
from rlplace_operator.api.rljob import RLJobSpec
from rlplace_operator.api.status import Progress, RLJobStatus
from rlplace_operator.cluster.selection import JobGroup, NodeInfo, nodegroup_status
from rlplace_operator.planning.plan import plan_job
from rlplace_operator.planning.recommend import profiling_condition, replaced_spec, step
from rlplace_operator.reconcile.actions import DeleteChildren, Outcome
from rlplace_operator.reconcile.decide import with_recommendation
from rlplace_operator.reconcile.observe import recommendation_due as _recommendation_due
from rlplace_operator.reconcile.world import Job, World

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "rljob-profile-first.yaml"
NOW = dt.datetime(2026, 11, 24, 1, 0, 0, tzinfo=dt.UTC)
CLUSTER = Cluster.from_config({"num_nodes": 1, "accelerators_per_node": 8})
COLLOCATED = [{"components": "actor,rollout,reward", "placement": "all"}]
SEARCHED = [{"components": "rollout,reward", "placement": "0-3"}, {"components": "actor", "placement": "4-7"}]

A800 = NodeGroupSpec.model_validate({"nodeSelector": {"matchLabels": {"gpu": "a800"}}})
NODES = {f"a{i}": NodeInfo(f"a{i}", {"gpu": "a800"}, {"nvidia.com/gpu": "8"}, True) for i in range(3)}
GROUPS = [JobGroup("a800", A800, nodegroup_status(A800, list(NODES.values()), 1))]


def example(**auto: object) -> RLJobSpec:
    (body,) = [d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d]
    body["spec"]["nodeGroups"] = ["a800"]
    body["spec"]["autoPlacement"].update(auto)
    return RLJobSpec.model_validate(body["spec"])


def collocated_progress(iteration: int, at: dt.datetime, actor: float = 16 / 8 + 1) -> dict:
    """The example's laws on 8 collocated GPUs: rollout 3 s, reward 0.1 s, actor 3 s (one after the other)."""
    return {
        "iteration": iteration,
        "iterationSeconds": 3 + 0.1 + actor,
        "components": [
            {"name": "rollout", "seconds": 3.0},
            {"name": "reward", "seconds": 0.1},
            {"name": "actor", "seconds": actor},
        ],
        "bottleneck": "rollout",
        "updatedAt": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def profiling_run(spec: RLJobSpec, reports: int, actor: float = 16 / 8 + 1) -> list:
    """The steps of `reports` iteration reports of the collocated profiling run, each status fed to the next."""
    status = RLJobStatus.model_validate(
        {"phase": "Running", "observedGeneration": 1, "appliedPlacement": COLLOCATED, "rayJob": "profile-first"}
    )
    steps = []
    for iteration in range(1, reports + 1):
        at = NOW + dt.timedelta(seconds=7 * iteration)
        status = status.model_copy(
            update={"progress": Progress.model_validate(collocated_progress(iteration, at, actor))}
        )
        taken = step(spec, status, CLUSTER, at)
        steps.append((status, taken))
        if taken.replacement is not None:
            break
        status = status.model_copy(update={"recommendation": taken.recommendation})
    return steps


# -- planning -------------------------------------------------------------------------------------------------


def test_a_profile_first_job_without_a_profile_is_planned_collocated_on_all_its_gpus() -> None:
    planned = plan_job(example(), {}, GROUPS, NODES)
    assert planned.summary.mode == "collocated"
    assert [dump(e) for e in planned.applied] == COLLOCATED and planned.predicted_iteration_time is None
    # the GPUs the search would use: every node of the job's cluster
    assert [w.name for w in planned.workers] == ["a0", "a1", "a2"] and planned.gpus == 24
    assert {c.name: c.gpus for c in planned.summary.components} == {"actor": 24, "rollout": 24, "reward": 24}


def test_a_profile_first_job_with_a_placement_profiles_on_the_nodes_that_placement_uses() -> None:
    body = dump(example(enabled=False))
    written = RLJobSpec.model_validate(
        {**body, "placementMode": "hybrid", "componentPlacement": [{"components": "actor", "placement": "8-11"}]}
    )
    planned = plan_job(written, {}, GROUPS, NODES)
    assert [dump(e) for e in planned.applied] == COLLOCATED and planned.summary.mode == "collocated"
    assert [w.name for w in planned.workers] == ["a1"] and planned.gpus == 8  # node a1 only, all 8 of its GPUs
    as_written = RLJobSpec.model_validate({**dump(written), "autoPlacement": {"profileFirst": False}})
    assert [dump(e) for e in plan_job(as_written, {}, GROUPS, NODES).applied] == [
        {"components": "actor", "placement": "8-11"}
    ]


def test_refusals_are_one_line() -> None:
    with pytest.raises(ValidationError, match=r"profileFirst measures the profile itself: remove spec\.profile"):
        RLJobSpec.model_validate({**dump(example()), "profile": {"actorCost": 1, "rolloutCost": 2}})
    with pytest.raises(PlacementError, match=r"remove the rlplace\.io/profile annotation or profileFirst"):
        plan_job(example(), {"rlplace.io/profile": '{"actor_cost": 1, "rollout_cost": 2}'}, GROUPS, NODES)
    # node groups of different GPUs: the loop's single-type model does not price them
    rtx = NodeGroupSpec.model_validate({"nodeSelector": {"matchLabels": {"gpu": "4090"}}, "acceleratorType": "4090"})
    a800 = NodeGroupSpec.model_validate({"nodeSelector": {"matchLabels": {"gpu": "a800"}}, "acceleratorType": "a800"})
    nodes = {**NODES, "g0": NodeInfo("g0", {"gpu": "4090"}, {"nvidia.com/gpu": "8"}, True)}
    groups = [
        JobGroup("a800", a800, nodegroup_status(a800, list(nodes.values()), 1)),
        JobGroup("4090", rtx, nodegroup_status(rtx, list(nodes.values()), 1)),
    ]
    mixed = RLJobSpec.model_validate({**dump(example()), "nodeGroups": ["a800", "4090"]})
    with pytest.raises(PlacementError) as err:
        plan_job(mixed, {}, groups, nodes)
    assert str(err.value) == (
        "profileFirst (profiling collocated first) uses the single-type model; this job gives per-type data "
        "(node groups of different GPUs or per-type profile keys)"
    )


def test_a_re_placed_job_is_planned_on_its_re_placement_not_profiled_again() -> None:
    (*_, (_, last)) = profiling_run(example(), 4)
    assert last.replacement is not None
    status = RLJobStatus.model_validate(
        {"phase": "Running", "observedGeneration": 1, "replacements": [dump(last.replacement)]}
    )
    planned_spec = replaced_spec(example(), status)
    assert not planned_spec.auto_placement.profile_first and not planned_spec.auto_placement.enabled
    planned = plan_job(planned_spec, {}, GROUPS, NODES)
    assert [dump(e) for e in planned.applied] == SEARCHED and planned.summary.mode == "disaggregated"


# -- the profiling run and the re-placement -----------------------------------------------------------------------


def test_auto_profiles_three_iterations_then_re_places_whatever_min_gain_says() -> None:
    steps = profiling_run(example(), 6)
    recs = [taken.recommendation for _, taken in steps[:-1]]
    assert [r.profiling for r in recs] == [True, True, True]
    assert [r.reason for r in recs[:2]] == [
        "profiling collocated: 1 of 3 iterations measured",
        "profiling collocated: 2 of 3 iterations measured",
    ]
    assert recs[2].decision == "ApplyNow" and "minGain does not apply" in recs[2].reason
    # the gain (17%) is below the example's minGain (25%): only leaving the profiling run ignores it
    assert 0.15 < recs[2].gain < 0.25
    assert [dump(e) for e in recs[2].component_placement] == SEARCHED
    # the laws give max(3.1, 16/4 + 1) = 5 s on the searched placement; the model predicts it within 2%
    assert abs(recs[2].predicted_iteration_seconds - 5.0) / 5.0 < 0.02
    _, last = steps[-1]
    assert len(steps) == 4 and last.replacement is not None and last.replacement.iteration == 4
    assert [dump(e) for e in last.replacement.component_placement] == SEARCHED
    assert [dump(e) for e in last.replacement.previous] == COLLOCATED
    assert [reason for reason, _ in last.events] == [REPLACED]


def test_the_profiled_condition_says_how_far_profiling_is() -> None:
    spec = example()
    fresh = RLJobStatus()
    assert profiling_condition(spec, fresh) == (False, "Profiling", "profiling collocated, 0 of 3 iterations measured")
    steps = profiling_run(spec, 4)
    after_two = steps[1][0].model_copy(update={"recommendation": steps[1][1].recommendation})
    assert profiling_condition(spec, after_two) == (
        False,
        "Profiling",
        "profiling collocated, 2 of 3 iterations measured",
    )
    deciding = steps[2][0].model_copy(update={"recommendation": steps[2][1].recommendation})
    ok, reason, message = profiling_condition(spec, deciding)
    assert (ok, reason) == (False, "Profiling") and "re-placing onto rollout,reward: 0-3, actor: 4-7" in message
    replaced = deciding.model_copy(update={"replacements": [steps[3][1].replacement], "recommendation": None})
    assert profiling_condition(spec, replaced) == (
        True,
        "Replaced",
        "profiled collocated; re-placed at iteration 4 onto rollout,reward: 0-3, actor: 4-7",
    )
    assert profiling_condition(example(profileFirst=False), replaced) is None


def test_with_recommendation_re_places_the_profiled_job_and_sets_its_condition() -> None:
    (*_, (status, last)) = profiling_run(example(), 3)
    ready = status.model_copy(update={"recommendation": last.recommendation})
    wire = dump(ready)
    wire["progress"] = collocated_progress(4, NOW + dt.timedelta(seconds=40))
    body = dump(example())
    outcome = with_recommendation(
        Job("ns", "profile-first", "uid", 1, body, wire),
        World(now=NOW + dt.timedelta(seconds=40), cluster=CLUSTER),
        Outcome((), RLJobStatus.model_validate(wire)),
    )
    assert any(isinstance(a, DeleteChildren) for a in outcome.actions)
    (replacement,) = outcome.status.replacements
    assert [dump(e) for e in replacement.component_placement] == SEARCHED
    (profiled,) = [c for c in outcome.status.conditions if c.type == PROFILED]
    assert (profiled.status, profiled.reason) == ("True", "Replaced")
    # the timer keeps looking at a profiling job, also one whose componentPlacement is hybrid
    due = {"phase": "Running", "progress": wire["progress"]}
    assert _recommendation_due({**body, "placementMode": "hybrid"}, due)


def test_never_and_on_restart_show_the_profiled_recommendation_as_they_always_do() -> None:
    never = profiling_run(example(apply="Never", minGain=0.1), 5)
    recs = [taken.recommendation for _, taken in never]
    assert [r.profiling for r in recs] == [True, True, False, False, False]
    assert {r.decision for r in recs} == {"Keep"} and recs[-1].reason == "apply is Never"
    assert all(taken.replacement is None for _, taken in never)
    # OnRestart keeps minGain: 17% is below the example's 25%, so nothing waits for a restart ...
    held = [t.recommendation for _, t in profiling_run(example(apply="OnRestart"), 4)]
    assert held[-1].decision == "Keep" and "below minGain 25%" in held[-1].reason
    # ... and at minGain 10% the searched placement is planned at the next restart
    waiting = [t.recommendation for _, t in profiling_run(example(apply="OnRestart", minGain=0.1), 4)]
    assert [r.decision for r in waiting] == ["Keep", "Keep", "AtRestart", "AtRestart"]


def test_when_collocated_is_the_best_the_job_stays_and_profiling_ends() -> None:
    """Under the linear cost model (every time scales as 1/g) no split beats collocated: the job is not moved."""
    steps = profiling_run(example(costModel="linear"), 6)
    recs = [taken.recommendation for _, taken in steps]
    assert all(taken.replacement is None for _, taken in steps)
    assert [dump(e) for e in recs[-1].component_placement] == COLLOCATED
    assert recs[2].reason == "collocated is the best placement for the measured times"
    assert [r.profiling for r in recs] == [True, True, False, False, False, False]
    status = steps[-1][0].model_copy(update={"recommendation": recs[-1]})
    assert profiling_condition(example(costModel="linear"), status) == (
        True,
        "Profiled",
        "profiled collocated over 3 iterations; the job already runs the recommended placement",
    )


def test_the_first_move_off_the_profiling_run_does_not_raise_the_next_ones_bar() -> None:
    """After leaving the profiling run, a later re-placement needs minGain, not 2 x minGain."""
    from rlplace_operator.planning.recommend import history_of

    (*_, (_, last)) = profiling_run(example(), 4)
    status = RLJobStatus.model_validate({"replacements": [dump(last.replacement)]})
    assert history_of(status, profiled=True).moves == 0
    assert history_of(status, profiled=False).moves == 1

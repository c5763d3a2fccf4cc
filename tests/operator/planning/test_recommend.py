"""status.recommendation and re-placement (operator/rlplace_operator/planning/recommend.py, reconcile.with_recommendation):
a running job's progress under a bad split of 8 GPUs -> a recommendation with its gain and an Event; with
apply Auto, three reports in a row -> ApplyNow -> the next report re-places it (children deleted, the
re-placement recorded) -> Provision plans the re-placement's entries.

The step times are a synthetic law (seconds = A/g on g GPUs, linear cost model), not a measurement of any model.
"""

from __future__ import annotations

import datetime as dt

from placement_core.cluster import Cluster
from rlplace_operator.api.base import dump
from rlplace_operator.api.conditions import PLACEMENT_RECOMMENDED as RECOMMENDED
from rlplace_operator.api.conditions import PLACEMENT_REPLACED as REPLACED
from rlplace_operator.api.rljob import RLJobSpec
from rlplace_operator.api.status import Progress, RLJobStatus
from rlplace_operator.planning.recommend import replaced_spec, step
from rlplace_operator.reconcile.actions import DeleteChildren, Outcome, Post
from rlplace_operator.reconcile.decide import with_recommendation
from rlplace_operator.reconcile.observe import recommendation_due as _recommendation_due
from rlplace_operator.reconcile.restarts import attempt_for_new_child
from rlplace_operator.reconcile.world import Job, World

NOW = dt.datetime(2026, 11, 24, 1, 0, 0, tzinfo=dt.UTC)
CLUSTER = Cluster.from_config({"num_nodes": 1, "accelerators_per_node": 8})
BAD = [
    {"components": "rollout,reward", "placement": "0-3"},
    {"components": "actor", "placement": "4-7"},
]
COLLOCATED = [{"components": "actor,rollout,reward", "placement": "all"}]


def spec(apply: str = "Never", **auto: object) -> RLJobSpec:
    return RLJobSpec.model_validate(
        {
            "nodeGroups": ["a800"],
            "componentPlacement": BAD,
            "placementMode": "modelParallel",
            "algorithm": {"recomputeLogprobs": False, "groupSize": 16, "nMinibatches": 4, "rolloutBatchSize": 128},
            "autoPlacement": {"apply": apply, "costModel": "linear", **auto},
            "entrypoint": "python train.py",
        }
    )


def progress(iteration: int, at: dt.datetime, rollout: float = 12.0, actor: float = 4.0) -> dict:
    """rollout 48/g and actor 16/g seconds on 4 GPUs each (synthetic)."""
    return {
        "iteration": iteration,
        "iterationSeconds": max(rollout, actor),
        "components": [{"name": "rollout", "seconds": rollout}, {"name": "actor", "seconds": actor}],
        "bottleneck": "rollout",
        "updatedAt": at.strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def running(**fields: object) -> dict:
    return {"phase": "Running", "observedGeneration": 1, "appliedPlacement": BAD, "rayJob": "train", **fields}


def test_a_bad_split_gets_a_recommendation_and_one_event() -> None:
    status = RLJobStatus.model_validate(running(progress=progress(5, NOW)))
    first = step(spec(), status, CLUSTER, NOW)
    rec = first.recommendation
    assert rec is not None and [dump(e) for e in rec.component_placement] == COLLOCATED
    # 8 s priced, and the 12 process calls collocated adds to the split's 4 at MAX_CALL_SECONDS each
    assert rec.predicted_iteration_seconds == 8.12 and rec.observed_iteration_seconds == 12.0
    assert 0.32 < rec.gain < 0.33 and rec.decision == "Keep" and rec.reason == "apply is Never"
    assert [reason for reason, _ in first.events] == [RECOMMENDED]
    assert "predicted 32% faster: 8.12 s per iteration" in first.events[0][1]
    # the same recommendation at the next report: no second Event, `since` kept
    later = NOW + dt.timedelta(seconds=10)
    again = step(
        spec(),
        status.model_copy(update={"recommendation": rec, "progress": Progress.model_validate(progress(6, later))}),
        CLUSTER,
        later,
    )
    assert again.events == () and again.recommendation is not None and again.recommendation.since == rec.since


def test_auto_re_places_at_the_report_after_its_decision() -> None:
    status = RLJobStatus.model_validate(running(progress=progress(1, NOW)))
    decisions = []
    for iteration in range(1, 5):
        at = NOW + dt.timedelta(seconds=12 * iteration)
        status = status.model_copy(update={"progress": Progress.model_validate(progress(iteration, at))})
        taken = step(spec("Auto"), status, CLUSTER, at)
        if taken.replacement is not None:
            decisions.append("replaced")
            break
        assert taken.recommendation is not None
        decisions.append(taken.recommendation.decision)
        status = status.model_copy(update={"recommendation": taken.recommendation})
    assert decisions == ["Keep", "Keep", "ApplyNow", "replaced"]
    assert taken.replacement is not None and taken.replacement.iteration == 4
    assert [dump(e) for e in taken.replacement.component_placement] == COLLOCATED
    assert [dump(e) for e in taken.replacement.previous] == BAD
    assert [reason for reason, _ in taken.events] == [REPLACED]


def job(status: dict, **spec_fields: object) -> Job:
    body = dump(spec("Auto"))
    body.update(spec_fields)
    return Job("ns", "train", "uid", 1, body, status)


def test_with_recommendation_records_the_re_placement_and_deletes_the_children() -> None:
    decided = step(spec("Auto"), RLJobStatus.model_validate(running(progress=progress(3, NOW))), CLUSTER, NOW)
    assert decided.recommendation is not None
    ready = decided.recommendation.model_copy(update={"decision": "ApplyNow"})
    wire = running(progress=progress(4, NOW + dt.timedelta(seconds=12)), recommendation=dump(ready))
    wire.update(attempts=1, driverStartTime="2026-11-24T00:59:00Z", rayCluster="train-raycluster-a1")
    outcome = with_recommendation(
        job(wire), World(now=NOW, cluster=CLUSTER), Outcome((), RLJobStatus.model_validate(wire))
    )
    assert any(isinstance(a, DeleteChildren) for a in outcome.actions)
    assert [a.reason for a in outcome.actions if isinstance(a, Post)] == [REPLACED]
    assert outcome.status.recommendation is None and len(outcome.status.replacements) == 1
    # The re-placement is the next attempt, and nothing of the last driver is kept (its start time would read
    # the new driver as a resubmission; a RayJob made for attempt 2 under a status at 3 would be deleted again).
    assert (outcome.status.attempts, outcome.status.driver_start_time) == (2, None)
    assert attempt_for_new_child(dump(outcome.status), 1) == 2
    # Nor its progress or Ray cluster: attempt 2 reporting iteration 1 after attempt 1's 4 would read as progress
    # going back, and the stopped driver's late reports must not land (the write tests status.rayCluster). The
    # RayJob's name stays: the job holds its nodes through it until the new attempt's is made.
    assert (outcome.status.progress, outcome.status.ray_cluster, outcome.status.ray_job) == (None, None, "train")
    # Provision then plans the re-placement's entries, not the spec's
    planned = replaced_spec(spec("Auto"), outcome.status)
    assert [dump(e) for e in planned.component_placement] == COLLOCATED and not planned.auto_placement.enabled
    # while it is being re-placed (the applied placement is still the old one) nothing is recomputed
    later = outcome.status.model_copy(
        update={"progress": Progress.model_validate(progress(5, NOW + dt.timedelta(seconds=30)))}
    )
    assert step(spec("Auto"), later, CLUSTER, NOW + dt.timedelta(seconds=30)) == type(
        step(spec(), later, CLUSTER, NOW)
    )(None)


def test_without_a_cluster_the_outcome_is_unchanged() -> None:
    wire = running(progress=progress(4, NOW))
    outcome = Outcome((), RLJobStatus.model_validate(wire))
    assert with_recommendation(job(wire), World(now=NOW), outcome) is outcome


def test_on_restart_waits_for_the_next_plan() -> None:
    status = RLJobStatus.model_validate(running(progress=progress(5, NOW)))
    rec = step(spec("OnRestart"), status, CLUSTER, NOW).recommendation
    assert rec is not None and rec.decision == "AtRestart"
    waiting = status.model_copy(update={"recommendation": rec})
    assert [dump(e) for e in replaced_spec(spec("OnRestart"), waiting).component_placement] == COLLOCATED
    assert replaced_spec(spec("Never"), waiting) == spec("Never")


def test_the_timer_looks_at_jobs_whose_recommendation_is_due() -> None:
    wire = running(progress=progress(5, NOW))
    assert _recommendation_due(dump(spec()), wire)
    rec = dump(step(spec(), RLJobStatus.model_validate(wire), CLUSTER, NOW).recommendation)
    assert not _recommendation_due(dump(spec()), {**wire, "recommendation": rec})
    assert _recommendation_due(dump(spec()), {**wire, "recommendation": rec, "progress": progress(6, NOW)})
    hybrid = {**dump(spec()), "placementMode": "hybrid"}
    assert not _recommendation_due(hybrid, wire)  # the model prices model-parallel placements only


def test_the_synthetic_replace_example_recommends_collocated() -> None:
    """examples/rljob-synthetic-replace.yaml with the times its synthetic laws give on its bad placement."""
    from pathlib import Path

    import yaml

    body = yaml.safe_load(
        (Path(__file__).resolve().parents[3] / "examples" / "rljob-synthetic-replace.yaml").read_text()
    )
    example = RLJobSpec.model_validate(body["spec"])
    times = progress(3, NOW, rollout=24 / 4, actor=8 / 4)
    times["components"].append({"name": "reward", "seconds": 0.1})
    status = RLJobStatus.model_validate(running(progress=times, appliedPlacement=body["spec"]["componentPlacement"]))
    rec = step(example, status, CLUSTER, NOW).recommendation
    assert rec is not None and [dump(e) for e in rec.component_placement] == COLLOCATED
    # the law's collocated iteration is 24/8 + 8/8 + 0.1 = 4.1 s; the model prices 4.05 s (reward folded into the
    # rollout, on 8 GPUs) and charges the 16 calls collocated adds 10 ms each: a promise within 3%, on the low side
    assert 4.1 <= rec.predicted_iteration_seconds < 4.1 * 1.03 and rec.gain > 0.25

"""Elastic components (docs/elastic.md): a placement's replicas as the grammar resizes it, the plan at the spec's
count, and the range checked at admission, each refusal one line naming the component."""

from __future__ import annotations

import datetime as dt
import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError
from test_replace import SPLIT, planned, provisioned

from placement_core.errors import PlacementError
from placement_core.grammar import parse_placement, replica_shape, resized_placement
from rlplace_operator.api.rljob import (
    MIN_ABOVE_MAX_MESSAGE,
    REPLICAS_NEED_REPLACE_MESSAGE,
    REPLICAS_OUT_OF_RANGE_MESSAGE,
    ComponentSettings,
    RLJobSpec,
)
from rlplace_operator.api.status import JobPhase, RLJobStatus
from rlplace_operator.planning.elastic import LoopStep, loop_step


@pytest.mark.parametrize(
    ("placement", "replicas", "resized"),
    [
        ("0-3", 6, "0-5"),
        ("0-3", 2, "0-1"),
        ("2-7", 8, "2-9"),
        ("0-3,8-11", 6, "0-3,8-9"),
        ("0-3,8-11", 10, "0-3,8-13"),
        ("0-7:0-3", 6, "0-11:0-5"),  # two GPUs per process
        ("0-1:0-3", 3, "0-2:0-5"),  # two processes per GPU
        ("5", 3, "5-7"),
    ],
)
def test_a_placement_grows_past_its_last_part_and_shrinks_from_its_end(
    placement: str, replicas: int, resized: str
) -> None:
    assert resized_placement(placement, replicas) == resized
    assert replica_shape(resized).count == replicas


@pytest.mark.parametrize(
    ("placement", "said"),
    [
        ("all", "placement 'all' uses 'all': replicas need the resources written out (e.g. 0-7)"),
        ("0-1,2-5:2-3", "placement '0-1,2-5:2-3' has parts of different shapes"),
        ("0-2:0-1", "part '0-2:0-1': one count must divide the other"),
    ],
)
def test_a_placement_without_one_repeating_unit_has_no_replicas(placement: str, said: str) -> None:
    with pytest.raises(PlacementError, match="^" + said.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        replica_shape(placement)


def processes_of(placement: str) -> list[tuple[int, ...]]:
    """Process rank -> its resources, as the grammar's rules lay them out."""
    laid: list[tuple[int, ...]] = []
    for part in parse_placement(placement):
        assert part.resources is not None
        resources = list(part.resources)
        count = len(resources) if part.processes is None else len(part.processes)
        if count <= len(resources):
            per = len(resources) // count
            laid += [tuple(resources[i * per : (i + 1) * per]) for i in range(count)]
        else:
            share = count // len(resources)
            laid += [(resources[i // share],) for i in range(count)]
    return laid


@st.composite
def placements(draw: st.DrawFn) -> str:
    """Ascending parts of one shape: k GPUs per process or m processes per GPU."""
    per, share = draw(st.sampled_from([(1, 1), (2, 1), (4, 1), (1, 2), (1, 4)]))
    start, parts = draw(st.integers(0, 8)), []
    for _ in range(draw(st.integers(1, 3))):
        units = draw(st.integers(1, 4))
        resources = units * per
        text = f"{start}-{start + resources - 1}"
        if (per, share) != (1, 1):
            text += f":0-{units * share - 1}"  # process ranks are renumbered; only their count matters here
        parts.append(text)
        start += resources + draw(st.integers(0, 3))
    return ",".join(parts)


@given(placements(), st.integers(1, 20))
def test_resizing_keeps_every_replica_that_stays_where_it_was(placement: str, replicas: int) -> None:
    before = processes_of(placement)
    after = processes_of(resized_placement(placement, replicas))
    shape = replica_shape(placement)
    assert len(after) == replicas * shape.processes
    kept = min(len(before), len(after))
    assert after[:kept] == before[:kept]
    if shape.processes == 1:  # each replica's resources its own, in ascending order
        assert all(a[-1] < b[0] for a, b in itertools.pairwise(after))


# -- the spec and the plan -------------------------------------------------------------------------------------


def elastic(**settings: object) -> dict:
    return {**SPLIT, "components": [{"name": "rollout", "onLoss": "Replace", **settings}]}


def test_replicas_resize_the_components_placement_and_the_plan_shows_it() -> None:
    """Rollout placed on GPUs 2-5 of the a800 node, 6 replicas asked: GPUs 2-7 (the node's last two continue its
    part); appliedPlacement says so."""
    spec = {**elastic(replicas=6, minReplicas=2, maxReplicas=14)}
    spec["componentPlacement"] = [*SPLIT["componentPlacement"][:1], {"components": "rollout", "placement": "2-5"}]
    outcome = provisioned(spec)
    assert outcome.status.phase != JobPhase.FAILED, outcome.status.message  # type: ignore[attr-defined]
    rollout = planned(outcome).component("rollout")
    assert [p.held_gpus for p in rollout.processes] == [(2,), (3,), (4,), (5,), (6,), (7,)]
    applied = {e.components: e.placement for e in outcome.status.applied_placement}  # type: ignore[attr-defined]
    assert applied["rollout"] == "2-7" and applied["actor"] == "0-1"


def test_a_range_without_replicas_plans_the_placement_as_written() -> None:
    outcome = provisioned(elastic(minReplicas=2, maxReplicas=14))
    assert outcome.status.phase != JobPhase.FAILED, outcome.status.message  # type: ignore[attr-defined]
    assert len(planned(outcome).component("rollout").processes) == 6


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        (
            elastic(maxReplicas=16),
            "maxReplicas cannot be placed: ",
        ),
        (
            elastic(minReplicas=7, maxReplicas=8),
            "component 'rollout': 6 replicas (componentPlacement places 6) is outside minReplicas..maxReplicas 7..8",
        ),
        (
            {
                **SPLIT,
                "componentPlacement": [
                    SPLIT["componentPlacement"][0],
                    {"components": "rollout,reward", "placement": "2-7"},
                ],
                "components": [{"name": n, "onLoss": "Replace", "maxReplicas": 6} for n in ("rollout", "reward")],
            },
            "component 'rollout': replicas need a componentPlacement entry of its own, but it shares 'rollout,reward' "
            "with reward",
        ),
        (
            {
                **elastic(maxReplicas=8),
                "componentPlacement": [SPLIT["componentPlacement"][0], {"components": "rollout", "placement": "all"}],
            },
            "component 'rollout': placement 'all' uses 'all': replicas need the resources written out",
        ),
        (
            {
                **elastic(maxReplicas=8),
                "autoPlacement": {"enabled": True},
                "profile": {"actorCost": 1, "rolloutCost": 1},
            },
            "component 'rollout': replicas and their range apply to a written componentPlacement",
        ),
    ],
    ids=["max-beyond-the-group", "placed-below-min", "shared-entry", "all", "auto-placement"],
)
def test_a_range_that_cannot_hold_is_refused_in_one_line_before_anything_is_made(spec: dict, said: str) -> None:
    outcome = provisioned(spec)
    message = outcome.status.message  # type: ignore[attr-defined]
    assert outcome.status.phase == JobPhase.FAILED and said in message, message  # type: ignore[attr-defined]
    assert "\n" not in message


def test_max_beyond_the_groups_names_the_component_and_what_the_groups_hold() -> None:
    """The range is checked against every ready node of the job's groups (two a800 nodes: 16 GPUs), not the one
    node the job needs now: 14 replicas from GPU 2 fit, 16 do not."""
    message = provisioned(elastic(maxReplicas=16)).status.message  # type: ignore[attr-defined]
    assert "component 'rollout'" in message and "'2-17'" in message and "(16 units)" in message, message


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        ({"name": "actor", "maxReplicas": 4}, REPLICAS_NEED_REPLACE_MESSAGE),
        ({"name": "rollout", "onLoss": "Replace", "minReplicas": 5, "maxReplicas": 4}, MIN_ABOVE_MAX_MESSAGE),
        ({"name": "rollout", "onLoss": "Replace", "replicas": 1, "minReplicas": 2}, REPLICAS_OUT_OF_RANGE_MESSAGE),
        ({"name": "rollout", "onLoss": "Replace", "replicas": 9, "maxReplicas": 8}, REPLICAS_OUT_OF_RANGE_MESSAGE),
    ],
    ids=["not-replace", "min-above-max", "below-min", "above-max"],
)
def test_the_model_refuses_what_the_crd_refuses(settings: dict, said: str) -> None:
    with pytest.raises(ValidationError, match=said.replace("..", r"\.\.")):
        ComponentSettings.model_validate(settings)


# -- the loop (spec.elastic) ------------------------------------------------------------------------------------

LOOP_NOW = dt.datetime(2026, 11, 24, 1, 0, tzinfo=dt.UTC)


def loop_spec(**elastic: object) -> RLJobSpec:
    return RLJobSpec.model_validate(
        {
            "nodeGroups": ["a800"],
            "componentPlacement": [
                {"components": "actor", "placement": "0-3"},
                {"components": "rollout", "placement": "4-5"},
                {"components": "reward", "placement": "6-7"},
            ],
            "components": [
                {"name": "rollout", "onLoss": "Replace", "minReplicas": 1, "maxReplicas": 8},
                {"name": "reward", "onLoss": "Replace", "minReplicas": 2, "maxReplicas": 2},  # never idle-shrunk
            ],
            "entrypoint": "python -m placement_core.launcher.demo --steps 100",
            "elastic": {"enabled": True, "cooldown": 60, **elastic},
        }
    )


def loop_status(
    rollout: str = "4-5", seconds: dict | None = None, iteration: int = 10, **fields: object
) -> RLJobStatus:
    """A running job: actor 0.5 s, rollout (the bottleneck) 1.8 s on 2 replicas, reward 0.1 s; iteration 2.0 s."""
    busy = seconds or {"actor": 0.5, "rollout": 1.8, "reward": 0.1}
    return RLJobStatus.model_validate(
        {
            "phase": "Running",
            "appliedPlacement": [
                {"components": "actor", "placement": "0-3"},
                {"components": "rollout", "placement": rollout},
                {"components": "reward", "placement": "6-7"},
            ],
            "progress": {
                "iteration": iteration,
                "iterationSeconds": fields.pop("iteration_seconds", 2.0),
                "components": [{"name": n, "seconds": s} for n, s in busy.items()],
                "bottleneck": max(busy, key=busy.__getitem__),
                "updatedAt": "2026-11-24T00:59:59Z",
            },
            **fields,
        }
    )


def test_the_loop_grows_the_bottleneck_when_it_promises_min_gain() -> None:
    step = loop_step(loop_spec(), loop_status(), LOOP_NOW)
    change = step.change
    assert change is not None and step.judged is None
    # 2 -> 4 replicas: the rollout's 1.8 s split over twice the replicas, 0.9 s off the iteration: 1.1 s, 45% faster.
    assert (change.component, change.index, change.previous, change.replicas, change.reason) == (
        "rollout",
        0,
        2,
        4,
        "Grow",
    )
    assert change.predicted == pytest.approx(1.1)
    assert change.why == (
        "component 'rollout' 2 -> 4 replicas: the bottleneck (1.80 s of 2.00 s), predicted 1.10 s per iteration "
        "(45% faster)"
    )
    # Not when the gain is below minGain, not beyond maxReplicas, not with the loop off.
    assert loop_step(loop_spec(minGain=0.5), loop_status(), LOOP_NOW).change is None
    assert loop_step(loop_spec(), loop_status(rollout="4-11"), LOOP_NOW).change is None  # 8: its maximum
    assert loop_step(loop_spec(enabled=False), loop_status(), LOOP_NOW) == LoopStep()


def test_the_loop_grows_only_as_far_as_there_is_room_and_asks_only_when_worth_it() -> None:
    """room(index, now, wanted) says how many replicas the queue would give the component now: the loop grows to
    that (promising what that count gives), not at all without room, and does not ask when no grow would pay."""
    asked: list[tuple[int, int, int]] = []

    def room_for(most: int):
        def room(index: int, now: int, wanted: int) -> int:
            asked.append((index, now, wanted))
            return max(now, min(most, wanted))

        return room

    change = loop_step(loop_spec(), loop_status(), LOOP_NOW, room_for(3)).change
    assert change is not None and (change.previous, change.replicas) == (2, 3)
    # 1.8 s over 3 replicas instead of 2: 0.6 s off, 1.4 s.
    assert change.predicted == pytest.approx(1.4)
    assert asked == [(0, 2, 4)]
    assert loop_step(loop_spec(), loop_status(), LOOP_NOW, room_for(2)).change is None  # no room: no grow
    asked.clear()
    assert loop_step(loop_spec(minGain=0.5), loop_status(), LOOP_NOW, room_for(8)).change is None
    assert asked == []  # 45% at most: below minGain, room is not asked for


def test_the_loop_shrinks_an_idle_component_and_waits_while_a_change_is_applied() -> None:
    idle = {"actor": 1.8, "rollout": 0.2, "reward": 0.1}  # the actor is the bottleneck now: rollout idles
    step = loop_step(loop_spec(), loop_status(rollout="4-7", seconds=idle), LOOP_NOW)
    assert step.change is not None
    assert (step.change.component, step.change.previous, step.change.replicas, step.change.reason) == (
        "rollout", 4, 2, "Shrink"
    )  # fmt: skip
    # A count the spec asks for that the job does not run yet, or ranks still starting: nothing.
    asked = loop_spec()
    asked.components[0].replicas = 6
    assert loop_step(asked, loop_status(rollout="4-7", seconds=idle), LOOP_NOW) == LoopStep()
    starting = [{"name": "rollout", "onLoss": "Replace", "desired": 4, "live": 2, "unverified": [2, 3]}]
    assert loop_step(loop_spec(), loop_status(components=starting), LOOP_NOW) == LoopStep()


def resized(
    reason: str, observed: float, predicted: float, iteration: int = 10, time: str = "2026-11-24T00:58:00Z"
) -> dict:
    return {
        "time": time, "iteration": iteration, "component": "rollout", "previous": 2, "replicas": 4, "reason": reason,
        "observedIterationSeconds": observed, "predictedIterationSeconds": predicted,
    }  # fmt: skip


def test_the_loop_judges_its_last_change_after_the_cooldown_and_undoes_a_broken_promise() -> None:
    grown = [resized("Grow", 2.0, 1.1)]
    # Within the cooldown, or fewer than three iterations reported since: nothing.
    assert loop_step(loop_spec(), loop_status("4-7", iteration=12, resizes=grown), LOOP_NOW) == LoopStep()
    assert loop_step(loop_spec(cooldown=600), loop_status("4-7", iteration=20, resizes=grown), LOOP_NOW) == LoopStep()
    # 1.3 s observed on 4 replicas (promised 1.1 s; at least half the promised 20% gain): kept, nothing undone.
    kept = loop_step(loop_spec(), loop_status("4-7", iteration=13, resizes=grown, iteration_seconds=1.3), LOOP_NOW)
    assert kept.change is None and kept.judged is not None
    assert (kept.judged.kept, kept.judged.observed_after_seconds) == (True, 1.3)
    # 1.95 s observed: the promise broken, the change undone.
    broken = loop_step(loop_spec(), loop_status("4-7", iteration=13, resizes=grown, iteration_seconds=1.95), LOOP_NOW)
    assert broken.judged is not None and broken.judged.kept is False
    undo = broken.change
    assert undo is not None and (undo.previous, undo.replicas, undo.reason) == (4, 2, "Undo")
    assert undo.why == (
        "component 'rollout' back to 2 replicas: grow to 4 promised 1.10 s per iteration, observed 1.95 s"
    )


def test_a_component_above_its_minimum_yields_its_extra_replicas_to_a_job_of_higher_priority_waiting() -> None:
    """A job of higher priority queued for the rollout's NodeGroup: the rollout goes down to its minimum at once
    (within the cooldown, its last grow not judged on iterations the yield changes: recorded as kept); at its
    minimum nothing, not even a grow; a yield is never undone."""
    waiting = {"a800": "job ns/urgent of priority 10"}
    grown = [resized("Grow", 2.0, 1.1)]
    step = loop_step(loop_spec(), loop_status("4-7", iteration=11, resizes=grown), LOOP_NOW, None, waiting)
    change = step.change
    assert change is not None and (change.previous, change.replicas, change.reason) == (4, 1, "Yield")
    assert change.why == "component 'rollout' 4 -> 1 replicas: job ns/urgent of priority 10 waits for its GPUs"
    assert step.judged is not None and step.judged.kept is True
    # At its minimum: nothing (not grown either while the job waits); the waiting job on another group: as usual.
    assert loop_step(loop_spec(), loop_status("4"), LOOP_NOW, None, waiting).change is None
    elsewhere = loop_step(loop_spec(), loop_status("4-7"), LOOP_NOW, None, {"4090": "job ns/urgent"}).change
    assert elsewhere is not None and elsewhere.reason == "Grow"
    yielded = [{**resized("Yield", 2.0, 2.0), "previous": 4, "replicas": 1}]
    later = loop_step(loop_spec(), loop_status("4", iteration=20, resizes=yielded, iteration_seconds=3.5), LOOP_NOW)
    assert later.change is None and later.judged is not None and later.judged.kept is True  # 3.5 s, yet kept


def test_a_grow_that_found_no_room_is_undone_after_the_cooldown() -> None:
    """The loop set 4 replicas; the job still runs 2 (provisioning refused the 4: no free GPUs) a cooldown later."""
    spec = loop_spec()
    spec.components[0].replicas = 4
    grown = [resized("Grow", 2.0, 1.1, time="2026-11-24T00:59:30Z")]
    assert loop_step(spec, loop_status(resizes=grown), LOOP_NOW) == LoopStep()  # 30 s: still applying
    late = [resized("Grow", 2.0, 1.1, time="2026-11-24T00:58:00Z")]
    step = loop_step(spec, loop_status(resizes=late), LOOP_NOW)
    assert step.judged is not None and step.judged.kept is False
    assert step.change is not None and (step.change.previous, step.change.replicas, step.change.reason) == (
        4,
        2,
        "Undo",
    )
    assert step.change.why.endswith("it found no room (its provisioning was refused)")
    # A user's own change that is not applied yet is never undone by the loop.
    assert loop_step(spec, loop_status(), LOOP_NOW) == LoopStep()

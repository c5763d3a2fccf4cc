"""spec.components[].onLoss Replace, refused in one line where a replica is not independent (planning/replace.py,
frameworks), and carried in the plan where it is; over the recorded local cluster."""

from __future__ import annotations

import json

import pytest

from placement_core.plan import OnLoss, Plan
from rlplace_operator.admission.ledger import Ledger
from rlplace_operator.api.status import JobPhase
from rlplace_operator.reconcile.actions import Apply
from rlplace_operator.reconcile.provision import provision
from rlplace_operator.reconcile.world import World

from recorded import NOW, cluster_snapshot, new_job

#: Actor on two GPUs of an a800 node, rollout on the other six and reward beside the actor (hybrid placement).
SPLIT = {
    "nodeGroups": ["a800"],
    "componentPlacement": [
        {"components": "actor", "placement": "0-1"},
        {"components": "rollout", "placement": "2-7"},
        {"components": "reward", "placement": "0-1"},
    ],
}


def replace(spec: dict, *names: str, **extra: object) -> dict:
    return {**spec, "components": [{"name": n, "onLoss": "Replace"} for n in names], **extra}


def provisioned(spec: dict) -> object:
    return provision(new_job("job", spec), World(now=NOW, child_known=False, snapshot=cluster_snapshot()), Ledger())


def planned(outcome: object) -> Plan:
    (configmap,) = [o for a in outcome.actions if isinstance(a, Apply) for o in a.objects if o["kind"] == "ConfigMap"]  # type: ignore[attr-defined]
    return Plan.from_json(configmap["data"]["plan.json"])


def test_a_replace_component_with_gpus_of_its_own_is_planned_so_and_the_others_restart_the_job() -> None:
    outcome = provisioned(replace(SPLIT, "rollout"))
    assert outcome.status.phase != JobPhase.FAILED, outcome.status.message  # type: ignore[attr-defined]
    plan = planned(outcome)
    assert {c.name: c.on_loss for c in plan.components} == {
        "actor": OnLoss.RESTART_JOB,
        "rollout": OnLoss.REPLACE,
        "reward": OnLoss.RESTART_JOB,
    }
    assert json.loads(plan.to_json())["components"]["rollout"]["on_loss"] == "Replace"
    assert "on_loss" not in json.loads(plan.to_json())["components"]["actor"]


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        (
            replace(SPLIT, "reward"),
            "component 'reward': onLoss Replace needs independent ranks, but its rank 0 shares GPU 0 of node a800-0 "
            "with 'actor' (RestartJob), which a loss would take down with it",
        ),
        (
            replace(SPLIT, "actor"),
            "component 'actor': onLoss Replace needs independent ranks, but actor's ranks train one model together",
        ),
        (
            replace(SPLIT, "rollout", modelParallel={"rolloutTensorParallelSize": 2}),
            "component 'rollout': onLoss Replace needs independent ranks, but rollout runs tensor parallel size 2",
        ),
        (
            replace(SPLIT, "critic"),
            "spec.components names 'critic', which the placement does not place (placed: actor, rollout, reward)",
        ),
        (
            replace(SPLIT, "rollout", framework="rlinf", entrypoint="python main.py"),
            "component 'rollout': onLoss Replace needs a driver that starts lost replicas again, and framework rlinf",
        ),
    ],
    ids=["shares-trainer-gpus", "trainer", "tensor-parallel", "not-placed", "framework"],
)
def test_replace_where_a_replica_is_not_independent_is_refused_in_one_line_before_anything_is_made(
    spec: dict, said: str
) -> None:
    outcome = provisioned(spec)
    message = outcome.status.message  # type: ignore[attr-defined]
    assert outcome.status.phase == JobPhase.FAILED and said in message, message  # type: ignore[attr-defined]
    assert "\n" not in message
    assert not [a for a in outcome.actions if isinstance(a, Apply)]  # type: ignore[attr-defined]


def test_replace_on_both_components_that_share_gpus_is_accepted() -> None:
    """Rollout and reward collocated, both Replace: a loss takes only replaceable ranks."""
    spec = {
        **SPLIT,
        "componentPlacement": [SPLIT["componentPlacement"][0], {"components": "rollout,reward", "placement": "2-7"}],
    }
    outcome = provisioned(replace(spec, "rollout", "reward"))
    assert outcome.status.phase != JobPhase.FAILED, outcome.status.message  # type: ignore[attr-defined]

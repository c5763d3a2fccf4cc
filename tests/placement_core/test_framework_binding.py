"""A framework job's binding from its driver's log (observe/processes.py), and the probe that writes it."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from placement_core import contract
from placement_core.components import component_placement
from placement_core.observe import probe
from placement_core.observe.processes import (
    Observed,
    component_of,
    framework_report,
    json_after,
    observed_in,
    worker_name,
)
from placement_core.plan import Plan, build_plan

# RLinf's heterogeneous example: actor on GPUs 0-1 of node 0, rollout on GPUs 0-1 of node 1, reward on the
# CPU-only node 2 (two processes).
PLAN = build_plan(
    component_placement(
        {
            "cluster": {
                "num_nodes": 3,
                "accelerators_per_node": [8, 8, 0],
                "node_groups": [
                    {"label": "a800", "node_ranks": 0},
                    {"label": "4090", "node_ranks": 1},
                    {"label": "cpu", "node_ranks": 2},
                ],
                "component_placement": {
                    "actor": {"node_group": "a800", "placement": "0-1"},
                    "rollout": {"node_group": "4090", "placement": "0-1"},
                    "reward": {"node_group": "cpu", "placement": "0:0-1"},
                },
            }
        }
    )
)


def _env_of(plan: Plan, component: str, rank: int, **changed: str) -> dict[str, str]:
    """The variables RLinf sets in the process (its placement's), as the probe prints them."""
    process = plan.component(component).processes[rank]
    env = {k: v for k, v in process.env.items() if v != "" or k == "LOCAL_HARDWARE_RANKS"}
    if not process.placement.visible_accelerators:
        env.pop("RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES", None)
    group = f"{component.capitalize()}Group"
    env.update(WORKER_NAME=f"{group}:{rank}", GROUP_NAME=group, RLPLACE_NODE_RANK=str(process.node_rank))
    return {**env, **changed}


def _log(plan: Plan, moved: dict[tuple[str, int], dict[str, str]] | None = None, skip: frozenset = frozenset()) -> str:
    """A driver log as Ray forwards it: probe lines prefixed by `(Group:rank pid=...)`, then the State API line."""
    lines, actors = ["step 1: {...}"], []
    for component in plan.names:
        for process in plan.component(component).processes:
            key = (component, process.rank)
            if key in skip:
                continue
            env = _env_of(plan, component, process.rank, **(moved or {}).get(key, {}))
            record = {"pid": 100 + process.rank, "env": env, "uuids": None}
            lines.append(f"(pid=1{process.rank}, ip=10.0.0.{process.node_rank}) {probe.PREFIX}{json.dumps(record)}")
            actors.append(
                {
                    "name": env["WORKER_NAME"],
                    "namespace": "RLinf",
                    "node_rank": int(env["RLPLACE_NODE_RANK"]),
                    "pid": 100 + process.rank,
                    "cuda_visible_devices": env.get("CUDA_VISIBLE_DEVICES"),
                }
            )
    actors.append(
        {"name": "NodeProbe_ab", "namespace": "RLinf", "node_rank": None, "pid": 1, "cuda_visible_devices": None}
    )
    lines.append(probe.ACTORS_PREFIX + json.dumps(actors))
    return "\n".join(lines)


def test_the_probe_and_the_parser_spell_the_contract_the_same_and_the_probe_stands_alone() -> None:
    assert (probe.PREFIX, probe.ACTORS_PREFIX, probe.NODE_LABEL) == (
        contract.PROBE_PREFIX,
        contract.ACTORS_PREFIX,
        contract.NODE_LABEL,
    )
    assert (probe.FRAMEWORK_ENV, probe.VERL_METRICS_ENV, probe.VARIABLES_ENV) == (
        contract.FRAMEWORK_ENV,
        contract.VERL_METRICS_ENV,
        contract.PROBE_VARIABLES_ENV,
    )
    assert f"{contract.PROBE_MODULE}.py" == contract.PROBE_FILE
    # The probe is handed the list of what it records (it cannot import it: it stands alone), and that list has
    # every variable a placement sets.
    assert set(PLAN.component("actor").processes[0].env) <= set(contract.PROBE_VARIABLES)
    # Shipped into images without rlplace: nothing but the standard library (and Ray, pynvml, RLinf inside).
    tree = ast.parse(Path(probe.__file__).read_text())
    imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert imported <= {
        "__future__",
        "json",
        "os",
        "sys",
        "threading",
        "time",
        "urllib",
        "collections",
        "typing",
        "fcntl",
        "ray",
        "pynvml",
        "rlinf",
    }


def test_a_framework_run_as_planned_is_verified_from_both_views() -> None:
    observed = observed_in(_log(PLAN))
    assert len(observed.probes) == len(observed.actors) == 6  # RLinf's NodeProbe_* actors are not workers
    report = framework_report(PLAN, observed)
    assert report is not None and report.ok, report and report.summary()
    assert report.summary() == "verified actor 2/2, rollout 2/2, reward 2/2"


def test_a_process_rlinf_put_on_other_gpus_is_named_with_both_values() -> None:
    moved = {("actor", 1): {"CUDA_VISIBLE_DEVICES": "3", "VISIBLE_DEVICES": "3", "LOCAL_ACCELERATOR_RANK": "3"}}
    report = framework_report(PLAN, observed_in(_log(PLAN, moved)))
    assert report is not None and not report.ok
    bad = report.first_failure()
    assert (bad.component, bad.rank) == ("actor", 1)
    assert bad.problems[0] == "CUDA_VISIBLE_DEVICES='3', planned '1'"
    assert "Ray's State API shows CUDA_VISIBLE_DEVICES='3', planned '1'" in bad.problems
    assert report.summary().startswith("verified actor 1/2, rollout 2/2, reward 2/2; component 'actor' rank 1")


def test_a_process_in_another_pod_is_named_from_inside_and_outside() -> None:
    moved = {("rollout", 0): {"RLPLACE_NODE_RANK": "0"}}
    (bad,) = [c for c in framework_report(PLAN, observed_in(_log(PLAN, moved))).checks if not c.ok]
    assert "runs in the pod of node rank 0, planned 1" in bad.problems
    assert "Ray's State API shows it on the Ray node of node rank 0, planned node rank 1" in bad.problems


def test_a_process_not_started_waits_then_is_missing_once_final() -> None:
    observed = observed_in(_log(PLAN, skip=frozenset({("reward", 1)})))
    assert framework_report(PLAN, observed) is None  # not told yet: it may still start
    report = framework_report(PLAN, observed, final=True)
    assert report is not None and report.summary().startswith("verified actor 2/2, rollout 2/2, reward 1/2")
    assert report.first_failure().problems == (
        "no probe record from the process (it did not start, or not as a worker of the framework)",
        "no live Ray actor of it in Ray's State API",
    )
    nothing = framework_report(PLAN, Observed(), final=True)
    assert nothing is not None and nothing.summary().startswith("verified actor 0/2, rollout 0/2, reward 0/2")


def test_an_extra_process_of_a_component_is_a_mismatch() -> None:
    log = (
        _log(PLAN)
        + "\n"
        + probe.PREFIX
        + json.dumps(
            {"pid": 9, "env": {**_env_of(PLAN, "actor", 1), "WORKER_NAME": "ActorGroup:2", "RANK": "2"}, "uuids": None}
        )
    )
    report = framework_report(PLAN, observed_in(log))
    assert report is not None and not report.ok
    assert report.checks[-1].problems == ("not in the plan (actor has 2 processes planned)",)


def test_group_names_map_to_components() -> None:
    assert worker_name("ActorGroup:12") == ("ActorGroup", 12) and worker_name("NodeProbe_ab") is None
    names = ("actor", "rollout", "env", "reward")
    assert [component_of(g, names) for g in ("ActorGroup", "RolloutGroup", "env_group", "Critic")] == [
        "actor",
        "rollout",
        "env",
        None,
    ]
    assert component_of("Generator", names, {"Generator": "rollout"}) == "rollout"


def test_a_record_followed_on_its_line_by_rays_actor_name_marker_is_read() -> None:
    """Ray writes `:actor_name:<class>` to a worker's stdout; a record whose line was not ended yet shares the log
    line with it (seen live with a veRL-style worker: the record was lost and the job failed its binding check)."""
    record = {"actor": "s4dAcfWorkerDict_0:1", "env": {"RANK": "1", "WG_PREFIX": "s4dAcf"}, "gpu_ids": ["1"]}
    line = f"\x1b[36m(pid=132, ip=10.245.0.8)\x1b[0m {probe.PREFIX}{json.dumps(record)}:actor_name:WorkerDict"
    assert json_after(line, probe.PREFIX) == record


def test_a_cut_or_foreign_line_is_skipped() -> None:
    log = f'{probe.PREFIX}{{"env": {{"WORKER_NAME": "ActorGroup:0"\n{probe.ACTORS_PREFIX}[1, 2]\nrlplace-probe: x'
    assert observed_in(log).empty


def test_the_probe_prints_one_record_line(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WORKER_NAME", "RolloutGroup:1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv(contract.PROBE_VARIABLES_ENV, ",".join(contract.PROBE_VARIABLES))
    probe.register()
    (line,) = capsys.readouterr().out.splitlines()
    observed = observed_in(line)
    assert observed.probes[("RolloutGroup", 1)].env["CUDA_VISIBLE_DEVICES"] == "1"
    # Only what the operator's list names is recorded (a pod's other variables, its secrets, are not).
    monkeypatch.setenv(contract.PROBE_VARIABLES_ENV, "WORKER_NAME,CUDA_VISIBLE_DEVICES")
    probe.register()
    (line,) = capsys.readouterr().out.splitlines()
    assert "RANK" not in observed_in(line).probes[("RolloutGroup", 1)].env


def test_a_mismatch_seen_before_every_process_is_named_and_the_unseen_are_not_counted_verified() -> None:
    moved = {("actor", 1): {"CUDA_VISIBLE_DEVICES": "3", "VISIBLE_DEVICES": "3", "LOCAL_ACCELERATOR_RANK": "3"}}
    report = framework_report(PLAN, observed_in(_log(PLAN, moved, skip=frozenset({("actor", 0), ("reward", 1)}))))
    assert report is not None  # told at once: the job need not wait for the rest
    assert report.summary() == (
        "verified actor 0/2, rollout 2/2, reward 1/2; component 'actor' rank 1 on node 'node-0': "
        "CUDA_VISIBLE_DEVICES='3', planned '1'"
    )

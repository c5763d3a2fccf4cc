"""The reference driver's --steps mode: the synthetic workload's laws (pure), step options (bad input), then
real steps on a simulated Ray cluster: per-component times following the laws, checkpoints, and a driver
killed mid-run (SIGKILL, Ray and all) that resumes on attempt 2 from its last checkpoint."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from placement_core import launcher
from placement_core.components import component_placement, sharing_groups
from placement_core.errors import LaunchError
from placement_core.launcher import demo, steps
from placement_core.launcher.checkpoint import CheckpointStore
from placement_core.launcher.synthetic import (
    Law,
    Slowdown,
    component_gpus,
    parse_law,
    parse_laws,
    parse_slowdowns,
    predicted_iteration_seconds,
)
from placement_core.observe.progress import find_progress
from placement_core.plan import Plan, build_plan


def plan_of(placements: dict[str, str], num_nodes: int = 2, gpus: int = 8) -> Plan:
    config = {"cluster": {"num_nodes": num_nodes, "accelerators_per_node": gpus, "component_placement": placements}}
    return Plan.from_json(build_plan(component_placement(config)).to_json())


# -- laws (pure) -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "component", "law", "at_4"),
    [
        ("actor=120/g", "actor", Law(120, 0), 30.0),
        ("rollout=80/g+2", "rollout", Law(80, 2), 22.0),
        ("reward = 0.5", "reward", Law(0, 0.5), 0.5),
        ("critic=.4/g + 0.1", "critic", Law(0.4, 0.1), 0.2),
    ],
)
def test_laws(text: str, component: str, law: Law, at_4: float) -> None:
    assert parse_law(text) == (component, law)
    assert law.seconds(4) == pytest.approx(at_4)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("actor", r"^--law wants COMPONENT=A/g, COMPONENT=A/g\+B or COMPONENT=B \(seconds\), got 'actor'$"),
        ("actor=g/120", r"got 'actor=g/120'$"),
        ("actor=-1", r"got 'actor=-1'$"),
        ("=1", r"got '=1'$"),
        ("actor=120/g 2", r"^--law: missing '\+' between the terms in 'actor=120/g 2'$"),
    ],
)
def test_bad_laws_are_one_line(text: str, message: str) -> None:
    with pytest.raises(LaunchError, match=message):
        parse_law(text)


def test_every_launched_component_needs_one_law() -> None:
    assert parse_laws(["a=1", "b=2/g"], ["a", "b"]) == {"a": Law(0, 1), "b": Law(2, 0)}
    with pytest.raises(LaunchError, match=r"needs a --law for every component; missing: b$"):
        parse_laws(["a=1"], ["a", "b"])
    with pytest.raises(LaunchError, match=r"^--law for 'c', which is not launched \(launched: a, b\)$"):
        parse_laws(["a=1", "b=1", "c=1"], ["a", "b"])
    with pytest.raises(LaunchError, match=r"^--law for 'a' given twice$"):
        parse_laws(["a=1", "a=2"], ["a"])
    with pytest.raises(LaunchError, match=r"needs GPUs, the component has 0"):
        Law(1, 0).seconds(0)


def test_a_straggler_slows_its_component_in_its_steps_only() -> None:
    (slow,) = parse_slowdowns(["rollout = 2.5@3-5"], ["actor", "rollout"])
    assert slow == Slowdown("rollout", 2.5, 3, 5)
    assert [slow.extra(step) for step in (2, 3, 5, 6)] == [0.0, 2.5, 2.5, 0.0]
    for text, message in (
        ("rollout=2", r"^--slow wants COMPONENT=SECONDS@FROM-TO \(steps, FROM <= TO\), got 'rollout=2'$"),
        ("rollout=2@5-3", r"got 'rollout=2@5-3'$"),
        ("rollout=-1@1-2", r"got 'rollout=-1@1-2'$"),
        ("critic=1@1-2", r"^--slow for 'critic', which is not launched \(launched: actor, rollout\)$"),
    ):
        with pytest.raises(LaunchError, match=message):
            parse_slowdowns([text], ["actor", "rollout"])


def test_collocated_components_take_turns_and_split_ones_overlap() -> None:
    """The declared model: the iteration is the longest per-GPU-group sum (what a placement change moves)."""
    laws = {"actor": Law(1.2, 0), "rollout": Law(0.8, 0.1), "reward": Law(0, 0.05)}
    collocated = launcher.load_plan(plan_of({"actor,rollout": "0-3", "reward": "4"}))
    split = launcher.load_plan(plan_of({"actor": "0-3", "rollout": "4-7", "reward": "8"}))
    gpus_c = {n: component_gpus(collocated, n) for n in laws}
    gpus_s = {n: component_gpus(split, n) for n in laws}
    assert sharing_groups(gpus_c) == [["actor", "rollout"], ["reward"]]
    assert sharing_groups(gpus_s) == [["actor"], ["rollout"], ["reward"]]
    assert predicted_iteration_seconds(laws, gpus_c) == pytest.approx(0.3 + 0.3)
    assert predicted_iteration_seconds(laws, gpus_s) == pytest.approx(0.3)
    chain = {"a": frozenset({(0, 0)}), "b": frozenset({(0, 1)}), "c": frozenset({(0, 0), (0, 1)})}
    assert sharing_groups(chain) == [["a", "b", "c"]]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--checkpoint-every", "2"], "error: --checkpoint-every needs --steps"),
        (["--law", "actor=1"], "error: --law needs --steps"),
        (["--workload", "synthetic"], "error: --workload synthetic needs --steps"),
        (["--steps", "0"], "error: --steps must be 1 or more"),
        (["--steps", "3", "--law", "actor=1"], "error: --law needs --workload synthetic"),
        (["--slow", "actor=1@1-2"], "error: --slow needs --steps"),
        (["--steps", "3", "--slow", "actor=1@1-2"], "error: --slow needs --workload synthetic"),
        (["--steps", "3", "--workload", "synthetic", "--law", "actor=1", "--slow", "actor=1"], "error: --slow wants"),
        (["--steps", "3", "--workload", "synthetic"], "needs a --law for every component; missing: actor"),
        (["--steps", "3", "--checkpoint-every", "1"], "error: --checkpoint-every needs a checkpoint directory"),
    ],
)
def test_bad_step_options_exit_2_with_one_line(tmp_path, capsys, monkeypatch, args, message) -> None:
    monkeypatch.delenv("RLPLACE_CHECKPOINT_DIR", raising=False)
    (tmp_path / "plan.json").write_text(plan_of({"actor": "0"}, num_nodes=1).to_json())
    assert demo.main(["--plan", str(tmp_path / "plan.json"), *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err


def test_step_options_read_the_contract_variables(tmp_path, monkeypatch) -> None:
    """The driver's checkpoint directory and attempt, and the progress URL, come from the environment."""
    import argparse

    from placement_core.observe.progress import HttpReporter, LogReporter, Reporters

    parser = argparse.ArgumentParser()
    steps.add_step_arguments(parser)
    monkeypatch.setenv("RLPLACE_CHECKPOINT_DIR", str(tmp_path / "ck"))
    monkeypatch.setenv("RLPLACE_ATTEMPT", "3")
    monkeypatch.setenv("RLPLACE_PROGRESS_URL", "http://127.0.0.1:9/progress")
    options = steps.step_options(parser.parse_args(["--steps", "4", "--checkpoint-every", "2"]), ["actor"])
    assert (options.steps, options.checkpoint_every, options.laws) == (4, 2, None)
    assert (options.store.directory, options.store.attempt) == (tmp_path / "ck", 3)
    assert isinstance(options.reporter, Reporters)
    assert [type(r) for r in options.reporter.reporters] == [LogReporter, HttpReporter]
    options.reporter.close()
    monkeypatch.delenv("RLPLACE_PROGRESS_URL")
    assert isinstance(steps.step_options(parser.parse_args(["--steps", "1"]), ["actor"]).reporter, LogReporter)


# -- real steps on a simulated cluster -------------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_cluster(simulated_ray):
    return simulated_ray


@pytest.mark.ray
@pytest.mark.parametrize(
    ("placements", "expected"),
    [
        # split: actor 4 GPUs (0.3 s), rollout 4 GPUs (0.3 s), at the same time -> ~0.3 s
        ({"actor": "0-3", "rollout": "4-7"}, {"actor": 0.3, "rollout": 0.3, "iteration": 0.3}),
        # collocated on 2 GPUs: actor 0.6 s then rollout 0.5 s -> ~1.1 s
        ({"actor,rollout": "0-1"}, {"actor": 0.6, "rollout": 0.5, "iteration": 1.1}),
    ],
)
def test_synthetic_steps_follow_the_laws_for_the_placement(ray_cluster, tmp_path, capsys, placements, expected):
    plan = launcher.load_plan(plan_of(placements))
    laws = parse_laws(["actor=1.2/g", "rollout=0.8/g+0.1"], ["actor", "rollout"])
    assert predicted_iteration_seconds(laws, {n: component_gpus(plan, n) for n in laws}) == pytest.approx(
        expected["iteration"]
    )
    options = steps.StepOptions(steps=3, laws=laws)
    assert demo.run(plan, ["actor", "rollout"], options) == 0
    reports = find_progress(capsys.readouterr().out)
    assert [r.iteration for r in reports] == [1, 2, 3]
    for report in reports[1:]:  # the first step includes warm-up
        seconds = report.seconds()
        # A component's time runs from its first process's start to its last one's end: its law plus the skew
        # of Ray's calls to its processes (0.32 s on a loaded 2-core CI machine). The floor is exact.
        for component in ("actor", "rollout"):
            assert expected[component] - 0.02 <= seconds[component] <= expected[component] + 0.4, seconds
        # Ray's call overhead adds to a step's wall time (0.4 s more on a loaded 2-core CI machine): the floor
        # is exact (collocated components run one after the other), the ceiling leaves room for the load.
        assert expected["iteration"] - 0.05 <= report.iteration_seconds <= expected["iteration"] + 0.5


@pytest.mark.ray
def test_a_straggler_slows_the_steps_it_names(ray_cluster, capsys) -> None:
    plan = launcher.load_plan(plan_of({"actor": "0-3", "rollout": "4-7"}))
    laws = parse_laws(["actor=0.4/g", "rollout=0.4/g"], ["actor", "rollout"])
    slowdowns = parse_slowdowns(["rollout=0.5@3-3"], ["actor", "rollout"])
    assert demo.run(plan, ["actor", "rollout"], steps.StepOptions(steps=4, laws=laws, slowdowns=slowdowns)) == 0
    reports = {r.iteration: r for r in find_progress(capsys.readouterr().out)}
    # Step 3's rollout sleeps 0.1 + 0.5 s; steps 2 and 4 (after the warm-up of step 1) only 0.1 s.
    assert reports[3].seconds()["rollout"] >= 0.58, reports[3]
    assert reports[3].iteration_seconds >= 0.58
    for step in (2, 4):
        assert reports[step].seconds()["rollout"] < 0.5, reports[step]
        assert reports[step].seconds()["actor"] < 0.5, reports[step]


@pytest.mark.ray
def test_steps_checkpoint_and_a_later_attempt_resumes(ray_cluster, tmp_path, capsys) -> None:
    plan = launcher.load_plan(plan_of({"actor": "0", "rollout": "1", "reward": "2"}))
    components = ["actor", "rollout", "reward"]
    first = steps.StepOptions(steps=5, checkpoint_every=2, store=CheckpointStore(tmp_path, attempt_number=1))
    assert demo.run(plan, components, first) == 0
    out = capsys.readouterr().out
    assert [line.split(":")[0] for line in out.splitlines() if line.startswith("step ")] == [
        f"step {i}/5 (attempt 1)" for i in range(1, 6)
    ]
    assert "summary: attempt 1 ran 5 steps (1-5), resumed from step 0, repeated 0" in out
    assert all(r.seconds().keys() == {"actor", "rollout"} for r in find_progress(out))
    assert CheckpointStore(tmp_path).steps() == [2, 4]
    # The job asks for more steps on a new attempt: it resumes after step 4 and repeats step 5.
    second = steps.StepOptions(steps=6, checkpoint_every=2, store=CheckpointStore(tmp_path, attempt_number=2))
    assert demo.run(plan, components, second) == 0
    out = capsys.readouterr().out
    assert [line.split(":")[0] for line in out.splitlines() if line.startswith("step ")] == [
        "step 5/6 (attempt 2)",
        "step 6/6 (attempt 2)",
    ]
    assert "summary: attempt 2 ran 2 steps (5-6), resumed from step 4, repeated 1" in out
    last = CheckpointStore(tmp_path).latest()
    assert (last.step, last.attempt) == (6, 2)


@pytest.mark.ray
def test_a_driver_killed_after_step_5_resumes_at_its_last_checkpoint(ray_cluster: Any, tmp_path: Path) -> None:
    """The driver, joined to the session's simulated cluster, SIGKILLed right after step 5 (checkpoints every 2;
    Ray stops the actors it owned): attempt 2 resumes after step 4, runs 5-8, and repeats one step, less than a
    checkpoint interval."""
    import ray

    plan = tmp_path / "plan.json"
    plan.write_text(plan_of({"actor": "0-1", "rollout": "2-3"}, num_nodes=1).to_json())
    checkpoints = tmp_path / "checkpoints"
    command = [
        sys.executable,
        "-m",
        "placement_core.launcher.demo",
        "--plan",
        str(plan),
        "--address",
        ray_cluster.address,
        "--steps",
        "8",
        "--checkpoint-every",
        "2",
        "--workload",
        "synthetic",
        "--law",
        "actor=0.8/g",
        "--law",
        "rollout=0.8/g",
    ]
    env = {**os.environ, "RLPLACE_CHECKPOINT_DIR": str(checkpoints), "RLPLACE_ATTEMPT": "1"}
    first = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True, start_new_session=True)
    lines = []
    deadline = time.monotonic() + 240
    try:
        for line in first.stdout:
            lines.append(line)
            if line.startswith("step 5/8"):
                break
            assert time.monotonic() < deadline, lines
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    assert lines[-1].startswith("step 5/8 (attempt 1)"), lines
    assert CheckpointStore(checkpoints).steps() == [2, 4]
    # Attempt 2 plans the same GPUs: wait until Ray has given back the killed driver's.
    deadline = time.monotonic() + 60
    while ray.available_resources().get("GPU", 0) < ray.cluster_resources()["GPU"]:
        assert time.monotonic() < deadline, ray.available_resources()
        time.sleep(0.2)
    second = subprocess.run(command, env={**env, "RLPLACE_ATTEMPT": "2"}, capture_output=True, text=True, timeout=300)
    assert second.returncode == 0, second.stderr
    ran = [line.split(":")[0] for line in second.stdout.splitlines() if line.startswith("step ")]
    assert ran == [f"step {i}/8 (attempt 2)" for i in range(5, 9)]
    assert "summary: attempt 2 ran 4 steps (5-8), resumed from step 4, repeated 1" in second.stdout
    assert [r.iteration for r in find_progress(second.stdout)] == [5, 6, 7, 8]
    assert CheckpointStore(checkpoints).latest().step == 8

"""Binding verification rules, without Ray or a GPU: what a process compares, and what the driver adds.

The same checks run inside real actors in test_launcher.py (a tampered plan entry fails the launch)."""

from __future__ import annotations

import dataclasses
import os

import pytest

from placement_core import contract
from placement_core.components import component_placement
from placement_core.observe.verify import (
    Binding,
    BindingError,
    BindingReport,
    Devices,
    ProcessCheck,
    check_binding,
    find_report,
    find_report_after,
    libcuda_mapped,
    replaced_line,
    report_line,
    resized_line,
    select_devices,
)
from placement_core.plan import Plan, build_plan


def plan_of(placements: dict[str, str], num_nodes: int = 2, gpus: int = 8) -> Plan:
    config = {"cluster": {"num_nodes": num_nodes, "accelerators_per_node": gpus, "component_placement": placements}}
    return build_plan(component_placement(config))


PLAN = plan_of({"actor,rollout": "0-1,8-9", "reward": "2,10", "critic": "3-4:0"})


def binding(component: str, rank: int, master: str = "10.0.0.1") -> Binding:
    processes = PLAN.component(component).processes
    return Binding(component, processes[rank], len(processes), master)


def planned_env(b: Binding) -> dict[str, str]:
    """What the launcher gives the process: the plan's env with MASTER_ADDR as launched."""
    return {**b.process.env, "MASTER_ADDR": b.master_addr, "PATH": "/usr/bin"}


def test_a_process_started_as_planned_passes() -> None:
    b = binding("critic", 0)
    check = check_binding(b, planned_env(b), ray_node_rank=0, devices=Devices("nvml", ("GPU-a", "GPU-b")))
    assert check == ProcessCheck("critic", 0, "node-0", (), ("GPU-a", "GPU-b"), "nvml")
    assert check.ok


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"CUDA_VISIBLE_DEVICES": "5"}, "CUDA_VISIBLE_DEVICES='5', planned '2'"),
        ({"RANK": "0"}, "RANK='0', planned '1'"),
        ({"WORLD_SIZE": None}, "WORLD_SIZE=unset, planned '2'"),
        ({"LOCAL_HARDWARE_RANKS": "3"}, "LOCAL_HARDWARE_RANKS='3', planned '2'"),
        ({"CLUSTER_NODE_RANK": "0"}, "CLUSTER_NODE_RANK='0', planned '1'"),
        ({"MASTER_ADDR": "node-0"}, "MASTER_ADDR='node-0', planned '10.0.0.1'"),
        ({contract.KUBE_NODE_ENV: "gpu-7"}, "runs on Kubernetes node 'gpu-7', planned 'node-1'"),
    ],
)
def test_each_planned_variable_and_the_node_are_checked(change: dict[str, str | None], problem: str) -> None:
    b = binding("reward", 1)
    env = planned_env(b)
    for key, value in change.items():
        if value is None:
            del env[key]
        else:
            env[key] = value
    check = check_binding(b, env, ray_node_rank=1, devices=None)
    assert check.problems == (problem,)
    assert check.describe() == f"component 'reward' rank 1 on node 'node-1': {problem}"


def test_the_expected_values_come_from_the_placement_not_the_plans_env() -> None:
    """A plan whose env was tampered with still yields the placement's values as the expectation."""
    b = binding("reward", 0)
    tampered = dataclasses.replace(b.process, env={**b.process.env, "CUDA_VISIBLE_DEVICES": "7"})
    bad = dataclasses.replace(b, process=tampered)
    assert check_binding(bad, planned_env(bad), 0, None).problems == ("CUDA_VISIBLE_DEVICES='7', planned '2'",)


def test_kubernetes_node_matches_and_ray_node_rank_is_checked() -> None:
    b = binding("actor", 0)
    env = {**planned_env(b), contract.KUBE_NODE_ENV: "node-0"}
    assert check_binding(b, env, 0, None).ok
    assert check_binding(b, env, 1, None).problems == ("runs on the Ray node of node rank 1, planned 0",)


def test_visible_gpu_count_must_be_the_planned_count() -> None:
    b = binding("critic", 0)
    check = check_binding(b, planned_env(b), 0, Devices("torch", ("GPU-a",)))
    assert check.problems == ("torch shows 1 GPUs, planned 2",)


@pytest.mark.parametrize(
    ("visible", "uuids", "problems"),
    [
        (None, ("GPU-a", "GPU-b", "GPU-c"), ()),
        ("2,0", ("GPU-c", "GPU-a"), ()),
        ("GPU-b", ("GPU-b",), ()),
        ("", (), ()),
        ("1,5", ("GPU-b",), ("CUDA_VISIBLE_DEVICES entry '5' names no GPU of the container (nvml lists 3)",)),
    ],
)
def test_nvml_devices_selected_as_cuda_reads_the_variable(
    visible: str | None, uuids: tuple[str, ...], problems: tuple[str, ...]
) -> None:
    assert select_devices("nvml", ["GPU-a", "GPU-b", "GPU-c"], visible) == Devices("nvml", uuids, problems)


def checks_seeing(uuids_by_process: dict[tuple[str, int], tuple[str, ...]]) -> BindingReport:
    pairs = []
    for component, process in PLAN.processes():
        uuids = uuids_by_process.get((component.name, process.rank))
        pairs.append((ProcessCheck(component.name, process.rank, process.node_name, (), uuids, "nvml"), process))
    return BindingReport.of(pairs)


def test_exclusive_processes_on_one_node_never_see_the_same_gpu() -> None:
    # node-0: actor 0 and rollout 0 share GPU 0 (planned), reward 0 holds GPU 2, critic 0 holds GPUs 3-4.
    fine = checks_seeing(
        {("actor", 0): ("U0",), ("rollout", 0): ("U0",), ("reward", 0): ("U2",), ("critic", 0): ("U3", "U4")}
    )
    assert fine.ok
    assert fine.verified() == {"actor": 4, "rollout": 4, "reward": 2, "critic": 1}
    clash = checks_seeing({("actor", 0): ("U0",), ("reward", 0): ("U2",), ("critic", 0): ("U2", "U4")})
    bad = clash.first_failure()
    assert bad is not None
    assert (bad.component, bad.rank) == ("critic", 0)
    assert bad.problems == (
        "sees GPU U2, which component 'reward' rank 0 also sees (planned GPUs 3,4 and 2 are disjoint)",
    )
    # The same UUID on different nodes is not a clash (UUIDs are per node here only by construction).
    assert checks_seeing({("reward", 0): ("U2",), ("reward", 1): ("U2",)}).ok


def test_report_json_round_trip_summary_and_error() -> None:
    report = checks_seeing({("reward", 0): ("U2",), ("critic", 0): ("U2", "U4")})
    assert BindingReport.from_json(report.to_json()) == report
    # each process's PID, where it checked itself, goes along (what `kubectl rlplace logs` finds its log by)
    with_pids = dataclasses.replace(
        report, checks=tuple(dataclasses.replace(c, pid=100 + i) for i, c in enumerate(report.checks))
    )
    assert BindingReport.from_json(with_pids.to_json()) == with_pids
    assert [c.pid for c in BindingReport.from_json(with_pids.to_json()).checks][:2] == [100, 101]
    assert report.summary() == (
        "verified actor 4/4, rollout 4/4, reward 2/2, critic 0/1; component 'critic' rank 0 on node 'node-0': "
        "sees GPU U2, which component 'reward' rank 0 also sees (planned GPUs 3,4 and 2 are disjoint)"
    )
    err = BindingError(report)
    assert (err.component, err.rank, err.report) == ("critic", 0, report)
    assert str(err).startswith("binding check failed: component 'critic' rank 0 on node 'node-0': sees GPU U2")
    assert "\n" not in str(err)


@pytest.mark.parametrize("text", ["{", "[]", '{"components": ["a"], "checks": [{"component": "a"}]}'])
def test_bad_report_json_is_one_line(text: str) -> None:
    with pytest.raises(ValueError, match=r"^not a binding report: "):
        BindingReport.from_json(text)


def test_the_report_survives_a_drivers_log() -> None:
    """What the driver prints is what the operator reads back: the last full report line in the log."""
    old = checks_seeing({("reward", 0): ("U2",), ("critic", 0): ("U2", "U4")})
    new = checks_seeing({})
    log = "\n".join(
        [
            "2026-11-23 starting",
            report_line(old),
            "(EnvReporter pid=12) noise",
            "job retried",
            "INFO " + report_line(new),
            report_line(old)[:40],  # cut short by a log limit
        ]
    )
    assert find_report(log) == new
    assert find_report("no report here") is None
    assert report_line(new).startswith(contract.BINDING_REPORT_PREFIX)


# -- CUDA loaded before the launcher set the environment -------------------------------------------------

MAPS_WITH_CUDA = """\
7f1c2a000000-7f1c2a200000 r-xp 00000000 08:01 1234 /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15
7f1c2b000000-7f1c2b100000 r-xp 00000000 08:01 1235 /usr/lib/x86_64-linux-gnu/libc.so.6
"""
MAPS_WITHOUT_CUDA = """\
7f1c2b000000-7f1c2b100000 r-xp 00000000 08:01 1235 /usr/lib/x86_64-linux-gnu/libc.so.6
7f1c2c000000-7f1c2c100000 r-xp 00000000 08:01 1236 /venv/lib/python3.11/site-packages/nvidia/cuda_runtime/lib/libcudart.so.12
7f1c2d000000-7f1c2d100000 rw-p 00000000 00:00 0 [heap]
"""


def test_the_cuda_driver_library_is_found_in_a_memory_map_and_the_runtime_is_not_it() -> None:
    assert libcuda_mapped(MAPS_WITH_CUDA)
    assert not libcuda_mapped(MAPS_WITHOUT_CUDA)  # libcudart (what `import torch` loads) does not read the variable
    assert not libcuda_mapped("")


def test_cuda_loaded_before_the_environment_fails_the_process() -> None:
    b = binding("critic", 0)
    early = "CUDA was loaded in this process before its planned environment was set (CUDA_VISIBLE_DEVICES was unset"
    check = check_binding(b, planned_env(b), ray_node_rank=0, devices=None, cuda_early=early)
    assert not check.ok
    assert check.describe() == f"component 'critic' rank 0 on node 'node-0': {early}"


def test_cuda_loaded_before_reads_this_process(tmp_path) -> None:
    """A real process that loads a library named like the CUDA driver (a copy of libz) before the variables are
    set is caught; the same process is not when the old value already was the planned one, nor before loading."""
    import ctypes.util
    import shutil
    import subprocess
    import sys

    libz = ctypes.util.find_library("z")
    if libz is None:
        pytest.skip("no libz to stand in for libcuda")
    folders = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib")
    source = next((f"{d}/{libz}" for d in folders if os.path.exists(f"{d}/{libz}")), None)
    if source is None:
        pytest.skip(f"{libz} not found")
    shutil.copy(source, tmp_path / "libcuda.so.1")
    code = (
        "import ctypes, os, sys\n"
        "from placement_core.observe.verify import cuda_loaded_before\n"
        "print(cuda_loaded_before({'CUDA_VISIBLE_DEVICES': '3'}))\n"
        "ctypes.CDLL(sys.argv[1])\n"
        "os.environ['CUDA_VISIBLE_DEVICES'] = '3'\n"
        "print(cuda_loaded_before({'CUDA_VISIBLE_DEVICES': '3'}))\n"
        "os.environ['CUDA_VISIBLE_DEVICES'] = '0,1'\n"
        "print(cuda_loaded_before({'CUDA_VISIBLE_DEVICES': '3'}))\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "libcuda.so.1")], capture_output=True, text=True)
    assert done.stdout.splitlines() == [
        "None",
        "None",
        "CUDA was loaded in this process before its planned environment was set (CUDA_VISIBLE_DEVICES was '0,1' "
        "then), so it may use other GPUs than planned (launch with env_via='runtime_env')",
    ], done.stderr


def test_the_report_after_the_replaced_ranks_lines_is_the_one_that_verifies_them() -> None:
    config = {"cluster": {"num_nodes": 1, "accelerators_per_node": 2, "component_placement": {"rollout": "0-1"}}}
    plan = build_plan(component_placement(config))
    first = BindingReport.of((ProcessCheck(c.name, p.rank, p.node_name, ()), p) for c, p in plan.processes())
    later = BindingReport.of((ProcessCheck(c.name, p.rank, "elsewhere", ()), p) for c, p in plan.processes())
    log = "\n".join(
        [report_line(first), "step 1", replaced_line("rollout", 1), "step 2", report_line(later), report_line(first)]
    )
    found = find_report_after(log, {"rollout": [1]})
    assert found is not None and found.to_json() == later.to_json()
    assert find_report_after(log, {"rollout": [0, 1]}) is None  # rank 0 was not replaced yet
    assert find_report_after(report_line(first), {"rollout": [1]}) is None


def test_a_rank_started_before_the_drivers_last_resize_waits_for_a_start_after_it() -> None:
    """The operator awaits rollout ranks 2-3: the driver started them once (rank lines and a report covering them),
    then a resize 4 -> 2 stopped them, then 2 -> 4 started them again. Only the report after the new starts
    verifies them; ranks the last resize kept (0-1) count as started at it; a report that does not cover every
    awaited rank (printed before they joined) is not the one."""
    config = {"cluster": {"num_nodes": 1, "accelerators_per_node": 4, "component_placement": {"rollout": "0-3"}}}
    plan = build_plan(component_placement(config))
    checks = [(ProcessCheck(c.name, p.rank, p.node_name, ()), p) for c, p in plan.processes()]
    four, two = BindingReport.of(checks), BindingReport.of(checks[:2])
    stale = [replaced_line("rollout", 2), replaced_line("rollout", 3), report_line(four)]
    shrunk = [resized_line("rollout", 4, 2), report_line(two)]
    log = "\n".join([*stale, *shrunk])
    assert find_report_after(log, {"rollout": [2, 3]}) is None  # before: the first report after the stale lines
    regrown = [resized_line("rollout", 2, 4), report_line(two), replaced_line("rollout", 2)]
    log = "\n".join([*stale, *shrunk, *regrown])
    assert find_report_after(log, {"rollout": [2, 3]}) is None  # rank 3 not started again yet
    log = "\n".join([*stale, *shrunk, *regrown, replaced_line("rollout", 3), report_line(two), report_line(four)])
    found = find_report_after(log, {"rollout": [1, 2, 3]})
    assert found is not None and found.to_json() == four.to_json()

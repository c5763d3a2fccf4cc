"""The Ray launcher: names shared with the operator, plan reading and resource checks (pure), then real actors
on one simulated 2-node Ray cluster with 8 fake GPUs per node, shared by the whole module."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import ray
from hypothesis import given
from hypothesis import strategies as st

from placement_core import contract, launcher
from placement_core.components import component_placement
from placement_core.contract import gpu_resource, node_resource, node_resources
from placement_core.launcher import (
    LaunchError,
    LaunchOptions,
    LaunchPlan,
    WorkerDiedError,
    check_resources,
    load_plan,
)
from placement_core.launcher.resources import absent_nodes
from placement_core.placement import Placement, placement_env
from placement_core.plan import Plan, ProcessPlan, build_plan

pytestmark = pytest.mark.ray

ENV_KEYS = ("CUDA_VISIBLE_DEVICES", "RANK", "WORLD_SIZE", "NODE_RANK", "CLUSTER_NODE_RANK", "MASTER_ADDR")


def config(placements: dict[str, str], num_nodes: int = 2, gpus: int = 8) -> dict:
    return {"cluster": {"num_nodes": num_nodes, "accelerators_per_node": gpus, "component_placement": placements}}


def plan_of(placements: dict[str, str], num_nodes: int = 2, gpus: int = 8) -> Plan:
    """The plan exactly as the operator stores it: through its JSON."""
    return Plan.from_json(build_plan(component_placement(config(placements, num_nodes, gpus))).to_json())


# The module's main plan: actor and rollout collocated (2 per GPU), reward exclusive, critic on 2 GPUs.
MAIN = {"actor,rollout": "0-1,8-9", "reward": "2,10", "critic": "3-4:0"}


# -- names and pure logic --------------------------------------------------------------------------------


def test_names_the_operator_uses() -> None:
    assert contract.NODE_LABEL == "rlplace.io/node-rank"
    assert contract.node_labels(3) == {"rlplace.io/node-rank": "3"}
    assert node_resource(3) == "rlplace_node_3"
    assert gpu_resource(3, 7) == "rlplace_gpu_3_7"
    assert node_resources(1, 2) == {"rlplace_node_1": 1000, "rlplace_gpu_1_0": 1, "rlplace_gpu_1_1": 1}
    assert contract.parse_node_resource("rlplace_node_12") == 12
    assert contract.parse_gpu_resource("rlplace_gpu_2_5") == (2, 5)
    assert contract.parse_gpu_resource("GPU") is None


def _start(tmp_path: Path, node: str, exports: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    """The worker start command as KubeRay runs it, with a `ray start` that prints what it was given."""
    ranks = tmp_path / "node-ranks"
    ranks.write_text(contract.node_ranks_text({"gpu-a": 0, "gpu-b": 1, "gpu-c": 2}))
    show = "import json, os, sys; print(json.dumps([sys.argv[1:], {k: os.environ.get(k) for k in sys.argv[1:2]}]))"
    env = {
        "PATH": os.environ["PATH"],
        contract.KUBE_NODE_ENV: node,
        "KUBERAY_GEN_RAY_START_CMD": f"{sys.executable} -c '{show}' RLPLACE_NODE_RANK RLINF_NODE_RANK",
    }
    script = contract.worker_start_command(2, exports, ranks_file=str(ranks))
    return subprocess.run(["/bin/bash", "-c", "--", script], env=env, capture_output=True, text=True, timeout=30)


def test_a_worker_pod_finds_its_node_rank_from_its_node_before_ray_starts(tmp_path: Path) -> None:
    done = _start(tmp_path, "gpu-b", ("RLINF_NODE_RANK",))
    assert done.returncode == 0, done.stderr
    args, env = json.loads(done.stdout)
    assert env == {"RLPLACE_NODE_RANK": "1"}
    assert args[2] == '--resources={"rlplace_node_1":1000,"rlplace_gpu_1_0":1,"rlplace_gpu_1_1":1}'
    assert json.loads(args[2].split("=", 1)[1]) == contract.node_resources(1, 2)
    assert args[3] == "--labels=rlplace.io/node-rank=1"
    # RLinf's variable too, where the framework needs it (the command exports both before Ray starts).
    assert "export RLPLACE_NODE_RANK=$rank RLINF_NODE_RANK=$rank" in contract.worker_start_command(
        2, ("RLINF_NODE_RANK",)
    )


def test_a_worker_pod_on_a_node_outside_the_plan_stops_saying_so(tmp_path: Path) -> None:
    done = _start(tmp_path, "cpu-z")
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.strip() == f"rlplace: node 'cpu-z' is not one of this job's nodes ({tmp_path / 'node-ranks'})"


def test_import_without_ray_connection_needs_no_ray() -> None:
    """The operator imports the names; nothing at import time may start or need Ray."""
    code = "import sys, placement_core.launcher; assert 'ray' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_collocated_gpus_are_shared_exclusive_taken_whole() -> None:
    plan = load_plan(plan_of(MAIN))
    actor0 = plan.processes("actor")[0]
    assert plan.resources(actor0) == {"rlplace_node_0": 1, "rlplace_gpu_0_0": 0.5}
    assert plan.resources(plan.processes("reward")[1]) == {"rlplace_node_1": 1, "rlplace_gpu_1_2": 1.0}
    assert plan.resources(plan.processes("critic")[0]) == {
        "rlplace_node_0": 1,
        "rlplace_gpu_0_3": 1.0,
        "rlplace_gpu_0_4": 1.0,
    }


def test_three_way_share_rounds_down_to_ray_step() -> None:
    plan = load_plan(plan_of({"a": "0:0-2"}, num_nodes=1))
    assert [plan.resources(p)["rlplace_gpu_0_0"] for p in plan.processes("a")] == [0.3333] * 3


@given(st.integers(1, launcher.RESOURCE_STEP))
def test_shares_of_one_gpu_never_exceed_it(holders: int) -> None:
    """However many processes the plan puts on a GPU, their shares (in Ray's fixed-point steps) fit in it,
    none is zero, and only a lone holder takes the whole GPU."""
    plan = LaunchPlan(Plan("hybrid", ()), {(0, 0): holders})
    steps = round(plan.share(0, 0) * launcher.RESOURCE_STEP)
    assert 1 <= steps * holders <= launcher.RESOURCE_STEP
    assert (steps == launcher.RESOURCE_STEP) == (holders == 1)


def test_the_stored_plan_is_the_placement_and_its_environment() -> None:
    """What the launcher reads back from the ConfigMap's JSON (text or gzip) is, process by process, what the
    strategies place, with the environment the placement defines; nothing is lost or re-derived on the way."""
    placement = component_placement(config(MAIN))
    stored = build_plan(placement)
    for data in (stored.to_json(), stored.to_gzip()):
        plan = load_plan(data).plan
        assert plan == stored
        for name in placement.components:
            processes = plan.component(name).processes
            placed = placement.get_placement(name)
            assert [p.placement for p in processes] == placed
            master = f"node-{placed[0].cluster_node_rank}"
            assert [dict(p.env) for p in processes] == [placement_env(q, len(placed), master) for q in placed]


def test_robot_hardware_ranks_are_not_gpus() -> None:
    placed = Placement(0, 0, 0, 0, "NV_GPU", 0, 1, ("0", "1"), True, (1,), "arm")
    assert ProcessPlan(placed, "node-0", "Franka", {}).held_gpus == ()
    assert ProcessPlan(placed, "node-0", None, {}).held_gpus == ()
    assert ProcessPlan(placed, "node-0", "Accelerator", {}).held_gpus == (1,)


@pytest.mark.parametrize(
    ("plan", "message"),
    [
        ("{", "the plan is not valid JSON"),
        ('{"mode": "hybrid"}', "the plan has no 'components' mapping"),
        (b"\x1f\x8bnot gzip", "the plan is not valid gzip"),
        ('{"mode": "x", "components": {"a": {"processes": [{"rank": 1}]}}}', "'strategy' must be a string"),
        (
            '{"mode": "x", "components": {"a": {"strategy": "flexible", "node_groups": [], "hardware_ranks": [],'
            ' "processes": [{"rank": 0, "cluster_node_rank": 0}]}}}',
            "component 'a', process 0 has no 'placement_node_rank'",
        ),
    ],
)
def test_bad_plans(plan: str | bytes, message: str) -> None:
    with pytest.raises(LaunchError, match=message):
        load_plan(plan)


def test_unknown_component_lists_known() -> None:
    with pytest.raises(LaunchError, match=r"unknown component 'actr' \(known: actor, rollout, reward, critic\)"):
        load_plan(plan_of(MAIN)).processes("actr")


def test_missing_nodes_and_gpus_are_listed_in_one_line() -> None:
    plan = load_plan(plan_of({"a": "8-9,16", "b": "all"}, num_nodes=3, gpus=16))
    total = {**node_resources(0, 8), **node_resources(1, 16)}
    with pytest.raises(LaunchError) as err:
        check_resources(plan, ["a", "b"], total)
    message = str(err.value)
    assert "\n" not in message
    assert message == (
        "the Ray cluster lacks what component 'a', component 'b' need: node rank 2; "
        "GPU 8-15 on node rank 0 (it declares 8 GPUs) (Ray nodes declare node ranks 0-1)"
    )


def test_absent_nodes_are_the_planned_ranks_no_ray_node_declares() -> None:
    plan = load_plan(plan_of({"a": "0,16"}, num_nodes=3))
    declared = {node_resource(0): 1.0, node_resource(1): 1.0}
    assert absent_nodes(plan, ["a"], declared) == [2]
    assert absent_nodes(plan, ["a"], {**declared, node_resource(2): 1.0}) == []


def test_held_resources_are_reported() -> None:
    plan = load_plan(plan_of(MAIN))
    total = {**node_resources(0, 8), **node_resources(1, 8)}
    available = {**total, gpu_resource(0, 2): 0.5}
    del available[gpu_resource(1, 2)]
    with pytest.raises(
        LaunchError,
        match=r"component 'reward' cannot start, resources held by running actors: "
        r"GPU 2 on node rank 0 needs 1, 0.5 free; GPU 2 on node rank 1 needs 1, 0 free$",
    ):
        check_resources(plan, ["reward"], total, available)
    check_resources(plan, ["actor"], total, available)


def test_launch_needs_a_connection() -> None:
    """In a process of its own: this one may already be connected to the session's simulated cluster."""
    done = subprocess.run([sys.executable, __file__, "unconnected-launch"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "LaunchError: not connected to a Ray cluster; call ray.init(address=...) first"


def test_workers_must_be_plain_classes_and_options_not_placement() -> None:
    import ray

    with pytest.raises(LaunchError, match=r"component 'reward': the worker must be a plain class, got ActorClass"):
        launcher.launch(plan_of(MAIN), "reward", ray.remote(Probe))
    with pytest.raises(LaunchError, match=r"actor_options may not set num_gpus, resources \(the plan decides them\)"):
        launcher.launch(
            plan_of(MAIN), "reward", Probe, options=LaunchOptions(actor_options={"num_gpus": 1, "resources": {}})
        )


# -- real actors -----------------------------------------------------------------------------------------


class Probe:
    """A tiny worker: says what it sees, sleeps, or dies on request."""

    def __init__(self, marker_dir: str | None = None) -> None:
        if marker_dir:
            Path(marker_dir, f"{os.getpid()}").touch()

    def report(self) -> dict:
        import ray

        context = ray.get_runtime_context()
        return {
            "env": {key: os.environ.get(key) for key in ENV_KEYS},
            "node_id": context.get_node_id(),
            "labels": context.get_node_labels(),
        }

    def shipped_code(self) -> str:
        """Where placement_core comes from with only what Ray shipped to this worker and the installed
        third-party packages on the path: what a stock Ray image without rlplace has. `python -S` skips the
        .pth files, and with them the editable install of rlplace beside the driver."""
        import sysconfig

        shipped = os.environ["PYTHONPATH"].split(os.pathsep)[0]
        code = "import placement_core.observe.verify, placement_core; print(placement_core.__file__)"
        path = os.pathsep.join([shipped, sysconfig.get_paths()["purelib"]])
        env = {"PYTHONPATH": path, "PATH": os.environ["PATH"]}
        done = subprocess.run([sys.executable, "-S", "-c", code], env=env, cwd="/", capture_output=True, text=True)
        return done.stdout.strip() or done.stderr.strip().splitlines()[-1]

    def span(self, seconds: float) -> tuple[float, float]:
        start = time.time()
        time.sleep(seconds)
        return start, time.time()

    def exit(self) -> None:
        os._exit(1)


class Broken:
    def __init__(self) -> None:
        raise RuntimeError("no model weights at /models/x")


class SeesEnvWhenLoaded:
    """Records the process's variables when a subclass is made: in a worker, when the subclass is unpickled
    (cloudpickle re-creates it), as a user module's top level runs when it is imported. Kept in the process's
    environment, since cloudpickle restores the class's own attributes from the driver's copy afterwards."""

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        seen = {key: os.environ.get(key) for key in ("CUDA_VISIBLE_DEVICES", "RANK")}
        os.environ[SEEN_AT_LOAD] = json.dumps(seen)


SEEN_AT_LOAD = "RLPLACE_TEST_SEEN_AT_CLASS_LOAD"


class EnvAtLoad(SeesEnvWhenLoaded):
    def loaded(self) -> dict:
        return json.loads(os.environ[SEEN_AT_LOAD])


os.environ.pop(SEEN_AT_LOAD)  # the driver's own, from defining EnvAtLoad above


class Kinds:
    """One method of each kind Ray treats apart, for the launcher's forwarding actor class."""

    def __init__(self, base: int = 1) -> None:
        self.base = base

    def plain(self, x: int, y: int = 2) -> int:
        return self.base + x + y

    @staticmethod
    def double(x: int) -> int:
        return 2 * x

    @classmethod
    def name(cls, x: int) -> tuple[str, int]:
        return cls.__name__, x

    def count(self, n: int):
        yield from range(n)

    @ray.method(num_returns=2)
    def pair(self) -> tuple[int, int]:
        return self.base, -self.base

    async def later(self, seconds: float) -> float:
        await asyncio.sleep(seconds)
        return seconds

    class Settings:  # a nested class is not a method
        pass

    helper = staticmethod(len)  # nor a builtin


@pytest.fixture(scope="module")
def ray_cluster(simulated_ray):
    """The session's simulated cluster (conftest.py: node ranks 0 and 1, 8 fake GPUs each, placement_core
    shipped to the workers as for a stock Ray image, so every test here runs the shipped copy), with this
    module's actor classes sent by value."""
    import ray

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module")
def main_groups(ray_cluster):
    groups = launcher.launch_all(plan_of(MAIN), dict.fromkeys(["actor", "rollout", "reward", "critic"], Probe))
    yield groups
    for group in groups.values():
        group.shutdown()


def test_every_actor_sees_its_planned_environment_on_its_node(main_groups) -> None:
    import ray

    plan = plan_of(MAIN)
    node_ids = {n["Labels"]["rlplace.io/node-rank"]: n["NodeID"] for n in ray.nodes() if n["Alive"]}
    addresses = launcher.ray_node_addresses()
    for name, group in main_groups.items():
        reports = group.run("report", timeout=60)
        processes = plan.component(name).processes
        assert len(reports) == len(processes) == group.world_size
        for process, seen in zip(processes, reports, strict=True):
            expected = {key: process.env[key] for key in ENV_KEYS}
            expected["MASTER_ADDR"] = addresses[processes[0].node_rank]
            assert seen["env"] == expected
            node = str(process.node_rank)
            assert seen["labels"]["rlplace.io/node-rank"] == node
            assert seen["node_id"] == node_ids[node]


def test_collocated_components_share_and_exclusive_hold_whole_gpus(main_groups) -> None:
    import ray

    actor = [r["env"]["CUDA_VISIBLE_DEVICES"] for r in main_groups["actor"].run("report")]
    rollout = [r["env"]["CUDA_VISIBLE_DEVICES"] for r in main_groups["rollout"].run("report")]
    assert actor == rollout == ["0", "1", "0", "1"]
    assert main_groups["critic"].run("report")[0]["env"]["CUDA_VISIBLE_DEVICES"] == "3,4"
    free = ray.available_resources()
    for rank in (0, 1):
        for gpu in (0, 1, 2):
            assert free.get(gpu_resource(rank, gpu), 0) == 0
        assert free[gpu_resource(rank, 5)] == 1


def test_constructor_mode_gives_the_same_environment(main_groups) -> None:
    plan = plan_of({"fast": "11,12"})
    opts = LaunchOptions(env_via="constructor", actor_options={"max_concurrency": 2})
    with launcher.launch(plan, "fast", Probe, options=opts) as group:
        seen = [r["env"] for r in group.run("report")]
    master = launcher.ray_node_addresses()[1]
    expected = [{**{k: p.env[k] for k in ENV_KEYS}, "MASTER_ADDR": master} for p in plan.component("fast").processes]
    assert seen == expected
    assert [s["CUDA_VISIBLE_DEVICES"] for s in seen] == ["3", "4"]


def test_exclusive_gpus_taken_fail_before_starting(main_groups, tmp_path) -> None:
    with pytest.raises(LaunchError, match=r"component 'reward' cannot start, .*GPU 2 on node rank 0 needs 1, 0 free"):
        launcher.launch(plan_of(MAIN), "reward", Probe, str(tmp_path), options=LaunchOptions(free_timeout_s=0.3))
    assert not list(tmp_path.iterdir())


def test_ray_itself_never_doubles_up_an_exclusive_gpu(main_groups) -> None:
    """Without the free check the actors are queued by Ray, never started on the held GPU, and killed."""
    other = plan_of({"intruder": "2"})
    with pytest.raises(LaunchError, match=r"^component 'intruder' rank 0 did not start within 2 s"):
        launcher.launch(other, "intruder", Probe, options=LaunchOptions(free_timeout_s=None, ready_timeout_s=2))


def test_collocated_components_launched_one_by_one_fit_beside_each_other(main_groups) -> None:
    plan = plan_of({"p,q": "7"})
    with launcher.launch(plan, "p", Probe), launcher.launch(plan, "q", Probe) as q:
        assert q.run("report")[0]["env"]["CUDA_VISIBLE_DEVICES"] == "7"
        with pytest.raises(LaunchError, match=r"GPU 7 on node rank 0 needs 1, 0 free"):
            launcher.launch(plan_of({"r": "7"}), "r", Probe, options=LaunchOptions(free_timeout_s=0.2))


def test_non_blocking_calls_of_two_components_overlap(main_groups) -> None:
    actor = main_groups["actor"].call("span", 1.0)
    reward = main_groups["reward"].call("span", 1.0)
    assert not actor.done()
    spans = actor.get(timeout=30) + reward.get(timeout=30)
    assert max(start for start, _ in spans) < min(end for _, end in spans)


def test_missing_node_fails_before_any_actor_starts(ray_cluster, tmp_path) -> None:
    plan = plan_of({"a": "0,16"}, num_nodes=3)
    started = time.monotonic()
    with pytest.raises(LaunchError, match=r"^the Ray cluster lacks what component 'a' need: node rank 2 \("):
        launcher.launch(plan, "a", Probe, str(tmp_path), options=LaunchOptions(join_timeout_s=1.0))
    assert time.monotonic() - started >= 1.0  # it waited for node rank 2 to join before saying so
    assert not list(tmp_path.iterdir())


def test_more_gpus_than_the_node_has_fails_before_any_actor_starts(ray_cluster, tmp_path) -> None:
    plan = plan_of({"big": "6-9"}, gpus=16)
    with pytest.raises(LaunchError, match=r"GPU 8-9 on node rank 0 \(it declares 8 GPUs\)"):
        launcher.launch(plan, "big", Probe, str(tmp_path))
    assert not list(tmp_path.iterdir())


def test_a_dead_actor_is_reported_with_component_and_rank(ray_cluster) -> None:
    with launcher.launch(plan_of({"victim": "5,13"}), "victim", Probe) as group:
        group.actors[1].exit.remote()
        with pytest.raises(
            WorkerDiedError, match=r"^component 'victim' rank 1 \(node rank 1\) died during 'report'"
        ) as err:
            group.run("report", timeout=30)
        assert (err.value.component, err.value.rank) == ("victim", 1)


def test_a_constructor_failure_names_component_and_rank(ray_cluster) -> None:
    with pytest.raises(
        LaunchError, match=r"component 'broken' rank 0 failed to start: .*no model weights at /models/x"
    ):
        launcher.launch(plan_of({"broken": "6"}), "broken", Broken)


def test_reference_driver_verifies_overlaps_and_prints_every_process(ray_cluster, tmp_path, capsys) -> None:
    """The examples' driver (placement_core.launcher.demo) on the plan file: the report line the operator reads,
    the concurrent actor / rollout -> reward calls, and one table row per process as it saw itself."""
    from placement_core.launcher import demo
    from placement_core.observe.verify import find_report

    plan = plan_of({"actor": "14", "rollout": "15", "reward": "6"})
    (tmp_path / contract.PLAN_KEY).write_text(plan.to_json())
    assert demo.run(launcher.read_plan(tmp_path), ["actor", "rollout", "reward"]) == 0
    out = capsys.readouterr().out
    report = find_report(out)
    assert report is not None and report.ok
    assert [(c.component, c.rank, c.node_name) for c in report.checks] == [
        (c.name, p.rank, p.node_name) for c, p in plan.processes()
    ]
    overlap = float(out.split("concurrently: overlap ")[1].split(" s")[0])
    assert overlap > 0.2, out
    rows = [line.split() for line in out.splitlines() if line.startswith(("actor ", "rollout ", "reward "))]
    assert [(r[0], r[1], r[5], r[-1]) for r in rows] == [
        ("actor", "0", "6", "ok"),
        ("rollout", "0", "7", "ok"),
        ("reward", "0", "6", "ok"),
    ]
    assert "LOCAL_HARDWARE_RANKS  PID  " in out
    pids = [int(r[7]) for r in rows]  # each process's own, none the driver's
    assert len(set(pids)) == 3 and os.getpid() not in pids, out


def test_reference_driver_fails_a_tampered_plan_naming_the_rank(ray_cluster, tmp_path, capsys) -> None:
    from placement_core.launcher import demo
    from placement_core.observe.verify import find_report

    plan = plan_of({"actor": "14", "rollout": "15"})
    (tmp_path / "plan.json").write_text(plan.to_json())
    code = demo.run(load_plan(demo.tamper(plan, "rollout:0:RANK=3")), ["actor", "rollout"])
    captured = capsys.readouterr()
    assert code == 1
    assert "error: binding check failed: component 'rollout' rank 0 on node 'node-1': RANK='3', planned '0'" in (
        captured.err
    )
    report = find_report(captured.out)
    assert report is not None and report.verified() == {"actor": 1, "rollout": 0}
    assert demo.main(["--plan", str(tmp_path / "plan.json"), "--tamper", "rollout:4:RANK=3"]) == 2
    assert "error: --tamper: component 'rollout' has ranks 0-0, got 4" in capsys.readouterr().err


def test_read_plan_reads_either_configmap_key(tmp_path) -> None:
    """The operator stores a large plan gzipped under plan.json.gz; the launcher reads whichever is mounted."""
    config = {"cluster": {"num_nodes": 1, "accelerators_per_node": 2, "component_placement": {"actor": "0-1"}}}
    plan = build_plan(component_placement(config))
    assert contract.plan_payload(plan) == (contract.PLAN_KEY, plan.to_json())
    large = build_plan(component_placement({"cluster": {"num_nodes": 200, "component_placement": {"a": "all"}}}))
    key, payload = contract.plan_payload(large)
    assert (key, type(payload)) == (contract.PLAN_GZIP_KEY, bytes)
    assert len(large.to_json()) > contract.MAX_TEXT_PLAN_BYTES > len(payload)
    assert Plan.from_json(payload) == large
    (tmp_path / contract.PLAN_GZIP_KEY).write_bytes(plan.to_gzip())
    assert launcher.read_plan(tmp_path).plan == plan
    with pytest.raises(LaunchError, match=r"no plan in '.*empty' \(expected plan.json or plan.json.gz"):
        launcher.read_plan(tmp_path / "empty")


# -- binding verification inside real actors -------------------------------------------------------------


def tampered(plan: Plan, component: str, rank: int, **env: str) -> Plan:
    """`plan` with one process's environment changed, as a wrong value injected into the stored plan."""
    comps = []
    for c in plan.components:
        procs = tuple(
            dataclasses.replace(p, env={**p.env, **env}) if (c.name, p.rank) == (component, rank) else p
            for p in c.processes
        )
        comps.append(dataclasses.replace(c, processes=procs))
    return dataclasses.replace(plan, components=tuple(comps))


def test_every_launched_process_is_verified(main_groups) -> None:
    report = launcher.binding_report(main_groups)
    assert report.ok
    assert report.verified() == {"actor": 4, "rollout": 4, "reward": 2, "critic": 1}
    assert [(c.component, c.rank, c.node_name) for c in report.checks[:2]] == [
        ("actor", 0, "node-0"),
        ("actor", 1, "node-0"),
    ]


@pytest.mark.parametrize("env_via", ["runtime_env", "constructor"])
def test_a_tampered_plan_entry_fails_the_launch_naming_the_rank(ray_cluster, tmp_path, env_via) -> None:
    plan = tampered(plan_of({"actor": "5-6", "reward": "13"}), "actor", 1, CUDA_VISIBLE_DEVICES="0")
    with pytest.raises(launcher.BindingError) as err:
        launcher.launch_all(
            plan, {"actor": Probe, "reward": Probe}, args=(str(tmp_path),), options=LaunchOptions(env_via=env_via)
        )
    assert str(err.value) == (
        "binding check failed: component 'actor' rank 1 on node 'node-0': CUDA_VISIBLE_DEVICES='0', planned '6' "
        "(verified actor 1/2, reward 1/1)"
    )
    assert (err.value.component, err.value.rank) == ("actor", 1)
    # The misbound process never ran the worker's constructor; the two good ones did, and all were stopped.
    assert len(list(tmp_path.iterdir())) == 2


def test_verification_can_be_turned_off(ray_cluster) -> None:
    plan = tampered(plan_of({"loose": "5"}), "loose", 0, CUDA_VISIBLE_DEVICES="0")
    with launcher.launch(plan, "loose", Probe, options=LaunchOptions(verify=False)) as group:
        assert group.run("report")[0]["env"]["CUDA_VISIBLE_DEVICES"] == "0"
        assert group.checks == [None]


def test_workers_get_placement_core_from_the_driver(main_groups) -> None:
    """`connect(ship_code=True)` sends placement_core in the job's runtime_env (inherited by the launcher's
    actors, which set their own env_vars): each worker's path starts with Ray's unpacked copy, and that copy
    alone (no site-packages) imports the launcher and its verification."""
    paths = main_groups["reward"].run("shipped_code")
    assert all(
        p.endswith("/placement_core/__init__.py") and "/runtime_resources/py_modules_files/" in p for p in paths
    ), paths


# -- the environment is in place before the worker's code runs ------------------------------------------


@pytest.mark.parametrize("env_via", ["runtime_env", "constructor"])
def test_the_worker_class_is_loaded_with_the_planned_environment(ray_cluster, env_via) -> None:
    """The worker's class reaches the process only after the variables are set: code that runs when it is
    loaded (a module's top level, a class body, __init_subclass__) sees the planned values, in both modes."""
    with launcher.launch(plan_of({"early": "5,13"}), "early", EnvAtLoad, options=LaunchOptions(env_via=env_via)) as g:
        assert g.run("loaded") == [
            {"CUDA_VISIBLE_DEVICES": "5", "RANK": "0"},
            {"CUDA_VISIBLE_DEVICES": "5", "RANK": "1"},
        ]


def test_the_default_sets_the_environment_in_the_actor_not_in_a_runtime_env(ray_cluster) -> None:
    """The default ships no per-process runtime_env (one worker pool for all actors, the fast start)."""
    assert LaunchOptions().env_via == "constructor"
    with launcher.launch(plan_of({"pooled": "5"}), "pooled", Probe) as group:
        runtime_env = ray.get(group.actors[0].__ray_call__.remote(lambda self: ray.get_runtime_context().runtime_env))
    assert "env_vars" not in runtime_env
    assert "py_modules" in runtime_env  # the job's, inherited


def test_the_actor_class_holds_no_reference_to_the_worker_class() -> None:
    """What Ray pickles and loads first in the worker: forwarders named like the worker's methods, nothing that
    would import the worker's module (its pickle names no test module and no worker class)."""
    from placement_core.launcher.actors import CHECK_METHOD, _host

    host = _host(Kinds)
    methods = {name for name, value in vars(host).items() if callable(value) and not name.startswith("__")}
    assert methods == {"plain", "double", "name", "count", "pair", "later", CHECK_METHOD}
    pickled = ray.cloudpickle.dumps(host)
    assert b"test_launcher" not in pickled and b"Settings" not in pickled


def test_every_kind_of_worker_method_is_forwarded(ray_cluster) -> None:
    """The actor Ray runs forwards each method of the worker with its kind and Ray options: plain, static and
    class methods, generators (streamed), num_returns, async (an async actor); argument errors at the call."""
    with launcher.launch(plan_of({"kinds": "6"}), "kinds", Kinds, 10) as group:
        assert group.run("plain", 1) == [13]
        assert group.run("plain", 1, y=0) == [11]
        assert group.run("double", 4) == [8]
        assert group.run("name", 3) == [("Kinds", 3)]
        actor = group.actors[0]
        assert [ray.get(ref) for ref in actor.count.remote(3)] == [0, 1, 2]
        assert ray.get(actor.pair.remote()) == [10, -10]
        assert group.run("later", 0.1) == [0.1]
        with pytest.raises(TypeError, match="missing a required argument: 'x'"):
            group.call("plain")


def unconnected_launch() -> None:
    """The child process of test_launch_needs_a_connection: a driver that never connected to Ray launches."""
    try:
        launcher.launch(plan_of(MAIN), "reward", Probe)
    except LaunchError as err:
        print(f"LaunchError: {err}")


if __name__ == "__main__" and sys.argv[1:] == ["unconnected-launch"]:
    unconnected_launch()

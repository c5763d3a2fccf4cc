"""Replacing lost replicas (issue 42, the launcher and driver half): the membership bookkeeping (pure), then real
actors on the session's simulated cluster (a killed replica left out and started again, the driver that did not
opt in and the RestartJob component still failing, the reference driver's steps through a rollout kill, and a
node of it removed and added again); then a group resized in place (issue 43), alone and under the reference
driver following its mounted plan."""

from __future__ import annotations

import dataclasses
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from placement_core import contract, launcher
from placement_core.components import component_placement
from placement_core.launcher import LaunchOptions, WorkerDiedError, WorkerGroup, replacing
from placement_core.launcher.membership import Ledger, Membership
from placement_core.observe.progress import IterationReport, LogReporter, find_progress
from placement_core.observe.verify import find_report
from placement_core.plan import OnLoss, Plan, build_plan

#: The longest a test waits for a lost rank to be started again (it takes a few seconds on a loaded machine).
BACK_WITHIN_S = 90.0


def plan_of(placements: dict[str, str], replace: tuple[str, ...] = (), num_nodes: int = 2, gpus: int = 8) -> Plan:
    """The plan as the operator stores it (through its JSON), with the `replace` components' OnLoss Replace."""
    config = {"cluster": {"num_nodes": num_nodes, "accelerators_per_node": gpus, "component_placement": placements}}
    plan = build_plan(component_placement(config)).with_on_loss(dict.fromkeys(replace, OnLoss.REPLACE))
    return Plan.from_json(plan.to_json())


# -- membership (pure) -------------------------------------------------------------------------------------


def test_the_ledger_hands_each_joined_rank_once_and_says_every_change() -> None:
    ledger = Ledger(3)
    assert ledger.snapshot() == Membership(0, (0, 1, 2), ())
    assert not ledger.wait_for_change(0)
    assert ledger.lose(1) and not ledger.lose(1)  # two calls that saw one death: one change
    assert ledger.snapshot() == Membership(1, (0, 2), (1,))
    assert ledger.wait_for_change(0) and not ledger.wait_for_change(0.01)  # an event: seen once
    assert ledger.to_replace() == [1]
    woke: list[bool] = []
    waiter = threading.Thread(target=lambda: woke.append(ledger.wait_for_change(30)))
    waiter.start()
    time.sleep(0.05)
    assert ledger.join(1) >= 0.05
    waiter.join(5)
    assert woke == [True]
    assert ledger.snapshot() == Membership(2, (0, 1, 2), ())
    assert ledger.take_joined() == [1] and ledger.take_joined() == []
    # A rank that joined and died again before the driver took it is not handed out.
    ledger.lose(2)
    ledger.join(2)
    ledger.lose(2)
    assert ledger.take_joined() == [] and ledger.snapshot().lost == (2,)
    ledger.give_up(2)  # its binding check failed: lost for good
    assert ledger.to_replace() == [] and ledger.snapshot().lost == (2,)


# -- real actors on the session's cluster ------------------------------------------------------------------


class Replica:
    """A tiny worker: what it sees, and the weights it was given."""

    def where(self) -> dict[str, Any]:
        import ray

        labels = ray.get_runtime_context().get_node_labels()
        env = {key: os.environ.get(key) for key in ("RANK", "CUDA_VISIBLE_DEVICES", "MASTER_ADDR", "ZONE")}
        return {**env, "pid": os.getpid(), "node_rank": labels.get(contract.NODE_LABEL)}


@pytest.fixture(scope="module")
def ray_cluster(simulated_ray: Any) -> Iterator[None]:
    """The session's simulated cluster (node ranks 0 and 1, 8 fake GPUs each), with this module's workers sent
    by value. Nothing here kills a node of it: that test has a cluster of its own."""
    import ray

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    ray.cloudpickle.unregister_pickle_by_value(sys.modules[__name__])


def back(group: WorkerGroup, rank: int, within_s: float = BACK_WITHIN_S) -> float:
    """Wait until `rank` is live again; the seconds it took."""
    started = time.monotonic()
    while rank not in group.live_ranks:
        assert time.monotonic() - started < within_s, f"rank {rank} not back: {group.membership}"
        group.wait_for_change(1.0)
    return time.monotonic() - started


def kill(actor: Any) -> None:
    """`ray.kill`, then wait until the actor is dead: the kill is asynchronous, and a call made just after it may
    still run."""
    import ray

    ray.kill(actor, no_restart=True)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            ray.get(actor.__ray_ready__.remote(), timeout=30)
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.05)
    raise AssertionError("the killed actor still answers")


def with_env(plan: Plan, component: str, rank: int, **env: str) -> Plan:
    """`plan` with variables of one process changed, as the operator rewrites the mounted plan."""
    target = plan.component(component)
    processes = list(target.processes)
    processes[rank] = dataclasses.replace(processes[rank], env={**processes[rank].env, **env})
    changed = dataclasses.replace(target, processes=tuple(processes))
    return dataclasses.replace(plan, components=tuple(changed if c.name == component else c for c in plan.components))


@pytest.mark.ray
def test_a_killed_replica_is_left_out_then_started_again_on_its_node(
    ray_cluster: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A replaceable group whose actor is killed: the call's live answers come from the other rank, the lost rank
    is started again on its node by itself (from the plan as the operator rewrote it meanwhile, as the node's pod
    mounts it), verified, handed to the driver once, and the driver's log gets its line and a binding report that
    covers it."""
    plan = plan_of({"rollout": "6,14"}, replace=("rollout",))
    driver_mount, pod_mount = tmp_path / "driver", tmp_path / "pod"
    driver_mount.mkdir()
    (driver_mount / contract.PLAN_KEY).write_text(plan.to_json())
    monkeypatch.setenv(contract.PLAN_DIR_ENV, str(driver_mount))
    monkeypatch.setattr(replacing, "POD_PLAN_DIR", str(pod_mount))
    groups = launcher.launch_all(launcher.read_plan(), {"rollout": Replica}, options=LaunchOptions(replace_lost=True))
    group = groups["rollout"]
    try:
        assert group.replaceable and group.membership == Membership(0, (0, 1), ())
        before = group.call("where").get_live(timeout=60)
        kill(group.actors[1])
        # The operator rewrote the plan: the node's pod mounts it as it is now, the driver's copy lags behind.
        (driver_mount / contract.PLAN_KEY).write_text(with_env(plan, "rollout", 1, ZONE="driver").to_json())
        pod_mount.mkdir()
        (pod_mount / contract.PLAN_KEY).write_text(with_env(plan, "rollout", 1, ZONE="pod").to_json())
        answers = group.call("where").get_live(timeout=60)
        assert answers == {0: before[0]}
        assert group.membership == Membership(1, (0,), (1,))
        back(group, 1)
        assert group.membership == Membership(2, (0, 1), ())
        assert group.take_joined() == [1]
        assert group.take_joined() == []
        seen = group.call("where").get_live(timeout=60)
        assert seen[1]["pid"] != before[1]["pid"]
        assert {k: seen[1][k] for k in ("RANK", "CUDA_VISIBLE_DEVICES", "MASTER_ADDR", "node_rank", "ZONE")} == {
            **{k: before[1][k] for k in ("RANK", "CUDA_VISIBLE_DEVICES", "MASTER_ADDR", "node_rank")},
            "ZONE": "pod",
        }
        check = group.checks[1]
        assert check is not None and check.ok and check.rank == 1
        out = capsys.readouterr().out
        assert "lost: component 'rollout' rank 1 (node rank 1) died during 'where' (ActorDiedError)" in out
        assert "replaced: component 'rollout' rank 1 on node rank 1 after " in out
        report = find_report(out)
        assert report is not None and report.ok
        assert [(c.component, c.rank) for c in report.checks] == [("rollout", 0), ("rollout", 1)]
    finally:
        group.shutdown()


@pytest.mark.ray
def test_a_replaced_rank_that_fails_its_binding_check_stays_lost(
    ray_cluster: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The mounted plan now gives the lost rank a wrong GPU (read where the driver runs: the node's pod mounts
    none): its new process fails its check, is not used, and the driver's log names it once; the rank is not
    tried again."""
    plan = plan_of({"rollout": "5,13"}, replace=("rollout",))
    (tmp_path / contract.PLAN_KEY).write_text(plan.to_json())
    monkeypatch.setenv(contract.PLAN_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(replacing, "POD_PLAN_DIR", str(tmp_path / "no-pod-mount"))
    with launcher.launch(launcher.read_plan(), "rollout", Replica, options=LaunchOptions(replace_lost=True)) as group:
        (tmp_path / contract.PLAN_KEY).write_text(with_env(plan, "rollout", 0, CUDA_VISIBLE_DEVICES="0").to_json())
        kill(group.actors[0])
        assert list(group.call("where").get_live(timeout=60)) == [1]
        deadline = time.monotonic() + BACK_WITHIN_S
        out = ""
        while "binding check failed" not in out:
            assert time.monotonic() < deadline, out
            time.sleep(0.5)
            assert group.take_joined() == []
            out += capsys.readouterr().out
        assert (
            "binding check failed: component 'rollout' rank 0 on node 'node-0': CUDA_VISIBLE_DEVICES='0', "
            "planned '5' (verified rollout 0/1)"
        ) in out
        time.sleep(1.5)  # three more looks of the replacement thread: it does not try again
        assert group.membership == Membership(1, (1,), (0,))
        assert group.take_joined() == []
        assert "binding check failed" not in capsys.readouterr().out


@pytest.mark.ray
def test_a_driver_that_did_not_opt_in_and_a_restart_job_component_still_fail(ray_cluster: None) -> None:
    """Without replace_lost a Replace component's dead rank raises WorkerDiedError, as before; with it, a
    RestartJob component's does (the job restarts)."""

    plan = plan_of({"keep": "7", "swap": "15"}, replace=("swap",))
    groups = launcher.launch_all(plan, {"keep": Replica, "swap": Replica}, options=LaunchOptions(replace_lost=True))
    try:
        assert not groups["keep"].replaceable and groups["swap"].replaceable
        kill(groups["keep"].actors[0])
        with pytest.raises(WorkerDiedError, match=r"^component 'keep' rank 0 \(node rank 0\) died during 'where'"):
            groups["keep"].call("where").get_live(timeout=60)
        with pytest.raises(WorkerDiedError, match=r"^component 'keep' rank 0 \(node rank 0\) died during 'where'"):
            groups["keep"].run("where", timeout=60)
        assert groups["keep"].live_ranks == (0,) and groups["keep"].take_joined() == []
    finally:
        for group in groups.values():
            group.shutdown()
    with launcher.launch(plan, "swap", Replica) as swap:
        assert not swap.replaceable
        kill(swap.actors[0])
        with pytest.raises(WorkerDiedError, match=r"^component 'swap' rank 0 \(node rank 1\) died during 'where'"):
            swap.call("where").get_live(timeout=60)
        with pytest.raises(WorkerDiedError, match=r"^component 'swap' rank 0 \(node rank 1\) died during 'where'"):
            swap.run("where", timeout=60)


class Hooks(LogReporter):
    """The log reporter, running a test's action after a step's report (in the driver's thread)."""

    def __init__(self, actions: dict[int, Callable[[], None]]) -> None:
        super().__init__()
        self.actions = actions
        self.reports: list[IterationReport] = []

    def report(self, report: IterationReport) -> None:
        super().report(report)
        self.reports.append(report)
        action = self.actions.get(report.iteration)
        if action is not None:
            action()


def pids_of(groups: dict[str, WorkerGroup]) -> dict[tuple[str, int], Any]:
    """(component, rank) -> the PID of each rank's process, as the demo worker says it."""
    return {(name, rank): seen["PID"] for name, g in groups.items() for rank, seen in enumerate(g.run("where"))}


def step_lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith("step ")]


def steps_once_in_order(out: str, total: int) -> list[str]:
    """The step lines of attempt 1 in `out`, checked to be steps 1..total, each once and in order."""
    lines = step_lines(out)
    assert [line.split(":")[0] for line in lines] == [f"step {i}/{total} (attempt 1)" for i in range(1, total + 1)]
    return lines


def process_tables(out: str) -> list[list[dict[str, str]]]:
    """The reference driver's process tables in `out`, in order: each a row per process, by column name."""
    tables: list[list[dict[str, str]]] = []
    header: list[str] = []
    for line in out.splitlines():
        cells = line.split()
        if cells[:2] == ["component", "RANK"]:
            header = cells
            tables.append([])
        elif header and len(cells) == len(header) and cells[-1] == "ok":
            tables[-1].append(dict(zip(header, cells, strict=True)))
        else:
            header = []
    return tables


@pytest.mark.ray
def test_the_reference_driver_goes_on_through_a_rollout_kill(
    ray_cluster: None, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """run_steps with a rollout rank killed during step 3: every step is reported once and in order, the steps
    go on with one replica until the rank is back, every sample of every step is scored once (the checkpointed
    score), the replaced rank has the weights of the last step, and the process table printed again once the
    driver took it shows every live process, only that rank's PID new."""
    import ray

    from placement_core.launcher import steps
    from placement_core.launcher.checkpoint import CheckpointStore
    from placement_core.launcher.demo_worker import Worker

    plan = launcher.load_plan(plan_of({"actor": "0", "rollout": "1,9", "reward": "2"}, replace=("rollout", "reward")))
    groups = launcher.launch_all(
        plan, dict.fromkeys(["actor", "rollout", "reward"], Worker), options=LaunchOptions(replace_lost=True)
    )
    rollout = groups["rollout"]

    killer = threading.Timer(0.15, lambda: ray.kill(rollout.actors[1]))

    def wait_back() -> None:
        back(rollout, 1)

    # The kill lands during step 3 (its generation takes 0.3 s at least), at the latest by step 3's report; the
    # driver sees it in step 3 or, were it later than step 3's last call, in step 4; the rank is back by step 5.
    hooks = Hooks({2: killer.start, 3: killer.join, 4: wait_back})
    store = CheckpointStore(tmp_path, attempt_number=1)
    try:
        before = pids_of(groups)
        options = steps.StepOptions(steps=6, checkpoint_every=6, store=store, reporter=hooks)
        assert steps.run_steps(groups, plan, options) == 6
        weights = rollout.run("weights", timeout=60)
    finally:
        for group in groups.values():
            group.shutdown()
    out = capsys.readouterr().out
    lines = steps_once_in_order(out, 6)
    assert [r.iteration for r in find_progress(out)] == [r.iteration for r in hooks.reports] == list(range(1, 7))
    assert lines[0].endswith("; rollout 2/2 live, reward 1/1 live")
    assert any(line.endswith("; rollout 1/2 live, reward 1/1 live") for line in lines[2:4]), out
    assert lines[-1].endswith("; rollout 2/2 live, reward 1/1 live")
    assert "replaced: component 'rollout' rank 1 on node rank 1 after " in out
    # The process table again once the driver took the rank: every live process, only the replaced rank's new.
    (table,) = process_tables(out)
    after = {(row["component"], int(row["RANK"])): row["PID"] for row in table}
    assert after.keys() == before.keys() and {key for key in before if after[key] != before[key]} == {("rollout", 1)}
    assert out.index("replaced: ") < out.index("component  RANK"), out
    # 4 samples a step (2 per reward process per rollout process), scored 0.0 + 0.1 + 0.2 + 0.3, each once.
    assert store.latest().state["total_score"] == pytest.approx(6 * 0.6)
    assert weights == [5, 5]  # the weights step 6 generated with, the replaced rank's too
    report = find_report(out)
    assert report is not None and report.ok and report.totals() == {"actor": 1, "rollout": 2, "reward": 1}


@pytest.mark.ray
def test_the_reference_driver_still_fails_when_a_restart_job_rank_dies(ray_cluster: None) -> None:
    """The reference driver opts in, but its rollout here is RestartJob: a dead rollout rank fails the step with
    the WorkerDiedError line the operator reads, as before."""
    from placement_core.launcher import steps
    from placement_core.launcher.demo_worker import Worker

    plan = launcher.load_plan(plan_of({"actor": "3", "rollout": "4"}))
    groups = launcher.launch_all(
        plan, dict.fromkeys(["actor", "rollout"], Worker), options=LaunchOptions(replace_lost=True)
    )
    try:
        assert not any(group.replaceable for group in groups.values())
        kill(groups["rollout"].actors[0])
        with pytest.raises(WorkerDiedError, match=r"^component 'rollout' rank 0 \(node rank 0\) died during 'sync_"):
            steps.run_steps(groups, plan, steps.StepOptions(steps=2))
    finally:
        for group in groups.values():
            group.shutdown()


# -- a node removed and added again: a cluster of its own ---------------------------------------------------


@pytest.mark.ray
def test_a_node_removed_and_added_again_loses_and_gets_back_its_replicas(
    simulated_ray: Any, ray_cluster: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """The session's node rank 1 (two rollout ranks) removed after the reference driver's step 2 and added again
    as it was (its node rank, its 8 GPUs) after step 4: the steps go on with one rollout replica, both ranks are
    started again on the new node, and every step is reported once, in order. Actor on node 0, rollout ranks 0 on
    node 0 and 1-2 on node 1 (Replace); step 5's report waits until both ranks are back."""
    from placement_core.launcher import steps
    from placement_core.launcher.demo_worker import Worker
    from placement_core.launcher.simulated import NODE_CPUS

    cluster = simulated_ray
    plan = launcher.load_plan(plan_of({"actor": "0", "rollout": "1,2-3"}, replace=("rollout",), gpus=2))
    groups = launcher.launch_all(
        plan, dict.fromkeys(["actor", "rollout"], Worker), options=LaunchOptions(replace_lost=True)
    )
    (node,) = cluster.worker_nodes
    rollout = groups["rollout"]

    def add_again() -> None:
        cluster.add_node(
            num_cpus=NODE_CPUS, num_gpus=8, resources=contract.node_resources(1, 8), labels=contract.node_labels(1)
        )

    def wait_back() -> None:
        for rank in (1, 2):
            back(rollout, rank)

    hooks = Hooks({2: lambda: cluster.remove_node(node), 4: add_again, 5: wait_back})
    try:
        steps.run_steps(groups, plan, steps.StepOptions(steps=7, reporter=hooks))
        weights = rollout.run("weights", timeout=60)
        membership = rollout.membership
    finally:
        for group in groups.values():
            group.shutdown()
    out = capsys.readouterr().out
    lines = step_lines(out)
    assert [line.split(":")[0] for line in lines] == [f"step {i}/7 (attempt 1)" for i in range(1, 8)], out
    assert [r.iteration for r in find_progress(out)] == list(range(1, 8))
    assert lines[0].endswith("; rollout 3/3 live")
    assert any(line.endswith("; rollout 1/3 live") for line in lines[2:5]), out
    assert lines[-1].endswith("; rollout 3/3 live"), out
    for rank in (1, 2):
        assert f"replaced: component 'rollout' rank {rank} on node rank 1 after " in out
    report = find_report(out)
    assert report is not None and report.ok and report.totals() == {"actor": 1, "rollout": 3}
    assert (weights, list(membership.live), list(membership.lost)) == ([6, 6, 6], [0, 1, 2], [])


# -- a group resized in place (issue 43: the operator changed a component's replicas) -------------------------


def test_the_ledger_starts_the_ranks_a_resize_adds_and_forgets_those_it_removes() -> None:
    ledger = Ledger(2)
    assert ledger.resize(4) == (range(2, 4), range(4, 4))
    assert ledger.snapshot() == Membership(1, (0, 1), (), (2, 3))
    assert ledger.to_replace() == [2, 3] and not ledger.is_live(2) and ledger.is_new(2)
    assert not ledger.lose(3)  # a starting rank never ran: it cannot be lost
    ledger.join(2)
    assert ledger.snapshot() == Membership(2, (0, 1, 2), (), (3,)) and ledger.take_joined() == [2]
    ledger.lose(1)
    ledger.join(3)
    # Down to one: the lost, starting and joined ranks beyond it are gone from every list.
    assert ledger.resize(1) == (range(2, 2), range(1, 4))
    assert ledger.snapshot() == Membership(5, (0,), (), ()) and ledger.take_joined() == [] == ledger.to_replace()
    assert ledger.resize(1) == (range(1, 1), range(1, 1)) and ledger.snapshot().version == 5  # no change


@pytest.mark.ray
def test_a_group_grows_and_shrinks_in_place_its_kept_rank_untouched(
    ray_cluster: None, capsys: pytest.CaptureFixture[str]
) -> None:
    """rollout 1 -> 3 -> 1 replicas from plans the grammar resized (`4` -> `4-6` -> `4`): the new ranks start on
    their planned GPUs with the new WORLD_SIZE, verified, handed to the driver once; the kept rank keeps its
    process; shrinking kills the removed ranks and gives their GPUs back to Ray; a plan that moves a kept rank, and
    a group that is not replaceable, are refused and change nothing."""
    import ray

    one, three = (launcher.load_plan(plan_of({"rollout": p}, replace=("rollout",))) for p in ("4", "4-6"))
    group = launcher.launch(one, "rollout", Replica, options=LaunchOptions(replace_lost=True))
    try:
        first = group.call("where").get_live(timeout=60)[0]
        assert group.resize(three) == (range(1, 3), range(3, 3))
        assert group.membership == Membership(1, (0,), (), (1, 2))
        back(group, 1), back(group, 2)
        assert sorted(group.take_joined()) == [1, 2] and group.take_joined() == []
        seen = group.call("where").get_live(timeout=60)
        assert seen[0] == first  # the same process
        assert [(seen[r]["RANK"], seen[r]["CUDA_VISIBLE_DEVICES"]) for r in (1, 2)] == [("1", "5"), ("2", "6")]
        assert all(group.checks[r] is not None and group.checks[r].ok for r in (0, 1, 2))
        removed = [group.actors[1], group.actors[2]]
        moved = launcher.load_plan(plan_of({"rollout": "7-8"}, replace=("rollout",)))
        with pytest.raises(launcher.LaunchError, match="the resized plan moves rank 0"):
            group.resize(moved)
        assert group.resize(one) == (range(1, 1), range(1, 3))
        assert group.membership.live == (0,) and len(group.processes) == 1
        for actor in removed:  # killed: the kill is asynchronous, so a call just after it may still be answered
            deadline = time.monotonic() + 60
            while True:
                try:
                    ray.get(actor.__ray_ready__.remote(), timeout=30)
                except ray.exceptions.RayActorError:
                    break
                assert time.monotonic() < deadline, "a removed rank's actor still answers"
                time.sleep(0.1)
        deadline = time.monotonic() + 30  # what the removed ranks held comes back to Ray
        while ray.available_resources().get(contract.gpu_resource(0, 5), 0) < 1:
            assert time.monotonic() < deadline, ray.available_resources()
            time.sleep(0.2)
        out = capsys.readouterr().out
        assert "resized: component 'rollout' 1 -> 3 replicas (ranks 1-2 starting)" in out
        assert "started: component 'rollout' rank 2 on node rank 0 after " in out
        assert "resized: component 'rollout' 3 -> 1 replicas (ranks 1-2 stopped)" in out
    finally:
        group.shutdown()
    fixed = launcher.launch(one, "rollout", Replica)
    try:
        with pytest.raises(launcher.LaunchError, match="only a replaceable group"):
            fixed.resize(three)
    finally:
        fixed.shutdown()


@pytest.mark.ray
def test_the_reference_driver_follows_the_mounted_plan_as_the_operator_resizes_it(
    ray_cluster: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """run_steps launched from the mounted plan: after step 2 the operator's rewritten plan gives rollout a second
    replica (on the other node), after step 5 takes it away again. Every step runs once and in order, no rank is
    lost, the new rank starts verified and gets the step's weights before it generates, the kept processes keep
    their PIDs, and the last binding report covers what runs at the end."""
    from placement_core.launcher import steps
    from placement_core.launcher.demo_worker import Worker

    placements = {"actor": "0", "rollout": "1", "reward": "2"}
    small = plan_of(placements, replace=("rollout",))
    grown = plan_of({**placements, "rollout": "1,9"}, replace=("rollout",))
    (tmp_path / contract.PLAN_KEY).write_text(small.to_json())
    monkeypatch.setenv(contract.PLAN_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(replacing, "POD_PLAN_DIR", str(tmp_path / "no-pod-mount"))
    plan = launcher.read_plan()
    groups = launcher.launch_all(
        plan, dict.fromkeys(["actor", "rollout", "reward"], Worker), options=LaunchOptions(replace_lost=True)
    )
    rollout = groups["rollout"]

    def rewrite(new: Plan) -> None:  # as the kubelet does: a new file swapped in
        staged = tmp_path / "staged"
        staged.write_text(new.to_json())
        staged.replace(tmp_path / contract.PLAN_KEY)

    hooks = Hooks({2: lambda: rewrite(grown), 3: lambda: back(rollout, 1), 5: lambda: rewrite(small)})
    try:
        before = pids_of(groups)
        assert steps.run_steps(groups, plan, steps.StepOptions(steps=7, reporter=hooks)) == 7
        after = pids_of(groups)
    finally:
        for group in groups.values():
            group.shutdown()
    out = capsys.readouterr().out
    lines = steps_once_in_order(out, 7)
    assert [r.iteration for r in hooks.reports] == list(range(1, 8))
    ends = [line.rsplit("; ", 1)[1] for line in lines]
    assert ends[:2] == ["rollout 1/1 live"] * 2 and ends[2] in ("rollout 1/2 live", "rollout 2/2 live"), out
    assert ends[3:5] == ["rollout 2/2 live"] * 2 and ends[5:] == ["rollout 1/1 live"] * 2, out
    assert "lost:" not in out
    assert "resized: component 'rollout' 1 -> 2 replicas (rank 1 starting)" in out
    assert "started: component 'rollout' rank 1 on node rank 1 after " in out
    assert "resized: component 'rollout' 2 -> 1 replicas (rank 1 stopped)" in out
    assert after == before  # the kept processes ran throughout
    report = find_report(out)
    assert report is not None and report.ok and report.totals() == {"actor": 1, "rollout": 1, "reward": 1}
    # The process table printed once the new rank joined shows it among every live process.
    assert any(("rollout", "1") in {(row["component"], row["RANK"]) for row in table} for table in process_tables(out))


@pytest.mark.ray
def test_resizes_in_quick_succession_settle_on_the_last_count_with_no_actor_left_over(ray_cluster: None) -> None:
    """Eight resizes of a rollout between 1 and 6 replicas (`4` grown through `4-9`) from six live ones, each before
    the ranks the last one added had started: once the group settles, the live ranks are exactly the last count's, none is starting
    or lost, and Ray runs exactly one actor per live rank (no rank without a process, no process without a rank)."""
    import random

    # The GCS's own table of actors (ray.util.state needs the dashboard, which the simulated cluster has not).
    from ray._private.state import actors as gcs_actors

    plans = {n: launcher.load_plan(plan_of({"rollout": f"4-{3 + n}"}, replace=("rollout",))) for n in range(1, 7)}
    counts = random.Random(43).choices(range(1, 7), k=8)
    group = launcher.launch(plans[1], "rollout", Replica, options=LaunchOptions(replace_lost=True))
    try:
        group.resize(plans[6])  # first six running ranks, so that the resizes stop live ranks too
        back(group, 5)
        for count in counts:
            group.resize(plans[count])
            time.sleep(0.2)
        final = counts[-1]
        deadline = time.monotonic() + BACK_WITHIN_S
        while group.membership.live != tuple(range(final)):
            assert time.monotonic() < deadline, (counts, group.membership)
            group.wait_for_change(1.0)
        assert group.membership.starting == () == group.membership.lost
        seen = group.call("where").get_live(timeout=60)
        assert sorted(seen) == list(range(final)) and [seen[r]["CUDA_VISIBLE_DEVICES"] for r in seen] == [
            str(4 + r) for r in range(final)
        ]
        ids = {actor._actor_id.hex() for actor in group.actors}
        deadline = time.monotonic() + 60  # a killed actor is reported dead a moment later
        while True:
            alive = {
                a["ActorID"]
                for a in gcs_actors().values()
                if a["State"] == "ALIVE" and a["ActorClassName"] == "Replica"
            }
            if alive == ids or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert alive == ids, (counts, alive - ids, ids - alive)
    finally:
        group.shutdown()

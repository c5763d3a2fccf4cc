"""The binding of a framework whose GPU ids Ray assigns (veRL), observed per pool (observe/pools.py),
and the probe's worker setup hook that writes it."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import ClassVar

import pytest

from placement_core import contract
from placement_core.components import component_placement
from placement_core.observe import probe
from placement_core.observe.pools import ObservedPools, observed_pools_in, pool_report, pools
from placement_core.plan import Plan, build_plan

# veRL's usual shape: actor, rollout and ref collocated on the 8 GPUs of two a800 nodes (its global pool, one
# process per GPU hosting the three roles), the reward model on 2 GPUs of a 4090 node (its reward pool).
PLAN = build_plan(
    component_placement(
        {
            "cluster": {
                "num_nodes": 3,
                "accelerators_per_node": [4, 4, 2],
                "node_groups": [{"label": "a800", "node_ranks": "0-1"}, {"label": "4090", "node_ranks": 2}],
                "component_placement": {
                    "actor,rollout,ref": {"node_group": "a800", "placement": "0-7"},
                    "reward": {"node_group": "4090", "placement": "0-1"},
                },
            }
        }
    )
)

# One veRL worker group per pool: (WG_PREFIX, processes per node rank).
GROUPS = {"Ab3xQzWorkerDict": {0: 4, 1: 4}, "Rw9kLmWorkerDict": {2: 2}}


def _record(prefix: str, node: int, local: int, rank: int, world: int, gpus: list[str] | None = None) -> dict:
    gpus = [str(local)] if gpus is None else gpus
    env = {
        "WG_PREFIX": prefix.removesuffix("WorkerDict"),
        "RANK": str(rank),
        "WORLD_SIZE": str(world),
        "RLPLACE_NODE_RANK": str(node),
        "RLPLACE_KUBE_NODE": f"node-{node}",
        "CUDA_VISIBLE_DEVICES": ",".join(gpus),
    }
    return {"pid": 100 + rank, "env": env, "uuids": None, "actor": f"{prefix}_{node}:{local}", "gpu_ids": gpus}


def _log(groups: dict[str, dict[int, int]] = GROUPS, gpus: dict[str, list[str]] | None = None, state_api: bool = True,
         actor_nodes: dict[str, int] | None = None) -> str:  # fmt: skip
    """A driver's log as Ray forwards it: one record per GPU actor, a TaskRunner without GPUs, the State API."""
    lines = ['(TaskRunner pid=9) rlplace-probe: {"pid": 9, "env": {}, "actor": "TaskRunner", "gpu_ids": []}']
    actors = [{"name": "TaskRunner", "namespace": "x", "node_rank": None, "pid": 9}]
    for prefix, per_node in groups.items():
        world, rank = sum(per_node.values()), 0
        for node, count in per_node.items():
            for local in range(count):
                record = _record(prefix, node, local, rank, world, (gpus or {}).get(f"{prefix}_{node}:{local}"))
                lines.append(f"(WorkerDict pid={record['pid']}, ip=10.0.0.{node}) {probe.PREFIX}{json.dumps(record)}")
                seen = (actor_nodes or {}).get(record["actor"], node)
                actors.append({"name": record["actor"], "namespace": "x", "node_rank": seen, "pid": record["pid"]})
                rank += 1
    if state_api:
        lines.append(probe.ACTORS_PREFIX + json.dumps(actors))
    return "\n".join(lines)


def _path(plan: Plan, name: str) -> list[str]:
    return [p.node_name for p in plan.component(name).processes]


def test_components_with_one_placement_are_one_pool() -> None:
    assert [(p.name, len(p.processes)) for p in pools(PLAN)] == [("actor,rollout,ref", 8), ("reward", 2)]


def test_a_run_shaped_as_planned_is_observed_with_the_gpu_ids_ray_gave() -> None:
    observed = observed_pools_in(_log())
    assert len(observed.processes) == 10  # the TaskRunner, without GPUs, is no process of a pool
    report = pool_report(PLAN, observed)
    assert report is not None and report.ok, report and report.summary()
    assert not report.enforced
    assert report.summary() == ("observed (GPU ids Ray's, not enforced) actor 8/8, rollout 8/8, ref 8/8, reward 2/2")
    actor = [c for c in report.checks if c.component == "actor"]
    assert [(c.node_name, c.gpu_ids) for c in actor][:5] == [
        ("node-0", ("0",)), ("node-0", ("1",)), ("node-0", ("2",)), ("node-0", ("3",)), ("node-1", ("0",))
    ]  # fmt: skip


def test_nothing_is_told_until_every_process_is_seen_in_both_views() -> None:
    assert pool_report(PLAN, observed_pools_in(_log(state_api=False))) is None
    partial = {"Ab3xQzWorkerDict": {0: 4}, "Rw9kLmWorkerDict": {2: 2}}
    assert pool_report(PLAN, observed_pools_in(_log(partial))) is None
    assert pool_report(PLAN, ObservedPools()) is None


def test_a_smaller_worker_group_is_named_once_final() -> None:
    # trainer.nnodes=1 in veRL's config while the RLJob plans two a800 nodes: node rank 1's processes never come.
    log = _log({"Ab3xQzWorkerDict": {0: 4}, "Rw9kLmWorkerDict": {2: 2}})
    report = pool_report(PLAN, observed_pools_in(log), final=True)
    assert report is not None and not report.ok
    bad = report.first_failure()
    assert bad is not None
    assert bad.describe() == (
        "component 'actor' rank 4 on node 'node-1': no process of the framework on this node (its worker group is "
        "smaller than planned)"
    )
    assert report.verified() == {"actor": 4, "rollout": 4, "ref": 4, "reward": 2}


def test_a_process_on_a_node_outside_its_pool_is_named_at_once() -> None:
    # The reward pool's worker group put one process on an a800 node: not where the plan has reward processes.
    log = _log({"Ab3xQzWorkerDict": {0: 4, 1: 4}, "Rw9kLmWorkerDict": {2: 1, 1: 1}})
    report = pool_report(PLAN, observed_pools_in(log))
    assert report is not None and not report.ok
    assert "actor 'Rw9kLmWorkerDict_1:0' runs on node rank 1, where the plan has 0 processes of reward" in (
        report.summary()
    )


def test_two_processes_given_one_gpu_are_named_unless_the_plan_collocates_them() -> None:
    log = _log(gpus={"Ab3xQzWorkerDict_0:1": ["0"]})
    report = pool_report(PLAN, observed_pools_in(log))
    assert report is not None and not report.ok
    assert report.first_failure().problems == (  # type: ignore[union-attr]
        "shares GPU 0 with actor 'Ab3xQzWorkerDict_0:1' (actor,rollout,ref rank 1); the plan gives them different GPUs",
    )


def test_a_process_with_more_gpus_than_planned_and_a_state_api_on_another_node() -> None:
    log = _log(gpus={"Rw9kLmWorkerDict_2:1": ["0", "1"]}, actor_nodes={"Ab3xQzWorkerDict_1:3": 0})
    report = pool_report(PLAN, observed_pools_in(log))
    assert report is not None
    problems = {(c.component, c.rank): c.problems for c in report.checks if not c.ok and c.component != "rollout"}
    assert problems[("reward", 1)][0] == "Ray gave actor 'Rw9kLmWorkerDict_2:1' 2 GPUs, planned 1"
    assert problems[("actor", 7)] == (
        "Ray's State API shows actor 'Ab3xQzWorkerDict_1:3' on node rank 0, its own record on 1",
    )


def test_the_driver_hook_adds_the_worker_setup_hook_for_verl_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(probe._started, "is_set", lambda: True)  # no watcher thread in the test process
    monkeypatch.delenv(contract.FRAMEWORK_ENV, raising=False)
    assert probe.runtime_env_hook({"env_vars": {"A": "1"}}) == {"env_vars": {"A": "1"}}
    monkeypatch.setenv(contract.FRAMEWORK_ENV, "verl")
    added = probe.runtime_env_hook({"env_vars": {"A": "1"}})
    assert added == {"env_vars": {"A": "1"}, "worker_process_setup_hook": f"{probe.__name__}.worker_setup"}
    # The program's own setup hook stays (Ray runs one): its processes then report nothing, which is named.
    assert probe.runtime_env_hook({"worker_process_setup_hook": "mine.setup"})["worker_process_setup_hook"] == (
        "mine.setup"
    )


class _Progress(BaseHTTPRequestHandler):
    received: ClassVar[list[dict]] = []

    def do_POST(self) -> None:
        self.received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(202)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        return


def test_verl_file_logger_lines_are_posted_once_each(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = HTTPServer(("127.0.0.1", 0), _Progress)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True).start()
    monkeypatch.setenv(contract.PROGRESS_URL_ENV, f"http://127.0.0.1:{server.server_port}/progress")
    path = tmp_path / "metrics.jsonl"
    lines = [{"step": s, "data": {"timing_s/gen": 0.5, "timing_s/update_actor": 1.5, "note": "x"}} for s in (1, 2)]
    path.write_bytes(b"".join(json.dumps(line).encode() + b"\n" for line in lines) + b'{"step": 3, "da')
    offset = probe._post_new_lines(str(path), 0)
    assert offset == path.stat().st_size - len(b'{"step": 3, "da')  # the line being written waits
    assert probe._post_new_lines(str(path), offset) == offset
    for _ in range(50):
        if len(_Progress.received) == 2:
            break
        threading.Event().wait(0.1)
    server.shutdown()
    assert sorted(r["iteration"] for r in _Progress.received) == [1, 2]
    assert _Progress.received[0]["framework"] == "verl"
    assert _Progress.received[0]["metrics"] == {"timing_s/gen": 0.5, "timing_s/update_actor": 1.5}
    path.write_bytes(b"")  # a driver run again in the same pods starts the file over
    assert probe._post_new_lines(str(path), offset) == 0

"""The reference driver reports to the operator's progress endpoint: `python -m placement_core.launcher.demo
--steps --workload synthetic` joined to the session's simulated Ray cluster, with $RLPLACE_PROGRESS_URL and the token file set as
the head pod has them, POSTs to a real ProgressService on localhost (its TokenReview injected: no API server
here), and the status it writes carries the synthetic laws' times (a synthetic workload, not a measurement).
Asked in the endpoint's answer, the driver saves a checkpoint, and the status carries its step."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from placement_core.components import component_placement
from placement_core.launcher.checkpoint import CheckpointStore
from placement_core.plan import build_plan
from rlplace_operator.api.names import progress_path
from rlplace_operator.kube import ProgressWrite
from rlplace_operator.server.progress import Caller, JobKey, ProgressService, Refused

Writes = list[tuple[JobKey, dict[str, Any]]]


def identify(presented: str) -> Caller:
    if presented != "head-token":
        raise Refused(401, "token not valid")
    return Caller(("ns", "job"), "job-head", time.monotonic() + 600)


@contextlib.contextmanager
def progress_endpoint(
    write: Callable[[JobKey, dict[str, Any], str | None], ProgressWrite],
    checkpoint_wanted: Callable[[JobKey], bool] = lambda _: False,
) -> Iterator[int]:
    """A ProgressService served on localhost from its own event loop thread; yields its port, and drains its
    writes when the block ends."""
    loop = asyncio.new_event_loop()
    started = threading.Event()
    box: dict[str, Any] = {}

    async def serve() -> None:
        service = ProgressService(identify, write, interval=1.0, checkpoint_wanted=checkpoint_wanted)
        runner = web.AppRunner(service.app())
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        box.update(service=service, runner=runner, port=runner.addresses[0][1])
        started.set()

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(serve(), loop)
    assert started.wait(10)
    try:
        yield box["port"]
        asyncio.run_coroutine_threadsafe(box["service"].drain(), loop).result(10)
    finally:
        if "runner" in box:
            asyncio.run_coroutine_threadsafe(box["runner"].cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)


def run_driver(address: str, tmp_path: Path, port: int, *args: str) -> subprocess.CompletedProcess[str]:
    """The reference driver, joined to the session's simulated cluster at `address`, on its node of 8 GPUs (actor
    0-1, rollout 2-3), reporting as a head pod."""
    config = {
        "cluster": {
            "num_nodes": 1,
            "accelerators_per_node": 8,
            "component_placement": {"actor": "0-1", "rollout": "2-3"},
        }
    }
    plan = tmp_path / "plan.json"
    plan.write_text(build_plan(component_placement(config)).to_json())
    token = tmp_path / "token"
    token.write_text("head-token\n")
    env = {
        **os.environ,
        "RLPLACE_PROGRESS_URL": f"http://127.0.0.1:{port}{progress_path('ns', 'job')}",
        "RLPLACE_PROGRESS_TOKEN_FILE": str(token),
    }
    command = [sys.executable, "-m", "placement_core.launcher.demo", "--plan", str(plan), "--address", address]
    command += ["--components", "actor", "rollout", "--workload", "synthetic", *args]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "progress POST" not in result.stderr, result.stderr[-2000:]
    return result


@pytest.mark.ray
def test_the_reference_driver_fills_in_its_jobs_progress(simulated_ray: Any, tmp_path: Path) -> None:
    writes: Writes = []

    def write(key: JobKey, progress: dict[str, Any], cluster: str | None) -> ProgressWrite:
        writes.append((key, progress))
        return ProgressWrite.WRITTEN

    laws = ["--law", "actor=3.2/g", "--law", "rollout=0.4/g+0.2"]  # actor 1.6 s, rollout 0.4 s, side by side
    with progress_endpoint(write) as port:
        run_driver(simulated_ray.address, tmp_path, port, "--steps", "3", *laws)
    # The driver throttles to one POST per 5 s and sends its last report when it ends: the status ends at step 3.
    assert writes and {key for key, _ in writes} == {("ns", "job")}
    final = writes[-1][1]
    assert final["iteration"] == 3 and final["bottleneck"] == "actor", final
    assert "checkpointStep" not in final  # no checkpoint directory: none saved
    seconds = {c["name"]: c["seconds"] for c in final["components"]}
    # A component's time runs from its first process's start to its last one's end, so it is its law's sleep plus
    # the skew of Ray's calls to its two processes: 0.32 s on a loaded 2-core CI machine. The floor is exact.
    assert 1.6 - 0.02 <= seconds["actor"] <= 1.6 + 0.8 and 0.4 - 0.02 <= seconds["rollout"] <= 0.4 + 0.8, seconds
    # A step's wall time is the slowest component's plus Ray's call overhead: 0.44 s more on a loaded 2-core CI
    # machine, so only the floor is exact.
    assert seconds["actor"] - 0.05 <= final["iterationSeconds"] <= seconds["actor"] + 2.0, final


@pytest.mark.ray
def test_asked_by_the_operator_the_reference_driver_checkpoints_and_reports_it(
    simulated_ray: Any, tmp_path: Path
) -> None:
    """As before a preemption: the operator wants a checkpoint from its first status write on. The driver
    learns it from the answer to its next POST (5 s after the first), saves after that step, sends that report at
    once, and runs its steps to the end (the operator, not the driver, stops the job)."""
    writes: Writes = []
    wanted = threading.Event()

    def write(key: JobKey, progress: dict[str, Any], cluster: str | None) -> ProgressWrite:
        writes.append((key, progress))
        wanted.set()
        return ProgressWrite.WRITTEN

    checkpoints = tmp_path / "checkpoints"
    steps = ["--steps", "14", "--checkpoint-every", "100", "--checkpoint-dir", str(checkpoints)]
    laws = ["--law", "actor=0.5", "--law", "rollout=0.3"]  # 0.5 s a step or more: asked by step 12
    with progress_endpoint(write, lambda key: wanted.is_set()) as port:
        result = run_driver(simulated_ray.address, tmp_path, port, *steps, *laws)
    on_request = [line for line in result.stdout.splitlines() if line.endswith(" on request")]
    assert len(on_request) == 1, result.stdout  # one request, one checkpoint, though every answer asks
    saved = CheckpointStore(checkpoints).steps()
    assert len(saved) == 1 and 1 < saved[0] < 14 and on_request[0].startswith(f"checkpoint: step {saved[0]} saved")
    # The report of the step that saved it was sent at once (not held back by the driver's 5 s) and written at
    # once; every report from then on carries it, up to the last step.
    progress = [w for _, w in writes]
    first = next(w for w in progress if "checkpointStep" in w)
    assert (first["iteration"], first["checkpointStep"]) == (saved[0], saved[0]), progress
    assert progress[-1]["iteration"] == 14 and progress[-1]["checkpointStep"] == saved[0], progress
    assert "summary: attempt 1 ran 14 steps (1-14)" in result.stdout

"""The reference driver reports to the operator's progress endpoint: `python -m placement_core.launcher.demo
--steps --workload synthetic` on a simulated Ray cluster, with $RLPLACE_PROGRESS_URL and the token file set as
the head pod has them, POSTs to a real ProgressService on localhost (its TokenReview injected: no API server
here), and the status it writes carries the synthetic laws' times (a synthetic workload, not a measurement)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from placement_core.components import component_placement
from placement_core.plan import build_plan
from rlplace_operator.names import progress_path
from rlplace_operator.progress import Caller, JobKey, ProgressService, Refused


@pytest.mark.ray
def test_the_reference_driver_fills_in_its_jobs_progress(tmp_path: Path) -> None:
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
    writes: list[tuple[JobKey, dict[str, Any]]] = []

    def identify(presented: str) -> Caller:
        if presented != "head-token":
            raise Refused(401, "token not valid")
        return Caller(("ns", "job"), "job-head", time.monotonic() + 600)

    def write(key: JobKey, progress: dict[str, Any]) -> bool:
        writes.append((key, progress))
        return True

    loop = asyncio.new_event_loop()
    started = threading.Event()
    box: dict[str, Any] = {}

    async def serve() -> None:
        service = ProgressService(identify, write, interval=1.0)
        runner = web.AppRunner(service.app())
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        box.update(service=service, runner=runner, port=runner.addresses[0][1])
        started.set()

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(serve(), loop)
    assert started.wait(10)
    env = {
        **os.environ,
        "RLPLACE_PROGRESS_URL": f"http://127.0.0.1:{box['port']}{progress_path('ns', 'job')}",
        "RLPLACE_PROGRESS_TOKEN_FILE": str(token),
    }
    laws = ["--law", "actor=1.6/g", "--law", "rollout=0.8/g+0.2"]  # actor 0.8 s, rollout 0.6 s, side by side
    command = [sys.executable, "-m", "placement_core.launcher.demo", "--plan", str(plan), "--simulate"]
    command += ["--components", "actor", "rollout", "--steps", "8", "--workload", "synthetic", *laws]
    try:
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr[-2000:]
        assert "progress POST" not in result.stderr, result.stderr[-2000:]
        asyncio.run_coroutine_threadsafe(box["service"].drain(), loop).result(10)
    finally:
        if "runner" in box:
            asyncio.run_coroutine_threadsafe(box["runner"].cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
    # The driver throttles to one POST per 5 s and sends its last report when it ends: the status ends at step 8.
    assert writes and {key for key, _ in writes} == {("ns", "job")}
    final = writes[-1][1]
    assert final["iteration"] == 8 and final["bottleneck"] == "actor", final
    seconds = {c["name"]: c["seconds"] for c in final["components"]}
    assert seconds["actor"] == pytest.approx(0.8, abs=0.2) and seconds["rollout"] == pytest.approx(0.6, abs=0.2)
    # A step's wall time is the slowest component's plus Ray's call overhead: 0.44 s more on a loaded 2-core CI
    # machine, so only the floor is exact.
    assert seconds["actor"] - 0.05 <= final["iterationSeconds"] <= seconds["actor"] + 2.0, final

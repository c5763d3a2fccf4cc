"""Operator cost of progress reports at scale, and how stale status.progress gets (printed, not a timed test).

    .venv/bin/python benchmarks/progress_load.py [--jobs 1000] [--period 5] [--seconds 30]

Three processes on this machine:
- the operator's progress endpoint (progress.ProgressService, its real aiohttp server, identity cache, throttle
  and the real Kubernetes client writing status.progress as a merge patch),
- a stand-in API server (aiohttp) that answers each status PATCH with an RLJob of realistic size and each token
  lookup with its job, so the operator's side of every call is real (the API server's own cost is not measured
  here: it is the same PATCH that every status writer sends),
- `--jobs` drivers, each POSTing a report every `--period` seconds with its own token (as HttpReporter does).

Printed: the endpoint process's CPU seconds per 1,000 reports, beside a baseline measured in the same run: the
same number of POSTs answered 202 by a bare aiohttp handler in that process (HTTP alone); status writes and
token reviews per report; staleness from a report's arrival to the status write that carried it (p50/p95/max).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import statistics
import time

import aiohttp
from aiohttp import web

RLJOB_STATUS = {
    "phase": "Running",
    "conditions": [{"type": f"C{i}", "status": "True", "message": "x" * 80} for i in range(8)],
}


def serve_forever(app: web.Application, port: int, ready: mp.Event) -> None:  # type: ignore[valid-type]
    """Serve `app` on 127.0.0.1:`port` in this (child) process until it is killed; `ready` once listening."""

    async def main() -> None:
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        ready.set()
        await asyncio.Event().wait()

    asyncio.run(main())


def fake_api_server(port: int, ready: mp.Event) -> None:  # type: ignore[valid-type]
    async def patch(request: web.Request) -> web.Response:
        body = await request.json()
        ns, name = request.match_info["ns"], request.match_info["name"]
        obj = {
            "apiVersion": "rlplace.io/v1alpha1",
            "kind": "RLJob",
            "metadata": {"name": name, "namespace": ns, "uid": "u", "resourceVersion": "1"},
            "spec": {"nodeGroups": ["g"], "componentPlacement": [{"components": "actor", "placement": "all"}]},
            "status": {**RLJOB_STATUS, **body["status"]},
        }
        return web.json_response(obj)

    app = web.Application()
    app.router.add_patch("/apis/rlplace.io/v1alpha1/namespaces/{ns}/rljobs/{name}/status", patch)

    serve_forever(app, port, ready)


def operator(port: int, api_port: int, ready: mp.Event, interval: float) -> None:  # type: ignore[valid-type]
    from kubernetes import client

    from rlplace_operator.kube import Kube
    from rlplace_operator.server.progress import Caller, ProgressService, kube_write_progress

    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{api_port}"
    configuration.connection_pool_maxsize = 8
    reviews: list[str] = []

    def identify(token: str) -> Caller:
        # Stands for the TokenReview and the pod/owner reads: counted, and each costs one of these calls.
        reviews.append(token)
        return Caller(("bench", token.removeprefix("token-")), f"{token}-head", time.monotonic() + 600)

    service = ProgressService(identify, kube_write_progress(Kube(client.ApiClient(configuration))), interval=interval)
    app = service.app()

    async def bare(_: web.Request) -> web.Response:
        await _.read()
        return web.json_response({"accepted": 0}, status=202)

    async def stats(_: web.Request) -> web.Response:
        staleness = sorted(service.stats.staleness)
        return web.json_response(
            {
                "cpu": time.process_time(),
                "accepted": service.stats.accepted,
                "writes": service.stats.writes,
                "failures": service.stats.write_failures,
                "reviews": service.identities.reviews,
                "staleness": staleness,
            }
        )

    app.router.add_post("/bare/{name}", bare)
    app.router.add_get("/stats", stats)

    serve_forever(app, port, ready)


async def drive(base: str, jobs: int, period: float, seconds: float, bare: bool) -> int:
    """`jobs` drivers, each POSTing every `period` s for `seconds` s; returns the reports sent."""
    sent = 0
    connector = aiohttp.TCPConnector(limit=64)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def driver(index: int) -> None:
            nonlocal sent
            await asyncio.sleep(period * index / jobs)  # spread over the period, as independent jobs are
            name = f"job-{index}"
            url = f"{base}/bare/{name}" if bare else f"{base}/v1/namespaces/bench/rljobs/{name}/progress"
            headers = {"Authorization": f"Bearer token-{name}", "Content-Type": "application/json"}
            end = time.monotonic() + seconds
            iteration = 0
            while time.monotonic() < end:
                iteration += 1
                body = {
                    "iteration": iteration,
                    "components": [
                        {"name": "rollout", "seconds": 3.1},
                        {"name": "actor", "seconds": 1.2},
                        {"name": "reward", "seconds": 0.3},
                    ],
                    "iterationSeconds": 4.7,
                    "time": time.time(),
                }
                async with session.post(url, data=json.dumps(body), headers=headers) as response:
                    assert response.status == 202, await response.text()
                sent += 1
                await asyncio.sleep(period)

        await asyncio.gather(*(driver(i) for i in range(jobs)))
    return sent


async def stats(base: str) -> dict:
    async with aiohttp.ClientSession() as session, session.get(f"{base}/stats") as response:
        return await response.json()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1000)
    parser.add_argument("--period", type=float, default=5.0, help="seconds between a driver's reports")
    parser.add_argument("--seconds", type=float, default=30.0, help="how long the drivers report")
    parser.add_argument("--interval", type=float, default=5.0, help="the operator's per-job write interval")
    args = parser.parse_args()
    ctx = mp.get_context("spawn")
    api_ready, op_ready = ctx.Event(), ctx.Event()
    api = ctx.Process(target=fake_api_server, args=(18611, api_ready), daemon=True)
    op = ctx.Process(target=operator, args=(18612, 18611, op_ready, args.interval), daemon=True)
    api.start()
    op.start()
    api_ready.wait(30)
    op_ready.wait(30)
    base = "http://127.0.0.1:18612"

    before = asyncio.run(stats(base))
    bare_sent = asyncio.run(drive(base, args.jobs, args.period, args.seconds, bare=True))
    middle = asyncio.run(stats(base))
    sent = asyncio.run(drive(base, args.jobs, args.period, args.seconds, bare=False))
    time.sleep(args.interval + 1)  # the last planned writes
    after = asyncio.run(stats(base))
    op.terminate()
    api.terminate()

    bare_cpu = (middle["cpu"] - before["cpu"]) / bare_sent * 1000
    cpu = (after["cpu"] - middle["cpu"]) / sent * 1000
    staleness = after["staleness"]
    quantile = statistics.quantiles(staleness, n=100) if len(staleness) > 1 else staleness * 99
    print(f"{args.jobs} jobs, one report per job every {args.period:g} s for {args.seconds:g} s ({sent} reports)")
    print(
        f"  operator CPU per 1,000 reports:   {cpu:.3f} s   (baseline, bare HTTP 202: {bare_cpu:.3f} s; ratio {cpu / bare_cpu:.2f}x)"
    )
    print(
        f"  status writes per report:         {after['writes'] / sent:.3f}   ({after['writes']} writes, {after['failures']} failed)"
    )
    print(
        f"  token reviews:                    {after['reviews']} ({after['reviews'] / sent:.4f} per report; one per job's token)"
    )
    print(
        f"  staleness, report arrival -> status write: p50 {quantile[49]:.2f} s, p95 {quantile[94]:.2f} s, "
        f"max {max(staleness):.2f} s (plus up to {args.period:g} s in the driver's own throttle)"
    )


if __name__ == "__main__":
    main()

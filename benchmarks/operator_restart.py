"""What an operator restart costs when nothing changed: API requests and Events per unchanged RLJob.

    .venv/bin/python benchmarks/operator_restart.py [--jobs 40] [--quiet-seconds 15]

Makes `--jobs` 8-GPU kwok nodes in one NodeGroup and one RLJob per node, waits until every job is Running,
stops the operator and starts it again behind a counting HTTP proxy (the operator's only way to the API
server), then waits until the operator has sent nothing for `--quiet-seconds`. Every request is counted by
verb and resource; watches are counted apart (they are the operator's fixed cost, not per job). The target
per unchanged job: 0 writes (create/patch/put/delete) and 0 Events.

Baseline, in the same run: the requests of the operator's first start on the same cluster before any job
exists (its lists and watches), which a restart cannot go below.

Uses the cluster in KUBECONFIG if set, else starts a local control plane in .e2e/bench (and stops it).
Prints figures; it is not a test.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import os
import ssl
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

import aiohttp  # noqa: E402
import yaml  # noqa: E402
from aiohttp import web  # noqa: E402
from kubernetes import client, config  # noqa: E402

from _harness import GROUP, VERSION, bench_cluster, bench_nodes, wait_for  # noqa: E402

WRITE_VERBS = {"POST", "PUT", "PATCH", "DELETE"}


def resource_of(path: str) -> str:
    """`/apis/ray.io/v1/namespaces/x/rayclusters/y/status` -> `rayclusters/status` (the resource named)."""
    parts = [p for p in path.split("?")[0].split("/") if p]
    if "namespaces" in parts and parts.index("namespaces") + 2 < len(parts):
        parts = parts[parts.index("namespaces") + 2 :]
    elif parts[:1] == ["api"]:
        parts = parts[2:]
    elif parts[:1] == ["apis"]:
        parts = parts[3:]
    if len(parts) >= 3:
        return f"{parts[0]}/{parts[2]}"
    return parts[0] if parts else "/"


class CountingProxy:
    """A plain-HTTP reverse proxy to the API server (with the admin's client certificate) that counts every
    request it forwards. Watches stream through unchanged."""

    def __init__(self, configuration: client.Configuration) -> None:
        self.upstream = configuration.host.rstrip("/")
        self.ssl = ssl.create_default_context(cafile=configuration.ssl_ca_cert)
        self.ssl.load_cert_chain(configuration.cert_file, configuration.key_file)
        self.counts: collections.Counter[tuple[str, str]] = collections.Counter()
        self.last_request = time.monotonic()
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._started = threading.Event()
        threading.Thread(target=self._run, daemon=True).start()
        self._started.wait(10)

    def reset(self) -> None:
        self.counts.clear()
        self.last_request = time.monotonic()

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        watch = "watch=true" in request.query_string or "watch=1" in request.query_string
        verb = "WATCH" if watch else request.method
        self.counts[(verb, resource_of(request.path))] += 1
        self.last_request = time.monotonic()
        headers = {
            k: v for k, v in request.headers.items() if k.lower() not in ("host", "content-length", "accept-encoding")
        }
        headers["Accept-Encoding"] = "identity"  # pass bodies through as they are, never re-encoded
        body = await request.read()
        async with self._session.request(
            request.method,
            self.upstream + request.path_qs,
            headers=headers,
            data=body or None,
            ssl=self.ssl,
            skip_auto_headers=("Content-Type",),  # a body without one goes on without one, as sent
        ) as upstream:
            response = web.StreamResponse(status=upstream.status)
            for key, value in upstream.headers.items():
                if key.lower() not in ("content-length", "transfer-encoding", "content-encoding", "connection"):
                    response.headers[key] = value
            # The operator closes a watch when it stops: the stream just ends.
            with contextlib.suppress(ConnectionResetError, aiohttp.ClientError):
                await response.prepare(request)
                async for chunk in upstream.content.iter_any():
                    await response.write(chunk)
            return response

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def start() -> None:
            self._session = aiohttp.ClientSession(auto_decompress=False, timeout=aiohttp.ClientTimeout(total=None))
            app = web.Application(client_max_size=64 * 1024 * 1024)
            app.router.add_route("*", "/{tail:.*}", self._forward)
            runner = web.AppRunner(app)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            self.port = site._server.sockets[0].getsockname()[1]
            self._started.set()

        self._loop.run_until_complete(start())
        self._loop.run_forever()

    def kubeconfig(self, path: Path) -> str:
        path.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [{"name": "proxy", "cluster": {"server": f"http://127.0.0.1:{self.port}"}}],
                    "users": [{"name": "proxy", "user": {}}],
                    "contexts": [{"name": "proxy", "context": {"cluster": "proxy", "user": "proxy"}}],
                    "current-context": "proxy",
                }
            )
        )
        return str(path)


def start_operator(kubeconfig: str, log: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "rlplace_operator.main"],
        env={**os.environ, "KUBECONFIG": kubeconfig},
        stdout=log.open("a"),
        stderr=subprocess.STDOUT,
    )


def stop_operator(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def settle(proxy: CountingProxy, quiet: float, limit: float = 300) -> None:
    """Wait until the operator has sent no request for `quiet` seconds (watches stay open and do not count)."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and time.monotonic() - proxy.last_request < quiet:
        time.sleep(0.5)


def summary(counts: collections.Counter[tuple[str, str]]) -> dict[str, int]:
    return {
        "writes": sum(n for (verb, _), n in counts.items() if verb in WRITE_VERBS),
        "events": sum(n for (verb, resource), n in counts.items() if verb == "POST" and resource == "events"),
        "reads": sum(n for (verb, _), n in counts.items() if verb in ("GET", "HEAD")),
        "watches": sum(n for (verb, _), n in counts.items() if verb == "WATCH"),
    }


def run(api: client.ApiClient, configuration: client.Configuration, jobs: int, quiet: float) -> None:
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    prefix = f"restart-{uuid.uuid4().hex[:4]}"
    proxy = CountingProxy(configuration)
    log = REPO / ".e2e" / f"operator-{prefix}.log"
    proxied = proxy.kubeconfig(REPO / ".e2e" / f"{prefix}.kubeconfig")
    operators: list[subprocess.Popen] = []
    with contextlib.ExitStack() as stack:
        # The operator (the latest one started) stops last: removing the group waits on its finalizers.
        stack.callback(lambda: operators and stop_operator(operators[-1]))
        stack.enter_context(bench_nodes(api, jobs, prefix))
        operators.append(start_operator(proxied, log))
        settle(proxy, quiet)
        baseline = summary(proxy.counts)
        for i in range(jobs):
            first = 8 * i
            body = {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "RLJob",
                "metadata": {"name": f"job-{i:03d}"},
                "spec": {
                    "nodeGroups": [prefix],
                    "componentPlacement": [{"components": "actor,rollout", "placement": f"{first}-{first + 7}"}],
                },
            }
            custom.create_namespaced_custom_object(GROUP, VERSION, prefix, "rljobs", body)

        def all_running() -> bool:
            items = custom.list_namespaced_custom_object(GROUP, VERSION, prefix, "rljobs")["items"]
            return sum((j.get("status") or {}).get("phase") == "Running" for j in items) == jobs

        wait_for(all_running, 300, f"{jobs} RLJobs Running")
        settle(proxy, quiet)
        stop_operator(operators[-1])
        events_before = len(core.list_namespaced_event(prefix).items)
        versions_before = {
            j["metadata"]["name"]: j["metadata"]["resourceVersion"]
            for j in custom.list_namespaced_custom_object(GROUP, VERSION, prefix, "rljobs")["items"]
        }
        proxy.reset()
        operators.append(start_operator(proxied, log))
        settle(proxy, quiet)
        restart = summary(proxy.counts)
        events_after = len(core.list_namespaced_event(prefix).items)
        versions_after = {
            j["metadata"]["name"]: j["metadata"]["resourceVersion"]
            for j in custom.list_namespaced_custom_object(GROUP, VERSION, prefix, "rljobs")["items"]
        }
        changed = sum(versions_before[name] != versions_after.get(name) for name in versions_before)
        print(f"operator restart with {jobs} unchanged Running RLJobs (quiet for {quiet:.0f} s to end a phase)")
        print(f"{'':>28} {'reads':>7} {'watches':>8} {'writes':>7} {'Events':>7}")
        print(
            f"{'first start, no jobs':>28} {baseline['reads']:>7} {baseline['watches']:>8} {baseline['writes']:>7} "
            f"{baseline['events']:>7}"
        )
        print(
            f"{'restart, all jobs':>28} {restart['reads']:>7} {restart['watches']:>8} {restart['writes']:>7} "
            f"{restart['events']:>7}"
        )
        extra_reads = restart["reads"] - baseline["reads"]
        print(
            f"{'per unchanged job':>28} {extra_reads / jobs:>7.2f} {'':>8} {restart['writes'] / jobs:>7.2f} "
            f"{restart['events'] / jobs:>7.2f}"
        )
        print(f"Events stored in the namespace: {events_before} before the restart, {events_after} after")
        print(f"RLJobs whose resourceVersion changed across the restart: {changed} of {jobs}")
        print("requests of the restart by verb and resource:")
        for (verb, resource), count in sorted(proxy.counts.items(), key=lambda item: -item[1]):
            print(f"  {count:>6}  {verb:<6} {resource}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=40)
    parser.add_argument("--quiet-seconds", type=float, default=15)
    args = parser.parse_args()
    with bench_cluster() as (_, kubeconfig):
        configuration = client.Configuration()
        config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        run(client.ApiClient(configuration), configuration, args.jobs, args.quiet_seconds)


if __name__ == "__main__":
    main()

"""Operator entry point: the command line, then kopf with every handler of controllers/ registered.

rlplace-operator [--namespace NS ...] [--liveness http://0.0.0.0:8080/healthz] [--progress-port 8081
                 --progress-url http://rlplace-operator.rlplace-system.svc:8081] [--metrics-port 9090]
                 [--pod-start-grace 10] [--pod-start-timeout 180] [--leader-election NAMESPACE/NAME]
                 [--topology-levels LABEL,LABEL]

With --leader-election, several replicas run and one acts: the holder of that Lease. The others stand by (they
answer their liveness probe and nothing else) and one of them takes over when the leader stops renewing it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import logging
import os
import re
import signal
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import kopf

from rlplace_operator.api.podspec import LABEL_KEY_PATTERN
from rlplace_operator.controllers import indexes, nodegroup, operator, rljob  # noqa: F401  (registers the handlers)
from rlplace_operator.controllers.operator import QuietTimers, Serving
from rlplace_operator.diagnosis.causes import StartBounds
from rlplace_operator.kube import ROLE_LABEL, label_pod, missing_crds
from rlplace_operator.leadership import Leadership

logger = logging.getLogger("rlplace_operator")


def main() -> None:
    parser = argparse.ArgumentParser(prog="rlplace-operator", description="Run the rlplace operator.")
    parser.add_argument("--namespace", "-n", action="append", default=[], help="watch only these namespaces")
    parser.add_argument("--liveness", default=None, help="liveness endpoint, e.g. http://0.0.0.0:8080/healthz")
    parser.add_argument("--progress-port", type=int, default=None, help="serve the progress endpoint on this port")
    parser.add_argument(
        "--progress-url", default=None, help="base URL at which jobs' pods reach the progress port (a Service)"
    )
    parser.add_argument("--metrics-port", type=int, default=None, help="serve Prometheus /metrics on this port")
    parser.add_argument(
        "--pod-start-grace",
        type=float,
        default=StartBounds.grace.total_seconds(),
        help="seconds a job's pod may stay bound to its node without starting before the job's status says why",
    )
    parser.add_argument(
        "--pod-start-timeout",
        type=float,
        default=StartBounds.timeout.total_seconds(),
        help="seconds a job waits for what may pass (a volume attaching, a claim binding) before it gives its "
        "nodes back and retries with backoff",
    )
    parser.add_argument(
        "--leader-election",
        metavar="NAMESPACE/NAME",
        default=None,
        help="act only while holding this Lease (coordination.k8s.io): run several replicas, one leads and the "
        "others stand by to take over",
    )
    parser.add_argument(
        "--topology-levels",
        default=None,
        metavar="LABEL,LABEL",
        help="node labels of the network levels, widest first, for NodeGroups that declare none and that no Kueue "
        "ResourceFlavor's Topology covers (default: network.topology.kubernetes.io/block,"
        "network.topology.kubernetes.io/rack)",
    )
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    levels = tuple(level.strip() for level in (args.topology_levels or "").split(",") if level.strip())
    for level in levels:
        if not re.fullmatch(LABEL_KEY_PATTERN, level):
            parser.error(f"--topology-levels: '{level}' is not a node label key")
    if args.leader_election is not None and len([p for p in args.leader_election.split("/") if p]) != 2:
        parser.error(f"--leader-election must be NAMESPACE/NAME, got '{args.leader_election}'")
    if not 0 < args.pod_start_grace <= args.pod_start_timeout:
        parser.error(
            f"--pod-start-grace ({args.pod_start_grace:g}) must be above 0 and at most --pod-start-timeout "
            f"({args.pod_start_timeout:g})"
        )
    start_bounds = StartBounds(dt.timedelta(seconds=args.pod_start_grace), dt.timedelta(seconds=args.pod_start_timeout))
    if args.progress_url and not args.progress_url.startswith(("http://", "https://")):
        parser.error(f"--progress-url must start with http:// or https://, got '{args.progress_url}'")
    serving = Serving(args.progress_port, args.progress_url, args.metrics_port)
    # kopf's own log format names the object ([namespace/name]) on every line.
    kopf.configure(verbose=args.verbose, log_prefix=True)
    # kopf only watches the resources served when it starts: with a CRD installed later it would never
    # handle that kind. Exit instead, and let Kubernetes restart the pod until the CRDs are there.
    missing = missing_crds()
    if missing:
        print(
            f"error: the API server does not serve {', '.join(missing)}: install rlplace's CRDs "
            "(kubectl apply --server-side -f crds/, or the Helm chart); exiting so that the operator restarts",
            file=sys.stderr,
        )
        sys.exit(1)
    if not args.verbose:
        logging.getLogger("kopf.objects").addFilter(QuietTimers())
    leadership = stand_by(args.leader_election, args.liveness) if args.leader_election else None
    with contextlib.suppress(asyncio.CancelledError):  # as kopf.run
        asyncio.run(
            operate(
                leadership,
                clusterwide=not args.namespace,
                namespaces=args.namespace,
                liveness_endpoint=args.liveness,
                # One replica acts (the Lease's holder, or the only one), so no kopf peering.
                standalone=True,
                # The startup handlers read what to serve from the memo every handler gets (no module state).
                memo=kopf.Memo(serving=serving, start_bounds=start_bounds, topology_levels=levels),
            )
        )
    if leadership is not None:
        if leadership.lost.done():
            print(
                f"error: could not renew the Lease {args.leader_election}: stopped acting, and exiting so that this "
                "replica stands by again",
                file=sys.stderr,
            )
            sys.exit(1)
        leadership.release()  # a standby takes over at once


async def operate(leadership: Leadership | None, **options: Any) -> None:
    """kopf's operator, stopped when the Lease is lost so that two replicas never act at once. The stop flag is an
    asyncio.Event of kopf's own loop: kopf waits for a thread-side flag (a Future, a threading.Event) in a thread
    of the loop's executor, which a flag never raised (a clean exit) would keep alive, and the process with it."""
    stop = asyncio.Event()
    if leadership is not None:
        loop = asyncio.get_running_loop()
        leadership.lost.add_done_callback(lambda _: loop.call_soon_threadsafe(stop.set))
    await kopf.operator(stop_flag=stop, **options)


class _StandbyHealth(BaseHTTPRequestHandler):
    """The liveness probe's answer while the replica stands by (kopf serves it once this replica leads)."""

    def do_GET(self) -> None:
        self.send_response(200 if self.path.split("?")[0] == self.server.path else 404)  # type: ignore[attr-defined]
        self.end_headers()
        self.wfile.write(b"standing by\n")

    def log_message(self, format: str, *args: object) -> None:  # every probe would be a line
        pass


def stand_by(lease: str, liveness: str | None) -> Leadership:
    """Wait until this replica holds `lease` (NAMESPACE/NAME), answering the liveness probe meanwhile; its pod
    (POD_NAMESPACE/POD_NAME, from the downward API) is labelled standby, then leader, so that the chart's Service
    sends the progress reports and the scrapes to the leader alone."""
    namespace, name = lease.split("/")
    # The operator is PID 1 of its container, and PID 1 ignores a signal it has no handler for: without these a
    # standby would ignore the kubelet's SIGTERM and wait for its SIGKILL 30 s later (kopf sets its own once it runs).
    signal.signal(signal.SIGTERM, _stop_standing_by)
    signal.signal(signal.SIGINT, _stop_standing_by)
    pod = (os.environ.get("POD_NAMESPACE"), os.environ.get("POD_NAME"))
    _label_own_pod(pod, "standby")
    server = None
    if liveness:
        url = urllib.parse.urlsplit(liveness)
        server = ThreadingHTTPServer((url.hostname or "0.0.0.0", url.port or 80), _StandbyHealth)
        server.path = url.path or "/"  # type: ignore[attr-defined]
        threading.Thread(target=server.serve_forever, name="rlplace-standby-health", daemon=True).start()
    leadership = Leadership(namespace, name, pod[1])
    logger.warning("standing by: %s waits to hold the Lease %s", leadership.identity, lease)
    leadership.leading.wait()
    logger.warning("leading: %s holds the Lease %s", leadership.identity, lease)
    if server is not None:
        server.shutdown()
        server.server_close()  # kopf serves the probe on the same port from now on
    _label_own_pod(pod, "leader")
    return leadership


def _stop_standing_by(signum: int, _frame: object) -> None:
    logger.warning("stopped while standing by (%s)", signal.Signals(signum).name)
    raise SystemExit(0)


def _label_own_pod(pod: tuple[str | None, str | None], role: str) -> None:
    """The operator acts either way; unlabelled, its pod gets no progress reports or scrapes (the log says why)."""
    if pod[0] and pod[1]:
        refused = label_pod(pod[0], pod[1], {ROLE_LABEL: role})
        if refused:
            logger.error("%s: the Service sends progress reports and scrapes to the leader by this label", refused)


if __name__ == "__main__":
    main()

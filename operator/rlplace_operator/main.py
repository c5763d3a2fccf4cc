"""Operator entry point: the command line, then kopf with every handler of controllers/ registered.

rlplace-operator [--namespace NS ...] [--liveness http://0.0.0.0:8080/healthz] [--progress-port 8081
                 --progress-url http://rlplace-operator.rlplace-system.svc:8081] [--metrics-port 9090]
                 [--pod-start-grace 10] [--pod-start-timeout 180]
"""

from __future__ import annotations

import argparse
import datetime as dt
import logging
import sys

import kopf

from rlplace_operator.controllers import indexes, nodegroup, operator, rljob  # noqa: F401  (registers the handlers)
from rlplace_operator.controllers.operator import QuietTimers, Serving
from rlplace_operator.diagnosis.causes import StartBounds
from rlplace_operator.kube import missing_crds


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
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
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
    kopf.run(
        clusterwide=not args.namespace,
        namespaces=args.namespace,
        liveness_endpoint=args.liveness,
        # One replica by design (the chart's Deployment uses the Recreate strategy), so no kopf peering.
        standalone=True,
        # The startup handlers read what to serve from the memo every handler gets (no module state).
        memo=kopf.Memo(serving=serving, start_bounds=start_bounds),
    )


if __name__ == "__main__":
    main()

"""Operator entry point: settings at start-up, and the handlers (registered on import).

rlplace-operator [--namespace NS ...] [--liveness http://0.0.0.0:8080/healthz] [--peering NAME] [--priority N]
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

import kopf
import kubernetes

from rlplace_operator import handlers  # noqa: F401  (registers the handlers)
from rlplace_operator.k8s import Kube


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    # Progress and last-handled state live in annotations under our own prefix, so the structural status
    # schema never has to accept kopf's bookkeeping.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="rlplace.io")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix="rlplace.io")
    settings.persistence.finalizer = "rlplace.io/finalizer"
    settings.posting.level = logging.INFO
    settings.execution.max_workers = 32
    settings.watching.server_timeout = 300
    settings.networking.request_timeout = 60
    try:
        kubernetes.config.load_incluster_config()
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config()
    memo.kube = Kube(kubernetes.client.ApiClient())


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    return kopf.login_via_client(**kwargs)


def main() -> None:
    parser = argparse.ArgumentParser(prog="rlplace-operator", description="Run the rlplace operator.")
    parser.add_argument("--namespace", "-n", action="append", default=[], help="watch only these namespaces")
    parser.add_argument("--liveness", default=None, help="liveness endpoint, e.g. http://0.0.0.0:8080/healthz")
    parser.add_argument("--peering", default=None, help="kopf peering name (several replicas: one acts)")
    parser.add_argument("--priority", type=int, default=0, help="peering priority of this replica")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(asctime)s %(levelname)s %(message)s"
    )
    kopf.run(
        clusterwide=not args.namespace,
        namespaces=args.namespace,
        liveness_endpoint=args.liveness,
        peering_name=args.peering,
        standalone=args.peering is None,
        priority=args.priority,
    )


if __name__ == "__main__":
    main()

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
from rlplace_operator.handlers.queue import Ledger
from rlplace_operator.k8s import Kube

#: Threads that run the (synchronous) handlers, and the size of the API client's connection pool.
MAX_WORKERS = 32
#: Annotation prefix of kopf's own state on RLJobs and NodeGroups.
KOPF_PREFIX = "kopf.rlplace.io"


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    # Progress and last-handled state live in annotations, so the structural status schema never has to
    # accept kopf's bookkeeping. Not under rlplace.io/: kopf ignores every annotation under its storage
    # prefix when it diffs, and a change of rlplace.io/profile must re-plan the job.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=KOPF_PREFIX)
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix=KOPF_PREFIX)
    settings.persistence.finalizer = f"{KOPF_PREFIX}/finalizer"
    settings.posting.level = logging.INFO
    settings.execution.max_workers = MAX_WORKERS
    # kopf waits this long for more events of one object before handling them; a job is one create event.
    settings.batching.batch_window = 0.02
    settings.watching.server_timeout = 300
    settings.networking.request_timeout = 60
    try:
        kubernetes.config.load_incluster_config()
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config()
    configuration = kubernetes.client.Configuration.get_default_copy()
    # One pooled connection per handler thread: a smaller pool makes threads open (and TLS-handshake) a
    # fresh connection for every call under load.
    configuration.connection_pool_maxsize = MAX_WORKERS
    memo.kube = Kube(kubernetes.client.ApiClient(configuration))
    # One ledger of node reservations for every handler thread (its lock makes admissions one at a time).
    memo.ledger = Ledger()


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    return kopf.login_via_client(**kwargs)


class _QuietTimers(logging.Filter):
    """Drop the "Timer ... succeeded" line that NodeGroup resyncs would log every few seconds per group."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.getMessage().startswith("Timer ") and record.getMessage().endswith(" succeeded."))


def main() -> None:
    parser = argparse.ArgumentParser(prog="rlplace-operator", description="Run the rlplace operator.")
    parser.add_argument("--namespace", "-n", action="append", default=[], help="watch only these namespaces")
    parser.add_argument("--liveness", default=None, help="liveness endpoint, e.g. http://0.0.0.0:8080/healthz")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    # kopf's own log format names the object ([namespace/name]) on every line.
    kopf.configure(verbose=args.verbose, log_prefix=True)
    if not args.verbose:
        logging.getLogger("kopf.objects").addFilter(_QuietTimers())
    kopf.run(
        clusterwide=not args.namespace,
        namespaces=args.namespace,
        liveness_endpoint=args.liveness,
        # One replica by design (the chart's Deployment uses the Recreate strategy), so no kopf peering.
        standalone=True,
    )


if __name__ == "__main__":
    main()

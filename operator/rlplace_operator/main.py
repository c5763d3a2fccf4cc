"""Operator entry point: settings at start-up, and the handlers (registered on import).

rlplace-operator [--namespace NS ...] [--liveness http://0.0.0.0:8080/healthz] [--peering NAME] [--priority N]
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import sys
from typing import Any

import kopf
import kubernetes

from rlplace_operator import handlers  # noqa: F401  (registers the handlers)
from rlplace_operator.handlers.queue import Ledger
from rlplace_operator.k8s import Kube
from rlplace_operator.models import GROUP, VERSION
from rlplace_operator.names import NODEGROUP_PLURAL, RLJOB_PLURAL

#: Threads that run the (synchronous) handlers, and the size of the API client's connection pool.
MAX_WORKERS = 32
#: Annotation prefix of kopf's own state on RLJobs and NodeGroups.
KOPF_PREFIX = "kopf.rlplace.io"
#: Strings longer than this are kept in kopf's last-handled state as their digest only.
DIGEST_OVER_CHARS = 128


def _digested(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _digested(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_digested(item) for item in value]
    if isinstance(value, str) and len(value) > DIGEST_OVER_CHARS:
        return "sha256:" + hashlib.sha256(value.encode()).hexdigest()
    return value


class DigestDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    """kopf's last-handled state in an annotation, with every long string (an entrypoint, a large annotation)
    replaced by its digest: a change is still seen, but the annotation stays a few KiB however large the
    object is, so it never pushes the object past the API server's 256 KiB limit on annotations."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return _digested(super().build(body=body, extra_fields=extra_fields))


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    # Progress and last-handled state live in annotations, so the structural status schema never has to
    # accept kopf's bookkeeping. Not under rlplace.io/: kopf ignores every annotation under its storage
    # prefix when it diffs, and a change of rlplace.io/profile must re-plan the job.
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=KOPF_PREFIX)
    settings.persistence.diffbase_storage = DigestDiffBaseStorage(prefix=KOPF_PREFIX)
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


def missing_crds(api_client: kubernetes.client.ApiClient) -> list[str]:
    """rlplace's resources the API server does not serve (asked through discovery, which needs no RBAC)."""
    try:
        resources = kubernetes.client.CustomObjectsApi(api_client).get_api_resources(GROUP, VERSION).resources
    except kubernetes.client.exceptions.ApiException as err:
        if err.status != 404:
            raise
        resources = []
    served = {r.name for r in resources or []}
    return [f"{plural}.{GROUP}" for plural in (RLJOB_PLURAL, NODEGROUP_PLURAL) if plural not in served]


def main() -> None:
    parser = argparse.ArgumentParser(prog="rlplace-operator", description="Run the rlplace operator.")
    parser.add_argument("--namespace", "-n", action="append", default=[], help="watch only these namespaces")
    parser.add_argument("--liveness", default=None, help="liveness endpoint, e.g. http://0.0.0.0:8080/healthz")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    # kopf's own log format names the object ([namespace/name]) on every line.
    kopf.configure(verbose=args.verbose, log_prefix=True)
    # kopf only watches the resources served when it starts: with a CRD installed later it would never
    # handle that kind. Exit instead, and let Kubernetes restart the pod until the CRDs are there.
    try:
        kubernetes.config.load_incluster_config()
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config()
    with kubernetes.client.ApiClient() as api_client:
        missing = missing_crds(api_client)
    if missing:
        print(
            f"error: the API server does not serve {', '.join(missing)}: install rlplace's CRDs "
            "(kubectl apply --server-side -f crds/, or the Helm chart); exiting so that the operator restarts",
            file=sys.stderr,
        )
        sys.exit(1)
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

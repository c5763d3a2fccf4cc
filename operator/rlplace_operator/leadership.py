"""Which operator replica acts: the holder of a coordination.k8s.io Lease, elected with the Kubernetes client's
own `kubernetes.leaderelection` (docs/operator.md, "Two replicas, one acting"). Beside kube.py, the one other
module that talks to the API server: the election's library makes its own calls."""

from __future__ import annotations

import concurrent.futures
import logging
import socket
import threading
import uuid

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.leaderelection import electionconfig, leaderelection
from kubernetes.leaderelection.resourcelock.leaselock import LeaseLock

from rlplace_operator.api.conditions import short
from rlplace_operator.kube import load_config

#: The operator's leader election, with client-go's defaults for controllers: a standby takes the Lease
#: LEASE_SECONDS after it last saw its holder renew it; a holder that cannot renew for RENEW_DEADLINE_SECONDS stops
#: leading; both try every RETRY_SECONDS.
LEASE_SECONDS = 15
RENEW_DEADLINE_SECONDS = 10
RETRY_SECONDS = 2


class _Election(leaderelection.LeaderElection):
    """kubernetes.leaderelection's elector, which has no stop, with one: once `released` is set it neither
    renews nor acquires, so a Lease given back is not taken again by its own renew loop."""

    def __init__(self, election_config: electionconfig.Config, released: threading.Event) -> None:
        super().__init__(election_config)
        self.released = released

    def try_acquire_or_renew(self) -> bool:
        """One try, False when it fails in any way. The library catches the API's error answers only: an API
        server it cannot reach (urllib3's MaxRetryError) ended its thread, so a leader stopped renewing without
        being told (and acted on beside the standby that took over) and a standby never tried again."""
        if self.released.is_set():
            return False
        try:
            return bool(super().try_acquire_or_renew())
        except Exception as err:  # any failure to reach the API server is a failed try
            logging.getLogger("rlplace_operator").warning(
                "leader election: the Lease could not be read or written: %s", short(str(err))
            )
            return False


class _ElectionNews(logging.Filter):
    """kubernetes.leaderelection logs at INFO both what an operator must see (the Lease unreadable or not
    writable: RBAC, the API server away; a new leader) and every renewal and every look a standby takes (each
    2 s). Only the former pass."""

    NEWS = ("Error retrieving", "Failed to", "failed to", "Leader has switched", "onstarted_leading raised")

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage().startswith(self.NEWS)


class Leadership:
    """One operator replica acts at a time: the holder of the Lease `namespace/name` (coordination.k8s.io, as
    KubeRay's and Kueue's controllers elect theirs). The election runs in a thread from construction on;
    `leading` is set once this process holds the Lease, `lost` is done once it failed to renew it (another
    replica may lead from then on: this one must stop acting). `lost` is a Future so that its callback can stop
    kopf's event loop from the election's thread (main.py)."""

    def __init__(self, namespace: str, name: str, pod: str | None = None) -> None:
        load_config()
        # In a pod, the pod's name: a container the kubelet restarts after a crash takes its own Lease back at once
        # (one container runs in a pod at a time), where another pod's standby waits LEASE_SECONDS. Elsewhere,
        # client-go's identity: the host and this process.
        self.identity = pod or f"{socket.gethostname()}_{uuid.uuid4()}"
        self.namespace, self.name = namespace, name
        self.leading, self.released = threading.Event(), threading.Event()
        self.lost: concurrent.futures.Future[None] = concurrent.futures.Future()
        lock = LeaseLock(name, namespace, self.identity)
        election_config = electionconfig.Config(
            lock, LEASE_SECONDS, RENEW_DEADLINE_SECONDS, RETRY_SECONDS, self.leading.set, self._stopped
        )
        logging.getLogger("leaderelection").addFilter(_ElectionNews())
        election = _Election(election_config, self.released)
        threading.Thread(target=election.run, name="rlplace-leader-election", daemon=True).start()

    def _stopped(self) -> None:
        if not self.released.is_set() and not self.lost.done():
            self.lost.set_result(None)

    def release(self) -> None:
        """Give the Lease back as client-go's ReleaseOnCancel does (no holder, a 1 s duration): a standby takes
        it at its next try instead of LEASE_SECONDS later. Nothing when another replica holds it."""
        self.released.set()
        leases = client.CoordinationV1Api()
        for _ in range(3):
            try:
                lease = leases.read_namespaced_lease(self.name, self.namespace)
                if lease.spec is None or lease.spec.holder_identity != self.identity:
                    return
                lease.spec.holder_identity = None
                lease.spec.lease_duration_seconds = 1
                leases.replace_namespaced_lease(self.name, self.namespace, lease)  # conditional on its version
                return
            except ApiException as err:
                if err.status != 409:  # 409: renewed meanwhile by the loop that has just stopped; read again
                    return

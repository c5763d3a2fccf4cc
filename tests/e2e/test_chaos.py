"""Status stays true through faults (issue 41), shortened: while two resumable jobs run on the real nodes (one
waits for the other's node in rlplace's queue), each fault once, the invariant checker (benchmarks/invariants.py)
after every one; both jobs then succeed and nothing is left that the checker would name. The first job's binding
is verified while its driver runs, and the operator's restart under it changes nothing (its RayJob, Ray cluster,
attempt and submitter pod stay the ones they were). The long run is
benchmarks/chaos.py (docs/status-truth.md has its table)."""

from __future__ import annotations

import os
import random
import signal
import time

import pytest
from chaos import FAULTS as ALL_FAULTS
from chaos import RECOVERY_CAP_SECONDS, Cluster, Load, inject, recover
from test_lifecycle import resumable_job
from test_run import RunJobs, real_nodes, run_jobs  # noqa: F401  (fixtures)

from e2e_cluster import e2e_dir, wait_for
from invariants import Checker, ClusterState
from rlplace_fixtures import RELEASE_NAMESPACE, InClusterOperator, OperatorProcess, kubectl

pytestmark = pytest.mark.e2e

#: The faults of this short run, each once: those that pass in seconds (the kubelet stopped for a minute and the
#: Helm upgrade are the benchmark's).
FAULTS = ("operator-kill", "apiserver-restart", "scheduler-kill", "kuberay-kill", "kueue-kill", "containerd-kill")


def test_status_stays_true_through_faults_and_both_jobs_succeed(
    run_jobs: RunJobs,  # noqa: F811
    real_nodes: list[str],  # noqa: F811
    kubeconfig: str,
    rlplace_operator: object,
) -> None:
    if not (e2e_dir() / "cluster" / "cmds").is_dir():
        pytest.skip("the faults hit the processes of a local cluster of `make cluster-up`; KUBECONFIG is another")
    cluster = Cluster(kubeconfig, e2e_dir())
    faults = dict(ALL_FAULTS)
    if isinstance(rlplace_operator, OperatorProcess):  # the operator runs here, not in a pod: kill that process
        faults["operator-kill"] = lambda cluster, rng: kill_local_operator(rlplace_operator)
    for name in ("first", "second"):  # one real a800 node: the second waits in rlplace's queue
        run_jobs.create(resumable_job(run_jobs, name))
    load = Load(cluster, run_jobs.namespace, {}, {})
    # The binding is verified while the driver runs (the operator reads its log on its own).
    running = wait_for(lambda: verified_while_running(run_jobs, "first"), 300, "first verified while it runs")
    rayjob = run_jobs.ray("rayjobs", "first")
    checker, rng = Checker(), random.Random(41)
    for kind in FAULTS:
        before = load.jobs()
        what, during = inject(cluster, checker, faults[kind], rng)
        after = recover(cluster, load, checker, before, during)
        assert after.violations == [], f"{kind} ({what}): {after.violations}"
        assert after.seconds < RECOVERY_CAP_SECONDS, f"{kind}: not back on track in {after.seconds:.0f} s"
        if kind == "operator-kill":
            if isinstance(rlplace_operator, InClusterOperator):  # the leader's pod was hit, not the standby's
                assert "killed the leading operator's processes" in what, what
                wait_for(rlplace_operator.leader_ready, 60, "an operator pod leading again")
                # A leader that stops cleanly gives its Lease back: the other pod leads within seconds, well before
                # the Lease (15 s) would have expired.
                leader = rlplace_operator.leader()
                kubectl(kubeconfig, "delete", "pod", "-n", RELEASE_NAMESPACE, leader, "--wait=false")
                deleted = time.monotonic()
                wait_for(lambda old=leader: rlplace_operator.leader() not in (None, old), 30, "the standby leading")
                assert time.monotonic() - deleted < 10, f"the standby took {time.monotonic() - deleted:.0f} s"
                wait_for(rlplace_operator.leader_ready, 60, "the new leader ready")
            # An operator restart under a running driver changes nothing: the same RayJob, Ray cluster, attempt,
            # and one submitter pod.
            now = run_jobs.status("first")
            assert run_jobs.ray("rayjobs", "first")["metadata"]["uid"] == rayjob["metadata"]["uid"]
            assert (now["rayCluster"], now["attempts"]) == (running["rayCluster"], running["attempts"]), now
            submitters = run_jobs.core.list_namespaced_pod(
                run_jobs.namespace, label_selector="batch.kubernetes.io/job-name=first"
            )
            assert len(submitters.items) == 1
    for name in ("first", "second"):
        ended = wait_for(
            lambda name=name: (s := run_jobs.status(name)).get("phase") in ("Succeeded", "Failed") and s,
            400,
            f"{name} ended",
            interval=2,
        )
        assert ended["phase"] == "Succeeded", ended.get("message")
    assert checker.check(ClusterState.read(cluster.api)) == []


def verified_while_running(run_jobs: RunJobs, name: str) -> dict | None:  # noqa: F811
    status = run_jobs.status(name)
    assert status.get("phase") not in ("Failed", "Succeeded"), status
    verified = any(c["type"] == "BindingVerified" and c["status"] == "True" for c in status.get("conditions") or [])
    return status if verified and status.get("phase") == "Running" else None


def kill_local_operator(operator: OperatorProcess) -> str:
    assert operator.process is not None
    os.kill(operator.process.pid, signal.SIGKILL)
    operator.process.wait()
    operator.start()
    return "killed the operator's process (-9) and started it again"

"""Jobs whose pods cannot start say why within 30 s and give their node to the next job (issue 31), on the real
nodes: a Secret volume, an envFrom Secret, a PersistentVolumeClaim and a host directory (the resumable example's
checkpoint volume) that do not exist. All four are made at once on the one node of real-a800, with a good job
queued behind them: each in turn is admitted, fails naming what it lacks, and gives the node back, and the good
job then runs on that node."""

from __future__ import annotations

import datetime as dt

import pytest
from test_run import RunJobs, example, real_nodes, run_jobs  # noqa: F401  (fixtures)

from e2e_cluster import wait_for
from rlplace_fixtures import kubectl_rlplace

pytestmark = pytest.mark.e2e

#: How soon after admission a job whose pods cannot start must say why (the issue's bound).
NAMED_WITHIN = dt.timedelta(seconds=30)


def _job(name: str, **pods: object) -> dict:
    body = example("rljob-collocated-run.yaml")
    body["metadata"]["name"] = name
    body["spec"]["pods"] = pods
    return body


def _mounted(volume: dict) -> dict:
    return {"volumes": [volume], "volumeMounts": [{"name": volume["name"], "mountPath": "/data"}]}


def _time(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


def _condition(status: dict, type_: str) -> dict:
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), {})


def test_missing_secret_env_claim_and_host_directory_are_named_within_30_s_and_the_node_runs_the_next_job(
    run_jobs: RunJobs,  # noqa: F811
    real_nodes: list[str],  # noqa: F811
    kubeconfig: str,
) -> None:
    missing_dir = f"/var/tmp/rlplace-e2e-no-such-directory/{run_jobs.namespace}"
    resumable = example("rljob-resumable-run.yaml")
    resumable["metadata"]["name"] = "no-host-dir"
    resumable["spec"]["checkpoint"]["volume"]["hostPath"]["path"] = missing_dir
    cases = {
        "no-secret": (
            _job("no-secret", **_mounted({"name": "creds", "secret": {"secretName": "no-such-secret"}})),
            "SecretNotFound",
            "Secret 'no-such-secret' not found",
        ),
        "no-env": (
            _job("no-env", envFrom=[{"secretRef": {"name": "no-such-env"}}]),
            "SecretNotFound",
            "Secret 'no-such-env' not found",
        ),
        "no-claim": (
            _job("no-claim", **_mounted({"name": "data", "persistentVolumeClaim": {"claimName": "no-such-claim"}})),
            "ClaimNotFound",
            "PersistentVolumeClaim 'no-such-claim' not found",
        ),
        "no-host-dir": (resumable, "HostPathMissing", f"host path '{missing_dir}' is missing or not a directory"),
    }
    for body, _, _ in cases.values():
        run_jobs.create(body)
    following = example("rljob-collocated-run.yaml")
    following["metadata"]["name"] = "following"
    following["spec"]["priority"] = -1  # behind the four: it gets the node once they have given it back
    run_jobs.create(following)

    def all_failed() -> dict | None:
        statuses = {name: run_jobs.status(name) for name in cases}
        return statuses if all(s.get("phase") == "Failed" for s in statuses.values()) else None

    # Four jobs one after another on one node, each named within 30 s of its admission.
    statuses = wait_for(all_failed, 4 * 45, "the four jobs to fail naming what they lack", interval=1)
    for name, (_, reason, named) in cases.items():
        status = statuses[name]
        ready = _condition(status, "RayClusterReady")
        assert ready.get("reason") == reason, (name, status)
        # The pod named with its place: a worker with its node and the plan's processes on it, or the head.
        message = status["message"]
        assert named in message, (name, message)
        assert "(node rank 0, node 'real-a800-0', actor ranks 0-3" in message or "Ray head pod '" in message, message
        # and `kubectl rlplace why` says it first, with where to look further
        why = kubectl_rlplace(kubeconfig, "why", name, "-n", run_jobs.namespace)
        assert why.returncode == 0 and named in why.stdout.splitlines()[0], (why.stdout, why.stderr)
        # Admitted's last transition is its grant (a Failed job keeps it True); when the job said why is the
        # operator's Warning Event with that reason on the RLJob.
        admitted = _time(_condition(status, "Admitted")["lastTransitionTime"])
        said = [
            e
            for e in run_jobs.core.list_namespaced_event(
                run_jobs.namespace, field_selector=f"involvedObject.name={name},reason={reason}"
            ).items
            if e.involved_object.kind == "RLJob"
        ]
        assert said, (name, status)
        took = min(e.first_timestamp or e.event_time for e in said) - admitted
        print(f"{name}: {reason} said {took.total_seconds():.0f} s after admission")
        assert took <= NAMED_WITHIN, (name, took, status)
        assert status.get("rayJob") is None and status.get("rayCluster") is None, status

    # The node is given back each time: the job queued behind all four runs on it.
    def following_runs() -> bool:
        pods = run_jobs.core.list_namespaced_pod(
            run_jobs.namespace, label_selector="rlplace.io/job=following,ray.io/node-type=worker"
        ).items
        return any(p.status.phase == "Running" and p.spec.node_name == "real-a800-0" for p in pods)

    wait_for(following_runs, 90, "the next job's worker running on real-a800-0", interval=1)

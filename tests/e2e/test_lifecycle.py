"""The job lifecycle under bursts and failures (issue 21): one reconcile, a queue that never stalls, failures
named, restarts recorded.

- any cluster (kwok nodes): a burst of jobs on as many fresh nodes all get their RayCluster, with no handler or
  timer exception in the operator's log; a job whose pods the API refuses (a ResourceQuota) names the cause
  and gives its nodes to the job queued behind it within 60 s.
- real nodes: an image that cannot be pulled names the cause and gives the nodes to the next job within 60 s;
  a worker pod deleted mid-run fails the job naming the pod and its node; the head pod deleted mid-run shows
  attempts 2 and a fresh binding check.
"""

from __future__ import annotations

import datetime as dt
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from kubernetes import client
from test_run import RunJobs, example, real_nodes, run_jobs  # noqa: F401  (fixtures)

from e2e_cluster import e2e_dir, unverified, wait_for
from rlplace_fixtures import RELEASE_NAMESPACE, InClusterOperator, Jobs, run_tool

pytestmark = pytest.mark.e2e

GROUP, VERSION = "rlplace.io", "v1alpha1"
EXCEPTION_MARKERS = ("failed with an exception", "Traceback (most recent call last)")


def condition(status: dict, type_: str) -> dict:
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), {})


def operator_log(operator: object) -> str:
    """The session operator's log so far: the local process's file, or the in-cluster pod's `kubectl logs`."""
    if isinstance(operator, InClusterOperator):
        return "".join(
            run_tool("kubectl", operator.kubeconfig, "logs", "-n", RELEASE_NAMESPACE, pod, check=False).stdout
            for pod in operator._pods()
        )
    path: Path = e2e_dir() / "operator-e2e.log"
    return path.read_text(errors="replace") if path.exists() else ""


def exceptions_in(log: str) -> list[str]:
    """Lines that say a handler or timer raised."""
    return [line for line in log.splitlines() if any(marker in line for marker in EXCEPTION_MARKERS)]


def one_node_job(name: str, group: str, **spec: object) -> dict:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "RLJob",
        "metadata": {"name": name},
        "spec": {"nodeGroups": [group], "componentPlacement": [{"components": "actor", "placement": "0-7"}], **spec},
    }


@pytest.fixture
def burst_group(k8s: client.ApiClient, fake_node: Callable[..., object]):
    """A NodeGroup over fresh 8-GPU kwok nodes of its own (a factory: nodes -> group name)."""
    custom = client.CustomObjectsApi(k8s)
    made: list[str] = []

    def make(nodes: int) -> str:
        name = f"burst-{uuid.uuid4().hex[:6]}"
        for i in range(nodes):
            fake_node(f"{name}-{i:03d}", labels={"rlplace.io/burst": name, "rlplace.io/node-rank": str(i)}, gpus=8)
        group = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "NodeGroup",
            "metadata": {"name": name},
            "spec": {"nodeSelector": {"matchLabels": {"rlplace.io/burst": name}}},
        }
        custom.create_cluster_custom_object(GROUP, VERSION, "nodegroups", group)
        made.append(name)

        def ready() -> bool:
            status = custom.get_cluster_custom_object(GROUP, VERSION, "nodegroups", name).get("status") or {}
            return status.get("readyNodes") == nodes

        wait_for(ready, 60, f"{nodes} nodes ready in NodeGroup {name}")
        return name

    yield make
    for name in made:
        custom.delete_cluster_custom_object(GROUP, VERSION, "nodegroups", name)


# -- any cluster ------------------------------------------------------------------------------------------


def test_a_burst_of_jobs_all_get_their_rayclusters_and_nothing_raises(
    jobs: Jobs, burst_group, rlplace_operator: object
) -> None:
    count = 30
    group = burst_group(count)
    before = len(exceptions_in(operator_log(rlplace_operator)))
    for i in range(count):
        jobs.create(one_node_job(f"b-{i:03d}", group))

    def all_have_clusters() -> bool:
        listed = jobs.custom.list_namespaced_custom_object("ray.io", "v1", jobs.namespace, "rayclusters")["items"]
        return len(listed) >= count

    wait_for(all_have_clusters, 120, f"{count} RayClusters")
    listed = jobs.custom.list_namespaced_custom_object("ray.io", "v1", jobs.namespace, "rayclusters")["items"]
    pinned = [rc["metadata"]["annotations"]["rlplace.io/nodes"] for rc in listed]
    assert len(set(pinned)) == count  # one node each, never shared
    assert exceptions_in(operator_log(rlplace_operator))[before:] == []


def test_a_pod_the_api_refuses_names_the_cause_and_the_next_job_gets_the_nodes(
    jobs: Jobs, burst_group, k8s: client.ApiClient
) -> None:
    group = burst_group(1)
    core = client.CoreV1Api(k8s)
    quota = {"metadata": {"name": "no-pods"}, "spec": {"hard": {"pods": "0"}}}
    core.create_namespaced_resource_quota(jobs.namespace, quota)
    jobs.create(one_node_job("refused", group))
    jobs.create(one_node_job("next", group, priority=-1))  # behind it in the queue

    def named() -> dict | None:
        status = jobs.get("refused").get("status") or {}
        return status if "quota" in (status.get("message") or "").lower() else None

    started = time.monotonic()
    status = wait_for(named, 60, "the refused job to name the quota")
    assert status["phase"] in ("Queued", "Failed"), status
    assert len(status["message"]) <= 600
    # Its nodes go to the next job (the refused one backs off, or ended): the next one's RayCluster is made.
    core.delete_namespaced_resource_quota("no-pods", jobs.namespace)
    wait_for(lambda: jobs.raycluster("next"), 60 - (time.monotonic() - started) + 30, "the next job's RayCluster")


# -- real nodes -------------------------------------------------------------------------------------------


def ray_pods(jobs: RunJobs, job: str, kind: str) -> list[client.V1Pod]:
    """A job's Ray pods of one kind (head, worker): by the job label, since KubeRay names a RayJob's cluster
    after the RayJob with a random suffix."""
    selector = f"rlplace.io/job={job},ray.io/node-type={kind}"
    return jobs.core.list_namespaced_pod(jobs.namespace, label_selector=selector).items


def wait_group_ready(jobs: RunJobs, group: str) -> None:
    """The real nodes' NodeGroup observed with a ready node (the fixture applies it just before)."""

    def ready() -> bool:
        body = jobs.custom.get_cluster_custom_object(GROUP, VERSION, "nodegroups", group)
        return bool((body.get("status") or {}).get("readyNodes"))

    wait_for(ready, 60, f"NodeGroup {group} ready")


def long_driver(seconds: int) -> str:
    """The reference driver running about `seconds` one-second synthetic steps (actor 0.5 s, rollout 0.3 s,
    reward 0.2 s on the collocated GPUs): its processes stay alive on the workers the whole time, so losing a
    pod fails it. One command: KubeRay's submitter runs the entrypoint inside `ray job submit ... -- <entrypoint>`
    unquoted, so a `&&` chain would run its second half in the submitter pod, not in the Ray job."""
    laws = " ".join(f"--law {law}" for law in ("actor=0.5", "rollout=0.3", "reward=0.2"))
    return f"python -m placement_core.launcher.demo --steps {seconds} --workload synthetic {laws}"


def test_an_image_that_cannot_be_pulled_names_the_cause_and_the_next_job_gets_the_nodes(
    run_jobs: RunJobs,  # noqa: F811  (the fixtures of test_run)
    real_nodes: list[str],  # noqa: F811
) -> None:
    wait_group_ready(run_jobs, "real-a800")
    body = example("rljob-collocated-run.yaml")
    body["metadata"]["name"] = "unpullable"
    body["spec"]["ray"]["image"] = "localhost/rlplace/does-not-exist:1"
    run_jobs.create(body)
    following = example("rljob-collocated-run.yaml")
    following["metadata"]["name"] = "following"
    following["spec"]["priority"] = -1
    run_jobs.create(following)
    started = time.monotonic()

    def named() -> dict | None:
        status = run_jobs.status("unpullable")
        message = status.get("message") or ""
        return status if "does-not-exist" in message or "ImagePull" in message else None

    status = wait_for(named, 60, "the unpullable job to name the image")
    assert status["phase"] in ("Queued", "Failed"), status
    assert len(status["message"]) <= 600
    wait_for(lambda: run_jobs.ray("rayjobs", "following"), 60 - (time.monotonic() - started) + 5, "next job's RayJob")


@unverified
def test_a_worker_pod_deleted_mid_run_fails_the_job_naming_the_pod_and_node(
    run_jobs: RunJobs,  # noqa: F811  (the fixtures of test_run)
    real_nodes: list[str],  # noqa: F811
) -> None:
    body = example("rljob-collocated-run.yaml")
    body["metadata"]["name"] = "lose-worker"
    body["spec"]["entrypoint"] = long_driver(240)
    run_jobs.create(body)
    wait_for(
        lambda: condition(run_jobs.status("lose-worker"), "BindingVerified").get("status") == "True", 300, "verified"
    )
    (worker,) = ray_pods(run_jobs, "lose-worker", "worker")[:1]
    run_jobs.core.delete_namespaced_pod(worker.metadata.name, run_jobs.namespace)
    status = run_jobs.wait_phase("lose-worker", "Failed", timeout=240)
    assert worker.metadata.name in status["message"], status["message"]
    assert worker.spec.node_name in status["message"], status["message"]
    assert len(status["message"]) <= 600
    assert "[state-dump]" not in status["message"]


@unverified
def test_the_head_pod_deleted_mid_run_shows_attempt_2_and_a_fresh_binding_check(
    run_jobs: RunJobs,  # noqa: F811  (the fixtures of test_run)
    real_nodes: list[str],  # noqa: F811
) -> None:
    body = example("rljob-collocated-run.yaml")
    body["metadata"]["name"] = "lose-head"
    body["spec"]["entrypoint"] = long_driver(60)
    run_jobs.create(body)
    wait_for(
        lambda: condition(run_jobs.status("lose-head"), "BindingVerified").get("status") == "True", 300, "verified"
    )
    assert run_jobs.status("lose-head")["attempts"] == 1
    (head,) = ray_pods(run_jobs, "lose-head", "head")[:1]
    deleted_at = time.time()
    run_jobs.core.delete_namespaced_pod(head.metadata.name, run_jobs.namespace)

    def second_attempt() -> dict | None:
        status = run_jobs.status("lose-head")
        return status if status.get("attempts") == 2 else None

    status = wait_for(second_attempt, 300, "attempts 2")
    assert status["restarts"][-1]["attempt"] == 2 and status["restarts"][-1]["reason"], status["restarts"]
    assert len(status["restarts"][-1]["message"]) <= 300

    def verified_again() -> dict | None:
        now = run_jobs.status("lose-head")
        check = condition(now, "BindingVerified")
        if check.get("status") != "True" or now.get("attempts") != 2:
            return None
        checked = dt.datetime.fromisoformat(check["lastTransitionTime"].replace("Z", "+00:00")).timestamp()
        return now if checked >= deleted_at - 1 else None  # verified again after the head was lost

    again = wait_for(verified_again, 300, "BindingVerified for attempt 2")
    assert again["phase"] in ("Running", "Succeeded"), again

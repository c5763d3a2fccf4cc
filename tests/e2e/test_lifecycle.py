"""The job lifecycle under bursts and failures (issue 21): one reconcile, a queue that never stalls, failures
named, restarts recorded.

- any cluster (kwok nodes): a burst of jobs on as many fresh nodes all get their RayCluster, with no handler or
  timer exception in the operator's log; a job whose pods the API refuses (a ResourceQuota) names the cause
  and gives its nodes to the job queued behind it within 60 s.
- real nodes: an image that cannot be pulled names the cause and gives the nodes to the next job within 60 s.
- real nodes, restarts (issue 22): a worker pod force-deleted mid-run restarts the job, which resumes from its
  last checkpoint and Succeeds as attempt 2 (shown in test_replace_in_place.py, where the trainer's pod of a job
  with Replace components is lost; restartPolicy Never failing the job instead, naming the pod and node, is
  decided in tests/operator/reconcile/test_decide.py over a recorded snapshot); the head pod deleted mid-run
  shows attempt 2 and a fresh binding check; a node
  lost mid-run (cordoned, the job's worker force-deleted) is left out, the job waits Queued while the only other
  node of its group is busy, then runs there, resumes and Succeeds; a driver that fails while the operator is
  down is restarted once when it is back.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from kubernetes import client
from test_run import RunJobs, example, real_nodes, run_jobs  # noqa: F401  (fixtures)

from placement_core.launcher.checkpoint import CheckpointStore

from e2e_cluster import e2e_dir, wait_for
from rlplace_fixtures import RELEASE_NAMESPACE, InClusterOperator, Jobs, exceptions_in, run_tool

pytestmark = pytest.mark.e2e

GROUP, VERSION = "rlplace.io", "v1alpha1"


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
        # Said while the kubelet retries the pull, then acted on after its grace: the nodes are given back.
        given_back = status.get("phase") in ("Queued", "Failed")
        return status if given_back and ("does-not-exist" in message or "ImagePull" in message) else None

    status = wait_for(named, 60, "the unpullable job to name the image and give its nodes back")
    assert status["phase"] in ("Queued", "Failed"), status
    assert len(status["message"]) <= 600
    wait_for(lambda: run_jobs.ray("rayjobs", "following"), 60 - (time.monotonic() - started) + 5, "next job's RayJob")


# -- restarts on failure (issue 22: restartPolicy, re-placement, resume from a checkpoint) ------------------

#: Steps of the resumable driver and its checkpoint interval: about one second a step.
STEPS, EVERY = 40, 5
#: Where the jobs' checkpoint directories live on the host: every real node is a network namespace of this
#: machine, so a hostPath is one directory for all of them.
CHECKPOINTS = Path("/var/tmp/rlplace-e2e-checkpoints")


def resumable_job(run_jobs: RunJobs, name: str, group: str = "real-a800", **run: object) -> dict:  # noqa: F811
    """examples/rljob-resumable-run.yaml named `name` on `group`, STEPS steps with a checkpoint every EVERY, its
    checkpoint volume a fresh host directory the pods' user (uid 1000) can write."""
    body = example("rljob-resumable-run.yaml")
    body["metadata"]["name"] = name
    body["spec"]["nodeGroups"] = [group]
    body["spec"]["entrypoint"] = (
        f"python -m placement_core.launcher.demo --steps {STEPS} --checkpoint-every {EVERY} --workload synthetic "
        "--law actor=0.5 --law rollout=0.3 --law reward=0.2"
    )
    directory = CHECKPOINTS / run_jobs.namespace / name
    directory.mkdir(parents=True, exist_ok=True)
    directory.chmod(0o1777)
    for parent in (CHECKPOINTS, CHECKPOINTS / run_jobs.namespace):
        parent.chmod(0o755)
    body["spec"]["checkpoint"]["volume"]["hostPath"]["path"] = str(directory)
    body["spec"]["run"].update(run)
    return body


def wait_verified_at(run_jobs: RunJobs, name: str, step: int, timeout: float = 300) -> dict:  # noqa: F811
    """The job Running with its binding verified and a checkpoint of `step` or later in its host directory."""
    store = CheckpointStore(CHECKPOINTS / run_jobs.namespace / name)

    def there() -> dict | None:
        status = run_jobs.status(name)
        assert status.get("phase") != "Failed", status.get("message")
        verified = condition(status, "BindingVerified").get("status") == "True"
        return status if verified and any(s >= step for s in store.steps()) else None

    return wait_for(there, timeout, f"{name} verified with a checkpoint of step {step}", interval=1)


def wait_ended(run_jobs: RunJobs, name: str, timeout: float) -> dict:  # noqa: F811
    def ended() -> dict | None:
        status = run_jobs.status(name)
        return status if status.get("phase") in ("Succeeded", "Failed") else None

    return wait_for(ended, timeout, f"{name} to end", interval=1)


def force_delete(run_jobs: RunJobs, pod: client.V1Pod) -> None:  # noqa: F811
    run_jobs.core.delete_namespaced_pod(pod.metadata.name, run_jobs.namespace, grace_period_seconds=0)


def summary_line(kubeconfig: str, namespace: str, job: str) -> str:
    """The driver's `summary: attempt N ran ... resumed from step S, repeated R` line (this attempt's log)."""
    log = run_tool("kubectl", kubeconfig, "logs", "-n", namespace, f"job/{job}", check=False).stdout
    lines = [line for line in log.splitlines() if line.startswith("summary: attempt")]
    assert lines, log[-2000:]
    return lines[-1]


def test_the_head_pod_deleted_mid_run_shows_attempt_2_and_a_fresh_binding_check(
    run_jobs: RunJobs,  # noqa: F811  (the fixtures of test_run)
    real_nodes: list[str],  # noqa: F811
) -> None:
    run_jobs.create(resumable_job(run_jobs, "lose-head"))
    before = wait_verified_at(run_jobs, "lose-head", 2 * EVERY)
    assert before["attempts"] == 1, before
    first_check = condition(before, "BindingVerified")["lastTransitionTime"]
    (head,) = ray_pods(run_jobs, "lose-head", "head")[:1]
    # Deleted with its grace period, as `kubectl delete pod` does: the Ray cluster, its driver and its GCS go.
    run_jobs.core.delete_namespaced_pod(head.metadata.name, run_jobs.namespace)

    def verified_again() -> dict | None:
        status = run_jobs.status("lose-head")
        check = condition(status, "BindingVerified")
        if status.get("attempts") != 2 or check.get("status") != "True":
            return None
        return status if check["lastTransitionTime"] != first_check else None

    try:
        again = wait_for(verified_again, 300, "attempt 2 with its own binding verified", interval=1)
    except TimeoutError as err:
        raise AssertionError(f"{err}; status now: {run_jobs.status('lose-head')}") from None
    restart = again["restarts"][-1]
    assert restart["attempt"] == 2 and restart["reason"] and len(restart["message"]) <= 300, restart
    status = wait_ended(run_jobs, "lose-head", 400)
    assert status["phase"] == "Succeeded", status.get("message")
    assert (status["attempts"], status["restartCount"]) == (2, 1), status


@pytest.fixture
def two_node_group(k8s: client.ApiClient, real_nodes: list[str]) -> Iterator[str]:  # noqa: F811
    """A NodeGroup of the two real GPU nodes (real-4090-0 first by name: both are rank 0), and every node
    uncordoned afterwards."""
    custom, core = client.CustomObjectsApi(k8s), client.CoreV1Api(k8s)
    name = f"real-gpus-{uuid.uuid4().hex[:5]}"
    selector = {"matchExpressions": [{"key": "rlplace.io/real-gpu-type", "operator": "In", "values": ["a800", "4090"]}]}
    body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "NodeGroup", "metadata": {"name": name}}
    custom.create_cluster_custom_object(GROUP, VERSION, "nodegroups", {**body, "spec": {"nodeSelector": selector}})

    def ready() -> bool:
        status = custom.get_cluster_custom_object(GROUP, VERSION, "nodegroups", name).get("status") or {}
        return status.get("readyNodes") == 2

    try:
        wait_for(ready, 60, f"NodeGroup {name} with 2 ready nodes")
        yield name
    finally:
        for node in ("real-4090-0", "real-a800-0"):
            core.patch_node(node, {"spec": {"unschedulable": None}})
        custom.delete_cluster_custom_object(GROUP, VERSION, "nodegroups", name)


def placed_nodes(status: dict) -> set[str]:
    return {n for c in (status.get("placement") or {}).get("components") or [] for n in c.get("nodes") or []}


def test_a_node_lost_mid_run_is_left_out_the_job_waits_queued_for_a_healthy_node_and_resumes_there(
    run_jobs: RunJobs,  # noqa: F811  (the fixtures of test_run)
    two_node_group: str,
    kubeconfig: str,
) -> None:
    """The node (cordoned, its job's worker force-deleted) is left out for the job; the only other node of its
    group is held by another job, so it waits Queued saying so; when that job goes, it runs there, resumes
    and Succeeds, its plan's node changed and its binding verified on the new node."""
    run_jobs.create(resumable_job(run_jobs, "lose-node", two_node_group))
    first = wait_verified_at(run_jobs, "lose-node", EVERY)
    (lost,) = placed_nodes(first)
    holder = example("rljob-resumable-run.yaml")
    holder["metadata"]["name"] = "holder"
    holder["spec"]["nodeGroups"] = [two_node_group]
    holder["spec"]["entrypoint"] = long_driver(600)
    del holder["spec"]["checkpoint"]
    run_jobs.create(holder)

    def holding() -> dict | None:
        # The holder only has to hold the other node (admitted, its RayJob made), not run yet: lose-node runs
        # STEPS one-second steps, and waiting for the holder's driver too could outlast them.
        status = run_jobs.status("holder")
        return status if status.get("phase") in ("Provisioning", "Running") and status.get("rayJob") else None

    other = wait_for(holding, 60, "holder holding its node")
    assert placed_nodes(other) and lost not in placed_nodes(other)
    assert run_jobs.status("lose-node").get("phase") == "Running", "lose-node ended before its node was lost"

    run_jobs.core.patch_node(lost, {"spec": {"unschedulable": True}})
    lost_at = time.monotonic()
    for pod in ray_pods(run_jobs, "lose-node", "worker"):
        force_delete(run_jobs, pod)

    def queued() -> dict | None:
        status = run_jobs.status("lose-node")
        assert status.get("phase") not in ("Succeeded", "Failed"), status
        return status if status.get("phase") == "Queued" and status.get("waitingFor") else None

    waiting = wait_for(queued, 240, "lose-node Queued for a healthy node", interval=1)
    detected = time.monotonic() - lost_at
    assert [e["name"] for e in waiting["excludedNodes"]] == [lost], waiting
    assert waiting["restarts"][-1]["nodesReplaced"] == [lost], waiting["restarts"]
    assert "free node" in waiting["waitingFor"] or "previous attempt" in waiting["waitingFor"], waiting

    run_jobs.delete("holder")
    status = wait_ended(run_jobs, "lose-node", 400)
    assert status["phase"] == "Succeeded", status.get("message")
    assert status["attempts"] == 2, status
    assert lost not in placed_nodes(status) and placed_nodes(status) == placed_nodes(other), status["placement"]
    assert condition(status, "BindingVerified").get("status") == "True"
    summary = summary_line(kubeconfig, run_jobs.namespace, "lose-node")
    assert summary.startswith("summary: attempt 2 ") and "resumed from step 0," not in summary, summary
    print(f"node loss: restart detected (Queued) {detected:.0f} s after the loss")

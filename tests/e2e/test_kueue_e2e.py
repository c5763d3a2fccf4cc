"""Kueue admits RLJobs that name a LocalQueue (docs/kueue.md): Kueue's quota, flavors and priorities decide, its
topology-aware scheduling picks the nodes, rlplace plans on exactly those; a preemption is a checkpointed move.

The local cluster runs Kueue (e2e/cluster/up.sh); on a cluster without it these tests skip. The kwok tests use
examples/kueue-queues.yaml as a platform admin would apply it; the real-node tests add a flavor and a ClusterQueue
for the local cluster's real a800 node, whose GPUs (8) are the quota two jobs compete for.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from test_lifecycle import CHECKPOINTS, EVERY, STEPS, resumable_job, summary_line, wait_ended
from test_run import RunJobs, real_nodes, run_jobs  # noqa: F401  (fixtures)

from e2e_cluster import e2e_dir, wait_for
from rlplace_fixtures import Jobs, kubectl, kubectl_rlplace, pinned_nodes

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
KUEUE = ("kueue.x-k8s.io", "v1beta2")
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"


@pytest.fixture(scope="module")
def kueue_queues(k8s: client.ApiClient, kubeconfig: str) -> Iterator[None]:
    """examples/kueue-queues.yaml applied (Topology, flavors, ClusterQueue, priority classes); skips without Kueue.
    Afterwards Kueue's log of these tests holds no error (the operator's is checked by its own fixture)."""
    try:
        client.CustomObjectsApi(k8s).list_cluster_custom_object(*KUEUE, "clusterqueues")
    except ApiException as err:
        if err.status == 404:
            pytest.skip("Kueue is not installed on this cluster (no kueue.x-k8s.io/v1beta2)")
        raise
    kubectl(kubeconfig, "apply", "-f", str(REPO / "examples" / "kueue-queues.yaml"))
    before = len(kueue_log_errors())
    yield
    assert kueue_log_errors()[before:] == []


def local_queue(kubeconfig: str, namespace: str, name: str, cluster_queue: str) -> None:
    body = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterQueue": cluster_queue},
    }
    kubectl(kubeconfig, "apply", "-f", "-", stdin=json.dumps(body))


def resource_flavor(kubeconfig: str, name: str, node_labels: Mapping[str, str]) -> None:
    """A ResourceFlavor of the nodes with `node_labels`, in the local cluster's hostname Topology."""
    body = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": {"nodeLabels": dict(node_labels), "topologyName": "rlplace-hosts"},
    }
    kubectl(kubeconfig, "apply", "-f", "-", stdin=json.dumps(body))


def cluster_queue(kubeconfig: str, name: str, gpus: Mapping[str, int]) -> None:
    """A ClusterQueue with `gpus` GPUs of each flavor, tried in that order (and CPU and memory to spare), lower
    priority preemptible."""
    flavors = [
        {
            "name": flavor,
            "resources": [
                {"name": "cpu", "nominalQuota": 100},
                {"name": "memory", "nominalQuota": "1Ti"},
                {"name": "nvidia.com/gpu", "nominalQuota": count},
            ],
        }
        for flavor, count in gpus.items()
    ]
    body = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {
            "namespaceSelector": {},
            "preemption": {"withinClusterQueue": "LowerPriority"},
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                    "flavors": flavors,
                }
            ],
        },
    }
    kubectl(kubeconfig, "apply", "-f", "-", stdin=json.dumps(body))

    def active() -> bool:
        got = json.loads(kubectl(kubeconfig, "get", "clusterqueue", name, "-o", "json"))
        return any(c["type"] == "Active" and c["status"] == "True" for c in got.get("status", {}).get("conditions", []))

    wait_for(active, 30, f"ClusterQueue {name} active")


def workloads(jobs: Jobs, job: str) -> list[dict]:
    listed = jobs.custom.list_namespaced_custom_object(
        *KUEUE, jobs.namespace, "workloads", label_selector=f"rlplace.io/job={job}"
    )
    return listed["items"]


def workload_condition(body: dict, type_: str) -> dict:
    return next((c for c in (body.get("status") or {}).get("conditions") or [] if c["type"] == type_), {})


def granted_hosts(body: dict) -> dict[str, list[str]]:
    """PodSet -> hosts, read straight from Kueue's hostname-prefix encoding (the forms Kueue writes here)."""
    hosts: dict[str, list[str]] = {}
    for assignment in body["status"]["admission"]["podSetAssignments"]:
        names = hosts.setdefault(assignment["name"], [])
        for piece in assignment["topologyAssignment"]["slices"]:
            values = piece["valuesPerLevel"][-1]
            if "universal" in values:
                names.append(values["universal"])
            else:
                individual = values["individual"]
                names += [
                    f"{individual.get('prefix', '')}{r}{individual.get('suffix', '')}" for r in individual["roots"]
                ]
    return hosts


def condition(status: dict, type_: str) -> dict:
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), {})


def wait_waiting_for(jobs: Jobs, name: str, *said: str, unsaid: tuple[str, ...] = (), timeout: float = 60) -> dict:
    """The job's status once it is Queued and its waitingFor says each of `said` and none of `unsaid`."""

    def says() -> dict | None:
        status = jobs.get(name).get("status") or {}
        waiting = status.get("waitingFor") or ""
        if status.get("phase") != "Queued" or not all(s in waiting for s in said):
            return None
        return None if any(u in waiting for u in unsaid) else status

    return wait_for(says, timeout, f"{name} queued, waiting for {said}")


def cluster_job(name: str, queue: str | None, **labels: str) -> dict:
    """A RayCluster job (no driver: kwok pods) with an actor on an a800 node and a rollout on the 4090 node."""
    metadata: dict = {"name": name, "labels": {**({QUEUE_LABEL: queue} if queue else {}), **labels}}
    return {
        "apiVersion": "rlplace.io/v1alpha1",
        "kind": "RLJob",
        "metadata": metadata,
        "spec": {
            "nodeGroups": ["a800", "4090"],
            "componentPlacement": [
                {"components": "actor", "nodeGroup": "a800", "placement": "0-7"},
                {"components": "rollout", "nodeGroup": "4090", "placement": "0-7"},
            ],
        },
    }


def test_a_heterogeneous_job_gets_a_flavor_per_gpu_group_runs_on_the_granted_nodes_and_holds_them(
    jobs: Jobs, kubeconfig: str, kueue_queues: None
) -> None:
    local_queue(kubeconfig, jobs.namespace, "rl", "rl-cluster-queue")
    jobs.create(cluster_job("hetero", "rl"))
    status = jobs.wait_phase("hetero", "Running", 120)["status"]
    (workload,) = workloads(jobs, "hetero")
    assert workload_condition(workload, "Admitted").get("status") == "True"
    assert status["kueue"]["flavors"] == {"a800": "a800", "4090": "4090"}, status["kueue"]
    assert status["kueue"]["clusterQueue"] == "rl-cluster-queue"
    assert condition(status, "Admitted")["reason"] == "AdmittedByKueue"
    hosts = granted_hosts(workload)
    cluster = jobs.raycluster("hetero")
    assert cluster is not None
    assert sorted(pinned_nodes(cluster["spec"])) == sorted(hosts["a800"] + hosts["4090"])
    assert "kueue.x-k8s.io/queue-name" not in cluster["metadata"]["labels"]  # no Kueue integration takes it
    pods = jobs.pods("hetero")
    assert pods and all(
        (p.metadata.annotations or {}).get("kueue.x-k8s.io/podset-unconstrained-topology") == "true" for p in pods
    )
    assert sorted({p.spec.node_name for p in pods if p.metadata.labels["ray.io/node-type"] == "worker"}) == sorted(
        hosts["a800"] + hosts["4090"]
    )
    # PodsReady once the job runs: an admin's waitForPodsReady would evict it otherwise.
    wait_for(
        lambda: workload_condition(workloads(jobs, "hetero")[0], "PodsReady").get("status") == "True", 60, "PodsReady"
    )
    # The LocalQueue deleted under the admitted job: Kueue keeps the Workload admitted, the job runs on and says
    # its queue is gone, until it is made again.
    kubectl(kubeconfig, "delete", "localqueue", "rl", "-n", jobs.namespace)

    def admitted_as(reason: str) -> dict | None:
        status = jobs.get("hetero")["status"]
        return status if condition(status, "Admitted").get("reason") == reason else None

    # Running and saying so (a full run on a loaded machine once read the job Provisioning a second after it was
    # Running, its Admitted condition already naming the deleted LocalQueue; not seen again alone: the two are
    # awaited together, and a job the deletion stopped still fails here).
    gone = wait_for(
        lambda: (status := admitted_as("LocalQueueNotFound")) and status["phase"] == "Running" and status,
        30,
        "Running, Admitted naming the deleted LocalQueue",
    )
    assert f"LocalQueue {jobs.namespace}/rl has since been deleted" in condition(gone, "Admitted")["message"], gone
    assert workload_condition(workloads(jobs, "hetero")[0], "Admitted").get("status") == "True"
    local_queue(kubeconfig, jobs.namespace, "rl", "rl-cluster-queue")
    wait_for(lambda: admitted_as("AdmittedByKueue"), 30, "Admitted by Kueue again once the LocalQueue is back")
    # rlplace's own queue sees what Kueue granted: a job without a queue label for the same 4090 node waits.
    jobs.create(cluster_job("plain", None))
    waiting = jobs.wait_phase("plain", "Queued", 60)["status"]
    assert "4090" in waiting["waitingFor"], waiting
    jobs.delete("hetero")  # its Workload goes with it (owned): the quota and the nodes are free
    jobs.wait_phase("plain", "Running", 120)
    wait_for(lambda: not workloads(jobs, "hetero"), 60, "the deleted job's Workload gone")
    # ... and Kueue's TAS sees what rlplace's own pods use: with the only 4090 node busy (the quota is free), a
    # Kueue job for it waits, Kueue saying that no flavor's nodes can take a pod set.
    jobs.create(cluster_job("after", "rl"))
    blocked = wait_waiting_for(jobs, "after", "couldn't assign flavors to pod set")
    assert blocked["phase"] == "Queued" and not jobs.raycluster("after"), blocked


def test_kueues_own_words_for_a_clusterqueue_too_small_are_named_on_the_job(
    jobs: Jobs, kubeconfig: str, kueue_queues: None
) -> None:
    """What only Kueue says (its pending message, with the ClusterQueue) reaches the job's waitingFor. A missing
    LocalQueue or WorkloadPriorityClass and a stopped ClusterQueue are rlplace's own words, decided from what it
    reads: tests/operator/reconcile/test_provision.py."""
    # A ClusterQueue smaller than the job: Kueue's own words, with the ClusterQueue, in waitingFor.
    cluster_queue(kubeconfig, "rl-e2e-small", {"4090": 4})
    local_queue(kubeconfig, jobs.namespace, "small", "rl-e2e-small")
    jobs.create(cluster_job("too-big", "small"))
    queued = wait_waiting_for(jobs, "too-big", "ClusterQueue rl-e2e-small", unsaid=("has not looked at it yet",))
    # Kueue's words, e.g. "couldn't assign flavors to pod set a800: flavor 4090 doesn't match node affinity".
    assert "pod set a800" in queued["waitingFor"] or "nvidia.com/gpu" in queued["waitingFor"], queued
    assert condition(queued, "Admitted")["reason"] == "WaitingForKueue"
    # `kubectl rlplace why` leads with Kueue's words and the Workload to describe
    why = kubectl_rlplace(kubeconfig, "why", "too-big", "-n", jobs.namespace)
    assert why.returncode == 0, why.stderr
    first, further = why.stdout.splitlines()
    assert first.startswith(f"RLJob {jobs.namespace}/too-big: Kueue has not admitted it: ") and "rl-e2e-small" in first
    assert further.startswith(f"Look further: kubectl describe workload -n {jobs.namespace} "), further
    # More GPUs than the whole ClusterQueue has.
    big = cluster_job("over-quota", "small")
    big["spec"]["nodeGroups"] = ["4090"]
    big["spec"]["componentPlacement"] = [{"components": "rollout", "placement": "0-7"}]
    jobs.create(big)
    over = wait_waiting_for(jobs, "over-quota", "nvidia.com/gpu")
    assert "4090" in over["waitingFor"], over


@pytest.fixture
def real_queue(kubeconfig: str, run_jobs: RunJobs, real_nodes: list[str], kueue_queues: None) -> Iterator[str]:  # noqa: F811
    """A flavor for the real a800 node, a ClusterQueue with its 8 GPUs, and LocalQueue `real` in the test's
    namespace."""
    resource_flavor(kubeconfig, "real-a800", {"rlplace.io/real-gpu-type": "a800"})
    cluster_queue(kubeconfig, "rl-e2e-real", {"real-a800": 8})
    local_queue(kubeconfig, run_jobs.namespace, "real", "rl-e2e-real")
    yield "real"


def kueue_resumable(run_jobs: RunJobs, name: str, priority: str, steps: int = STEPS) -> dict:  # noqa: F811
    body = resumable_job(run_jobs, name)
    body["metadata"]["labels"] = {QUEUE_LABEL: "real", PRIORITY_LABEL: priority}
    body["spec"]["entrypoint"] = body["spec"]["entrypoint"].replace(f"--steps {STEPS}", f"--steps {steps}")
    body["spec"]["checkpoint"]["preemptionGraceSeconds"] = 60
    return body


def test_the_second_job_waits_for_kueues_quota_and_runs_once_the_first_finishes(
    run_jobs: RunJobs,  # noqa: F811
    real_queue: str,
    kubeconfig: str,
) -> None:
    run_jobs.create(kueue_resumable(run_jobs, "first", "rl-low", steps=8))
    run_jobs.wait_phase("first", "Running", 180)
    run_jobs.create(kueue_resumable(run_jobs, "second", "rl-low", steps=4))
    queued = wait_waiting_for(run_jobs, "second", "Kueue")
    assert "ClusterQueue rl-e2e-real" in queued["waitingFor"], queued
    first = wait_ended(run_jobs, "first", 300)
    assert first["phase"] == "Succeeded", first.get("message")
    assert condition(first, "BindingVerified").get("status") == "True", first.get("conditions")
    # The Workload is told Finished right after the job's status says Succeeded (the next call): the quota frees.
    wait_for(
        lambda: workload_condition(workloads(run_jobs, "first")[0], "Finished").get("status") == "True",
        10,
        "the first job's Workload Finished",
    )
    second = wait_ended(run_jobs, "second", 300)
    assert second["phase"] == "Succeeded", second.get("message")
    assert condition(second, "BindingVerified").get("status") == "True", second.get("conditions")
    (granted,) = workloads(run_jobs, "second")
    assert [second["placement"]["components"][0]["nodes"][0]] == granted_hosts(granted)["real-a800"]


def test_a_preempted_job_checkpoints_leaves_for_the_higher_priority_job_and_resumes_later(
    run_jobs: RunJobs,  # noqa: F811
    real_queue: str,
    kubeconfig: str,
) -> None:
    store = CHECKPOINTS / run_jobs.namespace / "low"
    run_jobs.create(kueue_resumable(run_jobs, "low", "rl-low"))
    wait_for(
        lambda: (
            condition(run_jobs.status("low"), "BindingVerified").get("status") == "True"
            and (run_jobs.status("low").get("progress") or {}).get("iteration", 0) >= 3
        ),
        240,
        "low running and reporting steps",
        interval=1,
    )
    run_jobs.create(kueue_resumable(run_jobs, "high", "rl-high", steps=4))
    queued = wait_for(
        lambda: (s := run_jobs.status("low")).get("phase") == "Queued" and s.get("preemptions") and s,
        180,
        "low preempted and queued again",
        interval=1,
    )
    assert condition(queued, "Admitted")["reason"] == "Preempted", queued
    assert queued["attempts"] == 2 and queued["restarts"][-1]["reason"] == "Preempted", queued
    events = run_jobs.core.list_namespaced_event(run_jobs.namespace, field_selector="involvedObject.name=low").items
    asked = [e.message for e in events if e.reason == "Preempted" and "checkpointed at step" in e.message]
    assert asked, [e.message for e in events]
    checkpointed = int(asked[0].split("checkpointed at step ")[1].split(":")[0])
    high = wait_ended(run_jobs, "high", 300)
    assert high["phase"] == "Succeeded", high.get("message")
    low = wait_ended(run_jobs, "low", 400)
    assert low["phase"] == "Succeeded", low.get("message")
    assert low["attempts"] == 2 and low["preemptions"] == 1 and not low.get("restartCount"), low
    summary = summary_line(kubeconfig, run_jobs.namespace, "low")
    assert summary.startswith("summary: attempt 2 "), summary
    resumed = int(summary.split("resumed from step ")[1].split(",")[0])
    repeated = int(summary.split("repeated ")[1].split()[0])
    # It resumed from the checkpoint it saved when asked; only the steps it ran while its pods stopped are repeated.
    assert resumed == checkpointed and repeated <= EVERY, summary
    assert store.exists()


def kueue_log_errors() -> list[str]:
    """Lines of the local Kueue's log that report an error (none on a cluster whose Kueue this suite did not start)."""
    path = e2e_dir() / "cluster" / "logs" / "kueue.log"
    if not path.exists():
        return []
    return [
        line for line in path.read_text(errors="replace").splitlines() if '"level":"error"' in line or "panic" in line
    ]


def test_a_node_kueue_replaces_under_the_running_job_is_followed(
    jobs: Jobs, kubeconfig: str, kueue_queues: None
) -> None:
    """A NoExecute taint on the job's node: Kueue swaps the node inside the admitted Workload, and rlplace moves
    the job onto the granted node as its next attempt, leaving the tainted one out."""
    local_queue(kubeconfig, jobs.namespace, "rl", "rl-cluster-queue")
    body = cluster_job("swap", "rl")
    body["spec"]["nodeGroups"] = ["a800"]
    body["spec"]["componentPlacement"] = [{"components": "actor", "placement": "0-7"}]
    jobs.create(body)
    status = jobs.wait_phase("swap", "Running", 120)["status"]
    (before,) = status["placement"]["components"][0]["nodes"]
    kubectl(kubeconfig, "taint", "node", before, "rlplace.io/e2e-broken=true:NoExecute")
    try:
        moved = wait_for(
            lambda: (
                (s := jobs.get("swap").get("status") or {}).get("phase") == "Running"
                and s["placement"]["components"][0]["nodes"] != [before]
                and s
            ),
            120,
            "the job running on the node Kueue granted instead",
        )
        (after,) = moved["placement"]["components"][0]["nodes"]
        assert granted_hosts(workloads(jobs, "swap")[0]) == {"a800": [after]}
        restart = moved["restarts"][-1]
        assert restart["reason"] == "NodeReplaced" and restart["nodesReplaced"] == [before], restart
        assert [e["name"] for e in moved["excludedNodes"]] == [before]
        assert {p.spec.node_name for p in jobs.pods("swap") if p.metadata.labels["ray.io/node-type"] == "worker"} == {
            after
        }
    finally:
        kubectl(kubeconfig, "taint", "node", before, "rlplace.io/e2e-broken-")

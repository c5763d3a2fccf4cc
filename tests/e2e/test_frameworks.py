"""Framework jobs on the real nodes: a real RLinf program, unchanged, in an RLJob (spec.framework: rlinf).

The program (e2e/images/rlinf-test/rlinf_job/train.py, in the test image with RLinf from PyPI) reads its Hydra
config and launches every component's workers with RLinf's own Cluster, HybridComponentPlacement and
WorkerGroup.launch; rlplace only provisions the plan's nodes, sets RLinf's node ranks and mounts its probe.
- as written, every process runs where rlplace's plan says, seen from inside (the probe in every RLinf Worker)
  and from outside (Ray's State API, read in the driver): BindingVerified True, status.binding and, with the
  operator's progress endpoint, status.progress from RLinf's own time/* metrics;
- with a Hydra override that moves the actor inside RLinf (its own config then disagrees with the RLJob), the
  job fails with BindingVerified False naming the rank, the GPU it got and the GPU planned.
- a program that leaves GPU ids to Ray the way veRL's resource pools do (e2e/images/rlinf-test/verl_style_job)
  runs with only the plan's GPUs shown to Ray; every process is observed on its pool's node with distinct GPUs
  (BindingVerified True, reason Observed), status.observedPlacement lists the GPU ids Ray gave, and
  status.progress comes from the timing_s/* lines of the `file` logger, posted from whichever pod runs them.
Skipped, with the reason, on clusters without real nodes (the real_nodes fixture).
"""

from __future__ import annotations

import pytest
from kubernetes import client
from test_run import RunJobs, driver_log, example

from placement_core.observe.pools import observed_pools_in
from placement_core.observe.processes import framework_report, observed_in
from placement_core.plan import Plan

from e2e_cluster import wait_for
from rlplace_fixtures import Jobs

pytestmark = pytest.mark.e2e


@pytest.fixture
def run_jobs(k8s: client.ApiClient, jobs: Jobs) -> RunJobs:
    """RLJobs in a fresh namespace, with their RayJobs (test_run's helpers)."""
    return RunJobs(k8s, jobs.namespace)


def _pod_env(run_jobs: RunJobs, job: str, node_type: str) -> list[dict[str, str]]:
    pods = run_jobs.core.list_namespaced_pod(
        run_jobs.namespace, label_selector=f"rlplace.io/job={job},ray.io/node-type={node_type}"
    )
    return [{e.name: e.value for e in pod.spec.containers[0].env or [] if e.value is not None} for pod in pods.items]


def test_an_rlinf_program_runs_unchanged_with_every_process_verified_from_inside_and_outside(
    run_jobs: RunJobs, real_nodes: list[str], kubeconfig: str
) -> None:
    body = example("rljob-rlinf-run.yaml")
    job = body["metadata"]["name"]
    run_jobs.create(body)
    wait_for(lambda: len(_pod_env(run_jobs, job, "worker")) == 3 or None, 240, "the job's three worker pods")
    # The GPU-less head is RLinf's last node, counted by num_nodes (the workers' ranks: below, from inside).
    (head,) = _pod_env(run_jobs, job, "head")
    assert head["RLINF_NODE_RANK"] == "3"
    assert not any("RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES" in env for env in _pod_env(run_jobs, job, "worker"))
    assert run_jobs.ray("rayjobs", job)["spec"]["entrypoint"] == "python /opt/rlinf-job/train.py cluster.num_nodes=4"

    status = run_jobs.wait_phase(job, "Succeeded", timeout=480)
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["BindingVerified"]["status"] == "True", conditions["BindingVerified"]
    assert conditions["BindingVerified"]["message"] == "verified actor 2/2, rollout 2/2, reward 2/2"
    assert status["binding"] == [
        {"name": "actor", "verified": 2, "processes": 2},
        {"name": "rollout", "verified": 2, "processes": 2},
        {"name": "reward", "verified": 2, "processes": 2},
    ]
    # Both views are in the driver's log, each with every planned process, and agree with the plan.
    plan = Plan.from_dict(run_jobs.plan(job))
    observed = observed_in(driver_log(kubeconfig, run_jobs.namespace, job))
    planned = {(f"{c.name.capitalize()}Group", p.rank) for c, p in plan.processes()}
    assert set(observed.probes) == set(observed.actors) == planned
    report = framework_report(plan, observed)
    assert report is not None and report.ok, report and report.summary()
    node_ranks = {p.node_name: p.node_rank for _, p in plan.processes()}
    for (group, rank), probe in sorted(observed.probes.items()):
        print(group, rank, probe.env.get("RLPLACE_KUBE_NODE"), repr(probe.env.get("CUDA_VISIBLE_DEVICES", "")))
        assert probe.env["RLPLACE_ATTEMPT"] == "1"  # the resume contract reaches RLinf's own processes
        # Each worker pod took its node's rank from the plan before Ray started, for rlplace and for RLinf.
        expected = str(node_ranks[probe.env["RLPLACE_KUBE_NODE"]])
        assert probe.env["RLINF_NODE_RANK"] == probe.env["RLPLACE_NODE_RANK"] == expected, probe.env
    if "RLPLACE_PROGRESS_URL" in head:
        # RLinf's MetricLogger.log calls, passed on by the probe in the driver: rollout then actor per step.
        progress = status.get("progress") or {}
        assert progress.get("iteration", 0) >= 8, status
        assert [c["name"] for c in progress["components"]] == ["rollout", "actor"], progress


def test_an_image_without_the_framework_fails_the_job_saying_so(run_jobs: RunJobs, real_nodes: list[str]) -> None:
    body = example("rljob-rlinf-run.yaml")
    body["metadata"]["name"] = job = "rlinf-missing"
    body["spec"]["ray"]["image"] = "localhost/rlplace/ray:2.60.0"  # the stock Ray image: no RLinf in it
    body["spec"]["entrypoint"] = "python -c 'import rlinf.scheduler'"
    run_jobs.create(body)
    status = run_jobs.wait_phase(job, "Failed", timeout=300)
    driver = {c["type"]: c for c in status["conditions"]}["DriverSucceeded"]
    assert driver["reason"] == "FrameworkMissing", driver
    assert driver["message"] == (
        "the job's image cannot import the framework (No module named 'rlinf'; spec.framework rlinf)"
    )


def test_a_component_moved_inside_rlinf_fails_the_job_naming_the_rank(run_jobs: RunJobs, real_nodes: list[str]) -> None:
    body = example("rljob-rlinf-run.yaml")
    body["metadata"]["name"] = job = "rlinf-moved"
    # The program's own config now puts the actor on GPUs 2-3 of the a800 node; the RLJob still plans 0-1.
    body["spec"]["entrypoint"] += " cluster.component_placement.actor.placement=2-3"
    run_jobs.create(body)
    status = run_jobs.wait_phase(job, "Failed", timeout=480)
    conditions = {c["type"]: c for c in status["conditions"]}
    verified = conditions["BindingVerified"]
    print("BindingVerified:", verified["message"])
    assert verified["status"] == "False" and verified["reason"] == "BindingMismatch", verified
    # Both actor ranks moved; the job fails at the first one whose probe the operator reads, which is rank 0 or 1
    # as their processes happen to report (a full run once saw rank 1 first).
    moved = {0: "CUDA_VISIBLE_DEVICES='2', planned '0'", 1: "CUDA_VISIBLE_DEVICES='3', planned '1'"}
    named = [
        rank
        for rank, seen in moved.items()
        if f"component 'actor' rank {rank} on node 'real-a800-0': {seen}" in verified["message"]
    ]
    assert len(named) == 1, verified["message"]
    assert verified["message"].startswith("verified actor 0/2, ")  # a process not seen yet is not verified
    assert status["message"].startswith(
        f"binding check failed: component 'actor' rank {named[0]} on node 'real-a800-0'"
    )
    # Stopped by the operator (RLinf itself would have trained on): its RayJob is deleted after the status says so.
    wait_for(lambda: run_jobs.ray("rayjobs", job) is None, 60, "the job's RayJob deleted")


def test_a_verl_style_program_is_observed_on_the_plans_nodes_with_the_gpu_ids_ray_gave(
    run_jobs: RunJobs, real_nodes: list[str], kubeconfig: str
) -> None:
    body = example("rljob-verl-run.yaml")
    job = body["metadata"]["name"]
    run_jobs.create(body)
    wait_for(lambda: len(_pod_env(run_jobs, job, "worker")) == 2 or None, 240, "the job's two worker pods")
    # Ray is shown only the plan's GPUs of each node: 4 of the a800 node's 8, 2 of the 4090 node's.
    shown = sorted(env.get("CUDA_VISIBLE_DEVICES", "") for env in _pod_env(run_jobs, job, "worker"))
    assert shown == ["0,1", "0,1,2,3"], shown
    (head,) = _pod_env(run_jobs, job, "head")
    assert head["RLPLACE_FRAMEWORK"] == "verl" and "RLINF_NODE_RANK" not in head

    status = run_jobs.wait_phase(job, "Succeeded", timeout=480)
    verified = {c["type"]: c for c in status["conditions"]}["BindingVerified"]
    assert (verified["status"], verified["reason"]) == ("True", "Observed"), verified
    assert verified["message"] == "observed (GPU ids Ray's, not enforced) actor 4/4, rollout 4/4, ref 4/4, reward 2/2"
    observed = {(e["component"], e["node"]): e for e in status["observedPlacement"]}
    print("observedPlacement:", status["observedPlacement"])
    actor, reward = observed[("actor", "real-a800-0")], observed[("reward", "real-4090-0")]
    assert sorted(actor["gpus"]) == ["0", "1", "2", "3"] and sorted(reward["gpus"]) == ["0", "1"]
    # The processes' own records, as the driver's log has them: one per GPU of each pool, TaskRunner left out.
    pooled = observed_pools_in(driver_log(kubeconfig, run_jobs.namespace, job))
    assert sorted(p.kube_node for p in pooled.processes.values()) == ["real-4090-0"] * 2 + ["real-a800-0"] * 4
    assert all(p.cuda_visible_devices == ",".join(p.gpu_ids) for p in pooled.processes.values())
    assert set(pooled.processes) <= set(pooled.actors)
    if "RLPLACE_PROGRESS_URL" in head:
        # veRL's file logger lines (timing_s/gen, update_actor, reward), passed on from the TaskRunner's pod.
        progress = status.get("progress") or {}
        print("progress:", progress)
        assert progress.get("iteration", 0) >= 4, status
        assert {c["name"] for c in progress["components"]} >= {"rollout", "actor"}, progress


def test_a_program_that_starts_no_worker_is_named_when_its_driver_ends(
    run_jobs: RunJobs, real_nodes: list[str]
) -> None:
    body = example("rljob-verl-run.yaml")
    body["metadata"]["name"] = job = "verl-no-workers"
    body["spec"]["entrypoint"] = "python -c 'import ray; ray.init()'"  # connects, starts nothing, exits 0
    run_jobs.create(body)
    status = run_jobs.wait_phase(job, "Failed", timeout=300)
    verified = {c["type"]: c for c in status["conditions"]}["BindingVerified"]
    assert verified["reason"] == "BindingMismatch", verified
    assert verified["message"] == (
        "observed (GPU ids Ray's, not enforced) actor 0/4, rollout 0/4, ref 0/4, reward 0/2; component 'actor' rank "
        "0 on node 'real-a800-0': no process of the framework on this node (its worker group is smaller than planned)"
    )

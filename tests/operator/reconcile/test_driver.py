"""An RLJob with an entrypoint: its RayJob manifest, and how the RayJob's status and the driver's binding report
become the RLJob's status (pure; the e2e suite runs them against KubeRay)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from placement_core.components import component_placement
from placement_core.contract import BINDING_REPORT_PREFIX
from placement_core.observe.verify import BindingReport, ProcessCheck
from placement_core.plan import build_plan
from rlplace_operator.api.conditions import BINDING_VERIFIED as BINDING_CONDITION
from rlplace_operator.api.conditions import DRIVER_SUCCEEDED as DRIVER_CONDITION
from rlplace_operator.api.rljob import RLJobSpec, SubmissionMode
from rlplace_operator.api.status import JobPhase
from rlplace_operator.builders.raycluster import build_raycluster
from rlplace_operator.builders.rayjob import build_rayjob
from rlplace_operator.frameworks import framework_named
from rlplace_operator.planning.plan import WorkerNode
from rlplace_operator.reconcile.driver import driver_log_command, driver_state, driver_status

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
SUBMITTER = {"cpu": "200m", "memory": "512Mi"}
NODES = [WorkerNode(0, "a800-0", 8, {"nvidia.com/gpu": 8}), WorkerNode(1, "4090-0", 4, {"nvidia.com/gpu": 4})]


def spec(**fields: object) -> RLJobSpec:
    base = {"nodeGroups": ["a800"], "componentPlacement": [{"components": "actor", "placement": "all"}]}
    return RLJobSpec.model_validate({**base, "entrypoint": "python driver.py", **fields})


def test_rayjob_runs_the_entrypoint_on_the_cluster_a_raycluster_job_gets() -> None:
    job = build_rayjob("train", spec(), NODES)
    assert (job["kind"], job["metadata"]["name"]) == ("RayJob", "train")
    assert job["metadata"]["labels"] == {"app.kubernetes.io/managed-by": "rlplace", "rlplace.io/job": "train"}
    assert job["spec"] == {
        "entrypoint": "python driver.py",
        "rayClusterSpec": build_raycluster("train", spec(), NODES)["spec"],
        "submissionMode": "K8sJobMode",
        "shutdownAfterJobFinishes": True,
        "ttlSecondsAfterFinished": 60,
        "backoffLimit": 0,
        "suspend": False,
        "submitterPodTemplate": {
            "spec": {
                "restartPolicy": "Never",
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [name]}]}
                                for name in ("a800-0", "4090-0")
                            ]
                        }
                    }
                },
                "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [
                    {
                        "name": "ray-job-submitter",
                        "image": "rayproject/ray:2.60.0",
                        "resources": {"limits": SUBMITTER},
                        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
                        "env": [{"name": "RLPLACE_ATTEMPT", "value": "1"}],
                    }
                ],
            }
        },
    }
    head = job["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]
    assert head["affinity"] == job["spec"]["submitterPodTemplate"]["spec"]["affinity"]


def test_the_rayjobs_cluster_says_which_nodes_it_holds_and_whose_pods_it_has() -> None:
    """KubeRay copies the RayJob's annotations to the RayCluster it makes (named after the RayJob with a suffix):
    admission reads the held nodes there, and finds the job's worker pods by the job label, not by cluster."""
    job = build_rayjob("train", spec(), NODES)
    assert job["metadata"]["annotations"] == {
        "rlplace.io/nodes": "a800-0,4090-0",
        "rlplace.io/attempt": "1",
        "rlplace.io/spec-digest": spec().restart_digest(),
    }
    for group in job["spec"]["rayClusterSpec"]["workerGroupSpecs"]:
        assert group["template"]["metadata"]["labels"] == {"rlplace.io/job": "train"}


def test_run_settings_reach_the_rayjob() -> None:
    run = {
        "submissionMode": "SidecarMode",
        "backoffLimit": 2,
        "restartPolicy": "Never",
        "activeDeadlineSeconds": 600,
        "ttlSecondsAfterFinished": 5,
    }
    body = build_rayjob("train", spec(run=run, suspend=True), NODES)["spec"]
    assert (body["submissionMode"], body["backoffLimit"], body["activeDeadlineSeconds"]) == ("SidecarMode", 2, 600)
    assert (body["ttlSecondsAfterFinished"], body["suspend"]) == (5, True)
    # KubeRay refuses a TTL on a RayJob that keeps its cluster.
    assert "submitterPodTemplate" not in body  # SidecarMode: the submitter is a container of the head pod
    kept = build_rayjob("train", spec(run={"shutdownAfterJobFinishes": False}), NODES)["spec"]
    assert "ttlSecondsAfterFinished" not in kept
    assert kept["shutdownAfterJobFinishes"] is False


def test_workers_may_use_a_stock_ray_image() -> None:
    ray = {"image": "localhost/rlplace/ray:2.60.0", "workerImage": "rayproject/ray:2.60.0"}
    cluster = build_rayjob("train", spec(ray=ray), NODES)["spec"]["rayClusterSpec"]
    assert cluster["headGroupSpec"]["template"]["spec"]["containers"][0]["image"] == "localhost/rlplace/ray:2.60.0"
    assert {g["template"]["spec"]["containers"][0]["image"] for g in cluster["workerGroupSpecs"]} == {
        "rayproject/ray:2.60.0"
    }


def test_a_job_without_entrypoint_has_no_rayjob() -> None:
    with pytest.raises(ValueError, match="job 'train' has no entrypoint; it runs as a RayCluster"):
        build_rayjob("train", spec(entrypoint=None), NODES)


def rayjob(deployment: str = "", job_status: str = "", reason: str = "", message: str = "", **spec: object) -> dict:
    status = {"jobDeploymentStatus": deployment, "jobStatus": job_status, "reason": reason, "message": message}
    status["rayClusterName"] = "train-abcde"
    status["rayJobInfo"] = {"startTime": "2026-11-23T01:00:00Z", "endTime": "2026-11-23T01:05:00Z"}
    return {"metadata": {"name": "train"}, "spec": spec, "status": status}


@pytest.mark.parametrize(
    ("body", "phase", "reason"),
    [
        (rayjob(), JobPhase.PROVISIONING, "Initializing"),
        (rayjob("Initializing"), JobPhase.PROVISIONING, "Initializing"),
        # The submitter runs but Ray has not started the entrypoint: not Running yet.
        (rayjob("Running", ""), JobPhase.PROVISIONING, "Submitting"),
        (rayjob("Running", "PENDING"), JobPhase.PROVISIONING, "Submitting"),
        (rayjob("Running", "RUNNING"), JobPhase.RUNNING, "Running"),
        (rayjob("Complete", "SUCCEEDED"), JobPhase.SUCCEEDED, "Succeeded"),
        (rayjob("Complete", "STOPPED"), JobPhase.FAILED, "Stopped"),
        (rayjob("Failed", "FAILED", "AppFailed", "exit code 1"), JobPhase.FAILED, "AppFailed"),
        (rayjob("Failed", "", "DeadlineExceeded"), JobPhase.FAILED, "DeadlineExceeded"),
        (rayjob("ValidationFailed"), JobPhase.FAILED, "ValidationFailed"),
        (rayjob("Retrying"), JobPhase.PROVISIONING, "Retrying"),
        (rayjob("Suspended", suspend=True), JobPhase.SUSPENDED, "Suspended"),
        (rayjob("Suspending", suspend=True), JobPhase.SUSPENDED, "Suspended"),
        # Resumed: spec.suspend is false again and KubeRay has not moved on yet (the job must stay looked at).
        (rayjob("Suspended"), JobPhase.PROVISIONING, "Resuming"),
        (rayjob("Running", "RUNNING", suspend=True), JobPhase.SUSPENDED, "Suspended"),
    ],
)
def test_rayjob_status_to_phase(body: dict, phase: JobPhase, reason: str) -> None:
    state = driver_state(body)
    assert (state.phase, state.reason) == (phase, reason)


def test_driver_log_is_named_for_both_submission_modes() -> None:
    assert driver_log_command("ns", "train", SubmissionMode.K8S_JOB, None) == "kubectl logs -n ns job/train"
    assert driver_log_command("ns", "train", SubmissionMode.SIDECAR, "train-abcde") == (
        "kubectl logs -n ns -l ray.io/cluster=train-abcde,ray.io/node-type=head -c ray-job-submitter"
    )


PLAN = build_plan(
    component_placement(
        {"cluster": {"num_nodes": 1, "accelerators_per_node": 4, "component_placement": {"a,b": "0-1"}}}
    )
)


def report(bad_rank: int | None = None) -> BindingReport:
    checks = []
    for component, process in PLAN.processes():
        problems = (
            ("CUDA_VISIBLE_DEVICES='3', planned '1'",) if (component.name, process.rank) == ("b", bad_rank) else ()
        )
        checks.append((ProcessCheck(component.name, process.rank, process.node_name, problems), process))
    return BindingReport.of(checks)


def condition(status: dict, type_: str) -> dict | None:
    return next((c for c in status["conditions"] if c["type"] == type_), None)


def test_a_succeeded_driver_with_verified_binding() -> None:
    status = driver_status({}, rayjob("Complete", "SUCCEEDED"), report(), "ns", "train", SubmissionMode.K8S_JOB, 3)
    assert status["phase"] == "Succeeded"
    assert status["message"] == "the driver succeeded (driver log: kubectl logs -n ns job/train)"
    assert status["binding"] == [
        {"name": "a", "verified": 2, "processes": 2},
        {"name": "b", "verified": 2, "processes": 2},
    ]
    assert condition(status, BINDING_CONDITION)["status"] == "True"
    assert condition(status, BINDING_CONDITION)["message"] == "verified a 2/2, b 2/2"
    assert (condition(status, DRIVER_CONDITION)["status"], condition(status, DRIVER_CONDITION)["reason"]) == (
        "True",
        "Succeeded",
    )
    assert (status["rayCluster"], status["driverStartTime"], status["driverEndTime"]) == (
        "train-abcde",
        "2026-11-23T01:00:00Z",
        "2026-11-23T01:05:00Z",
    )


def test_an_observed_report_says_so_and_lists_the_gpu_ids_ray_gave_per_node() -> None:
    observed = BindingReport(
        tuple(replace(c, gpu_ids=(str(c.rank % 2),)) for c in report().checks), report().components, enforced=False
    )
    status = driver_status({}, rayjob("Running", "RUNNING"), observed, "ns", "train", SubmissionMode.K8S_JOB, 3)
    binding = condition(status, BINDING_CONDITION)
    assert (binding["status"], binding["reason"]) == ("True", "Observed")
    assert binding["message"] == "observed (GPU ids Ray's, not enforced) a 2/2, b 2/2"
    assert status["observedPlacement"] == [
        {"component": "a", "node": "node-0", "ranks": [0, 1], "gpus": ["0", "1"]},
        {"component": "b", "node": "node-0", "ranks": [0, 1], "gpus": ["0", "1"]},
    ]
    # A report rlplace's launcher enforced has no observed placement (the field is removed).
    assert (
        driver_status({}, rayjob("Running", "RUNNING"), report(), "ns", "t", SubmissionMode.K8S_JOB, 3)[
            "observedPlacement"
        ]
        is None
    )


def test_a_binding_mismatch_fails_the_job_naming_the_rank() -> None:
    failed = rayjob("Failed", "FAILED", "AppFailed", "Job entrypoint command failed with exit code 1")
    status = driver_status({}, failed, report(bad_rank=1), "ns", "train", SubmissionMode.K8S_JOB, 3)
    assert status["phase"] == "Failed"
    assert status["message"] == (
        "binding check failed: component 'b' rank 1 on node 'node-0': CUDA_VISIBLE_DEVICES='3', planned '1' "
        "(driver log: kubectl logs -n ns job/train)"
    )
    assert condition(status, BINDING_CONDITION)["reason"] == "BindingMismatch"
    assert condition(status, DRIVER_CONDITION)["reason"] == "BindingMismatch"
    assert status["binding"][1] == {"name": "b", "verified": 1, "processes": 2}


def test_a_failed_driver_keeps_kuberays_reason_and_message() -> None:
    failed = rayjob("Failed", "FAILED", "AppFailed", "Job entrypoint command failed with exit code 1")
    status = driver_status({}, failed, None, "ns", "train", SubmissionMode.K8S_JOB, 3)
    assert status["message"] == (
        "Job entrypoint command failed with exit code 1 (driver log: kubectl logs -n ns job/train)"
    )
    assert condition(status, DRIVER_CONDITION)["reason"] == "AppFailed"
    assert condition(status, BINDING_CONDITION) is None


def report_in(logs: list[str], message: str) -> BindingReport | None:
    """The report an rlplace driver's framework finds in its submitter pods' logs (newest first) and KubeRay's
    status message, looked at last (as the observer hands them: reconcile/observe.py)."""
    return framework_named("rlplace").binding_report(None, [*logs, *([message] if message else [])], final=False)  # type: ignore[arg-type]


def driver_log(bad_rank: int | None = None) -> str:
    return f"Running entrypoint\n{BINDING_REPORT_PREFIX}{report(bad_rank).to_json()}\nerror: binding check failed\n"


def test_the_report_is_found_past_a_retried_submitter_pod_that_has_no_log_of_it_yet() -> None:
    # Newest first: the retry pod has only started following the log; the pod before it ran the driver.
    found = report_in(["Tailing logs until the job exits\n", driver_log(bad_rank=1)], "")
    assert found is not None and found.first_failure().rank == 1


def test_kuberays_message_is_the_last_place_the_report_is_looked_for() -> None:
    message = f"Job entrypoint command failed with exit code 1, last available logs:\n{driver_log(bad_rank=1)}"
    assert report_in([], message).first_failure().rank == 1
    assert report_in([driver_log()], message).first_failure() is None  # a pod's log comes first
    assert report_in(["no report here"], "Job entrypoint command failed with exit code 1") is None


def test_a_restarted_driver_drops_the_previous_runs_verification() -> None:
    before = driver_status({}, rayjob("Running", "RUNNING"), report(), "ns", "train", SubmissionMode.K8S_JOB, 3)
    assert condition(before, BINDING_CONDITION) is not None
    after = driver_status(before, rayjob("Initializing"), None, "ns", "train", SubmissionMode.K8S_JOB, 3)
    assert after["phase"] == "Provisioning"
    assert condition(after, BINDING_CONDITION) is None
    assert after["binding"] is None
    assert after["driverEndTime"] is None


def test_the_driver_condition_follows_the_driver_in_every_state() -> None:
    """The phase is Provisioning both before the cluster is up and while KubeRay submits the driver; the
    DriverSucceeded condition tells the two apart, and never keeps a state from before a suspend."""
    waiting = driver_status({}, rayjob("Initializing"), None, "ns", "train", SubmissionMode.K8S_JOB, 3)
    assert condition(waiting, DRIVER_CONDITION)["reason"] == "Initializing"
    submitting = driver_status(waiting, rayjob("Running", "PENDING"), None, "ns", "train", SubmissionMode.K8S_JOB, 3)
    assert submitting["phase"] == "Provisioning"
    driver = condition(submitting, DRIVER_CONDITION)
    assert driver is not None and (driver["status"], driver["reason"]) == ("False", "Submitting")
    running = driver_status(submitting, rayjob("Running", "RUNNING"), None, "ns", "train", SubmissionMode.K8S_JOB, 3)
    suspended = driver_status(
        running, rayjob("Suspended", suspend=True), None, "ns", "train", SubmissionMode.K8S_JOB, 3
    )
    resumed = driver_status(suspended, rayjob("Suspended"), None, "ns", "train", SubmissionMode.K8S_JOB, 3)
    assert [condition(s, DRIVER_CONDITION)["reason"] for s in (running, suspended, resumed)] == [
        "Running",
        "Suspended",
        "Resuming",
    ]


@pytest.mark.parametrize("name", ["rljob-collocated-run.yaml", "rljob-heterogeneous-run.yaml"])
def test_the_run_examples_are_valid_jobs_with_the_reference_driver(name: str) -> None:
    import yaml

    (body,) = [d for d in yaml.safe_load_all((EXAMPLES / name).read_text()) if d]
    job = RLJobSpec.model_validate(body["spec"])
    assert job.entrypoint == "python -m placement_core.launcher.demo"
    assert job.run.shutdown_after_job_finishes and job.run.active_deadline_seconds
    components = {c for e in job.component_placement for c in e.components.split(",")}
    assert components == {"actor", "rollout", "reward"}

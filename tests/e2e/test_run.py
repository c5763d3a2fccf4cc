"""RLJobs with an entrypoint: the operator runs the driver through KubeRay's RayJob and reports its outcome.

Two tiers:
- on any cluster (kwok nodes): the RayJob the operator makes, KubeRay making its RayCluster from it, the
  driver submitted (Provisioning, DriverSucceeded reason Submitting), suspend/resume through the RayJob,
  delete cascading, an operator restart making no duplicates, and admission of the run settings. Under kwok
  nothing serves Ray's dashboard, so a driver never starts or ends there.
- on real nodes (label rlplace.io/real-node=true, the images of e2e/images.env): the example jobs run to
  Succeeded with every process's binding verified from inside and equal to the job's plan; `exit 1` gives
  Failed with KubeRay's reason; a tampered plan entry fails verification naming the rank. Skipped, with the
  reason, on clusters without real nodes.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from test_restricted import head_user, restrict, restricted_pods

from placement_core.observe.verify import find_report

from e2e_cluster import e2e_dir, wait_for
from rlplace_fixtures import Jobs, kubectl, kubectl_rlplace, pinned_nodes, run_tool

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
GROUP, VERSION = "rlplace.io", "v1alpha1"
REAL_NODE_LABEL = "rlplace.io/real-node"


class RunJobs(Jobs):
    """The RLJob helpers, plus the RayJob and RayCluster of a job with an entrypoint; `wait_phase` returns the
    status, and allows for a driver's start."""

    def status(self, name: str) -> dict:
        return self.get(name).get("status") or {}

    def ray(self, plural: str, name: str) -> dict | None:
        try:
            return self.custom.get_namespaced_custom_object("ray.io", "v1", self.namespace, plural, name)
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def rayclusters(self) -> list[dict]:
        return self.custom.list_namespaced_custom_object("ray.io", "v1", self.namespace, "rayclusters")["items"]

    def wait_phase(self, name: str, phase: str, timeout: float = 90) -> dict:
        return super().wait_phase(name, phase, timeout).get("status") or {}

    def wait_deployed(self, name: str, timeout: float = 90) -> dict:
        """The status once KubeRay runs the job's deployment: the Ray cluster is up and the driver submitted
        (DriverSucceeded reason Submitting: under kwok no Ray serves the dashboard, so the driver never
        reports Running there) or running (Running, on clusters whose nodes run Ray)."""

        def deployed() -> dict | None:
            status = self.status(name)
            driver = next((c for c in status.get("conditions") or [] if c["type"] == "DriverSucceeded"), None)
            return (
                status
                if driver and driver["reason"] in ("Submitting", "Running") and status.get("rayCluster")
                else None
            )

        try:
            return wait_for(deployed, timeout, f"RLJob {name}'s driver submitted")
        except Exception:
            raise AssertionError(
                f"RLJob {name}'s driver never submitted: {json.dumps(self.status(name))[:1500]}"
            ) from None


@pytest.fixture
def run_jobs(k8s: client.ApiClient, jobs: Jobs) -> RunJobs:
    """RLJobs in a fresh namespace, deleted afterwards with their Ray pods waited out (the `jobs` fixture)."""
    return RunJobs(k8s, jobs.namespace)


def entrypoint_job(name: str, entrypoint: str = "python -m placement_core.launcher.demo", **spec: object) -> dict:
    """A small job on the kwok a800 nodes of examples/nodegroups-local.yaml. SidecarMode by default: kwok
    completes a submitter Job's pod at once (KubeRay may then fail the job, depending on whether it reaches
    the fake head), while a sidecar in the never-ending kwok head pod keeps the driver "running"."""
    run = {"submissionMode": "SidecarMode", **dict(spec.pop("run", {}))}  # type: ignore[arg-type]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "RLJob",
        "metadata": {"name": name},
        "spec": {
            "nodeGroups": ["a800"],
            "componentPlacement": [
                {"components": "actor", "placement": "0-1"},
                {"components": "reward", "placement": "8"},
            ],
            "entrypoint": entrypoint,
            "run": run,
            **spec,
        },
    }


# -- any cluster ------------------------------------------------------------------------------------------


def test_entrypoint_runs_as_a_rayjob_on_the_planned_cluster(run_jobs: RunJobs) -> None:
    run = {
        "submissionMode": "K8sJobMode",
        "backoffLimit": 1,
        "restartPolicy": "Never",  # KubeRay's retries only without rlplace's restarts (docs/restarts.md)
        "activeDeadlineSeconds": 900,
        "ttlSecondsAfterFinished": 30,
    }
    run_jobs.create(entrypoint_job("driven", run=run))
    status = wait_for(lambda: (s := run_jobs.status("driven")).get("rayCluster") and s, 90, "KubeRay's RayCluster")
    rayjob = run_jobs.ray("rayjobs", "driven")
    assert rayjob is not None
    owner = rayjob["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("RLJob", "driven", True)
    spec = rayjob["spec"]
    assert spec["entrypoint"] == "python -m placement_core.launcher.demo"
    assert (spec["submissionMode"], spec["backoffLimit"], spec["activeDeadlineSeconds"]) == ("K8sJobMode", 1, 900)
    assert (spec["shutdownAfterJobFinishes"], spec["ttlSecondsAfterFinished"]) == (True, 30)
    workers = spec["rayClusterSpec"]["workerGroupSpecs"]
    plan = run_jobs.plan("driven")
    planned_nodes = sorted({p["node_name"] for c in plan["components"].values() for p in c["processes"]})
    pinned = sorted(pinned_nodes(spec["rayClusterSpec"]))
    assert pinned == planned_nodes == ["a800-0", "a800-1"]
    env = workers[0]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "RLPLACE_KUBE_NODE", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}} in env
    # The head and KubeRay's submitter pod run on the job's own nodes (the submitter may be seconds old: wait for
    # the scheduler to bind every pod before reading where it went).
    pods = wait_for(
        lambda: (
            (items := run_jobs.core.list_namespaced_pod(run_jobs.namespace).items)
            and all(p.spec.node_name for p in items)
            and items
        ),
        60,
        "every pod of the job bound to a node",
    )
    for pod in pods:
        assert pod.spec.node_name in planned_nodes, (pod.metadata.name, pod.spec.node_name)
    # KubeRay made the RayCluster from the RayJob; the RLJob names it, the RayJob and where the driver logs. Under
    # kwok the submitter pod succeeds at once with no dashboard behind it, so KubeRay may count a failed attempt and
    # retry (backoffLimit 1) on a new RayCluster: the status follows the RayJob's current cluster, read together.
    status = wait_for(
        lambda: (
            (s := run_jobs.status("driven")).get("rayCluster")
            == ((run_jobs.ray("rayjobs", "driven") or {}).get("status") or {}).get("rayClusterName")
            and s
        ),
        30,
        "the RLJob naming the RayJob's current RayCluster",
    )
    assert status["rayJob"] == "driven"
    assert status["driverLog"] == f"kubectl logs -n {run_jobs.namespace} job/driven"
    assert "BindingVerified" not in {c["type"] for c in status["conditions"]}  # nothing ran under kwok


def test_a_sidecar_driver_runs_and_says_where_its_log_is(run_jobs: RunJobs) -> None:
    run_jobs.create(entrypoint_job("sidecar"))
    status = run_jobs.wait_deployed("sidecar")
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["DriverSucceeded"]["status"] == "False"
    assert (status["phase"], conditions["DriverSucceeded"]["reason"]) in (
        ("Provisioning", "Submitting"),
        ("Running", "Running"),
    )
    assert status["driverLog"] == (
        f"kubectl logs -n {run_jobs.namespace} -l ray.io/cluster={status['rayCluster']},ray.io/node-type=head "
        "-c ray-job-submitter"
    )
    assert "submitterPodTemplate" not in run_jobs.ray("rayjobs", "sidecar")["spec"]


def test_a_driver_past_its_deadline_fails_the_job_with_kuberays_reason(run_jobs: RunJobs) -> None:
    """KubeRay stops a RayJob past activeDeadlineSeconds (under kwok too: it needs no Ray); the RLJob ends
    Failed with KubeRay's reason, the driver-log command and a Warning Event."""
    run_jobs.create(entrypoint_job("late", run={"activeDeadlineSeconds": 3}))
    status = run_jobs.wait_phase("late", "Failed", timeout=120)
    conditions = {c["type"]: c for c in status["conditions"]}
    assert (conditions["DriverSucceeded"]["status"], conditions["DriverSucceeded"]["reason"]) == (
        "False",
        "DeadlineExceeded",
    )
    assert status["message"].endswith(f"(driver log: {status['driverLog']})"), status

    def warned() -> bool:
        events = run_jobs.core.list_namespaced_event(
            run_jobs.namespace, field_selector="involvedObject.kind=RLJob,involvedObject.name=late"
        ).items
        return any(e.reason == "DeadlineExceeded" and e.type == "Warning" for e in events)

    wait_for(warned, 30, "a DeadlineExceeded Warning Event on the RLJob")
    # A finished driver is not re-run: the job stays Failed across a later reconcile of the same spec.
    run_jobs.patch("late", {"metadata": {"labels": {"touched": "yes"}}})
    assert run_jobs.status("late")["phase"] == "Failed"


def test_suspend_stops_the_driver_and_frees_the_cluster_resume_runs_again(run_jobs: RunJobs) -> None:
    run_jobs.create(entrypoint_job("pausable"))
    first = run_jobs.wait_deployed("pausable")["rayCluster"]
    run_jobs.patch("pausable", {"spec": {"suspend": True}})
    suspended = run_jobs.wait_phase("pausable", "Suspended")
    driver = next(c for c in suspended["conditions"] if c["type"] == "DriverSucceeded")
    assert (driver["status"], driver["reason"]) == ("False", "Suspended")
    # The status is written before the RayJob is patched (the operator acts once its status is written), so the
    # RayJob's suspend follows within the pass, not necessarily before the phase is read.
    wait_for(
        lambda: (run_jobs.ray("rayjobs", "pausable") or {}).get("spec", {}).get("suspend") is True,
        30,
        "the RayJob suspended",
    )
    wait_for(lambda: not run_jobs.rayclusters(), 60, "KubeRay deleted the suspended RayJob's RayCluster")
    wait_for(
        lambda: (run_jobs.ray("rayjobs", "pausable").get("status") or {}).get("jobDeploymentStatus") == "Suspended",
        60,
        "RayJob Suspended",
    )
    run_jobs.patch("pausable", {"spec": {"suspend": False}})
    second = run_jobs.wait_deployed("pausable")["rayCluster"]
    assert second != first  # a new cluster: the driver starts over
    assert [rc["metadata"]["name"] for rc in run_jobs.rayclusters()] == [second]


def test_delete_of_a_running_job_stops_everything_it_owns(run_jobs: RunJobs) -> None:
    run_jobs.create(entrypoint_job("doomed"))
    run_jobs.wait_deployed("doomed")
    run_jobs.delete("doomed")

    def gone() -> bool:
        pods = run_jobs.core.list_namespaced_pod(run_jobs.namespace).items
        return run_jobs.ray("rayjobs", "doomed") is None and not run_jobs.rayclusters() and not pods

    wait_for(gone, 90, "RayJob, RayCluster and every pod garbage-collected")


def test_operator_restart_while_the_driver_runs_loses_and_duplicates_nothing(
    run_jobs: RunJobs, restart_operator
) -> None:
    run_jobs.create(entrypoint_job("steady"))
    before = run_jobs.wait_deployed("steady")
    rayjob = run_jobs.ray("rayjobs", "steady")
    restart_operator()
    wait_for(
        lambda: "kopf.rlplace.io/last-handled-configuration" in run_jobs.get("steady")["metadata"]["annotations"],
        30,
        "operator back",
    )
    after = run_jobs.wait_deployed("steady")
    again = run_jobs.ray("rayjobs", "steady")
    assert again["metadata"]["uid"] == rayjob["metadata"]["uid"]
    assert again["metadata"]["generation"] == rayjob["metadata"]["generation"]
    assert [rc["metadata"]["name"] for rc in run_jobs.rayclusters()] == [before["rayCluster"]] == [after["rayCluster"]]


def test_run_settings_are_checked_at_admission(kubeconfig: str, namespace: str, rlplace_crds: None) -> None:
    bad = entrypoint_job("bad", suspend=True, run={"shutdownAfterJobFinishes": False})
    result = run_tool(
        "kubectl", kubeconfig, "apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(bad), check=False
    )
    assert result.returncode != 0
    assert "a job with an entrypoint can be suspended only with run.shutdownAfterJobFinishes true" in result.stderr
    negative = entrypoint_job("bad", run={"backoffLimit": -1})
    result = run_tool(
        "kubectl", kubeconfig, "apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(negative), check=False
    )
    assert result.returncode != 0 and "spec.run.backoffLimit" in result.stderr
    both = entrypoint_job("bad", run={"backoffLimit": 2})  # with the default restartPolicy OnFailure
    result = run_tool(
        "kubectl", kubeconfig, "apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(both), check=False
    )
    assert result.returncode != 0 and "run.backoffLimit > 0 needs run.restartPolicy Never" in result.stderr
    too_many = entrypoint_job("bad", run={"maxRestarts": 101})
    result = run_tool(
        "kubectl", kubeconfig, "apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(too_many), check=False
    )
    assert result.returncode != 0 and "spec.run.maxRestarts" in result.stderr
    mode = entrypoint_job("bad", run={"submissionMode": "HTTPMode"})
    result = run_tool(
        "kubectl", kubeconfig, "apply", "-n", namespace, "-f", "-", stdin=yaml.safe_dump(mode), check=False
    )
    assert result.returncode != 0 and "K8sJobMode" in result.stderr


# -- real nodes -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_nodes(k8s: client.ApiClient, kubeconfig: str) -> list[str]:
    """The real nodes and the NodeGroups that select them; skips without real nodes."""
    nodes = client.CoreV1Api(k8s).list_node(label_selector=f"{REAL_NODE_LABEL}=true").items
    if not nodes:
        pytest.skip(f"no node labelled {REAL_NODE_LABEL}=true: this cluster has no real nodes to run a driver on")
    real_groups = REPO / "examples" / "nodegroups-real.yaml"
    if not real_groups.exists():
        pytest.skip("examples/nodegroups-real.yaml (the real nodes' NodeGroups) is not in this checkout")
    kubectl(kubeconfig, "apply", "-f", str(real_groups))
    return [n.metadata.name for n in nodes]


def example(name: str) -> dict:
    (body,) = [doc for doc in yaml.safe_load_all((REPO / "examples" / name).read_text()) if doc]
    return body


def driver_log(kubeconfig: str, namespace: str, job: str) -> str:
    return kubectl(kubeconfig, "logs", "-n", namespace, f"job/{job}")


@pytest.mark.parametrize("name", ["rljob-collocated-run.yaml", "rljob-heterogeneous-run.yaml"])
def test_example_job_succeeds_in_a_restricted_namespace_with_every_process_verified_as_planned(
    run_jobs: RunJobs, real_nodes: list[str], kubeconfig: str, name: str
) -> None:
    """The example as a user runs it, in a namespace that enforces the restricted Pod Security Standard (the
    default posture of many shared clusters): every pod admitted, non-root, and the processes verified."""
    restrict(kubeconfig, run_jobs.namespace)
    body = example(name)
    job = body["metadata"]["name"]
    body["spec"]["run"]["ttlSecondsAfterFinished"] = 120  # keep the pods a while to look inside the head
    run_jobs.create(body)
    pods = restricted_pods(kubeconfig, run_jobs.namespace)
    status = run_jobs.wait_phase(job, "Succeeded", timeout=420)
    assert head_user(kubeconfig, run_jobs.namespace, pods) == "1000"  # the images' non-root user
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["BindingVerified"]["status"] == "True", conditions["BindingVerified"]
    assert conditions["DriverSucceeded"]["reason"] == "Succeeded"
    plan = run_jobs.plan(job)
    assert status["binding"] == [
        {"name": n, "verified": len(c["processes"]), "processes": len(c["processes"])}
        for n, c in plan["components"].items()
    ]
    log = driver_log(kubeconfig, run_jobs.namespace, job)
    report = find_report(log)
    assert report is not None and report.ok
    # Each process's own view from inside its pod is its plan entry: node, rank, and (checked by the process
    # itself against the placement) every variable.
    assert [(c.component, c.rank, c.node_name) for c in report.checks] == [
        (n, p["rank"], p["node_name"]) for n, c in plan["components"].items() for p in c["processes"]
    ]
    rows = [line.split() for line in log.splitlines() if line.split()[:1] and line.split()[0] in plan["components"]]
    expected = [
        (n, str(p["rank"]), p["env"]["CUDA_VISIBLE_DEVICES"] or "", p["node_name"])
        for n, c in plan["components"].items()
        for p in c["processes"]
    ]
    assert [(r[0], r[1], r[5] if len(r) == 10 else "", r[-2]) for r in rows] == expected  # a row of 10 cells: with PID
    assert "ran concurrently: overlap" in log
    if name == "rljob-heterogeneous-run.yaml":
        assert_kubectl_rlplace_shows(kubeconfig, run_jobs.namespace, job, plan)
        assert_picture_is_the_plan(kubeconfig, run_jobs, job, plan)


def assert_picture_is_the_plan(kubeconfig: str, run_jobs: RunJobs, job: str, plan: dict) -> None:
    """`kubectl rlplace get JOB --svg FILE` draws each GPU of the plan, cell by cell (each square's tooltip names
    its node, GPU and components), and agrees with status.placement: each component's GPUs and nodes."""
    path = e2e_dir() / f"{run_jobs.namespace}-{job}.svg"
    drawn = kubectl_rlplace(kubeconfig, "get", job, "-n", run_jobs.namespace, "--svg", str(path))
    assert drawn.returncode == 0, drawn.stderr
    svg = path.read_text()
    path.unlink()
    cells = {}
    for where, gpu, holders in re.findall(r"<title>([^<,]+), GPU (\d+): ([^<]+)</title>", svg):
        assert " nodes " not in where, where  # each node of this example is a row of its own
        if html.unescape(holders) != "no process":
            cells[(where, int(gpu))] = sorted(html.unescape(holders).split(", "))
    planned: dict[tuple[str, int], list[str]] = {}
    for name, component in plan["components"].items():
        for process in component["processes"]:
            if process["hardware_type"] == "Accelerator":
                for gpu in process["local_hardware_ranks"]:
                    holders = planned.setdefault((process["node_name"], gpu), [])
                    if name not in holders:
                        holders.append(name)
    assert cells == {cell: sorted(names) for cell, names in planned.items()}
    summary = run_jobs.status(job)["placement"]["components"]
    for component in summary:
        held = [cell for cell, names in cells.items() if component["name"] in names]
        if held:
            assert len(held) == component["gpus"], (component, held)
            assert sorted({node for node, _ in held}) == sorted(component["nodes"]), (component, held)


def assert_kubectl_rlplace_shows(kubeconfig: str, namespace: str, job: str, plan: dict) -> None:
    """`kubectl rlplace get` draws the stored plan, one row per node with a letter per GPU, and says where each
    process was verified; `top` lists the job; `logs` prints one process's own log from its pod (the example keeps
    its pods 120 s after it ends); a job or rank that does not exist is one line and status 2."""
    got = kubectl_rlplace(kubeconfig, "get", job, "-n", namespace)
    assert got.returncode == 0, got.stderr
    print(got.stdout)
    lines = got.stdout.splitlines()
    assert lines[0].startswith(f"RLJob {namespace}/{job}: Succeeded, attempt 1"), got.stdout
    letters = {"actor": "A", "rollout": "R", "reward": "E"}
    for name, component in plan["components"].items():
        node = component["processes"][0]["node_name"]
        (row,) = [line for line in lines if line.split()[:1] == [node]]
        gpus = sorted({g for p in component["processes"] for g in p["local_hardware_ranks"]})
        if component["processes"][0]["hardware_type"] == "Accelerator":
            assert row.split()[1:] == [letters[name]] * len(gpus), row
        else:
            assert row.endswith(f"off GPU: {name} x{len(component['processes'])}"), row
    verified = "; ".join(
        f"{n} {len(c['processes'])}/{len(c['processes'])} on {c['processes'][0]['node_name']}"
        for n, c in plan["components"].items()
    )
    assert f"verified from inside the pods: {verified}" in lines, got.stdout
    top = kubectl_rlplace(kubeconfig, "top", "-n", namespace)
    assert top.returncode == 0, top.stderr
    print(top.stdout)
    header, *rows = top.stdout.splitlines()
    assert header.split() == ["NAME", "PHASE", "ITERATION", "STEP", "BOTTLENECK", "GPU", "IDLE"]
    assert [row.split()[:2] for row in rows] == [[job, "Succeeded"]]
    # one process's own log, read in its pod by the PID its binding report gave: Ray's marker of its actor first
    logs = kubectl_rlplace(kubeconfig, "logs", job, "rollout", "1", "-n", namespace)
    assert logs.returncode == 0, logs.stderr
    assert ":actor_name:Worker" in logs.stdout.splitlines()[:3], logs.stdout
    bad_rank = kubectl_rlplace(kubeconfig, "logs", job, "rollout", "5", "-n", namespace)
    assert (bad_rank.returncode, bad_rank.stderr) == (2, f"error: component 'rollout' of {job} has ranks 0-1, not 5\n")
    missing = kubectl_rlplace(kubeconfig, "get", "no-such-job", "-n", namespace)
    assert (missing.returncode, missing.stderr) == (2, f"error: RLJob {namespace}/no-such-job not found\n")


@pytest.fixture
def two_node_group(k8s: client.ApiClient, real_nodes: list[str]) -> Iterator[str]:
    """A NodeGroup of both real GPU nodes (a800 and 4090: one shape, 8 GPUs each), removed afterwards."""
    custom = client.CustomObjectsApi(k8s)
    selector = {"matchExpressions": [{"key": "rlplace.io/real-gpu-type", "operator": "Exists"}]}
    body = {
        "apiVersion": "rlplace.io/v1alpha1",
        "kind": "NodeGroup",
        "metadata": {"name": "real-gpu"},
        "spec": {"nodeSelector": selector},
    }
    custom.create_cluster_custom_object("rlplace.io", "v1alpha1", "nodegroups", body)
    try:
        yield "real-gpu"
    finally:
        custom.delete_cluster_custom_object("rlplace.io", "v1alpha1", "nodegroups", "real-gpu")


def test_a_node_group_of_two_nodes_is_one_worker_group_each_pod_on_its_rank(
    run_jobs: RunJobs, two_node_group: str, kubeconfig: str
) -> None:
    """Both pods of one worker group take their node's rank from the plan before Ray starts: every process,
    checking its node rank, Ray node label and Kubernetes node from inside, verifies as planned."""
    body = example("rljob-heterogeneous-run.yaml")
    body["metadata"]["name"] = job = "one-group"
    body["spec"]["nodeGroups"] = [two_node_group, "real-cpu"]
    body["spec"]["componentPlacement"] = [
        {"components": "actor", "nodeGroup": two_node_group, "placement": "0-1,8-9"},
        {"components": "reward", "nodeGroup": "real-cpu", "placement": "0:0-1"},
    ]
    run_jobs.create(body)
    rayjob = wait_for(lambda: run_jobs.ray("rayjobs", job), 120, "the job's RayJob")
    groups = rayjob["spec"]["rayClusterSpec"]["workerGroupSpecs"]
    assert [(g["groupName"], g["replicas"]) for g in groups] == [(two_node_group, 2), ("real-cpu", 1)]
    status = run_jobs.wait_phase(job, "Succeeded", timeout=420)
    verified = {c["type"]: c for c in status["conditions"]}["BindingVerified"]
    assert verified["status"] == "True" and verified["message"] == "verified actor 4/4, reward 2/2", verified
    plan = run_jobs.plan(job)
    actor_nodes = [p["node_name"] for p in plan["components"]["actor"]["processes"]]
    assert len(set(actor_nodes)) == 2  # actor ranks 0-1 on the group's node 0, 2-3 on its node 1
    report = find_report(driver_log(kubeconfig, run_jobs.namespace, job))
    assert report is not None and report.ok
    assert [c.node_name for c in report.checks if c.component == "actor"] == actor_nodes


def test_a_driver_that_exits_1_fails_the_job_with_the_reason(run_jobs: RunJobs, real_nodes: list[str]) -> None:
    body = example("rljob-collocated-run.yaml")
    body["metadata"]["name"] = "exits"
    body["spec"]["entrypoint"] = "python -c 'import sys; print(\"giving up\"); sys.exit(1)'"
    run_jobs.create(body)
    status = run_jobs.wait_phase("exits", "Failed", timeout=420)
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["DriverSucceeded"]["reason"] == "AppFailed"
    assert f"(driver log: kubectl logs -n {run_jobs.namespace} job/exits)" in status["message"]


def test_a_tampered_plan_entry_fails_verification_naming_the_rank(
    run_jobs: RunJobs, real_nodes: list[str], kubeconfig: str
) -> None:
    body = example("rljob-collocated-run.yaml")
    body["metadata"]["name"] = "tampered"
    body["spec"]["entrypoint"] += " --tamper rollout:1:CUDA_VISIBLE_DEVICES=3"
    run_jobs.create(body)
    status = run_jobs.wait_phase("tampered", "Failed", timeout=420)
    assert status["message"].startswith(
        "binding check failed: component 'rollout' rank 1 on node 'real-a800-0': CUDA_VISIBLE_DEVICES='3', planned '1'"
    ), status["message"]
    conditions = {c["type"]: c for c in status["conditions"]}
    assert (conditions["BindingVerified"]["status"], conditions["BindingVerified"]["reason"]) == (
        "False",
        "BindingMismatch",
    )
    why = kubectl_rlplace(kubeconfig, "why", "tampered", "-n", run_jobs.namespace)
    assert why.returncode == 0, why.stderr
    assert why.stdout.startswith(
        f"RLJob {run_jobs.namespace}/tampered: it failed: binding check failed: component 'rollout' rank 1"
    ), why.stdout

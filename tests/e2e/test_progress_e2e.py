"""Step times reach the RLJob (docs/progress.md), on the real nodes.

The reference driver runs `--workload synthetic`: each component's step time follows a declared law in its GPU
count (here rollout 4/g+0.5 s, actor 4/g s, reward 0.25 s on 4 GPUs: a synthetic workload, not a measurement of
any model). Its head pod reports each iteration to the operator's progress endpoint with its projected token:
status.progress appears within 45 s of Running, `kubectl get rljobs` shows ITERATION, STEP and BOTTLENECK, the
job's token cannot update another job (403), a token bound to a pod that is labelled for the job but not owned
by it is refused (403), and the operator's /metrics shows the job's figures.

Needs the operator in the cluster (the chart's Deployment and Service): a local operator process serves no
endpoint the pods can reach, and the test says so and skips.
"""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from e2e_cluster import wait_for
from rlplace_fixtures import Jobs, kubectl, kubectl_rlplace, run_tool

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[2]
AUDIENCE = "rlplace.io/progress"
STEPS = 25
#: The issue's bound: the first iteration's progress within 30 s of Running (KubeRay runs the driver). On the
#: 2-core e2e machine it came 13 s after Running once the worker pod had a whole core to start its 12 processes
#: in (29 to 39 s with half a core: CPU throttling of the pod, not the operator, was the wait). With three
#: clusters side by side (make test), Ray itself took 19 s from the submission to starting the entrypoint: 45 s.
STARTUP_S = 45
LAWS = "--law actor=4/g --law rollout=4/g+0.5 --law reward=0.25"

#: Run inside the head pod: POST a report to URL (argv[1]) with the token in argv[2] (or the pod's own), print
#: the HTTP status and the answer.
POST = """
import json, os, sys, urllib.request, urllib.error
url = sys.argv[1]
token = sys.argv[2] if len(sys.argv) > 2 else open(os.environ["RLPLACE_PROGRESS_TOKEN_FILE"]).read().strip()
body = json.dumps({"iteration": 0, "components": [{"name": "actor", "seconds": 1.0}], "time": 1.0}).encode()
request = urllib.request.Request(url, body, {"Authorization": "Bearer " + token}, method="POST")
try:
    with urllib.request.urlopen(request, timeout=10) as response:
        print(response.status, response.read().decode())
except urllib.error.HTTPError as err:
    print(err.code, err.read().decode())
"""
GET = """
import sys, urllib.request
print(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())
"""


def synthetic_job(name: str) -> dict:
    """examples/rljob-synthetic-run.yaml, named `name`, running STEPS steps."""
    (body,) = [d for d in yaml.safe_load_all((REPO / "examples" / "rljob-synthetic-run.yaml").read_text()) if d]
    body["metadata"]["name"] = name
    assert LAWS in body["spec"]["entrypoint"] and "--steps 40" in body["spec"]["entrypoint"]
    body["spec"]["entrypoint"] = body["spec"]["entrypoint"].replace("--steps 40", f"--steps {STEPS}")
    return body


def head_pod(jobs: Jobs, job: str) -> client.V1Pod | None:
    pods = jobs.core.list_namespaced_pod(jobs.namespace, label_selector=f"rlplace.io/job={job},ray.io/node-type=head")
    running = [p for p in pods.items if p.status.phase == "Running" and not p.metadata.deletion_timestamp]
    return running[0] if running else None


def in_head(kubeconfig: str, jobs: Jobs, pod: str, script: str, *args: str) -> str:
    return kubectl(
        kubeconfig, "exec", "-n", jobs.namespace, pod, "-c", "ray-head", "--", "python3", "-c", script, *args
    )


#: Run inside the head pod when no progress came: who the container runs as, the token file, the variables.
DIAGNOSE = """
import os
print("uid", os.getuid(), "gid", os.getgid(), "groups", os.getgroups())
path = os.environ.get("RLPLACE_PROGRESS_TOKEN_FILE", "")
print("url", os.environ.get("RLPLACE_PROGRESS_URL"), "token file", path)
try:
    st = os.stat(path)
    print("token file mode", oct(st.st_mode), "owner", st.st_uid, st.st_gid, "readable", os.access(path, os.R_OK))
except OSError as err:
    print("token file:", err)
"""


def _why_no_progress(kubeconfig: str, jobs: Jobs, pod: str, env: dict) -> str:
    """What the head pod and the driver say, for a run where status.progress never came."""
    parts = []
    for script, args in (
        (DIAGNOSE, ()),
        (POST, (env.get("RLPLACE_PROGRESS_URL", "").replace("$(RLPLACE_NAMESPACE)", jobs.namespace),)),
    ):
        result = run_tool(
            "kubectl",
            kubeconfig,
            "exec",
            "-n",
            jobs.namespace,
            pod,
            "-c",
            "ray-head",
            "--",
            "python3",
            "-c",
            script,
            *args,
            check=False,
        )
        parts.append(result.stdout + result.stderr)
    driver = run_tool("kubectl", kubeconfig, "logs", "-n", jobs.namespace, "job/progress", "--tail=60", check=False)
    parts.append("driver (submitter) log:\n" + driver.stdout[-4000:] + driver.stderr[-500:])
    return "\n".join(parts)


def test_step_times_reach_the_job_only_from_its_own_pods(
    jobs: Jobs, real_nodes: list[str], kubeconfig: str, k8s: client.ApiClient
) -> None:
    jobs.create(synthetic_job("progress"))
    # Another job, which need not run: a pod of `progress` must not be able to write its status.
    other = synthetic_job("other")
    other["spec"]["nodeGroups"] = ["no-such-group"]
    jobs.create(other)

    jobs.wait_phase("progress", "Running", timeout=300)
    running_at = time.monotonic()
    pod = wait_for(lambda: head_pod(jobs, "progress"), 60, "the head pod running").metadata.name
    env = {e.name: e.value for e in jobs.core.read_namespaced_pod(pod, jobs.namespace).spec.containers[0].env}
    if not env.get("RLPLACE_PROGRESS_URL"):
        pytest.skip("the operator serves no progress endpoint here (a local operator process: run in the cluster)")

    def progress() -> dict | None:
        return (jobs.get("progress").get("status") or {}).get("progress")

    try:
        first = wait_for(progress, STARTUP_S, f"status.progress within {STARTUP_S} s of Running", interval=0.5)
    except TimeoutError as err:
        raise AssertionError(f"{err}\n{_why_no_progress(kubeconfig, jobs, pod, env)}") from None
    print(f"status.progress {time.monotonic() - running_at:.1f} s after Running: {first}")
    # Where those seconds went: the submitter's log, timestamped by the kubelet (figures, not asserted).
    log = run_tool("kubectl", kubeconfig, "logs", "-n", jobs.namespace, "job/progress", "--timestamps", check=False)
    print("driver start-up:\n" + "\n".join(log.stdout.splitlines()[:40]))
    assert {c["name"] for c in first["components"]} == {"actor", "rollout", "reward"}
    assert first["bottleneck"] == "rollout" and first["iterationSeconds"] > 0

    # At most 10 s stale while it runs (updatedAt: when the latest reported iteration ended; 1 s resolution).
    for _ in range(3):
        time.sleep(4)
        status = jobs.get("progress")["status"]
        if status.get("phase") != "Running":
            break
        updated = dt.datetime.strptime(status["progress"]["updatedAt"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
        staleness = (dt.datetime.now(dt.UTC) - updated).total_seconds()
        print(f"staleness {staleness:.1f} s at iteration {status['progress']['iteration']}")
        assert staleness <= 11, status["progress"]

    table = kubectl(kubeconfig, "get", "rljobs", "-n", jobs.namespace, "progress")
    print(table)
    header, row = table.splitlines()[:2]
    words = header.split()
    at = words.index("ITERATION")
    assert words[at : at + 3] == ["ITERATION", "STEP", "BOTTLENECK"], header
    # kubectl aligns the columns: read each value under its header
    assert row[header.index("ITERATION") :].split()[0].isdigit(), table
    assert float(row[header.index("STEP") :].split()[0]) > 0, table
    assert row[header.index("BOTTLENECK") :].split()[0] == "rollout", table
    # `kubectl rlplace why` of the running job: the bottleneck, and the component that waits for it most.
    why = kubectl_rlplace(kubeconfig, "why", "progress", "-n", jobs.namespace)
    assert why.returncode == 0, why.stderr
    print(why.stdout)
    first = why.stdout.splitlines()[0]
    assert first.startswith(f"RLJob {jobs.namespace}/progress: rollout is the bottleneck: "), first
    assert "reward idles" in first, first  # 0.25 s of a ~1.5 s iteration: the idlest

    url = env["RLPLACE_PROGRESS_URL"].replace("$(RLPLACE_NAMESPACE)", jobs.namespace)
    # Read before the test's own POSTs below: their report (iteration 0, actor only) starts the job's window over.
    metrics = in_head(kubeconfig, jobs, pod, GET, url.split("/v1/")[0].rsplit(":", 1)[0] + ":9090/metrics")
    labels = f'namespace="{jobs.namespace}",rljob="progress"'
    lines = [line for line in metrics.splitlines() if labels in line]
    print("\n".join(lines))
    assert any(line.startswith("rlplace_job_step_seconds{") for line in lines)
    assert any(line.startswith('rlplace_component_busy_seconds{component="rollout"') for line in lines)
    assert any(line.startswith('rlplace_component_idle_ratio{component="reward"') for line in lines)
    # What the queue pass saw of the job, and what its GPUs did per iteration (docs/monitoring.md).
    phase = f'rlplace_job_phase{{namespace="{jobs.namespace}",phase="Running",reason="Running",rljob="progress"}} 1.0'
    assert phase in metrics.splitlines(), [line for line in metrics.splitlines() if "rlplace_job_phase{" in line]
    assert any(line.startswith('rlplace_job_bottleneck{component="rollout"') for line in lines)
    assert any(line.startswith('rlplace_component_gpu_seconds{component="rollout"') for line in lines)

    own = in_head(kubeconfig, jobs, pod, POST, url)
    assert own.startswith("202"), own
    foreign = in_head(kubeconfig, jobs, pod, POST, url.replace("/rljobs/progress/", "/rljobs/other/"))
    assert foreign.startswith("403") and f"belongs to RLJob {jobs.namespace}/progress" in foreign, foreign
    assert "progress" not in (jobs.get("other").get("status") or {})

    # A pod labelled for the job but not made by it: its bound token is valid, the job is not its owner's.
    forged = client.V1Pod(
        metadata=client.V1ObjectMeta(name="forged", labels={"rlplace.io/job": "progress"}),
        spec=client.V1PodSpec(
            containers=[client.V1Container(name="c", image="none")],
            node_selector={"rlplace.io/no-such-node": "true"},  # stays Pending: nothing runs
        ),
    )
    forged = jobs.core.create_namespaced_pod(jobs.namespace, forged)
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(
            audiences=[AUDIENCE],
            expiration_seconds=600,
            bound_object_ref=client.V1BoundObjectReference(
                kind="Pod", api_version="v1", name="forged", uid=forged.metadata.uid
            ),
        )
    )
    token = jobs.core.create_namespaced_service_account_token("default", jobs.namespace, request).status.token
    refused = in_head(kubeconfig, jobs, pod, POST, url, token)
    assert refused.startswith("403") and "not owned by it" in refused, refused

    # The driver's last report is sent when it ends: the job's progress ends at its last step.
    jobs.wait_phase("progress", "Succeeded", timeout=300)
    final = wait_for(lambda: (p := progress()) and p["iteration"] == STEPS and p, 15, f"iteration {STEPS} in status")
    print("final progress:", json.dumps(final))

"""`kubectl rlplace why` among a thousand other RLJobs (issue 44): with 1,000 suspended jobs in the namespace, the
jobs built to be stuck here are each named for their own cause, and each answer takes under 10 s:

- rlplace's queue full: a job behind another on the only 4090 node says its place and what it waits for;
- a Kueue ClusterQueue that is inactive (its ResourceFlavor does not exist): Kueue's reason, with the Workload;
- an image that cannot be pulled, on a real node: the pod and the kubelet's own words.

The other causes are named where the scenario already runs: Kueue's quota full (test_kueue_e2e.py), a missing
Secret (test_pods_not_started.py), a binding mismatch (test_run.py), the bottleneck of a running job
(test_progress_e2e.py) and lost ranks waiting for their replacement (test_replace_in_place.py).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from kubernetes.client.exceptions import ApiException
from test_run import RunJobs, example, real_nodes, run_jobs  # noqa: F401  (fixtures)

from e2e_cluster import wait_for
from rlplace_fixtures import example_job, kubectl_rlplace

pytestmark = pytest.mark.e2e

OTHER_JOBS = 1000
#: The issue's bound on one `kubectl rlplace why`.
WHY_SECONDS = 10.0
KUEUE = ("kueue.x-k8s.io", "v1beta2")
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
INACTIVE_QUEUE = "rl-e2e-why-inactive"
UNPULLABLE = "localhost/rlplace/no-such-image:1"


def why(kubeconfig: str, namespace: str, job: str) -> tuple[str, float]:
    """`kubectl rlplace why JOB`: its first line and how long it took (under WHY_SECONDS, exit 0)."""
    start = time.monotonic()
    done = kubectl_rlplace(kubeconfig, "why", job, "-n", namespace)
    took = time.monotonic() - start
    assert done.returncode == 0 and not done.stderr, (done.stdout, done.stderr)
    assert took < WHY_SECONDS, f"kubectl rlplace why {job} took {took:.1f} s"
    first, further = done.stdout.splitlines()
    assert further.startswith("Look further: "), done.stdout
    return first, took


def why_says(kubeconfig: str, namespace: str, job: str, *words: str, timeout: float = 60) -> str:
    """The first line of `why JOB` once it holds every one of `words` (the operator may still be catching up)."""
    seen: list[str] = []

    def says() -> str | None:
        first, took = why(kubeconfig, namespace, job)
        seen.append(f"{took:.1f} s: {first}")
        return first if all(w in first for w in words) else None

    try:
        return wait_for(says, timeout, f"why {job} naming {words}", interval=2)
    except TimeoutError as err:
        raise AssertionError(f"{err}; it said:\n" + "\n".join(seen[-5:])) from None


@pytest.fixture
def inactive_queue(run_jobs: RunJobs) -> Iterator[str]:  # noqa: F811
    """A ClusterQueue whose only ResourceFlavor does not exist (Kueue keeps it inactive) and a LocalQueue to it in
    the test's namespace; skips without Kueue."""
    custom = run_jobs.custom
    try:
        custom.list_cluster_custom_object(*KUEUE, "clusterqueues")
    except ApiException as err:
        if err.status == 404:
            pytest.skip("Kueue's CRDs are not installed")
        raise
    cluster_queue = {
        "apiVersion": "/".join(KUEUE),
        "kind": "ClusterQueue",
        "metadata": {"name": INACTIVE_QUEUE},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [
                {
                    "coveredResources": ["nvidia.com/gpu"],
                    "flavors": [
                        {"name": "rl-e2e-no-such-flavor", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": 8}]}
                    ],
                }
            ],
        },
    }
    custom.create_cluster_custom_object(*KUEUE, "clusterqueues", cluster_queue)
    local = {
        "apiVersion": "/".join(KUEUE),
        "kind": "LocalQueue",
        "metadata": {"name": "inactive"},
        "spec": {"clusterQueue": INACTIVE_QUEUE},
    }
    custom.create_namespaced_custom_object(*KUEUE, run_jobs.namespace, "localqueues", local)
    try:
        yield "inactive"
    finally:
        custom.delete_cluster_custom_object(*KUEUE, "clusterqueues", INACTIVE_QUEUE)


def create_other_jobs(run_jobs: RunJobs) -> float:  # noqa: F811
    """OTHER_JOBS suspended RLJobs (the disaggregated example under other names), made 8 at a time; seconds taken."""
    start = time.monotonic()

    def make(i: int) -> None:
        body = example_job("rljob-disaggregated.yaml")
        body["metadata"] = {"name": f"other-{i:04d}"}
        body["spec"]["suspend"] = True
        run_jobs.custom.create_namespaced_custom_object("rlplace.io", "v1alpha1", run_jobs.namespace, "rljobs", body)

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(make, range(OTHER_JOBS)))
    return time.monotonic() - start


def test_why_names_each_cause_among_a_thousand_jobs(
    run_jobs: RunJobs,  # noqa: F811
    real_nodes: list[str],  # noqa: F811
    inactive_queue: str,
    kubeconfig: str,
) -> None:
    namespace = run_jobs.namespace
    made = create_other_jobs(run_jobs)
    print(f"{OTHER_JOBS} suspended RLJobs made in {made:.1f} s")
    listed = run_jobs.custom.list_namespaced_custom_object("rlplace.io", "v1alpha1", namespace, "rljobs")
    assert len(listed["items"]) == OTHER_JOBS

    # rlplace's queue full: the only 4090 node held by `holder`, `behind` waits for it.
    holder = example_job("rljob-disaggregated.yaml")
    holder["metadata"] = {"name": "holder"}
    run_jobs.create(holder)
    run_jobs.wait_phase("holder", "Running", timeout=120)
    behind = example_job("rljob-disaggregated.yaml")
    behind["metadata"] = {"name": "behind"}
    run_jobs.create(behind)
    first = why_says(kubeconfig, namespace, "behind", "1st in rlplace's queue", "1 free node of 4090")
    assert first == f"RLJob {namespace}/behind: it is 1st in rlplace's queue and waits for 1 free node of 4090.", first

    # Kueue's ClusterQueue inactive: Kueue's own reason, from the ClusterQueue's Active condition.
    queued = example_job("rljob-disaggregated.yaml")
    queued["metadata"] = {"name": "kueued", "labels": {QUEUE_LABEL: inactive_queue}}
    run_jobs.create(queued)
    first = why_says(kubeconfig, namespace, "kueued", "Kueue has not admitted it", INACTIVE_QUEUE, "inactive")
    assert "rl-e2e-no-such-flavor" in first or "FlavorNotFound" in first, first

    # An image that cannot be pulled, on the real a800 node: the worker pod and the kubelet's words.
    unpullable = example("rljob-collocated-run.yaml")
    unpullable["metadata"]["name"] = "unpullable"
    unpullable["spec"]["ray"]["image"] = UNPULLABLE
    run_jobs.create(unpullable)
    first = why_says(kubeconfig, namespace, "unpullable", "cannot pull its image", UNPULLABLE, timeout=120)
    print(first)
    run_jobs.delete("unpullable")

    # A job that does not exist, among them: one line, status 2.
    missing = kubectl_rlplace(kubeconfig, "why", "no-such-job", "-n", namespace)
    assert (missing.returncode, missing.stderr) == (2, f"error: RLJob {namespace}/no-such-job not found\n")

"""The Helm chart on a real API server: lint, server-side validation, install, and least privilege.

The operator scenarios of test_operator.py run with the chart's ServiceAccount token (the
`operator_kubeconfig` fixture), which proves the chart grants enough; this module proves it grants no more.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from rlplace_fixtures import (
    CHART,
    OPERATOR_POD_SELECTOR,
    OPERATOR_SERVICE_ACCOUNT,
    REAL_NODE_LABEL,
    RELEASE_NAMESPACE,
    REPO,
    InClusterOperator,
    Jobs,
    example_job,
    images_env,
    run_tool,
)

pytestmark = pytest.mark.e2e

#: `helm template` renders offline; it is told the oldest Kubernetes the chart supports (Chart.yaml kubeVersion).
KUBE_VERSION = ("--kube-version", "v1.30.0")


def template(kubeconfig: str, *args: str, check: bool = True):
    return run_tool("helm", kubeconfig, "template", "rlplace", str(CHART), *KUBE_VERSION, *args, check=check)


def test_helm_lint(kubeconfig: str) -> None:
    result = run_tool("helm", kubeconfig, "lint", "--strict", str(CHART), check=False)
    assert result.returncode == 0, result.stdout + result.stderr


def test_rendered_chart_passes_server_side_validation(kubeconfig: str, rlplace_chart: str) -> None:
    for values in ([], ["--set", "watchNamespaces={default,kube-public}"]):
        manifest = template(kubeconfig, "-n", rlplace_chart, *values).stdout
        result = run_tool("kubectl", kubeconfig, "apply", "--dry-run=server", "-f", "-", stdin=manifest, check=False)
        assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["--set", "replicas=6"], "replicas"),
        (["--set", "replicas=-1"], "replicas"),
        (["--set", "watchNamespaces={Bad_Namespace}"], "watchNamespaces"),
        (["--set", "image.pullPolicy=Sometimes"], "pullPolicy"),
        (["--set", "unknownKey=1"], "unknownKey"),
        (["--set", "podStart.graceSeconds=0"], "graceSeconds"),
        (["--set", "topologyLevels={not a label}"], "topologyLevels"),
    ],
)
def test_bad_values_fail_with_the_key_named(kubeconfig: str, values: list[str], message: str) -> None:
    result = template(kubeconfig, *values, check=False)
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr and message in result.stderr


def test_chart_crds_are_the_generated_ones() -> None:
    for crd in (REPO / "crds").glob("*.yaml"):
        assert (CHART / "crds" / crd.name).read_text() == crd.read_text()


def test_rbac_has_no_wildcards_and_no_secrets(kubeconfig: str) -> None:
    for values in ([], ["--set", "watchNamespaces={team-a}"]):
        manifest = template(kubeconfig, *values).stdout
        for doc in yaml.safe_load_all(manifest):
            if doc and doc["kind"] in ("ClusterRole", "Role"):
                for rule in doc["rules"]:
                    assert "*" not in rule["verbs"] and "*" not in rule["resources"] and "*" not in rule["apiGroups"]
                    assert "secrets" not in rule["resources"]


def test_deployment_is_hardened(kubeconfig: str) -> None:
    manifest = template(kubeconfig).stdout
    (deployment,) = [d for d in yaml.safe_load_all(manifest) if d and d["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    # Two replicas, one acting: the holder of the Lease; an upgrade replaces them one at a time.
    assert deployment["spec"]["replicas"] == 2 and deployment["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1},
    }
    assert "--leader-election=default/rlplace-operator" in container["args"]
    (service,) = [d for d in yaml.safe_load_all(manifest) if d and d["kind"] == "Service"]
    assert service["spec"]["selector"]["rlplace.io/operator-role"] == "leader"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["resources"]["limits"] and container["resources"]["requests"]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert "--liveness=http://0.0.0.0:8080/healthz" in container["args"]
    labels = deployment["metadata"]["labels"]
    assert {"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/version"} <= set(labels)


@pytest.mark.parametrize(
    ("verb", "resource", "allowed"),
    [
        ("get", "secrets", False),
        ("list", "secrets", False),
        ("delete", "nodes", False),
        ("create", "pods", False),
        ("delete", "pods", True),  # a lost Replace pod, so KubeRay makes it where its ranks move (docs/replace.md)
        ("list", "pods", True),
        ("list", "nodes", True),
        ("patch", "rljobs.rlplace.io", True),
        ("create", "rayclusters.ray.io", True),
        ("create", "rayjobs.ray.io", True),
        ("patch", "rayjobs.ray.io", True),
        ("delete", "rayjobs.ray.io", True),  # a job that gives its nodes back deletes its RayJob
        ("list", "pods", True),
        ("get", "pods --subresource=log", True),
        ("create", "pods --subresource=exec", False),
        ("patch", "configmaps", True),
        ("update", "configmaps", False),
        ("patch", "pods", True),  # the plan's digest on a resized job's head pod (docs/elastic.md)
        ("update", "pods", False),
        ("list", "customresourcedefinitions.apiextensions.k8s.io", True),  # kopf's resource discovery
        ("delete", "customresourcedefinitions.apiextensions.k8s.io", False),
    ],
)
def test_operator_identity_is_least_privilege(
    operator_kubeconfig: str, verb: str, resource: str, allowed: bool
) -> None:
    """Asked with the operator's own token, the API server answers exactly as the chart intends."""
    result = run_tool(
        "kubectl", operator_kubeconfig, "auth", "can-i", verb, *resource.split(), "-n", "default", check=False
    )
    assert result.stdout.strip() == ("yes" if allowed else "no"), (verb, resource, result.stdout, result.stderr)


@pytest.mark.parametrize(
    ("verb", "resource", "namespace", "allowed"),
    [
        ("update", "leases.coordination.k8s.io", RELEASE_NAMESPACE, True),
        ("create", "leases.coordination.k8s.io", RELEASE_NAMESPACE, True),
        ("update", "leases.coordination.k8s.io", "default", False),
        ("delete", "leases.coordination.k8s.io", RELEASE_NAMESPACE, False),
        ("patch", "pods", RELEASE_NAMESPACE, True),  # the label saying which replica leads, on its own pod
    ],
)
def test_leader_election_is_granted_in_the_release_namespace_only(
    operator_kubeconfig: str, verb: str, resource: str, namespace: str, allowed: bool
) -> None:
    result = run_tool("kubectl", operator_kubeconfig, "auth", "can-i", verb, resource, "-n", namespace, check=False)
    assert result.stdout.strip() == ("yes" if allowed else "no"), (verb, resource, namespace, result.stdout)


def test_reading_a_secret_is_forbidden(operator_kubeconfig: str) -> None:
    result = run_tool("kubectl", operator_kubeconfig, "get", "secrets", "-n", "kube-system", check=False)
    assert result.returncode != 0 and "Forbidden" in result.stderr
    assert f"system:serviceaccount:rlplace-system:{OPERATOR_SERVICE_ACCOUNT}" in result.stderr


def test_install_notes_tell_the_next_steps(kubeconfig: str, rlplace_chart: str) -> None:
    notes = run_tool("helm", kubeconfig, "get", "notes", "rlplace", "-n", rlplace_chart).stdout
    # The release's replicas are 0 (CRDs and RBAC only) or 1 when the session's operator is the chart's own
    # Deployment: the notes say which.
    values = json.loads(
        run_tool("helm", kubeconfig, "get", "values", "rlplace", "-n", rlplace_chart, "-o", "json").stdout
    )
    assert "kubectl get rljobs" in notes
    assert ("replicas is 0" in notes) == (int(values.get("replicas", 1)) == 0), (values, notes)
    assert Path(CHART / "values.schema.json").exists()


def test_operator_runs_in_the_cluster_from_its_image(
    kubeconfig: str, rlplace_operator: object, jobs: Jobs, k8s: client.ApiClient
) -> None:
    """Issue: the operator runs in the cluster. The session's operator is the chart's Deployment with the image
    built from operator/Dockerfile, on a real node: its pod runs there with the chart's ServiceAccount, a
    read-only root filesystem and both probes passing, and it reconciles this test's job (and the run's)."""
    if not isinstance(rlplace_operator, InClusterOperator):
        pytest.skip("the session's operator is a local process (no real node with the operator image)")
    core = client.CoreV1Api(k8s)
    pods = core.list_namespaced_pod(RELEASE_NAMESPACE, label_selector=OPERATOR_POD_SELECTOR).items
    roles = sorted(p.metadata.labels.get("rlplace.io/operator-role") for p in pods)
    assert roles == ["leader", "standby"], roles
    (pod,) = [p for p in pods if p.metadata.labels["rlplace.io/operator-role"] == "leader"]
    (standby,) = [p for p in pods if p is not pod]
    assert {c.type: c.status for c in standby.status.conditions}["Ready"] == "True"  # answers its probe, waits
    # The Service sends the jobs' progress reports to the leader alone.
    slices = client.DiscoveryV1Api(k8s).list_namespaced_endpoint_slice(
        RELEASE_NAMESPACE, label_selector="kubernetes.io/service-name=rlplace-operator"
    )
    targets = {e.target_ref.name for s in slices.items for e in s.endpoints or [] if e.target_ref}
    assert targets == {pod.metadata.name}, targets
    node = core.read_node(pod.spec.node_name)
    assert node.metadata.labels.get(REAL_NODE_LABEL) == "true", pod.spec.node_name
    assert pod.spec.service_account_name == OPERATOR_SERVICE_ACCOUNT
    (container,) = pod.spec.containers
    assert container.image.endswith(images_env()["OPERATOR_IMAGE"].split("/", 1)[-1])
    assert container.security_context.read_only_root_filesystem is True
    assert container.liveness_probe and container.readiness_probe
    assert {c.type: c.status for c in pod.status.conditions}["Ready"] == "True"
    assert pod.status.container_statuses[0].restart_count == 0

    jobs.create(example_job("rljob-collocated.yaml"))
    jobs.wait_phase("collocated", "Running", timeout=90)
    log = run_tool("kubectl", kubeconfig, "logs", "-n", RELEASE_NAMESPACE, pod.metadata.name).stdout
    assert f"[{jobs.namespace}/collocated] Handler 'rljob_changed" in log, log[-2000:]
    standby_log = run_tool("kubectl", kubeconfig, "logs", "-n", RELEASE_NAMESPACE, standby.metadata.name).stdout
    assert "standing by" in standby_log and "Handler" not in standby_log, standby_log[-2000:]

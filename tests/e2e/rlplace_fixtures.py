"""Fixtures that put rlplace on the e2e cluster: CRDs, the example NodeGroups, and the operator process."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from placement_core.contract import plan_from_configmap
from rlplace_operator.kube import ROLE_LABEL

from e2e_cluster import DRA_DRIVER, e2e_dir, wait_for

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
GROUP, VERSION = "rlplace.io", "v1alpha1"


def tool_path(name: str) -> str:
    """kubectl or helm: the build of e2e/cluster/tools.sh (linked into .e2e/bin), else the one on PATH."""
    local = REPO / ".e2e" / "bin" / name
    found = str(local) if local.exists() else shutil.which(name)
    if not found:
        pytest.fail(f"{name} not found: run `make tools` or put {name} on PATH", pytrace=False)
    return found


def kubectl_path() -> str:
    return tool_path("kubectl")


def run_tool(
    name: str, kubeconfig: str, *args: str, stdin: str | None = None, check: bool = True
) -> subprocess.CompletedProcess:
    """Run kubectl or helm against `kubeconfig`; with `check`, a failure is an AssertionError with stderr."""
    result = subprocess.run(
        [tool_path(name), "--kubeconfig", kubeconfig, *args], input=stdin, capture_output=True, text=True, timeout=180
    )
    if check and result.returncode:
        raise AssertionError(f"{name} {' '.join(args)} failed: {result.stderr.strip()}")
    return result


def kubectl(kubeconfig: str, *args: str, stdin: str | None = None) -> str:
    return run_tool("kubectl", kubeconfig, *args, stdin=stdin).stdout


def kubectl_rlplace(kubeconfig: str, *args: str) -> subprocess.CompletedProcess:
    """`kubectl rlplace ...` as a person runs it: the real kubectl finds the plugin (kubectl-rlplace, installed with
    the package next to this Python) on PATH and passes it the kubeconfig through KUBECONFIG."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    env = {**os.environ, "KUBECONFIG": kubeconfig, "PATH": path}
    return subprocess.run([kubectl_path(), "rlplace", *args], env=env, capture_output=True, text=True, timeout=60)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class OperatorProcess:
    """`rlplace-operator` as a local process, with a liveness endpoint to know when it is up."""

    def __init__(self, kubeconfig: str, log_path: Path) -> None:
        self.kubeconfig = kubeconfig
        self.log_path = log_path
        self.process: subprocess.Popen | None = None

    def start(self) -> None:
        port = _free_port()
        env = {**os.environ, "KUBECONFIG": self.kubeconfig}
        log = self.log_path.open("a")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "rlplace_operator.main", "--liveness", f"http://127.0.0.1:{port}/healthz"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )

        def alive() -> bool:
            if self.process.poll() is not None:
                raise AssertionError(f"the operator exited with {self.process.returncode}; see {self.log_path}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1) as response:
                    return response.status == 200
            except OSError:
                return False

        wait_for(alive, 60, "operator liveness endpoint")

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def ensure_running(self) -> None:
        if self.process is None or self.process.poll() is not None:
            self.start()


CHART = REPO / "charts" / "rlplace"
RELEASE = "rlplace"
RELEASE_NAMESPACE = "rlplace-system"
OPERATOR_SERVICE_ACCOUNT = "rlplace-operator"
REAL_NODE_LABEL = "rlplace.io/real-node"
#: The label of the real nodes whose GPUs come from the local DRA driver (e2e/cluster/nodes.sh).
REAL_DRA_LABEL = "rlplace.io/real-gpu-allocation"
#: Pods of the chart's Deployment (the chart's selector labels).
OPERATOR_POD_SELECTOR = f"app.kubernetes.io/name=rlplace,app.kubernetes.io/instance={RELEASE}"
#: The one of them that acts: the holder of the leader-election Lease labels its pod so.
OPERATOR_LEADER_SELECTOR = f"{OPERATOR_POD_SELECTOR},{ROLE_LABEL}=leader"
#: The chart's default: one leader, one standby.
OPERATOR_REPLICAS = 2


def install_chart(kubeconfig: str, *values: str, strings: tuple[str, ...] = (), files: tuple[Path, ...] = ()) -> None:
    """`helm upgrade --install` of the chart as release rlplace in rlplace-system with values `files`, `values`
    (key=value) and `strings` (key=value kept a string), waiting until its Deployment is ready."""
    settings = [arg for path in files for arg in ("--values", str(path))]
    settings += [arg for value in values for arg in ("--set", value)]
    settings += [arg for value in strings for arg in ("--set-string", value)]
    run_tool(
        "helm",
        kubeconfig,
        "upgrade",
        "--install",
        RELEASE,
        str(CHART),
        "--namespace",
        RELEASE_NAMESPACE,
        "--create-namespace",
        *settings,
        "--wait",
        "--timeout",
        "240s",
    )


def images_env() -> dict[str, str]:
    """e2e/images.env: the names of the images the real nodes run."""
    lines = (REPO / "e2e" / "images.env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if line and not line.startswith("#"))


class InClusterOperator:
    """The operator as users run it: `helm install` of charts/rlplace with the image built from
    operator/Dockerfile (imported into the real nodes' containerd), its pod on a real node with the chart's
    ServiceAccount, read-only root filesystem and probes. Same interface as OperatorProcess; the pod's log is
    appended to `log_path` whenever it stops."""

    def __init__(self, kubeconfig: str, image: str, log_path: Path) -> None:
        self.kubeconfig = kubeconfig
        self.repository, self.tag = image.rsplit(":", 1)
        self.log_path = log_path
        self.running = False
        self.values: Path | None = None
        """A values file every install adds (`configure`), e.g. the monitoring objects of the chart."""

    def configure(self, values: dict | None) -> None:
        """Install the chart again with `values` added (None: without them again); the Deployment is unchanged by
        values that only add objects (monitors, rules, dashboards), so the operator keeps running."""
        if values is None:
            self.values = None
        else:
            self.values = self.log_path.with_name("chart-values-e2e.yaml")
            self.values.write_text(yaml.safe_dump(values))
        self._install(OPERATOR_REPLICAS)

    def _install(self, replicas: int) -> None:
        install_chart(
            self.kubeconfig,
            f"replicas={replicas}",
            f"image.repository={self.repository}",
            f"image.tag={self.tag}",
            "image.pullPolicy=Never",
            # The e2e run's scale tests index a few hundred pods and jobs: more than the default 256Mi.
            "resources.limits.memory=768Mi",
            strings=(f"nodeSelector.{REAL_NODE_LABEL.replace('.', chr(92) + '.')}=true",),
            files=(self.values,) if self.values is not None else (),
        )

    def _pods(self, selector: str = OPERATOR_POD_SELECTOR, output: str = "name") -> list[str]:
        out = kubectl(self.kubeconfig, "get", "pods", "-n", RELEASE_NAMESPACE, "-l", selector, "-o", output)
        return out.split()

    def leader(self) -> str | None:
        """The name of the pod labelled leader (None: none is)."""
        names = self._pods(OPERATOR_LEADER_SELECTOR)
        return names[0].removeprefix("pod/") if names else None

    def leader_ready(self) -> bool:
        """One pod leads and is Ready (kopf's watches run): `helm --wait` returns once a standby is Ready."""
        ready = "jsonpath={.items[*].status.conditions[?(@.type=='Ready')].status}"
        return self._pods(OPERATOR_LEADER_SELECTOR, ready) == ["True"]

    def start(self) -> None:
        self._install(OPERATOR_REPLICAS)
        wait_for(
            lambda: len(self._pods()) == OPERATOR_REPLICAS and self.leader_ready(),
            90,
            "the operator's pods, one leading",
        )
        self.running = True

    def stop(self) -> None:
        with self.log_path.open("a") as log:
            for pod in self._pods():
                result = run_tool("kubectl", self.kubeconfig, "logs", "-n", RELEASE_NAMESPACE, pod, check=False)
                log.write(f"==== {pod}\n{result.stdout}{result.stderr}")
        self._install(0)
        wait_for(lambda: not self._pods(), 60, "operator pod gone")
        self.running = False

    def restart(self) -> None:
        self.stop()
        self.start()

    def ensure_running(self) -> None:
        if not self.running:
            self.start()


def operator_image_on_real_nodes(kubeconfig: str) -> str | None:
    """The operator image when a real node has it (so the chart's Deployment can run it), else None."""
    image = images_env().get("OPERATOR_IMAGE")
    if not image:
        return None
    # A node lists its images in its status only at its next status update (every 10 s or more after the
    # images were loaded): a real node without it yet is asked again for a while, not taken as "no image"
    # (which ran the operator as a local process, whose progress endpoint no pod can reach).
    deadline = time.monotonic() + 90
    while True:
        nodes = json.loads(kubectl(kubeconfig, "get", "nodes", "-l", f"{REAL_NODE_LABEL}=true", "-o", "json"))["items"]
        for node in nodes:
            names = {name for entry in node["status"].get("images") or [] for name in entry.get("names") or []}
            if any(name.endswith(image.split("/", 1)[-1]) for name in names):
                return image
        if not nodes or time.monotonic() > deadline:
            return None
        time.sleep(2)


@pytest.fixture(scope="session")
def rlplace_chart(kubeconfig: str) -> str:
    """The Helm chart installed (CRDs, ServiceAccount, RBAC, Deployment with 0 replicas: the operator runs as a
    local process instead, since kwok runs no containers). Returns the release namespace."""
    install_chart(kubeconfig, "replicas=0")
    return RELEASE_NAMESPACE


@pytest.fixture(scope="module")
def real_nodes(k8s: client.ApiClient, kubeconfig: str, rlplace_crds: None) -> list[str]:
    """The real nodes (kubelet and containerd: they run the drivers), with examples/nodegroups-real.yaml applied
    so the NodeGroups that select them exist; skips on a cluster without real nodes."""
    nodes = client.CoreV1Api(k8s).list_node(label_selector=f"{REAL_NODE_LABEL}=true").items
    if not nodes:
        pytest.skip(f"no node labelled {REAL_NODE_LABEL}=true: this cluster has no real nodes to run a driver on")
    kubectl(kubeconfig, "apply", "-f", str(REPO / "examples" / "nodegroups-real.yaml"))
    return [n.metadata.name for n in nodes]


def device_class_from_chart(kubeconfig: str) -> None:
    """The chart's DeviceClass for the local DRA driver, as `helm install --set dra.deviceClasses...` makes it."""
    rendered = run_tool(
        "helm",
        kubeconfig,
        "template",
        "rlplace",
        str(REPO / "charts" / "rlplace"),
        "--kube-version",
        "1.35.4",
        "--set",
        f"dra.deviceClasses[0].name={DRA_DRIVER},dra.deviceClasses[0].driver={DRA_DRIVER}",
        "--show-only",
        "templates/deviceclass.yaml",
    ).stdout
    kubectl(kubeconfig, "apply", "-f", "-", stdin=rendered)


def shared_node_example() -> list[dict]:
    """examples/rljob-shared-node.yaml: the DRA NodeGroup real-dra over the real DRA node, and two RLJobs."""
    return [doc for doc in yaml.safe_load_all((REPO / "examples" / "rljob-shared-node.yaml").read_text()) if doc]


@pytest.fixture
def real_dra_node(k8s: client.ApiClient, kubeconfig: str, real_nodes: list[str]) -> str:
    """The local cluster's real DRA node (its GPUs from dra-example-kubeletplugin), with the example's NodeGroup
    real-dra and the chart's DeviceClass; skips on a cluster without one."""
    nodes = client.CoreV1Api(k8s).list_node(label_selector=f"{REAL_DRA_LABEL}=dra").items
    if not nodes:
        pytest.skip(f"no real node labelled {REAL_DRA_LABEL}=dra (e2e/cluster/nodes.sh makes real-dra-0)")
    device_class_from_chart(kubeconfig)
    (group,) = [doc for doc in shared_node_example() if doc["kind"] == "NodeGroup"]
    kubectl(kubeconfig, "apply", "-f", "-", stdin=json.dumps(group))
    return nodes[0].metadata.name


@pytest.fixture(scope="session")
def rlplace_crds(kubeconfig: str, rlplace_chart: str) -> None:
    """rlplace's CRDs (installed by the chart, then brought up to date from crds/) established."""
    kubectl(kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
    for crd in ("nodegroups.rlplace.io", "rljobs.rlplace.io"):
        kubectl(kubeconfig, "wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")


@pytest.fixture(scope="session")
def local_nodegroups(kubeconfig: str, rlplace_crds: None) -> None:
    """The example NodeGroups for the local cluster's fake nodes."""
    kubectl(kubeconfig, "apply", "-f", str(REPO / "examples" / "nodegroups-local.yaml"))


def service_account_kubeconfig(kubeconfig: str, namespace: str, account: str, path: Path) -> str:
    """A kubeconfig for the same cluster that authenticates with a token of `namespace/account`."""
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=kubeconfig)
    request = client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=7200))
    token = client.CoreV1Api(api).create_namespaced_service_account_token(account, namespace, request).status.token
    admin = yaml.safe_load(Path(kubeconfig).read_text())
    context = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])["context"]
    cluster = next(c for c in admin["clusters"] if c["name"] == context["cluster"])
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [cluster],
                "users": [{"name": account, "user": {"token": token}}],
                "contexts": [{"name": account, "context": {"cluster": cluster["name"], "user": account}}],
                "current-context": account,
            }
        )
    )
    return str(path)


@pytest.fixture(scope="session")
def operator_kubeconfig(kubeconfig: str, rlplace_chart: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """The identity the operator runs with: the chart's ServiceAccount, so every scenario proves the chart's
    RBAC grants enough (test_helm.py proves it grants no more)."""
    path = tmp_path_factory.mktemp("identity") / "operator-kubeconfig"
    return service_account_kubeconfig(kubeconfig, rlplace_chart, OPERATOR_SERVICE_ACCOUNT, path)


@pytest.fixture(scope="session")
def rlplace_operator(
    kubeconfig: str, operator_kubeconfig: str, local_nodegroups: None
) -> Iterator[OperatorProcess | InClusterOperator]:
    """The session's operator. In the cluster (the chart's Deployment on a real node) when the cluster has real
    nodes with the operator image; else a local process with the chart's ServiceAccount identity.
    RLPLACE_E2E_OPERATOR=local or =cluster chooses (cluster fails without the image)."""
    log_path = e2e_dir() / "operator-e2e.log"
    where = os.environ.get("RLPLACE_E2E_OPERATOR", "auto")
    image = None if where == "local" else operator_image_on_real_nodes(kubeconfig)
    if where == "cluster" and image is None:
        pytest.fail("RLPLACE_E2E_OPERATOR=cluster, but no real node has the operator image (make images)")
    operator = (
        InClusterOperator(kubeconfig, image, log_path) if image else OperatorProcess(operator_kubeconfig, log_path)
    )
    start = log_path.stat().st_size if log_path.exists() else 0
    operator.start()
    try:
        yield operator
    finally:
        operator.stop()
    # Issue 21: the operator's log of the whole run holds no handler or timer exception.
    with log_path.open(errors="replace") as log:
        log.seek(start)
        raised = exceptions_in(log.read())
    if raised:
        pytest.fail(f"the operator's log of this run ({log_path}) has {len(raised)} exceptions, first: {raised[0]}")


#: What in the operator's log says a handler or timer raised: kopf's wording for a handler's exception, and the
#: operator's own for an unexpected one in a job's reconcile (its API errors are said in other words). Not every
#: traceback: kopf's watchers log one when a test removes the CRDs under the operator, as they should.
EXCEPTION_MARKERS = ("failed with an exception", "reconcile failed; the next pass looks again")


def exceptions_in(log: str) -> list[str]:
    """Lines that say a handler or timer raised."""
    return [line for line in log.splitlines() if any(marker in line for marker in EXCEPTION_MARKERS)]


@pytest.fixture
def restart_operator(rlplace_operator: OperatorProcess) -> Callable[[], None]:
    return rlplace_operator.restart


@pytest.fixture
def stop_operator(rlplace_operator: OperatorProcess) -> Iterator[Callable[[], None]]:
    yield rlplace_operator.stop
    rlplace_operator.ensure_running()
    time.sleep(0.5)


# RLJobs in a test namespace, shared by the e2e modules.


def load_example(name: str) -> list[dict]:
    return [doc for doc in yaml.safe_load_all((EXAMPLES / name).read_text()) if doc]


def pinned_nodes(cluster_spec: dict) -> list[str]:
    """The nodes a RayCluster spec's worker groups may run on, in group order: the values of each group's
    `kubernetes.io/hostname In` term, and the names of its `metadata.name` terms (a node without the label)."""
    nodes: list[str] = []
    for group in cluster_spec["workerGroupSpecs"]:
        affinity = group["template"]["spec"]["affinity"]["nodeAffinity"]
        for term in affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]:
            for requirement in [*term.get("matchExpressions", []), *term.get("matchFields", [])]:
                nodes += requirement["values"]
    return nodes


class Jobs:
    """RLJob helpers bound to one namespace."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.custom = client.CustomObjectsApi(api)
        self.core = client.CoreV1Api(api)
        self.namespace = namespace

    def create(self, body: dict) -> dict:
        return self.custom.create_namespaced_custom_object(GROUP, VERSION, self.namespace, "rljobs", body)

    def get(self, name: str) -> dict:
        return self.custom.get_namespaced_custom_object(GROUP, VERSION, self.namespace, "rljobs", name)

    def patch(self, name: str, body: dict) -> dict:
        return self.custom.patch_namespaced_custom_object(GROUP, VERSION, self.namespace, "rljobs", name, body)

    def delete(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, "rljobs", name)

    def wait_phase(self, name: str, phase: str, timeout: float = 60) -> dict:
        def reached() -> dict | None:
            job = self.get(name)
            return job if (job.get("status") or {}).get("phase") == phase else None

        try:
            return wait_for(reached, timeout, f"RLJob {name} phase {phase}")
        except Exception:
            status = self.get(name).get("status") or {}
            raise AssertionError(f"RLJob {name} never reached {phase}: status {json.dumps(status)[:1500]}") from None

    def raycluster(self, name: str) -> dict | None:
        try:
            return self.custom.get_namespaced_custom_object("ray.io", "v1", self.namespace, "rayclusters", name)
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def plan(self, name: str) -> dict:
        cm = self.core.read_namespaced_config_map(f"{name}-placement", self.namespace)
        return plan_from_configmap({"data": cm.data, "binaryData": cm.binary_data}).to_dict()

    def pods(self, name: str) -> list[client.V1Pod]:
        return self.core.list_namespaced_pod(self.namespace, label_selector=f"ray.io/cluster={name}").items


@pytest.fixture
def jobs(k8s: client.ApiClient, namespace: str, local_nodegroups: None, rlplace_operator: object) -> Iterator[Jobs]:
    """RLJobs in a fresh namespace; afterwards they are deleted and their Ray pods waited out, so the next
    test finds every GPU free."""
    helper = Jobs(k8s, namespace)
    yield helper
    for job in helper.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, "rljobs")["items"]:
        with contextlib.suppress(ApiException):
            helper.delete(job["metadata"]["name"])
    wait_for(
        lambda: not helper.core.list_namespaced_pod(namespace, label_selector="ray.io/cluster").items,
        180,
        f"Ray pods in {namespace} gone",
    )


def example_job(name: str) -> dict:
    (job,) = load_example(name)
    return job

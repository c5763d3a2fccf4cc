"""Fixtures that put rlplace on the e2e cluster: CRDs, the example NodeGroups, and the operator process."""

from __future__ import annotations

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

from e2e_cluster import e2e_dir, wait_for

REPO = Path(__file__).resolve().parents[2]


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


@pytest.fixture(scope="session")
def rlplace_chart(kubeconfig: str) -> str:
    """The Helm chart installed (CRDs, ServiceAccount, RBAC, Deployment with 0 replicas: the operator runs as a
    local process instead, since kwok runs no containers). Returns the release namespace."""
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
        "--set",
        "replicas=0",
        "--wait",
        "--timeout",
        "120s",
    )
    return RELEASE_NAMESPACE


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
def rlplace_operator(operator_kubeconfig: str, local_nodegroups: None) -> Iterator[OperatorProcess]:
    operator = OperatorProcess(operator_kubeconfig, e2e_dir() / "operator-e2e.log")
    operator.start()
    try:
        yield operator
    finally:
        operator.stop()


@pytest.fixture
def restart_operator(rlplace_operator: OperatorProcess) -> Callable[[], None]:
    return rlplace_operator.restart


@pytest.fixture
def stop_operator(rlplace_operator: OperatorProcess) -> Iterator[Callable[[], None]]:
    yield rlplace_operator.stop
    rlplace_operator.ensure_running()
    time.sleep(0.5)

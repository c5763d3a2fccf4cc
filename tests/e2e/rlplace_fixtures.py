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

from e2e_cluster import e2e_dir, wait_for

REPO = Path(__file__).resolve().parents[2]


def kubectl_path() -> str:
    local = REPO / ".e2e" / "bin" / "kubectl"
    found = str(local) if local.exists() else shutil.which("kubectl")
    if not found:
        pytest.fail("kubectl not found: run `make tools` or put kubectl on PATH", pytrace=False)
    return found


def kubectl(kubeconfig: str, *args: str, stdin: str | None = None, timeout: float = 120) -> str:
    result = subprocess.run(
        [kubectl_path(), "--kubeconfig", kubeconfig, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if result.returncode:
        raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
    return result.stdout


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


@pytest.fixture(scope="session")
def rlplace_crds(kubeconfig: str) -> None:
    """rlplace's CRDs applied and established."""
    kubectl(kubeconfig, "apply", "--server-side", "--force-conflicts", "-f", str(REPO / "crds"))
    for crd in ("nodegroups.rlplace.io", "rljobs.rlplace.io"):
        kubectl(kubeconfig, "wait", "--for=condition=Established", f"crd/{crd}", "--timeout=60s")


@pytest.fixture(scope="session")
def local_nodegroups(kubeconfig: str, rlplace_crds: None) -> None:
    """The example NodeGroups for the local cluster's fake nodes."""
    kubectl(kubeconfig, "apply", "-f", str(REPO / "examples" / "nodegroups-local.yaml"))


@pytest.fixture(scope="session")
def operator_kubeconfig(kubeconfig: str) -> str:
    """The identity the operator runs with (test_helm.py's chart fixture overrides it with the chart's)."""
    return kubeconfig


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

"""Fixtures for the e2e suite: a Kubernetes cluster with fake GPU nodes.

Which cluster:
- KUBECONFIG set in the environment: that cluster, unchanged (e.g. kind set up with e2e/kind/).
  Nothing is started or stopped.
- Otherwise the local control plane of e2e/cluster/ (state in $RLPLACE_E2E_DIR, default .e2e/):
  * already running (``make cluster-up``): reused, and left running at the end;
  * not running: built if needed (e2e/cluster/tools.sh, ~1 s when cached), started once for the session
    (up.sh) and stopped at the end (down.sh).
  While the session runs, os.environ["KUBECONFIG"] points at it, so code that loads the default
  kubeconfig (kubernetes.config.load_kube_config(), kopf, kubectl subprocesses) finds it.

Fixtures:
- ``kubeconfig`` (session) -> str: path of the kubeconfig file.
- ``k8s`` (session) -> kubernetes.client.ApiClient for that cluster.
- ``namespace`` (function) -> str: a fresh namespace (its default ServiceAccount exists), deleted after.
- ``fake_node`` (function) -> factory ``fake_node(name, *, labels=None, gpus=0, resources=None,
  ready=True, timeout=30, cpu="64", memory="512Gi", pods="110") -> V1Node`` creating an extra kwok node
  (waits until Ready); every node it made is deleted after the test. Skips on clusters without kwok.

Plain helpers (wait_for, fake_node_manifest, create_fake_node, ...) are in e2e_cluster.py beside this file.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator

import pytest

from e2e_cluster import (
    cluster_has_kwok,
    create_fake_node,
    delete_fake_node,
    delete_namespace_freeing_nodes,
    e2e_dir,
    run_script,
    wait_for,
)


def _tail(text: str, lines: int = 40) -> str:
    return "\n".join(text.splitlines()[-lines:])


@pytest.fixture(scope="session")
def kubeconfig() -> Iterator[str]:
    given = os.environ.get("KUBECONFIG")
    if given:
        yield given
        return

    status = run_script("status", timeout=60)
    started = False
    if status.returncode != 0:
        if status.returncode == 2:  # partly running (a component died): start over
            run_script("down", timeout=120)
        tools = run_script("tools", timeout=3600)
        if tools.returncode != 0:
            pytest.fail(f"e2e/cluster/tools.sh failed:\n{_tail(tools.stdout)}", pytrace=False)
        up = run_script("up", timeout=600)
        if up.returncode != 0:
            pytest.fail(f"e2e/cluster/up.sh failed:\n{_tail(up.stdout)}", pytrace=False)
        started = True
    # else: `make cluster-up` left one running; use it and leave it running.

    path = str(e2e_dir() / "kubeconfig")
    os.environ["KUBECONFIG"] = path
    try:
        yield path
    finally:
        os.environ.pop("KUBECONFIG", None)
        if started:
            down = run_script("down", timeout=120)
            if down.returncode != 0:
                print(f"e2e/cluster/down.sh failed:\n{_tail(down.stdout)}")


@pytest.fixture(scope="session")
def k8s(kubeconfig: str):
    """A kubernetes.client.ApiClient for the e2e cluster."""
    from kubernetes import config

    api = config.new_client_from_config(config_file=kubeconfig)
    try:
        yield api
    finally:
        api.close()


@pytest.fixture
def namespace(k8s) -> Iterator[str]:
    """A fresh namespace for one test, deleted afterwards (in the background)."""
    from kubernetes import client

    core = client.CoreV1Api(k8s)
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    meta = client.V1ObjectMeta(name=name, labels={"rlplace.io/e2e": "true"})
    core.create_namespace(client.V1Namespace(metadata=meta))
    try:
        # Pods need the namespace's "default" ServiceAccount, made by the controller-manager shortly after.
        wait_for(lambda: core.list_namespaced_service_account(name).items, 30, f"ServiceAccount {name}/default")
        yield name
    finally:
        delete_namespace_freeing_nodes(k8s, name)


@pytest.fixture
def fake_node(k8s) -> Iterator[Callable[..., object]]:
    """Factory: fake_node(name, *, labels=None, gpus=0, resources=None, ready=True, ...) -> V1Node.

    Creates an extra kwok node (64 cpu, 512Gi, 110 pods, ``gpus`` x nvidia.com/gpu, plus ``resources``
    such as {"rlplace.io/franka": "2"}) and waits until it is Ready unless ready=False.
    Every node it created is deleted after the test.
    """
    if not cluster_has_kwok(k8s):
        pytest.skip("fake_node needs kwok to simulate the node's kubelet (the local e2e cluster has it)")
    made: list[str] = []

    def make(name: str, **kwargs):
        made.append(name)
        return create_fake_node(k8s, name, **kwargs)

    try:
        yield make
    finally:
        for name in made:
            delete_fake_node(k8s, name)


# rlplace's own fixtures (CRDs, example NodeGroups, the operator process), shared by every e2e module.
from rlplace_fixtures import (  # noqa: E402, F401
    jobs,
    local_nodegroups,
    operator_kubeconfig,
    real_dra_node,
    real_nodes,
    restart_operator,
    rlplace_chart,
    rlplace_crds,
    rlplace_operator,
    stop_operator,
)

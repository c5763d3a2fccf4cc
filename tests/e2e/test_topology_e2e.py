"""Placement that knows the network, on the local cluster (docs/admission.md, "Racks and blocks"): kwok nodes
labelled with a block and racks, read through the operator's node index and the NodeGroup controller; rlplace's
queue packs a job into one rack, its ranks rack by rack; Kueue's topology-aware scheduling grants a job that
requires one rack the hosts of one rack; a required level no rack could hold is refused at once.

The decisions themselves (fewest racks and blocks, weight-exchanging groups, CPU-only pods) are shown by the
snapshot tests of tests/operator/admission/test_topology.py and measured by benchmarks/topology.py; this test
shows what only a live cluster does: labels read from Node objects, the NodeGroup status, the pods' nodes, and
Kueue's own grant.
"""

from __future__ import annotations

import contextlib
import json

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from test_kueue_e2e import KUEUE, QUEUE_LABEL, granted_hosts, local_queue, workloads
from test_operator import GROUP, VERSION, temporary_nodegroup

from e2e_cluster import wait_for
from rlplace_fixtures import Jobs, kubectl, pinned_nodes

pytestmark = pytest.mark.e2e

BLOCK, RACK = "network.topology.kubernetes.io/block", "network.topology.kubernetes.io/rack"
#: Six nodes whose names alternate between three racks of two: racked-0 and racked-3 are rack r0, and so on.
NODES = {f"racked-{i}": f"r{i % 3}" for i in range(6)}


def racked_job(name: str, nodes: int, queue: str | None = None, required: bool = False) -> dict:
    """A RayCluster job (kwok pods) on `nodes` whole nodes of the racked NodeGroup."""
    spec: dict = {
        "nodeGroups": ["racked"],
        "componentPlacement": [{"components": "actor,rollout", "placement": f"0-{8 * nodes - 1}"}],
    }
    if required:
        spec["topology"] = {"level": RACK, "mode": "Required"}
    labels = {QUEUE_LABEL: queue} if queue else {}
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "RLJob",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
    }


@contextlib.contextmanager
def rack_queue(kubeconfig: str, custom: client.CustomObjectsApi):
    """Kueue's Topology (block, rack, hostname), a ResourceFlavor of the racked nodes and a ClusterQueue over them;
    removed afterwards (they are cluster-wide)."""
    objects = [
        (
            "topologies",
            {
                "kind": "Topology",
                "metadata": {"name": "rlplace-racks"},
                "spec": {
                    "levels": [{"nodeLabel": BLOCK}, {"nodeLabel": RACK}, {"nodeLabel": "kubernetes.io/hostname"}]
                },
            },
        ),
        (
            "resourceflavors",
            {
                "kind": "ResourceFlavor",
                "metadata": {"name": "racked"},
                "spec": {"nodeLabels": {"rlplace.io/gpu-type": "racked"}, "topologyName": "rlplace-racks"},
            },
        ),
        (
            "clusterqueues",
            {
                "kind": "ClusterQueue",
                "metadata": {"name": "racked"},
                "spec": {
                    "namespaceSelector": {},
                    "resourceGroups": [
                        {
                            "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                            "flavors": [
                                {
                                    "name": "racked",
                                    "resources": [
                                        {"name": "cpu", "nominalQuota": 100},
                                        {"name": "memory", "nominalQuota": "1Ti"},
                                        {"name": "nvidia.com/gpu", "nominalQuota": 48},
                                    ],
                                }
                            ],
                        }
                    ],
                },
            },
        ),
    ]
    try:
        for _, body in objects:
            kubectl(kubeconfig, "apply", "-f", "-", stdin=json.dumps({"apiVersion": "/".join(KUEUE), **body}))
        yield
    finally:
        for plural, body in reversed(objects):
            with contextlib.suppress(ApiException):
                custom.delete_cluster_custom_object(*KUEUE, plural, body["metadata"]["name"])


def test_jobs_are_packed_into_one_rack_each_and_kueue_grants_a_required_rack(
    jobs: Jobs, k8s: client.ApiClient, kubeconfig: str, fake_node
) -> None:
    """The NodeGroup ranks the six nodes rack by rack and counts two per rack. Two 2-node jobs of rlplace's queue
    take r0 (racked-0, racked-3), then r1 (racked-1, racked-4): never the earliest names (racked-1, racked-2),
    which span two racks. A Kueue job requiring one rack is granted the hosts of the rack left, r2, and runs
    there; a job requiring three nodes in one rack is refused at once, naming the largest rack."""
    custom = client.CustomObjectsApi(k8s)
    try:
        custom.list_cluster_custom_object(*KUEUE, "clusterqueues")
    except ApiException as err:
        if err.status == 404:
            pytest.skip("Kueue is not installed on this cluster (no kueue.x-k8s.io/v1beta2)")
        raise
    for name, rack in NODES.items():
        fake_node(name, labels={"rlplace.io/gpu-type": "racked", BLOCK: "b1", RACK: rack}, gpus=8)
    with temporary_nodegroup(k8s, "racked", "racked"), rack_queue(kubeconfig, custom):

        def status() -> dict:
            return custom.get_cluster_custom_object(GROUP, VERSION, "nodegroups", "racked").get("status") or {}

        wait_for(lambda: status().get("readyNodes") == 6, 30, "the racked NodeGroup's six nodes")
        assert [n["name"] for n in status()["nodes"]] == [f"racked-{i}" for i in (0, 3, 1, 4, 2, 5)]
        assert status()["topology"] == {
            "levels": [BLOCK, RACK],
            "domains": [{"path": f"b1/r{r}", "nodes": 2, "readyNodes": 2} for r in range(3)],
        }
        for name, rack in (("first", ["racked-0", "racked-3"]), ("second", ["racked-1", "racked-4"])):
            jobs.create(racked_job(name, 2))
            cluster = wait_for(lambda n=name: jobs.raycluster(n), 60, f"{name}'s RayCluster")
            assert pinned_nodes(cluster["spec"]) == rack, (name, pinned_nodes(cluster["spec"]))
            jobs.wait_phase(name, "Running", 90)  # its pods hold the GPUs Kueue's TAS counts on those nodes

        local_queue(kubeconfig, jobs.namespace, "racks", "racked")
        jobs.create(racked_job("kueued", 2, queue="racks", required=True))
        (workload,) = wait_for(lambda: workloads(jobs, "kueued") or None, 30, "kueued's Workload")
        assert {p["topologyRequest"].get("required") for p in workload["spec"]["podSets"]} == {RACK}
        jobs.wait_phase("kueued", "Running", 90)
        (workload,) = workloads(jobs, "kueued")
        hosts = sorted(h for names in granted_hosts(workload).values() for h in names)
        assert hosts == ["racked-2", "racked-5"], hosts
        assert sorted(pinned_nodes(jobs.raycluster("kueued")["spec"])) == hosts

        jobs.create(racked_job("too-wide", 3, required=True))
        said = jobs.wait_phase("too-wide", "Pending", 30)["status"]
        placed = next(c for c in said["conditions"] if c["type"] == "Placed")
        assert (placed["reason"], placed["message"]) == (
            "TopologyUnsatisfiable",
            f"spec.topology requires the job's 3 nodes of racked in one {RACK}: its largest, b1/r0, has 2 ready nodes",
        ), placed

"""A profiled RLJob over two NodeGroups of different GPUs, placed by auto placement's node-group model on kwok
fake nodes (issue 24): GPU type and memory from a NodeGroup's spec and from GPU feature discovery's labels."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from e2e_cluster import wait_for
from rlplace_fixtures import GROUP, VERSION, Jobs

pytestmark = pytest.mark.e2e

SELECTOR = "rlplace.io/gpu-type"


@contextlib.contextmanager
def nodegroups(k8s: client.ApiClient, specs: dict[str, dict]) -> Iterator[client.CustomObjectsApi]:
    custom = client.CustomObjectsApi(k8s)
    for name, spec in specs.items():
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "NodeGroup", "metadata": {"name": name}, "spec": spec}
        custom.create_cluster_custom_object(GROUP, VERSION, "nodegroups", body)
    try:
        yield custom
    finally:
        for name in specs:
            with contextlib.suppress(ApiException):
                custom.delete_cluster_custom_object(GROUP, VERSION, "nodegroups", name)


def test_profiled_job_over_two_gpu_types_is_placed_by_memory_and_speed(
    k8s: client.ApiClient, jobs: Jobs, fake_node: Callable[..., object]
) -> None:
    for i in range(2):
        fake_node(f"h24-big-{i}", labels={SELECTOR: "h24-big", "rlplace.io/node-rank": str(i)}, gpus=8)
        fake_node(
            f"h24-small-{i}",
            labels={
                SELECTOR: "h24-small",
                "rlplace.io/node-rank": str(i),
                "nvidia.com/gpu.product": "NVIDIA-GeForce-RTX-4090",
                "nvidia.com/gpu.memory": "24564",
            },
            gpus=8,
        )
    specs = {
        "h24-big": {
            "nodeSelector": {"matchLabels": {SELECTOR: "h24-big"}},
            "acceleratorType": "a800",
            "acceleratorMemoryGb": 80,
        },
        "h24-small": {"nodeSelector": {"matchLabels": {SELECTOR: "h24-small"}}},
    }
    with nodegroups(k8s, specs) as custom:

        def status(name: str) -> dict:
            return custom.get_cluster_custom_object(GROUP, VERSION, "nodegroups", name).get("status") or {}

        wait_for(lambda: status("h24-small").get("totalUnits") == 16, 60, "h24-small counts its GPUs")
        small = status("h24-small")
        assert small["acceleratorType"] == "NVIDIA-GeForce-RTX-4090"
        assert small["acceleratorMemoryGb"] == pytest.approx(24564 / 1024)
        wait_for(lambda: status("h24-big").get("acceleratorMemoryGb") == 80, 60, "h24-big reports its memory")

        profile = {
            # the 4090s are priced faster for the actor, but its 56 GB per GPU only fit the a800s
            "actor_cost_by_type": {"a800": 100, "NVIDIA-GeForce-RTX-4090": 60},
            "inference_cost_by_type": {"a800": 20, "NVIDIA-GeForce-RTX-4090": 40},
            "rollout_cost_by_type": {"a800": 60, "NVIDIA-GeForce-RTX-4090": 120},
            "actor_memory_gb": 56,
            "rollout_memory_gb": 18,
            "model_size_gb": 14,
        }
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "RLJob",
            "metadata": {"name": "mixed", "annotations": {"rlplace.io/profile": json.dumps(profile)}},
            "spec": {
                "nodeGroups": ["h24-big", "h24-small"],
                "placementMode": "modelParallel",
                "autoPlacement": {"enabled": True},
                "modelParallel": {"actorTensorParallelSize": 2},
                "algorithm": {"groupSize": 8, "nMinibatches": 4, "rolloutBatchSize": 64},
            },
        }
        jobs.create(body)
        job_status = jobs.wait_phase("mixed", "Running", timeout=120)["status"]
        applied = {e["components"]: e for e in job_status["appliedPlacement"]}
        assert applied["actor"]["nodeGroup"] == "h24-big"
        assert {e.get("nodeGroup") for e in applied.values()} == {"h24-big", "h24-small"}
        assert job_status["predictedIterationTime"] > 0
        actor = next(c for c in job_status["placement"]["components"] if c["name"] == "actor")
        assert set(actor["nodes"]) <= {"h24-big-0", "h24-big-1"}
        jobs.delete("mixed")
        wait_for(lambda: jobs.raycluster("mixed") is None, 120, "RayCluster mixed gone")

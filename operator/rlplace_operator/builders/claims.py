"""The ResourceClaimTemplate of each worker pod that claims exactly its GPUs (a NodeGroup with gpuAllocation: dra),
and the pod's side of the claim (docs/dra.md). The pin itself, which devices and by what attribute, is decided in
cluster/dra.py."""

from __future__ import annotations

from collections.abc import Sequence

from placement_core import contract
from rlplace_operator.api.names import DRA_GROUP, DRA_VERSION, JOB_LABEL, child_labels
from rlplace_operator.cluster.dra import DevicePin
from rlplace_operator.planning.plan import WorkerNode

#: The name of the device request in every claim rlplace makes, and of the pod's claim entry.
CLAIM_REQUEST = "gpus"


def claim_template(job: str, pin: DevicePin) -> dict:
    """The ResourceClaimTemplate of one worker pod: its claims carry the job label (so admission knows whose
    devices they hold) and ask for exactly the pinned devices."""
    request = {
        "deviceClassName": pin.device_class,
        "allocationMode": "ExactCount",
        "count": len(pin.devices),
        "selectors": [{"cel": {"expression": pin.selector()}}],
    }
    return {
        "apiVersion": f"{DRA_GROUP}/{DRA_VERSION}",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": pin.template, "labels": child_labels(job)},
        "spec": {
            "metadata": {"labels": {JOB_LABEL: job}},
            "spec": {"devices": {"requests": [{"name": CLAIM_REQUEST, "exactly": request}]}},
        },
    }


def with_claim(template: dict, container: str, pin: DevicePin, pod_gpus: tuple[int, ...]) -> dict:
    """`template` claiming exactly the pinned GPUs (its ResourceClaimTemplate), with what the container's processes
    need to number them: PCI order, and the host GPUs for the binding check."""
    spec = dict(template["spec"])
    spec["resourceClaims"] = [{"name": CLAIM_REQUEST, "resourceClaimTemplateName": pin.template}]
    containers = []
    for item in spec["containers"]:
        if item["name"] == container:
            resources = {**item.get("resources", {}), "claims": [{"name": CLAIM_REQUEST}]}
            env = [
                *item.get("env", []),
                {"name": contract.CUDA_DEVICE_ORDER[0], "value": contract.CUDA_DEVICE_ORDER[1]},
                {"name": contract.HOST_GPUS_ENV, "value": ",".join(map(str, pin.host_gpus))},
            ]
            item = {**item, "resources": resources, "env": env}
        containers.append(item)
    spec["containers"] = containers
    assert len(pin.host_gpus) == len(pod_gpus), "a pin holds one host GPU per planned GPU of the pod"
    return {**template, "spec": spec}


def claim_templates(job: str, nodes: Sequence[WorkerNode]) -> list[dict]:
    """The ResourceClaimTemplates of the job's pods that claim exactly their GPUs (DRA)."""
    return [claim_template(job, node.pin) for node in nodes if node.pin is not None]

"""Dynamic Resource Allocation (resource.k8s.io/v1) for NodeGroups with `gpuAllocation: dra`.

A DRA driver publishes each node's GPUs as devices of ResourceSlices; the scheduler allocates a pod's
ResourceClaim from them and the driver hands the container exactly the allocated devices. rlplace never writes an
allocation (the scheduler may undo one it did not make, and never frees it): it makes each worker pod's claim so
narrow that the scheduler has one choice, `count: N` devices whose pin attribute (`index` or `uuid`) is one of
the N planned ones, on a pod pinned to its node. A device someone else holds leaves the pod Pending, never on
other GPUs.

Pure: slices and claims (API bodies) in, typed devices and pins out (the manifests: builders/claims.py).

Host GPU numbers: a node's devices of one driver in PCI order (the driver's `index` where it publishes one,
else the standard `resource.kubernetes.io/pciBusID` attribute, else the device name), numbered from 0 as
nvidia-smi numbers them. Inside a container given some of them, CUDA numbers its GPUs from 0 in that same
order (with CUDA_DEVICE_ORDER=PCI_BUS_ID), which is why a process's CUDA_VISIBLE_DEVICES is the position of
its GPUs within its pod's set (placement_core.contract.container_ordinals).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from placement_core.observe.verify import BindingReport
from rlplace_operator.api.names import JOB_LABEL
from rlplace_operator.api.nodegroup import Dra, PinAttribute

#: The standard attribute DRA drivers publish a device's PCI address under (NVIDIA's does).
PCI_BUS_ID_ATTRIBUTE = "resource.kubernetes.io/pciBusID"


@dataclass(frozen=True, slots=True)
class Device:
    """One device a driver publishes for a node."""

    name: str
    """The device name in its pool (gpu-4)."""
    pool: str
    index: int | None = None
    uuid: str | None = None
    pci_bus_id: str | None = None

    def pin(self, attribute: PinAttribute) -> int | str | None:
        """The value a claim pins this device by (None: the driver does not publish that attribute)."""
        return self.index if attribute is PinAttribute.INDEX else self.uuid


@dataclass(frozen=True, slots=True)
class NodeSlice:
    """The devices of one ResourceSlice of a node (what the slice index keeps)."""

    driver: str
    pool: str
    devices: tuple[Device, ...]


def _attribute(attributes: Mapping[str, object], name: str, driver: str) -> object:
    """An attribute's value ({"int": 4} -> 4), by its bare name or qualified by the driver's domain."""
    value = attributes.get(name, attributes.get(f"{driver}/{name}"))
    if not isinstance(value, Mapping):
        return None
    for kind in ("int", "string", "version", "bool"):
        if kind in value:
            return value[kind]
    return None


def node_slice(body: Mapping) -> tuple[str, NodeSlice] | None:
    """(node, its devices) of a ResourceSlice body, or None for a slice of no single node (allNodes, a node
    selector) or of no devices."""
    spec = body.get("spec") or {}
    node, driver = spec.get("nodeName"), spec.get("driver")
    if not node or not driver:
        return None
    pool = str((spec.get("pool") or {}).get("name") or node)
    devices = []
    for device in spec.get("devices") or []:
        attributes = device.get("attributes") or {}
        index = _attribute(attributes, "index", driver)
        uuid = _attribute(attributes, "uuid", driver)
        pci = attributes.get(PCI_BUS_ID_ATTRIBUTE) or {}
        devices.append(
            Device(
                str(device.get("name")),
                pool,
                int(index) if isinstance(index, int) else None,
                str(uuid) if uuid is not None else None,
                str(pci.get("string")) if isinstance(pci, Mapping) and pci.get("string") else None,
            )
        )
    return node, NodeSlice(driver, pool, tuple(devices))


def _natural(name: str) -> tuple:
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


def host_order(devices: Iterable[Device]) -> tuple[Device, ...]:
    """A node's devices in host GPU order: by `index` when every device has one, else by PCI bus id when every
    device has one, else by name (gpu-2 before gpu-10)."""
    listed = list(devices)
    if listed and all(d.index is not None for d in listed):
        return tuple(sorted(listed, key=lambda d: (d.index, d.name)))
    if listed and all(d.pci_bus_id for d in listed):
        return tuple(sorted(listed, key=lambda d: (d.pci_bus_id or "", d.name)))
    return tuple(sorted(listed, key=lambda d: _natural(d.name)))


def node_devices(slices: Iterable[NodeSlice], driver: str) -> tuple[Device, ...]:
    """One node's devices of `driver` over all its slices, in host GPU order (its host GPU numbers)."""
    return host_order(d for s in slices if s.driver == driver for d in s.devices)


@dataclass(frozen=True, slots=True)
class ClaimedDevice:
    """A device an allocated ResourceClaim holds."""

    driver: str
    pool: str
    device: str
    claim: str
    """namespace/name of the claim."""
    job: str | None
    """The RLJob whose worker pod's claim it is (the claim template's job label), or None."""


def claimed_devices(body: Mapping) -> list[ClaimedDevice]:
    """The devices an allocated ResourceClaim body holds (none while it is not allocated; admin-access results
    hold nothing, as the scheduler counts them)."""
    metadata = body.get("metadata") or {}
    allocation = (body.get("status") or {}).get("allocation") or {}
    results = (allocation.get("devices") or {}).get("results") or []
    claim = f"{metadata.get('namespace')}/{metadata.get('name')}"
    job = (metadata.get("labels") or {}).get(JOB_LABEL)
    return [
        ClaimedDevice(str(r.get("driver")), str(r.get("pool")), str(r.get("device")), claim, job)
        for r in results
        if not r.get("adminAccess")
    ]


def devices_annotation(gpus: Mapping[str, Sequence[int]]) -> str:
    """The RayCluster annotation value with the GPUs a job's pods claim (names.GPUS_ANNOTATION): `node=0,1,2,3`
    per DRA node, space separated."""
    return " ".join(f"{node}={','.join(map(str, sorted(ids)))}" for node, ids in sorted(gpus.items()))


def parse_devices_annotation(text: str) -> dict[str, frozenset[int]]:
    """Node -> host GPU numbers from a `devices_annotation` value (malformed entries are skipped)."""
    gpus: dict[str, frozenset[int]] = {}
    for entry in text.split():
        node, _, ids = entry.partition("=")
        numbers = [int(i) for i in ids.split(",") if i.isdigit()]
        if node and numbers:
            gpus[node] = frozenset(numbers)
    return gpus


# -- the claim of one worker pod ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DevicePin:
    """The exact GPUs one worker pod claims on its node."""

    settings: Dra
    host_gpus: tuple[int, ...]
    """Their host GPU numbers, ascending."""
    devices: tuple[Device, ...]
    """The devices, in the same order."""
    template: str
    """The ResourceClaimTemplate's name."""

    @property
    def device_class(self) -> str:
        return self.settings.device_class_name or self.settings.driver

    def selector(self) -> str:
        """The CEL expression that matches exactly these devices of the driver."""
        attribute = self.settings.pin_attribute
        values = ", ".join(json.dumps(d.pin(attribute)) for d in self.devices)
        driver = json.dumps(self.settings.driver)
        return f"device.driver == {driver} && device.attributes[{driver}].{attribute} in [{values}]"


class PinError(ValueError):
    """The devices cannot be pinned by the group's attribute (the driver does not publish it)."""


def device_pin(
    job: str, rank: int, attempt: int, settings: Dra, devices: Sequence[Device], host_gpus: Sequence[int]
) -> DevicePin:
    """The pin of node rank `rank`'s worker pod on the devices at `host_gpus` of its node (in host order).

    The template's name changes with what it pins and with the attempt: templates are immutable, so a
    re-placement or a restart gets a new one (the old one goes with the RLJob that owns it)."""
    chosen = tuple(devices[g] for g in sorted(host_gpus))
    missing = [d.name for d in chosen if d.pin(settings.pin_attribute) is None]
    if missing:
        raise PinError(
            f"device {missing[0]} of driver {settings.driver} publishes no '{settings.pin_attribute}' attribute "
            "to pin it by (NodeGroup dra.pinAttribute)"
        )
    digest = hashlib.sha256(f"{attempt}|{'|'.join(f'{d.pool}/{d.name}' for d in chosen)}".encode()).hexdigest()
    return DevicePin(settings, tuple(sorted(host_gpus)), chosen, claim_template_name(job, rank, digest[:8]))


def claim_template_name(job: str, rank: int, digest: str) -> str:
    """`<job>-n<rank>-gpus-<digest>`: a DNS subdomain (RLJob names are at most 63 characters)."""
    return f"{job}-n{rank}-gpus-{digest}"


def with_claims_checked(report: BindingReport, claimed: Mapping[str, Sequence[int]]) -> BindingReport:
    """The driver's report with each process that reported the GPUs its container was given (a DRA pod) checked
    against the GPUs the job's status says its node's pod claims (`claimed`: node -> host GPU numbers, from
    status.gpuClaims): the operator's own record, not the pod's environment, is the reference."""
    if not claimed:
        return report
    checks = []
    for check in report.checks:
        wanted = claimed.get(check.node_name)
        if wanted is not None and check.pod_host_gpus is not None and tuple(check.pod_host_gpus) != tuple(wanted):
            seen = ",".join(map(str, check.pod_host_gpus))
            problem = f"its container was given host GPUs {seen}, the job claims {','.join(map(str, wanted))} there"
            check = replace(check, problems=(*check.problems, problem))
        checks.append(check)
    return replace(report, checks=tuple(checks))

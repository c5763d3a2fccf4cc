"""What the RLJob's `spec.pods` settings add to the pods rlplace builds (pure: settings and a pod template in,
a pod template out).

The settings of one pod are the job-wide ones refined by its kind (head, workers, submitter) and, for a
worker, by the NodeGroups its node belongs to (api.podspec.PodSettings.for_*). rlplace's own parts of the pod (its node
affinity, requests, plan mount and variables, security context) are built first and never replaced: the
CRD refuses settings that would touch them, and here the pod's own labels and variables come last.
"""

from __future__ import annotations

from typing import Any

from rlplace_operator.api.podspec import SHM_MOUNT_PATH, PodOptions
from rlplace_operator.frameworks.base import ProbeMount

#: The in-memory emptyDir that gives /dev/shm its size (shmSize).
SHM_VOLUME = "rlplace-shm"


def with_volume(template: dict, volume: dict, container: str, mount: dict) -> dict:
    """`template` with `volume` added to the pod and `mount` to its container `container` (rlplace's own
    volumes: the checkpoint, a framework job's probe)."""
    pod = dict(template["spec"])
    pod["volumes"] = [*(pod.get("volumes") or []), volume]
    pod["containers"] = [
        {**c, "volumeMounts": [*(c.get("volumeMounts") or []), mount]} if c["name"] == container else c
        for c in pod["containers"]
    ]
    return {**template, "spec": pod}


def with_probe(template: dict, mount: ProbeMount | None, container: str) -> dict:
    """`template` with a framework's probe mounted in `container` (unchanged when the framework ships none)."""
    return template if mount is None else with_volume(template, mount.volume, container, mount.mount)


def wire(model: Any) -> dict:
    # Defaults left out, so the pod says what the user said and Kubernetes fills in the rest as usual.
    return model.model_dump(mode="json", by_alias=True, exclude_none=True, exclude_defaults=True)


def apply_pod_options(
    template: dict, options: PodOptions, container: str, default_service_account: str | None = None
) -> dict:
    """`template` (a pod template rlplace built) with the settings added; `container` is the main container's
    name (it gets the mounts and variables). Returns a new dict; the input is not changed."""
    metadata = dict(template.get("metadata") or {})
    spec = dict(template["spec"])
    if options.labels:
        metadata["labels"] = {**options.labels, **(metadata.get("labels") or {})}
    if options.annotations:
        metadata["annotations"] = {**options.annotations, **(metadata.get("annotations") or {})}
    service_account = options.service_account_name or default_service_account
    if service_account:
        spec["serviceAccountName"] = service_account
    if options.priority_class_name:
        spec["priorityClassName"] = options.priority_class_name
    if options.image_pull_secrets:
        spec["imagePullSecrets"] = [wire(s) for s in options.image_pull_secrets]
    if options.tolerations:
        spec["tolerations"] = [wire(t) for t in options.tolerations]
    volumes = [*(spec.get("volumes") or []), *(wire(v) for v in options.volumes)]
    mounts = [wire(m) for m in options.volume_mounts]
    if options.shm_size:
        volumes.append({"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": options.shm_size}})
        mounts.append({"name": SHM_VOLUME, "mountPath": SHM_MOUNT_PATH})
    if volumes:
        spec["volumes"] = volumes
    containers = []
    for body in spec["containers"]:
        if body["name"] == container:
            body = dict(body)
            if mounts:
                body["volumeMounts"] = [*(body.get("volumeMounts") or []), *mounts]
            if options.env:
                # rlplace's own variables stay last: for Kubernetes a later duplicate wins (the CRD refuses
                # the names, this keeps the rule even for a spec that skipped the CRD).
                body["env"] = [*(wire(e) for e in options.env), *(body.get("env") or [])]
            if options.env_from:
                body["envFrom"] = [wire(e) for e in options.env_from]
        containers.append(body)
    spec["containers"] = containers
    return {**template, **({"metadata": metadata} if metadata else {}), "spec": spec}

"""What the RLJob's `spec.pods` settings add to the pods rlplace builds (pure: settings and a pod template in,
a pod template out).

The settings of one pod are the job-wide ones refined by its kind (head, workers, submitter) and, for a
worker, by the NodeGroups its node belongs to (`effective_*`). rlplace's own parts of the pod (its node
affinity, requests, plan mount and variables, security context) are built first and never replaced: the
CRD refuses settings that would touch them, and here the pod's own labels and variables come last.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from rlplace_operator.api.podspec import SHM_MOUNT_PATH, PodOptions, Toleration
from rlplace_operator.api.rljob import RLJobSpec

#: The in-memory emptyDir that gives /dev/shm its size (shmSize).
SHM_VOLUME = "rlplace-shm"


def _keyed(entries: Iterable[Any], key: Callable[[Any], str]) -> list[Any]:
    """Entries in order, a later entry with the same key replacing the earlier one in its place."""
    result: dict[str, Any] = {}
    for entry in entries:
        result[key(entry)] = entry
    return list(result.values())


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


def merge(levels: Sequence[PodOptions]) -> PodOptions:
    """One pod's settings from the widest to the narrowest level: maps and lists add up (the same volume name,
    mount path, Secret or variable name replaces the wider entry), a single value replaces the wider one."""

    def last(attribute: str) -> Any:
        return next((getattr(o, attribute) for o in reversed(levels) if getattr(o, attribute) is not None), None)

    def joined(attribute: str) -> list[Any]:
        return [entry for o in levels for entry in getattr(o, attribute)]

    return PodOptions(
        labels={k: v for o in levels for k, v in o.labels.items()},
        annotations={k: v for o in levels for k, v in o.annotations.items()},
        service_account_name=last("service_account_name"),
        image_pull_secrets=_keyed(joined("image_pull_secrets"), lambda s: s.name),
        tolerations=joined("tolerations"),
        priority_class_name=last("priority_class_name"),
        volumes=_keyed(joined("volumes"), lambda v: v.name),
        volume_mounts=_keyed(joined("volume_mounts"), lambda m: m.mount_path),
        env=_keyed(joined("env"), lambda e: e.name),
        env_from=joined("env_from"),
        shm_size=last("shm_size"),
    )


def effective_head(spec: RLJobSpec) -> PodOptions:
    return merge([spec.pods, spec.pods.head])


def effective_submitter(spec: RLJobSpec) -> PodOptions:
    return merge([spec.pods, spec.pods.submitter])


def effective_worker(spec: RLJobSpec, node_groups: Iterable[str]) -> PodOptions:
    """The settings of the worker on a node of these NodeGroups (job-wide, workers, then each group's in the
    order of spec.pods.workerNodeGroups)."""
    groups = set(node_groups)
    per_group = [g for g in spec.pods.worker_node_groups if g.node_group in groups]
    return merge([spec.pods, spec.pods.workers, *per_group])


def worker_tolerations(spec: RLJobSpec, node_groups: Iterable[str]) -> list[Toleration]:
    return effective_worker(spec, node_groups).tolerations


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

"""The one module that calls the Kubernetes API (besides kopf itself).

Children are created first; a 409 means the object exists (another reconcile, or one interrupted by a
restart), so it is read and compared, and only when a field we own differs is our manifest server-side
applied (field manager `rlplace`, forced: the fields are ours). Never a duplicate, never a crash on a
conflict with KubeRay's own writes, and re-applying an unchanged plan writes nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from rlplace_operator.models import GROUP, VERSION
from rlplace_operator.names import (
    API_VERSION,
    RAY_GROUP,
    RAY_VERSION,
    RAYCLUSTER_PLURAL,
    RAYJOB_PLURAL,
    RLJOB_PLURAL,
)

FIELD_MANAGER = "rlplace"
DISCOVERY_TTL_SECONDS = 60.0
_APPLY = {"field_manager": FIELD_MANAGER, "force": True, "_content_type": "application/apply-patch+yaml"}


def contains(live: object, wanted: object) -> bool:
    """Whether `live` holds everything in `wanted` (the API server and KubeRay add defaults we never set)."""
    if isinstance(wanted, dict):
        return isinstance(live, dict) and all(k in live and contains(live[k], v) for k, v in wanted.items())
    if isinstance(wanted, list):
        return isinstance(live, list) and len(live) == len(wanted) and all(map(contains, live, wanted))
    return live == wanted


def _owned(body: dict, keys: tuple[str, ...]) -> dict:
    metadata = body.get("metadata", {})
    return {"labels": metadata.get("labels") or {}, **{k: body[k] for k in keys if k in body}}


class Kube:
    """Thin typed wrappers over the official client, made once at operator start-up."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self._served_until: dict[str, float] = {}

    # -- children --------------------------------------------------------------------------------------------

    def _apply(
        self,
        body: dict,
        keys: tuple[str, ...],
        create: Callable[[dict], object],
        read: Callable[[], object],
        apply: Callable[[dict], object],
    ) -> dict:
        try:
            return self._as_dict(create(body))
        except ApiException as err:
            if err.status != 409:
                raise
        live = self._as_dict(read())
        if contains(_owned(live, keys), _owned(body, keys)):
            return live
        return self._as_dict(apply(body))

    def apply_configmap(self, namespace: str, body: dict) -> dict:
        name = body["metadata"]["name"]
        return self._apply(
            body,
            ("data", "binaryData"),
            lambda b: self.core.create_namespaced_config_map(namespace, b),
            lambda: self.core.read_namespaced_config_map(name, namespace),
            lambda b: self.core.patch_namespaced_config_map(name, namespace, b, **_APPLY),
        )

    def apply_raycluster(self, namespace: str, body: dict) -> dict:
        name = body["metadata"]["name"]
        args = (RAY_GROUP, RAY_VERSION, namespace, RAYCLUSTER_PLURAL)
        return self._apply(
            body,
            ("spec",),
            lambda b: self.custom.create_namespaced_custom_object(*args, b),
            lambda: self.custom.get_namespaced_custom_object(*args, name),
            lambda b: self.custom.patch_namespaced_custom_object(*args, name, b, **_APPLY),
        )

    def get_raycluster(self, namespace: str, name: str) -> dict | None:
        try:
            return self.custom.get_namespaced_custom_object(RAY_GROUP, RAY_VERSION, namespace, RAYCLUSTER_PLURAL, name)
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def delete_raycluster(self, namespace: str, name: str) -> bool:
        """True if a RayCluster was there to delete."""
        try:
            self.custom.delete_namespaced_custom_object(RAY_GROUP, RAY_VERSION, namespace, RAYCLUSTER_PLURAL, name)
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        return True

    def apply_rayjob(self, namespace: str, body: dict) -> dict:
        name = body["metadata"]["name"]
        args = (RAY_GROUP, RAY_VERSION, namespace, RAYJOB_PLURAL)
        return self._apply(
            body,
            ("spec",),
            lambda b: self.custom.create_namespaced_custom_object(*args, b),
            lambda: self.custom.get_namespaced_custom_object(*args, name),
            lambda b: self.custom.patch_namespaced_custom_object(*args, name, b, **_APPLY),
        )

    def get_rayjob(self, namespace: str, name: str) -> dict | None:
        try:
            return self.custom.get_namespaced_custom_object(RAY_GROUP, RAY_VERSION, namespace, RAYJOB_PLURAL, name)
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def suspend_rayjob(self, namespace: str, name: str) -> bool:
        """Set spec.suspend on the job's RayJob (KubeRay then stops the driver and deletes the RayCluster);
        False if there is none. A merge patch of the one field: the rest of the spec stays as applied."""
        try:
            self.custom.patch_namespaced_custom_object(
                RAY_GROUP, RAY_VERSION, namespace, RAYJOB_PLURAL, name, {"spec": {"suspend": True}}
            )
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        return True

    def rayjob_crd_installed(self) -> bool:
        """Whether the API serves ray.io/v1 RayJobs (see raycluster_crd_installed)."""
        return self._ray_kind_served(RAYJOB_PLURAL)

    def container_log_head(self, namespace: str, label_selector: str, container: str, limit_bytes: int) -> str | None:
        """The first `limit_bytes` of `container`'s log in the newest pod matching `label_selector`; None when
        no such pod or container has a log yet."""
        pods = self.core.list_namespaced_pod(namespace, label_selector=label_selector).items
        if not pods:
            return None
        newest = max(pods, key=lambda pod: pod.metadata.creation_timestamp)
        try:
            return self.core.read_namespaced_pod_log(
                newest.metadata.name, namespace, container=container, limit_bytes=limit_bytes
            )
        except ApiException as err:
            # 400: the container has not started; 404: the pod just went away; 5xx: the API server could not
            # reach the node's kubelet (a node without one, or one going down). No log now, maybe later.
            if err.status in (400, 404) or err.status >= 500:
                return None
            raise

    def raycluster_crd_installed(self) -> bool:
        """Whether the API serves ray.io/v1 RayClusters."""
        return self._ray_kind_served(RAYCLUSTER_PLURAL)

    def _ray_kind_served(self, plural: str) -> bool:
        """Whether the API serves ray.io/v1 `plural`.

        Asked through API discovery, which needs no RBAC rule and is a few hundred bytes (KubeRay's CRD
        object is megabytes of schema). A yes is remembered for a minute: under a burst of new jobs the
        answer does not change, and a KubeRay uninstall is still noticed soon.
        """
        if time.monotonic() < self._served_until.get(plural, 0.0):
            return True
        try:
            resources = self.custom.get_api_resources(RAY_GROUP, RAY_VERSION)
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        served = any(r.name == plural for r in resources.resources or [])
        if served:
            self._served_until[plural] = time.monotonic() + DISCOVERY_TTL_SECONDS
        return served

    # -- RLJobs ----------------------------------------------------------------------------------------------

    def get_rljob(self, namespace: str, name: str) -> dict | None:
        try:
            return self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, RLJOB_PLURAL, name)
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def patch_rljob_status(self, namespace: str, name: str, status: dict) -> None:
        self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, RLJOB_PLURAL, name, {"apiVersion": API_VERSION, "status": status}
        )

    def _as_dict(self, obj: object) -> dict:
        return obj if isinstance(obj, dict) else self.api_client.sanitize_for_serialization(obj)

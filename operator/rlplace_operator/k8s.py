"""The one module that calls the Kubernetes API (besides kopf itself).

Children are written by server-side apply only (field manager `rlplace`, forced: the fields are ours), for
create and update alike, so a key the operator stops writing (the ConfigMap's `plan.json` after a re-plan
stores `plan.json.gz`) is removed by the API server. Job status is written as the merge patch from the status
the operator saw to the one it wants: nothing when they agree, null for a field that became empty.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping

import kopf
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from rlplace_operator.conditions import STATUS_REJECTED, STATUS_WRITTEN, merge_patch, set_condition, short
from rlplace_operator.models import GROUP, VERSION
from rlplace_operator.names import (
    API_VERSION,
    RAY_GROUP,
    RAY_VERSION,
    RAYCLUSTER_PLURAL,
    RLJOB_PLURAL,
)

FIELD_MANAGER = "rlplace"
DISCOVERY_TTL_SECONDS = 60.0
_APPLY = {"field_manager": FIELD_MANAGER, "force": True, "_content_type": "application/apply-patch+yaml"}


class Kube:
    """Thin typed wrappers over the official client, made once at operator start-up."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self._raycluster_served_until = 0.0

    # -- children --------------------------------------------------------------------------------------------

    def apply_configmap(self, namespace: str, body: dict) -> dict:
        name = body["metadata"]["name"]
        return self._as_dict(self.core.patch_namespaced_config_map(name, namespace, body, **_APPLY))

    def apply_raycluster(self, namespace: str, body: dict) -> dict:
        name = body["metadata"]["name"]
        args = (RAY_GROUP, RAY_VERSION, namespace, RAYCLUSTER_PLURAL)
        # The client does not decode a custom object's reply to an apply patch (it returns None): read it here.
        response = self.custom.patch_namespaced_custom_object(*args, name, body, _preload_content=False, **_APPLY)
        return json.loads(response.data)

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

    def worker_pod_nodes(self, namespace: str, cluster: str) -> list[str | None]:
        """The node each worker pod of a RayCluster is bound to (None: not bound yet)."""
        selector = f"ray.io/cluster={cluster},ray.io/node-type=worker"
        pods = self.core.list_namespaced_pod(namespace, label_selector=selector).items
        return [pod.spec.node_name for pod in pods if pod.metadata.deletion_timestamp is None]

    def raycluster_crd_installed(self) -> bool:
        """Whether the API serves ray.io/v1 RayClusters.

        Asked through API discovery, which needs no RBAC rule and is a few hundred bytes (KubeRay's CRD
        object is megabytes of schema). A yes is remembered for a minute: under a burst of new jobs the
        answer does not change, and a KubeRay uninstall is still noticed soon.
        """
        if time.monotonic() < self._raycluster_served_until:
            return True
        try:
            resources = self.custom.get_api_resources(RAY_GROUP, RAY_VERSION)
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        served = any(r.name == RAYCLUSTER_PLURAL for r in resources.resources or [])
        if served:
            self._raycluster_served_until = time.monotonic() + DISCOVERY_TTL_SECONDS
        return served

    # -- RLJobs ----------------------------------------------------------------------------------------------

    def patch_rljob_status(self, namespace: str, name: str, patch: dict) -> None:
        self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, RLJOB_PLURAL, name, {"apiVersion": API_VERSION, "status": patch}
        )

    def write_rljob_status(self, body: Mapping, before: Mapping, after: Mapping) -> bool:
        """Patch the job's status from `before` to `after`; True when a request was sent.

        A write the API server refuses as invalid (422: the object grew past its size limit, say) is not
        retried as is: the job gets a short StatusWritten=False condition naming the refusal instead, and a
        Warning Event when even that cannot be written.
        """
        patch = merge_patch(before, after)
        if not patch:
            return False
        metadata = body["metadata"]
        try:
            self.patch_rljob_status(metadata["namespace"], metadata["name"], patch)
        except ApiException as err:
            if err.status == 404:  # the job was deleted meanwhile: nothing left to describe
                return True
            if err.status != 422:
                raise
            refusal = short(f"the API server refused the status update: {_message(err)}")
            conditions = set_condition(before.get("conditions"), STATUS_WRITTEN, False, STATUS_REJECTED, refusal)
            try:
                self.patch_rljob_status(metadata["namespace"], metadata["name"], {"conditions": conditions})
            except ApiException as again:
                if again.status != 422:
                    raise
                kopf.warn(dict(body), reason=STATUS_REJECTED, message=refusal)
        return True

    def _as_dict(self, obj: object) -> dict:
        return obj if isinstance(obj, dict) else self.api_client.sanitize_for_serialization(obj)


def _message(err: ApiException) -> str:
    try:
        return str(json.loads(err.body).get("message", err.reason))
    except (TypeError, ValueError):
        return str(err.reason)

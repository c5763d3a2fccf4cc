"""The one module that calls the Kubernetes API (besides kopf itself).

Children are written by server-side apply only (field manager `rlplace`, forced: the fields are ours), for
create and update alike, so a key the operator stops writing (the ConfigMap's `plan.json` after a re-plan
stores `plan.json.gz`) is removed by the API server. Job status is written as the merge patch from the status
the operator saw to the one it wants: nothing when they agree, null for a field that became empty.
"""

from __future__ import annotations

import enum
import json
import os
import time
from collections.abc import Iterator, Mapping
from typing import Any

import kopf
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from rlplace_operator.api.base import GROUP, VERSION
from rlplace_operator.api.conditions import STATUS_REJECTED, STATUS_WRITTEN, merge_patch, set_condition, short
from rlplace_operator.api.names import (
    API_VERSION,
    CLAIM_TEMPLATE_PLURAL,
    CLUSTERQUEUE_PLURAL,
    DRA_GROUP,
    DRA_VERSION,
    JOB_LABEL,
    LOCALQUEUE_PLURAL,
    NODEGROUP_PLURAL,
    PRIORITY_CLASS_PLURAL,
    RAY_GROUP,
    RAY_VERSION,
    RAYCLUSTER_PLURAL,
    RAYJOB_PLURAL,
    RESOURCE_FLAVOR_PLURAL,
    RLJOB_PLURAL,
    TOPOLOGY_PLURAL,
    WORKLOAD_GROUP,
    WORKLOAD_PLURAL,
    WORKLOAD_VERSION,
)

FIELD_MANAGER = "rlplace"
DISCOVERY_TTL_SECONDS = 60.0
_APPLY = {"field_manager": FIELD_MANAGER, "force": True, "_content_type": "application/apply-patch+yaml"}


def load_config() -> None:
    """The API server and credentials: the pod's ServiceAccount in a cluster, else the kubeconfig."""
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()


class KubeconfigError(Exception):
    """No kubeconfig, or not the context asked for (a tool run by a person: `kubectl rlplace`)."""


def kubeconfig_client(context: str | None) -> tuple[Kube, str]:
    """For a tool a person runs beside kubectl: the kubeconfig kubectl uses (KUBECONFIG, else ~/.kube/config), its
    current context or `context`, and that context's namespace ("default" when it names none)."""
    # Read now, not when the client was imported (it takes KUBECONFIG once, at import); a list of files is merged.
    path = os.environ.get("KUBECONFIG") or None
    try:
        config.load_kube_config(config_file=path, context=context)
        contexts, active = config.list_kube_config_contexts(config_file=path)
    except (config.ConfigException, OSError) as err:
        raise KubeconfigError(str(err)) from None
    chosen = next((c for c in contexts if c["name"] == context), None) if context else active
    namespace = ((chosen or {}).get("context") or {}).get("namespace") or "default"
    return Kube(_pooled_client(pool_size=4)), namespace


def api_client(pool_size: int) -> client.ApiClient:
    """A client with one pooled connection per thread that calls the API: a smaller pool makes threads open (and
    TLS-handshake) a fresh connection for every call under load."""
    load_config()
    return _pooled_client(pool_size)


def _pooled_client(pool_size: int) -> client.ApiClient:
    """A client of the configuration loaded last, with `pool_size` pooled connections."""
    configuration = client.Configuration.get_default_copy()
    configuration.connection_pool_maxsize = pool_size
    return client.ApiClient(configuration)


def missing_crds() -> list[str]:
    """rlplace's resources the API server does not serve (asked through discovery, which needs no RBAC)."""
    load_config()
    with client.ApiClient() as api:
        try:
            resources = client.CustomObjectsApi(api).get_api_resources(GROUP, VERSION).resources
        except ApiException as err:
            if err.status != 404:
                raise
            resources = []
    served = {r.name for r in resources or []}
    return [f"{plural}.{GROUP}" for plural in (RLJOB_PLURAL, NODEGROUP_PLURAL) if plural not in served]


#: Label on the operator's pod saying which replica leads (leadership.py): the chart's Service sends the jobs'
#: progress reports and Prometheus's scrapes to the leader only (a standby serves neither).
ROLE_LABEL = "rlplace.io/operator-role"


def label_pod(namespace: str, name: str, labels: Mapping[str, str]) -> str | None:
    """Merge `labels` into a pod's labels (the operator's own pod: ROLE_LABEL); why not, in one line, if refused."""
    load_config()
    try:
        client.CoreV1Api().patch_namespaced_pod(name, namespace, {"metadata": {"labels": dict(labels)}})
    except ApiException as err:
        return f"could not label pod {namespace}/{name} {dict(labels)}: {api_message(err)}"
    return None


class ProgressWrite(enum.Enum):
    """What became of a status.progress write."""

    WRITTEN = "written"
    GONE = "gone"
    """The job no longer exists."""
    OTHER_CLUSTER = "other-cluster"
    """The job runs on another Ray cluster than the reporting driver's: that driver's attempt was stopped."""
    NO_CLUSTER_YET = "no-cluster-yet"
    """The job names no Ray cluster yet (the operator has not seen its new one): the next report is written."""


class StatusConflict(Exception):
    """The job changed since its status was read (optimistic concurrency): read it again, reconcile again."""


class Kube:
    """Thin typed wrappers over the official client, made once at operator start-up."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.api_client = api_client
        self.core = client.CoreV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self._served_until: dict[str, float] = {}

    # -- children --------------------------------------------------------------------------------------------

    def apply_configmap(self, namespace: str, body: dict) -> dict:
        name = body["metadata"]["name"]
        return self._as_dict(self.core.patch_namespaced_config_map(name, namespace, body, **_APPLY))

    def apply_raycluster(self, namespace: str, body: dict) -> dict:
        return self._apply_custom(namespace, RAYCLUSTER_PLURAL, body)

    def _apply_custom(self, namespace: str, plural: str, body: dict) -> dict:
        name = body["metadata"]["name"]
        args = (RAY_GROUP, RAY_VERSION, namespace, plural)
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

    def patch_ray_object(self, namespace: str, plural: str, name: str, patch: dict) -> bool:
        """A merge patch of a RayCluster or RayJob (lists in it are replaced whole); False when it is gone."""
        try:
            self.custom.patch_namespaced_custom_object(RAY_GROUP, RAY_VERSION, namespace, plural, name, patch)
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        return True

    def annotate_pod(self, namespace: str, name: str, annotations: Mapping[str, str]) -> None:
        """Set annotations of a pod; gone already is fine."""
        try:
            self.core.patch_namespaced_pod(name, namespace, {"metadata": {"annotations": dict(annotations)}})
        except ApiException as err:
            if err.status != 404:
                raise

    def delete_pod_now(self, namespace: str, name: str) -> None:
        """Delete a pod without its grace period: its node is gone or unreachable, so its kubelet would never
        confirm a graceful deletion and the pod would stay Terminating."""
        try:
            self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        except ApiException as err:
            if err.status != 404:
                raise

    def worker_pod_nodes(self, namespace: str, selector: str) -> list[str | None]:
        """The node each worker pod matching `selector` is bound to (None: not bound yet)."""
        pods = self.core.list_namespaced_pod(namespace, label_selector=selector).items
        return [pod.spec.node_name for pod in pods if pod.metadata.deletion_timestamp is None]

    def apply_rayjob(self, namespace: str, body: dict) -> dict:
        return self._apply_custom(namespace, RAYJOB_PLURAL, body)

    def delete_rayjob(self, namespace: str, name: str) -> bool:
        """True if a RayJob was there to delete (its RayCluster and submitter go with it)."""
        try:
            self.custom.delete_namespaced_custom_object(RAY_GROUP, RAY_VERSION, namespace, RAYJOB_PLURAL, name)
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        return True

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

    def rayjob_served(self) -> bool:
        """Whether the API serves ray.io/v1 RayJobs (see raycluster_served)."""
        return self._ray_kind_served(RAYJOB_PLURAL)

    def _container_logs(
        self, namespace: str, label_selector: str, container: str, newest_only: bool = False, **read: int
    ) -> Iterator[str]:
        """`container`'s log (`read`: limit_bytes or tail_lines) in each pod matching `label_selector`, newest pod
        first (with `newest_only`, only the newest pod), read one at a time as the caller asks; pods whose
        container has no log yet are skipped."""
        pods = self.core.list_namespaced_pod(namespace, label_selector=label_selector).items
        pods = sorted(pods, key=lambda pod: pod.metadata.creation_timestamp, reverse=True)
        for pod in pods[:1] if newest_only else pods:
            try:
                log = self.core.read_namespaced_pod_log(pod.metadata.name, namespace, container=container, **read)
            except ApiException as err:
                # 400: the container has not started; 404: the pod just went away; 5xx: the API server could
                # not reach the node's kubelet (a node without one, or one going down). No log now, maybe later.
                if err.status in (400, 404) or err.status >= 500:
                    continue
                raise
            if log:  # the client reads an empty log (a container that has printed nothing yet) as None
                yield log

    def container_log_heads(
        self, namespace: str, label_selector: str, container: str, limit_bytes: int, newest_only: bool = False
    ) -> Iterator[str]:
        """The first `limit_bytes` of `container`'s log in each pod matching `label_selector`, newest pod
        first (see `_container_logs`)."""
        return self._container_logs(namespace, label_selector, container, newest_only, limit_bytes=limit_bytes)

    def container_log_tail(self, namespace: str, label_selector: str, container: str, lines: int) -> str:
        """The last `lines` of `container`'s log in the newest pod matching `label_selector` that has one ('' if
        none)."""
        return next(self._container_logs(namespace, label_selector, container, tail_lines=lines), "")

    def container_log(self, namespace: str, label_selector: str, container: str) -> str:
        """The whole log of `container` in the newest pod matching `label_selector` that has one ('' if none)."""
        return next(self._container_logs(namespace, label_selector, container, newest_only=True), "")

    def pods_on_node(self, namespace: str, label_selector: str, node: str) -> list[str]:
        """The names of the running pods matching `label_selector` on `node`."""
        pods = self.core.list_namespaced_pod(
            namespace, label_selector=label_selector, field_selector=f"spec.nodeName={node},status.phase=Running"
        ).items
        return [pod.metadata.name for pod in pods]

    def exec_in_pod(self, namespace: str, pod: str, container: str, command: list[str]) -> str:
        """What `command` prints (stdout and stderr) run in the container, as `kubectl exec` runs it."""
        from kubernetes.stream import stream

        return stream(
            self.core.connect_get_namespaced_pod_exec,
            pod,
            namespace,
            container=container,
            command=command,
            stderr=True,
            stdin=False,
            stdout=True,
            tty=False,
        )

    def warning_events(self, namespace: str) -> list[dict]:
        """The namespace's Warning events (core/v1), as API JSON dicts."""
        response = self.core.list_namespaced_event(namespace, field_selector="type=Warning", _preload_content=False)
        return list(json.loads(response.data).get("items") or [])

    def get_node(self, name: str) -> dict | None:
        try:
            response = self.core.read_node(name, _preload_content=False)
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return json.loads(response.data)

    def get_configmap(self, namespace: str, name: str) -> dict | None:
        try:
            response = self.core.read_namespaced_config_map(name, namespace, _preload_content=False)
        except ApiException as err:
            if err.status == 404:
                return None
            raise
        return json.loads(response.data)

    def raycluster_served(self) -> bool:
        """Whether the API serves ray.io/v1 RayClusters."""
        return self._ray_kind_served(RAYCLUSTER_PLURAL)

    def _ray_kind_served(self, plural: str) -> bool:
        return self._kind_served(RAY_GROUP, RAY_VERSION, plural)

    def _kind_served(self, group: str, version: str, plural: str) -> bool:
        """Whether the API serves `group`/`version` `plural`.

        Asked through API discovery, which needs no RBAC rule and is a few hundred bytes (KubeRay's CRD
        object is megabytes of schema). A yes is remembered for a minute: under a burst of new jobs the
        answer does not change, and a KubeRay uninstall is still noticed soon.
        """
        key = f"{plural}.{group}/{version}"
        if time.monotonic() < self._served_until.get(key, 0.0):
            return True
        try:
            resources = self.custom.get_api_resources(group, version)
        except ApiException as err:
            if err.status == 404:
                return False
            raise
        served = any(r.name == plural for r in resources.resources or [])
        if served:
            self._served_until[key] = time.monotonic() + DISCOVERY_TTL_SECONDS
        return served

    # -- Kueue's objects --------------------------------------------------------------------------------------

    def workloads_served(self) -> bool:
        """Whether the API serves Kueue's Workloads (API discovery, remembered for a minute)."""
        return self._kind_served(WORKLOAD_GROUP, WORKLOAD_VERSION, WORKLOAD_PLURAL)

    def _get_queue_object(self, plural: str, name: str, namespace: str | None = None) -> dict | None:
        try:
            if namespace is None:
                return self.custom.get_cluster_custom_object(WORKLOAD_GROUP, WORKLOAD_VERSION, plural, name)
            return self.custom.get_namespaced_custom_object(WORKLOAD_GROUP, WORKLOAD_VERSION, namespace, plural, name)
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def get_workload(self, namespace: str, name: str) -> dict | None:
        return self._get_queue_object(WORKLOAD_PLURAL, name, namespace)

    def get_localqueue(self, namespace: str, name: str) -> dict | None:
        return self._get_queue_object(LOCALQUEUE_PLURAL, name, namespace)

    def get_clusterqueue(self, name: str) -> dict | None:
        return self._get_queue_object(CLUSTERQUEUE_PLURAL, name)

    def get_workload_priority_class(self, name: str) -> dict | None:
        return self._get_queue_object(PRIORITY_CLASS_PLURAL, name)

    def get_kueue_topology(self, name: str) -> dict | None:
        """Kueue's Topology `name`; None when it does not exist (or Kueue is not installed)."""
        return self._get_queue_object(TOPOLOGY_PLURAL, name)

    def list_resource_flavors(self) -> list[dict]:
        """Kueue's ResourceFlavors; none when Kueue is not installed."""
        try:
            listed = self.custom.list_cluster_custom_object(WORKLOAD_GROUP, WORKLOAD_VERSION, RESOURCE_FLAVOR_PLURAL)
        except ApiException as err:
            if err.status == 404:
                return []
            raise
        return list(listed.get("items") or [])

    def create_claim_template(self, namespace: str, body: dict) -> None:
        """Create a worker pod's ResourceClaimTemplate (one of that name is the same pin: templates are
        immutable, and the name says what they pin)."""
        try:
            self.custom.create_namespaced_custom_object(DRA_GROUP, DRA_VERSION, namespace, CLAIM_TEMPLATE_PLURAL, body)
        except ApiException as err:
            if err.status != 409:
                raise

    def delete_claim_templates(self, namespace: str, job: str, keep: set[str]) -> None:
        """Delete the job's ResourceClaimTemplates (its job label) but `keep`: earlier pins no pod names now."""
        listed = self.custom.list_namespaced_custom_object(
            DRA_GROUP, DRA_VERSION, namespace, CLAIM_TEMPLATE_PLURAL, label_selector=f"{JOB_LABEL}={job}"
        )
        for item in listed.get("items") or []:
            name = item["metadata"]["name"]
            if name in keep:
                continue
            try:
                self.custom.delete_namespaced_custom_object(
                    DRA_GROUP, DRA_VERSION, namespace, CLAIM_TEMPLATE_PLURAL, name
                )
            except ApiException as err:
                if err.status != 404:
                    raise

    def create_workload(self, namespace: str, body: dict) -> dict:
        """Create the job's Workload (an existing one of that name is the same demand: read it instead)."""
        try:
            return self.custom.create_namespaced_custom_object(
                WORKLOAD_GROUP, WORKLOAD_VERSION, namespace, WORKLOAD_PLURAL, body
            )
        except ApiException as err:
            if err.status != 409:
                raise
        return self.get_workload(namespace, body["metadata"]["name"]) or body

    def job_workloads(self, namespace: str, job: str) -> list[dict]:
        """The Workloads rlplace made for `job` (its job label)."""
        listed = self.custom.list_namespaced_custom_object(
            WORKLOAD_GROUP, WORKLOAD_VERSION, namespace, WORKLOAD_PLURAL, label_selector=f"{JOB_LABEL}={job}"
        )
        return list(listed.get("items") or [])

    def patch_workload(self, namespace: str, name: str, patch: list[dict[str, Any]]) -> None:
        """Apply a JSON patch to a Workload's spec and metadata (gone or changed meanwhile: its `test` ops fail with
        422, and the job's next look sees it as it is)."""
        try:
            self.custom.patch_namespaced_custom_object(
                WORKLOAD_GROUP,
                WORKLOAD_VERSION,
                namespace,
                WORKLOAD_PLURAL,
                name,
                patch,
                _content_type="application/json-patch+json",
            )
        except ApiException as err:
            if err.status not in (404, 422):
                raise

    def delete_workload(self, namespace: str, name: str) -> None:
        try:
            self.custom.delete_namespaced_custom_object(
                WORKLOAD_GROUP, WORKLOAD_VERSION, namespace, WORKLOAD_PLURAL, name
            )
        except ApiException as err:
            if err.status != 404:
                raise

    def replace_workload_status(self, workload: Mapping, status: Mapping) -> None:
        """Write a Workload's whole status, conditional on the resourceVersion it was read at (Kueue writes the
        same status by server-side apply; a merge patch would replace its conditions list): a 409 means Kueue
        wrote in between, and the caller reads it again."""
        metadata = workload["metadata"]
        body = {
            "apiVersion": f"{WORKLOAD_GROUP}/{WORKLOAD_VERSION}",
            "kind": "Workload",
            "metadata": {
                "name": metadata["name"],
                "namespace": metadata["namespace"],
                "resourceVersion": metadata["resourceVersion"],
            },
            "spec": workload["spec"],
            "status": dict(status),
        }
        try:
            self.custom.replace_namespaced_custom_object_status(
                WORKLOAD_GROUP, WORKLOAD_VERSION, metadata["namespace"], WORKLOAD_PLURAL, metadata["name"], body
            )
        except ApiException as err:
            if err.status == 409:
                raise StatusConflict(metadata["name"]) from None
            if err.status != 404:
                raise

    # -- RLJobs ----------------------------------------------------------------------------------------------

    def get_rljob(self, namespace: str, name: str) -> dict | None:
        try:
            return self.custom.get_namespaced_custom_object(GROUP, VERSION, namespace, RLJOB_PLURAL, name)
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def rljobs_served(self) -> bool:
        """Whether the cluster serves RLJobs (rlplace's CRDs are installed)."""
        return self._kind_served(GROUP, VERSION, RLJOB_PLURAL)

    def list_rljobs(self, namespace: str | None) -> list[dict]:
        """The RLJobs of a namespace, or of every namespace (None)."""
        if namespace is None:
            listed = self.custom.list_cluster_custom_object(GROUP, VERSION, RLJOB_PLURAL)
        else:
            listed = self.custom.list_namespaced_custom_object(GROUP, VERSION, namespace, RLJOB_PLURAL)
        return list(listed.get("items") or [])

    def set_component_replicas(self, namespace: str, name: str, index: int, component: str, replicas: int) -> None:
        """Set spec.components[index].replicas (the elastic loop's change, docs/elastic.md), as a JSON patch that first
        tests that the entry is still `component`'s: a user who reordered or removed it meanwhile wins (422)."""
        path = f"/spec/components/{index}"
        patch = [
            {"op": "test", "path": f"{path}/name", "value": component},
            {"op": "add", "path": f"{path}/replicas", "value": replicas},
        ]
        try:
            # The client sends a merge patch unless told otherwise: this is a JSON patch (a list).
            self.custom.patch_namespaced_custom_object(
                GROUP, VERSION, namespace, RLJOB_PLURAL, name, patch, _content_type="application/json-patch+json"
            )
        except ApiException as err:
            if err.status not in (404, 422):
                raise

    def patch_rljob_status(self, namespace: str, name: str, patch: dict, resource_version: str | None = None) -> dict:
        """Merge-patch the job's status; with `resource_version` only if the job is still at that version
        (the API server answers 409 Conflict otherwise: someone wrote in between, read again)."""
        body: dict = {"apiVersion": API_VERSION, "status": patch}
        if resource_version:
            body["metadata"] = {"resourceVersion": resource_version}
        response = self.custom.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, RLJOB_PLURAL, name, body, _preload_content=False
        )
        return json.loads(response.data)

    def write_rljob_status(
        self, body: Mapping, before: Mapping, after: Mapping, resource_version: str | None = None
    ) -> bool:
        """Patch the job's status from `before` to `after`; True when a request was sent.

        With `resource_version`, the write is conditional on the job being at that version: a 409 Conflict
        (raised as `StatusConflict`) means another writer changed it since it was read; the caller reads it
        again and reconciles again, so two writers never drop each other's conditions.

        A write the API server refuses as invalid (422: the object grew past its size limit, say) is not
        retried as is: the job gets a short StatusWritten=False condition naming the refusal instead, and a
        Warning Event when even that cannot be written.
        """
        patch = merge_patch(before, after)
        if not patch:
            return False
        metadata = body["metadata"]
        try:
            self.patch_rljob_status(metadata["namespace"], metadata["name"], patch, resource_version)
        except ApiException as err:
            if err.status == 404:  # the job was deleted meanwhile: nothing left to describe
                return True
            if err.status == 409:
                raise StatusConflict(metadata["name"]) from None
            if err.status != 422:
                raise
            refusal = short(f"the API server refused the status update: {api_message(err)}")
            conditions = set_condition(before.get("conditions"), STATUS_WRITTEN, False, STATUS_REJECTED, refusal)
            try:
                self.patch_rljob_status(metadata["namespace"], metadata["name"], {"conditions": conditions})
            except ApiException as again:
                if again.status != 422:
                    raise
                kopf.warn(dict(body), reason=STATUS_REJECTED, message=refusal)
        return True

    # -- the progress endpoint (server/progress.py) ------------------------------------------------------------

    def review_token(self, token: str, audience: str) -> client.V1TokenReviewStatus:
        """The API server's TokenReview of a bearer token for `audience` (who it is, if anyone)."""
        review = client.V1TokenReview(spec=client.V1TokenReviewSpec(token=token, audiences=[audience]))
        return client.AuthenticationV1Api(self.api_client).create_token_review(review).status

    def read_pod(self, namespace: str, name: str) -> client.V1Pod:
        return self.core.read_namespaced_pod(name, namespace)

    def get_custom(self, group: str, version: str, namespace: str, plural: str, name: str) -> dict | None:
        """A namespaced custom object, None when it does not exist."""
        try:
            return self.custom.get_namespaced_custom_object(group, version, namespace, plural, name)
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def write_progress(
        self, namespace: str, name: str, progress: Mapping, ray_cluster: str | None = None
    ) -> ProgressWrite:
        """The job's status.progress alone. With `ray_cluster` (the Ray cluster whose driver reported it), a JSON
        patch whose first operation tests that status.rayCluster is that cluster, so a driver of a stopped attempt
        (its pods still running on a node whose kubelet is away) never writes over the attempt that replaced it;
        else a merge patch. The answer (the whole job) is not parsed: nothing needs it, and parsing it is most of
        the client's cost per write."""
        if ray_cluster is None:
            body: object = {"status": {"progress": dict(progress)}}
            content_type = "application/merge-patch+json"
        else:
            body = [
                {"op": "test", "path": "/status/rayCluster", "value": ray_cluster},
                {"op": "add", "path": "/status/progress", "value": dict(progress)},
            ]
            content_type = "application/json-patch+json"
        try:
            response = self.custom.patch_namespaced_custom_object_status(
                GROUP, VERSION, namespace, RLJOB_PLURAL, name, body, _preload_content=False, _content_type=content_type
            )
            response.read()  # read to the end, so the pooled connection is reused
            response.release_conn()
        except ApiException as err:
            if err.status == 404:
                return ProgressWrite.GONE
            if err.status != 422 or ray_cluster is None:
                raise
            job = self.get_rljob(namespace, name)
            if job is None:
                return ProgressWrite.GONE
            current = (job.get("status") or {}).get("rayCluster")
            return ProgressWrite.OTHER_CLUSTER if current else ProgressWrite.NO_CLUSTER_YET
        return ProgressWrite.WRITTEN

    def _as_dict(self, obj: object) -> dict:
        return obj if isinstance(obj, dict) else self.api_client.sanitize_for_serialization(obj)


def api_message(err: ApiException) -> str:
    """What the API server said, from its Status body (its reason when the body has none)."""
    try:
        return str(json.loads(err.body).get("message", err.reason))
    except (TypeError, ValueError):
        return str(err.reason)

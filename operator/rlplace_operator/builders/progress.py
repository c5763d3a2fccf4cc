"""A job's means to report progress: a projected ServiceAccount token for rlplace and the endpoint's URL, in
the head pod (and for veRL in every pod).

Kept apart from the RayCluster builder on purpose: it adds to whatever head pod that builder made (the driver
runs on the head), and nothing here depends on how the rest of the pod is built.
"""

from __future__ import annotations

import copy

from placement_core import contract
from rlplace_operator.api.names import PROGRESS_AUDIENCE, progress_path
from rlplace_operator.builders.raycluster import cluster_spec_of

#: Where the token is mounted in the head's container, and its file name.
PROGRESS_TOKEN_DIR = "/var/run/secrets/rlplace.io/progress"
PROGRESS_TOKEN_FILE = "token"
#: Lifetime the kubelet asks for (it renews the file at 80% of it); the operator caches a review this long
#: at most, so a rotation costs one TokenReview per pod per 48 minutes.
PROGRESS_TOKEN_SECONDS = 3600
#: Environment variable with the pod's namespace (downward API), used inside the URL.
NAMESPACE_ENV = "RLPLACE_NAMESPACE"
_VOLUME = "rlplace-progress-token"


def progress_volume() -> dict:
    """A projected token for the pod's own ServiceAccount, audience rlplace only: the API server refuses it, and
    the operator maps it to this pod (the token is bound to the pod, so it dies with it)."""
    token = {"audience": PROGRESS_AUDIENCE, "expirationSeconds": PROGRESS_TOKEN_SECONDS, "path": PROGRESS_TOKEN_FILE}
    return {"name": _VOLUME, "projected": {"sources": [{"serviceAccountToken": token}]}}


def progress_env(job: str, base_url: str) -> list[dict]:
    """The URL of the job's progress endpoint (its namespace from the downward API, expanded by the kubelet)
    and the token's file."""
    url = base_url.rstrip("/") + progress_path(f"$({NAMESPACE_ENV})", job)
    return [
        {"name": NAMESPACE_ENV, "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": contract.PROGRESS_URL_ENV, "value": url},
        {"name": contract.PROGRESS_TOKEN_FILE_ENV, "value": f"{PROGRESS_TOKEN_DIR}/{PROGRESS_TOKEN_FILE}"},
    ]


def with_progress_reporting(child: dict, job: str, base_url: str | None, workers: bool = False) -> dict:
    """`child` (a RayCluster or a RayJob) with the token volume, its mount and the progress variables in the
    head pod's first container, and with `workers` in every worker pod's too (a framework whose metrics are
    written by a process on any pod: veRL's logger runs in its TaskRunner actor); unchanged when the operator
    serves no progress endpoint (`base_url` None)."""
    if not base_url:
        return child
    body = copy.deepcopy(child)
    cluster = cluster_spec_of(body)
    groups = [cluster["headGroupSpec"], *(cluster.get("workerGroupSpecs", []) if workers else [])]
    for group in groups:
        pod = group["template"]["spec"]
        pod["volumes"] = [*pod.get("volumes", []), progress_volume()]
        container = pod["containers"][0]
        container["env"] = [*container.get("env", []), *progress_env(job, base_url)]
        mount = {"name": _VOLUME, "mountPath": PROGRESS_TOKEN_DIR, "readOnly": True}
        container["volumeMounts"] = [*container.get("volumeMounts", []), mount]
    return body

"""The job's KubeRay RayJob (`ray.io/v1`) when it has an entrypoint: the driver submitted to the same cluster a
job without one gets as a RayCluster, with the RLJob's run settings."""

from __future__ import annotations

from collections.abc import Sequence

from rlplace_operator.builders.raycluster import WorkerNode, build_raycluster_spec
from rlplace_operator.models import RLJobSpec
from rlplace_operator.names import RAY_GROUP, RAY_VERSION, child_labels, rayjob_name


def build_rayjob(job: str, spec: RLJobSpec, nodes: Sequence[WorkerNode]) -> dict:
    """The RayJob that runs `spec.entrypoint` on the job's planned cluster (suspended when the job is)."""
    if not spec.entrypoint:
        raise ValueError(f"job '{job}' has no entrypoint; it runs as a RayCluster")
    run = spec.run
    body: dict = {
        "entrypoint": spec.entrypoint,
        "rayClusterSpec": build_raycluster_spec(job, spec, nodes),
        "submissionMode": str(run.submission_mode),
        "shutdownAfterJobFinishes": run.shutdown_after_job_finishes,
        "backoffLimit": run.backoff_limit,
        "suspend": spec.suspend,
    }
    # KubeRay refuses a TTL without shutdownAfterJobFinishes (nothing would be deleted after it).
    if run.shutdown_after_job_finishes:
        body["ttlSecondsAfterFinished"] = run.ttl_seconds_after_finished
    if run.active_deadline_seconds is not None:
        body["activeDeadlineSeconds"] = run.active_deadline_seconds
    return {
        "apiVersion": f"{RAY_GROUP}/{RAY_VERSION}",
        "kind": "RayJob",
        "metadata": {"name": rayjob_name(job), "labels": child_labels(job)},
        "spec": body,
    }

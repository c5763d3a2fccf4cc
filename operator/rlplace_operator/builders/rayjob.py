"""The job's KubeRay RayJob (`ray.io/v1`) when it has an entrypoint: the driver submitted to the same cluster a
job without one gets as a RayCluster, with the RLJob's run settings."""

from __future__ import annotations

from collections.abc import Sequence

from rlplace_operator.api.names import (
    ATTEMPT_ANNOTATION,
    RAY_GROUP,
    RAY_VERSION,
    SPEC_DIGEST_ANNOTATION,
    SUBMITTER_CONTAINER,
    child_labels,
    rayjob_name,
)
from rlplace_operator.api.rljob import RLJobSpec, SubmissionMode
from rlplace_operator.builders.podtemplate import apply_pod_options
from rlplace_operator.builders.raycluster import (
    build_raycluster_spec,
    container_security_context,
    head_nodes,
    held_annotations,
    on_nodes,
    pod_security_context,
    restart_env,
)
from rlplace_operator.frameworks import framework_of
from rlplace_operator.planning.plan import WorkerNode

#: The submitter only runs `ray job submit` and streams the driver's log.
SUBMITTER_LIMITS = {"cpu": "200m", "memory": "512Mi"}


def build_submitter_template(spec: RLJobSpec, nodes: Sequence[WorkerNode], attempt: int = 1) -> dict:
    """KubeRay's submitter pod (K8sJobMode) on one of the job's nodes, like the head; KubeRay fills in the
    `ray job submit` command."""
    container = {
        "name": SUBMITTER_CONTAINER,
        "image": spec.ray.image,
        "resources": {"limits": SUBMITTER_LIMITS},
        "securityContext": container_security_context(),
        "env": restart_env(spec, attempt),
    }
    options = spec.pods.for_submitter()
    affinity = on_nodes(head_nodes(nodes, options.tolerations))
    template = {
        "spec": {
            "restartPolicy": "Never",
            "affinity": affinity,
            "securityContext": pod_security_context(),
            "containers": [container],
        }
    }
    return apply_pod_options(template, options, SUBMITTER_CONTAINER)


def build_rayjob(job: str, spec: RLJobSpec, nodes: Sequence[WorkerNode], attempt: int = 1) -> dict:
    """The RayJob that runs `spec.entrypoint` on the job's planned cluster (suspended when the job is), as the
    job's attempt `attempt` (1, or a restart's: reconcile/restarts.py)."""
    if not spec.entrypoint:
        raise ValueError(f"job '{job}' has no entrypoint; it runs as a RayCluster")
    run = spec.run
    body: dict = {
        "entrypoint": framework_of(spec).entrypoint(spec, len(nodes)),
        "rayClusterSpec": build_raycluster_spec(job, spec, nodes, attempt),
        "submissionMode": str(run.submission_mode),
        "shutdownAfterJobFinishes": run.shutdown_after_job_finishes,
        "backoffLimit": run.backoff_limit,
        "suspend": spec.suspend,
    }
    # KubeRay refuses a TTL without shutdownAfterJobFinishes (nothing would be deleted after it).
    if run.shutdown_after_job_finishes:
        body["ttlSecondsAfterFinished"] = run.ttl_seconds_after_finished
    if run.submission_mode is SubmissionMode.K8S_JOB:
        body["submitterPodTemplate"] = build_submitter_template(spec, nodes, attempt)
    if run.active_deadline_seconds is not None:
        body["activeDeadlineSeconds"] = run.active_deadline_seconds
    return {
        "apiVersion": f"{RAY_GROUP}/{RAY_VERSION}",
        "kind": "RayJob",
        # KubeRay copies the RayJob's labels and annotations to the RayCluster it makes, where admission reads
        # the nodes the job holds (admission/queue.py).
        "metadata": {
            "name": rayjob_name(job),
            "labels": child_labels(job),
            "annotations": {
                **held_annotations(nodes),
                ATTEMPT_ANNOTATION: str(attempt),
                SPEC_DIGEST_ANNOTATION: spec.restart_digest(),
            },
        },
        "spec": body,
    }

"""diagnosis/: one named cause from the API's pods, events and nodes (no cluster).

The snapshots in tests/operator/snapshots/ are real objects captured from the e2e cluster by tests/e2e/test_diagnosis_live.py
(RLPLACE_DIAGNOSIS_SNAPSHOTS=<dir>), trimmed to the fields a diagnosis reads; the small dicts built here are
the cases a local cluster cannot produce on demand (a node going NotReady, a ResourceQuota's wording).
"""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path

import pytest

from placement_core.components import component_placement
from placement_core.plan import Plan, build_plan
from rlplace_operator.api.conditions import MAX_LINE_CHARS
from rlplace_operator.diagnosis import causes as diagnosis
from rlplace_operator.diagnosis.causes import Cause
from rlplace_operator.diagnosis.losses import lost_process
from rlplace_operator.diagnosis.starting import provisioning_failure

SNAPSHOTS = Path(__file__).parents[1] / "snapshots"
NOW = dt.datetime(2026, 11, 24, 2, 0, 0, tzinfo=dt.UTC)


def at(seconds: float) -> str:
    """A timestamp `seconds` after NOW (negative: before)."""
    return (NOW + dt.timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(name: str, role: str = "worker", group: str | None = "node-1", node: str | None = "a800-1", **status) -> dict:
    labels = {"ray.io/cluster": "job", "ray.io/node-type": role, "rlplace.io/job": "job"}
    if group and role == "worker":
        labels["ray.io/group"] = group
    return {
        "metadata": {"name": name, "labels": labels, "creationTimestamp": at(-120)},
        "spec": {
            "nodeName": node,
            "containers": [{"name": f"ray-{role}", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}],
        },
        "status": {"phase": "Running", **status},
    }


def event(kind: str, name: str, reason: str, message: str, seen: float = -5, **extra) -> dict:
    return {
        "involvedObject": {"kind": kind, "name": name, "namespace": "ns"},
        "reason": reason,
        "message": message,
        "type": "Warning",
        "firstTimestamp": at(seen - 10),
        "lastTimestamp": at(seen),
        **extra,
    }


def waiting(reason: str, message: str = "", container: str = "ray-worker", **extra) -> dict:
    return {
        "containerStatuses": [
            {"name": container, "image": "img", "state": {"waiting": {"reason": reason, "message": message}}, **extra}
        ]
    }


PLAN: Plan = build_plan(
    component_placement(
        {
            "cluster": {
                "num_nodes": 2,
                "component_placement": {"actor": "0-11", "rollout": "12-15"},
            }
        }
    )
)


# -- provisioning: refused pods ------------------------------------------------------------------------------

PSA = (
    'Failed to create head Pod ns/job-head-, pods "job-head-" is forbidden: violates PodSecurity '
    '"restricted:latest": allowPrivilegeEscalation != false (container "ray-head" must set '
    "securityContext.allowPrivilegeEscalation=false)"
)


def test_a_head_pod_refused_by_pod_security_is_permanent_and_quoted() -> None:
    cause = provisioning_failure([], [event("RayCluster", "job", "FailedToCreateHeadPod", PSA)], NOW)
    assert cause == Cause(
        diagnosis.POD_SECURITY_REFUSED,
        "the Ray head pod of RayCluster 'job' refused by Pod Security: violates PodSecurity \"restricted:latest\": "
        'allowPrivilegeEscalation != false (container "ray-head" must set securityContext.allowPrivilegeEscalation'
        "=false)",
        True,
    )


def test_a_refusal_followed_by_a_created_pod_is_over() -> None:
    head = pod("job-head-abcde", role="head", group=None)
    head["metadata"]["creationTimestamp"] = at(-1)
    assert (
        provisioning_failure([head], [event("RayCluster", "job", "FailedToCreateHeadPod", PSA, seen=-5)], NOW) is None
    )
    # ... and one after the newest pod still counts.
    assert provisioning_failure([head], [event("RayCluster", "job", "FailedToCreateHeadPod", PSA, seen=0)], NOW)


@pytest.mark.parametrize(
    ("kind", "reason", "message", "expected", "permanent"),
    [
        (
            "RayCluster",
            "FailedToCreateWorkerPod",
            'Failed to create worker Pod ns/, pods "job-node-2-worker-" is forbidden: exceeded quota: gpus, '
            "requested: requests.nvidia.com/gpu=8, used: requests.nvidia.com/gpu=16, limited: requests.nvidia.com/gpu=16",
            "the worker pod for node rank 2 of RayCluster 'job' refused by a ResourceQuota: exceeded quota: gpus, "
            "requested: requests.nvidia.com/gpu=8",
            False,
        ),
        (
            "RayCluster",
            "FailedToCreateWorkerPod",
            'Failed to create worker Pod ns/, pods "job-node-0-worker-" is forbidden: maximum memory usage per '
            "Container is 512Mi, but limit is 1Gi",
            "the worker pod for node rank 0 of RayCluster 'job' refused by a LimitRange:  maximum memory usage",
            False,
        ),
        (
            "Job",
            "FailedCreate",
            'Error creating: admission webhook "policy.example.com" denied the request: images must come from '
            "registry.example.com",
            "the submitter pod of Job 'job' refused by admission: admission webhook \"policy.example.com\" denied",
            False,
        ),
        (
            "RayJob",
            "FailedToCreateRayJobSubmitter",
            'Failed to create new Kubernetes Job ns/job: jobs.batch "job" is forbidden: ValidatingAdmissionPolicy '
            "'require-team' with binding 'b' denied request: the label 'team' is missing",
            "the submitter Job of RayJob 'job' refused by admission: ValidatingAdmissionPolicy 'require-team'",
            False,
        ),
    ],
)
def test_refusals_name_what_refused_which_pod(
    kind: str, reason: str, message: str, expected: str, permanent: bool
) -> None:
    cause = provisioning_failure([], [event(kind, "job", reason, message)], NOW)
    assert cause is not None
    assert cause.message.startswith(expected.replace("  ", " ")), cause.message
    assert cause.permanent is permanent


def test_errors_that_are_not_refusals_are_left_to_the_creator_to_retry() -> None:
    timeout = "Failed to create head Pod ns/job-head-, Timeout: request did not complete within requested timeout"
    assert provisioning_failure([], [event("RayCluster", "job", "FailedToCreateHeadPod", timeout)], NOW) is None
    normal = {**event("RayCluster", "job", "FailedToCreateHeadPod", PSA), "type": "Normal"}
    assert provisioning_failure([], [normal], NOW) is None


# -- provisioning: pods that cannot start ----------------------------------------------------------------------


def test_an_invalid_image_name_is_permanent_at_once() -> None:
    bad = pod("job-node-1-worker-x", **waiting("InvalidImageName", 'Failed to apply default image tag "Bad:Tag"'))
    cause = provisioning_failure([bad], [], NOW)
    assert cause is not None and cause.reason == diagnosis.INVALID_IMAGE and cause.permanent
    assert "worker pod 'job-node-1-worker-x' (node rank 1, node 'a800-1') container 'ray-worker'" in cause.message


def test_an_image_that_runs_as_root_is_permanent_at_once() -> None:
    said = 'container has runAsNonRoot and image will run as root (pod: "ns/job-head-x", container: ray-head)'
    root = pod(
        "job-head-x", role="head", group=None, **waiting("CreateContainerConfigError", said, container="ray-head")
    )
    cause = provisioning_failure([root], [], NOW)
    assert cause == Cause(
        diagnosis.IMAGE_RUNS_AS_ROOT,
        f"Ray head pod 'job-head-x' (node 'a800-1') container 'ray-head' cannot start as non-root: {said}",
        True,
    )
    other = pod("job-head-y", role="head", group=None, **waiting("CreateContainerError", "context deadline exceeded"))
    other["status"]["startTime"] = at(-5)
    early = provisioning_failure([other], [], NOW)  # the runtime may still create it: said, not acted on
    assert early is not None and (early.reason, early.waiting) == (diagnosis.CONTAINER_START_FAILED, True)
    other["status"]["startTime"] = at(-30)
    cause = provisioning_failure([other], [], NOW)
    assert cause is not None and (cause.reason, cause.permanent) == (diagnosis.CONTAINER_START_FAILED, False)


def test_an_image_pull_failure_waits_for_its_grace_then_quotes_the_kubelet() -> None:
    failing = pod("job-node-1-worker-x", **waiting("ImagePullBackOff", 'Back-off pulling image "nope:1"'))
    pulled = event(
        "Pod",
        "job-node-1-worker-x",
        "Failed",
        'Failed to pull image "nope:1": failed to resolve reference "docker.io/library/nope:1": no such host',
        seen=-1,
    )
    pulled["firstTimestamp"] = at(-5)
    # 5 s: a registry hiccup may still pass: said, not acted on.
    early = provisioning_failure([failing], [pulled], NOW)
    assert early is not None and (early.reason, early.waiting) == (diagnosis.IMAGE_PULL_FAILED, True), early
    assert "cannot pull its image yet (retrying for 20 s)" in early.message
    cause = provisioning_failure([failing], [pulled], NOW + dt.timedelta(seconds=30))
    assert cause is not None and not cause.waiting
    assert cause is not None and (cause.reason, cause.permanent) == (diagnosis.IMAGE_PULL_FAILED, False)
    assert cause.message.endswith(
        'cannot pull its image: Failed to pull image "nope:1": failed to resolve reference '
        '"docker.io/library/nope:1": no such host'
    )


def test_a_crash_loop_names_exit_code_and_reason() -> None:
    crashing = pod(
        "job-head-x",
        role="head",
        group=None,
        **waiting(
            "CrashLoopBackOff",
            "back-off 10s restarting failed container",
            container="ray-head",
            restartCount=2,
            lastState={"terminated": {"exitCode": 3, "reason": "Error"}},
        ),
    )
    cause = provisioning_failure([crashing], [], NOW)
    assert cause == Cause(
        diagnosis.CRASH_LOOP_BACK_OFF,
        "Ray head pod 'job-head-x' (node 'a800-1') container 'ray-head' crashes at start (exit code 3 (Error), "
        "2 restarts)",
        False,
    )


def unscheduled(message: str, since: float, pinned: str | None = None) -> dict:
    """A worker pod the scheduler has held back since `since` seconds from NOW with `message` (pinned by name to
    `pinned` as rlplace pins its pods, when given)."""
    stuck = pod("job-node-1-worker-x", node=None)
    stuck["metadata"]["creationTimestamp"] = at(since)
    if pinned:
        term = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [pinned]}]}
        required = {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [term]}}
        stuck["spec"]["affinity"] = {"nodeAffinity": required}
    condition = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
    stuck["status"] = {"phase": "Pending", "conditions": [{**condition, "lastTransitionTime": at(since)}]}
    return stuck


def test_unschedulable_after_its_grace_quotes_the_scheduler() -> None:
    message = "0/7 nodes are available: 1 Insufficient nvidia.com/gpu, 6 node(s) didn't match Pod's node affinity."
    stuck = unscheduled(message, -30, pinned="a800-1")
    assert provisioning_failure([stuck], [], NOW) is None
    cause = provisioning_failure([stuck], [], NOW + dt.timedelta(seconds=31))
    assert cause == Cause(
        diagnosis.UNSCHEDULABLE,
        f"worker pod 'job-node-1-worker-x' (node rank 1, node 'a800-1') unschedulable: {message}",
        False,
    )


def test_a_permanent_cause_comes_before_a_retryable_one_and_messages_stay_short() -> None:
    crashing = pod("job-head-x", role="head", group=None, **waiting("CrashLoopBackOff", container="ray-head"))
    invalid = pod("job-node-3-worker-y", group="node-3", **waiting("InvalidImageName", "x" * 2000))
    cause = provisioning_failure([crashing, invalid], [], NOW)
    assert cause is not None and cause.reason == diagnosis.INVALID_IMAGE
    assert len(cause.message) <= MAX_LINE_CHARS and cause.message.endswith("...")
    assert provisioning_failure([pod("fine")], [], NOW) is None


# -- provisioning: pods bound but not started (issue 31) ------------------------------------------------------

GRACE = diagnosis.StartBounds().grace.total_seconds()
TIMEOUT = diagnosis.StartBounds().timeout.total_seconds()


def bound_pod(name: str = "job-node-1-worker-x", bound: float = -20, role: str = "worker", **status) -> dict:
    """A pod the scheduler bound `bound` seconds before NOW, Pending (its containers not started)."""
    made = pod(name, role=role, group="node-1" if role == "worker" else None, **status)
    made["metadata"]["creationTimestamp"] = at(bound - 1)
    made["status"]["phase"] = "Pending"
    made["status"]["conditions"] = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": at(bound)}]
    made["status"].setdefault(
        "containerStatuses", [{"name": f"ray-{role}", "state": {"waiting": {"reason": "ContainerCreating"}}}]
    )
    return made


MOUNT_SECRET = 'MountVolume.SetUp failed for volume "creds" : secret "hf-token" not found'


@pytest.mark.parametrize(
    ("said", "reason", "named"),
    [
        (MOUNT_SECRET, diagnosis.SECRET_NOT_FOUND, "Secret 'hf-token' not found"),
        (
            'MountVolume.SetUp failed for volume "cfg" : configmap "train-cfg" not found',
            diagnosis.CONFIGMAP_NOT_FOUND,
            "ConfigMap 'train-cfg' not found",
        ),
        (
            'MountVolume.SetUp failed for volume "ckpt" : hostPath type check failed: /var/tmp/ckpt is not a directory',
            diagnosis.HOST_PATH_MISSING,
            "host path '/var/tmp/ckpt' is missing or not a directory",
        ),
        (
            'MountVolume.SetUp failed for volume "all" : [secret "a" not found, configmap "b" not found]',
            diagnosis.SECRET_NOT_FOUND,
            "Secret 'a' not found",
        ),
    ],
)
def test_a_volume_that_names_a_missing_object_fails_the_pod_after_the_grace(said: str, reason: str, named: str) -> None:
    failed_mount = event("Pod", "job-node-1-worker-x", "FailedMount", said, seen=-2)
    early = bound_pod(bound=-(GRACE - 3))
    assert provisioning_failure([early], [failed_mount], NOW, plan=PLAN) is None  # within the grace
    cause = provisioning_failure([bound_pod()], [failed_mount], NOW, plan=PLAN)
    assert cause is not None and (cause.reason, cause.permanent, cause.waiting) == (reason, True, False), cause
    assert cause.message.startswith(
        f"{named}: worker pod 'job-node-1-worker-x' (node rank 1, node 'a800-1', actor ranks 8-11, rollout ranks 0-3)"
    )
    assert f"(FailedMount: {said[:40]}" in cause.message  # the kubelet quoted, cut to the status's line
    assert cause.missing is not None and cause.missing in named


def test_an_env_from_secret_that_does_not_exist_is_named_not_a_generic_start_failure() -> None:
    stuck = bound_pod(**waiting("CreateContainerConfigError", 'secret "model-credentials" not found'))
    cause = provisioning_failure([stuck], [], NOW)
    assert cause is not None and (cause.reason, cause.permanent) == (diagnosis.SECRET_NOT_FOUND, True), cause
    assert cause.message.startswith("Secret 'model-credentials' not found: worker pod 'job-node-1-worker-x'")
    assert cause.missing == "Secret 'model-credentials'"
    key = bound_pod(**waiting("CreateContainerConfigError", "couldn't find key token in Secret ns/hf"))
    cause = provisioning_failure([key], [], NOW)
    assert (
        cause is not None
        and cause.reason == diagnosis.SECRET_NOT_FOUND
        and "Secret 'hf' has no key 'token'" in cause.message
    )


def test_a_claim_that_does_not_exist_is_named_after_the_grace_not_the_schedulers_minute() -> None:
    said = '0/9 nodes are available: persistentvolumeclaim "model-store" not found. preemption: 0/9 nodes are available: 9 Preemption is not helpful for scheduling.'
    assert provisioning_failure([unscheduled(said, -(GRACE - 2))], [], NOW) is None
    cause = provisioning_failure([unscheduled(said, -(GRACE + 2))], [], NOW)
    assert cause is not None and (cause.reason, cause.permanent) == (diagnosis.CLAIM_NOT_FOUND, True), cause
    assert cause.message.startswith("PersistentVolumeClaim 'model-store' not found: worker pod 'job-node-1-worker-x'")


def test_an_unbound_claim_is_waited_for_and_said_then_acted_on_after_the_timeout() -> None:
    said = "0/9 nodes are available: pod has unbound immediate PersistentVolumeClaims. preemption: 0/9 nodes are available: 9 Preemption is not helpful for scheduling."
    assert provisioning_failure([unscheduled(said, -(GRACE - 2))], [], NOW) is None
    cause = provisioning_failure([unscheduled(said, -30)], [], NOW)
    assert cause is not None and (cause.reason, cause.permanent, cause.waiting) == (
        diagnosis.CLAIM_NOT_BOUND,
        False,
        True,
    )
    assert "waits for its volume claim 30 s after it was created" in cause.message
    assert f"(waiting up to {TIMEOUT:.0f} s)" in cause.message
    cause = provisioning_failure([unscheduled(said, -(TIMEOUT + 1))], [], NOW)
    assert cause is not None and (cause.reason, cause.permanent, cause.waiting) == (
        diagnosis.CLAIM_NOT_BOUND,
        False,
        False,
    )


def test_a_volume_that_may_still_attach_is_said_then_acted_on_after_the_timeout() -> None:
    said = 'AttachVolume.Attach failed for volume "pvc-1" : rpc error: code = DeadlineExceeded desc = context deadline exceeded'
    attach = event("Pod", "job-node-1-worker-x", "FailedAttachVolume", said, seen=-3)
    scheduling = event(
        "Pod", "job-node-1-worker-x", "FailedScheduling", 'persistentvolumeclaim "gone" not found', seen=-60
    )
    cause = provisioning_failure([bound_pod()], [attach, scheduling], NOW)
    assert cause is not None and (cause.reason, cause.permanent, cause.waiting) == (
        diagnosis.VOLUME_NOT_READY,
        False,
        True,
    )
    assert f"not started 20 s after it was bound: FailedAttachVolume: {said}" in cause.message
    late = provisioning_failure([bound_pod(bound=-(TIMEOUT + 5))], [attach], NOW)
    assert late is not None and (late.reason, late.waiting) == (diagnosis.VOLUME_NOT_READY, False)
    tight = diagnosis.StartBounds(dt.timedelta(seconds=5), dt.timedelta(seconds=15))
    assert not provisioning_failure([bound_pod()], [attach], NOW, tight).waiting  # the operator's bound applies


def test_a_pod_bound_with_nothing_said_is_explained_by_its_state() -> None:
    cause = provisioning_failure([bound_pod()], [], NOW)
    assert cause is not None and (cause.reason, cause.waiting) == (diagnosis.POD_NOT_STARTED, True)
    assert "not started 20 s after it was bound (ContainerCreating; no warning)" in cause.message
    assert provisioning_failure([bound_pod(bound=-(GRACE - 1))], [], NOW) is None
    # A large image's first pull says nothing but Normal events: never given up on, however long it takes.
    slow = provisioning_failure([bound_pod(bound=-(TIMEOUT * 3))], [], NOW)
    assert slow is not None and slow.waiting


def test_an_init_container_that_fails_is_named_with_its_exit() -> None:
    failing = bound_pod(
        role="head",
        name="job-head-x",
        initContainerStatuses=[
            {
                "name": "fetch-data",
                "restartCount": 1,
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 10s restarting"}},
                "lastState": {"terminated": {"exitCode": 2, "reason": "Error"}},
            }
        ],
    )
    cause = provisioning_failure([failing], [], NOW)
    assert cause == Cause(
        diagnosis.INIT_CONTAINER_FAILED,
        "Ray head pod 'job-head-x' (node 'a800-1') init container 'fetch-data' failed (exit code 2, Error, 1 restarts)",
        False,
    )


def test_a_missing_object_is_permanent_before_a_waiting_cause_of_another_pod() -> None:
    head = bound_pod("job-head-x", role="head")
    worker = bound_pod()
    cause = provisioning_failure(
        [head, worker], [event("Pod", "job-node-1-worker-x", "FailedMount", MOUNT_SECRET, seen=-2)], NOW
    )
    assert cause is not None and cause.reason == diagnosis.SECRET_NOT_FOUND


# -- a lost process ----------------------------------------------------------------------------------------


def test_a_deleted_worker_pod_names_its_node_processes_and_the_launchers_line() -> None:
    gone = pod("job-node-1-worker-x")
    gone["metadata"] |= {"deletionTimestamp": at(25), "deletionGracePeriodSeconds": 30}
    log = (
        "[state-dump] NodeManager: ... 20,000 characters of it\n"
        "placement_core.errors.WorkerDiedError: component 'actor' rank 8 (node rank 1) died during "
        "'train_step' (ActorDiedError)\n"
    )
    cause = lost_process([pod("job-head-h", role="head", group=None), gone], [], {}, PLAN, log)
    assert cause == Cause(
        diagnosis.POD_DELETED,
        "worker pod 'job-node-1-worker-x' (node rank 1, node 'a800-1', actor ranks 8-11, rollout ranks 0-3) deleted; "
        "launcher: component 'actor' rank 8 (node rank 1) died during 'train_step' (ActorDiedError)",
        False,
    )
    assert "[state-dump]" not in cause.message


def test_a_container_stopped_by_its_pods_deletion_is_the_deletion() -> None:
    """Seen live: a worker pod deleted (30 s grace) whose ray-worker exited on the SIGTERM was read while still
    Terminating; its exit code is the deletion's doing. A container that exited before the deletion began is not."""
    stopped = {"exitCode": 143, "reason": "Error", "finishedAt": at(-3)}
    deleting = pod("job-node-1-worker-x", containerStatuses=[{"name": "ray-worker", "state": {"terminated": stopped}}])
    deleting["metadata"] |= {"deletionTimestamp": at(25), "deletionGracePeriodSeconds": 30}  # asked for at -5
    cause = lost_process([deleting], [], {}, PLAN, "")
    assert cause is not None and (cause.reason, cause.message.endswith(" deleted")) == (diagnosis.POD_DELETED, True)
    stopped["finishedAt"] = at(-8)  # it crashed first; KubeRay deleted the pod after
    cause = lost_process([deleting], [], {}, PLAN, "")
    assert cause is not None and cause.reason == diagnosis.CONTAINER_EXITED


def test_an_oom_killed_worker_names_its_memory_limit() -> None:
    killed = pod(
        "job-node-0-worker-x",
        group="node-0",
        containerStatuses=[
            {
                "name": "ray-worker",
                "restartCount": 1,
                "state": {"running": {}},
                "lastState": {"terminated": {"exitCode": 137, "reason": "OOMKilled", "finishedAt": at(-3)}},
            }
        ],
    )
    cause = lost_process([killed], [], {}, PLAN, "")
    assert cause is not None and cause.reason == diagnosis.OOM_KILLED
    assert cause.message == (
        "worker pod 'job-node-0-worker-x' (node rank 0, node 'a800-1', actor ranks 0-7) container 'ray-worker' "
        "OOMKilled (memory limit 1Gi)"
    )


def test_a_node_not_ready_is_the_cause_of_its_pods_loss() -> None:
    nodes = {
        "a800-1": {
            "status": {
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "Unknown",
                        "reason": "NodeStatusUnknown",
                        "message": "Kubelet stopped posting node status.",
                        "lastTransitionTime": at(-40),
                    }
                ]
            }
        }
    }
    cause = lost_process([pod("job-node-1-worker-x")], [], nodes, PLAN, "")
    assert cause is not None and cause.reason == diagnosis.NODE_NOT_READY
    assert cause.message.endswith("node 'a800-1' unreachable: Kubelet stopped posting node status.")


def test_the_earliest_loss_is_the_cause_and_the_sidecar_submitters_exit_is_not() -> None:
    head = pod(
        "job-head-h",
        role="head",
        group=None,
        node="a800-0",
        containerStatuses=[
            {"name": "ray-head", "state": {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": at(-30)}}},
            {"name": "ray-job-submitter", "state": {"terminated": {"exitCode": 1, "finishedAt": at(-40)}}},
        ],
    )
    worker = pod(
        "job-node-1-worker-x",
        containerStatuses=[
            {"name": "ray-worker", "state": {"terminated": {"exitCode": 1, "reason": "Error", "finishedAt": at(-10)}}}
        ],
    )
    cause = lost_process([worker, head], [], {}, PLAN, "")
    assert cause == Cause(
        diagnosis.CONTAINER_EXITED,
        "Ray head pod 'job-head-h' (node 'a800-0') container 'ray-head' exited with code 1 (Error)",
        False,
    )


def test_losses_older_than_the_attempt_are_left_out_but_a_node_not_ready_is_not() -> None:
    exited = {"exitCode": 1, "reason": "Error", "finishedAt": at(-70)}
    statuses = [
        {"name": "ray-worker", "restartCount": 1, "state": {"running": {}}, "lastState": {"terminated": exited}}
    ]
    worker = pod("job-node-1-worker-x", containerStatuses=statuses)
    worker["metadata"] |= {"deletionTimestamp": at(-5), "deletionGracePeriodSeconds": 0}
    old_event = event("Pod", "job-node-0-worker-gone", "Killing", "Stopping container ray-worker", seen=-50)
    started = NOW + dt.timedelta(seconds=-30)
    # Without `since` the oldest loss, the container's exit, is the cause.
    assert lost_process([worker], [old_event], {}, PLAN, "").reason == diagnosis.CONTAINER_EXITED
    cause = lost_process([worker], [old_event], {}, PLAN, "", since=started)
    assert cause is not None and (cause.reason, cause.message.endswith("deleted")) == (diagnosis.POD_DELETED, True)
    assert lost_process([pod("job-node-1-worker-x")], [old_event], {}, PLAN, "", since=started) is None
    down = {"type": "Ready", "status": "False", "message": "kubelet down", "lastTransitionTime": at(-90)}
    nodes = {"a800-1": {"status": {"conditions": [down]}}}
    cause = lost_process([pod("job-node-1-worker-x")], [], nodes, PLAN, "", since=started)
    assert cause is not None and cause.reason == diagnosis.NODE_NOT_READY


def test_a_pod_already_gone_is_found_by_the_kubelets_events() -> None:
    replacement = pod("job-node-1-worker-new")
    replacement["metadata"]["creationTimestamp"] = at(-2)
    killing = event("Pod", "job-node-1-worker-old", "Killing", "Stopping container ray-worker", seen=-8)
    killing |= {"type": "Normal", "source": {"component": "kubelet", "host": "a800-1"}}
    foreign = event("Pod", "other-job-node-1-worker-z", "Killing", "Stopping container ray-worker", seen=-20)
    cause = lost_process([replacement], [killing, foreign], {}, PLAN, "")
    assert cause is not None and cause.reason == diagnosis.POD_DELETED
    assert cause.message.startswith("worker pod 'job-node-1-worker-old' (node rank 1, node 'a800-1', actor ranks 8-11")


def test_the_launchers_line_alone_is_mapped_to_its_node() -> None:
    log = "Traceback ...\nWorkerDiedError: component 'rollout' rank 2 (node rank 1) died during 'generate' (RayActorError)"
    cause = lost_process([], [], {}, PLAN, log)
    assert cause == Cause(
        diagnosis.WORKER_DIED,
        "component 'rollout' rank 2 (node rank 1) died during 'generate' (RayActorError) (on node 'node-1')",
        False,
    )
    assert lost_process([pod("job-node-1-worker-x")], [], {}, PLAN, "[state-dump] nothing here") is None


# -- real objects captured from the e2e cluster ----------------------------------------------------------------


def load(name: str) -> dict:
    return json.loads((SNAPSHOTS / f"{name}.json").read_text())


def snapshot_now(snapshot: dict) -> dt.datetime:
    return dt.datetime.fromisoformat(snapshot["now"])


def snapshot_plan(snapshot: dict) -> Plan | None:
    return Plan.from_dict(snapshot["plan"]) if snapshot.get("plan") else None


def captured() -> list[str]:
    return sorted(path.stem for path in SNAPSHOTS.glob("*.json"))


@pytest.mark.parametrize("name", captured())
def test_captured_snapshot(name: str) -> None:
    """Each captured snapshot says what diagnosis it must give (`expect`: reason, permanent, message parts)."""
    snapshot = load(name)
    if snapshot["kind"] == "provisioning":
        cause = provisioning_failure(
            snapshot["pods"], snapshot["events"], snapshot_now(snapshot), plan=snapshot_plan(snapshot)
        )
    else:
        cause = lost_process(
            snapshot["pods"], snapshot["events"], snapshot["nodes"], snapshot_plan(snapshot), snapshot["driverLogTail"]
        )
    expect = snapshot["expect"]
    assert cause is not None, name
    assert (cause.reason, cause.permanent) == (expect["reason"], expect["permanent"]), cause
    assert cause.waiting is expect.get("waiting", False), cause
    for part in expect["messageContains"]:
        assert part in cause.message, (part, cause.message)
    assert len(cause.message) <= MAX_LINE_CHARS and "\n" not in cause.message

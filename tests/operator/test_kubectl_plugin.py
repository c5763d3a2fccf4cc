"""`kubectl rlplace` (rlplace_operator/kubectl): what `get` and `top` print from a job's status and plan, and its
one-line errors without a cluster. tests/e2e/test_run.py runs it through the real kubectl against a real job."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from placement_core.components import component_placement
from placement_core.plan import build_plan
from rlplace_operator.api.status import RLJobStatus
from rlplace_operator.kubectl import app
from rlplace_operator.kubectl.views import get_text, gpu_idle_share, top_row, top_text, why_text


def status(**fields: object) -> RLJobStatus:
    return RLJobStatus.model_validate({"phase": "Running", **fields})


PROGRESS = {
    "iteration": 31,
    "iterationSeconds": 10.0,
    "components": [{"name": "actor", "seconds": 4.0}, {"name": "rollout", "seconds": 9.0}],
    "bottleneck": "rollout",
    "updatedAt": "2026-11-29T14:00:00Z",
}
PLACEMENT = {
    "mode": "disaggregated",
    "components": [
        {"name": "actor", "processes": 8, "gpus": 8, "nodes": ["n0"]},
        {"name": "rollout", "processes": 8, "gpus": 8, "nodes": ["n1"]},
        {"name": "reward", "processes": 2, "gpus": 0, "nodes": ["c0"]},
    ],
}


def big_plan():
    """1,024 nodes of 8 GPUs: the actor on the first 512 nodes, the rollout on the others."""
    config = {
        "cluster": {
            "num_nodes": 1024,
            "accelerators_per_node": 8,
            "component_placement": {"actor": "0-4095", "rollout": "4096-8191"},
        }
    }
    return build_plan(component_placement(config, kind="hybrid"))


def test_gpu_idle_share_is_the_gpu_seconds_held_but_not_busy() -> None:
    # 8 GPUs busy 4 s and 8 busy 9 s of a 10 s iteration: 104 of 160 GPU-seconds; the CPU-only reward not counted
    assert gpu_idle_share(status(progress=PROGRESS, placement=PLACEMENT)) == 1 - 104 / 160
    assert gpu_idle_share(status(placement=PLACEMENT)) is None


def test_get_shows_a_1024_node_plan_on_one_screen_and_where_it_was_verified() -> None:
    plan = big_plan()
    binding = [
        {"name": "actor", "verified": 4096, "processes": 4096},
        {"name": "rollout", "verified": 4096, "processes": 4096},
    ]
    conditions = [
        {"type": "BindingVerified", "status": "True", "reason": "Verified", "message": "", "lastTransitionTime": "t"}
    ]
    text = get_text("ml", "big", status(progress=PROGRESS, binding=binding, conditions=conditions), plan)
    lines = text.splitlines()
    assert lines[0] == "RLJob ml/big: Running, iteration 31 (10.00 s, bottleneck rollout)"
    assert lines[2:5] == [
        "node group cluster           GPU 0 1 2 3 4 5 6 7",
        "  node-0 .. node-511, x512       A A A A A A A A",
        "  node-512 .. node-1023, x512    R R R R R R R R",
    ]
    assert lines[-1] == "verified from inside the pods: actor 4096/4096 on 512 nodes; rollout 4096/4096 on 512 nodes"
    assert len(lines) < 10


def test_get_names_a_binding_mismatch_and_a_job_not_placed_yet() -> None:
    plan = big_plan()
    mismatch = {
        "type": "BindingVerified",
        "status": "False",
        "reason": "BindingMismatch",
        "message": "rollout rank 1 on node-512 sees CUDA_VISIBLE_DEVICES=3, planned 1",
        "lastTransitionTime": "t",
    }
    text = get_text("ml", "big", status(conditions=[mismatch]), plan)
    assert text.splitlines()[-1] == (
        "binding: BindingMismatch: rollout rank 1 on node-512 sees CUDA_VISIBLE_DEVICES=3, planned 1"
    )
    waiting = status(phase="Queued", message="waiting for 2 nodes of a800 (position 3)")
    assert get_text("ml", "later", waiting, None) == (
        "RLJob ml/later: Queued\nwaiting for 2 nodes of a800 (position 3)\nno plan yet: the job is not placed\n"
    )


def test_top_prints_columns_like_kubectl_top() -> None:
    rows = [
        top_row("ml", "fast", status(progress=PROGRESS, placement=PLACEMENT)),
        top_row("research", "queued", RLJobStatus.model_validate({"phase": "Queued"})),
    ]
    assert top_text(rows, all_namespaces=True) == (
        "NAMESPACE  NAME    PHASE    ITERATION  STEP    BOTTLENECK  GPU IDLE\n"
        "ml         fast    Running  31         10.00s  rollout     35%\n"
        "research   queued  Queued   -          -       -           -\n"
    )


def test_without_a_kubeconfig_or_a_reachable_cluster_it_is_one_line(tmp_path: Path) -> None:
    missing = CliRunner().invoke(app, ["get", "job"], env={"KUBECONFIG": str(tmp_path / "none")})
    assert missing.exit_code == 2
    assert missing.stderr.startswith("error: no usable kubeconfig: ") and missing.stderr.count("\n") == 1
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "http://127.0.0.1:9"}}],
                "users": [{"name": "u", "user": {}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u", "namespace": "ml"}}],
                "current-context": "x",
            }
        )
    )
    down = CliRunner().invoke(app, ["top"], env={"KUBECONFIG": str(kubeconfig)})
    assert down.exit_code == 2
    assert down.stderr.startswith("error: cannot reach the API server: ") and down.stderr.count("\n") == 1


def condition(kind: str, state: str, reason: str, message: str) -> dict:
    return {"type": kind, "status": state, "reason": reason, "message": message, "lastTransitionTime": "t"}


#: The stuck or slow jobs of issue 44, each as the operator writes its status, and what `why` must say of it.
STUCK = {
    "rlplace's queue full": (
        {"phase": "Queued", "queuePosition": 3, "waitingFor": "2 free nodes of a800"},
        "it is 3rd in rlplace's queue and waits for 2 free nodes of a800.",
        "kubectl get rljobs -A",
    ),
    "Kueue quota full": (
        {
            "phase": "Queued",
            "waitingFor": "couldn't assign flavors to pod set a800: insufficient quota for nvidia.com/gpu in flavor "
            "e2e-real, 16 more needed (ClusterQueue rl-e2e-real)",
            "kueue": {"workload": "job-1a2b", "clusterQueue": "rl-e2e-real"},
            "conditions": [condition("Admitted", "False", "WaitingForKueue", "waiting for Kueue")],
        },
        "Kueue has not admitted it: couldn't assign flavors to pod set a800: insufficient quota",
        "kubectl describe workload -n ml job-1a2b; kubectl get clusterqueue rl-e2e-real",
    ),
    "Kueue ClusterQueue inactive": (
        {
            "phase": "Queued",
            "waitingFor": "ClusterQueue rl-e2e-real is inactive: Can't admit new workloads: FlavorNotFound",
            "kueue": {"workload": "job-1a2b"},
            "conditions": [condition("Admitted", "False", "WaitingForKueue", "waiting for Kueue")],
        },
        "Kueue has not admitted it: ClusterQueue rl-e2e-real is inactive",
        "kubectl describe workload -n ml job-1a2b",
    ),
    "a missing Secret": (
        {
            "phase": "Failed",
            "message": "Secret 'no-such-secret' not found (node rank 0, node 'real-a800-0', actor ranks 0-3) "
            "(driver log: kubectl logs -n ml job/job)",
            "driverLog": "kubectl logs -n ml job/job",
        },
        "it failed: Secret 'no-such-secret' not found",
        "kubectl logs -n ml job/job",
    ),
    "an image that cannot be pulled": (
        {
            "phase": "Provisioning",
            "message": "waiting for the Ray cluster",
            "conditions": [
                condition(
                    "RayClusterReady",
                    "False",
                    "ImagePullFailed",
                    "image 'localhost/no-such:1' cannot be pulled (Ray head pod 'job-head-x')",
                )
            ],
        },
        "its pods are not all running yet: image 'localhost/no-such:1' cannot be pulled",
        "kubectl get pods -n ml -l rlplace.io/job=job -o wide",
    ),
    "an image that cannot be pulled, given back": (
        {
            "phase": "Queued",
            "message": "worker pod 'job-w-1' (node rank 0, node 'real-4090-0') container 'ray-worker' cannot pull its "
            "image: failed to resolve reference; gave the nodes back, retrying in 30 s (retry 1)",
            "retryAfter": "2026-11-29T14:00:30Z",
            "waitingFor": "its retry at 2026-11-29T14:00:30Z",
            "conditions": [condition("Admitted", "False", "ImagePullFailed", "cannot pull its image")],
        },
        "it gave its nodes back and is retried at 2026-11-29T14:00:30Z: worker pod 'job-w-1' (node rank 0, node "
        "'real-4090-0') container 'ray-worker' cannot pull its image",
        "kubectl describe rljob -n ml job; kubectl get pods -n ml -l rlplace.io/job=job -o wide",
    ),
    "a binding mismatch": (
        {
            "phase": "Running",
            "conditions": [
                condition(
                    "BindingVerified",
                    "False",
                    "BindingMismatch",
                    "verified actor 4/4, rollout 3/4; component 'rollout' rank 1 on node 'real-4090-0': "
                    "CUDA_VISIBLE_DEVICES is '3', planned '1'",
                )
            ],
        },
        "a binding mismatch: verified actor 4/4, rollout 3/4; component 'rollout' rank 1",
        "kubectl rlplace get job -n ml",
    ),
    "a slow bottleneck": (
        {"phase": "Running", "progress": PROGRESS, "placement": PLACEMENT},
        "rollout is the bottleneck: 9.00 s of the 10.00 s iteration 31; actor idles 60% of each iteration waiting "
        "for it; the job's GPUs idle 35%.",
        "kubectl rlplace top -n ml",
    ),
    "a job waiting for a replacement node": (
        {
            "phase": "Running",
            "progress": PROGRESS,
            "components": [
                {
                    "name": "rollout",
                    "onLoss": "Replace",
                    "desired": 4,
                    "live": 2,
                    "lost": [{"node": "gpu-7", "ranks": [2, 3], "since": "2026-11-29T14:00:00Z", "why": "NodeLost"}],
                }
            ],
        },
        "rollout runs 2 of 4 ranks: ranks 2, 3 lost on gpu-7 since 2026-11-29T14:00:00Z (NodeLost); its ranks wait "
        "for a replacement node while the others go on.",
        "kubectl get pods -n ml -l rlplace.io/job=job -o wide; kubectl get nodes",
    ),
}


@pytest.mark.parametrize("case", list(STUCK))
def test_why_names_the_one_thing_that_holds_the_job_back_and_where_to_look(case: str) -> None:
    fields, cause, further = STUCK[case]
    lines = why_text("ml", "job", RLJobStatus.model_validate(fields)).splitlines()
    assert len(lines) == 2, lines
    assert lines[0].startswith(f"RLJob ml/job: {cause}"), lines[0]
    assert lines[1].startswith(f"Look further: {further}"), lines[1]


def test_why_of_a_job_that_ended_or_was_never_seen() -> None:
    done = RLJobStatus.model_validate({"phase": "Succeeded", "driverLog": "kubectl logs -n ml job/job"})
    assert (
        why_text("ml", "job", done)
        == "RLJob ml/job: nothing: it succeeded.\nLook further: kubectl logs -n ml job/job\n"
    )
    assert "the operator has not seen it yet" in why_text("ml", "job", RLJobStatus())

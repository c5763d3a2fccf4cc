"""`kubectl rlplace` (rlplace_operator/kubectl): what `get` and `top` print from a job's status and plan, and its
one-line errors without a cluster. tests/e2e/test_run.py runs it through the real kubectl against a real job."""

from __future__ import annotations

from pathlib import Path

import yaml
from typer.testing import CliRunner

from placement_core.components import component_placement
from placement_core.plan import build_plan
from rlplace_operator.api.status import RLJobStatus
from rlplace_operator.kubectl import app
from rlplace_operator.kubectl.views import get_text, gpu_idle_share, top_row, top_text


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

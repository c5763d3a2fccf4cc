"""What each framework gives its job (frameworks/): RLinf's node ranks, the probe, the entrypoint, veRL's GPUs, its
metrics; and the registry that holds every framework, keyed by spec.framework."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import ValidationError

from placement_core import contract
from placement_core.components import component_placement
from placement_core.observe import probe
from placement_core.plan import build_plan
from rlplace_operator.api.rljob import FRAMEWORK_NEEDS_ENTRYPOINT_MESSAGE, PROGRAM_FRAMEWORKS, FrameworkName, RLJobSpec
from rlplace_operator.builders.configmap import build_placement_configmap
from rlplace_operator.builders.rayjob import build_rayjob
from rlplace_operator.frameworks import REGISTRY, framework_named, framework_of
from rlplace_operator.planning.plan import WorkerNode
from rlplace_operator.server.progress import posted_report

BODY = {
    "nodeGroups": ["a800"],
    "componentPlacement": [{"components": "actor", "placement": "all"}],
    "entrypoint": "python train.py --config-name grpo",
}
ALL = tuple(range(8))
NODES = [
    WorkerNode(0, "a800-0", 8, {"nvidia.com/gpu": 8}, processes=8, held_gpus=ALL),
    WorkerNode(1, "a800-1", 8, processes=8, held_gpus=ALL),
]


def _env(container: dict) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container["env"]}


def _rayjob(**spec: object) -> dict:
    return build_rayjob("job", RLJobSpec.model_validate({**BODY, **spec}), NODES)["spec"]


def test_rlinf_gets_the_plans_node_ranks_with_the_head_counted_last() -> None:
    spec = _rayjob(framework="rlinf")
    assert spec["entrypoint"] == "python train.py --config-name grpo cluster.num_nodes=3"
    workers = [g["template"]["spec"]["containers"][0] for g in spec["rayClusterSpec"]["workerGroupSpecs"]]
    # Each worker pod exports RLinf's node rank, its node's in the plan, before Ray starts.
    assert workers and all(
        c["args"] == [contract.worker_start_command(8, (contract.RLINF_NODE_RANK_ENV,))] for c in workers
    )
    head = spec["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    env = _env(head)
    assert env[contract.RLINF_NODE_RANK_ENV] == "2"
    assert env[contract.RAY_RUNTIME_ENV_HOOK_ENV] == "rlplace_probe.runtime_env_hook"
    assert env["RAY_DEDUP_LOGS"] == "0"
    for container in [head, *workers]:
        env = _env(container)
        # RLinf sets Ray's flag per process, with the GPUs; in the pod it would change other frameworks' choice.
        assert "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES" not in env
        assert env["PYTHONPATH"] == contract.PROBE_MOUNT_DIR
        assert env[contract.RLINF_EXT_MODULE_ENV] == contract.PROBE_MODULE
        assert {"name": "rlplace-probe", "mountPath": "/opt/rlplace-probe", "readOnly": True} in container[
            "volumeMounts"
        ]
    # Every RLinf actor asks Ray for a CPU: the pods declare the plan's processes and RLinf's own actors.
    groups = spec["rayClusterSpec"]["workerGroupSpecs"]
    assert [g["rayStartParams"]["num-cpus"] for g in groups] == ["12", "12"]
    assert spec["rayClusterSpec"]["headGroupSpec"]["rayStartParams"]["num-cpus"] == "5"


def test_verl_gets_the_probes_setup_hook_its_metrics_file_and_no_node_ranks() -> None:
    spec = _rayjob(framework="verl")
    assert spec["entrypoint"] == BODY["entrypoint"]  # veRL's own config says its nodes: nothing is appended
    head = spec["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert _env(head)[contract.FRAMEWORK_ENV] == "verl"
    assert _env(head)[contract.RAY_RUNTIME_ENV_HOOK_ENV] == "rlplace_probe.runtime_env_hook"
    workers = [g["template"]["spec"]["containers"][0] for g in spec["rayClusterSpec"]["workerGroupSpecs"]]
    for container in [head, *workers]:
        env = _env(container)
        assert env[contract.VERL_METRICS_ENV] == contract.VERL_METRICS_PATH
        assert env["PYTHONPATH"] == contract.PROBE_MOUNT_DIR
        for unwanted in (contract.RLINF_NODE_RANK_ENV, contract.RLINF_EXT_MODULE_ENV,
                         "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"):  # fmt: skip
            assert unwanted not in env
    # veRL's bundles ask for 3 CPUs per GPU, beside the processes of the plan and its own actors.
    groups = spec["rayClusterSpec"]["workerGroupSpecs"]
    assert [g["rayStartParams"]["num-cpus"] for g in groups] == ["36", "36"]
    assert [g["rayStartParams"]["num-gpus"] for g in groups] == ["8", "8"]
    assert "CUDA_VISIBLE_DEVICES" not in _env(workers[0])


def test_verl_on_a_node_used_in_part_is_shown_only_the_plans_gpus() -> None:
    # Ray picks veRL's GPU ids: a node whose GPUs 4-7 the plan holds shows Ray those four, by their own ids.
    part = [WorkerNode(0, "a800-0", 8, {"nvidia.com/gpu": 8}, processes=4, held_gpus=(4, 5, 6, 7))]
    spec = build_rayjob("job", RLJobSpec.model_validate({**BODY, "framework": "verl"}), part)["spec"]
    (group,) = spec["rayClusterSpec"]["workerGroupSpecs"]
    assert group["rayStartParams"]["num-gpus"] == "4"
    assert _env(group["template"]["spec"]["containers"][0])["CUDA_VISIBLE_DEVICES"] == "4,5,6,7"
    rlinf = build_rayjob("job", RLJobSpec.model_validate({**BODY, "framework": "rlinf"}), part)["spec"]
    (group,) = rlinf["rayClusterSpec"]["workerGroupSpecs"]
    assert group["rayStartParams"]["num-gpus"] == "8"  # RLinf sets every process's GPUs itself


def test_an_rlplace_driver_job_is_as_before() -> None:
    spec = _rayjob()
    assert spec["entrypoint"] == BODY["entrypoint"]
    worker = spec["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    env = _env(worker)
    assert env["RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"] == "1"
    assert contract.RLINF_NODE_RANK_ENV not in env and "PYTHONPATH" not in env


def test_the_probe_travels_in_the_jobs_configmap_beside_the_plan() -> None:
    plan = build_plan(component_placement({"cluster": {"num_nodes": 1, "component_placement": {"actor": "all"}}}))
    spec = RLJobSpec.model_validate({**BODY, "framework": "rlinf"})
    configmap = build_placement_configmap("job", plan, framework_of(spec).configmap_files())
    assert set(configmap["data"]) == {contract.PLAN_KEY, contract.NODE_RANKS_KEY, contract.PROBE_FILE}
    assert configmap["data"][contract.PROBE_FILE] == Path(probe.__file__).read_text()
    assert framework_of(RLJobSpec.model_validate(BODY)).configmap_files() == {}


def test_a_framework_job_needs_an_entrypoint_and_a_known_framework() -> None:
    without = {k: v for k, v in BODY.items() if k != "entrypoint"}
    with pytest.raises(ValidationError, match=FRAMEWORK_NEEDS_ENTRYPOINT_MESSAGE):
        RLJobSpec.model_validate({**without, "framework": "rlinf"})
    with pytest.raises(ValidationError, match="'rlplace', 'rlinf' or 'verl'"):
        RLJobSpec.model_validate({**BODY, "framework": "openrlhf"})


def test_every_framework_of_the_api_has_its_module_and_those_that_run_their_own_program_say_so() -> None:
    assert set(REGISTRY) == set(FrameworkName)
    assert {name for name, f in REGISTRY.items() if f.runs_own_program} == set(PROGRAM_FRAMEWORKS)
    assert framework_named(None).name == RLJobSpec.model_fields["framework"].default
    with pytest.raises(ValueError, match="unknown framework 'slime' \\(known: rlplace, rlinf, verl\\)"):
        framework_named("slime")


def test_a_framework_jobs_pods_are_handed_the_variables_its_probe_records() -> None:
    spec = _rayjob(framework="rlinf")
    head = spec["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    worker = spec["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    for container in (head, worker):
        assert _env(container)[contract.PROBE_VARIABLES_ENV].split(",") == list(contract.PROBE_VARIABLES)
    assert contract.PROBE_VARIABLES_ENV not in _env(
        _rayjob()["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    )


def test_the_metrics_a_framework_job_posts_are_mapped_by_its_framework() -> None:
    body = {
        "framework": "rlinf",
        "iteration": 4,
        "metrics": {"time/generate_rollouts": 0.3, "time/actor_training": 0.4, "time/step": 0.8},
    }
    report = posted_report(json.dumps(body).encode())
    assert (report.iteration, [(c.name, c.seconds) for c in report.components]) == (
        4,
        [("rollout", 0.3), ("actor", 0.4)],
    )
    verl = posted_report(json.dumps({"framework": "verl", "iteration": 2, "metrics": {"timing_s/gen": 1.5}}).encode())
    assert [(c.name, c.seconds) for c in verl.components] == [("rollout", 1.5)]
    with pytest.raises(ValueError, match="unknown framework 'slime'"):
        posted_report(json.dumps({**body, "framework": "slime"}).encode())
    with pytest.raises(ValueError, match="'iteration' \\(an integer\\)"):
        posted_report(json.dumps({**body, "iteration": "4"}).encode())
    with pytest.raises(ValueError, match="posts IterationReports, not metrics"):
        posted_report(json.dumps({**body, "framework": "rlplace"}).encode())


def test_a_framework_that_runs_its_own_program_is_refused_on_dra_groups_at_admission() -> None:
    spec = RLJobSpec.model_validate({**BODY, "framework": "rlinf"})
    refusal = framework_of(spec).refusal(spec, ["shared"])
    assert refusal is not None and refusal.startswith("NodeGroup shared allocates GPUs through DRA")
    assert framework_of(spec).refusal(spec, []) is None
    rlplace = RLJobSpec.model_validate(BODY)
    assert framework_of(rlplace).refusal(rlplace, ["shared"]) is None

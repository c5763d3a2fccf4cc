"""TEST-ONLY: a training program that leaves GPU ids to Ray the way veRL's resource pools do (veRL itself needs
a CUDA torch build, about 5.9 GB, which the e2e suite does not carry; docs/frameworks.md says what it costs).

What it shares with a veRL run, because rlplace's observed check (placement_core/observe/pools.py)
depends on it, and nothing of veRL's code:
- the config keys veRL's PPO trainer reads for its pools (trainer.nnodes, trainer.n_gpus_per_node,
  reward_model.enable_resource_pool / nnodes / n_gpus_per_node), as Hydra-style `key=value` overrides;
- the driver starts one TaskRunner actor (1 CPU), which builds the pools and runs the training loop;
- a pool is one STRICT_PACK placement group per node of `{CPU: 3, GPU: 1}` bundles, ordered by node IP; one
  actor per bundle with `num_gpus=1/3`, named `<prefix>WorkerDict_<pg>:<local rank>`, with WORLD_SIZE, RANK,
  WG_PREFIX in its runtime_env: Ray chooses its GPU and sets CUDA_VISIBLE_DEVICES;
- each step's `timing_s/*` metrics go to the `file` logger's JSONL ({"step", "data"}) at
  $VERL_FILE_LOGGER_PATH when trainer.logger lists `file`.
"""

from __future__ import annotations

import json
import os
import random
import string
import time
from typing import Any

import ray
from omegaconf import OmegaConf
from ray.util.placement_group import placement_group, placement_group_table
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

DEFAULTS = {
    "trainer": {
        "nnodes": 1,
        "n_gpus_per_node": 8,
        "total_training_steps": 6,
        "logger": ["console"],
        "project_name": "rlplace-e2e",
        "experiment_name": "verl-style",
    },
    "reward_model": {"enable_resource_pool": False, "nnodes": 0, "n_gpus_per_node": 0},
}
MAX_COLOCATE = 3


@ray.remote
class WorkerDict:
    """One process per GPU of a pool, hosting the pool's roles."""

    def where(self) -> dict[str, Any]:
        return {
            "rank": int(os.environ["RANK"]),
            "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
            "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "node": os.environ.get("RLPLACE_KUBE_NODE"),
        }

    def work(self, seconds: float) -> int:
        time.sleep(seconds)
        return int(os.environ["RANK"])


def worker_group(counts: list[int]) -> list[Any]:
    """A pool's actors: per-node placement groups of one-GPU bundles, sorted by node IP, Ray's GPU choice."""
    prefix = "".join(random.choices(string.ascii_letters + string.digits, k=6))
    groups = [
        placement_group(
            [{"CPU": MAX_COLOCATE, "GPU": 1}] * count,
            strategy="STRICT_PACK",
            name=f"{prefix}verl_group_{'_'.join(map(str, counts))}:{index}",
        )
        for index, count in enumerate(counts)
    ]
    ray.get([group.ready() for group in groups])
    address = {node["NodeID"]: node["NodeManagerAddress"] for node in ray.nodes()}
    groups.sort(key=lambda group: address[placement_group_table(group)["bundles_to_node_id"][0]])
    workers, rank = [], 0
    for index, group in enumerate(groups):
        for local in range(group.bundle_count):
            env = {
                "WORLD_SIZE": str(sum(counts)),
                "RANK": str(rank),
                "WG_PREFIX": prefix,
                "WG_BACKEND": "ray",
                "RAY_LOCAL_WORLD_SIZE": str(counts[0]),
            }
            strategy = PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=local)
            workers.append(
                WorkerDict.options(
                    name=f"{prefix}WorkerDict_{index}:{local}",
                    runtime_env={"env_vars": env},
                    scheduling_strategy=strategy,
                    num_gpus=1 / MAX_COLOCATE,
                ).remote()
            )
            rank += 1
    return workers


@ray.remote(num_cpus=1)
class TaskRunner:
    def run(self, config: dict[str, Any]) -> int:
        trainer, reward = config["trainer"], config["reward_model"]
        pools = {"global_pool": [trainer["n_gpus_per_node"]] * trainer["nnodes"]}
        if reward["enable_resource_pool"]:
            pools["reward_pool"] = [reward["n_gpus_per_node"]] * reward["nnodes"]
        groups = {name: worker_group(counts) for name, counts in pools.items()}
        for name, workers in groups.items():
            for seen in ray.get([w.where.remote() for w in workers]):
                print(f"{name}: {json.dumps(seen)}", flush=True)
        logger = None
        if "file" in trainer["logger"]:
            path = os.environ.get("VERL_FILE_LOGGER_PATH") or f"{trainer['project_name']}/verl-style.jsonl"
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            logger = open(path, "wb", buffering=0)  # noqa: SIM115 (kept open for the run, as veRL's logger)
        for step in range(1, trainer["total_training_steps"] + 1):
            started = time.monotonic()
            ray.get([w.work.remote(0.2) for w in groups["global_pool"]])
            generated = time.monotonic()
            if "reward_pool" in groups:
                ray.get([w.work.remote(0.1) for w in groups["reward_pool"]])
            rewarded = time.monotonic()
            ray.get([w.work.remote(0.3) for w in groups["global_pool"]])
            data = {
                "timing_s/gen": generated - started,
                "timing_s/reward": rewarded - generated,
                "timing_s/update_actor": time.monotonic() - rewarded,
                "timing_s/step": time.monotonic() - started,
                "training/global_step": step,
            }
            print(f"step {step}: {json.dumps(data)}", flush=True)
            if logger is not None:
                logger.write(json.dumps({"step": step, "data": data}).encode() + b"\n")
        time.sleep(5)  # the last lines reach the console and whoever reads the logger's file
        return trainer["total_training_steps"]


if __name__ == "__main__":
    config = OmegaConf.to_container(OmegaConf.merge(OmegaConf.create(DEFAULTS), OmegaConf.from_cli()))
    ray.init()
    steps = ray.get(TaskRunner.remote().run.remote(config))
    print(f"trained {steps} steps")

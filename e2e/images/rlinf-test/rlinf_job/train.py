"""A training script written against RLinf's scheduler, as a user of RLinf writes one (e2e test program).

It is the user's side of a framework job: Hydra reads its config, RLinf's Cluster finds the Ray nodes,
RLinf's HybridComponentPlacement reads `cluster.component_placement`, and each component's workers are launched
by RLinf's WorkerGroup.launch with the strategy RLinf computed. Each worker then runs a few iterations of
synthetic work (a sleep per component: the fake-GPU nodes cannot train a model) and the driver logs RLinf-style
`time/*` metrics through RLinf's MetricLogger. Nothing in it knows rlplace.
"""

from __future__ import annotations

import time

import hydra
from omegaconf import DictConfig
from rlinf.scheduler import Cluster, Worker
from rlinf.utils.metric_logger import MetricLogger
from rlinf.utils.placement import HybridComponentPlacement


class SyntheticWorker(Worker):
    """One process of a component: sleeps for the component's step time."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def work(self, step: int) -> float:
        began = time.monotonic()
        time.sleep(self.seconds)
        return time.monotonic() - began


PHASES = {"rollout": "time/generate_rollouts", "actor": "time/actor_training", "reward": "time/reward"}


@hydra.main(version_base="1.1", config_path="config", config_name="rlinf_hetero")
def main(cfg: DictConfig) -> None:
    cluster = Cluster(cluster_cfg=cfg.cluster)
    placement = HybridComponentPlacement(cfg, cluster)
    groups = {}
    for component in cfg.runner.components:
        worker = SyntheticWorker.create_group(float(cfg[component].step_seconds))
        groups[component] = worker.launch(
            cluster, placement_strategy=placement.get_strategy(component), name=cfg[component].group_name
        )
    logger = MetricLogger(cfg)
    for step in range(1, int(cfg.runner.max_steps) + 1):
        began = time.monotonic()
        metrics = {}
        for component in cfg.runner.components:  # one after another, as a synchronous PPO step runs them
            seconds = groups[component].work(step).wait()
            metrics[PHASES[component]] = max(seconds)
        metrics["time/step"] = time.monotonic() - began
        logger.log(metrics, step)
        print(f"step {step}: {metrics}", flush=True)
    logger.finish()


if __name__ == "__main__":
    main()

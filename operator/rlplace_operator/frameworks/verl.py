"""veRL: the user's veRL program, unchanged; Ray assigns the GPU ids of veRL's resource pools.

veRL leaves GPU ids to Ray (placement groups of one-GPU bundles per node, `num_gpus` per actor), so rlplace shapes
the Ray cluster to the plan and observes what each process got (placement_core/observe/pools.py):

- no pod sets RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES (veRL reads it and then picks its GPU itself);
- a worker pod whose node the plan uses only in part shows Ray only the plan's GPUs: Ray's num-gpus is their count
  and the pod's CUDA_VISIBLE_DEVICES lists them (Ray's GPU ids then index that list, and each actor's
  CUDA_VISIBLE_DEVICES names the node's own GPU ids);
- the head sets RLPLACE_FRAMEWORK=verl, so the probe's driver hook adds the probe's worker setup hook to the job's
  runtime_env: every worker process reports its actor, node and the GPU ids Ray gave it;
- every pod sets VERL_FILE_LOGGER_PATH, where veRL's `file` logger writes each step's metrics (in its TaskRunner
  actor, on any pod), which the probe passes on to the operator's progress endpoint: every pod may report;
- each pod declares VERL_BUNDLE_CPUS Ray CPUs per GPU beyond the plan's processes (veRL's bundles ask for them:
  `max_colocate_count`, 3 by default).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from placement_core import contract
from placement_core.observe import adapters
from placement_core.observe.pools import ObservedPools, observed_pools_in, pool_report
from placement_core.observe.progress import IterationReport
from placement_core.observe.verify import BindingReport
from placement_core.plan import Plan
from rlplace_operator.api.rljob import FrameworkName
from rlplace_operator.frameworks.probed import ProbedFramework

#: Ray CPUs per GPU each pod declares for veRL's bundles.
VERL_BUNDLE_CPUS = 3


class Verl(ProbedFramework):
    name: ClassVar[FrameworkName] = FrameworkName.VERL

    def framework_env(self) -> list[dict[str, str]]:
        return [{"name": contract.VERL_METRICS_ENV, "value": contract.VERL_METRICS_PATH}]

    def shown_gpus(self, gpus: int, held: tuple[int, ...]) -> tuple[int, ...] | None:
        # Ray is shown only the plan's GPUs of a node the plan uses in part.
        return held if len(held) < gpus else None

    def ray_gpus(self, gpus: int, held: tuple[int, ...]) -> int:
        shown = self.shown_gpus(gpus, held)
        return gpus if shown is None else len(shown)

    def extra_ray_cpus(self, gpus: int) -> int:
        return super().extra_ray_cpus(gpus) + VERL_BUNDLE_CPUS * gpus

    def progress_from_every_pod(self) -> bool:
        return True

    def binding_report(self, plan: Plan, logs: Iterable[str], final: bool) -> BindingReport | None:
        pooled = next((seen for seen in map(observed_pools_in, logs) if not seen.empty), ObservedPools())
        return pool_report(plan, pooled, final=final)

    def iteration_report(self, metrics: Mapping[str, Any], iteration: int) -> IterationReport:
        return adapters.from_verl(metrics, iteration)

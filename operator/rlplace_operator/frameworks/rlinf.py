"""RLinf: the user's RLinf program, unchanged; RLinf's own scheduler places every process.

RLinf starts one Ray actor per rank, pinned to a Ray node by RLinf's node rank, with the CUDA_VISIBLE_DEVICES it
computes from `cluster.component_placement`. The plan and RLinf agree once RLinf's node ranks are rlplace's, so:

- every worker pod sets RLINF_NODE_RANK to its plan node rank before Ray starts (the worker start command,
  placement_core.contract.worker_start_command), and the head (a Ray node too, without GPUs) sets the rank
  after the last worker; RLinf then needs `cluster.num_nodes` = workers + 1, appended to the entrypoint as a
  Hydra override;
- no pod sets RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES: RLinf sets it per process with the variable;
- RLinf imports the probe in every Worker (RLINF_EXT_MODULE), which prints each process's record; its actors ask
  Ray for one CPU each to be scheduled, and RLinf adds a node probe per node and a few managers of its own;
- its step times are the `time/*` keys RLinf logs (placement_core.observe.adapters.from_rlinf).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, ClassVar

from placement_core import contract
from placement_core.observe import adapters
from placement_core.observe.processes import Observed, framework_report, observed_in
from placement_core.observe.progress import IterationReport
from placement_core.observe.verify import BindingReport
from placement_core.plan import Plan
from rlplace_operator.api.rljob import FrameworkName, RLJobSpec
from rlplace_operator.frameworks.probed import ProbedFramework


class RLinf(ProbedFramework):
    name: ClassVar[FrameworkName] = FrameworkName.RLINF

    def framework_env(self) -> list[dict[str, str]]:
        return [{"name": contract.RLINF_EXT_MODULE_ENV, "value": contract.PROBE_MODULE}]

    def head_env(self, workers: int) -> list[dict[str, str]]:
        return [{"name": contract.RLINF_NODE_RANK_ENV, "value": str(workers)}, *super().head_env(workers)]

    def node_rank_exports(self) -> tuple[str, ...]:
        return (contract.RLINF_NODE_RANK_ENV,)

    def entrypoint(self, spec: RLJobSpec, workers: int) -> str:
        return f"{super().entrypoint(spec, workers)} cluster.num_nodes={workers + 1}"

    def binding_report(self, plan: Plan, logs: Iterable[str], final: bool) -> BindingReport | None:
        observed = next((seen for seen in map(observed_in, logs) if not seen.empty), Observed())
        return framework_report(plan, observed, final=final)

    def iteration_report(self, metrics: Mapping[str, Any], iteration: int) -> IterationReport:
        return adapters.from_rlinf(metrics, iteration)

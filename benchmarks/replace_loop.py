"""The closed loop over a synthetic workload (not a measurement of any model), without a cluster.

    .venv/bin/python benchmarks/replace_loop.py [--noise 0.10] [--iterations 100] [--seed 23]

Each case is a job on one 8-GPU node whose components' step times follow declared laws in their GPU count g
(the reference driver's `--workload synthetic`, placement_core/launcher/synthetic.py), started on a bad
placement. Each iteration reports the law's times with +-noise (uniform, seeded); the figures are the medians
of the last 10 reports (as status.progress); the operator's step (recommend.step) decides and, with apply Auto,
re-places the job at the next report. Printed per case: the iteration time before (the law on the first
placement), the prediction, and after (the law on the placement it ended on), as ratios against the before
figure of the same run; the re-placements made; and the operator's cost of one recommendation step (the work
per progress report that brings news), per 1,000 reports.
"""

from __future__ import annotations

import argparse
import datetime as dt
import random
import statistics
import time
from collections.abc import Mapping

from placement_core.cluster import Cluster
from placement_core.components import ComponentPlacement
from placement_core.grammar import PlacementEntry
from placement_core.launcher.synthetic import Law, iteration_seconds
from rlplace_operator.api.rljob import AppliedPlacementEntry, RLJobSpec
from rlplace_operator.api.status import Progress, RLJobStatus
from rlplace_operator.planning.recommend import step, with_replacement

CLUSTER = Cluster.from_config({"num_nodes": 1, "accelerators_per_node": 8})
#: Each component's GPUs, as (node rank, GPU) pairs.
Gpus = dict[str, frozenset[tuple[int, int]]]
ALGORITHM = {"recomputeLogprobs": False, "groupSize": 16, "nMinibatches": 4, "rolloutBatchSize": 128}

#: name -> (laws, first placement)
CASES: dict[str, tuple[dict[str, Law], list[dict[str, str]]]] = {
    "rollout-bound split -> collocated": (
        {"rollout": Law(12, 0), "actor": Law(4, 0), "reward": Law(0, 0.05)},
        [{"components": "rollout,reward", "placement": "0-3"}, {"components": "actor", "placement": "4-7"}],
    ),
    "actor-bound split -> collocated": (
        {"rollout": Law(2, 0), "actor": Law(14, 0), "reward": Law(0, 0.05)},
        [{"components": "rollout,reward", "placement": "0-5"}, {"components": "actor", "placement": "6-7"}],
    ),
    "collocated, already best": (
        {"rollout": Law(12, 0), "actor": Law(4, 0), "reward": Law(0, 0.05)},
        [{"components": "actor,rollout,reward", "placement": "all"}],
    ),
}


def law_seconds(laws: Mapping[str, Law], entries: list[AppliedPlacementEntry]) -> tuple[dict[str, float], Gpus]:
    """Each component's seconds on its GPUs under the laws, and those GPUs."""
    grammar = [PlacementEntry.of(e.components, e.placement, e.node_group) for e in entries]
    placement = ComponentPlacement.from_entries(grammar, CLUSTER)
    gpus = {name: frozenset((n, i) for n, i, _ in placement.get_units(name)) for name in placement.components}
    return {name: laws[name].seconds(len(held)) for name, held in gpus.items()}, gpus


def law_iteration_seconds(laws: Mapping[str, Law], entries: list[AppliedPlacementEntry]) -> float:
    """The synthetic iteration time of a placement under the laws."""
    return iteration_seconds(*law_seconds(laws, entries))


def run_case(laws: dict[str, Law], first: list[dict[str, str]], noise: float, iterations: int, seed: int):
    rng = random.Random(seed)
    spec = RLJobSpec.model_validate(
        {
            "nodeGroups": ["a800"],
            "componentPlacement": first,
            "placementMode": "modelParallel",
            "algorithm": ALGORITHM,
            "autoPlacement": {"apply": "Auto", "costModel": "linear", "cooldown": 0},
        }
    )
    status = RLJobStatus(phase="Running", applied_placement=[AppliedPlacementEntry(**e) for e in first])
    before = law_iteration_seconds(laws, status.applied_placement)
    now = dt.datetime(2026, 11, 24, tzinfo=dt.UTC)
    reports: list[dict[str, float]] = []
    costs: list[float] = []
    predicted = before
    for iteration in range(1, iterations + 1):
        truth, gpus = law_seconds(laws, status.applied_placement)
        now += dt.timedelta(seconds=iteration_seconds(truth, gpus))
        noisy = {n: s * rng.uniform(1 - noise, 1 + noise) for n, s in truth.items()}
        # What the driver reports: the noisy times, and the iteration they make (the synthetic law's formula).
        noisy["iteration"] = iteration_seconds(noisy, gpus)
        reports = [*reports, noisy][-10:]
        medians = {n: statistics.median(r[n] for r in reports) for n in truth}
        progress = Progress(
            iteration=iteration,
            iteration_seconds=statistics.median(r["iteration"] for r in reports),
            components=[{"name": n, "seconds": s} for n, s in medians.items()],
            updated_at=now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        )
        status = status.model_copy(update={"progress": progress})
        started = time.perf_counter()
        taken = step(spec, status, CLUSTER, now + dt.timedelta(seconds=1))
        costs.append(time.perf_counter() - started)
        if taken.replacement is not None:
            predicted = taken.replacement.predicted_iteration_seconds
            status = status.model_copy(
                update={
                    "replacements": with_replacement(status, taken.replacement),
                    "applied_placement": taken.replacement.component_placement,
                    "recommendation": None,
                }
            )
            reports = []
        else:
            status = status.model_copy(update={"recommendation": taken.recommendation})
    after = law_iteration_seconds(laws, status.applied_placement)
    return before, predicted, after, status.replacements, statistics.median(costs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--noise", type=float, default=0.10)
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--seed", type=int, default=23)
    args = parser.parse_args()
    print(f"synthetic workload (declared laws, not a model), +-{args.noise:.0%} noise, {args.iterations} iterations")
    for name, (laws, first) in CASES.items():
        before, predicted, after, replacements, cost = run_case(laws, first, args.noise, args.iterations, args.seed)
        laws_text = ", ".join(f"{c}={law}" for c, law in laws.items())
        print(f"\n{name} ({laws_text})")
        print(f"  before {before:.3f} s/iteration = 1.00")
        print(f"  predicted {predicted:.3f} s = {predicted / before:.2f}; after {after:.3f} s = {after / before:.2f}")
        print(f"  prediction error {abs(after - predicted) / after:.1%}; re-placements {len(replacements)}")
        for r in replacements:
            placement = ", ".join(f"{e.components}: {e.placement}" for e in r.component_placement)
            print(f"    at iteration {r.iteration}: {placement}")
        print(
            f"  operator cost: {cost * 1e3:.2f} ms per report with news = {cost * 1e3:.2f} s of CPU per 1,000 reports"
        )


if __name__ == "__main__":
    main()

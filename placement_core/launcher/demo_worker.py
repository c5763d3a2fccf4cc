"""The reference driver's worker and what the driver shows of it: `Worker` (what each of its processes does
and reports about itself), `roles` (the part each launched component plays) and the process table (one row per
process: what it saw from inside, and its binding verdict). Shared by the one-shot exercise (demo.py) and the
`--steps` mode (steps.py).
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from placement_core.contract import KUBE_NODE_ENV

if TYPE_CHECKING:
    from placement_core.launcher.groups import WorkerGroup
    from placement_core.observe.verify import BindingReport

#: The planned variables each process reports, in table order.
VARIABLES = ("RANK", "WORLD_SIZE", "NODE_RANK", "CLUSTER_NODE_RANK", "CUDA_VISIBLE_DEVICES", "LOCAL_HARDWARE_RANKS")
#: What each process reports about itself, in table order: its planned variables and its process id, by which a
#: reader of the log tells a rank started again from one that kept its process.
SEEN = (*VARIABLES, "PID")
COLUMNS = ("component", *SEEN, "node", "binding")


class Worker:
    """Stands in for a training, generation or reward worker: reports what its process sees, and works a
    little so that concurrent calls can be seen to overlap."""

    def __init__(self) -> None:
        self.weights_version: int | None = None
        """The version of the weights this process generates with (`sync_weights`); None before the first."""

    def where(self) -> dict[str, str]:
        seen = {key: os.environ.get(key, "") for key in VARIABLES}
        return {**seen, "PID": str(os.getpid()), "node": os.environ.get(KUBE_NODE_ENV) or socket.gethostname()}

    def train_step(self, seconds: float) -> tuple[float, float]:
        start = time.time()
        time.sleep(seconds)
        return start, time.time()

    def score(self, sample: int) -> float:
        time.sleep(0.05)
        return sample / 10

    def sync_weights(self, version: int) -> int:
        """Take the trainer's weights of `version` (stands in for a weight broadcast): every generating rank
        gets them each step, and a rank started again after a loss gets them before it generates."""
        self.weights_version = version
        return version

    def weights(self) -> int | None:
        return self.weights_version

    def generate(
        self, scorers: Sequence[Any], samples: int | Sequence[int], version: int | None = None
    ) -> tuple[float, float, float, dict[int, str], list[int]]:
        """Call the scorers (another component's actors) for each sample (`samples` of them, or these sample
        numbers), all at once: cross-component calls from inside a worker. A scorer that dies has its samples
        scored by the others; with none left, the samples not scored are handed back. `version`: the weights the
        step generates with; a process that has others refuses (it missed a weight sync). Returns (start, end,
        total score, index of each scorer that died -> its error, the samples not scored)."""
        import ray

        if version is not None and self.weights_version != version:
            raise RuntimeError(f"asked to generate with weights {version}, this process has {self.weights_version}")
        start = time.time()
        todo = list(range(samples)) if isinstance(samples, int) else list(samples)
        alive = list(range(len(scorers)))
        dead: dict[int, str] = {}
        total = 0.0
        while todo and alive:
            placed = [(alive[i % len(alive)], sample) for i, sample in enumerate(todo)]
            refs = [scorers[index].score.remote(sample) for index, sample in placed]
            todo = []
            for (index, sample), ref in zip(placed, refs, strict=True):
                try:
                    total += ray.get(ref)
                except ray.exceptions.RayActorError as err:
                    if isinstance(err, ray.exceptions.RayTaskError):
                        raise  # the scorer's own error, not its death
                    dead[index] = type(err).__name__
                    todo.append(sample)
            alive = [index for index in alive if index not in dead]
        time.sleep(0.3)
        return start, time.time(), total, dead, todo


def roles(groups: Mapping[str, WorkerGroup]) -> tuple[WorkerGroup, WorkerGroup, WorkerGroup | None]:
    """The trainer (actor, else the first component), the generator (rollout, else the last) and the scorer
    group whose actors the generator calls (reward, else the trainer; None when that is the generator itself,
    since a worker calling its own group would wait on itself: one call at a time per actor)."""
    names = list(groups)
    trainer = groups.get("actor") or groups[names[0]]
    generator = groups.get("rollout") or groups[names[-1]]
    scorer = groups.get("reward") or trainer
    return trainer, generator, None if scorer is generator else scorer


def table(groups: Mapping[str, WorkerGroup], report: BindingReport) -> list[dict[str, str]]:
    """One row per live process: what it saw from inside, and its binding verdict. A replaceable group's rank
    that dies meanwhile is left out (and started again), as in a step."""
    verdicts = {(c.component, c.rank): ("ok" if c.ok else c.problems[0]) for c in report.checks}
    calls = {name: group.call("where") for name, group in groups.items()}
    rows = []
    for name, call in calls.items():
        for rank, seen in call.get_live(timeout=120).items():
            rows.append({"component": name, **seen, "binding": verdicts.get((name, rank), "not checked")})
    return rows


def print_table(rows: list[dict[str, str]]) -> None:
    widths = [max(len(col), *(len(row[col]) for row in rows)) for col in COLUMNS]
    for line in [dict(zip(COLUMNS, COLUMNS, strict=True)), *rows]:
        print("  ".join(line[col].ljust(width) for col, width in zip(COLUMNS, widths, strict=True)).rstrip())

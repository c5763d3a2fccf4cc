"""A synthetic RL workload: each component's step time follows a declared law in its GPU count.

This is NOT a measurement of any real model. `--workload synthetic` in the reference driver
(`placement_core.launcher.demo`) makes every process of a component sleep `a/g + b` seconds per step, where g is
the number of GPUs the plan gives the component, so that a placement change has a predictable effect on the
iteration time (for testing the closed loop of measuring step times and re-placing a job). Components whose
GPUs overlap (collocated) take turns, as time-shared components do; groups of components on disjoint GPUs run
at the same time. So an iteration takes, over the groups, the longest sum of its members' times:

    iteration = max over GPU-sharing groups of (sum of law(g) over the group's components)

Laws are written `COMPONENT=EXPR` with EXPR one of `A/g`, `A/g+B`, `B` (A, B >= 0, in seconds), e.g.
`actor=120/g` or `rollout=80/g+2`. A straggler, `COMPONENT=S@FROM-TO` (`--slow`), adds S seconds to the
component's step in steps FROM to TO: iterations that get slower and recover, as a slow node makes them (for
trying the alerts on step times, docs/monitoring.md).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from placement_core.components import sharing_groups
from placement_core.errors import LaunchError
from placement_core.launcher.plan import LaunchPlan

_NUMBER = r"\d+(?:\.\d*)?|\.\d+"
_LAW = re.compile(rf"^\s*(?:(?P<a>{_NUMBER})\s*/\s*g)?\s*(?:(?P<plus>\+)?\s*(?P<b>{_NUMBER}))?\s*$")


@dataclass(frozen=True, slots=True)
class Law:
    """Seconds per step of one component: `per_gpu / g + fixed`."""

    per_gpu: float
    fixed: float

    def seconds(self, gpus: int) -> float:
        if self.per_gpu and gpus < 1:
            raise LaunchError(f"a law with a '/g' term needs GPUs, the component has {gpus}")
        return (self.per_gpu / gpus if self.per_gpu else 0.0) + self.fixed

    def __str__(self) -> str:
        parts = ([f"{self.per_gpu:g}/g"] if self.per_gpu else []) + ([f"{self.fixed:g}"] if self.fixed else [])
        return "+".join(parts) or "0"


def parse_law(text: str) -> tuple[str, Law]:
    """`COMPONENT=EXPR` -> (component, Law); a bad one is a one-line LaunchError quoting it."""
    component, sep, expr = text.partition("=")
    match = _LAW.match(expr)
    if not sep or not component.strip() or not expr.strip() or match is None:
        raise LaunchError(f"--law wants COMPONENT=A/g, COMPONENT=A/g+B or COMPONENT=B (seconds), got '{text}'")
    a, b = match.group("a"), match.group("b")
    if a is not None and b is not None and match.group("plus") is None:
        raise LaunchError(f"--law: missing '+' between the terms in '{text}'")
    return component.strip(), Law(float(a or 0), float(b or 0))


_SLOW = re.compile(rf"^\s*(?P<seconds>{_NUMBER})\s*@\s*(?P<first>\d+)\s*-\s*(?P<last>\d+)\s*$")


@dataclass(frozen=True, slots=True)
class Slowdown:
    """Extra seconds of one component's step in steps `first` to `last` (1-based, both included)."""

    component: str
    seconds: float
    first: int
    last: int

    def extra(self, step: int) -> float:
        return self.seconds if self.first <= step <= self.last else 0.0


def parse_slowdowns(texts: Iterable[str], components: Sequence[str]) -> tuple[Slowdown, ...]:
    """`COMPONENT=S@FROM-TO` values of `--slow`; a bad one, or one for a component not launched, is one line."""
    slowdowns = []
    for text in texts:
        component, sep, expr = text.partition("=")
        match = _SLOW.match(expr)
        if not sep or not component.strip() or match is None or int(match["first"]) > int(match["last"]):
            raise LaunchError(f"--slow wants COMPONENT=SECONDS@FROM-TO (steps, FROM <= TO), got '{text}'")
        if component.strip() not in components:
            raise LaunchError(
                f"--slow for '{component.strip()}', which is not launched (launched: {', '.join(components)})"
            )
        slowdowns.append(Slowdown(component.strip(), float(match["seconds"]), int(match["first"]), int(match["last"])))
    return tuple(slowdowns)


def parse_laws(texts: Iterable[str], components: Sequence[str]) -> dict[str, Law]:
    """One law for each launched component, from `--law` values; missing, repeated or unknown ones named."""
    laws: dict[str, Law] = {}
    for text in texts:
        component, law = parse_law(text)
        if component not in components:
            raise LaunchError(f"--law for '{component}', which is not launched (launched: {', '.join(components)})")
        if component in laws:
            raise LaunchError(f"--law for '{component}' given twice")
        laws[component] = law
    missing = [name for name in components if name not in laws]
    if missing:
        raise LaunchError(f"--workload synthetic needs a --law for every component; missing: {', '.join(missing)}")
    return laws


def component_gpus(plan: LaunchPlan, component: str) -> frozenset[tuple[int, int]]:
    """The (node rank, GPU) pairs the plan gives a component's processes."""
    return frozenset((p.node_rank, gpu) for p in plan.processes(component) for gpu in p.held_gpus)


def iteration_seconds(seconds: Mapping[str, float], gpus: Mapping[str, frozenset[tuple[int, int]]]) -> float:
    """The iteration time of components that take `seconds` each on `gpus` (the module docstring's formula)."""
    return max((sum(seconds[name] for name in group) for group in sharing_groups(gpus)), default=0.0)


def predicted_iteration_seconds(laws: Mapping[str, Law], gpus: Mapping[str, frozenset[tuple[int, int]]]) -> float:
    """The iteration time the laws give for a placement."""
    return iteration_seconds({name: laws[name].seconds(len(held)) for name, held in gpus.items()}, gpus)

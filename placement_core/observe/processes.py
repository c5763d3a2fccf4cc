"""The binding of a framework job's processes, checked against the plan from what the driver's log shows.

A framework job (RLJob spec.framework: rlinf) runs the framework's own launcher; rlplace's launcher never
starts its processes. What each process really got is shown two ways, both printed into the driver's log by
the probe (observe/probe.py), which the operator ships to the pods:

- from inside each process (`rlplace-probe:` lines): its group and rank, the placement variables the framework
  set (RANK, CUDA_VISIBLE_DEVICES, ...), the node rank and Kubernetes node of its pod, and the device UUIDs
  NVML shows where the node has GPUs;
- from outside, through Ray's State API (`rlplace-actors:` lines, read in the driver): every named actor, the
  rlplace node-rank label of its Ray node, and the CUDA_VISIBLE_DEVICES of its runtime_env.

`framework_report` matches both against the plan, process by process, into the BindingReport the rlplace
driver produces (so the RLJob's BindingVerified condition and status.binding read the same): an env value, a
node, a GPU count or an extra process that differs is a problem of that rank; a planned process seen by
neither view is missing. Until every planned process is seen in both views, and none differs, there is no
report (None), unless `final` (the driver ended, or the operator's bound on the start passed). A report made
at the first mismatch, before every process was seen, counts the ones not seen yet as not verified.

A framework names its processes by worker group: RLinf's actor `<group_name>:<rank>` in Ray namespace
`RLinf`. A group belongs to the component whose name it spells, ignoring case, separators and a trailing
`Group` (RLinf's defaults: ActorGroup -> actor, RolloutGroup -> rollout, EnvGroup -> env), or to the
component `groups` maps it to.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

from placement_core.contract import ACTORS_PREFIX, KUBE_NODE_ENV, NODE_RANK_ENV, PROBE_PREFIX
from placement_core.observe.verify import Binding, BindingReport, ProcessCheck
from placement_core.plan import Plan, ProcessPlan

#: RLinf's Ray namespace: its worker actors live there.
RLINF_NAMESPACE = "RLinf"
#: Placement variables the launcher of the framework decides itself, so not compared: the rendezvous
#: address (rank 0's node IP), and Ray's flag, which RLinf sets only where it sets CUDA_VISIBLE_DEVICES.
NOT_COMPARED = frozenset({"MASTER_ADDR", "RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES"})

_WORKER_NAME = re.compile(r"^(?P<group>.+):(?P<rank>\d+)$")


@dataclass(frozen=True, slots=True)
class ProbeRecord:
    """What one process printed about itself (`rlplace-probe:`)."""

    group: str
    rank: int
    env: Mapping[str, str]
    uuids: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class ActorRecord:
    """One named actor as Ray's State API showed it (`rlplace-actors:`)."""

    group: str
    rank: int
    node_rank: int | None
    """The rlplace node-rank label of its Ray node (None: a node without one, i.e. the head)."""
    cuda_visible_devices: str | None
    """What its runtime_env sets (None: not set)."""


@dataclass(frozen=True)
class Observed:
    """Everything the driver's log showed of the job's processes, by (group, rank); the latest of each."""

    probes: Mapping[tuple[str, int], ProbeRecord] = field(default_factory=dict)
    actors: Mapping[tuple[str, int], ActorRecord] = field(default_factory=dict)

    @property
    def empty(self) -> bool:
        return not self.probes and not self.actors


def worker_name(name: str) -> tuple[str, int] | None:
    """(group, rank) of a worker actor's name `<group>:<rank>`; None for any other name."""
    match = _WORKER_NAME.match(name)
    return (match.group("group"), int(match.group("rank"))) if match else None


def json_after(line: str, prefix: str) -> object | None:
    """The JSON value after `prefix` in `line`; text after it is ignored: Ray writes its `:actor_name:<class>`
    marker to a worker's stdout, and when the worker's own line was not ended yet the two share one log line
    (seen with veRL-style workers: the record was dropped, and the job failed its binding check for a process it
    had)."""
    start = line.find(prefix)
    if start < 0:
        return None
    try:
        value, _ = json.JSONDecoder().raw_decode(line[start + len(prefix) :].lstrip())
    except ValueError:
        return None  # a line cut short by the log limit
    return value


def probe_lines(log: str) -> Iterator[tuple[dict | None, list[dict]]]:
    """Each probe line of a driver's log, parsed: (a process's own record, None) for `rlplace-probe:`, (None,
    the State API's actor entries) for `rlplace-actors:`. Ray prefixes forwarded worker lines with
    `(pid=...)`, so the prefix is found anywhere in the line; a line cut short or not JSON is skipped."""
    for line in log.splitlines():
        if PROBE_PREFIX in line:
            raw = json_after(line, PROBE_PREFIX)
            if isinstance(raw, dict):
                yield raw, []
        elif ACTORS_PREFIX in line:
            raw = json_after(line, ACTORS_PREFIX)
            if isinstance(raw, list):
                yield None, [entry for entry in raw if isinstance(entry, dict)]


def observed_in(log: str, namespace: str = RLINF_NAMESPACE) -> Observed:
    """The probe records and State API views in a driver's log (probe_lines)."""
    probes: dict[tuple[str, int], ProbeRecord] = {}
    actors: dict[tuple[str, int], ActorRecord] = {}
    for record, entries in probe_lines(log):
        probe = None if record is None else _probe(record)
        if probe is not None:
            probes[(probe.group, probe.rank)] = probe
        for entry in entries:
            actor = _actor(entry, namespace)
            if actor is not None:
                actors[(actor.group, actor.rank)] = actor
    return Observed(probes, actors)


def _probe(raw: dict) -> ProbeRecord | None:
    env = raw.get("env")
    if not isinstance(env, dict):
        return None
    named = worker_name(str(env.get("WORKER_NAME", "")))
    if named is None:
        return None
    uuids = raw.get("uuids")
    return ProbeRecord(
        named[0],
        named[1],
        {str(k): str(v) for k, v in env.items()},
        tuple(str(u) for u in uuids) if isinstance(uuids, list) else None,
    )


def _actor(raw: dict, namespace: str) -> ActorRecord | None:
    named = worker_name(str(raw.get("name", "")))
    if named is None or raw.get("namespace") != namespace:
        return None
    node_rank = raw.get("node_rank")
    devices = raw.get("cuda_visible_devices")
    return ActorRecord(
        named[0],
        named[1],
        node_rank if isinstance(node_rank, int) else None,
        None if devices is None else str(devices),
    )


def _spelled(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def component_of(group: str, components: Iterable[str], groups: Mapping[str, str] | None = None) -> str | None:
    """The component a framework's worker group belongs to (see the module's rule), or None."""
    if groups and group in groups:
        return groups[group]
    spelled = _spelled(group)
    bare = spelled.removesuffix("group")
    return next((c for c in components if _spelled(c) in (spelled, bare)), None)


def framework_report(
    plan: Plan, observed: Observed, *, final: bool = False, groups: Mapping[str, str] | None = None
) -> BindingReport | None:
    """The binding report of a framework job, or None while it cannot be told yet (some planned process not
    seen in both views, and nothing seen differs from the plan). With `final`, a process not seen is a
    problem."""
    names = plan.names
    by_component: dict[str, dict[int, tuple[ProbeRecord | None, ActorRecord | None]]] = {}
    for key in {*observed.probes, *observed.actors}:
        component = component_of(key[0], names, groups)
        if component is not None:
            by_component.setdefault(component, {})[key[1]] = (observed.probes.get(key), observed.actors.get(key))
    pairs: list[tuple[ProcessCheck, ProcessPlan]] = []
    extra: list[ProcessCheck] = []
    complete = True
    for component_plan, process in plan.processes():
        of_component = by_component.get(component_plan.name, {})
        probe, actor = of_component.pop(process.rank, (None, None))
        complete = complete and probe is not None and actor is not None
        binding = Binding(component_plan.name, process, component_plan.world_size, "")
        problems = _problems(binding, probe, actor, final)
        # Verified needs both views; one not shown yet is no mismatch (unless what is shown already differs).
        seen = bool(problems) or final or (probe is not None and actor is not None)
        if not seen:
            problems = ("not seen in both views yet",)
        uuids = None if probe is None else probe.uuids
        source = None if uuids is None else "nvml"
        check = ProcessCheck(component_plan.name, process.rank, process.node_name, problems, uuids, source, seen)
        pairs.append((check, process))
    for component, left in by_component.items():
        planned = plan.component(component).world_size
        for rank in sorted(left):
            node = _node_seen(*left[rank])
            extra.append(
                ProcessCheck(component, rank, node, (f"not in the plan ({component} has {planned} processes planned)",))
            )
    report = BindingReport.of(pairs)
    report = BindingReport((*report.checks, *extra), report.components)
    mismatch = any(not check.ok and check.seen for check in report.checks)
    if not complete and not final and not mismatch:
        return None
    return report


def _node_seen(probe: ProbeRecord | None, actor: ActorRecord | None) -> str:
    if probe is not None:
        return probe.env.get(KUBE_NODE_ENV, "")
    return "" if actor is None or actor.node_rank is None else f"node rank {actor.node_rank}"


def _problems(binding: Binding, probe: ProbeRecord | None, actor: ActorRecord | None, final: bool) -> tuple[str, ...]:
    process = binding.process
    expected = {k: v for k, v in binding.expected_env().items() if k not in NOT_COMPARED}
    # The GPUs first: of the variables that differ, the one a reader acts on.
    expected = {"CUDA_VISIBLE_DEVICES": expected.pop("CUDA_VISIBLE_DEVICES"), **expected}
    problems: list[str] = []
    if probe is None:
        if final:
            problems.append("no probe record from the process (it did not start, or not as a worker of the framework)")
    else:
        problems += [
            f"{key}={probe.env.get(key, '')!r}, planned {value!r}"
            for key, value in expected.items()
            if probe.env.get(key, "") != value
        ]
        pod_rank = probe.env.get(NODE_RANK_ENV)
        if pod_rank is not None and pod_rank != str(process.node_rank):
            problems.append(f"runs in the pod of node rank {pod_rank}, planned {process.node_rank}")
        kube_node = probe.env.get(KUBE_NODE_ENV)
        if kube_node and kube_node != process.node_name:
            problems.append(f"runs on Kubernetes node '{kube_node}', planned '{process.node_name}'")
        planned_gpus = len(process.placement.visible_accelerators)
        if probe.uuids is not None and len(probe.uuids) != planned_gpus:
            problems.append(f"nvml shows {len(probe.uuids)} GPUs, planned {planned_gpus}")
    if actor is None:
        if final:
            problems.append("no live Ray actor of it in Ray's State API")
    else:
        if actor.node_rank != process.node_rank:
            where = "the head" if actor.node_rank is None else f"the Ray node of node rank {actor.node_rank}"
            problems.append(f"Ray's State API shows it on {where}, planned node rank {process.node_rank}")
        seen = actor.cuda_visible_devices or ""
        if seen != expected["CUDA_VISIBLE_DEVICES"]:
            problems.append(
                f"Ray's State API shows CUDA_VISIBLE_DEVICES={seen!r}, planned {expected['CUDA_VISIBLE_DEVICES']!r}"
            )
    return tuple(problems)

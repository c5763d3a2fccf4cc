"""Binding verification: every launched process checks, as it starts, that it runs where its plan entry says.

A process checks three things from inside:
- its environment holds exactly the placement's variables (RANK, WORLD_SIZE, NODE_RANK, CLUSTER_NODE_RANK,
  CUDA_VISIBLE_DEVICES, LOCAL_HARDWARE_RANKS, ...), recomputed from the typed Placement rather than copied from
  the plan's `env` (so a wrong value that reached the process through the plan or the pod is caught);
- it runs on the planned node: the Ray node's rlplace node-rank label, and in Kubernetes the pod's node
  (the operator sets $RLPLACE_KUBE_NODE from the downward API);
- where NVML (pynvml) or torch is importable, the GPUs it sees are as many as planned, and their UUIDs;
- when the launcher set the environment inside the process (LaunchOptions.env_via="constructor", the default),
  that CUDA had not been loaded in the process before: the CUDA driver reads CUDA_VISIBLE_DEVICES once, when
  it initialises, so a process that loaded it earlier would use the GPUs of the variable's old value while its
  environment shows the planned one (`cuda_loaded_before`).

The driver then gathers every process's check (`BindingReport.of`) and adds what no single process can see:
two processes on one node whose planned GPUs are disjoint must never see the same device UUID. The report is
typed, has one JSON form (`to_json`/`from_json`) and names the first bad rank.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from placement_core.contract import (
    BINDING_REPORT_PREFIX,
    HOST_GPUS_ENV,
    KUBE_NODE_ENV,
    REPLACED_PREFIX,
    RESIZED_PREFIX,
    container_ordinals,
    dra_devices_seen,
)
from placement_core.errors import LaunchError
from placement_core.placement import placement_env
from placement_core.plan import ProcessPlan


@dataclass(frozen=True, slots=True)
class Binding:
    """What the launcher hands each actor: its plan entry and the values only the launch decides."""

    component: str
    process: ProcessPlan
    world_size: int
    master_addr: str
    """MASTER_ADDR as launched (the Ray address of rank 0's node, not the plan's node name)."""
    pod_gpus: tuple[int, ...] | None = None
    """The plan's GPUs the process's pod was given exactly (a DRA claim; contract.POD_GPUS_KEY), None when the
    pod has all of its node's GPUs."""

    def expected_env(self) -> dict[str, str]:
        """The placement's variables, derived from the typed Placement (never from the plan's env dict); in a pod
        given exactly its GPUs the GPU numbers are container ordinals (contract.container_ordinals)."""
        return in_pod(placement_env(self.process.placement, self.world_size, self.master_addr), self.pod_gpus)


#: The variables that name GPUs by number (the plan's, or container ordinals in a pod given exactly its GPUs).
GPU_NUMBER_VARIABLES = ("CUDA_VISIBLE_DEVICES", "VISIBLE_DEVICES")


def in_pod(env: Mapping[str, str], pod_gpus: tuple[int, ...] | None) -> dict[str, str]:
    """`env` with its GPU numbers as the pod's container sees them."""
    if pod_gpus is None:
        return dict(env)
    return {
        key: container_ordinals(value.split(","), pod_gpus) if key in GPU_NUMBER_VARIABLES and value else value
        for key, value in env.items()
    }


@dataclass(frozen=True, slots=True)
class Devices:
    """The GPUs a process sees, as a GPU library reports them."""

    source: str
    """`nvml` or `torch`."""
    uuids: tuple[str, ...]
    """One UUID per visible device, in CUDA order."""
    problems: tuple[str, ...] = ()
    """Entries of CUDA_VISIBLE_DEVICES that name no device of the container."""


@dataclass(frozen=True, slots=True)
class ProcessCheck:
    """One process's verdict on its own binding."""

    component: str
    rank: int
    node_name: str
    problems: tuple[str, ...]
    """Empty when the process runs exactly as planned."""
    device_uuids: tuple[str, ...] | None = None
    """What a GPU library showed the process; None when neither NVML nor torch is importable."""
    device_source: str | None = None
    seen: bool = True
    """False for a process a framework job's check has not seen yet (observe/processes.py): not verified, but
    not the mismatch to name either."""
    gpu_ids: tuple[str, ...] | None = None
    """The GPU ids Ray gave the process, where Ray chose them (observe/pools.py); None otherwise."""
    host_gpus: tuple[int, ...] | None = None
    """In a pod given exactly its GPUs: the host GPU numbers of the process's own GPUs (its ordinals through the
    pod's host set), None otherwise."""
    pod_host_gpus: tuple[int, ...] | None = None
    """... and the host GPUs its container was given, as the DRA driver announced them inside it."""
    claims: tuple[str, ...] = ()
    """The UIDs of the ResourceClaims the driver named for those GPUs."""
    pid: int | None = None
    """The process's PID on its node (in its pod), where it checked itself: what `kubectl rlplace logs` finds
    its log by."""

    @property
    def ok(self) -> bool:
        return not self.problems

    def describe(self) -> str:
        """One line: component, rank, node, and the first problem."""
        return f"component '{self.component}' rank {self.rank} on node '{self.node_name}': {self.problems[0]}"


def check_binding(
    binding: Binding,
    environ: Mapping[str, str],
    ray_node_rank: int | None,
    devices: Devices | None,
    cuda_early: str | None = None,
) -> ProcessCheck:
    """Compare what a process sees with its plan entry (pure, so each rule is tested without Ray or a GPU).

    `ray_node_rank` is the rlplace node-rank label of the Ray node the process runs on (None: unknown);
    `devices` what a GPU library reports (None: no library); `cuda_early` the problem `cuda_loaded_before`
    found when the environment was set in the process (None: none, or set when the process started).
    """
    process = binding.process
    problems = [
        f"{key}={_quote(environ.get(key))}, planned {_quote(value)}"
        for key, value in binding.expected_env().items()
        if environ.get(key) != value
    ]
    if cuda_early is not None:
        problems.append(cuda_early)
    if ray_node_rank is not None and ray_node_rank != process.node_rank:
        problems.append(f"runs on the Ray node of node rank {ray_node_rank}, planned {process.node_rank}")
    kube_node = environ.get(KUBE_NODE_ENV)
    if kube_node and kube_node != process.node_name:
        problems.append(f"runs on Kubernetes node '{kube_node}', planned '{process.node_name}'")
    if devices is not None:
        problems.extend(devices.problems)
        planned = len(process.placement.visible_accelerators)
        if len(devices.uuids) != planned:
            problems.append(f"{devices.source} shows {len(devices.uuids)} GPUs, planned {planned}")
    host_gpus, pod_host_gpus, claims = None, None, ()
    if binding.pod_gpus is not None:
        host_gpus, pod_host_gpus, claims = _claimed_gpus(binding, environ, problems)
    return ProcessCheck(
        binding.component,
        process.rank,
        process.node_name,
        tuple(problems),
        None if devices is None else devices.uuids,
        None if devices is None else devices.source,
        host_gpus=host_gpus,
        pod_host_gpus=pod_host_gpus,
        claims=claims,
    )


def _claimed_gpus(
    binding: Binding, environ: Mapping[str, str], problems: list[str]
) -> tuple[tuple[int, ...] | None, tuple[int, ...] | None, tuple[str, ...]]:
    """In a pod given exactly its GPUs: the host GPUs of the process (its ordinals through the pod's pinned host
    set, $RLPLACE_HOST_GPUS), the host GPUs the DRA driver announced in the container, and the claims it named.
    What the driver announced must be the pinned set; a driver that announces nothing (NVIDIA's, which hands
    device nodes instead) leaves the device check to NVML."""
    pinned_text = environ.get(HOST_GPUS_ENV, "")
    pinned = tuple(int(g) for g in pinned_text.split(",") if g.isdigit())
    assert binding.pod_gpus is not None
    if len(pinned) != len(binding.pod_gpus):
        problems.append(f"{HOST_GPUS_ENV}={pinned_text!r}, planned {len(binding.pod_gpus)} GPUs for the pod")
        return None, None, ()
    host = dict(zip(sorted(binding.pod_gpus), pinned, strict=True))
    mine = tuple(host[g] for g in sorted(binding.process.held_gpus) if g in host)
    seen, claims = dra_devices_seen(environ)
    if seen and seen != tuple(sorted(pinned)):
        problems.append(
            f"the container was given host GPUs {_gpus(frozenset(seen))}, its claim pins {_gpus(frozenset(pinned))}"
        )
    return mine, seen or None, claims


def _quote(value: str | None) -> str:
    return "unset" if value is None else f"'{value}'"


# -- inside the process: what a GPU library shows ---------------------------------------------------------


def probe_devices(visible: str | None) -> Devices | None:
    """The devices `CUDA_VISIBLE_DEVICES=visible` selects, through NVML if importable, else torch; None when
    neither is. NVML lists every GPU of the container whatever CUDA_VISIBLE_DEVICES says, so each entry (an
    index or a UUID) is looked up in that list; torch applies the variable itself.
    """
    if importlib.util.find_spec("pynvml") is not None:
        return _nvml_devices(visible)
    if importlib.util.find_spec("torch") is not None:
        return _torch_devices()
    return None


def _nvml_devices(visible: str | None) -> Devices | None:
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return None  # the library without a driver (a CPU node): nothing to check
    try:
        handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        all_uuids = [_text(pynvml.nvmlDeviceGetUUID(handle)) for handle in handles]
    finally:
        pynvml.nvmlShutdown()
    return select_devices("nvml", all_uuids, visible)


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def select_devices(source: str, all_uuids: list[str], visible: str | None) -> Devices:
    """CUDA's reading of CUDA_VISIBLE_DEVICES over a container's devices: unset means all, entries are indices
    or UUID prefixes; an entry naming no device is a problem (CUDA would stop there)."""
    if visible is None:
        return Devices(source, tuple(all_uuids))
    chosen: list[str] = []
    problems: list[str] = []
    for entry in (e.strip() for e in visible.split(",")):
        if not entry:
            continue
        if entry.isdigit():
            match = all_uuids[int(entry)] if int(entry) < len(all_uuids) else None
        else:
            match = next((u for u in all_uuids if u.startswith(entry)), None)
        if match is None:
            problems.append(
                f"CUDA_VISIBLE_DEVICES entry '{entry}' names no GPU of the container ({source} lists {len(all_uuids)})"
            )
            break
        chosen.append(match)
    return Devices(source, tuple(chosen), tuple(problems))


def _torch_devices() -> Devices | None:
    import torch

    if not torch.cuda.is_available():
        return None
    count = torch.cuda.device_count()
    return Devices("torch", tuple(f"GPU-{torch.cuda.get_device_properties(i).uuid}" for i in range(count)))


#: The CUDA driver library; CUDA reads CUDA_VISIBLE_DEVICES when it initialises, which needs this loaded.
CUDA_DRIVER_LIBRARY = "libcuda.so"


def libcuda_mapped(maps: str) -> bool:
    """Whether a process's memory map (the text of /proc/PID/maps) holds the CUDA driver library."""
    return any(line.rstrip().rsplit("/", 1)[-1].startswith(CUDA_DRIVER_LIBRARY) for line in maps.splitlines())


def cuda_loaded_before(planned: Mapping[str, str]) -> str | None:
    """Called just before the launcher sets `planned` in the current process: the problem to report when CUDA
    may already have read another CUDA_VISIBLE_DEVICES, i.e. the CUDA driver library is already loaded in the
    process (by code that ran in it earlier) and the variable's value differs from the planned one; else None.

    The driver library is loaded by CUDA's initialisation (cuInit, which any runtime call makes, such as torch's
    first `torch.cuda.*` call); importing torch or another CUDA library does not load it. Read from
    /proc/self/maps, so on a system without it (not Linux) this finds nothing; nor does it see CUDA in another
    process.
    """
    try:
        maps = Path("/proc/self/maps").read_text(errors="replace")
    except OSError:
        return None
    before = os.environ.get("CUDA_VISIBLE_DEVICES")
    if not libcuda_mapped(maps) or before == planned.get("CUDA_VISIBLE_DEVICES"):
        return None
    return (
        f"CUDA was loaded in this process before its planned environment was set (CUDA_VISIBLE_DEVICES was "
        f"{_quote(before)} then), so it may use other GPUs than planned (launch with env_via='runtime_env')"
    )


def check_here(binding: Binding, cuda_early: str | None = None) -> ProcessCheck:
    """Check the calling process (inside a Ray actor): its environment, Ray node label and devices, with the
    early-CUDA problem `cuda_loaded_before` found when the launcher set the environment."""
    import ray

    from placement_core.contract import NODE_LABEL

    label = ray.get_runtime_context().get_node_labels().get(NODE_LABEL)
    ray_node_rank = int(label) if label is not None and label.isdigit() else None
    devices = probe_devices(os.environ.get("CUDA_VISIBLE_DEVICES"))
    return replace(check_binding(binding, os.environ, ray_node_rank, devices, cuda_early), pid=os.getpid())


# -- at the driver: every process together ----------------------------------------------------------------


@dataclass(frozen=True)
class BindingReport:
    """Every launched process's check, component by component in rank order, cross-checked for shared GPUs."""

    checks: tuple[ProcessCheck, ...]
    components: tuple[str, ...] = field(default=())
    """Components in launch order (the keys of `verified`)."""
    enforced: bool = True
    """False where the GPU ids were Ray's choice, observed and not set by the plan (observe/pools.py):
    the summary says so."""

    @classmethod
    def of(cls, checks: Iterable[tuple[ProcessCheck, ProcessPlan]], enforced: bool = True) -> BindingReport:
        """The report over (check, plan entry) pairs, with the device-UUID cross-check added."""
        pairs = list(checks)
        shared = _shared_uuid_problems(pairs)
        merged = tuple(replace(c, problems=c.problems + shared.get((c.component, c.rank), ())) for c, _ in pairs)
        return cls(merged, tuple(dict.fromkeys(c.component for c in merged)), enforced)

    @property
    def ok(self) -> bool:
        return all(check.ok for check in self.checks)

    def verified(self) -> dict[str, int]:
        """Per component: how many processes passed."""
        counts = dict.fromkeys(self.components, 0)
        for check in self.checks:
            counts[check.component] += check.ok
        return counts

    def totals(self) -> dict[str, int]:
        counts = dict.fromkeys(self.components, 0)
        for check in self.checks:
            counts[check.component] += 1
        return counts

    def first_failure(self) -> ProcessCheck | None:
        """The first process that failed its check, preferring one that was seen to one not seen yet."""
        failed = [check for check in self.checks if not check.ok]
        return next((check for check in failed if check.seen), failed[0] if failed else None)

    def summary(self) -> str:
        """One line: per component verified/total, and the first bad rank."""
        totals = self.totals()
        counts = ", ".join(f"{name} {n}/{totals[name]}" for name, n in self.verified().items())
        bad = self.first_failure()
        verb = "verified" if self.enforced else "observed (GPU ids Ray's, not enforced)"
        return f"{verb} {counts}" + ("" if bad is None else f"; {bad.describe()}")

    def to_json(self) -> str:
        return json.dumps(
            {
                "components": list(self.components),
                "checks": [
                    {
                        "component": c.component,
                        "rank": c.rank,
                        "node_name": c.node_name,
                        "problems": list(c.problems),
                        "device_uuids": None if c.device_uuids is None else list(c.device_uuids),
                        "device_source": c.device_source,
                        **({} if c.pid is None else {"pid": c.pid}),
                        **(
                            {}
                            if c.host_gpus is None
                            else {
                                "host_gpus": list(c.host_gpus),
                                "pod_host_gpus": None if c.pod_host_gpus is None else list(c.pod_host_gpus),
                                "claims": list(c.claims),
                            }
                        ),
                    }
                    for c in self.checks
                ],
            },
            separators=(",", ":"),
        )

    @classmethod
    def from_json(cls, text: str) -> BindingReport:
        """The report back from `to_json`; anything else is a one-line ValueError."""
        try:
            raw = json.loads(text)
            checks = tuple(_check_from_dict(entry) for entry in raw["checks"])
            components = tuple(str(name) for name in raw["components"])
        except (json.JSONDecodeError, KeyError, TypeError, ValueError) as err:
            raise ValueError(f"not a binding report: {type(err).__name__}: {err}") from None
        unknown = {c.component for c in checks} - set(components)
        if unknown:
            raise ValueError(f"not a binding report: checks of unlisted components {sorted(unknown)}")
        return cls(checks, components)


def _check_from_dict(raw: Any) -> ProcessCheck:
    uuids = raw["device_uuids"]
    source = raw["device_source"]
    if not isinstance(raw["rank"], int) or not all(isinstance(p, str) for p in raw["problems"]):
        raise ValueError(f"bad check {raw!r:.80}")
    host = raw.get("host_gpus")
    pod_host = raw.get("pod_host_gpus")
    return ProcessCheck(
        str(raw["component"]),
        raw["rank"],
        str(raw["node_name"]),
        tuple(raw["problems"]),
        None if uuids is None else tuple(str(u) for u in uuids),
        None if source is None else str(source),
        host_gpus=None if host is None else tuple(int(g) for g in host),
        pod_host_gpus=None if pod_host is None else tuple(int(g) for g in pod_host),
        claims=tuple(str(c) for c in raw.get("claims") or ()),
        pid=int(raw["pid"]) if isinstance(raw.get("pid"), int) else None,
    )


def _shared_uuid_problems(pairs: list[tuple[ProcessCheck, ProcessPlan]]) -> dict[tuple[str, int], tuple[str, ...]]:
    """Processes on one node that see the same device UUID although their planned GPUs are disjoint: the
    later one (in launch order) gets the problem, naming the earlier."""
    seen: dict[tuple[str, str], list[tuple[ProcessCheck, frozenset[int]]]] = {}
    problems: dict[tuple[str, int], list[str]] = {}
    for check, process in pairs:
        planned = frozenset(process.held_gpus)
        if not planned or not check.device_uuids:
            continue
        for uuid in check.device_uuids:
            earlier = seen.setdefault((check.node_name, uuid), [])
            for other, other_planned in earlier:
                if not planned & other_planned:
                    problems.setdefault((check.component, check.rank), []).append(
                        f"sees GPU {uuid}, which component '{other.component}' rank {other.rank} also sees "
                        f"(planned GPUs {_gpus(planned)} and {_gpus(other_planned)} are disjoint)"
                    )
                    break
            earlier.append((check, planned))
    return {key: tuple(value) for key, value in problems.items()}


def _gpus(gpus: frozenset[int]) -> str:
    return ",".join(map(str, sorted(gpus)))


def report_line(report: BindingReport) -> str:
    """The log line a driver prints so the operator can read the report from the driver's log."""
    return BINDING_REPORT_PREFIX + report.to_json()


def replaced_line(component: str, rank: int) -> str:
    """The line a driver prints once it started a lost rank again (before its new binding report)."""
    return REPLACED_PREFIX + json.dumps({"component": component, "rank": rank}, separators=(",", ":"))


def resized_line(component: str, previous: int, replicas: int) -> str:
    """The line a driver prints when it applies a change of the component's replicas (contract.RESIZED_PREFIX)."""
    said = {"component": component, "previous": previous, "replicas": replicas}
    return RESIZED_PREFIX + json.dumps(said, separators=(",", ":"))


def _said(line: str, prefix: str) -> dict | None:
    """The JSON object after `prefix` on the line, or None (no prefix, or a line cut short by the log limit)."""
    start = line.find(prefix)
    if start < 0:
        return None
    try:
        said = json.loads(line[start + len(prefix) :])
    except ValueError:
        return None
    return said if isinstance(said, dict) else None


def find_report_after(log: str, replaced: Mapping[str, Collection[int]]) -> BindingReport | None:
    """The first binding report that covers every one of the `replaced` ranks (component -> ranks) printed after
    the driver started each of them (`replaced_line`; a rank its component's last resize kept counts as started
    at that resize, `resized_line`, and a rank's start before that resize does not count: the resize may have
    stopped it), or None while there is none: the report that verifies them."""
    lines = log.splitlines()
    resized: dict[str, tuple[int, int]] = {}  # component -> (its last resize line, the ranks it kept)
    for index, line in enumerate(lines):
        said = _said(line, RESIZED_PREFIX)
        try:
            if said is not None:
                resized[str(said["component"])] = (index, min(int(said["previous"]), int(said["replicas"])))
        except (KeyError, TypeError, ValueError):
            continue
    wanted = {(component, rank) for component, ranks in replaced.items() for rank in ranks}
    started = {(c, r): resized[c][0] for c, r in wanted if c in resized and r < resized[c][1]}
    for index, line in enumerate(lines):
        said = _said(line, REPLACED_PREFIX)
        try:
            key = (str(said["component"]), int(said["rank"])) if said is not None else None
        except (KeyError, TypeError, ValueError):
            continue
        if key in wanted and index > resized.get(key[0], (-1, 0))[0]:
            started[key] = index
    if set(started) != wanted:
        return None
    for line in lines[max(started.values(), default=-1) + 1 :]:
        start = line.find(BINDING_REPORT_PREFIX)
        if start < 0:
            continue
        try:
            report = BindingReport.from_json(line[start + len(BINDING_REPORT_PREFIX) :])
        except ValueError:
            continue
        if wanted <= {(check.component, check.rank) for check in report.checks}:
            return report
    return None


def find_report(log: str) -> BindingReport | None:
    """The last binding report printed in a driver's log (a retried driver prints a new one), or None."""
    for line in reversed(log.splitlines()):
        start = line.find(BINDING_REPORT_PREFIX)
        if start < 0:
            continue
        try:
            return BindingReport.from_json(line[start + len(BINDING_REPORT_PREFIX) :])
        except ValueError:
            continue  # a line cut short by the log limit, or something else that only looks like a report
    return None


class BindingError(LaunchError):
    """A launched process does not run as planned; `report` holds every process's check."""

    def __init__(self, report: BindingReport) -> None:
        bad = report.first_failure()
        assert bad is not None, "a BindingError needs a failed check"
        super().__init__(f"binding check failed: {bad.describe()} ({report.summary().split(';')[0]})")
        self.report = report
        self.component = bad.component
        self.rank = bad.rank

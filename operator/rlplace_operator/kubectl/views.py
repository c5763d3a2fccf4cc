"""What `kubectl rlplace` prints, computed from an RLJob's status and plan alone (no API calls: the commands in
`kubectl/__init__.py` fetch, these decide what a person reads)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from placement_core.picture import plan_grid, plan_rows
from placement_core.plan import Plan
from rlplace_operator.api.conditions import BINDING_VERIFIED
from rlplace_operator.api.status import RLJobStatus


def job_heading(namespace: str, name: str, status: RLJobStatus) -> str:
    """`RLJob ns/name: Running, attempt 2, iteration 31 (2.41 s, bottleneck rollout)`, then its message."""
    parts = [status.phase.value if status.phase else "not yet seen by the operator"]
    if status.attempts:
        parts.append(f"attempt {status.attempts}")
    if status.progress is not None:
        step = f"iteration {status.progress.iteration} ({status.progress.iteration_seconds:.2f} s"
        bottleneck = f", bottleneck {status.progress.bottleneck}" if status.progress.bottleneck else ""
        parts.append(f"{step}{bottleneck})")
    line = f"RLJob {namespace}/{name}: {', '.join(parts)}"
    return f"{line}\n{status.message}" if status.message else line


def binding_lines(status: RLJobStatus, plan: Plan) -> list[str]:
    """Where each process was verified: per component the processes that checked their own binding from inside
    their pods and found it as planned, and the nodes the plan put them on (named up to three, else counted);
    then the BindingVerified condition when it is not True (a mismatch, or not checked yet)."""
    lines = []
    if status.binding:
        nodes = {c.name: list(dict.fromkeys(p.node_name for p in c.processes)) for c in plan.components}
        verified = []
        for binding in status.binding:
            where = nodes.get(binding.name, [])
            place = ", ".join(where) if len(where) <= 3 else f"{len(where):,} nodes"
            verified.append(
                f"{binding.name} {binding.verified}/{binding.processes}" + (f" on {place}" if where else "")
            )
        lines.append(f"verified from inside the pods: {'; '.join(verified)}")
    condition = next((c for c in status.conditions if c.type == BINDING_VERIFIED), None)
    if condition is None:
        lines.append("binding: not checked yet")
    elif condition.status != "True":
        lines.append(f"binding: {condition.reason}: {condition.message}".rstrip(": "))
    return lines


def get_text(namespace: str, name: str, status: RLJobStatus, plan: Plan | None) -> str:
    """`kubectl rlplace get`: the heading, the plan's node x GPU grid (folded rows) and the binding check."""
    lines = [job_heading(namespace, name, status)]
    if plan is None:
        lines.append("no plan yet: the job is not placed")
    else:
        lines.append(plan_grid(plan, plan_rows(plan)).rstrip("\n"))
        lines.extend(binding_lines(status, plan))
    return "\n".join(lines) + "\n"


@dataclass(frozen=True, slots=True)
class TopRow:
    """One job in `kubectl rlplace top`."""

    namespace: str
    name: str
    phase: str
    iteration: int | None
    step_seconds: float | None
    bottleneck: str | None
    gpu_idle_share: float | None


def gpu_idle_share(status: RLJobStatus) -> float | None:
    """The share of the GPU-seconds a job holds per iteration that its components leave idle: 1 - sum over its GPU
    components of (GPUs x seconds busy) / (GPUs x the iteration's seconds). Collocated components take turns on
    the same GPUs, each busy for its own time, so the sum holds for them too. None before a reported iteration."""
    progress, placement = status.progress, status.placement
    if progress is None or placement is None or progress.iteration_seconds <= 0:
        return None
    busy = {c.name: c.seconds for c in progress.components}
    gpus = {c.name: c.gpus for c in placement.components if c.gpus and c.name in busy}
    held = sum(gpus.values()) * progress.iteration_seconds
    if not held:
        return None
    used = sum(count * min(busy[name], progress.iteration_seconds) for name, count in gpus.items())
    return max(0.0, 1.0 - used / held)


def top_row(namespace: str, name: str, status: RLJobStatus) -> TopRow:
    progress = status.progress
    return TopRow(
        namespace=namespace,
        name=name,
        phase=status.phase.value if status.phase else "-",
        iteration=progress.iteration if progress else None,
        step_seconds=progress.iteration_seconds if progress else None,
        bottleneck=progress.bottleneck if progress else None,
        gpu_idle_share=gpu_idle_share(status),
    )


def top_text(rows: Sequence[TopRow], all_namespaces: bool) -> str:
    """Columns as `kubectl top` prints them: left-aligned, two spaces apart, `-` where not known yet."""
    header = ["NAMESPACE"] if all_namespaces else []
    header += ["NAME", "PHASE", "ITERATION", "STEP", "BOTTLENECK", "GPU IDLE"]
    table = [header]
    for row in rows:
        cells = [row.namespace] if all_namespaces else []
        cells += [
            row.name,
            row.phase,
            str(row.iteration) if row.iteration is not None else "-",
            f"{row.step_seconds:.2f}s" if row.step_seconds is not None else "-",
            row.bottleneck or "-",
            f"{row.gpu_idle_share:.0%}" if row.gpu_idle_share is not None else "-",
        ]
        table.append(cells)
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    return "".join("  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)).rstrip() + "\n" for line in table)

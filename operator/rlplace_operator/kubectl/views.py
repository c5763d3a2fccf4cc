"""What `kubectl rlplace` prints, computed from an RLJob's status and plan alone (no API calls: the commands in
`kubectl/__init__.py` fetch, these decide what a person reads)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from placement_core.picture import plan_grid, plan_rows
from placement_core.plan import Plan
from rlplace_operator.api.conditions import (
    ADMITTED,
    BINDING_VERIFIED,
    PLACED,
    RAYCLUSTER_READY,
    VALIDATED,
    WAITING_FOR_KUEUE,
    Condition,
)
from rlplace_operator.api.names import JOB_LABEL
from rlplace_operator.api.status import JobPhase, RLJobStatus


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
    condition = _condition(status, BINDING_VERIFIED)
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


def _condition(status: RLJobStatus, kind: str) -> Condition | None:
    return next((c for c in status.conditions if c.type == kind), None)


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _ranks(ranks: Sequence[int]) -> str:
    return f"rank {ranks[0]}" if len(ranks) == 1 else f"ranks {', '.join(map(str, ranks))}"


def why_text(namespace: str, name: str, status: RLJobStatus) -> str:
    """`kubectl rlplace why`: the one thing that holds the job back now, in one short paragraph, and the command
    that shows more. Looked at in the order a person would: an end (success or failure), a wrong binding, a
    preemption, admission (Kueue's or rlplace's queue, a placement that cannot be made), pods that do not start,
    lost ranks waiting for a node, then a running job's bottleneck."""
    job = f"RLJob {namespace}/{name}"
    driver_log = status.driver_log or f"kubectl describe rljob -n {namespace} {name}"
    pods = f"kubectl get pods -n {namespace} -l {JOB_LABEL}={name} -o wide"
    cause, further = _why(namespace, name, status, driver_log, pods)
    return f"{job}: {cause}\nLook further: {further}\n"


def _why(namespace: str, name: str, status: RLJobStatus, driver_log: str, pods: str) -> tuple[str, str]:
    phase = status.phase
    message = status.message or ""
    if phase is None:
        return (
            "the operator has not seen it yet (is it running?).",
            "kubectl get pods -n rlplace-system; kubectl logs -n rlplace-system deploy/rlplace-operator",
        )
    if phase is JobPhase.SUCCEEDED:
        return "nothing: it succeeded.", driver_log
    if phase is JobPhase.FAILED:
        return f"it failed: {message}", driver_log
    binding = _condition(status, BINDING_VERIFIED)
    if binding is not None and binding.status == "False":
        return f"a binding mismatch: {binding.message}", f"kubectl rlplace get {name} -n {namespace}"
    kueue = status.kueue
    workload = f"kubectl describe workload -n {namespace} {kueue.workload}" if kueue else ""
    if status.preemption is not None:
        step = status.preemption.checkpoint_step
        saved = f" (its newest checkpoint: step {step})" if step is not None else ""
        said = f": {status.preemption.message}" if status.preemption.message else ""
        return (
            f"Kueue evicted it ({status.preemption.reason}{said}); rlplace asks its driver to checkpoint{saved}, "
            "then stops it and queues it again.",
            workload or driver_log,
        )
    admitted = _condition(status, ADMITTED)
    if phase is JobPhase.SUSPENDED:
        return (
            f"it is suspended: {message or 'spec.suspend is true'}",
            f"kubectl get rljob -n {namespace} {name} -o yaml",
        )
    if phase in (JobPhase.PENDING, JobPhase.QUEUED):
        if status.retry_after is not None and status.queue_position is None:
            # It gave its nodes back after a failure that may pass: what failed is the message, not the queue.
            return (
                f"it gave its nodes back and is retried at {status.retry_after}: {message}",
                f"kubectl describe rljob -n {namespace} {name}; {pods}",
            )
        if admitted is not None and admitted.reason == WAITING_FOR_KUEUE:
            queue = f"; kubectl get clusterqueue {kueue.cluster_queue}" if kueue and kueue.cluster_queue else ""
            return f"Kueue has not admitted it: {status.waiting_for or admitted.message}", f"{workload}{queue}"
        if status.queue_position is not None:
            waits = f" and waits for {status.waiting_for}" if status.waiting_for else ""
            return (
                f"it is {_ordinal(status.queue_position)} in rlplace's queue{waits}.",
                "kubectl get rljobs -A (the QUEUE and WAITING FOR columns); kubectl get nodegroups",
            )
        for kind in (VALIDATED, PLACED):
            condition = _condition(status, kind)
            if condition is not None and condition.status == "False":
                return (
                    f"{condition.reason}: {condition.message}",
                    f"kubectl get nodegroups; kubectl describe rljob -n {namespace} {name}",
                )
        return message or "it waits to be placed.", f"kubectl describe rljob -n {namespace} {name}"
    lost = [c for c in status.components if c.lost]
    if lost:
        component = lost[0]
        where = "; ".join(f"{_ranks(r.ranks)} lost on {r.node} since {r.since} ({r.why})" for r in component.lost or [])
        waiting = "its ranks wait for a replacement node" if not component.starting else "its ranks are starting again"
        return (
            f"{component.name} runs {component.live} of {component.desired} ranks: {where}; {waiting} while the "
            "others go on.",
            f"{pods}; kubectl get nodes",
        )
    ready = _condition(status, RAYCLUSTER_READY)
    if phase is JobPhase.PROVISIONING or (ready is not None and ready.status == "False"):
        said = ready.message if ready is not None and ready.status == "False" and ready.message else message
        return f"its pods are not all running yet: {said}", f"{pods}; kubectl describe pod -n {namespace} POD"
    progress = status.progress
    if progress is None:
        return f"it runs, and its driver has not reported an iteration yet ({message}).", driver_log
    busy = {c.name: c.seconds for c in progress.components}
    idle = {
        name: max(0.0, 1 - seconds / progress.iteration_seconds)
        for name, seconds in busy.items()
        if progress.iteration_seconds > 0
    }
    neck = progress.bottleneck
    if neck is None or neck not in busy:
        return (
            f"nothing holds it back: iteration {progress.iteration} took {progress.iteration_seconds:.2f} s.",
            f"kubectl rlplace top -n {namespace}",
        )
    others = [n for n in busy if n != neck]
    idlest = max(others, key=idle.__getitem__) if others else None
    waiting = f"; {idlest} idles {idle[idlest]:.0%} of each iteration waiting for it" if idlest else ""
    share = gpu_idle_share(status)
    gpus = f"; the job's GPUs idle {share:.0%}" if share is not None else ""
    recommendation = status.recommendation
    better = (
        f"; a re-placement is predicted {recommendation.gain:.0%} faster ({recommendation.decision})"
        if recommendation is not None and recommendation.gain > 0
        else ""
    )
    return (
        f"{neck} is the bottleneck: {busy[neck]:.2f} s of the {progress.iteration_seconds:.2f} s iteration "
        f"{progress.iteration}{waiting}{gpus}{better}.",
        f"kubectl rlplace top -n {namespace}; kubectl get rljob -n {namespace} {name} -o jsonpath='{{.status.progress}}'",
    )

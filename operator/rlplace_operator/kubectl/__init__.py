"""`kubectl rlplace`: a kubectl plugin (the `kubectl-rlplace` executable the package installs) for people at a
terminal. `get JOB` shows the job's plan as a node x GPU grid and where its processes were verified; `why JOB`
says the one thing that holds it back; `top` lists jobs with their iteration, step time, bottleneck and GPU idle
share; `logs JOB COMPONENT RANK` prints what one process printed, read in its pod. It reads what the operator wrote
(the RLJob's status, its `<job>-placement` ConfigMap, the driver's log) with the kubeconfig kubectl uses; it
changes nothing."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, NoReturn

import typer
from kubernetes.client.exceptions import ApiException
from pydantic import ValidationError
from urllib3.exceptions import HTTPError

from placement_core.cli.common import EXIT_BAD_INPUT
from placement_core.contract import plan_from_configmap
from placement_core.errors import PlacementError
from placement_core.observe.verify import find_report
from placement_core.picture import plan_rows, plan_svg
from rlplace_operator.api.names import (
    SUBMITTER_CONTAINER,
    WORKER_CONTAINER,
    placement_configmap_name,
    worker_pods_selector,
)
from rlplace_operator.api.rljob import RLJobSpec
from rlplace_operator.api.status import RLJobStatus
from rlplace_operator.kube import Kube, KubeconfigError, api_message, kubeconfig_client
from rlplace_operator.kubectl.views import get_text, top_row, top_text, why_text
from rlplace_operator.reconcile.driver import driver_log_selector

app = typer.Typer(
    name="kubectl rlplace",
    help="See rlplace's jobs: the plan as a node x GPU grid, where each process was verified, step times, and the "
    "log of one process.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

NamespaceOpt = Annotated[
    str | None, typer.Option("--namespace", "-n", help="The job's namespace (default: the kubeconfig context's).")
]
ContextOpt = Annotated[str | None, typer.Option("--context", help="The kubeconfig context to use.")]


def fail(message: str) -> NoReturn:
    sys.stderr.write(f"error: {message}\n")
    raise typer.Exit(EXIT_BAD_INPUT)


@contextmanager
def one_line_errors() -> Iterator[None]:
    """What goes wrong talking to the cluster, as one line (never a traceback)."""
    try:
        yield
    except ApiException as err:
        fail(f"the API server refused: {api_message(err)}")
    except (HTTPError, OSError) as err:
        fail(f"cannot reach the API server: {err}")
    except KubeconfigError as err:
        fail(f"no usable kubeconfig: {err}")


def read_job(kube: Kube, namespace: str, job: str) -> dict:
    """The RLJob, or one line: not found, or a cluster that does not serve RLJobs at all."""
    body = kube.get_rljob(namespace, job)
    if body is not None:
        return body
    if not kube.rljobs_served():
        fail(
            "this cluster does not serve RLJobs: rlplace's CRDs are not installed (helm install rlplace charts/rlplace)"
        )
    fail(f"RLJob {namespace}/{job} not found")


def job_status(body: dict) -> RLJobStatus:
    try:
        return RLJobStatus.model_validate(body.get("status") or {})
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        fail(f"status.{where} of RLJob {body['metadata']['name']}: {first['msg']} (an operator of another version?)")


@app.command()
def get(
    job: Annotated[str, typer.Argument(help="The RLJob's name.")],
    namespace: NamespaceOpt = None,
    context: ContextOpt = None,
    svg: Annotated[
        str | None,
        typer.Option("--svg", metavar="FILE", help="Also write the plan's picture to FILE (as rlplace plan --svg)."),
    ] = None,
) -> None:
    """The job's plan as a node x GPU grid (identical nodes folded), and where each process was verified."""
    with one_line_errors():
        kube, current = kubeconfig_client(context)
        namespace = namespace or current
        body = read_job(kube, namespace, job)
        status = job_status(body)
        configmap = kube.get_configmap(namespace, placement_configmap_name(job))
    plan = None
    if configmap is not None:
        try:
            plan = plan_from_configmap(configmap)
        except PlacementError as err:
            fail(f"ConfigMap {namespace}/{placement_configmap_name(job)}: {err}")
    sys.stdout.write(get_text(namespace, job, status, plan))
    if svg is not None and plan is None:
        sys.stderr.write(f"no plan yet: {svg} not written\n")
    elif svg is not None and plan is not None:
        try:
            with open(svg, "w", encoding="utf-8") as out:
                out.write(plan_svg(plan, plan_rows(plan), title=f"RLJob {namespace}/{job}"))
        except OSError as err:
            fail(f"cannot write {svg}: {err.strerror or err}")
        sys.stderr.write(f"wrote {svg}\n")


@app.command()
def why(
    job: Annotated[str, typer.Argument(help="The RLJob's name.")],
    namespace: NamespaceOpt = None,
    context: ContextOpt = None,
) -> None:
    """The one thing that holds the job back now, and the command that shows more."""
    with one_line_errors():
        kube, current = kubeconfig_client(context)
        namespace = namespace or current
        body = read_job(kube, namespace, job)
    sys.stdout.write(why_text(namespace, job, job_status(body)))


@app.command()
def top(
    namespace: NamespaceOpt = None,
    all_namespaces: Annotated[bool, typer.Option("--all-namespaces", "-A", help="Jobs of every namespace.")] = False,
    context: ContextOpt = None,
) -> None:
    """Jobs with their iteration, step time, bottleneck component and GPU idle share, like `kubectl top`."""
    with one_line_errors():
        kube, current = kubeconfig_client(context)
        namespace = namespace or current
        if not kube.rljobs_served():
            fail(
                "this cluster does not serve RLJobs: rlplace's CRDs are not installed (helm install rlplace charts/rlplace)"
            )
        bodies = kube.list_rljobs(None if all_namespaces else namespace)
    rows = [top_row(b["metadata"]["namespace"], b["metadata"]["name"], job_status(b)) for b in bodies]
    if not rows:
        where = "any namespace" if all_namespaces else f"namespace {namespace}"
        sys.stderr.write(f"No RLJobs found in {where}.\n")
        return
    rows.sort(key=lambda row: (row.namespace, row.name))
    sys.stdout.write(top_text(rows, all_namespaces))


#: Where Ray writes what a worker process prints: `worker-<worker id>-<job id>-<pid>.out` (and `.err`) under the
#: session's log directory, on the node of the process (in its pod).
RAY_WORKER_LOGS = "/tmp/ray/session_latest/logs"


@app.command()
def logs(
    job: Annotated[str, typer.Argument(help="The RLJob's name.")],
    component: Annotated[str, typer.Argument(help="The component (actor, rollout, ...).")],
    rank: Annotated[int, typer.Argument(help="The process's rank in the component.")],
    namespace: NamespaceOpt = None,
    context: ContextOpt = None,
    tail: Annotated[int | None, typer.Option("--tail", help="Only the last N lines of each stream.", min=1)] = None,
) -> None:
    """The log of one process: what it printed, read in its pod on its node (found by the PID its binding report
    gave)."""
    with one_line_errors():
        kube, current = kubeconfig_client(context)
        namespace = namespace or current
        body = read_job(kube, namespace, job)
        configmap = kube.get_configmap(namespace, placement_configmap_name(job))
        if configmap is None:
            fail(f"RLJob {namespace}/{job} has no plan yet (it is not placed)")
        try:
            plan = plan_from_configmap(configmap)
            processes = plan.component(component).processes
        except PlacementError as err:
            fail(f"RLJob {namespace}/{job}: {err}")
        if not 0 <= rank < len(processes):
            fail(f"component '{component}' of {job} has ranks 0-{len(processes) - 1}, not {rank}")
        node = processes[rank].node_name
        spec = RLJobSpec.model_validate(body["spec"])
        status = job_status(body)
        selector = driver_log_selector(job, spec.run.submission_mode, status.ray_cluster)
        log = kube.container_log(namespace, selector, SUBMITTER_CONTAINER) if selector else ""
        report = find_report(log)
        check = next((c for c in report.checks if (c.component, c.rank) == (component, rank)), None) if report else None
        if check is None or check.pid is None:
            fail(
                f"{component} rank {rank} of {job} has not reported its PID (no binding report of it in the driver's "
                f"log yet): {status.driver_log or 'kubectl logs job/' + job}"
            )
        pods = kube.pods_on_node(namespace, worker_pods_selector(job), node)
        if not pods:
            fail(
                f"no running pod of {job} on {node} (the job's Ray cluster is gone once it ends): the driver's log "
                f"has what the driver printed: {status.driver_log or 'kubectl logs job/' + job}"
            )
        lines = f"tail -n {tail}" if tail else "cat"
        script = (
            f'for f in {RAY_WORKER_LOGS}/worker-*-{check.pid}.out; do [ -e "$f" ] && {lines} "$f"; done; '
            f"for f in {RAY_WORKER_LOGS}/worker-*-{check.pid}.err; do [ -s \"$f\" ] && echo '--- stderr ---' && "
            f'{lines} "$f"; done; true'
        )
        sys.stdout.write(kube.exec_in_pod(namespace, pods[0], WORKER_CONTAINER, ["sh", "-c", script]))


def main() -> None:
    app()

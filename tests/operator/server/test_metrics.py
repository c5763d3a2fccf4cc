"""The operator's /metrics beyond the progress windows: each job's phase and reason, waiting time, restarts,
binding and GPUs; each NodeGroup's GPUs admitted and free; the queue wait histogram; the reconcile's own time and
errors; the idle streak and GPU-seconds per component. Read from a recorded snapshot of the indexes, rendered as
Prometheus' text format and parsed back with prometheus-client's own parser."""

from __future__ import annotations

import kopf
import pytest
from kubernetes.client.exceptions import ApiException
from prometheus_client.parser import text_string_to_metric_families

from placement_core.observe.progress import ComponentTime, IterationReport
from rlplace_operator.admission.ledger import Holding, Ledger, PlannedDemand
from rlplace_operator.admission.queue import PodUse
from rlplace_operator.admission.rules import GroupDemand
from rlplace_operator.api.nodegroup import NodeGroupStatus
from rlplace_operator.api.rljob import RLJobSpec
from rlplace_operator.reconcile.world import Job
from rlplace_operator.server import metric_names as names
from rlplace_operator.server.metrics import Exposition, OperatorMetrics
from rlplace_operator.server.progress import ProgressService, Window
from tests.operator.recorded import NOW, cluster_snapshot, rljob_entry

CREATED = "2026-11-24T00:58:20Z"  # 100 s before NOW
ADMITTED_AT = "2026-11-24T00:59:00Z"  # 40 s after CREATED


def cond(type_: str, status: str, reason: str, when: str = ADMITTED_AT) -> dict:
    return {"type": type_, "status": status, "reason": reason, "message": "", "lastTransitionTime": when}


def entry(name: str, status: dict) -> dict:
    job = Job("ns", name, f"uid-{name}", 1, {"nodeGroups": ["a800"]}, status, "1", created=CREATED)
    return rljob_entry(job)


QUEUED = {
    "phase": "Queued",
    "queuePosition": 1,
    "conditions": [cond("Validated", "True", "SpecValid"), cond("Admitted", "False", "Queued", CREATED)],
}
RUNNING = {
    "phase": "Running",
    "rayCluster": "run",
    "gpus": 8,
    "predictedIterationTime": 9.5,
    "placement": {
        "mode": "disaggregated",
        "components": [
            {"name": "actor", "processes": 2, "gpus": 2, "nodes": ["n"]},
            {"name": "rollout", "processes": 6, "gpus": 6, "nodes": ["n"]},
        ],
    },
    "binding": [{"name": "actor", "verified": 2, "processes": 2}, {"name": "rollout", "verified": 5, "processes": 6}],
    "restarts": [
        {"attempt": 2, "time": CREATED, "reason": "HeadPodReplaced", "message": "x"},
        {"attempt": 3, "time": CREATED, "reason": "HeadPodReplaced", "message": "x"},
        {"attempt": 4, "time": CREATED, "reason": "BindTimeout", "message": "x"},
    ],
    "preemptions": 1,
    "components": [{"name": "rollout", "onLoss": "Replace", "desired": 6, "live": 6, "replaced": 3}],
    "conditions": [
        cond("Admitted", "True", "Admitted"),
        cond("RayClusterReady", "True", "RayClusterReady"),
        cond("BindingVerified", "False", "BindingMismatch"),
    ],
}
SUCCEEDED = {
    "phase": "Succeeded",
    "conditions": [cond("Admitted", "True", "Admitted"), cond("DriverSucceeded", "True", "DriverSucceeded")],
}


def samples(text: bytes) -> dict[tuple[str, frozenset], float]:
    found = {}
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def value(found: dict, name: str, **labels: str) -> float:
    return found[(name, frozenset(labels.items()))]


def fleet(metrics: OperatorMetrics, ledger: Ledger | None = None, **jobs: dict) -> None:
    snapshot = cluster_snapshot(rljobs={("ns", name): [entry(name, status)] for name, status in jobs.items()})
    metrics.observe_pass(snapshot, ledger or Ledger(), 0.01)


def scrape(metrics: OperatorMetrics) -> dict:
    service = ProgressService(lambda token: None, lambda key, progress: None)  # type: ignore[arg-type,return-value]
    return samples(Exposition(service, metrics).render())


def test_each_job_shows_its_phase_reason_waiting_time_restarts_and_binding() -> None:
    metrics = OperatorMetrics(clock=NOW.timestamp)
    fleet(metrics, queued=QUEUED, run=RUNNING, done=SUCCEEDED)
    found = scrape(metrics)
    assert value(found, "rlplace_job_phase", namespace="ns", rljob="queued", phase="Queued", reason="Queued") == 1
    assert (
        value(found, "rlplace_job_phase", namespace="ns", rljob="run", phase="Running", reason="BindingMismatch") == 1
    )
    assert value(found, "rlplace_job_phase", namespace="ns", rljob="done", phase="Succeeded", reason="DriverSucceeded")
    assert value(found, "rlplace_jobs", namespace="ns", phase="Queued", reason="Queued") == 1
    assert value(found, "rlplace_job_waiting_seconds", namespace="ns", rljob="queued") == 100.0
    assert ("rlplace_job_waiting_seconds", frozenset({"namespace": "ns", "rljob": "run"}.items())) not in found
    assert value(found, "rlplace_job_gpus", namespace="ns", rljob="run") == 8
    assert value(found, "rlplace_component_gpus", namespace="ns", rljob="run", component="rollout") == 6
    assert value(found, "rlplace_job_predicted_iteration_seconds", namespace="ns", rljob="run") == 9.5
    assert value(found, "rlplace_job_restarts", namespace="ns", rljob="run", reason="HeadPodReplaced") == 2
    assert value(found, "rlplace_job_restarts", namespace="ns", rljob="run", reason="BindTimeout") == 1
    assert value(found, "rlplace_job_preemptions", namespace="ns", rljob="run") == 1
    assert value(found, "rlplace_job_replacements", namespace="ns", rljob="run", cause="lost") == 3
    assert value(found, "rlplace_job_replacements", namespace="ns", rljob="run", cause="replan") == 0
    assert value(found, "rlplace_job_binding_verified", namespace="ns", rljob="run") == 0
    assert (
        value(found, "rlplace_component_processes", namespace="ns", rljob="run", component="rollout", state="verified")
        == 5
    )
    assert (
        value(found, "rlplace_component_processes", namespace="ns", rljob="run", component="rollout", state="launched")
        == 6
    )


def test_a_waiting_job_shows_the_gpus_its_plan_asks_for() -> None:
    # Its planned demand: node positions 0 and 1 of a800 (whole nodes: all their GPUs) and 3 GPUs of a DRA node.
    ledger = Ledger()
    spec = RLJobSpec.model_validate(
        {"nodeGroups": ["a800"], "componentPlacement": [{"components": "a", "placement": "0"}]}
    )
    demand = (
        GroupDemand("a800", 2, frozenset({0, 1})),
        GroupDemand("dra", 1, frozenset({0}), gpus=((0, 3),)),
        GroupDemand("cpu", 1, frozenset({0}), cpu_only=True),
    )
    ledger.remember_demand(("ns", "queued"), (), PlannedDemand(demand, spec, None))
    metrics = OperatorMetrics(clock=NOW.timestamp)
    fleet(metrics, ledger, queued=QUEUED, run=RUNNING)
    found = scrape(metrics)
    a800 = NodeGroupStatus.model_validate(cluster_snapshot().nodegroups["a800"][0][1])
    whole = sum([n.units for n in a800.nodes if n.ready][:2])
    assert value(found, "rlplace_job_requested_gpus", namespace="ns", rljob="queued") == whole + 3
    assert ("rlplace_job_requested_gpus", frozenset({"namespace": "ns", "rljob": "run"}.items())) not in found


def test_node_groups_show_gpus_admitted_and_free() -> None:
    base = cluster_snapshot()
    a800 = NodeGroupStatus.model_validate(base.nodegroups["a800"][0][1])
    first, second = [n.name for n in a800.nodes if n.ready][:2]
    snapshot = cluster_snapshot(
        rljobs={("ns", "run"): [entry("run", RUNNING)]},
        holdings={("ns", "run"): [Holding(frozenset({first}))]},
        pods={second: [PodUse("other/p", None, {"nvidia.com/gpu": 1})]},
    )
    metrics = OperatorMetrics(clock=NOW.timestamp)
    metrics.observe_pass(snapshot, Ledger(), 0.01)
    found = scrape(metrics)
    total = sum(n.units for n in a800.nodes if n.ready)
    units = {n.name: n.units for n in a800.nodes}
    assert value(found, "rlplace_nodegroup_gpus", node_group="a800", state="total") == total
    assert value(found, "rlplace_nodegroup_gpus", node_group="a800", state="admitted") == units[first]
    assert (
        value(found, "rlplace_nodegroup_gpus", node_group="a800", state="free") == total - units[first] - units[second]
    )
    assert value(found, "rlplace_nodegroup_nodes", node_group="a800", state="ready") == len(
        [n for n in a800.nodes if n.ready]
    )


def test_the_queue_wait_counts_each_admission_once() -> None:
    metrics = OperatorMetrics(clock=NOW.timestamp)
    fleet(metrics, run=RUNNING, queued=QUEUED)
    fleet(metrics, run=RUNNING, queued=QUEUED)  # a second pass over the same admission
    found = scrape(metrics)
    assert value(found, "rlplace_queue_wait_seconds_count", namespace="ns") == 1
    assert value(found, "rlplace_queue_wait_seconds_sum", namespace="ns") == 40.0
    assert value(found, "rlplace_queue_wait_seconds_bucket", namespace="ns", le="60.0") == 1
    assert value(found, "rlplace_queue_wait_seconds_bucket", namespace="ns", le="30.0") == 0
    readmitted = {**RUNNING, "conditions": [cond("Admitted", "True", "Admitted", "2026-11-24T00:59:50Z")]}
    fleet(metrics, run=readmitted)
    found = scrape(metrics)
    assert value(found, "rlplace_queue_wait_seconds_count", namespace="ns") == 2
    assert value(found, "rlplace_queue_pass_duration_seconds_count") == 3


def test_a_look_is_timed_and_its_failures_counted_by_kind() -> None:
    metrics = OperatorMetrics()
    with metrics.look("timer"):
        pass
    with pytest.raises(ApiException), metrics.look("timer"):
        raise ApiException(status=500)
    with pytest.raises(ApiException), metrics.look("rljob"):
        raise ApiException(status=404)  # gone meanwhile: an API error, not a failed look
    with pytest.raises(kopf.TemporaryError), metrics.look("rljob"):
        raise kopf.TemporaryError("waits", delay=1)  # how a look says it waits
    with pytest.raises(RuntimeError), metrics.look("rljob"):
        raise RuntimeError("a bug")
    metrics.decided_again(("stale", "conflict", "stale"))
    found = scrape(metrics)
    assert value(found, "rlplace_reconcile_duration_seconds_count", trigger="timer") == 2
    assert value(found, "rlplace_reconcile_duration_seconds_count", trigger="rljob") == 3
    assert value(found, "rlplace_reconcile_errors_total", trigger="timer", kind="api") == 1
    assert value(found, "rlplace_reconcile_errors_total", trigger="rljob", kind="error") == 1
    assert ("rlplace_reconcile_errors_total", frozenset({"trigger": "rljob", "kind": "api"}.items())) not in found
    assert value(found, "rlplace_api_errors_total", code="500") == 1
    assert value(found, "rlplace_api_errors_total", code="404") == 1
    assert value(found, "rlplace_reconcile_retries_total", reason="stale") == 2
    assert value(found, "rlplace_reconcile_retries_total", reason="conflict") == 1


def report(iteration: int, wall: float, **busy: float) -> IterationReport:
    return IterationReport(
        iteration, tuple(ComponentTime(n, s) for n, s in busy.items()), iteration_seconds=wall, time=1.0 + iteration
    )


def test_components_show_their_idle_streak_bottleneck_and_gpu_seconds() -> None:
    metrics = OperatorMetrics(clock=NOW.timestamp)
    fleet(metrics, run=RUNNING)
    service = ProgressService(lambda token: None, lambda key, progress: None)  # type: ignore[arg-type,return-value]
    # The actor is busy over half of iteration 1, then under half of iterations 2-4: a streak of 3.
    window = service.windows[("ns", "run")] = Window()
    for i, actor in enumerate([6.0, 2.0, 1.0, 3.0], start=1):
        window.add(report(i, 10.0, actor=actor, rollout=8.0), now=float(i))
    found = samples(Exposition(service, metrics).render())
    assert value(found, "rlplace_component_idle_streak", namespace="ns", rljob="run", component="actor") == 3
    assert value(found, "rlplace_component_idle_streak", namespace="ns", rljob="run", component="rollout") == 0
    assert value(found, "rlplace_job_bottleneck", namespace="ns", rljob="run", component="rollout") == 1
    assert (
        "rlplace_job_bottleneck",
        frozenset({"namespace": "ns", "rljob": "run", "component": "actor"}.items()),
    ) not in found
    # Per median iteration (10 s): the actor's 2 GPUs are held 20 GPU-seconds and busy 2 x median(6, 2, 1, 3) = 5.
    assert (
        value(found, "rlplace_component_gpu_seconds", namespace="ns", rljob="run", component="actor", use="held") == 20
    )
    assert (
        value(found, "rlplace_component_gpu_seconds", namespace="ns", rljob="run", component="actor", use="busy") == 5
    )
    assert (
        value(found, "rlplace_component_gpu_seconds", namespace="ns", rljob="run", component="rollout", use="busy")
        == 48
    )


def test_every_served_metric_is_named_in_metric_names() -> None:
    metrics = OperatorMetrics(clock=NOW.timestamp)
    fleet(metrics, queued=QUEUED, run=RUNNING)
    service = ProgressService(lambda token: None, lambda key, progress: None)  # type: ignore[arg-type,return-value]
    service.windows[("ns", "run")] = Window()
    service.windows[("ns", "run")].add(report(1, 10.0, actor=6.0, rollout=8.0), now=1.0)
    with metrics.look("timer"):
        pass
    text = Exposition(service, metrics).render().decode()
    served = {f.name for f in text_string_to_metric_families(text)}
    declared = {m.name.removesuffix("_total") for m in names.ALL}
    assert served - declared == set()
    assert declared - served == set()
    for family in text_string_to_metric_families(text):
        declared_labels = next(set(m.labels) for m in names.ALL if m.name.removesuffix("_total") == family.name)
        for sample in family.samples:
            assert set(sample.labels) - {"le"} == declared_labels, (family.name, sample.labels)


def test_a_scrape_serves_each_jobs_latest_series_and_none_of_a_gone_job() -> None:
    # Each job's series are kept as text between scrapes: a new report or a new status must show at once.
    metrics = OperatorMetrics(clock=NOW.timestamp)
    service = ProgressService(lambda token: None, lambda key, progress: None)  # type: ignore[arg-type,return-value]
    exposition = Exposition(service, metrics)
    fleet(metrics, run=RUNNING)
    window = service.windows[("ns", "run")] = Window()
    window.add(report(1, 10.0, actor=6.0, rollout=8.0), now=1.0)
    found = samples(exposition.render())
    assert value(found, "rlplace_job_iteration", namespace="ns", rljob="run") == 1
    assert value(found, "rlplace_job_binding_verified", namespace="ns", rljob="run") == 0
    window.add(report(2, 12.0, actor=6.0, rollout=8.0), now=2.0)
    fleet(metrics, run={**RUNNING, "conditions": [cond("BindingVerified", "True", "Verified")]})
    found = samples(exposition.render())
    assert value(found, "rlplace_job_iteration", namespace="ns", rljob="run") == 2
    assert value(found, "rlplace_job_last_step_seconds", namespace="ns", rljob="run") == 12.0
    assert value(found, "rlplace_job_binding_verified", namespace="ns", rljob="run") == 1
    del service.windows[("ns", "run")]
    fleet(metrics, other=QUEUED)
    text = exposition.render().decode()
    assert 'rljob="run"' not in text and 'rljob="other"' in text
    assert exposition.rendered.keys() == {("ns", "other")}

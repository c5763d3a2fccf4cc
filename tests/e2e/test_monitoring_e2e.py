"""The chart's monitoring on a real Prometheus (issue 44, docs/monitoring.md): the operator's ServiceMonitor, the
jobs' Ray PodMonitor and the PrometheusRule, read by prometheus-operator (e2e/cluster/monitoring.sh) with the
thresholds of this test, while jobs built for each alert run:

- `synthetic` (real a800 node): the synthetic workload, its reward idle over half of each iteration
  (RLJobComponentIdle fires, and resolves while a straggler keeps reward busy), its rollout slowed for a few steps
  (RLJobStepTimeRegressed fires, and resolves when the steps are fast again);
- `waiting` (kwok nodes): a Kueue job whose ClusterQueue is inactive waits while GPUs are free
  (RLJobQueuedWithFreeCapacity fires; resolves when it is deleted);
- `unpullable` (real 4090 node): an image that cannot be pulled, given back and retried (a restart by cause);
- the operator without its read of ClusterQueues (its ClusterRole patched): each look at `waiting` is refused
  (RLPlaceOperatorReconcileFailing fires; resolves once the chart's RBAC is back);
- `tampered` (real a800 node, after `synthetic`): a process runs on another GPU than planned
  (RLJobBindingMismatch fires; resolves when it is deleted).

Then every query of every dashboard panel is evaluated through Prometheus' HTTP API and must return at least one
series with plausible values (for the job dashboard, for one of these jobs).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator

import pytest
from prometheus_api import alerts, prometheus_url, query, rules
from test_run import RunJobs, example, real_nodes, run_jobs  # noqa: F401  (fixtures)
from test_why_e2e import inactive_queue  # noqa: F401  (fixture)

from rlplace_operator.monitoring.alerts import AlertSettings, alert_exprs, chart_values
from rlplace_operator.monitoring.dashboards import panel_queries, resolve_variables

from e2e_cluster import wait_for
from rlplace_fixtures import InClusterOperator, kubectl

pytestmark = pytest.mark.e2e

#: Thresholds that make each alert fire within a minute of its cause.
SETTINGS = AlertSettings(
    queued_waiting_seconds="10",
    queued_for="0s",
    binding_mismatch_for="0s",
    step_regression_ratio="1.2",
    step_regression_window="2m",
    step_regression_for="0s",
    idle_iterations="3",
    idle_for="0s",
    reconcile_errors_window="30s",
    reconcile_errors_for="0s",
)
#: Grafana's $__rate_interval for the panels' queries: the whole test, so its admissions and errors are in it.
RATE_WINDOW = "15m"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
OPERATOR_ROLE = "rlplace-operator"
#: The synthetic job: collocated on 4 GPUs, an iteration is actor 1 s + rollout 1.5 s + reward 0.25 s (reward idle
#: 91% of it); steps 14-17 add 4 s to the rollout (an iteration 2.5x as long), steps 26-29 add 4 s to reward
#: (busy over half of each: its idle streak ends).
SYNTHETIC_STEPS = 40
SLOW_ROLLOUT = "rollout=4@14-17"
SLOW_REWARD = "reward=4@26-29"


def monitoring_values() -> dict:
    return {
        "metrics": {
            "serviceMonitor": {"enabled": True, "interval": "5s"},
            "rayPodMonitor": {"enabled": True, "interval": "5s"},
            "prometheusRule": {"enabled": True, **chart_values(SETTINGS)},
            "dashboards": {"enabled": True},
        }
    }


@pytest.fixture
def monitored(rlplace_operator: object, kubeconfig: str) -> Iterator[str]:
    """Prometheus' URL, with the chart installed again with its monitoring on (and off again afterwards)."""
    if not isinstance(rlplace_operator, InClusterOperator):
        pytest.skip("the ServiceMonitor scrapes the chart's operator: needs the operator in the cluster")
    url = prometheus_url()
    rlplace_operator.configure(monitoring_values())
    try:
        yield url
    finally:
        rlplace_operator.configure(None)


def firing(url: str, name: str, **labels: str) -> list[dict]:
    return [
        a
        for a in alerts(url, "firing")
        if a["labels"].get("alertname") == name and all(a["labels"].get(k) == v for k, v in labels.items())
    ]


def fires_then_resolves(
    url: str, name: str, cause: Callable[[], None] | None, end: Callable[[], None], **labels: str
) -> None:
    """`name` fires (after `cause`, if any) for the labels given, then resolves after `end`."""
    if cause is not None:
        cause()
    (alert,) = wait_for(lambda: firing(url, name, **labels), 180, f"{name} firing for {labels}", interval=2)
    print(f"{name} fired: {alert['annotations'].get('summary')}")
    assert all(alert["labels"].get(k) == v for k, v in labels.items()) and alert["labels"]["cause"], alert
    end()
    wait_for(lambda: not firing(url, name, **labels), 180, f"{name} resolved for {labels}", interval=2)


def plausible(series: list[dict]) -> bool:
    """At least one finite value, none negative. A quantile over a label set without observations in the window
    is NaN (0/0) beside the others: PromQL's, and Grafana leaves it out."""
    values = [float(s["value"][1]) for s in series]
    finite = [v for v in values if math.isfinite(v)]
    return bool(finite) and all(v >= 0 for v in finite)


def test_every_panel_and_alert_has_data_on_a_real_prometheus(
    run_jobs: RunJobs,  # noqa: F811
    real_nodes: list[str],  # noqa: F811
    inactive_queue: str,  # noqa: F811
    monitored: str,
    kubeconfig: str,
) -> None:
    url = monitored
    namespace = run_jobs.namespace
    # prometheus-operator turned the chart's objects into scrape pools and rule files.
    operator_up = f'up{{namespace="rlplace-system", service="{OPERATOR_ROLE}"}} == 1'
    wait_for(lambda: query(url, operator_up), 120, "the operator's /metrics scraped", interval=2)
    loaded = wait_for(lambda: {r["name"] for r in rules(url, "alert")} or None, 120, "the alert rules loaded")
    assert {name for name, _ in alert_exprs(SETTINGS)} <= loaded, loaded

    synthetic = example("rljob-synthetic-run.yaml")
    synthetic["metadata"]["name"] = "synthetic"
    entrypoint = synthetic["spec"]["entrypoint"].replace("--steps 40", f"--steps {SYNTHETIC_STEPS}")
    synthetic["spec"]["entrypoint"] = f"{entrypoint} --slow {SLOW_ROLLOUT} --slow {SLOW_REWARD}"
    # A recommendation that is only shown: its predicted iteration time is the job's predicted one.
    synthetic["spec"].update(
        placementMode="modelParallel",
        algorithm={"recomputeLogprobs": False, "groupSize": 16, "nMinibatches": 4, "rolloutBatchSize": 128},
        autoPlacement={"apply": "Never", "costModel": "linear"},
    )
    run_jobs.create(synthetic)
    waiting = example("rljob-collocated-run.yaml")
    waiting["metadata"] = {"name": "waiting", "labels": {QUEUE_LABEL: inactive_queue}}
    waiting["spec"]["nodeGroups"] = ["a800"]
    waiting["spec"].pop("entrypoint", None)
    waiting["spec"].pop("run", None)
    run_jobs.create(waiting)
    unpullable = example("rljob-collocated-run.yaml")
    unpullable["metadata"]["name"] = "unpullable"
    unpullable["spec"]["nodeGroups"] = ["real-4090"]
    unpullable["spec"]["ray"]["image"] = "localhost/rlplace/no-such-image:1"
    run_jobs.create(unpullable)

    job = {"namespace": namespace, "rljob": "synthetic"}
    # The Ray pods' own metrics, through the PodMonitor, with the job's name on them.
    ray_up = f'up{{namespace="{namespace}", rljob="synthetic"}} == 1'
    wait_for(lambda: query(url, ray_up), 240, "the synthetic job's Ray pods scraped", interval=2)

    fires_then_resolves(url, "RLJobComponentIdle", None, lambda: None, component="reward", **job)
    # The rollout's straggler came first (steps 14-17): the step-time alert fired and resolved meanwhile, unless
    # Prometheus missed it; it fires again for the reward's straggler (26-29) and resolves after it.
    fires_then_resolves(url, "RLJobStepTimeRegressed", None, lambda: None, **job)
    run_jobs.wait_phase("synthetic", "Succeeded", timeout=300)

    waiting_job = {"namespace": namespace, "rljob": "waiting"}
    wait_for(lambda: firing(url, "RLJobQueuedWithFreeCapacity", **waiting_job), 120, "queued alert", interval=2)

    # The operator loses its read of ClusterQueues: every look at `waiting` is refused until the rule is back.
    role = json.loads(kubectl(kubeconfig, "get", "clusterrole", OPERATOR_ROLE, "-o", "json"))
    at, rule = next((i, r) for i, r in enumerate(role["rules"]) if "clusterqueues" in r.get("resources", []))

    def resources(value: list[str]) -> Callable[[], None]:
        patch = json.dumps([{"op": "replace", "path": f"/rules/{at}/resources", "value": value}])
        return lambda: kubectl(kubeconfig, "patch", "clusterrole", OPERATOR_ROLE, "--type=json", "-p", patch)

    refuse = resources([r for r in rule["resources"] if r != "clusterqueues"])
    try:
        fires_then_resolves(url, "RLPlaceOperatorReconcileFailing", refuse, resources(rule["resources"]), kind="api")
    finally:
        resources(rule["resources"])()

    tampered = example("rljob-collocated-run.yaml")
    tampered["metadata"]["name"] = "tampered"
    tampered["spec"]["entrypoint"] += " --tamper rollout:1:CUDA_VISIBLE_DEVICES=3"
    run_jobs.create(tampered)
    run_jobs.wait_phase("tampered", "Failed", timeout=420)
    tampered_job = {"namespace": namespace, "rljob": "tampered"}
    wait_for(lambda: firing(url, "RLJobBindingMismatch", **tampered_job), 120, "binding alert firing", interval=2)
    wait_for(
        lambda: [r for r in run_jobs.status("unpullable").get("restarts") or [] if r["reason"] == "ImagePullFailed"],
        180,
        "unpullable given back after its image pull failed",
    )

    # Every query of every panel, with data, while each job is there.
    missing = []
    for dashboard, panel, expr in panel_queries():
        candidates = ["synthetic", "waiting", "tampered", "unpullable"] if "$rljob" in expr else [""]
        found: list[dict] = []
        for name in candidates:
            values = {"namespace": namespace, "rljob": name, "__rate_interval": RATE_WINDOW}
            found = query(url, resolve_variables(expr, values))
            if plausible(found):
                break
        if not plausible(found):
            missing.append(f"{dashboard} / {panel}: {expr} -> {found}")
    assert not missing, "panels without plausible data:\n" + "\n".join(missing)

    fires_then_resolves(url, "RLJobBindingMismatch", None, lambda: run_jobs.delete("tampered"), **tampered_job)
    fires_then_resolves(url, "RLJobQueuedWithFreeCapacity", None, lambda: run_jobs.delete("waiting"), **waiting_job)
    run_jobs.delete("unpullable")

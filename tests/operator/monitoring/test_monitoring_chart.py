"""The chart's monitoring objects as `helm template` renders them (no cluster): none by default; with each switch
on, the ServiceMonitor, the Ray PodMonitor, the PrometheusRule and the dashboard ConfigMaps with the selectors,
ports, labels and files they need; the schema refuses bad settings; promtool accepts the rendered rules.

helm is the local cluster's build (.e2e/bin, or e2e/cluster/lib.sh's `tool_bin helm`) or the one on PATH;
promtool is looked up the same way (test_rendered_rules_pass_promtool, marked `promtool`).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlplace_operator.api import names
from rlplace_operator.monitoring import __main__ as generator
from rlplace_operator.monitoring import alerts, dashboards

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "charts" / "rlplace"
LIB_SH = REPO / "e2e" / "cluster" / "lib.sh"
#: KubeRay's name of the Ray container's metrics port (ray-operator controllers/ray/utils: MetricsPortName), which it
#: adds to every head and worker pod template that has none (controllers/ray/common/pod.go).
KUBERAY_METRICS_PORT = "metrics"
MONITORING_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
ALL_ON = [
    "--set",
    "metrics.serviceMonitor.enabled=true,metrics.rayPodMonitor.enabled=true,"
    "metrics.prometheusRule.enabled=true,metrics.dashboards.enabled=true",
]
#: `helm template` renders offline; it is told the oldest Kubernetes the chart supports (Chart.yaml kubeVersion).
KUBE_VERSION = ("--kube-version", "v1.30.0")


def find_tool(name: str) -> str:
    """The local cluster's build of `name` (.e2e/bin, then lib.sh's tool_bin), else the one on PATH; fails the
    test with what to do when there is none."""
    linked = REPO / ".e2e" / "bin" / name
    if linked.exists():
        return str(linked)
    built = subprocess.run(
        ["bash", "-c", 'source "$0" && tool_bin "$1"', str(LIB_SH), name], capture_output=True, text=True, check=False
    ).stdout.strip()
    if built and Path(built).is_file():
        return built
    found = shutil.which(name)
    if not found:
        pytest.fail(
            f"{name} not found (not in .e2e/bin, not at e2e/cluster/lib.sh's `tool_bin {name}`, not on PATH): "
            f"run `make tools` or put {name} on PATH",
            pytrace=False,
        )
    return found


def helm_template(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [find_tool("helm"), "template", "rlplace", str(CHART), *KUBE_VERSION, "-n", "rlplace-system", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if check:
        assert result.returncode == 0, result.stderr
    return result


def rendered(*args: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(helm_template(*args).stdout) if doc]


def of_kind(docs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [doc for doc in docs if doc["kind"] == kind]


def dashboard_configmaps(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [doc for doc in of_kind(docs, "ConfigMap") if "-dashboard-" in doc["metadata"]["name"]]


def test_monitoring_is_off_by_default() -> None:
    docs = rendered()
    assert {doc["kind"] for doc in docs} & MONITORING_KINDS == set()
    assert dashboard_configmaps(docs) == []
    # metrics.enabled stays on by default: the Service still serves /metrics with its scrape annotations.
    (service,) = of_kind(docs, "Service")
    assert "metrics" in [port["name"] for port in service["spec"]["ports"]]
    assert service["metadata"]["annotations"]["prometheus.io/scrape"] == "true"


def test_metrics_off_turns_the_operator_objects_off() -> None:
    docs = rendered(*ALL_ON, "--set", "metrics.enabled=false")
    assert {doc["kind"] for doc in docs} & MONITORING_KINDS == {"PodMonitor"}  # Ray's metrics are Ray's own
    assert dashboard_configmaps(docs) == []


def test_service_monitor_selects_the_operator_service_port() -> None:
    docs = rendered(*ALL_ON, "--set", "metrics.serviceMonitor.labels.release=prom")
    (monitor,) = of_kind(docs, "ServiceMonitor")
    (service,) = of_kind(docs, "Service")
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= service["metadata"]["labels"].items()
    assert monitor["metadata"]["labels"]["release"] == "prom"
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in [port["name"] for port in service["spec"]["ports"]]
    assert endpoint["path"] == "/metrics"
    # The jobs' own `namespace` label is kept (not renamed exported_namespace beside the operator pod's).
    assert endpoint["honorLabels"] is True


def test_pod_monitor_selects_the_jobs_ray_pods() -> None:
    (monitor,) = of_kind(rendered(*ALL_ON), "PodMonitor")
    spec = monitor["spec"]
    assert spec["namespaceSelector"] == {"any": True}
    expressions = {(e["key"], e["operator"]) for e in spec["selector"]["matchExpressions"]}
    assert expressions == {(names.JOB_LABEL, "Exists"), (names.KUBERAY_NODE_TYPE_LABEL, "Exists")}
    (endpoint,) = spec["podMetricsEndpoints"]
    assert endpoint["port"] == KUBERAY_METRICS_PORT
    relabeled = {r["targetLabel"]: r["sourceLabels"] for r in endpoint["relabelings"]}
    assert relabeled["rljob"] == ["__meta_kubernetes_pod_label_rlplace_io_job"]
    (narrowed,) = of_kind(rendered(*ALL_ON, "--set", "watchNamespaces={team-a,team-b}"), "PodMonitor")
    assert narrowed["spec"]["namespaceSelector"] == {"matchNames": ["team-a", "team-b"]}


def test_prometheus_rule_has_every_alert_with_the_default_settings() -> None:
    (rule,) = of_kind(rendered(*ALL_ON, "--set", "metrics.prometheusRule.labels.release=prom"), "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "prom"
    (group,) = rule["spec"]["groups"]
    expected = [rule.as_rule() for rule in alerts.alert_rules(alerts.DEFAULT_SETTINGS)]
    assert group["rules"] == expected


def test_settings_reach_the_rendered_rules(tmp_path: Path) -> None:
    """Small settings, as the e2e test that makes each alert fire sets them (a values file from chart_values)."""
    small = alerts.AlertSettings(
        queued_waiting_seconds="5",
        queued_for="10s",
        binding_mismatch_for="0s",
        step_regression_ratio="1.5",
        step_regression_window="2m",
        step_regression_for="30s",
        idle_iterations="3",
        idle_for="0s",
        reconcile_errors_window="1m",
        reconcile_errors_for="0s",
    )
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"metrics": {"prometheusRule": alerts.chart_values(small)}}))
    (rule,) = of_kind(rendered(*ALL_ON, "-f", str(values)), "PrometheusRule")
    assert rule["spec"]["groups"][0]["rules"] == [r.as_rule() for r in alerts.alert_rules(small)]


def test_dashboards_ship_as_sidecar_configmaps() -> None:
    docs = rendered(
        *ALL_ON,
        "--set",
        "metrics.dashboards.namespace=monitoring,metrics.dashboards.label=grafana_dash,"
        "metrics.dashboards.labelValue=yes,metrics.dashboards.annotations.grafana_folder=rlplace",
    )
    configmaps = dashboard_configmaps(docs)
    assert len(configmaps) == len(dashboards.DASHBOARDS)
    for configmap, make in zip(configmaps, dashboards.DASHBOARDS, strict=True):
        spec = make()
        metadata = configmap["metadata"]
        assert metadata["namespace"] == "monitoring" and metadata["labels"]["grafana_dash"] == "yes"
        assert metadata["annotations"] == {"grafana_folder": "rlplace"}
        (key,) = configmap["data"]
        assert key == f"rlplace-{spec.name}.json"
        assert json.loads(configmap["data"][key]) == dashboards.build(spec)
    default_label = dashboard_configmaps(rendered(*ALL_ON))[0]["metadata"]
    assert default_label["labels"]["grafana_dashboard"] == "1" and default_label["namespace"] == "rlplace-system"


@pytest.mark.parametrize(
    ("values", "message"),
    [
        (["--set-json", "metrics.prometheusRule.stepTimeRegressed.ratio=0.8"], "ratio"),
        (["--set", "metrics.prometheusRule.componentIdle.iterations=0"], "iterations"),
        (["--set", "metrics.prometheusRule.bindingMismatch.for=2 minutes"], "for"),
        (["--set", "metrics.prometheusRule.queuedWithFreeCapacity.waitingSeconds=-1"], "waitingSeconds"),
        (["--set", "metrics.prometheusRule.reconcileFailing.treshold=1"], "treshold"),
        (["--set", "metrics.rayPodMonitor.interval=often"], "interval"),
        (["--set", "metrics.dashboards.labelValue=not a label"], "labelValue"),
        (["--set", "metrics.dashboards.enabled=yes"], "enabled"),
    ],
)
def test_schema_refuses_bad_monitoring_values(values: list[str], message: str) -> None:
    result = helm_template(*values, check=False)
    assert result.returncode != 0
    assert "values don't meet the specifications of the schema" in result.stderr and message in result.stderr


@pytest.mark.promtool
def test_rendered_rules_pass_promtool(tmp_path: Path) -> None:
    """`promtool check rules` on the rules as `helm template` renders them, with the defaults and with the small
    settings an e2e test uses. promtool comes with the local cluster's tools (e2e/cluster/lib.sh) or from PATH."""
    promtool = find_tool("promtool")
    small = "metrics.prometheusRule.queuedWithFreeCapacity.waitingSeconds=5,metrics.prometheusRule.stepTimeRegressed.window=1m"
    for index, values in enumerate(([], ["--set", small])):
        (rule,) = of_kind(rendered(*ALL_ON, *values), "PrometheusRule")
        rules_file = tmp_path / f"rules-{index}.yaml"
        rules_file.write_text(yaml.safe_dump(rule["spec"]))
        result = subprocess.run(
            [promtool, "check", "rules", str(rules_file)], capture_output=True, text=True, timeout=60, check=False
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert f"SUCCESS: {len(alerts.alert_rules())} rules found" in result.stdout


def test_the_chart_ships_only_generated_dashboards() -> None:
    shipped = sorted(p.relative_to(CHART).as_posix() for p in (CHART / "dashboards").glob("*"))
    assert shipped == sorted(path for path in generator.generated_files() if path.startswith("dashboards/"))


@pytest.mark.promtool
def test_dashboard_queries_parse(tmp_path: Path) -> None:
    """Every panel's PromQL, its Grafana variables resolved as Grafana would, parses: promtool checks each as a
    recording rule."""
    promtool = find_tool("promtool")
    values = {"namespace": "default", "rljob": "collocated", "__rate_interval": "1m"}
    rules = [
        {"record": f"rlplace:dashboard_query:{index}", "expr": dashboards.resolve_variables(expr, values)}
        for index, (_, _, expr) in enumerate(dashboards.panel_queries())
    ]
    rules_file = tmp_path / "queries.yaml"
    rules_file.write_text(yaml.safe_dump({"groups": [{"name": "dashboards", "rules": rules}]}))
    result = subprocess.run(
        [promtool, "check", "rules", str(rules_file)], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr

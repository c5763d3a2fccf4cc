"""Every PromQL of the dashboards and the alert rules reads only the metrics of server/metric_names.py, every
declared metric is on a dashboard, and the dashboards have the variables the brief of each asks for."""

from __future__ import annotations

import pytest

from rlplace_operator.monitoring import alerts, dashboards, promql
from rlplace_operator.server import metric_names

DECLARED = {metric.name for metric in metric_names.ALL}


def all_queries() -> list[tuple[str, str]]:
    """(where, expr) of every query that ships: panels, dashboard variables, alert rules."""
    found = [(f"{board} / {panel}", expr) for board, panel, expr in dashboards.panel_queries()]
    for make in dashboards.DASHBOARDS:
        board = dashboards.build(make())
        for variable in board["templating"]["list"]:
            if variable["type"] == "query":
                found.append((f"{board['title']} variable {variable['name']}", variable["query"]["query"]))
    found += [(f"alert {name}", expr) for name, expr in alerts.alert_exprs()]
    return found


def test_every_query_reads_only_declared_metrics() -> None:
    queries = all_queries()
    assert len(queries) > 50
    for where, expr in queries:
        names = promql.metric_names_in(expr)
        assert names, f"{where}: {expr!r} reads no rlplace metric"
        assert names <= DECLARED, f"{where}: {sorted(names - DECLARED)} not in metric_names.ALL ({expr!r})"


def test_the_name_check_finds_an_undeclared_metric() -> None:
    assert promql.metric_names_in("rate(rlplace_reconcile_duration_seconds_bucket[5m])") == {
        metric_names.RECONCILE_SECONDS.name
    }
    assert promql.metric_names_in("rlplace_job_gpu_count > 1") == {"rlplace_job_gpu_count"}
    assert not promql.metric_names_in("rlplace_job_gpu_count") <= DECLARED


def test_every_declared_metric_is_on_a_dashboard() -> None:
    on_dashboards = set().union(*(promql.metric_names_in(expr) for _, _, expr in dashboards.panel_queries()))
    assert DECLARED - on_dashboards == set()


def test_a_label_the_metric_lacks_fails_when_the_query_is_built() -> None:
    with pytest.raises(ValueError, match="'rlplace_job_gpus' has no label 'component'"):
        promql.series(metric_names.JOB_GPUS, component=promql.equals("actor"))
    with pytest.raises(ValueError, match="has no label 'node'"):
        promql.by(metric_names.NODEGROUP_GPUS, "node")


def test_dashboards_read_a_datasource_variable_and_the_job_dashboard_picks_a_job() -> None:
    for make in dashboards.DASHBOARDS:
        board = dashboards.build(make())
        variables = {v["name"]: v for v in board["templating"]["list"]}
        assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
        for panel in dashboards.panels(board):
            if panel["type"] != "row":
                assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
        assert len({p["id"] for p in dashboards.panels(board)}) == len(list(dashboards.panels(board)))
    job = dashboards.build(dashboards.job())
    variables = {v["name"]: v for v in job["templating"]["list"]}
    assert variables["namespace"]["query"]["query"].startswith("label_values(rlplace_job_phase, namespace)")
    assert variables["rljob"]["query"]["query"].startswith('label_values(rlplace_job_phase{namespace="$namespace"}')
    for _, _, expr in (q for q in dashboards.panel_queries() if q[0] == job["title"]):
        assert 'namespace="$namespace", rljob="$rljob"' in expr


def test_grafana_variables_resolve_for_the_e2e_evaluation() -> None:
    values = {"namespace": "default", "rljob": "collocated", "__rate_interval": "1m"}
    for _, _, expr in dashboards.panel_queries():
        assert "$" not in dashboards.resolve_variables(expr, values)
    with pytest.raises(KeyError, match=r"no value for Grafana variable .*rljob"):
        dashboards.resolve_variables('x{rljob="$rljob"}', {})

"""The alert rules: each names its job (or the operator's failing trigger) and its cause, takes every threshold from
the chart's values, and the code's defaults are the values.yaml defaults."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import yaml

from rlplace_operator.monitoring import alerts

VALUES = Path(__file__).resolve().parents[3] / "charts" / "rlplace" / "values.yaml"

ALERT_NAMES = [
    "RLJobQueuedWithFreeCapacity",
    "RLJobBindingMismatch",
    "RLJobStepTimeRegressed",
    "RLJobComponentIdle",
    "RLPlaceOperatorReconcileFailing",
]


def test_every_alert_names_its_job_and_cause() -> None:
    rules = alerts.alert_rules()
    assert [rule.name for rule in rules] == ALERT_NAMES
    for rule in rules:
        fields = rule.as_rule()
        assert set(fields) == {"alert", "expr", "for", "labels", "annotations"}
        assert fields["labels"]["cause"] and fields["labels"]["severity"] in ("info", "warning", "critical")
        text = fields["annotations"]["summary"] + fields["annotations"]["description"]
        if rule.name.startswith("RLJob"):
            assert "{{ $labels.namespace }}/{{ $labels.rljob }}" in fields["annotations"]["summary"], rule.name
        else:
            assert "{{ $labels.kind }}" in text and "{{ $labels.trigger }}" in text


def test_default_settings_are_the_chart_defaults() -> None:
    values = yaml.safe_load(VALUES.read_text())["metrics"]["prometheusRule"]
    for field, (rule, key, default) in alerts.VALUES.items():
        assert str(values[rule][key]) == default, f"values.yaml metrics.prometheusRule.{rule}.{key}"
        assert getattr(alerts.DEFAULT_SETTINGS, field) == default


def test_every_setting_reaches_a_rule() -> None:
    """A setting no rule reads would be a chart value that does nothing."""
    marked = alerts.AlertSettings(**{field: f"<{field}>" for field in alerts.VALUES})
    text = yaml.safe_dump([rule.as_rule() for rule in alerts.alert_rules(marked)], width=100000)
    for field in dataclasses.asdict(marked):
        assert f"<{field}>" in text, field
    assert set(alerts.VALUES) == {f.name for f in dataclasses.fields(alerts.AlertSettings)}


def test_the_e2e_expressions_are_concrete() -> None:
    small = dataclasses.replace(alerts.DEFAULT_SETTINGS, queued_waiting_seconds="5", step_regression_window="2m")
    exprs = dict(alerts.alert_exprs(small))
    assert list(exprs) == ALERT_NAMES
    assert all("{{" not in expr for expr in exprs.values())
    assert "rlplace_job_waiting_seconds > 5)" in exprs["RLJobQueuedWithFreeCapacity"]
    assert "rlplace_job_last_step_seconds[2m]" in exprs["RLJobStepTimeRegressed"]
    assert exprs["RLJobBindingMismatch"] == "rlplace_job_binding_verified == 0"
    assert exprs["RLJobComponentIdle"] == "rlplace_component_idle_streak >= 10"

"""PromQL built from the metric names of server/metric_names.py: a selector checks each label it matches against
the metric's declared labels, so a renamed metric or label fails when the dashboards and rules are generated,
not in a panel or an alert that silently matches nothing.
"""

from __future__ import annotations

import re

from rlplace_operator.server import metric_names
from rlplace_operator.server.metric_names import MetricName

#: The series a histogram adds to its name (Prometheus's exposition format).
HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")

#: A metric name as it can appear in PromQL: our prefix, then name characters. Label names and values never start
#: with `rlplace_` (labels are lower-case words; values are quoted), so every match is a metric name.
_RLPLACE_NAME = re.compile(r"\brlplace_[a-zA-Z0-9_:]*")


def check_labels(metric: MetricName, labels: tuple[str, ...] | list[str]) -> None:
    """Raise when `metric` declares none of `labels`, naming the labels it has."""
    for label in labels:
        if label not in metric.labels:
            raise ValueError(
                f"metric {metric.name!r} has no label {label!r} (labels: {', '.join(metric.labels) or 'none'})"
            )


def by(metric: MetricName, *labels: str) -> str:
    """`by (labels)` of an aggregation over `metric`, each label checked against the metric's."""
    check_labels(metric, labels)
    return f"by ({', '.join(labels)})"


def _matchers(metric: MetricName, matchers: dict[str, str]) -> str:
    check_labels(metric, list(matchers))
    return ", ".join(f"{label}{matcher}" for label, matcher in matchers.items())


def series(metric: MetricName, suffix: str = "", **matchers: str) -> str:
    """`name{label="value", ...}`; each matcher is written whole after its label: `state='="free"'`,
    `namespace='=~"$namespace"'`. `suffix` picks a histogram's _bucket, _sum or _count series."""
    if suffix and suffix not in HISTOGRAM_SUFFIXES:
        raise ValueError(f"unknown series suffix {suffix!r} (known: {', '.join(HISTOGRAM_SUFFIXES)})")
    body = _matchers(metric, matchers)
    return f"{metric.name}{suffix}{{{body}}}" if body else f"{metric.name}{suffix}"


def equals(value: str) -> str:
    """The matcher text of label == value (a Grafana variable such as $namespace is a value too)."""
    return f'="{value}"'


def histogram_quantile(quantile: float, metric: MetricName, window: str, by: tuple[str, ...] = ()) -> str:
    """The `quantile` of a histogram's observations over `window`, per `by` labels."""
    check_labels(metric, by)
    grouping = ", ".join(("le", *by))
    return f"histogram_quantile({quantile}, sum by ({grouping}) (rate({series(metric, '_bucket')}[{window}])))"


def metric_names_in(expr: str) -> set[str]:
    """The rlplace metric names an expression reads, with a histogram's series suffix taken off when the name
    without it is a histogram's (for checks: every name must be one of metric_names.ALL)."""
    declared = {metric.name for metric in metric_names.ALL}
    found = set()
    for name in _RLPLACE_NAME.findall(expr):
        base = next((name.removesuffix(s) for s in HISTOGRAM_SUFFIXES if name.endswith(s)), name)
        found.add(base if base in declared and name not in declared else name)
    return found

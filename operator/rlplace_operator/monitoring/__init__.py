"""Grafana dashboards (dashboards.py) and Prometheus alert rules (alerts.py) for the metrics of
server/metric_names.py, generated into the chart by `python -m rlplace_operator.monitoring` (docs/monitoring.md).
Only the generator and the tests import this package; the operator never does (grafana-foundation-sdk is a dev
dependency)."""

"""The Prometheus alert rules of rlplace, built from server/metric_names.py.

Each rule's thresholds and `for` durations are an `AlertSettings`: the chart's file holds Helm placeholders
(`HELM_SETTINGS`, rendered by the PrometheusRule template through `tpl`), so an install or a test sets them as
values; `DEFAULT_SETTINGS` are the values.yaml defaults (a test keeps the two equal), and `alert_exprs` gives the
concrete expressions for any settings, for the e2e test that makes each alert fire on a real Prometheus.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

import yaml

from rlplace_operator.monitoring.promql import by, equals, series
from rlplace_operator.server import metric_names as m

#: The rule group's name in the PrometheusRule.
GROUP_NAME = "rlplace"
#: Where the chart's values for the rules live: metrics.prometheusRule.<rule key>.<setting>.
VALUES_PATH = ".Values.metrics.prometheusRule"


@dataclasses.dataclass(frozen=True)
class AlertSettings:
    """Every number and duration the rules take, as PromQL text (a number, or a duration such as 5m)."""

    queued_waiting_seconds: str
    queued_for: str
    binding_mismatch_for: str
    step_regression_ratio: str
    step_regression_window: str
    step_regression_for: str
    idle_iterations: str
    idle_for: str
    reconcile_errors_window: str
    reconcile_errors_for: str


#: Each setting's key in the chart's values (metrics.prometheusRule.<rule>.<key>) and its default there.
VALUES: dict[str, tuple[str, str, str]] = {
    "queued_waiting_seconds": ("queuedWithFreeCapacity", "waitingSeconds", "600"),
    "queued_for": ("queuedWithFreeCapacity", "for", "5m"),
    "binding_mismatch_for": ("bindingMismatch", "for", "2m"),
    "step_regression_ratio": ("stepTimeRegressed", "ratio", "1.2"),
    "step_regression_window": ("stepTimeRegressed", "window", "1h"),
    "step_regression_for": ("stepTimeRegressed", "for", "15m"),
    "idle_iterations": ("componentIdle", "iterations", "10"),
    "idle_for": ("componentIdle", "for", "5m"),
    "reconcile_errors_window": ("reconcileFailing", "window", "5m"),
    "reconcile_errors_for": ("reconcileFailing", "for", "10m"),
}

HELM_SETTINGS = AlertSettings(
    **{field: f"{{{{ {VALUES_PATH}.{rule}.{key} }}}}" for field, (rule, key, _) in VALUES.items()}
)
DEFAULT_SETTINGS = AlertSettings(**{field: default for field, (_, _, default) in VALUES.items()})


@dataclasses.dataclass(frozen=True)
class AlertRule:
    name: str
    expr: str
    duration: str
    """The rule's `for`: how long the expression must hold before the alert fires."""
    severity: str
    cause: str
    """A short name of what is wrong, as the `cause` label (for routing and silences)."""
    summary: str
    description: str
    """Prometheus templates ({{ $labels.rljob }}) name the job; the text ends with what to do."""

    def as_rule(self) -> dict[str, Any]:
        return {
            "alert": self.name,
            "expr": self.expr,
            "for": self.duration,
            "labels": {"severity": self.severity, "cause": self.cause},
            "annotations": {"summary": self.summary, "description": self.description},
        }


JOB_NAME = "{{ $labels.namespace }}/{{ $labels.rljob }}"


def alert_rules(settings: AlertSettings = DEFAULT_SETTINGS) -> list[AlertRule]:
    s = settings
    free_gpus = f"sum({series(m.NODEGROUP_GPUS, state=equals('free'))})"
    waiting = series(m.JOB_WAITING_SECONDS)
    last_step = series(m.JOB_LAST_STEP_SECONDS)
    errors = series(m.RECONCILE_ERRORS)
    return [
        AlertRule(
            name="RLJobQueuedWithFreeCapacity",
            # The metrics do not say which node groups a job may use, so the GPUs the waiting job asks for are
            # compared with the free GPUs of all node groups: the alert says "capacity exists that the job is not
            # given", and the reason (a node group or topology level it cannot use, a quota) is for `kubectl
            # rlplace why` to tell.
            expr=(
                f"({waiting} > {s.queued_waiting_seconds}) and on (namespace, rljob) "
                f"({series(m.JOB_REQUESTED_GPUS)} <= on () group_left () {free_gpus})"
            ),
            duration=s.queued_for,
            severity="warning",
            cause="queued-with-free-capacity",
            summary=f"RLJob {JOB_NAME} waits for admission while enough GPUs are free",
            description=(
                f"RLJob {JOB_NAME} has waited {{{{ $value | humanizeDuration }}}} for admission although the node "
                "groups have at least as many free GPUs as it needs. Run `kubectl rlplace why "
                "{{ $labels.rljob }} -n {{ $labels.namespace }}`: the free GPUs may be on nodes it cannot use "
                "(node group, racks, taints) or its queue may be blocked by an earlier job."
            ),
        ),
        AlertRule(
            name="RLJobBindingMismatch",
            expr=f"{series(m.JOB_BINDING_VERIFIED)} == 0",
            duration=s.binding_mismatch_for,
            severity="critical",
            cause="binding-mismatch",
            summary=f"RLJob {JOB_NAME} runs processes on other GPUs than its plan",
            description=(
                f"A process of RLJob {JOB_NAME} found from inside that its node or GPUs differ from its plan "
                "(BindingVerified False). Its step times and memory use are not what the plan predicts. Run "
                "`kubectl rlplace why {{ $labels.rljob }} -n {{ $labels.namespace }}` for the process, then check "
                "the node's device plugin or DRA driver: the job is not restarted (an attempt on the same nodes "
                "would fail the same way)."
            ),
        ),
        AlertRule(
            name="RLJobStepTimeRegressed",
            expr=(
                f"{last_step} > {s.step_regression_ratio} * "
                f"quantile_over_time(0.5, {last_step}[{s.step_regression_window}])"
            ),
            duration=s.step_regression_for,
            severity="warning",
            cause="step-time-regressed",
            summary=f"RLJob {JOB_NAME} iterations got slower",
            description=(
                f"The latest iteration of RLJob {JOB_NAME} took {{{{ $value | humanizeDuration }}}}, more than "
                f"{s.step_regression_ratio} times its median over {s.step_regression_window}. Open the job "
                "dashboard: a component whose busy seconds grew is the cause (a slow node, a replaced rank on "
                "another node group); a new bottleneck may need a re-placement."
            ),
        ),
        AlertRule(
            name="RLJobComponentIdle",
            expr=f"{series(m.COMPONENT_IDLE_STREAK)} >= {s.idle_iterations}",
            duration=s.idle_for,
            severity="info",
            cause="component-idle",
            summary=f"Component {{{{ $labels.component }}}} of RLJob {JOB_NAME} sits idle",
            description=(
                f"Component {{{{ $labels.component }}}} of RLJob {JOB_NAME} was idle over half of each of its "
                "last {{ $value }} iterations: its GPUs wait on another component. A placement that shares its "
                "GPUs with the bottleneck (collocated or hybrid), or fewer of its GPUs, uses them better; "
                "`rlplace autotune` with the job's profile suggests one."
            ),
        ),
        AlertRule(
            name="RLPlaceOperatorReconcileFailing",
            expr=(f"sum {by(m.RECONCILE_ERRORS, 'trigger', 'kind')} (rate({errors}[{s.reconcile_errors_window}])) > 0"),
            duration=s.reconcile_errors_for,
            severity="warning",
            cause="reconcile-failing",
            summary="The rlplace operator's looks at jobs fail ({{ $labels.kind }}, trigger {{ $labels.trigger }})",
            description=(
                "The operator's looks at RLJobs (trigger {{ $labels.trigger }}) fail at {{ $value }} per second "
                "with kind {{ $labels.kind }}: kind=api means the API server refused a call (the operator "
                "dashboard's API errors by code; check its RBAC and the API server), kind=error anything else "
                "(the operator's log names the job and the error). Jobs keep their state but are not advanced."
            ),
        ),
    ]


def alert_exprs(settings: AlertSettings = DEFAULT_SETTINGS) -> list[tuple[str, str]]:
    """(alert name, PromQL) of every rule with concrete settings, for the e2e test that evaluates them."""
    return [(rule.name, rule.expr) for rule in alert_rules(settings)]


def chart_values(settings: AlertSettings) -> dict[str, dict[str, str | int | float]]:
    """`settings` as the chart's `metrics.prometheusRule` values (numbers as numbers, which the schema asks for), for
    a values file of a test that installs the chart with its own thresholds."""
    values: dict[str, dict[str, str | int | float]] = {}
    for field, (rule, key, _) in VALUES.items():
        text = getattr(settings, field)
        value: str | int | float = text
        if re.fullmatch(r"[0-9]+", text):
            value = int(text)
        elif re.fullmatch(r"[0-9]*\.[0-9]+", text):
            value = float(text)
        values.setdefault(rule, {})[key] = value
    return values


#: A Prometheus template action ({{ $labels.rljob }}, {{ $value }}); the settings' Helm actions start with .Values.
_PROMETHEUS_TEMPLATE = re.compile(r"\{\{(?! \.Values\.).*?\}\}")


def _escape_for_helm(text: str) -> str:
    """Prometheus's own templates kept through Helm's `tpl` as literal text; the settings' actions left to Helm."""
    return _PROMETHEUS_TEMPLATE.sub(lambda match: "{{`" + match.group(0) + "`}}", text)


def render_for_helm() -> str:
    """The chart's rules file: the PrometheusRule's spec with Helm placeholders for the settings, rendered by
    templates/prometheusrule.yaml through `tpl`."""
    rules = []
    for rule in alert_rules(HELM_SETTINGS):
        fields = rule.as_rule()
        fields["annotations"] = {key: _escape_for_helm(text) for key, text in fields["annotations"].items()}
        rules.append(fields)
    header = (
        "# Generated by `python -m rlplace_operator.monitoring` from operator/rlplace_operator/monitoring/alerts.py;\n"
        "# no hand edits. templates/prometheusrule.yaml renders it with Helm's `tpl`: the .Values actions are the\n"
        "# chart's settings, and the actions that quote a raw string are Prometheus's own templates kept as text.\n"
    )
    # A wide line width: a Helm action broken over two lines would not parse.
    return header + yaml.safe_dump({"groups": [{"name": GROUP_NAME, "rules": rules}]}, sort_keys=False, width=100000)

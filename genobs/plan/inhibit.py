"""Alertmanager inhibition rules (part of the `plan` stage), so one incident pages once:
- a critical alert silences the warning of the same alert and labels;
- a fast SLO burn silences the slow burn of the same SLO;
- an SLO burn silences the threshold alerts of the same signal and labels (a fast burn every
  severity, a slow burn warnings): the burn already says users are hurt on that signal;
- a hang silences its symptoms (queue, waiting, TTFT, E2E, KV saturation; the list is
  `hang_symptoms` in signals.yaml): EngineHung those of its own instance (the replica
  outliers, or every symptom when `instance` is a grouping label), FleetNoProgress those
  of its model (alert keys; the rules name the engine's alerts, VllmEngineHung on vLLM).
Every rule is restricted to this spec's alert names and selector."""

from __future__ import annotations

from genobs import promql as q
from genobs.plan.alerts import signal_data
from genobs.plan.context import Context
from genobs.plan.model import AlertRule

_BURNS = ("ErrorBudgetBurnFast", "ErrorBudgetBurnSlow")


def _matcher(label: str, op: str, value: str) -> str:
    return f"{label}{op}{q.quote(value)}"


def _names(names: set[str]) -> str:
    return _matcher("alertname", "=~", q.any_of(sorted(names)))


def _slo(a: AlertRule) -> bool:
    return any(label == "slo" for label, _ in a.labels)


def build_inhibit_rules(ctx: Context, alerts: list[AlertRule]) -> tuple[dict, ...]:
    fixed = [_matcher(k, "=", v) for k, v in ctx.selector]
    own = _names({a.name for a in alerts})
    rules = [
        {
            "source_matchers": [own, 'severity="critical"', *fixed],
            "target_matchers": [own, 'severity=~"warning|info"', *fixed],
            "equal": ["alertname", *ctx.group],
        }
    ]
    fast = {a.name for a in alerts if a.name.endswith(_BURNS[0])}
    slow = {a.name for a in alerts if a.name.endswith(_BURNS[1])}
    if fast and slow:
        rules.append(
            {
                "source_matchers": [_names(fast), *fixed],
                "target_matchers": [_names(slow), *fixed],
                "equal": ["slo", *ctx.group],
            }
        )
    # threshold alerts (no `slo` label) of the signals an SLO burns on
    burned = {a.signal for a in alerts if a.name in fast | slow}
    thresholds = {a.name for a in alerts if a.signal in burned and not _slo(a)}
    for burns, severities in ((fast, ""), (slow, "warning|info")):
        if burns and thresholds:
            target = [_names(thresholds), *([_matcher("severity", "=~", severities)] if severities else []), *fixed]
            rules.append(
                {
                    "source_matchers": [_names(burns), *fixed],
                    "target_matchers": target,
                    "equal": ["signal", *ctx.group],
                }
            )
    data = signal_data()
    symptoms = {a.name for a in alerts if a.signal in data["hang_symptoms"] and not _slo(a)}
    # an alert without `instance` never equals a source that has one: per-instance symptoms only
    per_instance = {
        a.name
        for a in alerts
        if a.name in symptoms and ("instance" in ctx.group or data["alerts"].get(a.key, {}).get("per_instance"))
    }
    names = {a.name for a in alerts}
    hangs = (("EngineHung", ctx.where.replica, per_instance), ("FleetNoProgress", ctx.group, symptoms))
    for key, labels, targets in hangs:
        hang = ctx.alert(key)
        if hang in names and targets:
            rules.append(
                {
                    "source_matchers": [_matcher("alertname", "=", hang), *fixed],
                    "target_matchers": [_names(targets), *fixed],
                    "equal": list(labels),
                }
            )
    return tuple(rules)

"""Alertmanager inhibition rules (part of the `plan` stage): a critical alert
silences the warning of the same alert and labels; a fast SLO burn silences the
slow burn of the same SLO."""

from __future__ import annotations

from genobs import promql as q
from genobs.plan.context import Context
from genobs.plan.model import AlertRule


def _matcher(label: str, op: str, value: str) -> str:
    return f"{label}{op}{q.quote(value)}"


def build_inhibit_rules(ctx: Context, alerts: list[AlertRule]) -> tuple[dict, ...]:
    # restrict every rule to this spec's alerts: its alert names and selector labels
    fixed = [_matcher(k, "=", v) for k, v in ctx.selector]
    names = sorted({a.name for a in alerts})
    own = _matcher("alertname", "=~", q.any_of(names))
    rules = [
        {
            "source_matchers": [own, 'severity="critical"', *fixed],
            "target_matchers": [own, 'severity=~"warning|info"', *fixed],
            "equal": ["alertname", *ctx.group],
        }
    ]
    fast = sorted({a.name for a in alerts if a.name.endswith("ErrorBudgetBurnFast")})
    slow = sorted({a.name for a in alerts if a.name.endswith("ErrorBudgetBurnSlow")})
    if fast and slow:
        rules.append(
            {
                "source_matchers": [_matcher("alertname", "=~", q.any_of(fast)), *fixed],
                "target_matchers": [_matcher("alertname", "=~", q.any_of(slow)), *fixed],
                "equal": ["slo", *ctx.group],
            }
        )
    return tuple(rules)

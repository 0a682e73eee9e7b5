"""How long a page outlives its condition (part of the `plan` stage). A page reads series that
vanish when the service stops reporting: a crashed server takes its SLO events and its held
requests with it, so a burn or hang page would resolve in the middle of an outage, minutes
before ServingCapacityLost (which waits its `for` on `up == 0`) takes over. One missed scrape
does the same for a moment. Every page (severity critical) therefore keeps firing for the
hand-over time: the capacity page's `for`, plus the scrape and evaluations that pass before it
goes pending (at least a minute)."""

from __future__ import annotations

from dataclasses import replace

from genobs.plan.model import AlertRule, RuleGroup
from genobs.units import prom_duration_seconds

# the capacity page's default `for` (signals.yaml ServingCapacityLost) where the spec drops it
CAPACITY_FOR = "5m"
MIN_SLACK_SECONDS = 60


def hold(capacity_for: str | None, evaluation_interval: str) -> str:
    """keep_firing_for of every page: 5m + 1m at the defaults."""
    slack = max(MIN_SLACK_SECONDS, 2 * prom_duration_seconds(evaluation_interval))
    seconds = int(prom_duration_seconds(capacity_for or CAPACITY_FOR) + slack)
    minutes, rest = divmod(seconds, 60)
    return (f"{minutes}m" if minutes else "") + (f"{rest}s" if rest else "")


def with_hold(groups: tuple[RuleGroup, ...], keep: str) -> tuple[RuleGroup, ...]:
    """Every critical alert of `groups` with keep_firing_for `keep`."""

    def held(rule):
        if isinstance(rule, AlertRule) and rule.severity == "critical":
            return replace(rule, keep_firing_for=keep)
        return rule

    return tuple(replace(g, rules=tuple(held(r) for r in g.rules)) for g in groups)

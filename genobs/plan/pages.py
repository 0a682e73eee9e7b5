"""How long an alert outlives its condition (part of the `plan` stage). A page reads series that
vanish when the service stops reporting: a crashed server takes its SLO events and its held
requests with it, so a burn or hang page would resolve in the middle of an outage, minutes
before ServingCapacityLost (which waits its `for` on `up == 0`) takes over. Every page (severity
critical) therefore keeps firing for the hand-over time: the capacity page's `for`, plus the
scrape and evaluations that pass before it goes pending (at least a minute).

One missed scrape does the same for a moment: Prometheus marks every series of the failed
scrape stale, so for one evaluation a rule that reads a gauge as an instant vector (an SLO's
model marker, the held requests) has no input. Measured on a real Prometheus
(tests/test_missed_scrape.py), a slow-burn warning then resolves and fires again: a resolved
notification and a new one for nothing. Every other alert keeps firing for that slack alone
(at least a minute), which delays its resolution by as much."""

from __future__ import annotations

from dataclasses import replace

from genobs.plan.model import AlertRule, RuleGroup
from genobs.units import prom_duration_seconds

# the capacity page's default `for` (signals.yaml ServingCapacityLost) where the spec drops it
CAPACITY_FOR = "5m"
MIN_SLACK_SECONDS = 60


def _duration(seconds: float) -> str:
    minutes, rest = divmod(int(seconds), 60)
    return (f"{minutes}m" if minutes else "") + (f"{rest}s" if rest else "")


def slack(evaluation_interval: str) -> str:
    """keep_firing_for of warnings: a missed scrape and the evaluations around it (1m at the defaults)."""
    return _duration(max(MIN_SLACK_SECONDS, 2 * prom_duration_seconds(evaluation_interval)))


def hold(capacity_for: str | None, evaluation_interval: str) -> str:
    """keep_firing_for of every page: 5m + 1m at the defaults."""
    extra = max(MIN_SLACK_SECONDS, 2 * prom_duration_seconds(evaluation_interval))
    return _duration(prom_duration_seconds(capacity_for or CAPACITY_FOR) + extra)


def with_hold(groups: tuple[RuleGroup, ...], keep: str, other: str = "") -> tuple[RuleGroup, ...]:
    """Every critical alert of `groups` with keep_firing_for `keep`, every other one with `other`."""

    def held(rule):
        if isinstance(rule, AlertRule):
            return replace(rule, keep_firing_for=keep if rule.severity == "critical" else other)
        return rule

    return tuple(replace(g, rules=tuple(held(r) for r in g.rules)) for g in groups)

"""Which recording rules run at the alerts' pace: the ones an alerting rule, an SLO rule or a
capacity rule reads, directly or through other recorded series. The rest feed only dashboard
panels and are evaluated in a slower companion group: a panel over a 5m rate gains nothing from
a sample every 30 s, and every raw series those rules read is one Prometheus no longer reads
twice a minute."""

from __future__ import annotations

from genobs import promql as q
from genobs.plan.model import AlertRule, RecordingRule
from genobs.units import prom_duration_seconds

PANELS_INTERVAL_CAP_SECONDS = 60


def panels_interval(evaluation_interval: str) -> str:
    """Twice the spec's interval, at most 1m (Prometheus' default evaluation interval), never
    shorter than the spec's: 30s gives 1m."""
    base = prom_duration_seconds(evaluation_interval)
    seconds = int(max(base, min(2 * base, PANELS_INTERVAL_CAP_SECONDS)))
    return f"{seconds // 60}m" if seconds % 60 == 0 else f"{seconds}s"


def read_by(roots: list[str], rules: tuple[RecordingRule, ...]) -> set[int]:
    """Indexes of the rules the expressions `roots` read, transitively. A selector reads a rule
    when its equality matchers agree with the rule's labels: an alert on
    `…:quantile_rate5m{quantile="0.99"}` reads the p99 rule, not the p50 one."""
    by_name: dict[str, list[int]] = {}
    for i, rule in enumerate(rules):
        by_name.setdefault(rule.record, []).append(i)
    need: set[int] = set()
    todo = list(roots)
    while todo:
        for name, equal_items in q.equal_selectors(todo.pop()):
            equal = dict(equal_items)
            for i in by_name.get(name, ()):
                if i not in need and all(equal.get(k, v) == v for k, v in rules[i].labels):
                    need.add(i)
                    todo.append(rules[i].expr)
    return need


def split_recording(
    rules: tuple[RecordingRule, ...], readers: tuple[RecordingRule | AlertRule, ...]
) -> tuple[tuple[RecordingRule, ...], tuple[RecordingRule, ...]]:
    """(the rules `readers` need, in their order; the rules only panels read, in theirs)."""
    need = read_by([r.expr for r in readers], rules)
    fast = tuple(r for i, r in enumerate(rules) if i in need)
    panels = tuple(r for i, r in enumerate(rules) if i not in need)
    return fast, panels

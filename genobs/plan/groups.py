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


class Recorded(dict[str, list[RecordingRule]]):
    """Recorded name -> its rules, in order, with their label values indexed: an SLO's
    selector finds its one rule among every SLO's rules of that name without a scan."""

    def __init__(self) -> None:
        super().__init__()
        self._index: dict[str, dict[str, tuple[set[int], dict[str, set[int]]]]] = {}

    def matching(self, name: str, equal: dict[str, str]) -> list[int]:
        """Indices of the rules of `name` whose labels agree with the selector's equality matchers."""
        rules = self.get(name, [])
        if name not in self._index:
            index: dict[str, tuple[set[int], dict[str, set[int]]]] = {}
            keys = {k for rule in rules for k, _ in rule.labels}
            for k in keys:
                index[k] = ({i for i, r in enumerate(rules) if k not in dict(r.labels)}, {})
            for i, rule in enumerate(rules):
                for k, v in rule.labels:
                    index[k][1].setdefault(v, set()).add(i)
            self._index[name] = index
        found: set[int] | None = None
        for k, v in equal.items():
            entry = self._index[name].get(k)
            if entry is not None:  # rules without label k agree with any value of it
                allowed = entry[0] | entry[1].get(v, set())
                found = allowed if found is None else found & allowed
        return sorted(found) if found is not None else list(range(len(rules)))


def by_record(rules) -> Recorded:
    """Recorded name -> its rules, in order: follow() looks one up per selector."""
    out = Recorded()
    for rule in rules:
        if isinstance(rule, RecordingRule):
            out.setdefault(rule.record, []).append(rule)
    return out


def follow(roots: list[str], recorded: Recorded) -> tuple[set[tuple[str, int]], set[str]]:
    """What the expressions `roots` read, transitively: the recording rules, as (record, index
    in recorded[record]), and the names no rule records (exported series). A selector reads a
    rule when its equality matchers agree with the rule's labels: an alert on
    `…:quantile_rate5m{quantile="0.99"}` reads the p99 rule, not the p50 one."""
    rules: set[tuple[str, int]] = set()
    exported: set[str] = set()
    todo = list(roots)
    while todo:
        for name, equal_items in q.equal_selectors(todo.pop()):
            if name not in recorded:
                exported.add(name)
                continue
            for i in recorded.matching(name, dict(equal_items)):
                if (name, i) not in rules:
                    rules.add((name, i))
                    todo.append(recorded[name][i].expr)
    return rules, exported


def split_recording(
    rules: tuple[RecordingRule, ...], readers: tuple[RecordingRule | AlertRule, ...]
) -> tuple[tuple[RecordingRule, ...], tuple[RecordingRule, ...]]:
    """(the rules `readers` need, in their order; the rules only panels read, in theirs)."""
    recorded = by_record(rules)
    read, _ = follow([r.expr for r in readers], recorded)
    need = {id(recorded[name][i]) for name, i in read}
    fast = tuple(r for r in rules if id(r) in need)
    panels = tuple(r for r in rules if id(r) not in need)
    return fast, panels

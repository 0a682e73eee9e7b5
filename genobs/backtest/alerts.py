"""Backtest stage, alerts: alerting rules over the private history. Each alert's
expression is evaluated by Prometheus' engine at every evaluation of its group (query_range
at the group's interval); the `for` / `keep_firing_for` state machine of
Prometheus' rules/alerting.go then runs here, label set by label set: pending at the first
evaluation that returns the series, firing once `for` has passed while it kept returning
it, resolved at the first evaluation without it (unless `keep_firing_for` still holds)."""

from __future__ import annotations

from dataclasses import dataclass, field

from genobs.backtest.labels import Folding
from genobs.backtest.ranges import evaluations, grid
from genobs.backtest.rules import Rule
from genobs.backtest.source import Source


@dataclass(frozen=True)
class Episode:
    alert: str
    severity: str
    labels: tuple[tuple[str, str], ...]
    start: float  # the evaluation at which it fired
    end: float | None  # the evaluation at which it resolved; None: still firing at --to

    def duration(self, to: float) -> float:
        return (self.end if self.end is not None else to) - self.start


@dataclass
class _State:
    active_at: float
    fired_at: float | None = None
    keep_since: float | None = None


@dataclass
class AlertTimeline:
    rule: Rule
    episodes: list[Episode] = field(default_factory=list)
    states: dict[tuple[tuple[str, str], ...], _State] = field(default_factory=dict)

    def step(self, ts: float, present: set[tuple[tuple[str, str], ...]]) -> None:
        """One evaluation at `ts` with the label sets the expression returned."""
        r = self.rule
        for labels in present:
            s = self.states.get(labels)
            if s is None:
                s = self.states[labels] = _State(ts)
            s.keep_since = None
            if s.fired_at is None and ts - s.active_at >= r.hold:
                s.fired_at = ts
        for labels in [k for k in self.states if k not in present]:
            s = self.states[labels]
            if s.fired_at is not None and r.keep > 0:
                if s.keep_since is None:
                    s.keep_since = ts
                if ts - s.keep_since < r.keep:
                    continue
            if s.fired_at is not None:
                self.episodes.append(Episode(r.name, r.severity, labels, s.fired_at, ts))
            del self.states[labels]

    def answer(self, result: list[dict], a: float, b: float, folding: Folding) -> None:
        """Step through the evaluations in [a, b] with a checked query_range answer of the rule."""
        at: dict[float, set] = {}
        for series in result:
            ident = _identity(series["metric"], self.rule, folding)
            for ts, _ in series["values"]:
                at.setdefault(round(float(ts), 3), set()).add(ident)
        for i in range(int((b - a) / self.rule.interval + 1e-9) + 1):
            ts = round(a + i * self.rule.interval, 3)
            self.step(ts, at.get(ts, set()))

    def close(self) -> None:
        for labels, s in sorted(self.states.items()):
            if s.fired_at is not None:
                self.episodes.append(Episode(self.rule.name, self.rule.severity, labels, s.fired_at, None))
        self.states.clear()


def _identity(metric: dict[str, str], rule: Rule, folding: Folding) -> tuple[tuple[str, str], ...]:
    labels = {k: v for k, v in folding.unfold(metric).items() if k != "__name__"}
    labels.update(rule.labels)  # the rule's labels win, as in Prometheus
    labels["alertname"] = rule.name
    return tuple(sorted(labels.items()))


def evaluate(
    server: Source,
    alerts: tuple[Rule, ...],
    start: float,
    end: float,
    folding: Folding,
    progress,
) -> list[Episode]:
    """Every firing episode of `alerts` between `start` and `end`, in order; the labels of
    each as the source's series carry them (`folding` unfolds what the copy folded)."""
    episodes: list[Episode] = []
    for n, rule in enumerate(alerts):
        progress(f"alerts: {n + 1}/{len(alerts)} {rule.name} ({rule.severity or 'no severity'})")
        timeline = AlertTimeline(rule)
        for a, b, result in evaluations(server, rule.expr, grid(start, rule.interval), end, rule.interval):
            timeline.answer(result, a, b, folding)
        timeline.close()
        episodes.extend(timeline.episodes)
    return sorted(episodes, key=lambda e: (e.start, e.alert, e.severity, e.labels))

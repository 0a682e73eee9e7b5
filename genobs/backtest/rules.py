"""Backtest stage, rules: the rules a spec's alerts depend on, read from the same
in-memory render `genobs build` writes (genobs.build.render_spec). Gives the recording
rules in dependency levels (a level reads only raw series and lower levels), the alerting
rules, the raw selectors the rules read (those of level 0 are evaluated on the source; the
ones alerts and higher levels read are copied, nothing else) and how much history before
--from the alerts need for their windows to be complete."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from genobs import promql as q
from genobs.units import prom_duration_seconds

DEFAULT_INTERVAL = 60.0  # Prometheus' global evaluation_interval when a group sets none


@dataclass(frozen=True)
class Rule:
    group: str
    interval: float  # seconds between evaluations of its group
    name: str  # the recorded series or the alert name
    expr: str
    labels: tuple[tuple[str, str], ...]
    alert: bool
    hold: float = 0.0  # `for`, seconds
    keep: float = 0.0  # `keep_firing_for`, seconds
    level: int = 0  # recording rules: 0 reads only raw series
    lead: float = 0.0  # recording rules: seconds before --from its first value is read

    @property
    def severity(self) -> str:
        return dict(self.labels).get("severity", "")

    def as_yaml(self) -> dict:
        return {"record": self.name, "expr": self.expr, **({"labels": dict(self.labels)} if self.labels else {})}


@dataclass(frozen=True)
class RuleSet:
    spec: str
    levels: tuple[tuple[Rule, ...], ...]  # recording rules the alerts need, by dependency level
    alerts: tuple[Rule, ...]
    raw: tuple[q.Selector, ...]  # every raw selector those rules read, sorted by name
    warmup: float  # seconds of recorded history before --from the alerts' windows reach back
    raw_reach: float  # longest range a rule reads of a raw series
    tier: str = "all"  # output.tier: an edge tier's rules only record
    copied: tuple[q.Selector, ...] = ()  # the raw selectors alerts and rules above level 0 read
    copy_reach: float = 0.0  # longest range those read of a raw series


def _seconds(value: object) -> float:
    return prom_duration_seconds(str(value)) if value else 0.0


def _ranges(expr: str) -> list[tuple[float, str]]:
    """(range seconds + offset, metric name) of every range selector; instant selectors are 0."""
    import promql_parser

    out: list[tuple[float, str]] = [(0.0, name) for name in q.metric_names(expr)]

    def visit(node: object) -> bool:
        if isinstance(node, promql_parser.MatrixSelector):
            vs = node.vector_selector
            offset = vs.offset.total_seconds() if getattr(vs, "offset", None) else 0.0
            out.append((node.range.total_seconds() + offset, vs.name))
        return True

    promql_parser.walk(q.parse(expr), visit)
    return out


def load_rules(spec_path: Path) -> RuleSet:
    """The spec rendered exactly as `genobs build` renders it; raises SpecError. The rules of
    prometheus/ only: a backend's folder (vmalert/, thanos/, mimir/) holds copies of the same
    groups, which would count every alert twice. Every tier's rules (one history holds what the
    edge records and what the global tier reads)."""
    from genobs.build import render_spec

    out = render_spec(spec_path, tier="all")
    rules: list[Rule] = []
    for name in sorted(out.documents):
        if not (name.startswith("prometheus/") and name.endswith(".rules.yaml")) or "/tests/" in name:
            continue
        for g in out.documents[name]["groups"]:  # type: ignore[index]
            interval = _seconds(g.get("interval")) or DEFAULT_INTERVAL
            for r in g["rules"]:
                labels = tuple(sorted((str(k), str(v)) for k, v in (r.get("labels") or {}).items()))
                rules.append(
                    Rule(
                        g["name"],
                        interval,
                        r.get("alert") or r["record"],
                        r["expr"],
                        labels,
                        "alert" in r,
                        _seconds(r.get("for")),
                        _seconds(r.get("keep_firing_for")),
                    )
                )
    tier = "edge" if "remote-write.yaml" in out.files else "all"  # only the edge tier writes its remote_write filter
    return _closure(out.name, rules, tier)


def _closure(spec: str, rules: list[Rule], tier: str = "all") -> RuleSet:
    records: dict[str, list[Rule]] = {}
    for r in rules:
        if not r.alert:
            records.setdefault(r.name, []).append(r)
    level: dict[str, int] = {}
    need: dict[str, float] = {}

    def visit(name: str, seen: frozenset[str]) -> None:
        if name in level or name not in records or name in seen:
            return
        lv, reach = 0, 0.0
        for r in records[name]:
            for rng, dep in _ranges(r.expr):
                if dep in records:
                    visit(dep, seen | {name})
                    lv = max(lv, level.get(dep, 0) + 1)
                    reach = max(reach, rng + need.get(dep, 0.0))
                else:
                    reach = max(reach, rng)
        level[name], need[name] = lv, reach

    alerts = [r for r in rules if r.alert]
    warmup, raw_reach = 0.0, 0.0
    for a in alerts:
        for rng, dep in _ranges(a.expr):
            visit(dep, frozenset())
            warmup = max(warmup, rng + need.get(dep, 0.0))
    lead: dict[str, float] = {}  # how far back each recorded series is read, consumers first
    by_level = sorted(level, key=lambda n: -level[n])
    for consumer in [*alerts, *(r for n in by_level for r in records[n])]:
        for rng, dep in _ranges(consumer.expr):
            if dep in records:
                start = 0.0 if consumer.alert else lead.get(consumer.name, 0.0)
                lead[dep] = max(lead.get(dep, 0.0), start + rng)
    used = [
        Rule(r.group, r.interval, r.name, r.expr, r.labels, False, level=level[r.name], lead=lead.get(r.name, 0.0))
        for r in rules
        if not r.alert and r.name in level
    ]
    raw: dict[tuple, q.Selector] = {}
    copied: dict[tuple, q.Selector] = {}  # what alerts and rules above level 0 read: the private copy
    copy_reach = 0.0
    for r in [*used, *alerts]:
        above = r.alert or r.level > 0
        for rng, dep in _ranges(r.expr):
            if dep not in records:
                raw_reach = max(raw_reach, rng)
                copy_reach = max(copy_reach, rng) if above else copy_reach
        for sel in q.vector_selectors(r.expr):
            if sel.name not in records:
                raw[(sel.name or "", sel.matchers)] = sel
                if above:
                    copied[(sel.name or "", sel.matchers)] = sel
    levels = tuple(tuple(r for r in used if r.level == lv) for lv in range(max(level.values(), default=-1) + 1))
    return RuleSet(
        spec,
        levels,
        tuple(alerts),
        tuple(raw[k] for k in sorted(raw)),
        warmup,
        raw_reach,
        tier,
        tuple(copied[k] for k in sorted(copied)),
        copy_reach,
    )


def selector_text(sel: q.Selector) -> str:
    matchers = sel.matchers
    if sel.name is None:
        return "{" + ",".join(f"{k}{op}{q.quote(v)}" for k, op, v in matchers) + "}"
    return q.selector(sel.name, [m for m in matchers if m[0] != "__name__"])


def shared_levels(rulesets: list[RuleSet]) -> tuple[tuple[Rule, ...], ...] | None:
    """The recording rules of several specs in one set of levels, when no recorded name means
    two different things (a baseline that changed only alerts); None when they clash."""
    merged: dict[str, Rule] = {}
    clash = False
    for rs in rulesets:
        for level in rs.levels:
            for r in level:
                key = f"{r.name}\0{r.expr}\0{r.labels}"
                seen = merged.get(key)
                if seen is None:
                    merged[key] = r
                elif (seen.level, seen.interval) != (r.level, r.interval):
                    clash = True
                elif r.lead > seen.lead:
                    merged[key] = r
    by_name: dict[str, set[tuple]] = {}
    for r in merged.values():
        by_name.setdefault(r.name, set()).add((r.labels, r.level))
    # one name recorded by several rules is fine (one per SLO); the same labels twice is a clash
    for name, variants in by_name.items():
        if len({labels for labels, _ in variants}) != len([r for r in merged.values() if r.name == name]):
            clash = True
    if clash:
        return None
    top = max((r.level for r in merged.values()), default=-1)
    return tuple(tuple(r for r in merged.values() if r.level == lv) for lv in range(top + 1))

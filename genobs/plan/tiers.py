"""Edge and global tiers (read by the `render` stage and `genobs scrape-config`): the same
rules, split by where they run. The edge tier (each cluster's Prometheus) records; the global
tier (a backend that holds every cluster) alerts, and records what needs days of history. The
global rules read recorded `genobs:*` series and the few raw series named in `shipped` (e.g.
`up`); the edge's remote_write keeps exactly those."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from genobs import naming
from genobs import promql as q
from genobs.plan.annotations import annotation_selectors
from genobs.plan.model import AlertRule, Plan, RecordingRule, RuleGroup

RECORDED = re.compile(rf"{naming.PREFIX}:.*")


@dataclass(frozen=True)
class Tiers:
    """A plan split for an edge and a global Prometheus: the groups each runs and what the edge ships."""

    edge: tuple[RuleGroup, ...]  # groups with their edge rules, in plan order (empty groups left out)
    global_: tuple[RuleGroup, ...]
    shipped: tuple[tuple[str, str], ...]  # (name, le regex) of the raw series the global rules read, sorted
    # (name, le regex, the selector's equality matchers) of each read: a raw series ships only from
    # the job it is read under (`up` of the spec's pods, not of every job of the cluster)
    shipped_under: tuple[tuple[str, str, tuple[tuple[str, str], ...]], ...] = ()


EDGE_HISTORY_SECONDS = 3600  # an edge Prometheus needs an hour of history (plus its rate windows), not days
_RANGE = re.compile(r"\[\s*([0-9]+[0-9smhdwy]*)\s*(?::[^\]]*)?\]")
_OFFSET = re.compile(r"\boffset\s+([0-9]+[0-9smhdwy]*)")


def history_seconds(expr: str) -> float:
    """How far back an expression reads: its longest range plus its longest offset."""
    from genobs.units import prom_duration_seconds

    ranges = [prom_duration_seconds(d) for d in _RANGE.findall(expr)]
    offsets = [prom_duration_seconds(d) for d in _OFFSET.findall(expr)]
    return max(ranges, default=0.0) + max(offsets, default=0.0)


def split(plan: Plan) -> Tiers:
    """Edge: every recording rule, so each cluster computes its own per-pod and per-model series
    in one evaluation (a rule sees the rules before it in its group, as on one Prometheus);
    except those that read more than an hour of history (day and week baselines), the SLOs'
    rules, and the rules that read them, which run on the backend that keeps days and every
    cluster. Global: those and every alerting rule. An SLO's rules read per-model series the
    edge records and ships; on the global tier its burn rates are computed where its alerts are
    evaluated, as on one Prometheus: recorded at the edge, a burn page would wait for one more
    evaluation, the edge's, then the shipping, before the global ruler saw it (measured on
    vmalert, docs/backends.md). An SLO over every cluster (`scope: global`) cannot run in any
    one of them anyway."""
    rules = [r for g in plan.groups for r in g.rules]
    recording = [r for r in rules if isinstance(r, RecordingRule)]
    recorded = {r.record for r in recording}
    slos = {id(r) for r in recording if any(k == "slo" for k, _ in r.labels)}
    long = {id(r) for r in recording if history_seconds(r.expr) > EDGE_HISTORY_SECONDS} | slos
    changed = True
    while changed:  # and whatever reads a long rule's series
        long_names = {r.record for r in recording if id(r) in long}
        grown = {id(r) for r in recording if q.metric_names(r.expr) & long_names} | long
        changed, long = grown != long, grown
    edge_ids = {id(r) for r in recording if id(r) not in long}

    def part(keep) -> tuple[RuleGroup, ...]:
        out = []
        for g in plan.groups:
            kept = tuple(r for r in g.rules if keep(r))
            if kept:
                out.append(replace(g, rules=kept))
        return tuple(out)

    edge = part(lambda r: id(r) in edge_ids)
    global_ = part(lambda r: id(r) not in edge_ids)
    shipped: dict[str, set[str]] = {}
    under: set[tuple[str, str, tuple[tuple[str, str], ...]]] = set()
    # the global rules' raw reads, and the dashboard's annotations (restarts, engine configs: one
    # series per target or engine), which the global tier's Grafana reads
    reads = [sel for g in global_ for r in g.rules for sel in q.vector_selectors(r.expr)]
    for sel in [*reads, *annotation_selectors(plan.dashboard.annotations)]:
        if sel.name and sel.name not in recorded:
            # a bucket read at one bound ships that bound only: not every bucket of every pod
            le = [v if op == "=~" else q.regex_escape(v) for k, op, v in sel.matchers if k == "le" and op in ("=", "=~")]
            shipped.setdefault(sel.name, set()).add(le[0] if le else ".*")
            where = tuple(sorted((k, v) for k, op, v in sel.matchers if op == "=" and k not in ("le", "__name__")))
            under.add((sel.name, le[0] if le else ".*", where))
    flat = {(name, ".*" if ".*" in les else le) for name, les in shipped.items() for le in les}
    return Tiers(edge, global_, tuple(sorted(flat)), tuple(sorted(under)))


def groups_of(plan: Plan, tier: str) -> tuple[RuleGroup, ...]:
    if tier == "all":
        return plan.groups
    tiers = split(plan)
    return tiers.edge if tier == "edge" else tiers.global_


def write_relabel_configs(plan: Plan) -> list[dict]:
    """remote_write `write_relabel_configs` of an edge Prometheus: keep the recorded series and
    the raw series the global rules read (a histogram's buckets only at the bounds they read)
    under the selector they read them with, drop everything else: raw engine series stay in the
    cluster, and `up` of node-exporter or kube-state-metrics is not shipped. One `keep` over
    `__name__;le;<the selectors' labels>`."""
    tiers = split(plan)
    keys = sorted({k for _, _, where in tiers.shipped_under for k, _ in where})
    any_value = "".join(";.*" for _ in keys)
    keep = [f"{naming.PREFIX}:.*;.*{any_value}"]
    for name, le, where in tiers.shipped_under:
        values = dict(where)
        scoped = "".join(f";{q.regex_escape(values[k])}" if k in values else ";.*" for k in keys)
        keep.append(f"{q.regex_escape(name)};{le}{scoped}")
    labels = ["__name__", "le", *keys]
    return [{"source_labels": labels, "separator": ";", "regex": "|".join(dict.fromkeys(keep)), "action": "keep"}]


def has_alerts(groups: tuple[RuleGroup, ...]) -> bool:
    return any(isinstance(r, AlertRule) for g in groups for r in g.rules)


# what a confirm query of the global tier's runbook says when it reads series the edge keeps
LOCAL_QUERY = "raw series: run it on the cluster's Prometheus, the edge tier does not ship them"


def global_runbook(plan: Plan) -> Plan:
    """The plan whose runbook the global tier writes: a confirm query that reads raw series the
    edge does not ship says to run it on the cluster's Prometheus (the backend has none of them)."""
    t = split(plan)
    known = {r.record for r in plan.recording_rules} | {name for name, _ in t.shipped}

    def where(caption: str, query: str) -> tuple[str, str]:
        return (f"{caption} ({LOCAL_QUERY})" if q.metric_names(query) - known else caption), query

    runbook = tuple(replace(e, confirm=tuple(where(c, query) for c, query in e.confirm)) for e in plan.runbook)
    return replace(plan, runbook=runbook)

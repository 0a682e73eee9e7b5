"""Edge and global tiers (read by the `render` stage and `genobs scrape-config`): the same
rules, split by where they can run. The edge tier (each cluster's Prometheus) holds every
recording rule that reads an engine's own series, and whatever those rules read in turn; the
global tier (a backend that holds every cluster) holds the rest, which read only recorded
`genobs:*` series and the few raw series named in `shipped` (e.g. `up`). The edge's
remote_write keeps exactly those."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from genobs import naming
from genobs import promql as q
from genobs.plan.groups import by_record, follow
from genobs.plan.model import AlertRule, Plan, RecordingRule, RuleGroup

RECORDED = re.compile(rf"{naming.PREFIX}:.*")


@dataclass(frozen=True)
class Tiers:
    edge: tuple[RuleGroup, ...]  # groups with their edge rules, in plan order (empty groups left out)
    global_: tuple[RuleGroup, ...]
    shipped: tuple[tuple[str, str], ...]  # (name, le regex) of the raw series the global rules read, sorted


def _reads_raw(expr: str, recorded: set[str]) -> bool:
    return bool(q.metric_names(expr) - recorded)


def split(plan: Plan) -> Tiers:
    rules = [r for g in plan.groups for r in g.rules]
    recorded_by = by_record(rules)
    recorded = set(recorded_by)
    edge_roots = [r for r in rules if isinstance(r, RecordingRule) and _reads_raw(r.expr, recorded)]
    # an edge rule's own inputs are computed at the edge too: the global tier receives them shipped
    closure, _ = follow([r.expr for r in edge_roots], recorded_by)
    edge_ids = {id(r) for r in edge_roots} | {id(recorded_by[name][i]) for name, i in closure}

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
    for g in global_:
        for r in g.rules:
            for sel in q.vector_selectors(r.expr):
                if sel.name and sel.name not in recorded:
                    # a bucket read at one bound ships that bound only: not every bucket of every pod
                    le = [v if op == "=~" else q.regex_escape(v) for k, op, v in sel.matchers if k == "le" and op in ("=", "=~")]
                    shipped.setdefault(sel.name, set()).add(le[0] if le else ".*")
    flat = {(name, ".*" if ".*" in les else le) for name, les in shipped.items() for le in les}
    return Tiers(edge, global_, tuple(sorted(flat)))


def groups_of(plan: Plan, tier: str) -> tuple[RuleGroup, ...]:
    if tier == "all":
        return plan.groups
    tiers = split(plan)
    return tiers.edge if tier == "edge" else tiers.global_


def write_relabel_configs(plan: Plan) -> list[dict]:
    """remote_write `write_relabel_configs` of an edge Prometheus: keep the recorded series and
    the raw series the global rules read (a histogram's buckets only at the bounds they read),
    drop everything else: raw engine series stay in the cluster. One `keep` over `__name__;le`."""
    keep = [f"{naming.PREFIX}:.*;.*", *(f"{q.regex_escape(name)};{le}" for name, le in split(plan).shipped)]
    return [{"source_labels": ["__name__", "le"], "separator": ";", "regex": "|".join(keep), "action": "keep"}]


def has_alerts(groups: tuple[RuleGroup, ...]) -> bool:
    return any(isinstance(r, AlertRule) for g in groups for r in g.rules)

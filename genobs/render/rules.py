"""Prometheus rule files as plain dicts, in the order Prometheus documents them."""

from __future__ import annotations

from genobs import naming
from genobs.plan.model import AlertRule, Plan, RecordingRule, RuleGroup


def _rule(rule: RecordingRule | AlertRule) -> dict:
    if isinstance(rule, RecordingRule):
        out: dict = {"record": rule.record, "expr": rule.expr}
        if rule.labels:
            out["labels"] = dict(rule.labels)
        return out
    out = {"alert": rule.name, "expr": rule.expr}
    if rule.for_:
        out["for"] = rule.for_
    if rule.keep_firing_for:
        out["keep_firing_for"] = rule.keep_firing_for
    return out | {"labels": dict(rule.labels), "annotations": rule.annotations()}


def render_group(group: RuleGroup) -> dict:
    return {"name": group.name, "interval": group.interval, "rules": [_rule(r) for r in group.rules]}


def render_rule_files(plan: Plan, groups: tuple[RuleGroup, ...] | None = None) -> dict[str, dict]:
    """file name (under prometheus/) -> rule-file document; `groups`: a tier's (default: every group)."""
    files: dict[str, dict] = {}
    for group in plan.groups if groups is None else groups:
        files.setdefault(naming.rule_file(plan.name, group.name), {"groups": []})["groups"].append(render_group(group))
    return files

"""Rule files for the ruler that evaluates them (the `render` stage's edge): the same groups
as prometheus/, with the group options each project documents.

- thanos: `partial_response_strategy` on every group with an alerting rule (Thanos ruler,
  docs/components/rule.md "Partial Response"; `abort` is its default and its advice for alerts).
- mimir: one file per spec with the ruler `namespace` and the groups, as `mimirtool rules
  load`/`sync` read it; `source_tenants` on every group when the spec names tenants (a
  federated rule group: Mimir's ruler with -ruler.tenant-federation.enabled).
- victoriametrics: vmalert groups with `type: prometheus`, so a vmalert whose default rule
  type is not PromQL (-rule.defaultRuleType) still reads them as PromQL/MetricsQL; without
  `keep_firing_for`, which vmalert before v1.90 refuses.
"""

from __future__ import annotations

from genobs.plan.model import AlertRule, Plan, RuleGroup
from genobs.render.inline import one_hop, recorded_by
from genobs.render.rules import render_group, render_rule_files

# the keys each backend adds to a Prometheus rule group (what promtool, which knows none, must skip)
BACKEND_KEYS = ("partial_response_strategy", "source_tenants", "type", "params")
# query arguments of every vmalert group, measured on Debian's vmalert 1.79.5 and VictoriaMetrics
# 1.79.5 (docs/backends.md): VictoriaMetrics answers an instant query near now at now minus
# -search.latencyOffset (30s by default) unless `nocache=1`; vmalert aligns each query's `time`
# down to a multiple of the group's interval (-datasource.queryTimeAlignment, on by default), up to
# one interval in the past, unless the group's `time` replaces it: empty, it is "now" to both
# VictoriaMetrics and Prometheus
VMALERT_PARAMS = {"nocache": ["1"], "time": [""]}
FOLDERS = {"thanos": "thanos", "mimir": "mimir", "victoriametrics": "vmalert"}


def _with(group: dict, **options: object) -> dict:
    """The group's name and interval, then the options, then its rules (the projects' own order)."""
    head = {"name": group["name"], "interval": group["interval"]}
    return head | options | {"rules": group["rules"]}


def _has_alerts(group: RuleGroup) -> bool:
    return any(isinstance(r, AlertRule) for r in group.rules)


def _without_keep_firing(group: dict) -> dict:
    """vmalert before v1.90 (Debian 12 ships 1.79) refuses a rule with keep_firing_for: its pages
    resolve as soon as their condition ends (docs/backends.md)."""
    rules = [{k: v for k, v in r.items() if k != "keep_firing_for"} for r in group["rules"]]
    return {**group, "rules": rules}


def backend_files(plan: Plan, groups: tuple[RuleGroup, ...], output) -> dict[str, dict]:
    """path in the output folder -> rule document, for `output.backend` (none for prometheus)."""
    backend = output.backend
    if backend == "prometheus":
        return {}
    folder = FOLDERS[backend]
    if backend == "mimir":
        rendered: list[dict] = []
        for group in groups:
            options = {"source_tenants": list(output.tenants)} if output.tenants else {}
            rendered.append(_with(render_group(group), **options))
        return {f"{folder}/{plan.name}.rules.yaml": {"namespace": output.namespace or f"genobs-{plan.name}", "groups": rendered}}
    by_name = {g.name: g for g in groups}
    rendered = render_rule_files(plan, groups)
    # vmalert: what its own files record, which its alerts read in one hop (render/inline.py)
    recorded = recorded_by([g for doc in rendered.values() for g in doc["groups"]])
    files: dict[str, dict] = {}
    for name, doc in rendered.items():
        out = []
        for group in doc["groups"]:
            if backend == "thanos":
                alerting = _has_alerts(by_name[group["name"]])
                out.append(_with(group, partial_response_strategy=output.partial_response_strategy) if alerting else group)
            else:
                group = one_hop(_without_keep_firing(group), recorded)
                out.append(_with(group, type="prometheus", params=VMALERT_PARAMS))
        files[f"{folder}/{name}"] = {"groups": out}
    return files


def prometheus_groups(document: dict) -> dict:
    """A backend's rule document as a Prometheus rule file (for promtool check rules): its
    groups without the backend's own keys, without mimir's namespace."""
    return {"groups": [{k: v for k, v in g.items() if k not in BACKEND_KEYS} for g in document["groups"]]}

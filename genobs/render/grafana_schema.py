"""Bring grafanalib's dashboard JSON to a current Grafana schema.

grafanalib 0.7.1 (the newest release) writes `schemaVersion: 12` with keys of that era;
Grafana 10/11 migrate such a dashboard on load (rows, datasource strings, the old
heatmap, target and panel keys), so an import rewrites the file and a provisioned copy
differs from what Grafana shows. This pass writes the dashboard in the shape Grafana's
migrator produces for SCHEMA_VERSION, so loading it runs no migration:

- datasources as references `{type, uid}` (schema 33/36) on panels, targets, template
  variables and annotations; rows carry none;
- the built-in "Annotations & Alerts" query Grafana adds to every dashboard;
- the heatmap in the format of Grafana's heatmap panel since 9.1 (`options.calculate:
  false` over pre-bucketed series, `yAxis.unit`), not the legacy one grafanalib writes;
- no legacy keys: `rows`, `style`, `sharedCrosshair`, `hideControls`, panel `span`,
  `height`, `minSpan`, `error`, target `intervalFactor`, `step`, `metric`, `query`,
  `target`, a variable's `current.tags`, a row's `hideTimeOverride` and `transparent`,
  and no null-valued fields (`fieldConfig.defaults.decimals/min/max`, an unset variable's
  `current`), which Grafana drops when it saves.

tests/test_grafana_schema.py type-checks the result against Grafana's own `Dashboard` type
(@grafana/schema) and lists the few places where that type is stricter than Grafana.
"""

from __future__ import annotations

SCHEMA_VERSION = 39  # Grafana 10.3 to 11.2; 11.3+ only adds migrations that change nothing here
PROMETHEUS = {"type": "prometheus", "uid": "${datasource}"}
BUILT_IN_ANNOTATION = {
    "builtIn": 1,
    "datasource": {"type": "grafana", "uid": "-- Grafana --"},
    "enable": True,
    "hide": True,
    "iconColor": "rgba(0, 211, 255, 1)",
    "name": "Annotations & Alerts",
    "type": "dashboard",
}
DASHBOARD_DROP = ("rows", "style", "sharedCrosshair", "hideControls", "gnetId", "__inputs")
PANEL_DROP = ("span", "height", "minSpan", "error", "editable", "cacheTimeout", "maxPerRow", "heatmap")
# a row is a layout element: grafanalib gives it panel display keys no row has in Grafana's schema
ROW_DROP = ("datasource", "targets", "fieldConfig", "options", "transformations", "maxDataPoints", "links")
ROW_DROP += ("hideTimeOverride", "transparent")
TARGET_DROP = ("intervalFactor", "step", "metric", "query", "target")
LEGACY_HEATMAP = (
    "cards",
    "color",
    "dataFormat",
    "hideZeroBuckets",
    "highlightCards",
    "legend",
    "reverseYBuckets",
    "tooltip",
    "xAxis",
    "xBucketNumber",
    "xBucketSize",
    "yAxis",
    "yBucketBound",
    "yBucketNumber",
    "yBucketSize",
)


def _no_nulls(d: dict) -> dict:
    return {k: v for k, v in d.items() if v is not None}


def _target(t: dict) -> dict:
    out = {k: v for k, v in _no_nulls(t).items() if k not in TARGET_DROP}
    out["datasource"] = dict(PROMETHEUS)
    return out


def _heatmap(p: dict) -> dict:
    unit = (p.get("yAxis") or {}).get("format") or "short"
    out = {k: v for k, v in p.items() if k not in LEGACY_HEATMAP}
    out["options"] = {
        "calculate": False,  # the series are already buckets (sum by (le) of a bucket rate)
        "cellGap": 1,
        "color": {
            "exponent": 0.5,
            "fill": "dark-orange",
            "mode": "scheme",
            "scale": "exponential",
            "scheme": "Oranges",
            "steps": 64,
        },
        "exemplars": {"color": "rgba(255,0,255,0.7)"},
        "filterValues": {"le": 1e-9},
        "legend": {"show": False},
        "rowsFrame": {"layout": "auto"},
        "tooltip": {"mode": "single", "showColorScale": False, "yHistogram": False},
        "yAxis": {"axisPlacement": "left", "reverse": False, "unit": unit},
    }
    out["fieldConfig"] = {
        "defaults": {
            "custom": {
                "hideFrom": {"legend": False, "tooltip": False, "viz": False},
                "scaleDistribution": {"type": "linear"},
            }
        },
        "overrides": [],
    }
    return out


def _panel(p: dict) -> dict:
    out = {k: v for k, v in _no_nulls(p).items() if k not in PANEL_DROP}
    if out["type"] == "row":
        for key in ROW_DROP:
            out.pop(key, None)
        out["panels"] = [_panel(c) for c in out.get("panels", [])]  # a collapsed row holds its panels
        return out
    if out["type"] == "heatmap":
        out = _heatmap(out)
    out["datasource"] = dict(PROMETHEUS)
    out["targets"] = [_target(t) for t in out.get("targets", [])]
    config = dict(out.get("fieldConfig") or {})
    defaults = _no_nulls(config.get("defaults") or {})  # grafanalib writes decimals/min/max: null
    if isinstance(defaults.get("custom"), dict):
        defaults["custom"] = _no_nulls(defaults["custom"])  # axisSoftMin/axisSoftMax: null
    out["fieldConfig"] = {**config, "defaults": defaults, "overrides": config.get("overrides", [])}
    return out


def _variable(v: dict) -> dict:
    out = _no_nulls(v)
    for legacy in ("tagValuesQuery", "tagsQuery", "useTags", "tags"):
        out.pop(legacy, None)
    current = {k: v for k, v in _no_nulls(out.get("current") or {}).items() if k != "tags"}
    if "text" in current and "value" in current:
        out["current"] = current
    else:  # no default chosen: Grafana picks one when the variable first loads
        out.pop("current", None)
    if out.get("type") == "query":
        out["datasource"] = dict(PROMETHEUS)
        # query variables store their query as an object since schema 36's variable refs
        out["definition"] = out["query"]
        out["query"] = {"query": out["query"], "refId": "PrometheusVariableQueryEditor-VariableQuery"}
    if out.get("type") != "interval":
        for auto in ("auto", "auto_count", "auto_min"):
            out.pop(auto, None)
    return out


def _annotation(a: dict) -> dict:
    out = dict(a)
    if isinstance(out.get("datasource"), str):
        out["datasource"] = dict(PROMETHEUS)
    return out


def current_schema(board: dict) -> dict:
    """The grafanalib dashboard dict, in the shape of schemaVersion SCHEMA_VERSION."""
    out = {k: v for k, v in _no_nulls(board).items() if k not in DASHBOARD_DROP}
    out["schemaVersion"] = SCHEMA_VERSION
    out["panels"] = [_panel(p) for p in board.get("panels", [])]
    out["templating"] = {"list": [_variable(v) for v in board.get("templating", {}).get("list", [])]}
    queries = [_annotation(a) for a in board.get("annotations", {}).get("list", [])]
    out["annotations"] = {"list": [BUILT_IN_ANNOTATION, *queries]}
    timepicker = dict(out.get("timepicker", {}))
    timepicker.pop("time_options", None)  # not read since Grafana 8; removed by later migrations
    out["timepicker"] = _no_nulls(timepicker)
    return out

"""Grafana dashboard built with grafanalib from the Plan's rows and panels."""

from __future__ import annotations

from genobs.plan.links import numbered
from genobs.plan.model import Annotation, Panel
from genobs.plan.model import Dashboard as DashboardPlan

DATASOURCE = "${datasource}"


def _panel(panel: Panel, x: int, y: int):
    import grafanalib.core as g

    targets = [
        g.Target(
            expr=t.expr,
            legendFormat=t.legend,
            refId=chr(ord("A") + i),
            format=t.format,
            datasource=DATASOURCE,
        )
        for i, t in enumerate(panel.targets)
    ]
    pos = g.GridPos(h=8, w=panel.width, x=x, y=y)
    if panel.kind == "heatmap":
        return g.Heatmap(
            title=panel.title,
            description=panel.description,
            dataSource=DATASOURCE,
            targets=targets,
            gridPos=pos,
            dataFormat="tsbuckets",
            yAxis=g.YAxis(format=panel.unit),
            tooltip=g.Tooltip(),
            legend={"show": False},
        )
    # the plan's steps start with the base colour (value None); green below everything otherwise
    base = [] if panel.thresholds and panel.thresholds[0][1] is None else [("green", None)]
    steps = [{"color": colour, "value": value} for colour, value in (*base, *panel.thresholds)]
    lines = any(value is not None for _, value in panel.thresholds)
    kwargs = {}
    if panel.min is not None:
        kwargs["valueMin"] = panel.min
    if panel.max is not None:
        kwargs["valueMax"] = panel.max
    if panel.first_bucket is not None:
        kwargs["overrides"] = [_first_bucket(panel.first_bucket)]
    return g.TimeSeries(
        title=panel.title,
        description=panel.description,
        dataSource=DATASOURCE,
        targets=targets,
        gridPos=pos,
        unit=panel.unit,
        thresholds=steps,
        # lines at the thresholds and the regions between them shaded: red on the side that fires
        thresholdsStyleMode="line+area" if lines else "off",
        legendDisplayMode="table",
        legendPlacement="bottom",
        legendCalcs=["lastNotNull", "max"],
        **kwargs,
    )


def _first_bucket(bound: float) -> dict:
    """Quantile series (legends ending in p50, p90, p95, p99) at or below the histogram's first bound
    read "<= bound": histogram_quantile interpolates inside the first bucket from 0, a number no
    request had (an idle vLLM's queue-time p99 reads 0.297 s under its 0.3 s first bound)."""
    from genobs.units import format_seconds

    text = f"≤ {format_seconds(bound)} (first bucket)"
    mapping = {"type": "range", "options": {"from": 0, "to": bound, "result": {"text": text, "index": 0}}}
    return {
        "matcher": {"id": "byRegexp", "options": ".*p(50|90|95|99)$"},
        "properties": [{"id": "mappings", "value": [mapping]}],
    }


def _annotation(a: Annotation) -> dict:
    """A Prometheus annotation query as Grafana stores it: a mark wherever `expr` returns a series."""
    return {
        "datasource": DATASOURCE,
        "enable": True,
        "expr": a.expr,
        "iconColor": a.colour,
        "name": a.name,
        "step": "60s",
        "tagKeys": ",".join(a.tags),
        "textFormat": a.text,
        "titleFormat": a.title,
        "useValueForTime": False,
    }


def flat_panels(board: dict) -> list[dict]:
    """Every panel of a rendered dashboard in order, row headers included: a collapsed row
    holds its own panels, which follow it here as they do on screen once it is opened."""
    out = []
    for p in board.get("panels", []):
        out.append(p)
        if p.get("type") == "row" and p.get("collapsed"):
            out.extend(p.get("panels", []))
    return out


def render_dashboard(plan: DashboardPlan) -> dict:
    from genobs.render.grafana_schema import current_schema

    return current_schema(plain_json(grafanalib_dashboard(plan)))


def grafanalib_dashboard(plan: DashboardPlan):
    """The dashboard as grafanalib objects."""
    import grafanalib.core as g

    templates = [
        g.Template(name="datasource", query="prometheus", type="datasource", label="Data source", default="Prometheus"),
    ]
    for v in plan.variables:
        templates.append(
            g.Template(
                name=v.name,
                label=v.label,
                query=v.query,
                dataSource=DATASOURCE,
                includeAll=v.multi,
                multi=v.multi,
                allValue=".*" if v.multi else None,
                default="$__all" if v.multi else None,
                refresh=2,
                sort=1,
            )
        )
    panel_links = dict(plan.panel_links)
    panels: list = []
    target = panels  # where the next panel goes: the dashboard, or a collapsed row's own list
    y = x = 0
    resume = 0  # y after a collapsed row: its panels take no room until it is opened
    # ids from the plan's numbering: alerts' dashboard_url links open these panels (Grafana
    # opens the collapsed row that holds a linked panel)
    for pid, row, p in numbered(plan.rows):
        if p is None:
            if panels:
                y = resume if target is not panels else y + 8
            header = g.RowPanel(title=row.title, gridPos=g.GridPos(h=1, w=24, x=0, y=y), id=pid)
            panels.append(header)
            y += 1
            x = 0
            resume = y
            target = panels
            if row.collapsed:
                header.collapsed, header.panels = True, []
                target = header.panels
            continue
        if x + p.width > 24:
            x = 0
            y += 8
        panel = _panel(p, x, y)
        panel.id = pid
        panel.links = [{"title": t, "url": u, "targetBlank": True} for t, u in panel_links.get(p.title, ())]
        target.append(panel)
        x += p.width
    return g.Dashboard(
        title=plan.title,
        uid=plan.uid,
        tags=list(plan.tags),
        refresh=plan.refresh,
        timezone="browser",
        time=g.Time("now-6h", "now"),
        templating=g.Templating(list=templates),
        panels=panels,
        annotations=g.Annotations(list=[_annotation(a) for a in plan.annotations]),
        links=[g.DashboardLink(title="Runbook", type="link", uri=plan.runbook_url, icon="doc", targetBlank=True)]
        if plan.runbook_url
        else [],
        editable=False,
    ).auto_panel_ids()


def plain_json(obj: object) -> object:
    """grafanalib objects as the plain data json.loads(json.dumps(obj, cls=grafanalib's
    DashboardEncoder)) gives (tests/test_build.py compares both), without writing and parsing
    the text: dicts, lists for lists and tuples, every object through its to_json_data()."""
    t = type(obj)
    if t is str or t is int or t is bool or t is float or obj is None:
        return obj
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if type(k) is not str:
                raise TypeError(f"a dashboard key that is not text: {k!r}")  # JSON would make it text
            out[k] = plain_json(v)
        return out
    if isinstance(obj, (list, tuple)):
        return [plain_json(v) for v in obj]
    for plain in (str, bool, int, float):  # subclasses, as JSON text would give them back
        if isinstance(obj, plain):
            return plain(obj)
    to_json_data = getattr(obj, "to_json_data", None)
    if to_json_data is None:
        raise TypeError(f"a dashboard value of type {t.__name__} has no JSON form")
    return plain_json(to_json_data())

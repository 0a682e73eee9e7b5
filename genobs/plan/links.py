"""Links between alerts and the dashboard (part of the `plan` stage): the Grafana panel ids
the renderer assigns, and each alert's `dashboard_url` annotation, which opens the alert's
panel with the alert's own labels as dashboard variables."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import replace

from genobs.plan.model import AlertRule, Dashboard, Panel, RecordingRule, Row


def numbered(rows: tuple[Row, ...]) -> Iterator[tuple[int, Row, Panel | None]]:
    """(id, row, panel) in dashboard order; the row itself comes with panel None. Rows and
    panels share one sequence from 1, as Grafana numbers them; the renderer assigns exactly
    these ids, so a link computed here opens the same panel."""
    n = 0
    for row in rows:
        n += 1
        yield n, row, None
        for panel in row.panels:
            n += 1
            yield n, row, panel


def panel_ids(rows: tuple[Row, ...]) -> dict[str, int]:
    """Panel title -> id of its first occurrence (the key-indicator row's copy for lead
    panels); a row title -> the id of its first panel (an SLO alert opens its SLI panel)."""
    out: dict[str, int] = {}
    rows_first: dict[str, int] = {}
    for n, row, panel in numbered(rows):
        if panel is None:
            continue
        out.setdefault(panel.title, n)
        rows_first.setdefault(row.title, n)
    return {**rows_first, **out}


def slug(title: str) -> str:
    """Grafana's URL slug of a dashboard title (it redirects by uid, so only cosmetic)."""
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") or "dashboard"


def dashboard_url(base: str, board: Dashboard, panel: str) -> str:
    """Alert template of the link: `viewPanel` when the alert's panel exists, then one
    `var-<name>` per dashboard variable the alert carries as a label (Go template `if`, so an
    alert without that label, e.g. a per-target one without model_name, leaves it out instead
    of selecting an empty value); values are URL-encoded with `urlquery`."""
    url = f"{base}/d/{board.uid}/{slug(board.title)}"
    params = []
    pid = panel_ids(board.rows).get(panel)
    if pid is not None:
        params.append(f"viewPanel={pid}")
    for v in board.variables:
        params.append(f"{{{{ if $labels.{v.name} }}}}&var-{v.name}={{{{ $labels.{v.name} | urlquery }}}}{{{{ end }}}}")
    return f"{url}?{''.join(params)}" if params else url


def runbook_links(alerts, rows: tuple[Row, ...]) -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
    """Each panel links to the runbook sections of the alerts it shows (absolute runbook URLs
    only: a relative one opens nothing from Grafana). An SLO row's alerts link from its panels."""
    by_panel: dict[str, dict[str, str]] = {}
    rows_of = {row.title: [p.title for p in row.panels] for row in rows}
    for a in alerts:
        if not isinstance(a, AlertRule) or not re.match(r"^https?://", a.runbook_url, re.I):
            continue
        for title in rows_of.get(a.panel, [a.panel]):
            by_panel.setdefault(title, {}).setdefault(f"Runbook: {a.name}", a.runbook_url)
    return tuple((t, tuple(sorted(links.items()))) for t, links in sorted(by_panel.items()))


def with_dashboard_urls(
    rules: tuple[RecordingRule | AlertRule, ...], base: str | None, board: Dashboard
) -> tuple[RecordingRule | AlertRule, ...]:
    if not base:
        return rules
    return tuple(
        replace(r, dashboard_url=dashboard_url(base, board, r.panel)) if isinstance(r, AlertRule) else r
        for r in rules
    )

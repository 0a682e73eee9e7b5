"""`genobs backtest --plot`: the timeline PNG. One row per alert and severity that fired:
the signal the alert watches (the left side of its first threshold comparison, e.g. TTFT
p99, as the private Prometheus evaluated it) with the threshold as a dashed line, and the
episodes as bars below it over the whole range (baseline episodes in a second lane)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from genobs.backtest.rules import Rule
from genobs.backtest.source import Source

POINTS = 800  # points per signal line: the PNG is ~1000 px wide
COMPARISONS = (">", ">=", "<", "<=")


@dataclass(frozen=True)
class Signal:
    expr: str
    threshold: float
    lines: tuple[tuple[tuple[float, ...], tuple[float, ...]], ...]  # (times, values) per series


def watched(expr: str) -> tuple[str, float] | None:
    """(signal expression, threshold) of the first `signal > number` comparison, depth first."""
    import promql_parser

    from genobs import promql as q

    def visit(node) -> tuple[str, float] | None:
        if isinstance(node, promql_parser.ParenExpr):
            return visit(node.expr)
        if isinstance(node, promql_parser.BinaryExpr):
            if str(node.op) in COMPARISONS and isinstance(node.rhs, promql_parser.NumberLiteral):
                return node.lhs.prettify(), float(node.rhs.val)
            return visit(node.lhs) or visit(node.rhs)
        return None

    return visit(q.parse(expr))


def signals(server: Source, alerts: list[Rule], start: float, end: float) -> dict[tuple[str, str], Signal]:
    """The watched signal of each alert, sampled at about POINTS points over the range."""
    step = max(min(r.interval for r in alerts), (end - start) / POINTS) if alerts else 60.0
    out: dict[tuple[str, str], Signal] = {}
    for rule in alerts:
        found = watched(rule.expr)
        if found is None:
            continue
        expr, threshold = found
        params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:.0f}"}
        data = server.ask("query_range", params, True)
        lines = []
        for series in data["result"][:10]:  # type: ignore[index]  (ask checked it is a matrix)
            points = [(float(t), float(v)) for t, v in series["values"]]
            lines.append((tuple(t for t, _ in points), tuple(v for _, v in points)))
        out[(rule.name, rule.severity)] = Signal(expr, threshold, tuple(lines))
    return out


def timeline_chart(path: Path, run) -> None:  # noqa: ANN001 (report.Run)
    from datetime import datetime, timezone

    from genobs.gates.plot import _pyplot, save

    plt = _pyplot()
    import matplotlib.dates as mdates

    c, b = run.candidate, run.baseline
    keys = list(dict.fromkeys((e.alert, e.severity) for e in [*c.episodes, *(b.episodes if b else ())]))
    rows = max(1, len(keys))
    height = 0.8 + 2.1 * rows
    fig = plt.figure(figsize=(11, height), dpi=100)
    # each row: the signal (3 parts), its episode lanes (1), a gap for the next row's title (0.6)
    grid = fig.add_gridspec(rows * 3, 1, height_ratios=[3, 1, 0.6] * rows, hspace=0.1, top=1 - 0.6 / height)
    span = (datetime.fromtimestamp(run.start, timezone.utc), datetime.fromtimestamp(run.end, timezone.utc))
    colors = {"critical": "tab:red", "warning": "tab:orange"}

    def day(ts: float) -> datetime:
        return datetime.fromtimestamp(ts, timezone.utc)

    if not keys:
        ax = fig.add_subplot(grid[0:2, 0])
        ax.set_yticks([])
        ax.text(0.5, 0.5, "no alert fired", ha="center", va="center", transform=ax.transAxes)
        ax.set_xlim(*span)
    for i, (alert, severity) in enumerate(keys):
        top = fig.add_subplot(grid[3 * i, 0])
        bars = fig.add_subplot(grid[3 * i + 1, 0], sharex=top)
        signal = c.signals.get((alert, severity)) or (b.signals.get((alert, severity)) if b else None)
        if signal is not None:
            for times, values in signal.lines:
                top.plot([day(t) for t in times], values, linewidth=0.9, color="tab:blue")
            top.axhline(signal.threshold, color=colors.get(severity, "tab:gray"), linestyle="--", linewidth=1)
        top.set_title(f"{alert} ({severity})", fontsize=9, loc="left")
        top.tick_params(labelbottom=False, labelsize=7)
        top.grid(True, alpha=0.3)
        lanes = [("spec", c)] + ([("baseline", b)] if b else [])
        for lane, (_, result) in enumerate(lanes):
            eps = [e for e in result.episodes if (e.alert, e.severity) == (alert, severity)]
            spans = [(mdates.date2num(day(e.start)), (e.end if e.end is not None else run.end) - e.start) for e in eps]
            bars.broken_barh(
                [(x, w / 86400) for x, w in spans], (lane + 0.1, 0.8), color=colors.get(severity, "tab:gray")
            )
        bars.set_yticks([lane + 0.5 for lane in range(len(lanes))], [n for n, _ in lanes], fontsize=7)
        bars.set_ylim(0, len(lanes))
        bars.set_xlim(*span)
        bars.tick_params(labelsize=7, labelbottom=i == len(keys) - 1)
        bars.xaxis.set_major_formatter(mdates.DateFormatter("%m-%d %H:%M"))
        bars.grid(True, axis="x", alpha=0.3)
    title = f"genobs backtest: {c.rules.spec}, {run.days:.1f} days (UTC)"
    fig.suptitle(title + (", lanes: spec and baseline" if b else ""), fontsize=10, y=1 - 0.15 / height)
    try:
        save(fig, path, tight=True)
    finally:
        plt.close(fig)

"""`genobs compare SPEC --prometheus URL`: the same PromQL table for a baseline and a
candidate (two selectors, or two time ranges of one service), side by side, with
regressions flagged against the spec's thresholds and a tolerance. Exit 0: no
regression; 1: a regression; 2: bad options, a wrong spec, Prometheus unreachable or
no data for a side (with the hints `genobs doctor` gives)."""

from __future__ import annotations

import sys
import time
from datetime import datetime, timezone
from pathlib import Path

import click

from genobs.commands.promopts import prometheus_options, url_option

DEFAULT_WINDOW = "1h"


def _exit2(message: str) -> None:
    click.echo(message, err=True)
    sys.exit(2)


def _when(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _env(gates):
    from genobs.catalog import load_catalog, parse_version
    from genobs.gates.promtable import Env
    from genobs.units import parse_ratio, parse_seconds

    spec = gates.spec
    slos = []
    for s in spec.slos:
        if s.sli in ("ttft", "itl", "tpot", "e2e", "queue_time") and s.threshold:
            slos.append((s.name, s.sli, parse_seconds(s.threshold), parse_ratio(s.objective)))
    return Env(
        catalog=load_catalog(spec.service.engine),
        version=parse_version(gates.engine_version),
        dialect=spec.service.metric_names,
        selector=tuple(spec.service.selector.items()),
        models=tuple(spec.service.models),
        features=frozenset(k for k, on in spec.features.model_dump().items() if on),
        slos=tuple(slos),
    )


def _gateway_env(gates):
    """The gateway's Env (its profile, release and selector; the SLOs it reads), or None."""
    from genobs.catalog import load_catalog, parse_version
    from genobs.gates.promtable import Env
    from genobs.units import parse_seconds

    layer = gates.plan.gateway
    if layer is None:
        return None
    catalog, version = load_catalog(layer.engine), parse_version(layer.engine_version)
    slos = tuple(
        (s.name, s.sli, parse_seconds(s.threshold), 0.0)
        for s in gates.spec.slos
        if s.sli in layer.signals and s.threshold and catalog.name(s.sli, version) is not None
    )
    return Env(catalog, version, "colon", layer.selector, layer.models, frozenset(), slos)


def _values(server, queries, side) -> dict[str, float | None]:
    from genobs.commands.doctor import _api
    from genobs.gates.promtable import scalar

    out = {}
    for query in queries:
        data = _api(server, "query", {"query": query.expr, "time": f"{side.at:.3f}"}, post=True)
        out[query.key] = scalar(data.get("result", []))
    return out


def _no_data(server, gates, env, side) -> None:
    """No finished request for a side: say which selector, where the series are, and doctor's hints."""
    from genobs import promql as q
    from genobs.commands.doctor import _api, diagnose, hint, title
    from genobs.gates.sides import Side

    span = f"the {side.window} before {_when(side.at)}"
    lines = [f"error: no data for the {side.name} ({side.text}): no finished requests in {span}"]
    metric = env.metric("request_success" if env.has("request_success") else "requests_finished")
    base = tuple(m for m in env.matchers(side) if m[0] not in {label for label, _, _ in side.matchers})
    for label, _, _ in side.matchers:
        expr = f"count by ({label}) ({q.selector(metric, base)})"
        found = _api(server, "query", {"query": expr, "time": f"{side.at:.3f}"}, post=True)["result"]
        values = sorted({r["metric"].get(label, "") for r in found} - {""})
        if values:
            lines.append(f"  {label} values under the spec's selector: {', '.join(values[:10])}")
        elif found:
            lines.append(f"  the spec's series carry no {label} label")
    spec_only = Side(side.name, side.text, (), side.at, side.window_s)
    equal = tuple((k, v) for k, op, v in env.matchers(spec_only) if op == "=")
    layer = gates.plan.gateway
    needed = gates.plan.raw_metrics - (layer.raw_metrics if layer else frozenset())
    report = diagnose(server, equal, env.models, needed, env.features, env.catalog.engine)
    for kind in dict.fromkeys(m.kind for m in report.missing):
        group = [m for m in report.missing if m.kind == kind]
        lines.append(
            f"  {title(kind, env.catalog.engine)} ({len(group)}: {', '.join(m.metric for m in group[:4])}{', ...' if len(group) > 4 else ''})"
        )
        lines.append(f"    hint: {hint(kind, group, env.dialect, env.catalog.engine)}")
    if not report.missing:
        why = "the side's matchers select none of them" if side.matchers else "the range may predate the data"
        lines.append(f"  every series the spec reads exists now under the spec's selector: {why}")
    _exit2("\n".join(lines))


def _sides(baseline, candidate, baseline_time, candidate_time, window):
    from genobs.gates.sides import Side, parse_range, parse_selector, window_seconds

    if bool(baseline) != bool(candidate) or bool(baseline_time) != bool(candidate_time):
        raise click.UsageError("give both --baseline and --candidate, or both --baseline-time and --candidate-time")
    if not baseline and not baseline_time:
        raise click.UsageError(
            "say what to compare: --baseline/--candidate selectors, --baseline-time/--candidate-time ranges, or both"
        )
    now = time.time()
    if not baseline_time:
        w = window_seconds("--window", window or DEFAULT_WINDOW)
        return [
            Side("baseline", baseline, parse_selector("--baseline", baseline), now, w),
            Side("candidate", candidate, parse_selector("--candidate", candidate), now, w),
        ]
    if window:
        raise click.UsageError("--window applies to selector comparisons; with time ranges each range is its window")
    out = []
    for name, text, sel in (("baseline", baseline_time, baseline), ("candidate", candidate_time, candidate)):
        start, end = parse_range(f"--{name}-time", text, now)
        matchers = parse_selector(f"--{name}", sel) if sel else ()
        label = f"{sel} " if sel else ""
        out.append(Side(name, f"{label}{_when(start)}..{_when(end)}", matchers, end, end - start))
    return out


def _render(gates, url, sides, rows, warnings, fmt) -> str:
    from genobs.gates.comparison import BREACH, FAILING, MISSING, REGRESSION, failed, nothing_judged, show
    from genobs.gates.kpis import fmt as fmt_value
    from genobs.gates.table import escape, render, strict_json

    bad = [r for r in rows if r.verdict in FAILING]
    layered = gates.plan.gateway is not None
    if fmt == "json":
        doc = {
            "spec": gates.name,
            "prometheus": url,
            "sides": [{"name": s.name, "selector": s.text, "at": _when(s.at), "window": s.window} for s in sides],
            "kpis": [
                {
                    "key": r.query.key,
                    "kpi": r.query.title,
                    "unit": r.query.unit,
                    "baseline": r.baseline,
                    "candidate": r.candidate,
                    "change": r.change,
                    "threshold": r.threshold,
                    "verdict": r.verdict,
                    "note": r.note,
                    **({"layer": r.query.layer} if layered else {}),
                    "expr": {"candidate": r.query.expr},
                }
                for r in rows
            ],
            "warnings": warnings,
            "verdict": "fail" if failed(rows) else "pass",
            "exit_code": 1 if failed(rows) else 0,
        }
        return strict_json(doc)
    md = fmt == "md"
    b, c = sides
    behind = f" behind {gates.plan.gateway.release}" if layered else ""
    head = escape(f"spec {gates.name} (use case {gates.use_case}, {gates.plan.engine_release}{behind}) on {url}", fmt)
    lines = [f"### genobs compare: {head}" if md else head, ""]
    for s in sides:
        lines.append(f"{'- ' if md else ''}{s.name}: {escape(s.text, fmt)} (window {s.window} ending {_when(s.at)})")
    lines.append("")
    cells = [
        [
            r.query.title,
            show(r.baseline, r.query.unit),
            show(r.candidate, r.query.unit),
            fmt_value(r.change, "%") if r.change is not None else "",
            r.threshold,
            r.verdict,
            r.note,
        ]
        + ([r.query.layer] if layered else [])
        for r in rows
    ]
    header = ["KPI", "baseline", "candidate", "change", "threshold", "verdict", "note"] + (["layer"] if layered else [])
    lines.append(render(header, cells, "md" if md else "text"))
    lines.append("")
    lines += [f"warning: {escape(w, fmt)}" for w in warnings]
    regressions = [r.query.title for r in bad if r.verdict == REGRESSION]
    breaches = [r.query.title for r in bad if r.verdict == BREACH]
    missing = [r.query.title for r in bad if r.verdict == MISSING]
    if not failed(rows):
        lines.append("verdict: no regression")
    else:
        parts = [f"{len(regressions)} regression(s): {', '.join(regressions)}"] if regressions else []
        parts += [f"{len(breaches)} threshold breach(es) as before: {', '.join(breaches)}"] if breaches else []
        parts += [f"{len(missing)} gated KPI(s) without candidate data: {', '.join(missing)}"] if missing else []
        parts += ["nothing could be judged: no KPI has data on both sides"] if nothing_judged(rows) else []
        lines.append("verdict: FAIL, " + "; ".join(parts))
    return "\n".join(lines) + "\n"


@click.command("compare")
@click.argument("spec_path", metavar="SPEC", type=click.Path(path_type=Path))
@url_option
@click.option("--baseline", metavar="SELECTOR", help="Label matchers of the baseline, e.g. model_name=old.")
@click.option("--candidate", metavar="SELECTOR", help="Label matchers of the candidate, e.g. model_name=new.")
@click.option(
    "--baseline-time", metavar="START..END", help="Time range of the baseline (RFC 3339, unix seconds or now-2h)."
)
@click.option("--candidate-time", metavar="START..END", help="Time range of the candidate.")
@click.option(
    "--window", metavar="DURATION", help=f"Evaluation window of selector comparisons (default {DEFAULT_WINDOW})."
)
@click.option(
    "--tolerance",
    default="10%",
    show_default=True,
    help="Relative change tolerated before a KPI counts as a regression.",
)
@click.option("--format", "fmt", type=click.Choice(["text", "md", "json"]), default="text", show_default=True)
@click.option(
    "--plot", "plot_path", type=click.Path(path_type=Path), help="Write a before/after PNG of the judged KPIs."
)
@prometheus_options
def compare(
    spec_path, url, baseline, candidate, baseline_time, candidate_time, window, tolerance, fmt, plot_path, **reach
) -> None:
    """Run the same KPI queries for a baseline and a candidate and flag regressions
    against SPEC's thresholds and --tolerance.

    Either two selectors over the same --window (`--baseline model_name=old
    --candidate model_name=new`), or one service over two time ranges
    (`--baseline-time now-2h..now-1h --candidate-time now-1h..now`).
    """
    from genobs.cli import fail_spec
    from genobs.commands.promopts import server_from
    from genobs.errors import SpecError
    from genobs.gates.comparison import FAILING, failed, judge, profile_warnings
    from genobs.gates.promtable import build_queries, gateway_readable, with_gateway
    from genobs.gates.sides import SideError, parse_tolerance
    from genobs.gates.thresholds import load_gates
    from genobs.promhttp import PrometheusError

    try:
        sides = _sides(baseline, candidate, baseline_time, candidate_time, window)
        tol = parse_tolerance(tolerance)
    except SideError as exc:
        _exit2(f"error: {exc}")
    if plot_path is not None:
        from genobs.gates.plot import PlotUnavailable, check_path

        try:
            check_path(plot_path)
        except PlotUnavailable as exc:
            _exit2(f"error: {exc}")
    if not spec_path.is_file():
        _exit2(f"{spec_path}: error: no such spec file")
    try:
        gates = load_gates(spec_path)
    except SpecError as exc:
        fail_spec(exc, "nothing was compared")
    env = _env(gates)
    gateway = _gateway_env(gates)
    if gateway is not None and not all(gateway_readable(s) for s in sides):
        gateway = None  # a side selects pods by a label the gateway's series do not carry
    values = {}
    try:
        server = server_from(url, **reach)
        for side in sides:
            queries = build_queries(env, side)
            if gateway is not None:
                queries = with_gateway(queries, gateway, side)
            values[side.name] = _values(server, queries, side)
            if not values[side.name].get("requests"):
                _no_data(server, gates, env, side)
    except PrometheusError as exc:
        _exit2(f"error: {exc}")
    requests = tuple(values[s.name]["requests"] * s.window_s for s in sides)
    rows = judge(gates, queries, values["baseline"], values["candidate"], tol, requests)
    warnings = profile_warnings(rows, tol)
    if gates.plan.gateway is not None and gateway is None:
        warnings.append(f"every KPI reads the pods: a side selects by labels {gates.plan.gateway.release} does not carry")
    # the table first: a chart that cannot be drawn must not lose it
    click.echo(_render(gates, server.shown, sides, rows, warnings, fmt), nl=False)
    if plot_path is not None:
        from genobs.gates.plot import PlotUnavailable, before_after_chart

        judged = [
            (r.query.title, r.baseline, r.candidate, r.verdict in FAILING)
            for r in rows
            if r.query.better != "none" and r.baseline and r.candidate is not None
        ]
        try:
            before_after_chart(plot_path, judged, f"{gates.name}: {sides[1].text} vs {sides[0].text}")
        except PlotUnavailable as exc:
            _exit2(f"error: {exc}")
    sys.exit(1 if failed(rows) else 0)

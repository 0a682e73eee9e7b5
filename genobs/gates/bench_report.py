"""`genobs benchmark` output: the workload of each run, then one KPI table, as
text, Markdown or JSON."""

from __future__ import annotations

from genobs.gates.kpis import GATING, Report, Row, fmt
from genobs.gates.runs import METRICS, Run, Workload, concurrency_text
from genobs.gates.table import escape, render, strict_json
from genobs.gates.vocabulary import NAMES, footnote


def workload_text(w: Workload) -> str:
    parts = []
    if w.input_tokens is not None or w.output_tokens is not None:
        parts.append(f"input {fmt(w.input_tokens, 'tok')}, output {fmt(w.output_tokens, 'tok')} (mean per request)")
    if w.concurrency is not None:
        parts.append(f"concurrency {concurrency_text(w)}")
    if w.request_rate:
        parts.append(f"request rate {w.request_rate}")
    if w.requests is not None:
        parts.append(f"{w.requests:g} requests" + (f" in {fmt(w.duration_s, 's')}" if w.duration_s is not None else ""))
    elif w.duration_s is not None:
        parts.append(f"duration {fmt(w.duration_s, 's')}")
    if w.streaming is not None:
        parts.append("streaming" if w.streaming else "not streaming")
    return ", ".join(parts) or "not stated"


def exported(run: Run) -> set[str]:
    """Metrics the tool itself wrote (at least one statistic not derived by genobs)."""
    return {m for m, stats in run.metrics.items() if any(not st.derived for st in stats.values())}


def _cells(row: Row, with_baseline: bool) -> list[str]:
    note = "; ".join(x for x in (f"derived: {row.derived}" if row.derived else "", row.caveat, row.note) if x)
    value = fmt(row.value, row.unit) if row.unit != "" or row.value is None else f"{row.value:g}"
    cells = [row.run, row.kpi, value]
    if with_baseline:
        base = fmt(row.baseline, row.unit) if row.baseline is not None else ""
        cells += [base, fmt(row.change, "%") if row.change is not None else ""]
    return cells + [row.threshold, row.verdict, note]


def _summary(report: Report) -> str:
    gated = [r for r in report.rows if r.verdict in GATING]
    bad = [r for r in gated if r.verdict != "pass"]
    if not gated:
        return "verdict: FAIL (nothing could be judged: the use case's KPIs need data these inputs lack)"
    if not bad:
        return f"verdict: pass ({len(gated)} gated KPIs pass)"
    return f"verdict: FAIL ({len(bad)} of {len(gated)} gated KPIs fail or have no data)"


def render_text(report: Report, fmt_name: str = "text") -> str:
    s = report.spec
    md = fmt_name == "md"

    def esc(text: str) -> str:
        return escape(text, fmt_name)

    head = esc(f"spec {s.name} (use case {s.use_case}, vLLM {s.engine_version}): {len(report.runs)} run(s)")
    lines = [f"### genobs benchmark: {head}" if md else head, ""]
    for i, rr in enumerate(report.runs, 1):
        run = rr.run
        model = f", model {run.workload.model}" if run.workload.model else ""
        lines.append(f"{'- ' if md else ''}run {i}: {esc(f'{run.path} ({run.tool}{model})')}")
        lines.append(f"{'  - ' if md else '  '}workload: {esc(workload_text(run.workload))}")
        for w in rr.warnings:
            lines.append(f"{'  - ' if md else '  '}warning: {esc(w)}")
    for b in report.baseline:
        lines.append(f"{'- ' if md else ''}baseline: {esc(f'{b.path} ({b.tool}); workload: {workload_text(b.workload)}')}")
    lines.append("")
    with_base = bool(report.baseline)
    header = ["run", "KPI", "value"] + (["baseline", "change"] if with_base else []) + ["threshold", "verdict", "note"]
    lines.append(render(header, [_cells(r, with_base) for r in report.rows], "md" if md else "text"))
    families: dict[str, set[str]] = {}
    for run in [rr.run for rr in report.runs] + report.baseline:
        if run.family in NAMES:
            families.setdefault(run.family, set()).update(exported(run))
    if families:
        lines += ["", "tool names for genobs' terms (TPOT: decode time per output token after the first, per request):"]
        lines += [f"{'- ' if md else '  '}{footnote(f, m)}" for f, m in families.items()]
    lines += ["", _summary(report)]
    return "\n".join(lines) + "\n"


def _run_json(run: Run, warnings: list[str] | None = None) -> dict:
    return {
        "path": run.path,
        "tool": run.tool,
        "workload": {k: v for k, v in vars(run.workload).items() if v not in (None, "")},
        "warnings": warnings or [],
        "names": {m: name for m, name in NAMES.get(run.family, {}).items() if m in exported(run)},
        "metrics": {
            m: {
                stat: {
                    "value": st.value,
                    "unit": METRICS[m][0],
                    **({"derived": st.derived} if st.derived else {}),
                    **({"caveat": st.caveat} if st.caveat else {}),
                }
                for stat, st in sorted(stats.items())
            }
            for m, stats in sorted(run.metrics.items())
        },
    }


def render_json(report: Report) -> str:
    doc = {
        "spec": report.spec.name,
        "use_case": report.spec.use_case,
        "runs": [_run_json(rr.run, rr.warnings) for rr in report.runs],
        "baseline": [_run_json(b) for b in report.baseline],
        "kpis": [
            {
                "run": r.run,
                "kpi": r.kpi,
                "value": r.value,
                "unit": r.unit,
                "threshold": r.threshold,
                "verdict": r.verdict,
                "note": r.note,
                "derived": r.derived,
                "caveat": r.caveat,
                "baseline": r.baseline,
                "change": r.change,
            }
            for r in report.rows
        ],
        "verdict": "fail" if report.failed else "pass",
        "exit_code": report.exit_code,
    }
    return strict_json(doc)

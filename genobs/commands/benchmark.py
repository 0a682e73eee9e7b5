"""`genobs benchmark RESULT... --spec SPEC`: judge benchmark exports by the spec's
use-case KPIs. Exit 0 when every gated KPI passes, 1 when one fails or has no data,
2 when an input cannot be read (file:field named) or the spec is wrong."""

from __future__ import annotations

import sys
from pathlib import Path

import click


def _fail_input(message: str) -> None:
    click.echo(message, err=True)
    sys.exit(2)


def _plot(report, path: Path) -> None:
    from genobs.gates.plot import sweep_chart
    from genobs.gates.sweep import RATE, load, sweep_axis, sweep_of
    from genobs.gates.thresholds import gate_data

    runs = [rr.run for rr in report.runs]
    sweep = sweep_of(runs)
    axis = sweep_axis(sweep)
    if not sweep or axis is None:
        _fail_input(
            "error: --plot needs a sweep: several runs with different, known concurrency or request rate "
            f"(got {len(runs)} run(s): concurrency {', '.join(str(r.workload.concurrency) for r in runs)})"
        )
    spec = report.spec
    key = gate_data()["plot"]["per_user_alert"]
    level, alert = spec.gate(key), spec.alert_name(key)

    def value(run, metric, stats):
        found = run.get(metric, stats)
        return found[1].value if found else None

    if level is not None:
        label = f"{spec.use_case} threshold: {level.text} ({alert} {level.severity})"
    else:
        label = ""
        click.echo(f"note: no per-user threshold drawn: {alert} is off in spec {spec.name}", err=True)
    sweep_chart(
        path,
        [load(r, axis) or 0.0 for r in sweep],
        "request rate (req/s)" if axis == RATE else "concurrency (sessions)",
        [value(r, "output_tps", ["avg"]) for r in sweep],
        [value(r, "output_tps_per_user", ["avg", "p50"]) for r in sweep],
        level.value if level is not None else None,
        label,
        f"{spec.name} ({spec.use_case}): system tok/s vs tok/s per user across concurrency",
    )


@click.command("benchmark")
@click.argument("results", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--spec",
    "spec_path",
    required=True,
    type=click.Path(path_type=Path),
    help="Spec whose use case and thresholds judge the runs.",
)
@click.option(
    "--baseline",
    "baseline_path",
    type=click.Path(path_type=Path),
    help="A result to compare with (capacity: TTFT p99 degradation).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "md", "json"]),
    default="text",
    show_default=True,
    help="md for CI comments, json for machines.",
)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(path_type=Path),
    help="Write a per-user vs system throughput PNG of a concurrency sweep.",
)
def benchmark(
    results: tuple[Path, ...], spec_path: Path, baseline_path: Path | None, fmt: str, plot_path: Path | None
) -> None:
    """Judge benchmark RESULTS (AIPerf, GuideLLM or vllm bench serve JSON) by the
    KPIs of SPEC's use case, with the thresholds SPEC's alerts resolve to.

    Several results (or one GuideLLM file with several benchmarks) at different
    concurrency form a sweep. Exit 0: every gated KPI passes; 1: one fails or the
    run lacks what it needs; 2: an input cannot be read.
    """
    from genobs.cli import fail_spec
    from genobs.errors import SpecError, printable
    from genobs.gates.bench_report import render_json, render_text
    from genobs.gates.formats import load_runs
    from genobs.gates.kpis import evaluate
    from genobs.gates.runs import MAX_RUNS, InputError
    from genobs.gates.thresholds import load_gates

    if plot_path is not None:
        from genobs.gates.plot import PlotUnavailable, check_path

        try:
            check_path(plot_path)
        except PlotUnavailable as exc:
            _fail_input(f"error: {exc}")
    if not spec_path.is_file():
        _fail_input(f"{spec_path}: error: no such spec file")
    try:
        gates = load_gates(spec_path)
    except SpecError as exc:
        fail_spec(exc, "nothing was judged")
    try:
        runs, baseline = [], []
        for path in results:
            runs += load_runs(path)
            if len(runs) > MAX_RUNS:
                raise InputError(str(path), f"more than {MAX_RUNS} runs in the inputs; judge a sweep at a time")
        baseline = load_runs(baseline_path) if baseline_path is not None else []
    except InputError as exc:
        _fail_input(printable(str(exc)))
    report = evaluate(gates, runs, baseline)
    # the verdict first: a chart that cannot be drawn (exit 2) must not lose it
    click.echo(render_json(report) if fmt == "json" else render_text(report, fmt), nl=False)
    if plot_path is not None:
        try:
            _plot(report, plot_path)
        except PlotUnavailable as exc:
            _fail_input(f"error: {exc}")
    sys.exit(report.exit_code)

"""`genobs backtest SPEC --prometheus URL --from T --to T`: the shell around the backtest
stage (genobs/backtest/): options and their checks, exit codes (2 with a clear message for
bad input or a bad server, 128+signal when stopped), and the output. Everything it prints
goes through the source's `scrub`, so no stream shows a credential."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import NoReturn

import click

from genobs.backtest.source import DEFAULT_DEADLINE
from genobs.commands.promopts import credential_options, url_option

DEFAULT_MAX_SERIES = 20_000

_scrub = [str]  # the source's scrub, once the source is known


def _say(message: str, err: bool = False, nl: bool = True) -> None:
    click.echo(_scrub[0](message), err=err, nl=nl)


def _exit2(message: str) -> NoReturn:
    _say(message, err=True)
    sys.exit(2)


def _progress(message: str) -> None:
    _say(f"backtest: {message}", err=True)


def _range(start_text: str, end_text: str) -> tuple[float, float]:
    from genobs.backtest.report import human
    from genobs.gates.sides import MAX_RANGE_S, SideError, parse_time

    now = time.time()
    try:
        start, end = parse_time("--from", start_text, now), parse_time("--to", end_text, now)
    except SideError as exc:
        _exit2(f"error: {exc}")
    if end <= start:
        _exit2(f"error: --from ({start_text}) is not before --to ({end_text}); the range must not be empty")
    if end > now + 60:
        _exit2(f"error: --to ({end_text}) is in the future; nothing has happened there yet")
    if end - start > MAX_RANGE_S:
        _exit2(f"error: the range is {human(end - start)} long; backtest at most {human(MAX_RANGE_S)}")
    if end - start < 600:
        _exit2(f"error: the range is {human(end - start)} long; backtest ranges of 10m or more")
    return start, end


def _check_plot(path: Path) -> None:
    from genobs.gates.plot import PlotUnavailable, check_path, check_plotting

    try:
        check_path(path)
        check_plotting()
    except PlotUnavailable as exc:
        _exit2(f"error: {exc}")


@click.command("backtest")
@click.argument("spec_path", metavar="SPEC", type=click.Path(path_type=Path))
@url_option
@click.option("--from", "from_", required=True, metavar="TIME", help="Start: RFC 3339, unix seconds or now-7d.")
@click.option("--to", "to", default="now", show_default=True, metavar="TIME", help="End of the range.")
@click.option(
    "--baseline-spec", type=click.Path(path_type=Path), help="An older spec to backtest side by side (e.g. main's)."
)
@click.option("--format", "fmt", type=click.Choice(["table", "markdown", "json"]), default="table", show_default=True)
@click.option("--plot", "plot_path", type=click.Path(path_type=Path), help="Write a timeline PNG of the episodes.")
@click.option(
    "--max-series",
    type=click.IntRange(min=1),
    default=DEFAULT_MAX_SERIES,
    show_default=True,
    help="Refuse to pull more raw series than this.",
)
@click.option("--dry-run", is_flag=True, help="Print what would be pulled and evaluated; pull nothing.")
@click.option("--timeout", type=float, default=30.0, show_default=True, help="Seconds per HTTP request.")
@click.option(
    "--deadline",
    type=float,
    default=DEFAULT_DEADLINE,
    show_default=True,
    help="Seconds for the whole run: every request, the copy and the evaluation.",
)
@credential_options
def backtest(
    spec_path,
    url,
    from_,
    to,
    baseline_spec,
    fmt,
    plot_path,
    max_series,
    dry_run,
    timeout,
    deadline,
    bearer_token_file,
    basic_auth_user,
    basic_auth_password_file,
) -> None:
    """What SPEC's alerts would have done over the history of a live Prometheus:
    every firing episode between --from and --to, pages and warnings per day, with
    Prometheus' own evaluation (its query engine on the real samples, each group's
    interval, `for` and `keep_firing_for`). With --baseline-spec, the old spec's
    episodes side by side, so a threshold change is judged before it is merged."""
    from genobs.backtest import run as stage
    from genobs.backtest.blocks import BacktestError
    from genobs.backtest.children import Stopped, stopped_by_signals
    from genobs.backtest.report import Run, to_json, to_text
    from genobs.backtest.rules import load_rules
    from genobs.backtest.source import Deadline, Source
    from genobs.cli import fail_spec
    from genobs.commands.promopts import authorization_from
    from genobs.errors import SpecError, printable
    from genobs.promhttp import PrometheusError, check_timeout

    _scrub[0] = str
    start, end = _range(from_, to)
    if plot_path is not None:  # before the run: a chart that cannot be written must not cost one
        _check_plot(plot_path)
    for path in (spec_path, baseline_spec):
        if path is not None and not path.is_file():
            _exit2(f"{printable(str(path))}: error: no such spec file")
    try:
        candidate = load_rules(spec_path)
        baseline = load_rules(baseline_spec) if baseline_spec else None
    except SpecError as exc:
        fail_spec(exc, "nothing was backtested")
    rulesets = [r for r in (baseline, candidate) if r is not None]
    if "://" not in url:
        url = "http://" + url
    try:
        stage.check_alerts(rulesets)
        check_timeout(timeout)
        limit = Deadline.after(deadline)
        authorization = authorization_from(bearer_token_file, basic_auth_user, basic_auth_password_file)
        source = Source(url, authorization, timeout, limit)
    except (PrometheusError, BacktestError) as exc:
        _exit2(f"error: {exc}")
    _scrub[0] = source.scrub  # reports and errors never show a credential
    try:
        with stopped_by_signals():
            plan = stage.plan(source, rulesets, start, end, max_series)
            if dry_run:
                _say(plan.text(), nl=False)
                return
            doctor = f"genobs doctor {printable(str(spec_path))}"
            results = stage.run(source, plan, max_series, plot_path is not None, _progress, doctor)
    except (PrometheusError, BacktestError) as exc:
        _exit2(f"error: {exc}")
    except Stopped as exc:
        _say(f"backtest: stopped by {exc}; the private Prometheus and promtool were stopped, the copy removed", err=True)
        sys.exit(128 + exc.signum)
    run = Run(source.shown, start, end, results[-1], results[0] if baseline else None)
    # the report first: a chart that cannot be written must not lose it
    _say(to_json(run) if fmt == "json" else to_text(run, fmt), nl=False)
    if plot_path is not None:
        from genobs.backtest.plot import timeline_chart
        from genobs.gates.plot import PlotUnavailable

        try:
            timeline_chart(plot_path, run)
        except PlotUnavailable as exc:
            _exit2(f"error: {exc}")

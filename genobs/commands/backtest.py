"""`genobs backtest SPEC --prometheus URL --from T --to T`: what the spec's alerts would
have done over a live Prometheus' history. The command: options, the checks on the range
and the server (exit 2 with a clear message), then rules (backtest_rules) -> private copy
of the raw history (backtest_pull) and recorded series (backtest_tsdb) -> alert episodes
(backtest_alerts) -> report (backtest_report) and timeline PNG (backtest_plot). Everything
it prints goes through the source's `scrub`, so no stream shows a credential."""

from __future__ import annotations

import re
import shutil
import sys
import time
from pathlib import Path
from typing import NoReturn

import click

from genobs.commands.backtest_source import DEFAULT_DEADLINE
from genobs.commands.promopts import credential_options, url_option

DEFAULT_MAX_SERIES = 20_000
SCRAPE_GUESS = 15.0  # seconds between samples assumed when sizing a pull window
MAX_LOOKBACK = 86400.0  # the raw pull starts this much before the rules' first evaluation
_DURATION = re.compile(r"(?:[0-9]+(?:ms|s|m|h|d|w|y))+")

_scrub = [str]  # the source's scrub, once the source is known


def _say(message: str, err: bool = False, nl: bool = True) -> None:
    click.echo(_scrub[0](message), err=err, nl=nl)


def _exit2(message: str) -> NoReturn:
    _say(message, err=True)
    sys.exit(2)


def _progress(message: str) -> None:
    _say(f"backtest: {message}", err=True)


def _flags(source) -> dict[str, str]:
    from genobs.promhttp import PrometheusError

    data = source.ask("status/flags", {})
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise PrometheusError(f"{source}/api/v1/status/flags: the answer is not a map of flags; is it a Prometheus?")
    return data


def _lookback(source, flags: dict[str, str]) -> float:
    """Seconds of the source's --query.lookback-delta, which the private server must use too."""
    from genobs.commands.backtest_report import human
    from genobs.errors import printable
    from genobs.units import prom_duration_seconds

    text = flags.get("query.lookback-delta") or "5m"
    if not _DURATION.fullmatch(text):
        _exit2(f"error: {source} reports --query.lookback-delta='{printable(text[:40])}', which is not a duration")
    seconds = prom_duration_seconds(text)
    if seconds > MAX_LOOKBACK:
        _exit2(
            f"error: {source} runs with --query.lookback-delta={printable(text[:40])}; backtest replays a lookback "
            f"of at most {human(MAX_LOOKBACK)} (the raw history is pulled from that long before --from)"
        )
    return seconds or 300.0  # Prometheus reads 0 as its default


def _range(start_text: str, end_text: str) -> tuple[float, float]:
    from genobs.commands.backtest_report import human as format_seconds
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
        _exit2(
            f"error: the range is {format_seconds(end - start)} long; backtest at most {format_seconds(MAX_RANGE_S)}"
        )
    if end - start < 600:
        _exit2(f"error: the range is {format_seconds(end - start)} long; backtest ranges of 10m or more")
    return start, end


def _retention(source) -> str:
    """The time retention Prometheus applies ("15d"; "" when it keeps by size only)."""
    data = source.ask("status/runtimeinfo", {})
    text = data.get("storageRetention") if isinstance(data, dict) else None
    found = re.match(r"\s*((?:\d+(?:ms|s|m|h|d|w|y))+)", text) if isinstance(text, str) else None
    return found.group(1) if found else ""


def _check_retention(source, text: str, start: float) -> None:
    from genobs.commands.backtest_report import human as format_seconds
    from genobs.units import prom_duration_seconds

    keep = prom_duration_seconds(text) if text else 0.0
    if keep > 0 and start < time.time() - keep:
        oldest = time.time() - keep
        _exit2(
            f"error: --from is {format_seconds(time.time() - start)} ago, beyond the retention of {source} "
            f"({text}): nothing older than about {_when(oldest)} is kept; choose a later --from"
        )


def _when(ts: float) -> str:
    from genobs.commands.backtest_report import when

    return when(ts)


def _dry_run(rulesets, selectors, stats, start, end, pull_start, window) -> None:
    from genobs.commands.backtest_report import human as format_seconds
    from genobs.commands.backtest_rules import selector_text

    _say(f"range: {_when(start)} .. {_when(end)}")
    _say(f"raw history pulled: {_when(pull_start)} .. {_when(end)} (warm-up of the longest alert window)")
    windows = max(1, int(-(-(end - pull_start) // window)))
    _say(f"{len(selectors)} selectors, {sum(s.count for s in stats)} series, pulled in {windows} windows of {format_seconds(window)}:")
    for sel, s in zip(selectors, stats):
        _say(f"  {s.count:>6}  {selector_text(sel)}")
    for rs in rulesets:
        recorded = sum(len(level) for level in rs.levels)
        _say(
            f"spec {rs.spec}: {recorded} recording rules in {len(rs.levels)} levels, {len(rs.alerts)} alerting rules, "
            f"warm-up {format_seconds(rs.warmup)}"
        )


def _evaluate(rulesets, levels, raw: Path, work: Path, lookback: float, start, end, source, folding, plot: bool):
    """Episodes of each ruleset's alerts, over one private copy of the history that holds
    `levels` (the recording rules they read); with `plot`, the signals of those that fired."""
    from genobs.commands.backtest_alerts import evaluate
    from genobs.commands.backtest_plot import signals
    from genobs.commands.backtest_report import Result
    from genobs.commands.backtest_tsdb import PrivatePrometheus, backfill_levels

    tsdb = work / "tsdb"
    shutil.copytree(raw, tsdb)
    server = PrivatePrometheus(work, tsdb, f"{round(lookback * 1000)}ms", source.timeout, source.deadline)
    _progress(f"spec {' and '.join(rs.spec for rs in rulesets)}: evaluating")
    try:
        server.start()
        backfill_levels(server, levels, start, end, _progress)
        results = []
        for rs in rulesets:
            episodes = tuple(evaluate(server.source, rs.alerts, start, end, folding, _progress))
            fired = {(e.alert, e.severity) for e in episodes}
            shown = [a for a in rs.alerts if (a.name, a.severity) in fired] if plot else []
            results.append(Result(rs, episodes, signals(server.source, shown, start, end) if shown else {}))
        return results
    finally:
        server.stop()


def _no_alerts(rulesets) -> None:
    for rs in rulesets:
        if rs.alerts:
            continue
        if rs.tier == "edge":
            _exit2(
                f"error: spec {rs.spec} is the edge tier (output.tier: edge): its rules record and ship series, "
                "the edge tier has no alerts; backtest the spec with output.tier all or global"
            )
        _exit2(f"error: spec {rs.spec} has no alerting rules; nothing to backtest")


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
    from genobs.cli import fail_spec
    from genobs.commands.backtest_blocks import BacktestError
    from genobs.commands.backtest_children import Stopped, stopped_by_signals
    from genobs.commands.backtest_labels import named_labels
    from genobs.commands.backtest_report import Run, to_json, to_text
    from genobs.commands.backtest_rules import load_rules
    from genobs.commands.backtest_source import Deadline, Source
    from genobs.commands.promopts import authorization_from
    from genobs.errors import SpecError, printable
    from genobs.promhttp import PrometheusError, check_timeout

    _scrub[0] = str
    start, end = _range(from_, to)
    if plot_path is not None:  # before the run: a chart that cannot be written must not cost one
        from genobs.gates.plot import PlotUnavailable, check_path, check_plotting

        try:
            check_path(plot_path)
            check_plotting()
        except PlotUnavailable as exc:
            _exit2(f"error: {exc}")
    for path in (spec_path, baseline_spec):
        if path is not None and not path.is_file():
            _exit2(f"{printable(str(path))}: error: no such spec file")
    try:
        candidate = load_rules(spec_path)
        baseline = load_rules(baseline_spec) if baseline_spec else None
    except SpecError as exc:
        fail_spec(exc, "nothing was backtested")
    rulesets = [r for r in (baseline, candidate) if r is not None]
    _no_alerts(rulesets)
    if "://" not in url:
        url = "http://" + url
    try:
        check_timeout(timeout)
        limit = Deadline.after(deadline)
        authorization = authorization_from(bearer_token_file, basic_auth_user, basic_auth_password_file)
        source = Source(url, authorization, timeout, limit)
    except PrometheusError as exc:
        _exit2(f"error: {exc}")
    _scrub[0] = source.scrub  # reports and errors never show a credential
    named = named_labels(r.expr for rs in rulesets for r in [*rs.alerts, *(x for lv in rs.levels for x in lv)])
    try:
        with stopped_by_signals():
            results = _run(source, rulesets, start, end, max_series, dry_run, named, plot_path is not None, spec_path)
    except (PrometheusError, BacktestError) as exc:
        _exit2(f"error: {exc}")
    except Stopped as exc:
        _say(f"backtest: stopped by {exc}; the private Prometheus and promtool were stopped, the copy removed", err=True)
        sys.exit(128 + exc.signum)
    if results is None:
        return
    run = Run(source.shown, start, end, results[-1], results[0] if baseline else None)
    # the report first: a chart that cannot be written must not lose it
    _say(to_json(run) if fmt == "json" else to_text(run, fmt), nl=False)
    if plot_path is not None:
        from genobs.commands.backtest_plot import timeline_chart
        from genobs.gates.plot import PlotUnavailable

        try:
            timeline_chart(plot_path, run)
        except PlotUnavailable as exc:
            _exit2(f"error: {exc}")


def _run(source, rulesets, start, end, max_series, dry_run, named, plot, spec_path):
    """The episodes of each ruleset (baseline first), or None after --dry-run."""
    from genobs import scratch
    from genobs.commands.backtest_labels import Folding
    from genobs.commands.backtest_pull import pull_raw, series_stats, window_seconds
    from genobs.commands.backtest_rules import shared_levels

    shown, candidate = source.shown, rulesets[-1]
    flags = _flags(source)
    _check_retention(source, _retention(source), start)
    lookback = _lookback(source, flags)
    rule_start = int(start - max(r.warmup for r in rulesets)) - 600  # and the rules' first interval
    pull_start = rule_start - max(r.raw_reach for r in rulesets) - lookback
    selectors = tuple(sorted({(s.name or "", s.matchers): s for r in rulesets for s in r.raw}.values()))
    sizing = Folding(named)
    stats = [series_stats(source, s, pull_start, end, sizing, max_series + 1) for s in selectors]
    if sum(s.count for s in stats) > max_series:
        _exit2(
            f"error: the spec's selectors match {sum(s.count for s in stats)} series between {_when(pull_start)} "
            f"and {_when(end)}, more than --max-series {max_series}; narrow the spec's selector or models, "
            "shorten the range, or raise --max-series"
        )
    window = window_seconds(stats, SCRAPE_GUESS)
    if dry_run:
        _dry_run(rulesets, selectors, stats, start, end, pull_start, window)
        return None
    if not sum(series_stats(source, s, start, end, sizing, 1).count for s in selectors):
        _exit2(
            f"error: no data: none of the {len(selectors)} series selectors of {candidate.spec} has samples "
            f"on {shown} between {_when(start)} and {_when(end)}; check the range and `genobs doctor {spec_path}`"
        )
    with scratch.make(scratch.BACKTEST, "genobs backtest: a private copy of a Prometheus' history") as tmp:
        work = Path(tmp)
        raw = work / "raw"
        raw.mkdir()
        folding = Folding(named, work / "folded.sqlite")
        try:
            copied = pull_raw(
                source, selectors, pull_start, end, window, work, raw, folding, _progress, max_series=max_series
            )
            if not copied.samples:
                _exit2(f"error: no data: {shown} returned no samples between {_when(pull_start)} and {_when(end)}")
            _progress(
                f"copied {copied.samples} samples of {copied.series} series "
                f"(at most {copied.peak_disk / 2**20:.1f} MiB of text on disk at once)"
            )
            shared = shared_levels(rulesets)  # a baseline that changed only alerts shares the recorded series
            batches = [(rulesets, shared)] if shared is not None else [([rs], rs.levels) for rs in rulesets]
            results = []
            for n, (batch, levels) in enumerate(batches):
                side = work / f"side{n}"
                side.mkdir()
                results += _evaluate(batch, levels, raw, side, lookback, start, end, source, folding, plot)
        finally:
            folding.close()
    return results

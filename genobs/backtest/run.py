"""The backtest pipeline between the options and the report: the source checked and the pull
planned (`plan`: its flags, retention and lookback, the series each selector matches, the
pull windows), then the run (`run`: the raw copy in a private scratch folder, a private
Prometheus per set of recording rules, the alerts' episodes). Errors are BacktestError or
PrometheusError with a message for the user; nothing here prints."""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from genobs.backtest.blocks import BacktestError
from genobs.backtest.labels import Folding, named_labels
from genobs.backtest.pull import SeriesStats, pull_raw, series_stats, window_seconds
from genobs.backtest.report import Result, human, when
from genobs.backtest.rules import RuleSet, selector_text, shared_levels
from genobs.backtest.source import Source
from genobs.errors import printable
from genobs.promhttp import PrometheusError
from genobs.promql import Selector
from genobs.units import prom_duration_seconds

SCRAPE_GUESS = 15.0  # seconds between samples assumed when sizing a pull window
MAX_LOOKBACK = 86400.0  # the raw pull starts this much before the rules' first evaluation
_DURATION = re.compile(r"(?:[0-9]+(?:ms|s|m|h|d|w|y))+")

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Plan:
    """What a run pulls: --dry-run prints it."""

    rulesets: tuple[RuleSet, ...]  # the baseline first
    start: float
    end: float
    lookback: float  # seconds, the source's query.lookback-delta
    pull_start: float
    selectors: tuple[Selector, ...]  # every raw selector the rules read
    stats: tuple[SeriesStats, ...]
    copied: tuple[Selector, ...]  # those alerts and rules above level 0 read: copied
    window: float
    named: frozenset[str]  # the label names the rules read (labels.Folding)

    def text(self) -> str:
        windows = max(1, int(-(-(self.end - self.pull_start) // self.window)))
        copied = sum(s.count for sel, s in zip(self.selectors, self.stats) if sel in self.copied)
        lines = [
            f"range: {when(self.start)} .. {when(self.end)}",
            f"raw history pulled: {when(self.pull_start)} .. {when(self.end)} (warm-up of the longest alert window)",
            f"{len(self.selectors)} selectors, {sum(s.count for s in self.stats)} series; {len(self.copied)} selectors "
            f"({copied} series) copied in {windows} windows of {human(self.window)}, the others read only by "
            "recording rules evaluated on the source:",
            *(
                f"  {s.count:>6}  {'copied   ' if sel in self.copied else 'on source'}  {selector_text(sel)}"
                for sel, s in zip(self.selectors, self.stats)
            ),
        ]
        for rs in self.rulesets:
            recorded = sum(len(level) for level in rs.levels)
            lines.append(
                f"spec {rs.spec}: {recorded} recording rules in {len(rs.levels)} levels, {len(rs.alerts)} alerting "
                f"rules, warm-up {human(rs.warmup)}"
            )
        return "\n".join(lines) + "\n"


def check_alerts(rulesets: list[RuleSet]) -> None:
    """BacktestError for a spec without alerts, saying why (the edge tier has none)."""
    for rs in rulesets:
        if rs.alerts:
            continue
        if rs.tier == "edge":
            raise BacktestError(
                f"spec {rs.spec} is the edge tier (output.tier: edge): its rules record and ship series, "
                "the edge tier has no alerts; backtest the spec with output.tier all or global"
            )
        raise BacktestError(f"spec {rs.spec} has no alerting rules; nothing to backtest")


def _flags(source: Source) -> dict[str, str]:
    data = source.ask("status/flags", {})
    if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
        raise PrometheusError(f"{source}/api/v1/status/flags: the answer is not a map of flags; is it a Prometheus?")
    return data


def _lookback(source: Source, flags: dict[str, str]) -> float:
    """Seconds of the source's --query.lookback-delta, which the private server must use too."""
    text = flags.get("query.lookback-delta") or "5m"
    if not _DURATION.fullmatch(text):
        raise BacktestError(
            f"{source} reports --query.lookback-delta='{printable(text[:40])}', which is not a duration"
        )
    seconds = prom_duration_seconds(text)
    if seconds > MAX_LOOKBACK:
        raise BacktestError(
            f"{source} runs with --query.lookback-delta={printable(text[:40])}; backtest replays a lookback of at "
            f"most {human(MAX_LOOKBACK)} (the raw history is pulled from that long before --from)"
        )
    return seconds or 300.0  # Prometheus reads 0 as its default


def _check_retention(source: Source, start: float) -> None:
    """BacktestError when --from is older than the time retention the source applies."""
    data = source.ask("status/runtimeinfo", {})
    text = data.get("storageRetention") if isinstance(data, dict) else None
    found = re.match(r"\s*((?:\d+(?:ms|s|m|h|d|w|y))+)", text) if isinstance(text, str) else None
    keep = prom_duration_seconds(found.group(1)) if found else 0.0
    if keep > 0 and start < time.time() - keep:
        raise BacktestError(
            f"--from is {human(time.time() - start)} ago, beyond the retention of {source} ({found.group(1)}): "  # type: ignore[union-attr]
            f"nothing older than about {when(time.time() - keep)} is kept; choose a later --from"
        )


def plan(source: Source, rulesets: list[RuleSet], start: float, end: float, max_series: int) -> Plan:
    """Check the source and size the pull; asks only flags, runtimeinfo and /series."""
    flags = _flags(source)
    _check_retention(source, start)
    lookback = _lookback(source, flags)
    rule_start = int(start - max(r.warmup for r in rulesets)) - 600  # and the rules' first interval
    pull_start = rule_start - max(r.copy_reach for r in rulesets) - lookback
    selectors = tuple(sorted({(s.name or "", s.matchers): s for r in rulesets for s in r.raw}.values()))
    copied = tuple(sorted({(s.name or "", s.matchers): s for r in rulesets for s in r.copied}.values()))
    named = named_labels(r.expr for rs in rulesets for r in [*rs.alerts, *(x for lv in rs.levels for x in lv)])
    sizing = Folding(named)
    stats = tuple(series_stats(source, s, pull_start, end, sizing, max_series + 1) for s in selectors)
    if sum(s.count for s in stats) > max_series:
        raise BacktestError(
            f"the spec's selectors match {sum(s.count for s in stats)} series between {when(pull_start)} "
            f"and {when(end)}, more than --max-series {max_series}; narrow the spec's selector or models, "
            "shorten the range, or raise --max-series"
        )
    window = window_seconds([s for sel, s in zip(selectors, stats) if sel in copied], SCRAPE_GUESS)
    return Plan(tuple(rulesets), start, end, lookback, pull_start, selectors, stats, copied, window, named)


def run(source: Source, p: Plan, max_series: int, plot: bool, progress: Progress, doctor: str) -> list[Result]:
    """The episodes of each ruleset, the baseline first; with `plot`, the signals of those that
    fired. `doctor` is the command that checks the spec's series, named when there is no data."""
    from genobs import scratch

    shown, spec = source.shown, p.rulesets[-1].spec
    if not sum(series_stats(source, s, p.start, p.end, Folding(p.named), 1).count for s in p.selectors):
        raise BacktestError(
            f"no data: none of the {len(p.selectors)} series selectors of {spec} has samples on {shown} "
            f"between {when(p.start)} and {when(p.end)}; check the range and `{doctor}`"
        )
    with scratch.make(scratch.BACKTEST, "genobs backtest: a private copy of a Prometheus' history") as tmp:
        work = Path(tmp)
        raw = work / "raw"
        raw.mkdir()
        folding = Folding(p.named, work / "folded.sqlite")
        try:
            copied = pull_raw(
                source, p.copied, p.pull_start, p.end, p.window, work, raw, folding, progress, max_series=max_series
            )
            progress(
                f"copied {copied.samples} samples of {copied.series} series "
                f"(at most {copied.peak_disk / 2**20:.1f} MiB of text on disk at once)"
            )
            rulesets = list(p.rulesets)
            shared = shared_levels(rulesets)  # a baseline that changed only alerts shares the recorded series
            batches = [(rulesets, shared)] if shared is not None else [([rs], rs.levels) for rs in rulesets]
            results: list[Result] = []
            for n, (batch, levels) in enumerate(batches):
                side = work / f"side{n}"
                side.mkdir()
                results += _evaluate(batch, levels, raw, side, p, source, folding, plot, progress)
            return results
        finally:
            folding.close()


def _evaluate(rulesets, levels, raw: Path, work: Path, p: Plan, source: Source, folding, plot: bool, progress):
    """Episodes of each ruleset's alerts, over one private copy of the history that holds
    `levels` (the recording rules they read); with `plot`, the signals of those that fired."""
    from genobs.backtest.alerts import evaluate
    from genobs.backtest.plot import signals
    from genobs.backtest.tsdb import PrivatePrometheus, backfill_levels, record_level

    tsdb = work / "tsdb"
    shutil.copytree(raw, tsdb)
    server = PrivatePrometheus(work, tsdb, f"{round(p.lookback * 1000)}ms", source.timeout, source.deadline)
    progress(f"spec {' and '.join(rs.spec for rs in rulesets)}: evaluating")
    if levels:  # the first level reads raw series only: evaluated where they are, its results copied
        what = f"level 1/{len(levels)} on {source}"
        record_level(source, levels[0], p.start, p.end, work, tsdb, folding, progress, what)
    try:
        server.start()
        backfill_levels(server, levels[1:], p.start, p.end, progress, 2, len(levels))
        results = []
        for rs in rulesets:
            episodes = tuple(evaluate(server.source, rs.alerts, p.start, p.end, folding, progress))
            fired = {(e.alert, e.severity) for e in episodes}
            shown = [a for a in rs.alerts if (a.name, a.severity) in fired] if plot else []
            results.append(Result(rs, episodes, signals(server.source, shown, p.start, p.end) if shown else {}))
        return results
    finally:
        server.stop()

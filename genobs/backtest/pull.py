"""Backtest stage, pull: the raw samples of the spec's selectors, copied from the user's
Prometheus into TSDB blocks. Range selectors through /api/v1/query return the stored samples
(not interpolated points); each pull window's answers are written as OpenMetrics text and
turned into blocks by `promtool tsdb create-blocks-from openmetrics` (blocks).

Pull windows are sized from the /series listing: by samples (an answer stays near
SAMPLES_PER_ANSWER) and by bytes (an answer's labels and samples under ANSWER_BYTES, a
window's text under TEXT_BYTES with the keys as the copy writes them, long unnamed labels
folded). Two requests are in flight while genobs writes the answers before them, and
promtool turns the closed files into blocks meanwhile; memory is bounded by the answers in
flight (each under promhttp's caps) and one batch of text, disk by a few files."""

from __future__ import annotations

import hashlib
import math
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from genobs.backtest.blocks import TEXT_BYTES, BacktestError, BlockWriter
from genobs.backtest.labels import Folding
from genobs.backtest.rules import selector_text
from genobs.backtest.source import Source
from genobs.promhttp import PrometheusError
from genobs.promql import Selector

SAMPLES_PER_ANSWER = 150_000  # under promhttp's caps: 32 MiB of JSON, 400,000 lists and objects (one a sample)
ANSWER_BYTES = 24 * 2**20  # an answer's labels and samples, under promhttp's 32 MiB
SAMPLE_JSON = 40  # bytes of one [time,"value"] in an answer
SAMPLE_LINE = 32  # bytes of one line's value and time in the text, besides the key
MIN_WINDOW, MAX_WINDOW = 60.0, 86400.0
# answers fetched and parsed at once: Prometheus answers one while genobs reads another
PULL_CONCURRENCY = 2
PROMTOOLS_AT_ONCE = 2  # promtool spends a bit more CPU per sample than genobs: two runs keep up with it

Progress = "Callable[[str], None]"


@dataclass(frozen=True)
class SeriesStats:
    """What the /series listing of one selector says about its pull."""

    count: int
    key_bytes: int  # the keys of its series as the copy writes them, together
    label_bytes: int  # its series' labels in an answer, together

    @property
    def line_bytes(self) -> int:
        """Bytes of text for one sample of every series."""
        return self.key_bytes + self.count * SAMPLE_LINE


def series_stats(
    source: Source, sel: Selector, start: float, end: float, folding: Folding, limit: int = 0
) -> SeriesStats:
    """Count the series of `sel` with samples in [start, end] and the bytes they cost. `limit`
    (a server that knows the parameter) keeps the answer to that many series."""
    params = {"match[]": selector_text(sel), "start": f"{start:.3f}", "end": f"{end:.3f}"}
    if limit:
        params["limit"] = str(limit)
    return stats_of(source.ask("series", params, post=True), folding, f"{source}/api/v1/series")


def stats_of(data: object, folding: Folding, where: str) -> SeriesStats:
    """SeriesStats of a /series answer's data; PrometheusError when it is not a list of label sets."""
    if not isinstance(data, list) or not all(
        isinstance(s, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in s.items()) for s in data
    ):
        raise PrometheusError(f"{where}: the answer's data is not a list of series")
    keys = labels = 0
    for metric in data:
        keys += len(folding.key(metric).encode("utf-8"))
        labels += sum(len(k) + len(v) + 6 for k, v in metric.items()) + 16
    return SeriesStats(len(data), keys, labels)


def window_seconds(stats: list[SeriesStats], scrape: float) -> float:
    """Length of one pull window: answers near SAMPLES_PER_ANSWER samples and under
    ANSWER_BYTES, a window's text under TEXT_BYTES; BacktestError when one selector's labels
    alone would fill most of an answer (every window repeats them)."""
    span = MAX_WINDOW
    for s in stats:
        if not s.count:
            continue
        room = ANSWER_BYTES - s.label_bytes
        if room < ANSWER_BYTES // 4:
            raise BacktestError(
                f"the {s.count:,} series of one selector carry {s.label_bytes / 2**20:.1f} MiB of labels, and every "
                f"pull window's answer repeats them; at most {ANSWER_BYTES * 3 // 4 // 2**20} MiB: narrow the spec's "
                "selector or drop the long labels at scrape time (labeldrop)"
            )
        span = min(span, SAMPLES_PER_ANSWER * scrape / s.count, room / (s.count * SAMPLE_JSON) * scrape)
    text = sum(s.line_bytes for s in stats)
    if text:
        span = min(span, TEXT_BYTES * scrape / text)
    return max(MIN_WINDOW, min(MAX_WINDOW, span))


def _pull_window(source: Source, sel: Selector, a: float, b: float) -> list[dict]:
    """Raw samples of `sel` in (a, b]; a window whose answer is too large is halved."""
    try:
        query = {"query": f"{selector_text(sel)}[{int(b - a)}s]", "time": f"{b:.3f}"}
        data = source.ask("query", query, True, expect="matrix")
    except PrometheusError as exc:
        if ("larger than" in str(exc) or "holds more than" in str(exc)) and b - a > 2 * 60:
            mid = a + (b - a) // 2
            return _pull_window(source, sel, a, mid) + _pull_window(source, sel, mid, b)
        raise
    return data["result"]  # type: ignore[index]  (ask checked it is a matrix)


@dataclass(frozen=True)
class Copied:
    samples: int
    series: int
    peak_disk: int  # bytes of text on disk at once


def write_answer(
    answer: list[dict],
    a: float,
    b: float,
    folding: Folding,
    writer: BlockWriter,
    seen: set[bytes],
    every: set[bytes],
    max_series: int = 0,
) -> int:
    """Write the samples in (a, b] of one checked range answer; returns how many. `seen` holds
    the series written for this window (two selectors can match one series), `every` those of
    the whole copy, counted against `max_series`."""
    total = 0
    for series in answer:
        key = folding.key(series["metric"])
        digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()
        if digest in seen:
            continue
        seen.add(digest)
        total += writer.write_series(key, series.get("values") or [], a, b)
        if max_series and digest not in every:
            every.add(digest)
            if len(every) > max_series:
                raise BacktestError(
                    f"the copy holds more than --max-series {max_series} series (the server's /series listing "
                    "counted fewer); narrow the spec's selector, shorten the range or raise --max-series"
                )
    return total


def _spans(start: float, end: float, window: float) -> Iterator[tuple[float, float]]:
    a = start
    while a < end:
        yield a, min(end, a + window)
        a += window


def pull_raw(
    source: Source,
    selectors: tuple[Selector, ...],
    start: float,
    end: float,
    window: float,
    work: Path,
    tsdb: Path,
    folding: Folding,
    progress,
    concurrency: int = PULL_CONCURRENCY,
    tools: int = PROMTOOLS_AT_ONCE,
    max_series: int = 0,
) -> Copied:
    """Copy the raw samples of `selectors` in (start, end] into blocks under `tsdb`. A series
    two selectors match is written once; with `max_series`, more distinct series than that
    (a server whose /series listing said fewer) stop the copy with a BacktestError."""
    if not selectors:
        return Copied(0, 0, 0)
    n = max(1, math.ceil((end - start) / window))
    jobs = ((a, b, sel) for a, b in _spans(start, end, window) for sel in selectors)
    writer = BlockWriter(work, tsdb, "window", tools, source.deadline)
    pool = ThreadPoolExecutor(max(1, concurrency), thread_name_prefix="genobs-pull")
    pending: deque[tuple[float, float, Future]] = deque()

    def submit() -> None:
        job = next(jobs, None)
        if job is not None:
            pending.append((job[0], job[1], pool.submit(_pull_window, source, job[2], job[0], job[1])))

    total = 0
    every: set[bytes] = set()  # 8-byte digests of the distinct series copied
    try:
        for _ in range(max(1, concurrency)):
            submit()
        for i in range(n):
            progress(f"pulling raw series: window {i + 1}/{n} ({len(selectors)} selectors)")
            seen: set[bytes] = set()
            for _ in selectors:
                a, b, future = pending.popleft()
                answer = future.result()
                submit()
                total += write_answer(answer, a, b, folding, writer, seen, every, max_series)
                del answer
        writer.close()
    except BaseException:
        writer.abort()
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return Copied(total, len(every), writer.peak_disk)

"""`genobs backtest`, step 2a: the raw samples of the spec's selectors, copied from the user's
Prometheus into TSDB blocks. Range selectors through /api/v1/query return the stored samples
(not interpolated points); each pull window's answers are written as OpenMetrics text and
turned into blocks by `promtool tsdb create-blocks-from openmetrics`.

Three things run at once, so that Prometheus answering, genobs parsing and promtool writing
blocks overlap on a machine's cores: PULL_CONCURRENCY requests of the window being written
(or of the next one), genobs turning the answers into text in order, and promtool on the
previous windows' files (PROMTOOLS_AT_ONCE at most). Memory stays bounded by the answers in
flight (each under promhttp's caps) and the few window files promtool reads, whatever the
range."""

from __future__ import annotations

import math
import os
import re
import subprocess
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from genobs.commands.backtest_rules import selector_text
from genobs.commands.backtest_tsdb import BacktestError, Progress, Source, ask, om_labels, om_value, tool
from genobs.promhttp import PrometheusError, redact
from genobs.promql import Selector
from genobs.promtool import GO_ENV

SAMPLES_PER_ANSWER = 150_000  # under promhttp's caps: 32 MiB of JSON, 400,000 lists and objects (one a sample)
MIN_WINDOW, MAX_WINDOW = 300.0, 86400.0
# answers fetched and parsed at once: Prometheus answers one while genobs reads another
PULL_CONCURRENCY = 2
PROMTOOLS_AT_ONCE = 2  # promtool spends a bit more CPU per sample than genobs: two runs keep up with it
PROMTOOL_TIMEOUT = 3600.0
_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*\Z")


def window_seconds(series: int, scrape: float) -> float:
    """Length of one pull so that an answer stays near SAMPLES_PER_ANSWER samples."""
    span = SAMPLES_PER_ANSWER * scrape / max(series, 1)
    return max(MIN_WINDOW, min(MAX_WINDOW, span))


def _pull_window(source: Source | str, sel: Selector, a: float, b: float, timeout: float) -> list[dict]:
    """Raw samples of `sel` in (a, b]; a window whose answer is too large is halved."""
    try:
        query = {"query": f"{selector_text(sel)}[{int(b - a)}s]", "time": f"{b:.3f}"}
        data = ask(source, "query", query, timeout, True, expect="matrix")
    except PrometheusError as exc:
        if ("larger than" in str(exc) or "holds more than" in str(exc)) and b - a > 2 * 60:
            mid = a + (b - a) // 2
            return _pull_window(source, sel, a, mid, timeout) + _pull_window(source, sel, mid, b, timeout)
        raise
    return data["result"]  # type: ignore[index]  (ask checked it is a matrix)


def series_text(key: str, samples: list, a: float, b: float) -> tuple[str, int]:
    """OpenMetrics lines of one series' samples in (a, b], and how many. `samples` are
    [time, "number"] pairs as promhttp checked them; each step is one pass over the whole
    list (a series holds hundreds of samples per window), then one line per sample."""
    if not samples:
        return "", 0
    times, values = zip(*samples)
    whole = set(map(type, times)) == {int}  # Prometheus writes a time without milliseconds as an integer
    # a range selector's window includes its start; min and max do not see a NaN time (JSON's
    # constants pass promhttp), a sum that is finite says there is none
    if not (math.isfinite(sum(times)) and min(times) > a and max(times) <= b):
        kept = [(t, v) for t, v in zip(times, values) if a < t <= b]
        if not kept:
            return "", 0
        times, values = zip(*kept)
    numbers = list(map(float, values))
    # repr is OpenMetrics' own spelling of a finite float; NaN and ±Inf need theirs (a sum
    # that is not finite means one of them, or an overflow: either way the careful path)
    texts = map(repr, numbers) if math.isfinite(sum(numbers)) else map(om_value, numbers)
    if whole:  # what f"{t:.3f}" writes for them, without formatting a float per sample
        return "".join([f"{key} {v} {t}.000\n" for v, t in zip(texts, times)]), len(numbers)
    return "".join([f"{key} {v} {t:.3f}\n" for v, t in zip(texts, map(float, times))]), len(numbers)


def pull_answer(source: Source | str, sel: Selector, a: float, b: float, timeout: float) -> list[tuple[str, str, int]]:
    """(series key, its OpenMetrics lines, their count) per series of `sel` in (a, b]."""
    out = []
    for series in _pull_window(source, sel, a, b, timeout):
        name = series["metric"].get("__name__", "")
        if not _METRIC_NAME.match(name):
            where = redact(source.url if isinstance(source, Source) else source)
            raise PrometheusError(f"{where}: the answer holds an invalid metric name {name[:40]!r}")
        key = name + om_labels(series["metric"])
        out.append((key, *series_text(key, series.get("values") or [], a, b)))
    return out


class _Backfill:
    """promtool turning windows' files into blocks while the next window is pulled: at most
    `at_once` run (each writes its own blocks), so at most `at_once` + 1 window files exist."""

    def __init__(self, tsdb: Path, at_once: int):
        self.promtool, self.tsdb, self.at_once = tool("promtool"), tsdb, max(1, at_once)
        self.running: deque[tuple[subprocess.Popen, Path, Path]] = deque()

    def start(self, path: Path) -> None:
        while len(self.running) >= self.at_once:
            self._wait_oldest()
        args = [self.promtool, "tsdb", "create-blocks-from", "openmetrics", "-q", str(path), str(self.tsdb)]
        log = path.with_suffix(".log")
        with log.open("wb") as err:
            proc = subprocess.Popen(
                args, stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL, env={**GO_ENV, **os.environ}
            )
        self.running.append((proc, path, log))

    def wait(self) -> None:
        while self.running:
            self._wait_oldest()

    def _wait_oldest(self) -> None:
        proc, path, log = self.running.popleft()
        try:
            code = proc.wait(timeout=PROMTOOL_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise BacktestError(f"promtool tsdb create-blocks-from did not finish within {PROMTOOL_TIMEOUT:g}s") from None
        path.unlink()
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        log.unlink()
        if code != 0:
            raise BacktestError(f"promtool tsdb create-blocks-from openmetrics failed: {' / '.join(tail)}")

    def stop(self) -> None:
        """On an error: end the promtools still running, their files removed."""
        while self.running:
            proc, path, log = self.running.popleft()
            proc.kill()
            proc.wait()
            path.unlink(missing_ok=True)
            log.unlink(missing_ok=True)


def pull_raw(
    source: Source | str,
    selectors: tuple[Selector, ...],
    start: float,
    end: float,
    window: float,
    work: Path,
    tsdb: Path,
    timeout: float,
    progress: Progress,
    concurrency: int = PULL_CONCURRENCY,
    tools: int = PROMTOOLS_AT_ONCE,
) -> int:
    """Copy the raw samples of `selectors` in (start, end] into blocks under `tsdb`; returns
    how many samples were copied. The file of each window holds the selectors' answers in
    order, a series two selectors match written once."""
    n = max(1, math.ceil((end - start) / window))
    spans = [(start + i * window, min(end, start + (i + 1) * window)) for i in range(n)]
    jobs: Iterator[tuple[float, float, Selector]] = ((a, b, sel) for a, b in spans for sel in selectors)
    backfill = _Backfill(tsdb, tools)
    pool = ThreadPoolExecutor(max(1, concurrency), thread_name_prefix="genobs-pull")
    pending: deque[Future] = deque()

    def submit() -> None:
        job = next(jobs, None)
        if job is not None:
            pending.append(pool.submit(pull_answer, source, job[2], job[0], job[1], timeout))

    total = 0
    path: Path | None = None
    try:
        for _ in range(max(1, concurrency)):
            submit()
        for i in range(n):
            progress(f"pulling raw series: window {i + 1}/{n} ({len(selectors)} selectors)")
            path = work / f"window{i}.om"  # promtool may still read earlier ones
            written = 0
            with path.open("w", encoding="utf-8") as out:
                seen: set[str] = set()
                for _ in selectors:
                    answer = pending.popleft().result()
                    submit()
                    for key, text, count in answer:
                        if key in seen:  # two selectors of one spec can match the same series
                            continue
                        seen.add(key)
                        out.write(text)
                        written += count
                    del answer
                out.write("# EOF\n")
            total += written
            if written:
                backfill.start(path)
            else:
                path.unlink()
            path = None
        backfill.wait()
    except BaseException:
        backfill.stop()
        if path is not None:  # the window being written
            path.unlink(missing_ok=True)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return total

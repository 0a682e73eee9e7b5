"""Backtest stage: OpenMetrics text into TSDB blocks, in bounded pieces. Samples are written
to a file until it holds TEXT_BYTES; then it is closed and `promtool tsdb create-blocks-from
openmetrics` turns it into blocks while the next file is written (at most `at_once` promtools
run, each on its own file and into its own blocks: overlapping blocks are merged by the
Prometheus that serves them). Temp disk is thus at most (at_once + 1) files, and promtool's
memory one file, whatever the labels and the range."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import time
from collections import deque
from pathlib import Path

from genobs.backtest.children import start_child
from genobs.backtest.labels import om_value
from genobs.backtest.source import NO_DEADLINE, Deadline
from genobs.promtool import GO_ENV

TEXT_BYTES = 64 * 2**20  # one file; a file is closed at the first batch past it
BATCH = 4096  # samples formatted at once: with a key of at most MAX_KEY bytes, 17 MiB of text
PROMTOOL_TIMEOUT = 3600.0


class BacktestError(Exception):
    """The history cannot be evaluated (no data, a tool failed); the message says why."""


def tool(name: str) -> str:
    exe = shutil.which(name)
    if exe is None:
        raise BacktestError(f"{name} not found on PATH: backtest evaluates the rules with it (Debian's 'prometheus')")
    return exe


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


class BlockWriter:
    """OpenMetrics files under `work` turned into blocks under `tsdb`, each at most about
    TEXT_BYTES; `write_series` adds a series' samples, `close` waits for every promtool."""

    def __init__(self, work: Path, tsdb: Path, name: str, at_once: int = 2, deadline: Deadline = NO_DEADLINE):
        self.promtool, self.work, self.tsdb, self.name = tool("promtool"), work, tsdb, name
        self.at_once, self.deadline = max(1, at_once), deadline
        self.running: deque[tuple[subprocess.Popen, Path, Path]] = deque()
        self.files = 0
        self.path: Path | None = None
        self.out = None
        self.size = 0
        self.peak_disk = 0  # bytes of text on disk at once, for the report

    def write_series(self, key: str, samples: list, a: float, b: float) -> int:
        """Samples of one series in (a, b], BATCH at a time; returns how many were written."""
        written = 0
        for i in range(0, len(samples), BATCH):
            text, n = series_text(key, samples[i : i + BATCH], a, b)
            if n:
                self.write(text.encode("utf-8"))
                written += n
        return written

    def write(self, data: bytes) -> None:
        if self.out is None:
            self.path = self.work / f"{self.name}{self.files}.om"
            self.files += 1
            self.out = self.path.open("wb")
            self.size = 0
        self.out.write(data)
        self.size += len(data)
        if self.size >= TEXT_BYTES:
            self.flush()

    def flush(self) -> None:
        """Close the file being written and start promtool on it."""
        if self.out is None:
            return
        self.out.write(b"# EOF\n")
        self.out.close()
        self.out = None
        path, self.path = self.path, None
        assert path is not None
        while len(self.running) >= self.at_once:
            self._wait_oldest()
        on_disk = path.stat().st_size + sum(p.stat().st_size for _, p, _ in self.running)
        self.peak_disk = max(self.peak_disk, on_disk)
        args = [self.promtool, "tsdb", "create-blocks-from", "openmetrics", "-q", str(path), str(self.tsdb)]
        log = path.with_suffix(".log")
        with log.open("wb") as err:
            proc = start_child(args, stdout=subprocess.DEVNULL, stderr=err, env={**GO_ENV, **os.environ})
        self.running.append((proc, path, log))

    def close(self) -> None:
        """The last file flushed and every promtool finished; BacktestError if one failed."""
        self.flush()
        while self.running:
            self._wait_oldest()

    def _wait_oldest(self) -> None:
        proc, path, log = self.running.popleft()
        try:
            code = proc.wait(timeout=min(PROMTOOL_TIMEOUT, max(self.deadline.at - time.monotonic(), 0.001)))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            path.unlink(missing_ok=True)
            log.unlink(missing_ok=True)
            self.deadline.left()  # the run's deadline, when it is what ran out
            raise BacktestError(f"promtool tsdb create-blocks-from did not finish within {PROMTOOL_TIMEOUT:g}s") from None
        path.unlink()
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        log.unlink()
        if code != 0:
            raise BacktestError(f"promtool tsdb create-blocks-from openmetrics failed: {' / '.join(tail)[:400]}")

    def abort(self) -> None:
        """On an error: the file being written removed, the promtools still running ended."""
        if self.out is not None:
            self.out.close()
            self.out = None
        if self.path is not None:
            self.path.unlink(missing_ok=True)
            self.path = None
        while self.running:
            proc, path, log = self.running.popleft()
            proc.kill()
            proc.wait()
            path.unlink(missing_ok=True)
            log.unlink(missing_ok=True)

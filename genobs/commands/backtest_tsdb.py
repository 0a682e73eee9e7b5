"""`genobs backtest`, step 2: a private copy of the history the rules read. The raw samples
of the spec's selectors are copied into blocks first (backtest_pull); a private Prometheus
on loopback serves them, and each level of recording rules is backfilled the way `promtool
tsdb create-blocks-from rules` does it before the next level is evaluated. Memory stays
bounded by one answer and one batch of text, disk by a few files (backtest_blocks)."""

from __future__ import annotations

import math
import shutil
import socket
import subprocess
import time
from pathlib import Path

from genobs.commands.backtest_blocks import BacktestError, BlockWriter, tool
from genobs.commands.backtest_labels import Folding
from genobs.commands.backtest_rules import Rule
from genobs.commands.backtest_source import NO_DEADLINE, Deadline, Source
from genobs.promhttp import PrometheusError, fetch

STEPS_PER_QUERY = 2000  # points per series per query_range; Prometheus refuses more than 11000
_PLAIN = Folding()  # the private server's answers are folded already: keys checked, nothing folded


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrivatePrometheus:
    """A Prometheus on a free loopback port serving the copied blocks; never scrapes."""

    def __init__(self, work: Path, tsdb: Path, lookback: str, timeout: float = 30.0, deadline: Deadline = NO_DEADLINE):
        self.work, self.tsdb, self.lookback = work, tsdb, lookback
        self.timeout, self.deadline = timeout, deadline
        self.proc: subprocess.Popen | None = None
        self.source = Source("http://127.0.0.1:9", timeout=timeout, deadline=deadline)  # until started

    def start(self, timeout: float = 120.0) -> None:
        exe = tool("prometheus")
        port = _free_port()
        self.source = Source(f"http://127.0.0.1:{port}", timeout=self.timeout, deadline=self.deadline)
        config = self.work / "prometheus.yml"
        config.write_text("global: {scrape_interval: 1m}\n")
        log = (self.work / "prometheus.log").open("ab")
        self.proc = subprocess.Popen(
            [
                exe,
                f"--config.file={config}",
                f"--storage.tsdb.path={self.tsdb}",
                "--storage.tsdb.retention.time=100y",  # the copied history is old: keep all of it
                f"--web.listen-address=127.0.0.1:{port}",
                f"--query.lookback-delta={self.lookback}",
                "--query.max-samples=200000000",
                "--query.timeout=30m",
            ],
            stdout=subprocess.DEVNULL,
            stderr=log,
            stdin=subprocess.DEVNULL,
            cwd=self.work,
        )
        log.close()
        deadline = time.monotonic() + min(timeout, self.deadline.left())
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BacktestError(f"the private prometheus exited with {self.proc.returncode}: {self._log_tail()}")
            try:
                if fetch(Source(self.source.url, timeout=2).server(), "-/ready")[0] == 200:
                    return
            except PrometheusError:
                pass
            time.sleep(0.2)
        self.deadline.left()
        raise BacktestError(f"the private prometheus was not ready within {timeout:g}s: {self._log_tail()}")

    def _log_tail(self) -> str:
        lines = (self.work / "prometheus.log").read_text(errors="replace").strip().splitlines()
        return " / ".join(lines[-2:])[:400]

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None


def grid(t: float, interval: float) -> float:
    """The first evaluation at or after `t`: every group evaluates at multiples of its interval."""
    return math.ceil(t / interval) * interval


def rule_begin(rule: Rule, start: float) -> float:
    """The rule's first evaluation: as far before `start` as its readers look back, plus one
    interval so the first evaluation at `start` finds a sample."""
    return start - rule.lead - rule.interval


def _record_window(server: Source, rule: Rule, begin: float, a: float, b: float, out: BlockWriter) -> int:
    """Evaluate `rule` at each of its evaluations in [a, b) and write what it records."""
    first = grid(max(a, begin), rule.interval)
    last = grid(b, rule.interval) - rule.interval
    if last < first:
        return 0
    params = {"query": rule.expr, "start": f"{first:.3f}", "end": f"{last:.3f}", "step": f"{rule.interval:g}"}
    data = server.ask("query_range", params, True)
    written = 0
    for series in data["result"]:  # type: ignore[index]  (ask checked it is a matrix)
        # the rule's labels win, as in Prometheus
        key = _PLAIN.key({**series["metric"], **dict(rule.labels), "__name__": rule.name})
        written += out.write_series(key, series["values"], -math.inf, math.inf)
    return written


def backfill_levels(
    server: PrivatePrometheus,
    levels: tuple[tuple[Rule, ...], ...],
    start: float,
    end: float,
    progress,
) -> None:
    """Recorded series up to `end`, one dependency level per pass, the way `promtool tsdb
    create-blocks-from rules` backfills them (query_range at the group's interval, the
    rule's labels added), written through create-blocks-from openmetrics. A level's inputs
    are served before it is evaluated."""
    for n, level in enumerate(levels):
        rules = sorted(level, key=lambda r: r.name)
        span = STEPS_PER_QUERY * min(r.interval for r in rules)
        begin = min(rule_begin(r, start) for r in rules)
        windows = max(1, math.ceil((end + 1 - begin) / span))
        blocks = server.work / f"level{n}"
        blocks.mkdir()
        out = BlockWriter(server.work, blocks, "recorded", 1, server.deadline)
        try:
            for i in range(windows):
                progress(f"recording rules: level {n + 1}/{len(levels)} ({len(rules)} rules), window {i + 1}/{windows}")
                a, b = begin + i * span, min(end + 1, begin + (i + 1) * span)
                for r in rules:
                    _record_window(server.source, r, rule_begin(r, start), a, b, out)
            out.close()
        except BaseException:
            out.abort()
            raise
        server.stop()
        for block in blocks.iterdir():
            shutil.move(str(block), server.tsdb / block.name)
        server.start()

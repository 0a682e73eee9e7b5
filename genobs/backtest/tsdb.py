"""Backtest stage, tsdb: a private copy of the history the rules read. The raw samples
of the spec's selectors are copied into blocks first (pull); a private Prometheus
on loopback serves them, and each level of recording rules is backfilled the way `promtool
tsdb create-blocks-from rules` does it before the next level is evaluated. Memory stays
bounded by one answer and one batch of text, disk by a few files (blocks)."""

from __future__ import annotations

import math
import os
import queue
import secrets
import shutil
import socket
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from genobs.backtest.blocks import BacktestError, BlockWriter, tool
from genobs.backtest.children import start_child, stop_child
from genobs.backtest.labels import Folding
from genobs.backtest.ranges import evaluations, grid
from genobs.backtest.rules import Rule
from genobs.backtest.source import NO_DEADLINE, Deadline, Source
from genobs.promhttp import PrometheusError, basic, fetch

RECORDERS = 2  # rules evaluated at once: the server answers one while genobs reads another
USER = "genobs"
PRIVATE = "the private Prometheus"  # how messages name it: its loopback URL is no address the user gave
_PLAIN = Folding()  # the private server's answers are folded already: keys checked, nothing folded


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrivatePrometheus:
    """A Prometheus on a free loopback port serving the copied blocks; never scrapes. Other
    local users cannot read the copy: the folder is private (0700) and the server asks for
    basic auth with a random password (its bcrypt hash in --web.config.file)."""

    def __init__(self, work: Path, tsdb: Path, lookback: str, timeout: float = 30.0, deadline: Deadline = NO_DEADLINE):
        self.work, self.tsdb, self.lookback = work, tsdb, lookback
        self.timeout, self.deadline = timeout, deadline
        self.proc: subprocess.Popen | None = None
        self.password = secrets.token_urlsafe(24)
        self.source = self._source(9)  # until started

    def _source(self, port: int, timeout: float | None = None) -> Source:
        return Source(
            f"http://127.0.0.1:{port}",
            basic(USER, self.password),
            self.timeout if timeout is None else timeout,
            self.deadline if timeout is None else NO_DEADLINE,
            name=PRIVATE,
        )

    def _web_config(self) -> Path:
        try:
            import bcrypt
        except ImportError:
            raise BacktestError("backtest needs the bcrypt package to protect its private Prometheus: pip install bcrypt") from None
        hashed = bcrypt.hashpw(self.password.encode(), bcrypt.gensalt(rounds=4)).decode()  # a random password: no cost needed
        path = self.work / "web.yml"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(f"basic_auth_users:\n  {USER}: '{hashed}'\n")
        return path

    def start(self, timeout: float = 120.0) -> None:
        exe = tool("prometheus")
        port = _free_port()
        self.source = self._source(port)
        config = self.work / "prometheus.yml"
        config.write_text("global: {scrape_interval: 1m}\n")
        web = self._web_config()
        log = (self.work / "prometheus.log").open("ab")
        self.proc = start_child(
            [
                exe,
                f"--config.file={config}",
                f"--web.config.file={web}",
                f"--storage.tsdb.path={self.tsdb}",
                "--storage.tsdb.retention.time=100y",  # the copied history is old: keep all of it
                f"--web.listen-address=127.0.0.1:{port}",
                f"--query.lookback-delta={self.lookback}",
                "--query.max-samples=200000000",
                "--query.timeout=30m",
            ],
            stdout=subprocess.DEVNULL,
            stderr=log,
            cwd=self.work,
        )
        log.close()
        deadline = time.monotonic() + min(timeout, self.deadline.left())
        probe = self._source(port, timeout=2)
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BacktestError(f"the private Prometheus exited with {self.proc.returncode}: {self._log_tail()}")
            try:
                if fetch(probe.server(), "-/ready")[0] == 200:
                    return
            except PrometheusError:
                pass
            time.sleep(0.2)
        self.deadline.left()
        raise BacktestError(f"the private Prometheus was not ready within {timeout:g}s: {self._log_tail()}")

    def _log_tail(self) -> str:
        lines = (self.work / "prometheus.log").read_text(errors="replace").strip().splitlines()
        return " / ".join(lines[-2:])[:400]

    def stop(self) -> None:
        if self.proc is not None:
            stop_child(self.proc, grace=60)
            self.proc = None


def rule_begin(rule: Rule, start: float) -> float:
    """The rule's first evaluation: as far before `start` as its readers look back, plus one
    interval so the first evaluation at `start` finds a sample."""
    return start - rule.lead - rule.interval


def record(
    server: Source,
    rule: Rule,
    start: float,
    end: float,
    out: BlockWriter,
    folding: Folding = _PLAIN,
    stop: threading.Event | None = None,
) -> int:
    """Evaluate `rule` at each of its evaluations from its begin to `end` and write what it
    records, the rule's labels added (they win, as in Prometheus); returns the samples."""
    first, last = grid(rule_begin(rule, start), rule.interval), grid(end + 1, rule.interval) - rule.interval
    written = 0
    for _, _, result in evaluations(server, rule.expr, first, last, rule.interval):
        for series in result:
            key = folding.key({**series["metric"], **dict(rule.labels), "__name__": rule.name})
            written += out.write_series(key, series["values"], -math.inf, math.inf)
        if stop is not None and stop.is_set():
            break
    return written


def record_level(
    server: Source,
    rules: tuple[Rule, ...],
    start: float,
    end: float,
    work: Path,
    blocks: Path,
    folding: Folding,
    progress,
    what: str,
    workers: int = RECORDERS,
) -> int:
    """One level of recording rules evaluated on `server` and written as blocks under `blocks`:
    `workers` rules at once (the server answers one while genobs reads another), each worker
    with its own files and promtool runs, which it waits for before it ends (a child dies
    with the thread that started it). Returns the samples recorded."""
    todo: queue.SimpleQueue[tuple[int, Rule]] = queue.SimpleQueue()
    ordered = sorted(rules, key=lambda r: r.name)
    for n, rule in enumerate(ordered):
        todo.put((n, rule))
    stop = threading.Event()

    def worker(w: int) -> int:
        out = BlockWriter(work, blocks, f"{blocks.name}-{w}-", 1, server.deadline)
        total = 0
        try:
            while not stop.is_set():
                try:
                    n, rule = todo.get_nowait()
                except queue.Empty:
                    break
                progress(f"recording rules: {what}, rule {n + 1}/{len(ordered)} {rule.name}")
                total += record(server, rule, start, end, out, folding, stop)
            if stop.is_set():
                out.abort()
            else:
                out.close()
        except BaseException:
            stop.set()
            out.abort()
            raise
        return total

    pool = ThreadPoolExecutor(max(1, min(workers, len(ordered))), thread_name_prefix="genobs-record")
    futures = [pool.submit(worker, w) for w in range(max(1, min(workers, len(ordered))))]
    try:
        return sum(f.result() for f in futures)
    except BaseException:
        stop.set()
        raise
    finally:
        pool.shutdown(wait=True)


def backfill_levels(
    server: PrivatePrometheus,
    levels: tuple[tuple[Rule, ...], ...],
    start: float,
    end: float,
    progress,
    first: int = 1,
    of: int = 0,
) -> None:
    """Recorded series up to `end`, one dependency level per pass, the way `promtool tsdb
    create-blocks-from rules` backfills them (query_range at the group's interval, the
    rule's labels added), written through create-blocks-from openmetrics. A level's inputs
    are served before it is evaluated; `first` is the number of the first level here, of `of`."""
    for n, level in enumerate(levels):
        blocks = server.work / f"level{first + n}"
        blocks.mkdir()
        what = f"level {first + n}/{of or len(levels)}"
        record_level(server.source, level, start, end, server.work, blocks, _PLAIN, progress, what)
        server.stop()
        for block in blocks.iterdir():
            shutil.move(str(block), server.tsdb / block.name)
        server.start()

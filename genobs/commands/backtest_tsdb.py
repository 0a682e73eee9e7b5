"""`genobs backtest`, step 2: a private copy of the history the rules read. The raw samples
of the spec's selectors are copied into blocks first (backtest_pull); a private Prometheus
on loopback serves them, and each level of recording rules is backfilled the way `promtool
tsdb create-blocks-from rules` does it before the next level is evaluated. Memory stays
bounded by one window, whatever the range."""

from __future__ import annotations

import math
import re
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from genobs.commands.backtest_rules import Rule, selector_text
from genobs.promhttp import PrometheusError, api, connect, fetch
from genobs.promql import Selector
from genobs.promtool import GO_ENV

STEPS_PER_QUERY = 2000  # points per series per query_range; Prometheus refuses more than 11000
_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*\Z")

Progress = Callable[[str], None]


class BacktestError(Exception):
    """The history cannot be evaluated (no data, a tool failed); the message says why."""


def tool(name: str) -> str:
    exe = shutil.which(name)
    if exe is None:
        raise BacktestError(f"{name} not found on PATH: backtest evaluates the rules with it (Debian's 'prometheus')")
    return exe


def _run(args: list[str], cwd: Path | None = None) -> None:
    import os

    proc = subprocess.run(args, capture_output=True, text=True, cwd=cwd, env={**GO_ENV, **os.environ}, timeout=3600)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise BacktestError(f"{Path(args[0]).name} {' '.join(args[1:4])} failed: {' / '.join(tail)}")


@dataclass(frozen=True)
class Source:
    """The Prometheus whose history is backtested: its URL and the Authorization header to send."""

    url: str
    authorization: str = ""


def ask(source: Source | str, path: str, params: dict, timeout: float, post: bool = False, expect: str = "") -> object:
    """One API request with the hardened client `compare` and `doctor` use (credentials, the answer's
    shape checked), within `timeout`: a backtest's pulls are many, each bounded."""
    url, authorization = (source.url, source.authorization) if isinstance(source, Source) else (source, "")
    server = connect(url, timeout=timeout, deadline=timeout, authorization=authorization)
    return api(server, path, params, post=post, expect=expect)


def count_series(url: Source | str, sel: Selector, start: float, end: float, timeout: float) -> int:
    data = ask(url, "series", {"match[]": selector_text(sel), "start": f"{start:.3f}", "end": f"{end:.3f}"}, timeout, True)
    if not isinstance(data, list) or not all(isinstance(s, dict) for s in data):
        raise PrometheusError(f"{url}/api/v1/series: the answer's data is not a list of series")
    return len(data)


def om_value(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(v)


def om_labels(metric: dict[str, str]) -> str:
    parts = []
    for k in sorted(metric):
        if k == "__name__":
            continue
        if not _LABEL_NAME.match(k):
            raise PrometheusError(f"the answer holds an invalid label name {k[:40]!r}")
        v = metric[k].replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        parts.append(f'{k}="{v}"')
    return "{" + ",".join(parts) + "}"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrivatePrometheus:
    """A Prometheus on a free loopback port serving the copied blocks; never scrapes."""

    def __init__(self, work: Path, tsdb: Path, lookback: str):
        self.work, self.tsdb, self.lookback = work, tsdb, lookback
        self.proc: subprocess.Popen | None = None
        self.url = ""

    def start(self, timeout: float = 120.0) -> None:
        exe = tool("prometheus")
        port = _free_port()
        self.url = f"http://127.0.0.1:{port}"
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
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BacktestError(f"the private prometheus exited with {self.proc.returncode}: {self._log_tail()}")
            try:
                if fetch(connect(self.url, timeout=2, deadline=2), "-/ready")[0] == 200:
                    return
            except PrometheusError:
                pass
            time.sleep(0.2)
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


def _record_window(url: str, rule: Rule, begin: float, a: float, b: float, out, timeout: float) -> int:
    """Evaluate `rule` at each of its evaluations in [a, b) and write what it records."""
    first = grid(max(a, begin), rule.interval)
    last = grid(b, rule.interval) - rule.interval
    if last < first:
        return 0
    params = {"query": rule.expr, "start": f"{first:.3f}", "end": f"{last:.3f}", "step": f"{rule.interval:g}"}
    data = ask(url, "query_range", params, timeout, True)
    if not isinstance(data, dict) or not isinstance(data.get("result"), list):
        raise PrometheusError(f"{url}: query_range did not answer with a result list")
    written = 0
    for series in data["result"]:
        labels = {**series.get("metric", {}), **dict(rule.labels)}  # the rule's labels win, as in Prometheus
        key = rule.name + om_labels(labels)
        for ts, value in series.get("values", []):
            out.write(f"{key} {om_value(float(value))} {float(ts):.3f}\n")
            written += 1
    return written


def backfill_levels(
    server: PrivatePrometheus,
    levels: tuple[tuple[Rule, ...], ...],
    start: float,
    end: float,
    timeout: float,
    progress: Progress,
) -> None:
    """Recorded series up to `end`, one dependency level per pass, the way `promtool tsdb
    create-blocks-from rules` backfills them (query_range at the group's interval, the
    rule's labels added), written through create-blocks-from openmetrics. A level's inputs
    are served before it is evaluated."""
    promtool = tool("promtool")
    for n, level in enumerate(levels):
        rules = sorted(level, key=lambda r: r.name)  # one family's samples stay together
        span = STEPS_PER_QUERY * min(r.interval for r in rules)
        begin = min(rule_begin(r, start) for r in rules)
        windows = max(1, math.ceil((end + 1 - begin) / span))
        blocks = server.work / f"level{n}"
        blocks.mkdir()
        for i in range(windows):
            progress(f"recording rules: level {n + 1}/{len(levels)} ({len(rules)} rules), window {i + 1}/{windows}")
            a, b = begin + i * span, min(end + 1, begin + (i + 1) * span)
            path = server.work / "recorded.om"
            with path.open("w", encoding="utf-8") as out:
                written = sum(_record_window(server.url, r, rule_begin(r, start), a, b, out, timeout) for r in rules)
                out.write("# EOF\n")
            if written:
                _run([promtool, "tsdb", "create-blocks-from", "openmetrics", "-q", str(path), str(blocks)])
            path.unlink()
        server.stop()
        for block in blocks.iterdir():
            shutil.move(str(block), server.tsdb / block.name)
        server.start()

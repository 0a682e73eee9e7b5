"""What `genobs backtest`'s raw pull costs alone: genobs.backtest.pull.pull_raw called in this
process on the first HOURS of a history that bench_backtest.py kept (--keep DIR), served by
a Prometheus on loopback; wall time, samples/s and the CPU seconds of genobs, of promtool
(all its runs) and of the source Prometheus (with its start-up).

    .venv/bin/python bench/bench_backtest.py --points 0.25x50 --keep /tmp/fleet50
    .venv/bin/python bench/bench_pull.py --history /tmp/fleet50 --hours 2
    .venv/bin/python bench/bench_pull.py --history /tmp/fleet50 --hours 2 --concurrency 1 --promtools 1
"""

from __future__ import annotations

import argparse
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

import bench_backtest as bb

sys.path.insert(0, str(bb.REPO))
from genobs.backtest.labels import Folding, named_labels  # noqa: E402
from genobs.backtest.pull import (  # noqa: E402
    PROMTOOLS_AT_ONCE,
    PULL_CONCURRENCY,
    pull_raw,
    series_stats,
    window_seconds,
)
from genobs.backtest.rules import load_rules  # noqa: E402
from genobs.backtest.source import Source  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--history", type=Path, required=True, help="a directory bench_backtest.py --keep filled")
    parser.add_argument("--hours", type=float, default=2.0)
    parser.add_argument("--concurrency", type=int, default=PULL_CONCURRENCY, help="answers in flight")
    parser.add_argument("--promtools", type=int, default=PROMTOOLS_AT_ONCE, help="promtool runs at once")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="genobs-bench-pull-"))
    tsdb = work / "source"
    bb.link_blocks(args.history, tsdb)
    start, _ = bb.history_bounds(tsdb)
    end = start + args.hours * 3600
    source, url = bb.start_source(work, tsdb)
    try:
        rules = load_rules(bb.SPEC)
        selectors = tuple(sorted({(s.name or "", s.matchers): s for s in rules.raw}.values()))
        folding = Folding(named_labels(r.expr for r in [*rules.alerts, *(x for lv in rules.levels for x in lv)]))
        server = Source(url, timeout=60)
        stats = [series_stats(server, s, start - 1, end, folding) for s in selectors]
        window = window_seconds(stats, bb.SCRAPE)
        raw = work / "raw"
        raw.mkdir()
        t0, cpu0 = time.monotonic(), time.process_time()
        copied = pull_raw(
            server, selectors, start - 1, end, window, work, raw, folding, lambda m: None, args.concurrency, args.promtools
        ).samples
        wall, cpu = time.monotonic() - t0, time.process_time() - cpu0
        kids = resource.getrusage(resource.RUSAGE_CHILDREN)
        stat = Path(f"/proc/{source.pid}/stat").read_text().split()
        source_cpu = (int(stat[13]) + int(stat[14])) / 100  # utime + stime in clock ticks
        print(f"{copied:,} samples of {sum(s.count for s in stats):,} series in {wall:.1f} s: {copied / wall:,.0f} samples/s")
        print(f"CPU s: genobs {cpu:.1f}, promtool {kids.ru_utime + kids.ru_stime:.1f}, source Prometheus {source_cpu:.1f}")
    finally:
        source.terminate()
        source.wait(timeout=60)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

"""What `genobs backtest` costs: wall time and peak memory of a backtest of specs/chat.yaml
over a synthetic fleet's history (synthetic_fleet.py: vLLM 0.33's real series, N pods,
15 s scrapes), for several history lengths and fleet sizes, so the growth with days and
pods can be read off. The history is backfilled into a real Prometheus on loopback first,
one 2-hour block at a time so that its text never fills the disk, and left to compact
(not timed). Peak memory is reported for genobs' own process and, separately, for the
largest tool it runs (the private Prometheus or promtool).

    .venv/bin/python bench/bench_backtest.py --points 0.25x5 0.5x5 0.25x10
    .venv/bin/python bench/bench_backtest.py --points 1x50 --keep /tmp/fleet50
    .venv/bin/python bench/bench_backtest.py --points 0.5x50 --history /tmp/fleet50
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import synthetic_fleet

REPO = Path(__file__).resolve().parents[1]
SPEC = REPO / "specs" / "chat.yaml"
SCRAPE = 15
BLOCK = 7200  # promtool create-blocks-from writes blocks of 2 h aligned to the epoch
# runs `genobs backtest` in this child process and prints its own peak RSS (VmHWM: ru_maxrss of
# a process that starts others also counts what they touched before exec) and its largest child's
RUNNER = """
import resource, sys
from genobs.cli import main
try:
    main(sys.argv[1:], standalone_mode=False)
finally:
    status = open("/proc/self/status").read().split("VmHWM:")[1].split()[0]
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    own = resource.getrusage(resource.RUSAGE_SELF)
    print(f"RSS {status} {kids.ru_maxrss}", file=sys.stderr)
    print(f"CPU {own.ru_utime + own.ru_stime:.2f} {kids.ru_utime + kids.ru_stime:.2f}", file=sys.stderr)
"""


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def only_read_families() -> None:
    """Keep the fleet to the families the spec's rules read: the rest would only make the
    OpenMetrics text (GBs) and the backfill slower; backtest never pulls them."""
    sys.path.insert(0, str(REPO))
    from genobs.backtest.rules import load_rules

    names = {s.name for s in load_rules(SPEC).raw}
    every = synthetic_fleet.families()
    kept = [f for f in every if any(sample in names for sample, _, _ in f.samples)]
    synthetic_fleet.families = lambda path=synthetic_fleet.EXPOSITION: kept


def backfill(work: Path, days: float, pods: int, end: int) -> Path:
    """The fleet's history up to `end` as TSDB blocks, written and backfilled one 2-hour
    block at a time: each piece of OpenMetrics text (1.3 GB for 50 pods) covers exactly one
    of promtool's 2 h block ranges, so promtool reads it twice (bounds, then samples) and
    it is deleted once its block is written. The next piece is written while promtool reads
    the last one; at most two pieces are on disk at a time."""
    steps = int(days * 86400 / SCRAPE)
    synthetic_fleet.SCRAPE_SECONDS = SCRAPE  # the generator's module-level interval
    first = end - (steps - 1) * SCRAPE
    tsdb = work / "tsdb"
    pieces = []  # (start, steps) per 2 h block range
    t = first
    while t <= end:
        stop = min(end + SCRAPE, (t // BLOCK + 1) * BLOCK)
        n = (stop - t + SCRAPE - 1) // SCRAPE
        pieces.append((t, n))
        t += n * SCRAPE
    t0 = time.monotonic()
    size = 0
    running: tuple[subprocess.Popen, Path] | None = None
    for i, (t, n) in enumerate(pieces):
        om = work / f"piece{i % 2}.om"
        # written by a child process, so it runs beside promtool on the previous piece
        code = "import sys, bench_backtest as b; b.only_read_families(); b.synthetic_fleet.SCRAPE_SECONDS = b.SCRAPE; "
        code += f"b.synthetic_fleet.write(b.Path({str(om)!r}), {pods}, {t}, {n}, origin={first})"
        subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parent)
        size += om.stat().st_size
        if running is not None:
            _wait(*running)
        cmd = ["promtool", "tsdb", "create-blocks-from", "openmetrics", "-q", str(om), str(tsdb)]
        running = (subprocess.Popen(cmd), om)
        elapsed = time.monotonic() - t0
        print(
            f"  history: piece {i + 1}/{len(pieces)} written, {size / 1e9:.1f} GB of text so far, {elapsed:.0f} s",
            file=sys.stderr,
            flush=True,
        )
    if running is not None:
        _wait(*running)
    print(f"  history: {len(pieces)} blocks backfilled in {time.monotonic() - t0:.0f} s", file=sys.stderr, flush=True)
    return tsdb


def _wait(proc: subprocess.Popen, om: Path) -> None:
    if proc.wait() != 0:
        raise SystemExit(f"promtool failed on {om}")
    om.unlink()


def _metric(url: str, name: str) -> float:
    import urllib.request

    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
    return 0.0


def start_source(work: Path, tsdb: Path) -> tuple[subprocess.Popen, str]:
    """A Prometheus on loopback serving the history in `tsdb`, once it answers ready."""
    port = free_port()
    (work / "prometheus.yml").write_text("global: {scrape_interval: 15s}\n")
    proc = subprocess.Popen(
        [
            shutil.which("prometheus") or "/usr/bin/prometheus",
            f"--config.file={work / 'prometheus.yml'}",
            f"--storage.tsdb.path={tsdb}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--storage.tsdb.retention.time=30d",
        ],
        stdout=subprocess.DEVNULL,
        stderr=(work / "source.log").open("wb"),
    )
    url = f"http://127.0.0.1:{port}"
    import urllib.request

    deadline = time.monotonic() + 600
    while True:
        if time.monotonic() > deadline:
            raise SystemExit("the source Prometheus did not become ready")
        try:
            with urllib.request.urlopen(url + "/-/ready", timeout=5) as r:
                if r.status == 200:
                    break
        except OSError:
            time.sleep(0.5)
    return proc, url


def source(work: Path, tsdb: Path) -> tuple[subprocess.Popen, str]:
    """A Prometheus on loopback serving the history in `tsdb`, its blocks compacted (as a
    long-running Prometheus' are) before anything is timed."""
    proc, url = start_source(work, tsdb)
    # the compactor runs a minute after start and then every minute, each run until nothing
    # is left to compact: wait until it has been idle (no compaction, under 0.5 s of CPU per
    # 10 s) for 70 s, and at least one run has passed
    t0 = time.monotonic()
    last, idle = (-1.0, 0.0), 0
    while idle < 7 or time.monotonic() - t0 < 130:
        if time.monotonic() - t0 > 3600:
            raise SystemExit("the source Prometheus kept compacting for an hour")
        time.sleep(10)
        now = (_metric(url, "prometheus_tsdb_compactions_total"), _metric(url, "process_cpu_seconds_total"))
        idle = idle + 1 if now[0] == last[0] and now[1] - last[1] < 0.5 else 0
        last = now
    seen = last[0]
    blocks = _metric(url, "prometheus_tsdb_blocks_loaded")
    print(f"  source: {blocks:g} blocks after {seen:g} compactions, {time.monotonic() - t0:.0f} s", file=sys.stderr)
    return proc, url


def link_blocks(src: Path, dst: Path) -> None:
    """Hard links of the blocks in `src` under `dst` (blocks are never changed in place)."""
    dst.mkdir(parents=True, exist_ok=True)
    for meta in src.glob("*/meta.json"):
        if ".tmp" in meta.parent.name:  # a block still being written
            continue
        shutil.copytree(meta.parent, dst / meta.parent.name, copy_function=os.link)


def history_bounds(tsdb: Path) -> tuple[int, int]:
    """The first and last sample's unix time in the blocks under `tsdb`."""
    metas = [json.loads(m.read_text()) for m in tsdb.glob("*/meta.json")]
    return min(m["minTime"] for m in metas) // 1000, (max(m["maxTime"] for m in metas) - 1) // 1000


def floor_pull(url: str, start: int, end: int) -> tuple[float, int, int]:
    """The floor: the source returning, once, the raw samples every selector of the spec reads
    over the range the copy of all of them would cover (the warm-up included), through
    /api/v1/query range selectors in windows of about 150,000 samples, two requests in flight,
    the answers read and dropped. Returns (seconds, samples, bytes)."""
    import urllib.parse
    from concurrent.futures import ThreadPoolExecutor

    sys.path.insert(0, str(REPO))
    from genobs.backtest.labels import Folding, named_labels
    from genobs.backtest.pull import series_stats, window_seconds
    from genobs.backtest.rules import load_rules, selector_text
    from genobs.backtest.source import Source
    from genobs.promhttp import fetch

    rules = load_rules(SPEC)
    every = [r.expr for r in [*rules.alerts, *(x for lv in rules.levels for x in lv)]]
    pull_start = int(start - rules.warmup) - 600 - rules.raw_reach - 300
    selectors = sorted({(s.name or "", s.matchers): s for s in rules.raw}.values())
    server = Source(url, timeout=300)
    stats = [series_stats(server, s, pull_start, end, Folding(named_labels(every))) for s in selectors]
    window = window_seconds(stats, SCRAPE)
    jobs = []
    a = pull_start
    while a < end:
        b = min(end, a + window)
        jobs += [(a, b, sel) for sel in selectors]
        a = b

    def one(job) -> tuple[int, int]:
        a, b, sel = job
        body = urllib.parse.urlencode({"query": f"{selector_text(sel)}[{int(b - a)}s]", "time": f"{b:.3f}"})
        status, raw = fetch(server.server(), "api/v1/query", body, post=True)
        assert status == 200, raw[:200]
        return raw.count(b'"]'), len(raw)  # each sample ends `"value"]`

    t0 = time.monotonic()
    with ThreadPoolExecutor(2) as pool:
        done = list(pool.map(one, jobs))
    return time.monotonic() - t0, sum(n for n, _ in done), sum(b for _, b in done)


def _cpu(pid: int) -> float:
    """CPU seconds a process has used (utime + stime)."""
    stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(stat[11]) + int(stat[12])) / os.sysconf("SC_CLK_TCK")


def _disk(folder: Path) -> int:
    total = 0
    for root, _, files in os.walk(folder):
        for f in files:
            try:
                total += os.lstat(os.path.join(root, f)).st_blocks * 512
            except OSError:
                pass
    return total


def measure(
    days: float,
    pods: int,
    log: Path,
    history: Path | None = None,
    keep: Path | None = None,
    genobs: Path | None = None,
    floor: bool = True,
) -> dict:
    """One point. With `history` (a directory `keep` filled earlier, with that many pods),
    the backtest reads the first `days` of that history instead of a new one. `genobs`: the
    checkout whose genobs runs (another version's, for a before/after)."""
    import threading

    work = Path(tempfile.mkdtemp(prefix="genobs-bench-backtest-"))
    if history is None:
        end = int(time.time()) // 60 * 60 - 120
        tsdb = backfill(work, days, pods, end)
        start = end - int(days * 86400) + SCRAPE
    else:
        tsdb = work / "tsdb"
        link_blocks(history, tsdb)
        start, last = history_bounds(tsdb)
        end = start + int(days * 86400) - SCRAPE
        if end > last:
            raise SystemExit(f"{history} holds less than {days:g} days")
    # a kept history was compacted when it was kept
    proc, url = source(work, tsdb) if history is None else start_source(work, tsdb)
    try:
        if keep is not None:
            link_blocks(tsdb, keep)
        cpu0 = _cpu(proc.pid)
        floor_s, floor_samples, floor_bytes = floor_pull(url, start, end) if floor else (0.0, 0, 0)
        cpu1 = _cpu(proc.pid)
        args = ["backtest", str(SPEC), "--prometheus", url, "--from", str(start), "--to", str(end)]
        args += ["--format", "json", "--max-series", "1000000"]
        out = work / "backtest.json"
        scratch = work / "scratch"
        scratch.mkdir()
        env = {**os.environ, "TMPDIR": str(scratch)}
        if genobs is not None:
            env["PYTHONPATH"] = str(genobs)
        peak_disk, stop = [0], threading.Event()

        def watch() -> None:
            while not stop.is_set():
                peak_disk[0] = max(peak_disk[0], _disk(scratch))
                time.sleep(0.1)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        t0 = time.monotonic()
        # genobs' progress lines go to `log` with the seconds since the start, as they come
        with out.open("w") as stdout, log.open("a") as err:
            err.write(f"# {days:g} days x {pods} pods{' (' + str(genobs) + ')' if genobs else ''}\n")
            child = subprocess.Popen(
                [sys.executable, "-c", RUNNER, *args], stdout=stdout, stderr=subprocess.PIPE, text=True,
                cwd=genobs or REPO, env=env,
            )
            lines = []
            for line in child.stderr:
                lines.append((time.monotonic() - t0, line))
                err.write(f"{lines[-1][0]:8.1f} {line}")
                err.flush()
            child.wait()
        wall = time.monotonic() - t0
        cpu2 = _cpu(proc.pid)
        stop.set()
        watcher.join()
        if child.returncode != 0:
            raise SystemExit(f"backtest failed: {''.join(ln for _, ln in lines)[-2000:]}")

        def at(needle: str) -> float:
            return next((t for t, ln in lines if needle in ln), wall)

        rss = next(ln for _, ln in lines if ln.startswith("RSS "))
        self_kib, kids_kib = map(int, rss.split()[1:])
        own_cpu, kids_cpu = map(float, next(ln for _, ln in lines if ln.startswith("CPU ")).split()[1:])
        copied = next((ln.strip() for _, ln in lines if "copied" in ln), "")
        doc = json.loads(out.read_text())
        evaluating = at(": evaluating")
        return {
            "days": days,
            "pods": pods,
            "wall_s": round(wall, 1),
            "pull_s": round(evaluating, 1),
            "levels_s": round(at("alerts: 1/") - evaluating, 1),
            "alerts_s": round(wall - at("alerts: 1/"), 1),
            "cpu_s": {"genobs": own_cpu, "tools": kids_cpu, "source": round(cpu2 - cpu1, 1)},
            "floor_s": round(floor_s, 1),
            "floor_source_cpu_s": round(cpu1 - cpu0, 1),
            "floor_samples": floor_samples,
            "floor_mb": round(floor_bytes / 1e6),
            "genobs_peak_mib": round(self_kib / 1024),
            "tools_peak_mib": round(kids_kib / 1024),
            "disk_peak_mib": round(peak_disk[0] / 2**20),
            "copied": copied.removeprefix("backtest: "),
            "episodes": len(doc["candidate"]["episodes"]),
            # what fired, to compare two versions over the same history
            "fired": sorted(f"{e['alert']}/{e['severity']} {e['start']}..{e['end']}" for e in doc["candidate"]["episodes"]),
        }
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--points", nargs="+", default=["0.25x5", "0.5x5", "0.25x10"], help="DAYSxPODS")
    parser.add_argument("--log", type=Path, default=Path("bench-backtest.log"), help="genobs' progress, timed")
    parser.add_argument("--keep", type=Path, help="keep the history's blocks in this directory (one point)")
    parser.add_argument("--history", type=Path, help="a directory --keep filled: read the first DAYS of it")
    parser.add_argument("--genobs", type=Path, help="the checkout whose genobs runs (default: this one)")
    parser.add_argument("--no-floor", action="store_true", help="skip the floor (the source returning the samples once)")
    parser.add_argument("--history-only", action="store_true", help="with --keep: write and keep the history, measure nothing")
    args = parser.parse_args()
    if args.keep is not None and (len(args.points) > 1 or args.history is not None):
        parser.error("--keep keeps the history of one point, written by this run")
    only_read_families()
    if args.history_only:
        if args.keep is None:
            parser.error("--history-only needs --keep")
        days, pods = args.points[0].split("x")
        work = Path(tempfile.mkdtemp(prefix="genobs-bench-history-"))
        try:
            tsdb = backfill(work, float(days), int(pods), int(time.time()) // 60 * 60 - 120)
            proc, _ = source(work, tsdb)
            proc.terminate()
            proc.wait(timeout=60)
            link_blocks(tsdb, args.keep)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        return
    for point in args.points:
        days, pods = point.split("x")
        r = measure(float(days), int(pods), args.log, args.history, args.keep, args.genobs, not args.no_floor)
        print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()

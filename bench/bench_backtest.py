"""What `genobs backtest` costs: wall time and peak memory of a backtest of specs/chat.yaml
over a synthetic fleet's history (synthetic_fleet.py: vLLM 0.33's real series, N pods,
15 s scrapes), for several history lengths and fleet sizes, so the growth with days and
pods can be read off. The history is backfilled into a real Prometheus on loopback first
(not timed). Peak memory is reported for genobs' own process and, separately, for the
largest tool it runs (the private Prometheus or promtool).

    .venv/bin/python bench/bench_backtest.py --points 0.25x5 0.5x5 0.25x10
"""

from __future__ import annotations

import argparse
import json
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
# runs `genobs backtest` in this child process and prints its own peak RSS (VmHWM: ru_maxrss of
# a process that starts others also counts what they touched before exec) and its largest child's
RUNNER = """
import resource, sys
from genobs.cli import main
try:
    main(sys.argv[1:], standalone_mode=False)
finally:
    status = open("/proc/self/status").read().split("VmHWM:")[1].split()[0]
    kids_kib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(f"RSS {status} {kids_kib}", file=sys.stderr)
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
    from genobs.commands.backtest_rules import load_rules

    names = {s.name for s in load_rules(SPEC).raw}
    every = synthetic_fleet.families()
    kept = [f for f in every if any(sample in names for sample, _, _ in f.samples)]
    synthetic_fleet.families = lambda path=synthetic_fleet.EXPOSITION: kept


def source(work: Path, days: float, pods: int, end: int) -> tuple[subprocess.Popen, str]:
    steps = int(days * 86400 / SCRAPE)
    synthetic_fleet.SCRAPE_SECONDS = SCRAPE  # the generator's module-level interval
    om = work / "fleet.om"
    synthetic_fleet.write(om, pods, end - (steps - 1) * SCRAPE, steps)
    tsdb = work / "tsdb"
    subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", "-q", str(om), str(tsdb)], check=True)
    om.unlink()
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

    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url + "/-/ready", timeout=5) as r:
                if r.status == 200:
                    return proc, url
        except OSError:
            time.sleep(0.5)
    raise SystemExit("the source Prometheus did not become ready")


def measure(days: float, pods: int) -> dict:
    work = Path(tempfile.mkdtemp(prefix="genobs-bench-backtest-"))
    end = int(time.time()) // 60 * 60 - 120
    proc, url = source(work, days, pods, end)
    try:
        start = end - int(days * 86400) + SCRAPE
        args = ["backtest", str(SPEC), "--prometheus", url, "--from", str(start), "--to", str(end)]
        args += ["--format", "json", "--max-series", "1000000"]
        t0 = time.monotonic()
        done = subprocess.run([sys.executable, "-c", RUNNER, *args], capture_output=True, text=True, cwd=REPO)
        wall = time.monotonic() - t0
        if done.returncode != 0:
            raise SystemExit(f"backtest failed: {done.stderr[-2000:]}")
        rss = next(line for line in done.stderr.splitlines() if line.startswith("RSS "))
        self_kib, kids_kib = map(int, rss.split()[1:])
        copied = next((ln for ln in done.stderr.splitlines() if "copied" in ln), "")
        doc = json.loads(done.stdout)
        return {
            "days": days,
            "pods": pods,
            "wall_s": round(wall, 1),
            "genobs_peak_mib": round(self_kib / 1024),
            "tools_peak_mib": round(kids_kib / 1024),
            "copied": copied.removeprefix("backtest: "),
            "episodes": len(doc["candidate"]["episodes"]),
        }
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--points", nargs="+", default=["0.25x5", "0.5x5", "0.25x10"], help="DAYSxPODS")
    args = parser.parse_args()
    only_read_families()
    print("days  pods  wall s  genobs peak MiB  tools peak MiB  copied")
    for point in args.points:
        days, pods = point.split("x")
        r = measure(float(days), int(pods))
        print(
            f"{r['days']:<5g} {r['pods']:<5} {r['wall_s']:<7} {r['genobs_peak_mib']:<16} {r['tools_peak_mib']:<15} "
            f"{r['copied']}",
            flush=True,
        )


if __name__ == "__main__":
    main()

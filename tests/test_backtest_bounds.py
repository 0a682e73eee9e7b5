"""`genobs backtest` stays bounded whatever the source holds: long label values (Kubernetes
annotations copied into labels) cost neither memory nor temp disk, since the labels no rule
names are folded into one short label in the private copy and unfolded in the report; a
series whose named labels are too long, a selector whose labels alone would fill an answer,
and a source lookback-delta beyond a day are refused with exit 2. Peak memory is measured in
a child process (its own VmHWM and its tools' ru_maxrss), temp disk by watching TMPDIR."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from backtest_fake import FakeSource, fleet, serving
from click.testing import CliRunner
from e2e_support import PROMETHEUS, Prometheus

from genobs.backtest.rules import load_rules
from genobs.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "backtest"
LATENCY = FIXTURES / "latency.yaml"
NAMES = sorted({s.name for s in load_rules(LATENCY).raw if s.name})
RUNNER = """
import resource, sys
from genobs.cli import main
try:
    main(sys.argv[1:], standalone_mode=False)
finally:
    hwm = open("/proc/self/status").read().split("VmHWM:")[1].split()[0]
    print(f"RSS {hwm} {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}", file=sys.stderr)
"""


PREALLOCATED = ".tmp-for-creation"  # a block promtool is writing: its chunk file is allocated 512 MiB at once


def _size(folder: Path) -> tuple[int, int]:
    """Bytes allocated under `folder`: in all, and besides the blocks being written."""
    total = written = 0
    for root, _, files in os.walk(folder):
        for f in files:
            try:
                size = os.lstat(os.path.join(root, f)).st_blocks * 512
            except OSError:
                continue
            total += size
            written += 0 if PREALLOCATED in root else size
    return total, written


def measured(args: list[str], tmp: Path) -> tuple[subprocess.CompletedProcess, int, int, tuple[int, int]]:
    """(the run, genobs' peak RSS, its tools' peak RSS, temp disk peaks: all, and besides the
    blocks promtool is writing), in bytes."""
    scratch = tmp / "scratch"
    scratch.mkdir()
    peak, done = [(0, 0)], threading.Event()

    def watch() -> None:
        while not done.is_set():
            total, written = _size(scratch)
            peak[0] = (max(peak[0][0], total), max(peak[0][1], written))
            time.sleep(0.02)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    env = {**os.environ, "TMPDIR": str(scratch)}
    try:
        run = subprocess.run([sys.executable, "-c", RUNNER, *args], capture_output=True, text=True, env=env, timeout=600)
    finally:
        done.set()
        watcher.join()
    line = next((ln for ln in run.stderr.splitlines() if ln.startswith("RSS ")), "RSS 0 0")
    own, tools = map(int, line.split()[1:])
    return run, own * 1024, tools * 1024, peak[0]


def test_long_labels_cost_neither_memory_nor_disk(tmp_path: Path):
    """20 KB of labels on every series and one series with a 300 KB label, 8 hours at 15 s:
    copied as OpenMetrics with the labels on every line that was 1.8 GB of text; folded, the
    run stays within 250 MiB for genobs, 600 MiB for each tool and 64 MiB of temp disk
    besides the 512 MiB promtool allocates for each block it writes (two at most at once)."""
    series = [{**s, "annotation": f"{i}" + "a" * 20_000} for i, s in enumerate(fleet(NAMES, 2))]
    series.append({**fleet(["up"], 1)[0], "instance": "10.9.9.9:8000", "kubectl_last_applied": "b" * 300_000})
    with serving(FakeSource(series)) as url:
        args = ["backtest", str(LATENCY), "--prometheus", url, "--from", "now-2h", "--to", "now-1h", "--format", "json"]
        run, own, tools, disk = measured(args, tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    copied = next(ln for ln in run.stderr.splitlines() if "copied" in ln)
    assert json.loads(run.stdout)["candidate"]["spec"] == "chat-latency"
    assert own < 250 * 2**20, (own, copied)
    assert tools < 600 * 2**20, (tools, copied)
    assert disk[1] < 64 * 2**20, (disk, copied)
    assert disk[0] < 2 * 512 * 2**20 + 64 * 2**20, (disk, copied)


def test_folded_labels_come_back_in_the_episodes(tmp_path: Path):
    """A real source whose `up` series carry a 3 KB label no rule names: VllmTargetDown (up == 0
    keeps every label) fires with that label in full, as the source has it."""
    if not Path(PROMETHEUS).exists():
        pytest.fail("prometheus is required (Debian's 'prometheus' package; make test installs it)")
    base = (int(time.time()) // 3600 - 5) * 3600
    note = "x" * 3000
    lines = []
    for pod in range(2):
        labels = f'instance="10.0.0.{pod}:8000",job="vllm-chat",namespace="llm-prod",note="{pod}{note}"'
        for i in range(4 * 60):
            value = 0 if pod == 1 and 120 <= i < 150 else 1  # pod 1 down 02:00-02:30
            lines.append(f"up{{{labels}}} {value} {base + 60 * i}\n")
    om = tmp_path / "up.om"
    om.write_text("".join(lines) + "# EOF\n")
    tsdb = tmp_path / "tsdb"
    subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", "-q", str(om), str(tsdb)], check=True)
    prom = Prometheus(tmp_path, {"global": {"scrape_interval": "15s"}}, {})
    prom.start(timeout=120)
    try:
        args = ["backtest", str(LATENCY), "--prometheus", prom.url, "--from", str(base + 3600)]
        result = CliRunner().invoke(main, [*args, "--to", str(base + 4 * 3600 - 60), "--format", "json"])
    finally:
        prom.stop()
    assert result.exit_code == 0, result.output
    [episode] = [e for e in json.loads(result.stdout)["candidate"]["episodes"] if e["alert"] == "VllmTargetDown"]
    assert episode["labels"]["note"] == "1" + note and episode["labels"]["instance"] == "10.0.0.1:8000"
    assert "genobs_folded" not in episode["labels"]


def run(url: str, *args: str):
    return CliRunner().invoke(main, ["backtest", str(LATENCY), "--prometheus", url, "--from", "now-2h", *args])


def test_long_labels_the_rules_read_and_label_floods_are_refused():
    named = [{**s, "instance": "i" * 10_000} for s in fleet(NAMES, 1)]
    with serving(FakeSource(named)) as url:
        result = run(url, "--dry-run")
    assert result.exit_code == 2 and "bytes of labels the rules read" in result.stderr, result.output
    flood = [{**s, "instance": f"10.1.{i // 250}.{i % 250}", "note": "n" * 20_000} for i, s in enumerate(fleet(["up"], 1000))]
    with serving(FakeSource(flood)) as url:
        result = run(url)
    assert result.exit_code == 2 and "MiB of labels, and every pull window's answer repeats them" in result.stderr


@pytest.mark.parametrize(
    ("lookback", "message"),
    [
        ("99999999y", "runs with --query.lookback-delta=99999999y; backtest replays a lookback of at most 1d"),
        ("1000y", "at most 1d"),
        ("25h", "at most 1d"),
        ("5 minutes", "which is not a duration"),
        ("\x1b[2J", "'\\x1b[2J', which is not a duration"),
    ],
)
def test_a_source_lookback_beyond_a_day_is_refused(lookback: str, message: str):
    fake = FakeSource(fleet(NAMES, 1), flags={"query.lookback-delta": lookback})
    with serving(fake) as url:
        for extra in (["--dry-run"], []):
            started = time.monotonic()
            result = run(url, *extra)
            assert result.exit_code == 2 and message in result.stderr, result.output
            assert "Traceback" not in result.output and time.monotonic() - started < 10
    assert not any(r.path == "query" for r in fake.seen)  # nothing was pulled


def test_a_lookback_of_a_day_is_pulled_for(tmp_path: Path):
    fake = FakeSource(fleet(NAMES, 1), flags={"query.lookback-delta": "1d"})
    with serving(fake) as url:
        result = run(url, "--to", "now-1h", "--dry-run")
    assert result.exit_code == 0, result.output
    start, pulled = result.stdout.splitlines()[0], result.stdout.splitlines()[1]
    assert "range: " in start and "raw history pulled: " in pulled

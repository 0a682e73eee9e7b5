"""`genobs backtest`'s private Prometheus: it never outlives genobs (a real SIGTERM stops it and
removes the copy; a genobs killed with -9 takes it along, and the next run removes the
folder), other local users cannot read it (basic auth with a random password, a 0700
folder), and its answers are asked for in pieces sized by their series, so fleets of
hundreds of engine ranks evaluate."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from backtest_fake import FakeSource, fleet, serving
from e2e_support import PROMETHEUS

from genobs.backtest.alerts import evaluate
from genobs.backtest.labels import Folding
from genobs.backtest.rules import Rule, load_rules
from genobs.backtest.tsdb import PrivatePrometheus, backfill_levels

pytestmark = pytest.mark.slow  # each test starts a real private Prometheus (one, hundreds of ranks)

FIXTURES = Path(__file__).parent / "fixtures" / "backtest"
CHAT = FIXTURES / "chat.yaml"  # a 3-day warm-up: the private Prometheus runs for a while
LATENCY = FIXTURES / "latency.yaml"


def children(pid: int) -> dict[int, str]:
    """Every descendant of `pid`: process id -> command name."""
    found: dict[int, str] = {}
    parents = {pid}
    for _ in range(5):
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)
                comm = fields[0].split("(", 1)[1]
                ppid = int(fields[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            if ppid in parents and int(entry.name) not in found:
                found[int(entry.name)] = comm
        parents |= set(found)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def start(tmp: Path, url: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "genobs", "backtest", str(CHAT), "--prometheus", url, "--from", "now-3h", "--to", "now-1h"]
    env = {**os.environ, "TMPDIR": str(tmp)}
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_prometheus(proc: subprocess.Popen) -> int:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        found = [p for p, comm in children(proc.pid).items() if comm == "prometheus"]
        if found:
            return found[0]
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    raise AssertionError("the private Prometheus never started")


def leftovers(tmp: Path) -> list[str]:
    return sorted(p.name for p in tmp.iterdir() if p.name.startswith("genobs-backtest-"))


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT])
def test_sigterm_stops_the_private_prometheus_and_removes_the_copy(tmp_path: Path, signum: int):
    with serving(FakeSource(fleet(sorted({s.name for s in load_rules(CHAT).raw if s.name}), 1))) as url:
        proc = start(tmp_path, url)
        private = wait_for_prometheus(proc)
        assert leftovers(tmp_path)
        proc.send_signal(signum)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum, err
    assert f"stopped by {signal.Signals(signum).name}" in err and "Traceback" not in err
    assert not alive(private)
    assert leftovers(tmp_path) == []


def test_a_killed_genobs_takes_its_children_along(tmp_path: Path):
    names = sorted({s.name for s in load_rules(CHAT).raw if s.name})
    with serving(FakeSource(fleet(names, 1))) as url:
        proc = start(tmp_path, url)
        private = wait_for_prometheus(proc)
        proc.kill()
        proc.communicate(timeout=30)
        deadline = time.monotonic() + 10
        while alive(private) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive(private), "the private Prometheus outlived genobs"
        [left] = leftovers(tmp_path)  # -9 leaves the folder: the next run removes it
        cmd = [sys.executable, "-m", "genobs", "backtest", str(LATENCY), "--prometheus", url, "--from", "now-2h", "--to", "now-1h"]
        done = subprocess.run(cmd, env={**os.environ, "TMPDIR": str(tmp_path)}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert leftovers(tmp_path) == []


def test_other_local_users_cannot_read_the_private_prometheus(tmp_path: Path):
    work = tmp_path / "work"
    work.mkdir(mode=0o700)
    (work / "tsdb").mkdir()
    server = PrivatePrometheus(work, work / "tsdb", "5m")
    server.start()
    try:
        url = server.source.url
        for path in ("/api/v1/query?query=up", "/-/ready", "/graph"):
            with pytest.raises(urllib.error.HTTPError) as refused:
                urllib.request.urlopen(url + path, timeout=10)
            assert refused.value.code == 401
        assert server.source.ask("query", {"query": "vector(1)"})["result"]  # genobs' own requests carry the password
        assert stat.S_IMODE((work / "web.yml").stat().st_mode) == 0o600
        assert server.password not in repr(server.source) and server.password not in (work / "web.yml").read_text()
    finally:
        server.stop()


def test_the_run_folder_is_private(tmp_path: Path):
    from genobs import scratch

    with scratch.make(scratch.BACKTEST, "test") as tmp:
        assert stat.S_IMODE(Path(tmp).stat().st_mode) == 0o700


RANKS = 500


def test_hundreds_of_engine_ranks_evaluate(tmp_path: Path):
    """500 ranks x 12 h at 30 s: 1,440 evaluations of 500 series are 720,000 points, which one
    query_range of 2,000 steps asked for and promhttp refused; sized by series they pass."""
    if not Path(PROMETHEUS).exists():
        pytest.fail("prometheus is required")
    base = (int(time.time()) // 3600 - 14) * 3600
    lines = [f'up{{job="vllm",instance="r{r}"}} 1 {base + 120 * i}\n' for r in range(RANKS) for i in range(12 * 30 + 1)]
    (tmp_path / "up.om").write_text("".join(lines) + "# EOF\n")
    tsdb = tmp_path / "tsdb"
    subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", "-q", str(tmp_path / "up.om"), str(tsdb)], check=True)
    server = PrivatePrometheus(tmp_path, tsdb, "5m")
    start, end = base + 300.0, base + 12 * 3600.0
    recorded = Rule("g", 30.0, "genobs:up:max", "max by (instance) (up)", (), False)
    alert = Rule("g", 30.0, "Up", "genobs:up:max == 1", (("severity", "warning"),), True, 0.0)
    server.start()
    try:
        backfill_levels(server, ((recorded,),), start, end, lambda m: None)
        episodes = evaluate(server.source, (alert,), start, end, Folding(), lambda m: None)
    finally:
        server.stop()
    assert len(episodes) == RANKS and all(e.end is None for e in episodes)
    assert {dict(e.labels)["instance"] for e in episodes} == {f"r{r}" for r in range(RANKS)}


def test_private_errors_name_the_private_prometheus(tmp_path: Path):
    """A failure on the private server names it as such, not by a loopback port the user never gave."""
    server = PrivatePrometheus(tmp_path, tmp_path, "5m")
    server.source = server._source(9, timeout=2)
    with pytest.raises(Exception) as failed:
        server.source.ask("query", {"query": "1"})
    assert "the private Prometheus" in str(failed.value) and "127.0.0.1:9" not in str(failed.value)


def test_deadline_bounds_a_slow_source():
    """Each answer 1.5 s late, --timeout 5: without --deadline a run would take one request's
    time per window; --deadline 3 ends it after about 3 s, naming the option."""
    fake = FakeSource(fleet(["up"], 1))
    slow = fake.answer

    def late(req):
        time.sleep(1.5)
        return slow(req)

    fake.answer = late  # type: ignore[method-assign]
    with serving(fake) as url:
        cmd = [sys.executable, "-m", "genobs", "backtest", str(LATENCY), "--prometheus", url, "--from", "now-2h"]
        started = time.monotonic()
        done = subprocess.run([*cmd, "--timeout", "5", "--deadline", "3"], capture_output=True, text=True, timeout=60)
        took = time.monotonic() - started
    assert done.returncode == 2, done.stderr
    assert "no complete result within the overall deadline of 3s (--deadline)" in done.stderr, done.stderr
    assert took < 10, took
    assert json.dumps(done.stderr)  # one clear line, no traceback
    assert "Traceback" not in done.stderr

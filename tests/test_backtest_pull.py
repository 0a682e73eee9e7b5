"""`genobs backtest`'s copy of the raw history (genobs.backtest.pull: answers fetched concurrently,
promtool run beside the pull) holds exactly the samples the plain serial pull copies: one
request per selector and window, one sample at a time, one promtool run per window, as
the command first did. Both copies are read back with `promtool tsdb dump` from a real
Prometheus holding a fleet's history plus a series with millisecond timestamps, NaN and
±Inf; a hostile answer stops the pull with a PrometheusError and leaves no file."""

from __future__ import annotations

import math
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from backtest_history import write_openmetrics
from e2e_support import PROMETHEUS, Prometheus
from fleet_series import Fleet
from test_doctor_hostile import reply, serve

from genobs.backtest.labels import Folding, om_labels, om_value
from genobs.backtest.pull import pull_raw
from genobs.backtest.rules import load_rules, selector_text
from genobs.backtest.source import Source
from genobs.promhttp import PrometheusError

SPEC = Path(__file__).parent / "fixtures" / "backtest" / "chat.yaml"
HOURS = 3
ODD = 'vllm:kv_cache_usage_perc{engine="0",job="vllm-chat",model_name="gpt-oss-120b",namespace="llm-prod",pod="odd-0"}'
# values the fast paths must spell as the careful one does
ODD_VALUES = ["NaN", "+Inf", "-Inf", "1e+300", "1.5e-320", "-0.0", "0.1", "0.30000000000000004", "1234567.25"]


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory):
    if not Path(PROMETHEUS).exists():
        pytest.fail("prometheus is required (Debian's 'prometheus' package; make test installs it)")
    tmp = tmp_path_factory.mktemp("pull")
    base = (int(time.time()) // 3600 - 6) * 3600
    fleet = Fleet({"replicas": 2, "duration": f"{HOURS * 60}m"}, yaml.safe_load(SPEC.read_text()))
    names = {s.name for s in load_rules(SPEC).raw}
    tsdb = tmp / "tsdb"
    tsdb.mkdir()
    fleet_om, odd_om = tmp / "fleet.om", tmp / "odd.om"
    write_openmetrics(fleet, fleet_om, base, names)
    # scraped off the second: millisecond timestamps (.050 and .500 among them) and odd values
    lines = [f"{ODD} {ODD_VALUES[i % len(ODD_VALUES)]} {base + 30 * i}.{(i * 50) % 1000:03d}\n" for i in range(HOURS * 120)]
    odd_om.write_text("".join(lines) + "# EOF\n")
    for om in (fleet_om, odd_om):
        subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", "-q", str(om), str(tsdb)], check=True)
    prom = Prometheus(tmp, {"global": {"scrape_interval": "15s"}}, {})
    prom.start(timeout=120)
    try:
        yield prom.url, base
    finally:
        prom.stop()


def serial_pull(url: str, selectors, start: float, end: float, window: float, work: Path, tsdb: Path) -> int:
    """The plain pull: each window, each selector in turn, each sample formatted on its own."""
    total = 0
    n = max(1, math.ceil((end - start) / window))
    for i in range(n):
        a, b = start + i * window, min(end, start + (i + 1) * window)
        path = work / "window.om"
        written = 0
        with path.open("w", encoding="utf-8") as out:
            seen: set[str] = set()
            for sel in selectors:
                query = {"query": f"{selector_text(sel)}[{int(b - a)}s]", "time": f"{b:.3f}"}
                for series in Source(url).ask("query", query, True, expect="matrix")["result"]:
                    key = series["metric"]["__name__"] + om_labels(series["metric"])
                    if key in seen:
                        continue
                    seen.add(key)
                    for point in series["values"]:
                        ts, value = float(point[0]), float(point[1])
                        if a < ts <= b:
                            out.write(f"{key} {om_value(value)} {ts:.3f}\n")
                            written += 1
            out.write("# EOF\n")
        if written:
            cmd = ["promtool", "tsdb", "create-blocks-from", "openmetrics", "-q", str(path), str(tsdb)]
            subprocess.run(cmd, check=True, capture_output=True)
        total += written
        path.unlink()
    return total


def dump(tsdb: Path) -> list[str]:
    (tsdb / "wal").mkdir(exist_ok=True)  # what `tsdb dump` opens besides the blocks
    out = subprocess.run(["promtool", "tsdb", "dump", str(tsdb)], check=True, capture_output=True, text=True).stdout
    return sorted(out.splitlines())


def test_concurrent_pull_copies_the_serial_pulls_samples(source, tmp_path: Path):
    url, base = source
    source, plain = Source(url), Folding()
    selectors = tuple(sorted({(s.name or "", s.matchers): s for s in load_rules(SPEC).raw}.values()))
    # windows that do not divide the range; the first starts before the history
    start, end, window = base - 600.0, base + HOURS * 3600 - 1000.0, 1700.0
    copies = {}
    for name, pull in [
        ("serial", lambda work, tsdb: serial_pull(url, selectors, start, end, window, work, tsdb)),
        ("concurrent", lambda work, tsdb: pull_raw(source, selectors, start, end, window, work, tsdb, plain, print, 3, 2)),
        ("one at a time", lambda work, tsdb: pull_raw(source, selectors, start, end, window, work, tsdb, plain, print, 1, 1)),
    ]:
        work = tmp_path / name.replace(" ", "-")
        tsdb = work / "raw"
        tsdb.mkdir(parents=True)
        copied = pull(work, tsdb)
        lines = dump(tsdb)
        assert getattr(copied, "samples", copied) == len(lines), name
        assert sorted(p.name for p in work.iterdir()) == ["raw"], name  # no window file or log left
        copies[name] = lines
    serial = copies["serial"]
    odd = [line for line in serial if 'pod="odd-0"' in line]
    assert len(serial) > 100_000 and odd  # a fleet's three hours, and the odd series in them
    assert {line.split()[-2] for line in odd} >= {"NaN", "+Inf", "-Inf"}
    assert any(line.endswith(("050", "500")) for line in odd)
    assert copies["concurrent"] == serial
    assert copies["one at a time"] == serial


def test_a_hostile_answer_stops_the_pull_cleanly(source, tmp_path: Path):
    url, base = source
    selectors = tuple(load_rules(SPEC).raw[:3])
    bad = b'{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"__name__":"up"},"values":[[1,"x"]]}]}}'
    tsdb = tmp_path / "raw"
    tsdb.mkdir()
    with serve(reply(bad)) as hostile:
        with pytest.raises(PrometheusError, match="sample value that is not a number"):
            pull_raw(Source(hostile, timeout=5), selectors, base, base + 7200.0, 600.0, tmp_path, tsdb, Folding(), print)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["raw"]


def test_samples_outside_the_window_or_at_no_time_are_left_out(tmp_path: Path):
    """An answer's samples are kept only inside their window: one at the window's start (a
    range selector includes it), one at NaN or infinite time (JSON's constants) are not."""
    t = 1_700_000_000
    series = [
        ("vllm-chat", f'[[{t - 600},"1"],[Infinity,"1"],[{t},"1"]]'),
        ("vllm-odd", f'[[{t - 300}.5,"0"],[NaN,"1"],[{t},"1"]]'),
    ]
    result = ",".join(f'{{"metric":{{"__name__":"up","job":"{job}"}},"values":{values}}}' for job, values in series)
    body = ('{"status":"success","data":{"resultType":"matrix","result":[' + result + "]}}").encode()
    tsdb = tmp_path / "raw"
    tsdb.mkdir()
    with serve(reply(body)) as odd:
        copied = pull_raw(Source(odd, timeout=5), tuple(load_rules(SPEC).raw[:1]), t - 600.0, float(t), 600.0, tmp_path, tsdb, Folding(), print)
    assert copied.samples == 3
    lines = [(line.split()[1], line.split()[-2], line.split()[-1]) for line in dump(tsdb)]
    assert sorted(lines) == [
        ('job="vllm-chat"}', "1", f"{t}000"),
        ('job="vllm-odd"}', "0", f"{t - 300}500"),
        ('job="vllm-odd"}', "1", f"{t}000"),
    ]

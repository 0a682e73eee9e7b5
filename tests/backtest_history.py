"""Days of a vLLM fleet's history in a real Prometheus, for `genobs backtest` tests and the
bench: tests/fleet_series.py generates the series of every target (the replicas, and the
gateway and the application in front of them when the fleet has them) with incidents at
known times, they are written as OpenMetrics, `promtool tsdb create-blocks-from openmetrics`
turns them into blocks, and a Prometheus on a free loopback port serves them."""

from __future__ import annotations

import subprocess
from datetime import datetime, timezone
from pathlib import Path

from e2e_support import Prometheus
from fleet_series import STEP, Fleet


def write_openmetrics(fleet: Fleet, path: Path, base: int, names: set[str], every: int = 1) -> int:
    """The fleet's series named in `names`, sample timestamps from `base`, every `every`-th
    sample (a scrape interval of every x 30 s); returns the samples written."""
    written = 0
    with path.open("w", encoding="utf-8") as out:
        by_name: dict[str, list[str]] = {}
        for s in fleet.built():
            if s.name not in names:
                continue
            lines = by_name.setdefault(s.name, [])
            labels = s.text()
            for i in range(0, len(s.values), every):
                v = s.values[i]
                if isinstance(v, float):
                    lines.append(f"{labels} {v!r} {base + i * STEP}\n")
        for name in sorted(by_name):  # OpenMetrics wants each family's samples together
            out.writelines(by_name[name])
            written += len(by_name[name])
        out.write("# EOF\n")
    return written


def backfilled_prometheus(workdir: Path, fleet: Fleet, base: int, names: set[str], every: int = 1) -> Prometheus:
    """A started Prometheus whose TSDB holds the fleet's history from `base` on."""
    om = workdir / "history.om"
    write_openmetrics(fleet, om, base, names, every)
    tsdb = workdir / "tsdb"
    tsdb.mkdir(parents=True)
    subprocess.run(["promtool", "tsdb", "create-blocks-from", "openmetrics", "-q", str(om), str(tsdb)], check=True)
    om.unlink()
    prom = Prometheus(workdir, {"global": {"scrape_interval": "15s"}}, {})
    prom.start(timeout=120)
    return prom


def report_time(text: str) -> float:
    """A time of the backtest's JSON report (RFC 3339, UTC) as Unix seconds."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(timezone.utc).timestamp()


def episodes(side: dict, alert: str, severity: str) -> list[tuple[float, float]]:
    """(start, end) of each episode of one alert and severity in a side of the report."""
    return [
        (report_time(e["start"]), report_time(e["end"]))
        for e in side["episodes"]
        if e["alert"] == alert and e["severity"] == severity
    ]

"""Wall time and peak memory of `genobs build`, each in a fresh process, best of N runs:
the example specs with and without promtool checks, next to importing genobs' runtime
dependencies in a bare interpreter, and (`--scale`) large specs: many SLOs, many models."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import scale_specs  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEPS = "import click, pydantic, yaml, jinja2, grafanalib.core, promql_parser, prometheus_client"
# name -> (SLOs, models)
SCALE = {
    "100 SLOs": (100, 1),
    "200 SLOs": (200, 1),
    "100 models x 50 SLOs": (50, 100),
    "1000 models x 50 SLOs": (50, 1000),
}


def measure(cmd: list[str], runs: int) -> tuple[float, float]:
    """(best wall seconds, peak RSS MiB of the child) over `runs` runs."""
    best = float("inf")
    peak = 0.0
    for _ in range(runs):
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own peak RSS
        wall = time.perf_counter() - start
        if status != 0:
            raise SystemExit(f"{cmd} failed with status {status}")
        best = min(best, wall)
        peak = max(peak, usage.ru_maxrss / 1024)
    return best, peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=5, help="runs per command; the best is reported")
    parser.add_argument("--scale", action="store_true", help="also the large specs (minutes; one run each)")
    args = parser.parse_args()
    genobs = [sys.executable, "-m", "genobs"]
    rows: list[tuple[str, float, float, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        deps = measure([sys.executable, "-c", DEPS], args.runs)
        rows.append(("import of the runtime dependencies", *deps, ""))
        rows.append(("genobs --help", *measure([*genobs, "--help"], args.runs), ""))
        one = measure([*genobs, "build", "--no-check", "specs/chat.yaml", "-o", tmp], args.runs)
        rows.append(("genobs build --no-check specs/chat.yaml", *one, f"{one[0] / deps[0]:.1f}x the import"))
        rows.append(
            ("genobs build specs/chat.yaml", *measure([*genobs, "build", "specs/chat.yaml", "-o", tmp], args.runs), "")
        )
        fast = measure([*genobs, "build", "--no-check", "specs/", "-o", tmp], args.runs)
        rows.append(("genobs build --no-check specs/", *fast, ""))
        checked = measure([*genobs, "build", "specs/", "-o", tmp], args.runs)
        rows.append(("genobs build specs/ (promtool checks)", *checked, f"{checked[0] / fast[0]:.1f}x --no-check"))
        if args.scale:
            folder = Path(tmp) / "scale"
            folder.mkdir()
            for label, (slos, models) in SCALE.items():
                name = label.replace(" ", "-")
                spec = scale_specs.write(folder, name, slos, models)
                wall, rss = measure([*genobs, "build", "--no-check", str(spec), "-o", str(folder / "out")], 1)
                prom = folder / "out" / name / "prometheus"
                size = sum(p.stat().st_size for p in prom.rglob("*.yaml")) / 2**20
                slo = (prom / "slo.rules.yaml").stat().st_size / 2**20
                rows.append(
                    (f"build --no-check, {label}", wall, rss, f"rules+tests {size:.1f} MiB, slo.rules {slo:.2f} MiB")
                )
    print(f"{'command':<44} {'best wall s':>12} {'peak RSS MiB':>13}  note")
    for name, wall, rss, note in rows:
        print(f"{name:<44} {wall:>12.3f} {rss:>13.1f}  {note}")


if __name__ == "__main__":
    main()

"""Wall time and peak memory of `genobs build specs/chat.yaml` next to a bare
`python -c "import yaml"`, each in a fresh process, best of N runs."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RUNS = 5


def measure(cmd: list[str]) -> tuple[float, float]:
    """(best wall seconds, peak RSS MiB of the child) over RUNS runs."""
    best = float("inf")
    peak = 0.0
    for _ in range(RUNS):
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
    baseline = measure([sys.executable, "-c", "import yaml"])
    with tempfile.TemporaryDirectory() as tmp:
        build = measure([sys.executable, "-m", "genobs", "build", "--no-check", "specs/chat.yaml", "-o", tmp])
        checked = measure([sys.executable, "-m", "genobs", "build", "specs/chat.yaml", "-o", tmp])
    helptime = measure([sys.executable, "-m", "genobs", "--help"])
    print(f"{'command':<44} {'best wall s':>12} {'peak RSS MiB':>13}")
    for name, (wall, rss) in (
        ('python -c "import yaml"', baseline),
        ("genobs --help", helptime),
        ("genobs build --no-check specs/chat.yaml", build),
        ("genobs build specs/chat.yaml (with promtool)", checked),
    ):
        print(f"{name:<44} {wall:>12.3f} {rss:>13.1f}")


if __name__ == "__main__":
    main()

"""Private scratch folders in the system temp folder: the check stage's (copies of each
output that promtool runs on) and backtest's (the copied history and its private
Prometheus). A genobs killed with -9 cannot remove its own, so each is named after its
owner's process id and holds a marker: the next run removes the ones it can prove are such
leftovers (name, marker, owner no longer running), and nothing else."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

PREFIX = "genobs-check-"
MARKER = ".genobs-check"
BACKTEST = "genobs-backtest-"  # backtest's folders carry the same marker


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):  # another user's process, or no such pid
        return True
    return True


def sweep(folder: Path | None = None, prefix: str = PREFIX) -> list[Path]:
    """Remove the scratch folders whose owner is gone; returns what was removed."""
    folder = Path(folder or tempfile.gettempdir())
    name = re.compile(rf"{re.escape(prefix)}(?P<pid>[0-9]+)-[A-Za-z0-9_]+")
    removed = []
    try:
        entries = list(folder.iterdir())
    except OSError:
        return []
    for p in entries:
        m = name.fullmatch(p.name)
        if m is None or p.is_symlink() or not (p / MARKER).is_file() or _running(int(m["pid"])):
            continue
        shutil.rmtree(p, ignore_errors=True)
        removed.append(p)
    return removed


def make(prefix: str = PREFIX, what: str = "genobs build: promtool's private copies") -> tempfile.TemporaryDirectory:
    """A new scratch folder (mode 0700), after sweeping the leftovers of killed runs."""
    sweep(prefix=prefix)
    tmp = tempfile.TemporaryDirectory(prefix=f"{prefix}{os.getpid()}-")
    (Path(tmp.name) / MARKER).write_bytes(f"{what}; removed by the next run\n".encode())
    return tmp

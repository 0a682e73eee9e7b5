"""Private scratch folders of the check stage (copies of each output that promtool runs on),
in the system temp folder. A build killed with -9 cannot remove its own, so each is named
after its owner's process id and holds a marker: the next build removes the ones it can
prove are such leftovers (name, marker, owner no longer running), and nothing else."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

PREFIX = "genobs-check-"
MARKER = ".genobs-check"
_NAME = re.compile(rf"{re.escape(PREFIX)}(?P<pid>[0-9]+)-[A-Za-z0-9_]+")


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):  # another user's process, or no such pid
        return True
    return True


def sweep(folder: Path | None = None) -> list[Path]:
    """Remove the scratch folders whose owner is gone; returns what was removed."""
    folder = Path(folder or tempfile.gettempdir())
    removed = []
    try:
        entries = list(folder.iterdir())
    except OSError:
        return []
    for p in entries:
        m = _NAME.fullmatch(p.name)
        if m is None or p.is_symlink() or not (p / MARKER).is_file() or _running(int(m["pid"])):
            continue
        shutil.rmtree(p, ignore_errors=True)
        removed.append(p)
    return removed


def make() -> tempfile.TemporaryDirectory:
    """A new scratch folder, after sweeping the leftovers of killed builds."""
    sweep()
    tmp = tempfile.TemporaryDirectory(prefix=f"{PREFIX}{os.getpid()}-")
    (Path(tmp.name) / MARKER).write_bytes(b"genobs build: promtool's private copies; removed by the next build\n")
    return tmp

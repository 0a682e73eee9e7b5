"""`check` stage: run the real promtool on generated rule files and unit tests."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Result:
    ok: bool
    output: str


def find() -> str | None:
    return shutil.which("promtool")


def _run(args: list[str], cwd: Path | None = None) -> Result:
    exe = find()
    if exe is None:
        return Result(False, "promtool not found on PATH")
    proc = subprocess.run([exe, *args], capture_output=True, text=True, cwd=cwd, timeout=600)
    return Result(proc.returncode == 0, (proc.stdout + proc.stderr).strip())


def check_rules(files: list[Path]) -> Result:
    return _run(["check", "rules", "--lint=all", "--lint-fatal", *[str(f) for f in files]])


def test_rules(files: list[Path], cwd: Path | None = None) -> Result:
    return _run(["test", "rules", *[str(f) for f in files]], cwd=cwd)

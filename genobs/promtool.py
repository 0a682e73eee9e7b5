"""`check` stage: run the real promtool on generated rule files and unit tests."""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Result:
    """A promtool run: whether it passed, and what it printed."""

    ok: bool
    output: str


def find() -> str | None:
    return shutil.which("promtool")


# promtool is a Go program: with Go's default GOGC=100 the generated unit tests take 10 to
# 25% more CPU (the example specs, one and two promtools at a time) than with GOGC=400, which
# lets the heap grow to 5x the live data before collecting (about 110 MiB instead of 60 MiB
# for the largest generated test); GOMEMLIMIT collects harder before 1 GiB. What the user
# set wins.
GO_ENV = {"GOGC": "400", "GOMEMLIMIT": "1GiB"}


def _env() -> dict[str, str]:
    return {**GO_ENV, **os.environ}


def _run(args: list[str], cwd: Path | None = None) -> Result:
    import subprocess  # here: a build without checks never starts a process

    exe = find()
    if exe is None:
        return Result(False, "promtool not found on PATH")
    # one stream: promtool writes each file's heading to stdout and what failed in it to stderr
    proc = subprocess.run(
        [exe, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=cwd, timeout=600, env=_env()
    )
    ok = proc.returncode == 0
    return Result(ok, proc.stdout.strip() if ok else failures(proc.stdout))


def failures(output: str) -> str:
    """promtool's output without the files that passed: a run over many files (the build shares
    runs between specs) says what failed, not every file that did not."""
    kept = []
    for section in re.split(r"\n(?=(?:Checking|Unit Testing:) )", output.strip()):
        lines = section.strip().splitlines()
        passed = len(lines) == 2 and lines[0].startswith(("Checking ", "Unit Testing: ")) and lines[1].strip().startswith("SUCCESS")
        if not passed:
            kept.append(section.strip())
    return "\n\n".join(kept)


def check_rules(files: list[Path]) -> Result:
    return _run(["check", "rules", "--lint=all", "--lint-fatal", *[str(f) for f in files]])


def test_rules(files: list[Path], cwd: Path | None = None) -> Result:
    return _run(["test", "rules", *[str(f) for f in files]], cwd=cwd)

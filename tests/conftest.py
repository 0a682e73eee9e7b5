from __future__ import annotations

import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SPECS = sorted((REPO / "specs").glob("*.yaml"))


@pytest.fixture(scope="session")
def promtool() -> str:
    exe = shutil.which("promtool")
    if exe is None:
        pytest.fail("promtool is required: install Debian's 'prometheus' package (make test does)")
    return exe


def spec_text(**service) -> str:
    """A small valid spec; keyword arguments replace service fields."""
    fields = {"engine_version": '"0.33"', "selector": "{namespace: ns, job: vllm}"}
    fields.update(service)
    body = "\n".join(f"  {k}: {v}" for k, v in fields.items())
    return f"version: genobs/v1\nname: t\nuse_case: chat\nservice:\n{body}\n"


def pytest_terminal_summary(terminalreporter) -> None:
    """The real-engine run's figures (start time, detection times, agreement with the load tool)."""
    import sys

    figures = [f for name, m in list(sys.modules.items()) if name.endswith("test_real_vllm") for f in getattr(m, "FIGURES", [])]
    if figures:
        terminalreporter.section("real vLLM figures")
        for phase, what, value in figures:
            terminalreporter.write_line(f"{phase:>16}  {what}: {value}")

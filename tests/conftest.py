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


def _real_vllm_figures() -> list[tuple]:
    """The figures test_real_vllm recorded in this process."""
    import sys

    return [f for name, m in list(sys.modules.items()) if name.endswith("test_real_vllm") for f in getattr(m, "FIGURES", [])]


# figures the xdist workers sent back as they finished (the real-engine file runs in one of them)
WORKER_FIGURES: list[tuple] = []


def pytest_sessionfinish(session) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)  # set in an xdist worker only
    if workeroutput is not None:
        workeroutput["real_vllm_figures"] = _real_vllm_figures()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    WORKER_FIGURES.extend(getattr(node, "workeroutput", {}).get("real_vllm_figures", []))


def pytest_terminal_summary(terminalreporter) -> None:
    """The real-engine run's figures (start time, detection times, agreement with the load tool)."""
    figures = _real_vllm_figures() + WORKER_FIGURES
    if figures:
        terminalreporter.section("real vLLM figures")
        for phase, what, value in figures:
            terminalreporter.write_line(f"{phase:>16}  {what}: {value}")


# the files that run longest (real servers for minutes, the combination matrix), longest first: the
# suite runs with `-n 3 --dist loadfile --no-loadscope-reorder`, which hands files out in collection
# order (by default xdist hands out the files with the most tests first, and these hold one to
# twenty-five), so these start first instead of as the other workers run out of files (measured on
# 2 cores: the two vmalert files began in the last four minutes and ran alone for three). The
# real-engine file runs after them, on its own (`make test`): beside the rest it took the suite from
# 23 to 17-18 minutes, but three of six such runs failed a timing (vLLM's phases, an exporter-down
# deadline)
LONGEST_FIRST = (
    "test_two_clusters_gateway.py",
    "test_vmalert.py",
    "test_combinations.py",
    "test_e2e_engines.py",
    "test_e2e.py",
    "test_missed_scrape.py",
    "test_two_clusters.py",
    "test_readme_walkthrough.py",
    "test_backtest.py",
    "test_e2e_client.py",
    "test_e2e_sglang_pd.py",
    "test_e2e_dynamo.py",
    "test_e2e_gateway.py",
    "test_compare.py",
)


# tests that are `slow` (skipped by the quick loop, `-m 'not slow'`) for what they share rather than
# for what they are: each one here starts a real Prometheus over days of backfilled history in a
# module fixture (40 s to two minutes on 2 cores before its first test runs)
SLOW_FIXTURES = {("test_backtest.py", "history"), ("test_compare.py", "live")}
# the combination matrix takes about twelve minutes of a core; the quick loop keeps one combination
QUICK_COMBINATION = "test_combination[vllm-one-cluster]"


def pytest_collection_modifyitems(config, items) -> None:
    for item in items:
        fixtures = getattr(item, "fixturenames", ())
        if any((item.path.name, f) in SLOW_FIXTURES for f in fixtures) or (
            getattr(item, "originalname", None) == "test_combination" and item.name != QUICK_COMBINATION
        ):
            item.add_marker(pytest.mark.slow)
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: the rest keep their order

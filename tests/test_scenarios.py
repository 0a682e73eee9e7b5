"""Production-shaped fleets against the generated rules: one promtool run per scenario.

Each file in tests/scenarios/ states what must page, warn and stay silent on a fleet whose
series are written from what vLLM really exports (tests/fleet_series.py), not from genobs'
plan. See "Scenario corpus" in docs/development.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from scenario_runner import SCENARIOS, run

FILES = sorted(SCENARIOS.glob("*.yaml"))


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_scenario(path: Path, tmp_path: Path, promtool: str) -> None:
    run(path, tmp_path, promtool)


def test_corpus_is_not_empty() -> None:
    assert len(FILES) >= 3

"""The dashboard a newcomer opens first: it leads with the use case's primary KPI
(presets.yaml `dashboard_lead`, data not code), links back to a published runbook,
and the build warns when runbook links in notifications could not open."""

from __future__ import annotations

import pytest
import yaml

from genobs.compiler import build_plan
from genobs.loader import load_spec_text
from genobs.render.dashboard import flat_panels, render_dashboard
from tests.conftest import REPO

PRESETS = yaml.safe_load((REPO / "genobs/data/presets.yaml").read_text())
URL = "https://git.example.com/sre/obs/blob/main/out/t/RUNBOOK.md"


def plan_for(use_case: str, extra: str = ""):
    return build_plan(load_spec_text(f"version: genobs/v1\nname: t\nuse_case: {use_case}\nservice: {{selector: {{job: vllm}}}}\n{extra}", "s.yaml"))


@pytest.mark.parametrize("use_case", list(PRESETS))
def test_dashboard_leads_with_the_presets_key_panels(use_case: str):
    plan = plan_for(use_case, "slos:\n  - {name: ft, sli: ttft, threshold: 1s, objective: 99%}\n")
    first = plan.dashboard.rows[0]
    assert first.title == f"Key indicators: {PRESETS[use_case]['primary_kpi']}"
    assert [p.title for p in first.panels] == PRESETS[use_case]["dashboard_lead"]
    board = render_dashboard(plan.dashboard)
    row, kpi, second = flat_panels(board)[:3]
    assert row["type"] == "row" and kpi["gridPos"]["y"] == second["gridPos"]["y"] == 1  # side by side, on top


def test_chat_puts_output_speed_per_user_next_to_ttft():
    board = render_dashboard(plan_for("chat").dashboard)
    titles = [p["title"] for p in flat_panels(board)[1:3]]
    assert titles == ["Output speed per user (tok/s/user)", "Time to first token"]


def test_relative_runbook_base_url_warns_and_absolute_one_is_linked():
    relative = plan_for("chat")
    assert any("runbook.base_url is 'RUNBOOK.md', a relative path" in w for w in relative.warnings)
    assert render_dashboard(relative.dashboard)["links"] == []
    absolute = plan_for("chat", f"runbook: {{base_url: '{URL}'}}\n")
    assert not any("runbook.base_url" in w for w in absolute.warnings)
    links = render_dashboard(absolute.dashboard)["links"]
    assert [(link["title"], link["url"], link["type"]) for link in links] == [("Runbook", URL, "link")]

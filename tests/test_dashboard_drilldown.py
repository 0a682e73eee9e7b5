"""From a notification to the panel: alerts link to their dashboard panel with their labels
as variables (dashboard.base_url), the dashboard drills down by role, instance and engine,
and latency panels show p95 beside p50 and p99."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import yaml

from genobs.compiler import build_plan
from genobs.loader import load_spec_text
from genobs.render.dashboard import flat_panels, render_dashboard
from tests.conftest import REPO

GRAFANA = "https://grafana.example.com/sub"
SPEC = f"""version: genobs/v1
name: dl
use_case: chat
service:
  selector: {{job: vllm, namespace: llm-prod}}
  models: ["meta-llama/Llama 3"]
dashboard: {{base_url: "{GRAFANA}/"}}
slos:
  - {{name: ft, sli: ttft, threshold: 1s, objective: 99%}}
"""


def plan_of(text: str):
    return build_plan(load_spec_text(text, "s.yaml"))


def test_every_alert_links_to_a_panel_that_exists_with_its_labels_as_variables():
    plan = plan_of(SPEC)
    board = render_dashboard(plan.dashboard)
    ids = {p["id"]: p for p in flat_panels(board)}
    assert len(ids) == len(flat_panels(board))  # unique ids
    names = [v["name"] for v in board["templating"]["list"]]
    for alert in plan.alerts:
        url = alert.dashboard_url
        m = re.fullmatch(rf"{re.escape(GRAFANA)}/d/genobs-dl/vllm-dl\?viewPanel=(\d+)(.*)", url)
        assert m, url
        panel = ids[int(m.group(1))]
        assert panel["type"] != "row"
        # the panel the runbook names (an SLO alert: the first panel of its SLO row)
        assert panel["title"] == alert.panel or panel["title"].startswith(f"{alert.panel}:"), (alert.name, panel["title"])
        for var in re.findall(r"var-(\w+)=", m.group(2)):
            assert var in names
        assert "{{ if $labels.model_name }}&var-model_name={{ $labels.model_name | urlquery }}{{ end }}" in url


def test_dashboard_url_renders_with_real_labels_in_promtool(tmp_path):
    """genobs build runs promtool on the generated tests, whose expected annotations render the
    link for the test's labels: Go's urlquery must agree with what the tests expect."""
    spec = tmp_path / "dl.yaml"
    spec.write_text(SPEC)
    proc = subprocess.run(
        [sys.executable, "-m", "genobs", "build", "--strict", str(spec), "-o", str(tmp_path / "out")],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rules = yaml.safe_load((tmp_path / "out/dl/prometheus/alerts.rules.yaml").read_text())
    assert all("dashboard_url" in r["annotations"] for g in rules["groups"] for r in g["rules"] if "alert" in r)
    tests = (tmp_path / "out/dl/prometheus/tests/alerts.test.yaml").read_text()
    rendered = set(re.findall(r"dashboard_url: (\S+)", tests))
    # a model alert selects its model (slash and space URL-encoded as Go does); a per-target one
    # (no model_name label) selects its instance only
    assert any(u.endswith("&var-model_name=meta-llama%2FLlama+3") for u in rendered), rendered
    assert any("&var-instance=" in u and "var-model_name" not in u for u in rendered), rendered
    assert not any("{{" in u or "<no value>" in u for u in rendered)


@pytest.mark.parametrize(
    "bad", ["grafana.example.com", "ftp://g.example.com", "https://g.example.com/?orgId=1", "https://g/{{x}}"]
)
def test_dashboard_base_url_must_be_an_absolute_http_url(bad):
    from genobs.errors import SpecError

    with pytest.raises(SpecError) as exc:
        plan_of(SPEC.replace(f'"{GRAFANA}/"', f'"{bad}"'))
    assert "dashboard.base_url" in str(exc.value) and "absolute http(s) URL" in str(exc.value)


def test_drill_down_variables_chain_and_the_row_honours_them():
    spec = yaml.safe_load((REPO / "specs/disaggregated.yaml").read_text())
    board = render_dashboard(plan_of(yaml.safe_dump(spec)).dashboard)
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert list(variables) == ["datasource", "model_name", "role", "instance", "engine"]
    # each variable's query is restricted by the ones before it
    assert 'model_name=~"$model_name"' in variables["role"]["definition"]
    assert 'role=~"$role"' in variables["instance"]["definition"]
    assert 'instance=~"$instance"' in variables["engine"]["definition"]
    assert variables["instance"]["multi"] is False and variables["instance"]["includeAll"] is False
    row = next(i for i, p in enumerate(flat_panels(board)) if p["title"] == "Replica drill-down ($instance)")
    panels = flat_panels(board)[row + 1 : row + 4]
    assert [p["title"] for p in panels] == ["Replica liveness", "KV cache usage per engine", "Running and waiting per engine"]
    for p in panels:
        for t in p["targets"]:
            assert 'instance=~"$instance"' in t["expr"]
    for p in panels[1:]:
        for t in p["targets"]:
            assert 'engine=~"$engine"' in t["expr"] and 'role=~"$role"' in t["expr"]


def test_versions_without_engine_label_have_no_engine_variable():
    text = SPEC.replace("service:\n", 'service:\n  engine_version: "0.8.0"\n').replace("slos:\n  - {name: ft, sli: ttft, threshold: 1s, objective: 99%}\n", "")
    board = render_dashboard(plan_of(text).dashboard)
    assert [v["name"] for v in board["templating"]["list"]] == ["datasource", "model_name", "instance"]


def test_latency_panels_show_p95_beside_p50_and_p99_and_it_is_recorded():
    plan = plan_of(SPEC)
    board = render_dashboard(plan.dashboard)
    recorded = {(r.record, dict(r.labels).get("quantile")) for r in plan.recording_rules}
    for title in ("Time to first token", "End-to-end latency"):
        panel = next(p for p in flat_panels(board) if p["title"] == title)
        legends = [t["legendFormat"].split()[-1] for t in panel["targets"]]
        assert legends[:4] == ["p50", "p90", "p95", "p99"], legends
        p95 = panel["targets"][2]["expr"]
        assert 'quantile="0.95"' in p95
        assert (p95.split("{")[0], "0.95") in recorded
    # nothing recorded at 0.95 that no panel reads
    shown = {t["expr"].split("{")[0] for p in flat_panels(board) for t in p.get("targets", []) if 'quantile="0.95"' in t["expr"]}
    assert {r for r, qv in recorded if qv == "0.95"} == shown


def test_generated_dashboard_is_json_with_unique_panel_ids_in_every_example():
    for out in sorted((REPO / "out").glob("*/grafana/*.json")):
        board = json.loads(out.read_text())
        ids = [p["id"] for p in flat_panels(board)]
        assert ids == list(range(1, len(ids) + 1)), out


LEGACY_DASHBOARD_KEYS = {"rows", "style", "sharedCrosshair", "hideControls"}
LEGACY_PANEL_KEYS = {"span", "height", "minSpan", "error", "dataFormat", "cards", "yAxis", "xAxis", "heatmap"}
LEGACY_TARGET_KEYS = {"intervalFactor", "step", "metric", "query", "target"}


def _datasource_ref(value, kind="prometheus") -> bool:
    return isinstance(value, dict) and value.get("type") == kind and set(value) == {"type", "uid"}


@pytest.mark.parametrize("out", sorted((REPO / "out").glob("*/grafana/*.json")), ids=lambda p: p.parent.parent.name)
def test_dashboard_json_has_the_shape_of_the_schema_version_it_claims(out):
    """schemaVersion 39 (Grafana 10.3-11.x): what Grafana's migrator would produce, so an
    import runs no migration: datasource references (schema 33/36), panels with gridPos and
    fieldConfig instead of rows, the new heatmap panel, query variables as objects."""
    board = json.loads(out.read_text())
    assert board["schemaVersion"] == 39
    assert not LEGACY_DASHBOARD_KEYS & set(board)
    assert board["annotations"]["list"][0]["builtIn"] == 1
    for a in board["annotations"]["list"][1:]:
        assert _datasource_ref(a["datasource"]), a
    for v in board["templating"]["list"]:
        if v["type"] == "query":
            assert _datasource_ref(v["datasource"]) and isinstance(v["query"], dict) and v["definition"]
    for p in flat_panels(board):
        assert not LEGACY_PANEL_KEYS & set(p), (p["title"], LEGACY_PANEL_KEYS & set(p))
        assert None not in p.values(), p["title"]
        if p["type"] == "row":
            # a collapsed row holds its panels (Grafana queries them when it is opened)
            assert "datasource" not in p and (p["collapsed"] or p["panels"] == [])
            continue
        assert _datasource_ref(p["datasource"]) and "fieldConfig" in p and "overrides" in p["fieldConfig"]
        for t in p["targets"]:
            assert _datasource_ref(t["datasource"]) and not LEGACY_TARGET_KEYS & set(t)
        if p["type"] == "heatmap":
            assert p["options"]["calculate"] is False and p["options"]["yAxis"]["unit"]


def test_dashboard_json_is_deterministic():
    from genobs.compiler import load_plan

    plan = load_plan(REPO / "specs/chat.yaml")[1]
    first = json.dumps(render_dashboard(plan.dashboard), sort_keys=True)
    assert first == json.dumps(render_dashboard(load_plan(REPO / "specs/chat.yaml")[1].dashboard), sort_keys=True)


def test_the_panel_an_alert_opens_links_back_to_its_runbook_section():
    runbook = "https://git.example.com/rb/RUNBOOK.md"
    plan = plan_of(SPEC + f"runbook: {{base_url: '{runbook}'}}\n")
    board = render_dashboard(plan.dashboard)
    ids = {p["id"]: p for p in flat_panels(board)}
    for alert in plan.alerts:
        panel = ids[int(re.search(r"viewPanel=(\d+)", alert.dashboard_url).group(1))]
        urls = [link["url"] for link in panel["links"]]
        assert alert.runbook_url in urls and alert.runbook_url.startswith(runbook + "#"), (alert.name, urls)
    # a relative runbook (the default) is not linked: Grafana could not open it
    assert not any(p.get("links") for p in flat_panels(render_dashboard(plan_of(SPEC).dashboard)))

"""Recording rules that only dashboard panels read run in a slower companion group
(genobs-<spec>-recording-panels); everything an alert, an SLO rule or a capacity rule reads stays
at the spec's interval. Checked with the real promtool: with the panels group removed, every
generated alert test still passes, and removing a rule an alert needs makes one fail."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from genobs import promtool as pt
from genobs.build import render_spec
from genobs.checks import check_jobs
from genobs.compiler import load_plan
from genobs.plan.groups import panels_interval
from genobs.plan.model import AlertRule
from genobs.promql import metric_names

REPO = Path(__file__).resolve().parents[1]
SPECS = sorted((REPO / "specs").glob("*.yaml"))


def _write(spec: Path, root: Path) -> Path:
    out = render_spec(spec)
    for rel, data in out.files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root / "prometheus"


def _groups(path: Path) -> list[dict]:
    return yaml.safe_load(path.read_text())["groups"]


def _drop_panels(prometheus: Path, also: str | None = None) -> int:
    """Remove the panels group (and, with `also`, the rules recording that name from the fast
    group) from recording.rules.yaml; the number of rules removed."""
    path = prometheus / "recording.rules.yaml"
    groups = _groups(path)
    removed = sum(len(g["rules"]) for g in groups if g["name"].endswith("-recording-panels"))
    kept = [g for g in groups if not g["name"].endswith("-recording-panels")]
    for g in kept:
        before = len(g["rules"])
        g["rules"] = [r for r in g["rules"] if r.get("record") != also]
        removed += before - len(g["rules"])
    path.write_text(yaml.safe_dump({"groups": kept}, sort_keys=False))
    return removed


def _run_tests(prometheus: Path) -> pt.Result:
    """Every generated test group, each over the rules it reads from what is left of the rule files
    (genobs.testsplit, as the build's check runs them: a rule the group needs and the files lack
    fails it just the same, at less than half of promtool's time on the whole files)."""
    results = [job() for job in check_jobs(prometheus.parent, prometheus.parent.name, split=True)]
    failed = [r for r in results if not r.ok]
    return pt.Result(not failed, "\n".join(r.output for r in failed))


@pytest.mark.parametrize("spec", SPECS, ids=[p.stem for p in SPECS])
def test_alert_tests_pass_without_the_panels_group(spec: Path, tmp_path: Path, promtool: str):
    prometheus = _write(spec, tmp_path)
    assert _drop_panels(prometheus) > 0, "every example spec has dashboard-only recording rules"
    result = _run_tests(prometheus)
    assert result.ok, result.output


def test_removing_a_rule_an_alert_reads_fails_the_tests(tmp_path: Path, promtool: str):
    """The check above can fail: without the TTFT bucket rate, the TTFT and SLO tests break."""
    prometheus = _write(REPO / "specs" / "chat.yaml", tmp_path)
    _drop_panels(prometheus, also="genobs:ttft_seconds:bucket_rate5m")
    result = _run_tests(prometheus)
    assert not result.ok
    assert "VllmTtftP99High" in result.output or "first-token" in result.output, result.output


@pytest.mark.parametrize("spec", SPECS, ids=[p.stem for p in SPECS])
def test_panels_group_is_slower_and_read_only_by_panels(spec: Path):
    _, plan = load_plan(spec)
    by_name = {g.name: g for g in plan.groups}
    fast = by_name[f"genobs-{plan.name}-recording"]
    panels = by_name[f"genobs-{plan.name}-recording-panels"]
    assert panels.interval == "1m" and fast.interval == "30s"
    only_panels = {r.record for r in panels.rules} - {r.record for r in fast.rules}
    assert only_panels
    readers = [r for g in plan.groups if g is not panels for r in g.rules if g is not fast or isinstance(r, AlertRule)]
    for rule in readers:
        assert not metric_names(rule.expr) & only_panels, (rule, metric_names(rule.expr) & only_panels)
    # every dashboard-only rule is read by a panel, or by another dashboard-only rule
    shown = {n for row in plan.dashboard.rows for p in row.panels for t in p.targets for n in metric_names(t.expr)}
    shown |= {n for r in panels.rules for n in metric_names(r.expr)}
    assert only_panels <= shown, only_panels - shown


def test_panels_interval():
    assert [panels_interval(i) for i in ("1s", "15s", "30s", "1m", "2m")] == ["2s", "30s", "1m", "1m", "2m"]

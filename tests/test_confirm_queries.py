"""The runbook's confirm queries say which replica is affected: run with the real promtool
on a fleet written from what vLLM exports (tests/fleet_series.py, independent of genobs),
each query returns one series per instance, and per instance and data-parallel engine for
engine series."""

from __future__ import annotations

import promql_parser
import pytest
import yaml
from fleet_series import Fleet
from scenario_runner import build, promtool_expr_tests, rule_groups

from genobs.catalog import load_catalog
from genobs.compiler import load_plan
from tests.conftest import REPO, SPECS

# alerts on engine series: their confirm queries must keep `engine` (vLLM >= 0.8.3)
ENGINE_SERIES = {
    "VllmTtftP99High",
    "VllmItlP99High",
    "VllmE2eLatencyP99High",
    "VllmQueueTimeP99High",
    "VllmNixlTransferTimeP99High",
    "VllmLengthFinishRatioHigh",
    "VllmAbortRatioHigh",
    "VllmKvCacheSaturated",
    "VllmPreemptionsSustained",
    "VllmRequestsWaitingHigh",
    "VllmOutputSpeedPerUserLow",
    "VllmSpecDecodeAcceptanceLow",
    "VllmNixlTransfersFailing",
    "VllmNixlKvExpired",
}
# capacity signals: fleet-wide (no single replica to point at) or read per pod and GPU from
# DCGM, whose own series name the pod already
FLEET_WIDE = {
    "VllmGoodputBelowObjective",
    "VllmSystemEfficiencyLow",
    "VllmTtftDegradedVsBaseline",
    "VllmGpuSaturated",
    "VllmGpuMemoryBelowReservation",
    "VllmGpuMemoryNearlyFull",
    "VllmAutoscalerAtMaxReplicas",
}


def groupings(expr: str) -> list[list[str]]:
    """The `by (...)` label lists of every aggregation in the expression."""
    found: list[list[str]] = []

    def visit(node: object) -> bool:
        if isinstance(node, promql_parser.AggregateExpr) and node.modifier is not None:
            found.append(list(node.modifier.labels))
        return True

    promql_parser.walk(promql_parser.parse(expr), visit)
    return found


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_every_replica_level_alert_has_confirm_queries_by_instance(path):
    plan = load_plan(path)[1]
    for e in plan.runbook:
        if e.alert in FLEET_WIDE:
            continue
        if e.alert.startswith(("Gateway", "Client")):  # per model in front of the pods; then walk to them
            assert any("per instance" in caption for caption, _ in e.confirm), e.alert
            continue
        assert e.confirm, f"{e.alert}: no per-replica confirm query"
        for caption, expr in e.confirm:
            promql_parser.parse(expr)
            # that each returns one series per instance is proven on a fleet below
            assert "per instance" in caption, (e.alert, caption)
            rank = load_catalog(plan.engine).rank_label  # SGLang: the replica is the unit (no shared rank label)
            if e.alert in ENGINE_SERIES and rank is not None:
                # the outermost aggregation keeps both: which replica, which data-parallel rank
                assert all({"instance", rank} <= set(g) for g in groupings(expr)), (e.alert, expr)
                assert caption.endswith(f"per instance and {rank}"), caption
        assert f"{e.confirm[0][0]}:" in (REPO / "out" / plan.name / "RUNBOOK.md").read_text()


def test_confirm_queries_return_one_series_per_replica_on_a_real_fleet(tmp_path, promtool):
    spec = yaml.safe_load((REPO / "specs" / "chat.yaml").read_text())
    plan = load_plan(REPO / "specs" / "chat.yaml")[1]
    fleet = Fleet(
        {
            "replicas": 3,
            "engines": 2,
            "api_servers": 1,  # single-process API server: process_* series exist (RSS query)
            "duration": "20m",
            "traffic": {
                "finish": {"stop": 0.97, "length": 0.02, "abort": 0.005, "error": 0.005},
                "http_5xx": 0.01,
                "admission_rejections": 0.05,
                "waiting": 4,
                "preemptions": 0.1,
            },
        },
        spec,
    )
    instances = sorted({r.instance for r in fleet.replicas})
    files, groups, _, _ = rule_groups(build(spec, tmp_path))
    tests, checked = [], []
    for e in plan.runbook:
        for caption, expr in e.confirm:
            per_engine = caption.endswith("per instance and engine")
            tests.append(
                {
                    "expr": f"count by (instance) ({expr})",
                    "eval_time": "20m",
                    "exp_samples": [
                        {"labels": f'{{instance="{i}"}}', "value": 2 if per_engine else 1} for i in instances
                    ],
                }
            )
            checked.append(e.alert)
    assert len(set(checked)) >= 15, checked
    proc = promtool_expr_tests(promtool, files, groups, fleet.series(), tests, tmp_path / "confirm.test.yaml")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]

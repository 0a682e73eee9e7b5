"""Disaggregated prefill/decode: each pool gets its own latency views, read on its role label,
checked with the real promtool on a two-pool fleet written from what vLLM exports
(tests/fleet_series.py, independent of genobs); every recorded series is read by something."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from fleet_series import Fleet
from scenario_runner import build, promtool_expr_tests, rule_groups

from genobs import promql as q
from genobs.compiler import load_plan
from tests.conftest import REPO, SPECS

SPEC = REPO / "specs" / "disaggregated.yaml"


def _panels(plan) -> dict[str, tuple[str, list[str]]]:
    """panel title -> (row title, target expressions)."""
    return {p.title: (row.title, [t.expr for t in p.targets]) for row in plan.dashboard.rows for p in row.panels}


def test_each_pool_has_its_latency_row_on_its_role():
    plan = load_plan(SPEC)[1]
    panels = _panels(plan)
    rules = {(r.record, dict(r.labels).get("quantile")): r.expr for r in plan.recording_rules}
    for title, record, role in (
        ("Prefill pool: time to first token", "genobs:prefill_pool_ttft_seconds", "prefill"),
        ("Prefill pool: prefill time", "genobs:prefill_pool_prefill_time_seconds", "prefill"),
        ("Prefill pool: queue time", "genobs:prefill_pool_queue_time_seconds", "prefill"),
        ("Decode pool: decode time", "genobs:decode_time_seconds", "decode"),
    ):
        row, exprs = panels[title]
        assert row == f"Prefill pool (role={role})" if role == "prefill" else row == "Decode pool (role=decode)"
        assert any(f"{record}:quantile_rate5m" in e for e in exprs) and any(f"{record}:mean_rate5m" in e for e in exprs)
        assert f'role="{role}"' in rules[(f"{record}:bucket_rate5m", None)]
    # the decode pace is the decode pool's (user-facing) series, shown in its row once
    assert panels["Inter-token latency"][0] == panels["Time per output token"][0] == "Decode pool (role=decode)"
    rows = [r for r in plan.dashboard.rows if not r.title.startswith("Key indicators")]
    assert sum(p.title == "Inter-token latency" for row in rows for p in row.panels) == 1
    # a single-pool fleet keeps one latency row and no pool rows
    chat = load_plan(REPO / "specs" / "chat.yaml")[1]
    assert not [r.title for r in chat.dashboard.rows if "pool" in r.title]
    assert not [r.record for r in chat.recording_rules if "prefill_pool" in r.record]


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_every_recorded_series_is_read(path: Path):
    """Recording rules cost every evaluation: each one feeds an alert, another rule, an SLO or a panel."""
    plan = load_plan(path)[1]
    read: set[str] = set()
    for group in plan.groups:
        for rule in group.rules:
            read |= q.metric_names(rule.expr) - {getattr(rule, "record", None)}
    for row in plan.dashboard.rows:
        for panel in row.panels:
            for target in panel.targets:
                read |= q.metric_names(re.sub(r"\$(\w+)", "x", target.expr))
    for variable in plan.dashboard.variables:
        read |= set(re.findall(r"genobs:[\w:]+", variable.query))
    unused = {r.record for r in plan.recording_rules} - read
    assert not unused, sorted(unused)


def test_pool_latencies_read_each_pool_on_a_real_fleet(tmp_path, promtool):
    """Prefill pods answer their max_tokens=1 legs fast (TTFT p99 ~0.5 s), decode pods wait for the
    KV transfer (TTFT p99 ~0.9 s): the prefill-pool and user-facing quantiles land in different
    buckets, and each pool's queue and phase times come from its own pods."""
    spec = yaml.safe_load(SPEC.read_text())
    decode = {
        "rate": 5,
        "finish": {"stop": 0.975, "length": 0.022, "abort": 0.003},
        "ttft": {"p50": 0.25, "p99": 0.9},
        "queue": {"p50": 0.004, "p99": 0.05},
        "prefill": {"p50": 0.03, "p99": 0.1},
        "nixl": {"transfers": 10},
    }
    prefill = {
        "rate": 10,
        "finish": {"length": 1},
        "output_tokens": 1,
        "ttft": {"p50": 0.12, "p99": 0.45},
        "queue": {"p50": 1.2, "p99": 2.2},
        "prefill": {"p50": 0.11, "p99": 0.45},
        "nixl": {"transfers": 0},
    }
    fleet = Fleet(
        {
            "duration": "20m",
            "engines": 2,
            "pools": [
                {"name": "prefill", "replicas": 2, "labels": {"role": "prefill"}, "traffic": prefill},
                {"name": "decode", "replicas": 3, "labels": {"role": "decode"}, "traffic": decode},
            ],
        },
        spec,
    )
    files, groups, _, _ = rule_groups(build(spec, tmp_path))
    p99 = '{quantile="0.99"}'
    checks = {
        # user-facing TTFT reads the decode pool only
        f"genobs:ttft_seconds:quantile_rate5m{p99} > 0.75 <= 1": 1,
        f"genobs:prefill_pool_ttft_seconds:quantile_rate5m{p99} > 0.25 <= 0.5": 1,
        f"genobs:prefill_pool_prefill_time_seconds:quantile_rate5m{p99} <= 0.5": 1,
        f"genobs:prefill_pool_queue_time_seconds:quantile_rate5m{p99} > 2 <= 2.5": 1,
        # the decode pool's decode time: ~250 output tokens at its TPOT, seconds, not the 0 of the prefill legs
        f"genobs:decode_time_seconds:quantile_rate5m{p99} > 1": 1,
    }
    tests = [
        {"expr": f"count({expr})", "eval_time": "20m", "exp_samples": [{"labels": "{}", "value": n}]}
        for expr, n in checks.items()
    ]
    proc = promtool_expr_tests(promtool, files, groups, fleet.series(), tests, tmp_path / "pools.test.yaml")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]

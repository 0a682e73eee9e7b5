"""SLO burn-rate alerts of the chat spec, run through the real promtool: the
workbook's detection times hold, low traffic and slow burns stay silent."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from genobs.build import render_spec
from genobs.compiler import build_plan
from genobs.errors import SpecError
from genobs.loader import load_spec, load_spec_text
from tests.conftest import REPO, spec_text

CHAT = REPO / "specs" / "chat.yaml"
BASE = {"namespace": "llm-prod", "job": "vllm-chat", "model_name": "gpt-oss-120b"}
METRIC = "vllm:request_success_total"


def series(engine: str, reason: str, values: str) -> dict:
    labels = {**BASE, "engine": engine, "finished_reason": reason}
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return {"series": f"{METRIC}{{{inner}}}", "values": values}


def running(engine: str, values: str = "1x500") -> dict:
    """vLLM exports the running-requests gauge of every engine beside its counters."""
    labels = {**BASE, "engine": engine}
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return {"series": f"vllm:num_requests_running{{{inner}}}", "values": values}


def with_gauges(inputs: list[dict]) -> list[dict]:
    engines = sorted({re.search(r'engine="(\w+)"', s["series"]).group(1) for s in inputs})
    return [*inputs, *(running(e) for e in engines)]


def expected_alert(name: str) -> dict:
    """The alert's labels and annotations as Prometheus renders them, from the plan."""
    plan = build_plan(load_spec(CHAT))
    rule = next(a for a in plan.alerts if a.name == name)
    values = BASE

    def fill(text: str) -> str:
        return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: values[m.group(1)], text)

    return {
        "exp_labels": {**BASE, **dict(rule.labels)},
        "exp_annotations": {k: fill(t) for k, t in rule.annotations().items()},
    }


def run_promtool(tmp_path: Path, promtool: str, tests: list[dict]) -> subprocess.CompletedProcess:
    out = render_spec(CHAT)
    for rel, data in out.files.items():
        if rel.startswith("prometheus/") and rel.endswith(".rules.yaml"):
            (tmp_path / Path(rel).name).write_bytes(data)
    doc = {
        "rule_files": sorted(p.name for p in tmp_path.glob("*.rules.yaml")),
        "evaluation_interval": "1m",
        "tests": [{**t, "input_series": with_gauges(t["input_series"])} for t in tests],
    }
    (tmp_path / "slo_test.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return subprocess.run([promtool, "test", "rules", "slo_test.yaml"], cwd=tmp_path, capture_output=True, text=True)


FAST = "SloAvailabilityErrorBudgetBurnFast"
SLOW = "SloAvailabilityErrorBudgetBurnSlow"


def test_page_fires_for_sustained_20x_burn_within_workbook_detection_time(tmp_path, promtool):
    # 2 h healthy at 1 req/s per engine, then 10 % error finishes = 20x burn of a 99.5 % budget.
    # Workbook detection: 14.4/20 of an hour = 43.2 min after the burn starts (minute 120).
    inputs = [series(e, "stop", "0+60x120 7254+54x60") for e in ("0", "1")] + [
        series(e, "error", "0+0x120 6+6x60") for e in ("0", "1")
    ]
    tests = [
        {
            "interval": "1m",
            "input_series": inputs,
            "alert_rule_test": [
                {"eval_time": "160m", "alertname": FAST, "exp_alerts": []},
                {"eval_time": "165m", "alertname": FAST, "exp_alerts": [expected_alert(FAST)]},
            ],
        }
    ]
    proc = run_promtool(tmp_path, promtool, tests)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_page_fires_within_5_minutes_of_a_total_outage(tmp_path, promtool):
    inputs = [series(e, "stop", "0+60x120 7200+0x30") for e in ("0", "1")] + [
        series(e, "error", "0+0x120 60+60x30") for e in ("0", "1")
    ]
    tests = [
        {
            "interval": "1m",
            "input_series": inputs,
            "alert_rule_test": [
                {"eval_time": "120m", "alertname": FAST, "exp_alerts": []},
                {"eval_time": "125m", "alertname": FAST, "exp_alerts": [expected_alert(FAST)]},
            ],
        }
    ]
    proc = run_promtool(tmp_path, promtool, tests)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_silent_at_half_x_burn(tmp_path, promtool):
    # 1 error in 400 requests = 0.25 % errors = 0.5x burn, for 7 h
    inputs = [series(e, "stop", "0+399x420") for e in ("0", "1")] + [series(e, "error", "0+1x420") for e in ("0", "1")]
    checks = [
        {"eval_time": t, "alertname": name, "exp_alerts": []} for t in ("30m", "2h", "7h") for name in (FAST, SLOW)
    ]
    proc = run_promtool(tmp_path, promtool, [{"interval": "1m", "input_series": inputs, "alert_rule_test": checks}])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_silent_at_three_requests_per_hour_with_one_failure(tmp_path, promtool):
    # one engine; successes at minutes 20 and 40, a failure at minute 61, repeated next hour
    stop = "0x19 1x19 2x19 2x19 3x19 4x19 4x10"
    abort = "0x60 1x59 2x10"
    inputs = [series("0", "stop", stop), series("0", "error", abort)]
    checks = [
        {"eval_time": t, "alertname": name, "exp_alerts": []}
        for t in ("62m", "65m", "122m", "125m")
        for name in (FAST, SLOW)
    ]
    proc = run_promtool(tmp_path, promtool, [{"interval": "1m", "input_series": inputs, "alert_rule_test": checks}])
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_low_traffic_check_can_fail(tmp_path, promtool):
    """Same 3 req/h scenario without the traffic floor pages: the gate is what keeps it silent."""
    text = CHAT.read_text().replace("  models: [gpt-oss-120b]", "  models: [gpt-oss-120b]\n  min_request_rate: 0")
    spec = tmp_path / "chat.yaml"
    spec.write_text(text)
    out = render_spec(spec)
    for rel, data in out.files.items():
        if rel.endswith(".rules.yaml"):
            (tmp_path / Path(rel).name).write_bytes(data)
    inputs = with_gauges([series("0", "stop", "0x19 1x19 2x19 2x19"), series("0", "error", "0x60 1x20")])
    doc = {
        "rule_files": sorted(p.name for p in tmp_path.glob("*.rules.yaml")),
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": inputs,
                "alert_rule_test": [{"eval_time": "65m", "alertname": FAST, "exp_alerts": []}],
            }
        ],
    }
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(doc))
    proc = subprocess.run([promtool, "test", "rules", "t.yaml"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode != 0 and FAST in proc.stdout + proc.stderr


def test_error_budget_never_nan_without_traffic(tmp_path, promtool):
    inputs = [series(e, r, "0+0x120") for e in ("0", "1") for r in ("stop", "error")]
    sel = '{job="vllm-chat",model_name="gpt-oss-120b",namespace="llm-prod",slo="availability"}'
    tests = [
        {
            "interval": "1m",
            "input_series": inputs,
            "promql_expr_test": [
                # no traffic: no budget sample at all rather than NaN
                {"expr": f"genobs:slo_error_budget:remaining_30d{sel}", "eval_time": "100m", "exp_samples": []},
                {"expr": f"genobs:slo_burn_rate:rate1h{sel}", "eval_time": "100m", "exp_samples": []},
            ],
        }
    ]
    proc = run_promtool(tmp_path, promtool, tests)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("slo", "needle"),
    [
        (
            "{name: x, sli: ttft, threshold: 1.2s, objective: 99%}",
            "not a bucket boundary of vllm:time_to_first_token_seconds in vLLM 0.33.0; nearest boundaries: 750ms, 1s, 2.5s, 5s",
        ),
        ("{name: x, sli: ttft, objective: 99%}", "needs a threshold"),
        ("{name: x, sli: success, objective: 99%, bad_reasons: [repetition]}", None),
        ("{name: x, sli: ttft, threshold: 1.2s, objective: 99%, buckets: [0.5, 1.2, 5]}", None),
    ],
)
def test_slo_validation(slo, needle):
    text = spec_text() + f"slos:\n  - {slo}\n"
    if needle is None:
        build_plan(load_spec_text(text, "s.yaml"))
        return
    with pytest.raises(SpecError) as err:
        build_plan(load_spec_text(text, "s.yaml"))
    assert needle in str(err.value) and "s.yaml:" in str(err.value) and "slos[0]" in str(err.value)


def test_custom_buckets_need_0_32_and_reasons_must_exist():
    text = spec_text(engine_version='"0.11.0"') + (
        "slos:\n  - {name: x, sli: ttft, threshold: 1.2s, objective: 99%, buckets: [1.2]}\n"
        "  - {name: y, sli: success, objective: 99%, bad_reasons: [error]}\n"
    )
    with pytest.raises(SpecError) as err:
        build_plan(load_spec_text(text, "s.yaml"))
    msg = str(err.value)
    assert "custom histogram buckets need vLLM >= 0.32.0" in msg
    assert "finished_reason 'error' does not exist in vLLM 0.11.0" in msg


def test_le_matches_prometheus_2_and_3_spellings():
    plan = build_plan(load_spec(CHAT))
    exprs = " ".join(r.expr for r in plan.recording_rules if r.record.startswith("genobs:slo_events"))
    assert 'le=~"1(\\\\.0+)?"' in exprs and 'le=~"0\\\\.10*"' in exprs


def test_burn_rate_table_can_be_replaced_per_slo(tmp_path, promtool):
    text = spec_text() + (
        "slos:\n  - name: availability\n    sli: success\n    objective: 99.9%\n    burn_rates:\n"
        "      - {severity: critical, long: 2h, short: 10m, factor: 10}\n"
        "      - {severity: warning, long: 12h, short: 1h, factor: 2}\n"
    )
    plan = build_plan(load_spec_text(text, "s.yaml"))
    fast = next(a for a in plan.alerts if a.name == FAST)
    slow = next(a for a in plan.alerts if a.name == SLOW)
    assert "genobs:slo_burn_rate:rate2h" in fast.expr and "> 10 " in fast.expr and "rate10m" in fast.expr
    assert "genobs:slo_burn_rate:rate12h" in slow.expr and "> 2 " in slow.expr
    assert "rate6h" not in fast.expr + slow.expr
    records = {r.record for r in plan.recording_rules}
    assert {"genobs:slo_burn_rate:rate10m", "genobs:slo_burn_rate:rate12h"} <= records
    assert "genobs:slo_burn_rate:rate3d" not in records  # windows follow the table
    spec = tmp_path / "s.yaml"
    spec.write_text(text)
    out = render_spec(spec)
    for rel, data in out.files.items():
        if rel.startswith("prometheus/"):
            (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / rel).write_bytes(data)
    rules = sorted((tmp_path / "prometheus").glob("*.rules.yaml"))
    proc = subprocess.run([promtool, "check", "rules", *map(str, rules)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    tests = sorted(p.name for p in (tmp_path / "prometheus" / "tests").glob("*.yaml"))
    proc = subprocess.run(
        [promtool, "test", "rules", *[f"tests/{t}" for t in tests]],
        cwd=tmp_path / "prometheus",
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_one_rule_per_window_and_request_rates_only_where_a_gate_reads_them():
    """The shortest window records requests and errors in one rule (one series each, told apart by
    `event`) and the burn rate; every longer window one burn-rate rule; a request rate only at
    the long window of each alert pair (its traffic gate)."""
    plan = build_plan(load_spec(CHAT))
    by_slo: dict[str, list[str]] = {}
    for r in plan.recording_rules:
        if dict(r.labels).get("slo"):
            by_slo.setdefault(dict(r.labels)["slo"], []).append(r.record)
    windows = ("5m", "30m", "1h", "2h", "6h", "1d", "3d")
    burns = [f"genobs:slo_burn_rate:rate{w}" for w in windows]
    base = ["genobs:slo_events:rate5m"]
    # the period's budget, from the long group's 2m means of the base-window events
    budget = ["genobs:slo_error_budget:remaining_30d", "genobs:slo_events:rate5m_avg2m"]
    for slo, gate in (("first-token", "slo_requests"), ("availability", "slo_requests"), ("token-pace", "slo_gate_requests")):
        gates = [f"genobs:{gate}:rate{w}" for w in ("1h", "6h", "1d", "3d")]
        if gate != "slo_requests":
            gates.append(f"genobs:{gate}:rate5m")  # the per-token SLO counts finished requests apart
        assert sorted(by_slo[slo]) == sorted(base + burns + gates + budget), slo
    # nothing else reads a per-window error ratio: every consumer reads the burn rate
    assert not any("slo_error:" in r.record for r in plan.recording_rules)


def test_error_budget_remaining_sums_every_base_sample_from_fewer(tmp_path, promtool):
    """The period's budget is read from the long group's means of the base-window rates: it must
    agree with the period's errors over its requests summed from every recorded 5m sample.
    1 req/s per engine, 1 % error finishes for 30 of 150 minutes: 0.2 % of the period's requests
    failed, 0.4 of a 99.5 % budget, 0.6 left."""
    inputs = [series(e, "stop", "0+60x60 3624+59.4x30 5406+60x60") for e in ("0", "1")]
    inputs += [series(e, "error", "0+0x60 0+0.6x30 18+0x60") for e in ("0", "1")]
    sel = '{job="vllm-chat",model_name="gpt-oss-120b",namespace="llm-prod",slo="availability",spec="chat"}'
    direct = (
        f'(1 - sum without (event) (sum_over_time(genobs:slo_events:rate5m{sel[:-1]},event="errors"}}[30d]))'
        f' / sum without (event) (sum_over_time(genobs:slo_events:rate5m{sel[:-1]},event="requests"}}[30d]))'
        " / 0.005)"
    )
    labels = '{job="vllm-chat",model_name="gpt-oss-120b",namespace="llm-prod",slo="availability",spec="chat"}'
    tests = [
        {
            "interval": "1m",
            "input_series": inputs,
            "promql_expr_test": [
                {
                    "expr": f"abs(genobs:slo_error_budget:remaining_30d{sel} - {direct}) < bool 0.01",
                    "eval_time": "150m",
                    "exp_samples": [{"labels": labels, "value": 1}],
                },
                {
                    "expr": f"abs(genobs:slo_error_budget:remaining_30d{sel} - 0.6) < bool 0.05",
                    "eval_time": "150m",
                    "exp_samples": [{"labels": labels, "value": 1}],
                },
            ],
        }
    ]
    proc = run_promtool(tmp_path, promtool, tests)
    assert proc.returncode == 0, proc.stdout + proc.stderr

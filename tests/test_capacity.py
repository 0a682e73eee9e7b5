"""Capacity signals: goodput bounds, system efficiency, TTFT against a baseline and
headroom. Scenarios are hand-written series in vLLM 0.33's names and labels (two
data-parallel engines, le as vLLM writes it), run with the real promtool against
the rules genobs generates for specs/capacity.yaml."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from genobs.build import render_spec
from genobs.compiler import build_plan
from genobs.errors import SpecError
from genobs.loader import load_spec_text
from genobs.render.dashboard import flat_panels
from tests.conftest import REPO

SPEC = REPO / "specs" / "capacity.yaml"
POD = {"namespace": "llm-prod", "job": "vllm-pool", "instance": "10.1.0.7:8000", "model_name": "qwen3-32b"}
GROUP = 'job="vllm-pool", model_name="qwen3-32b", namespace="llm-prod"'
TTFT_LE = ["0.001", "0.005", "0.01", "0.02", "0.04", "0.06", "0.08", "0.1", "0.25", "0.5", "0.75", "1.0", "2.5",
           "5.0", "7.5", "10.0", "20.0", "40.0", "80.0", "160.0", "640.0", "2560.0", "+Inf"]
TPOT_LE = ["0.01", "0.025", "0.05", "0.075", "0.1", "0.15", "0.2", "0.3", "0.4", "0.5", "0.75", "1.0", "2.5", "5.0",
           "7.5", "10.0", "20.0", "40.0", "80.0", "+Inf"]


@pytest.fixture(scope="module")
def rules(tmp_path_factory) -> Path:
    out = render_spec(SPEC)
    prom = tmp_path_factory.mktemp("capacity") / "prometheus"
    for rel, data in out.files.items():
        if rel.startswith("prometheus/") and rel.count("/") == 1:
            (prom / rel.split("/")[1]).parent.mkdir(parents=True, exist_ok=True)
            (prom / rel.split("/")[1]).write_bytes(data)
    return prom


def _s(name: str, values: str, **labels: str) -> dict:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted({**POD, **labels}.items()))
    return {"series": f"{name}{{{inner}}}", "values": values}


def engines(per_engine: dict[str, str]) -> list[dict]:
    """The same series on engine 0 and 1 (vLLM's data-parallel ranks)."""
    return [_s(name, values, engine=e) for e in ("0", "1") for name, values in per_engine.items()]


def fleet(stop_per_min: float, waiting: str, ttft_ok_per_min: int, ttft_all_per_min: int, abort_per_min: int = 0,
          minutes: int = 40) -> list[dict]:
    """Per engine: request_success_total by reason, TTFT and TPOT buckets, running and waiting gauges."""
    out: list[dict] = []
    for e in ("0", "1"):
        for reason, per_min in (("stop", stop_per_min), ("length", 0), ("abort", abort_per_min), ("error", 0),
                                ("repetition", 0)):
            out.append(_s("vllm:request_success_total", f"0+{per_min}x{minutes}", engine=e, finished_reason=reason))
        finished = stop_per_min + abort_per_min
        for le in TTFT_LE:
            n = 0 if float(le) < 2.5 else (ttft_ok_per_min if le != "+Inf" else ttft_all_per_min)
            out.append(_s("vllm:time_to_first_token_seconds_bucket", f"0+{n}x{minutes}", engine=e, le=le))
        for le in TPOT_LE:
            n = 0 if float(le) < 0.1 else finished
            out.append(_s("vllm:request_time_per_output_token_seconds_bucket", f"0+{n}x{minutes}", engine=e, le=le))
        out.append(_s("vllm:num_requests_running", f"40x{minutes}", engine=e))
        out.append(_s("vllm:num_requests_waiting", waiting, engine=e))
    return out


def run(promtool: str, prom: Path, tests: list[dict]) -> subprocess.CompletedProcess:
    doc = {
        "rule_files": ["recording.rules.yaml", "capacity.rules.yaml"],
        "evaluation_interval": "1m",
        "group_eval_order": ["genobs-capacity-recording", "genobs-capacity-capacity"],
        "tests": tests,
    }
    path = prom / "scenario.test.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return subprocess.run([promtool, "test", "rules", path.name], cwd=prom, capture_output=True, text=True, timeout=300)


def alert(name: str, signal: str, description: str, summary: str) -> dict:
    return {
        "exp_labels": {"job": "vllm-pool", "model_name": "qwen3-32b", "namespace": "llm-prod", "severity": "warning",
                       "signal": signal, "team": "inference-platform"},
        "exp_annotations": {
            "summary": summary,
            "description": f"model_name qwen3-32b, namespace llm-prod, job vllm-pool: {description}",
            "runbook_url": "https://git.example.com/sre/llm-observability/blob/main/out/capacity/RUNBOOK.md#"
            + name.lower(),
        },
    }


EFFICIENCY = "System efficiency below 70% while requests wait"


def test_queue_filling_faster_than_engines_drain_pages(rules: Path, promtool: str):
    # 10 req/s finish (300/min per engine), the queue grows by 6/s (180/min per engine): 10 / 16 = 62.5 %
    tests = [{
        "name": "queue fills",
        "interval": "1m",
        "input_series": fleet(300, "5+180x40", 300, 300),
        "alert_rule_test": [
            {"eval_time": "14m", "alertname": "VllmSystemEfficiencyLow", "exp_alerts": []},
            {"eval_time": "25m", "alertname": "VllmSystemEfficiencyLow", "exp_alerts": [alert(
                "VllmSystemEfficiencyLow", "system_efficiency",
                "requests finish at 62.5% of the rate they arrive (threshold 70%); the queue is filling.", EFFICIENCY)]},
            {"eval_time": "25m", "alertname": "VllmGoodputBelowObjective", "exp_alerts": []},
        ],
        "promql_expr_test": [{"expr": "genobs:request_arrivals:rate5m", "eval_time": "25m",
                              "exp_samples": [{"labels": f"genobs:request_arrivals:rate5m{{{GROUP}}}", "value": 16}]}],
    }]
    proc = run(promtool, rules, tests)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_long_but_steady_or_draining_queue_and_a_trickle_stay_silent(rules: Path, promtool: str):
    quiet = [{"eval_time": "30m", "alertname": "VllmSystemEfficiencyLow", "exp_alerts": []}]
    tests = [
        # 100 requests wait per engine, but the queue does not grow: the engines keep pace
        {"name": "steady long queue", "interval": "1m", "input_series": fleet(300, "100x40", 300, 300),
         "alert_rule_test": quiet,
         "promql_expr_test": [{"expr": "genobs:system_efficiency:ratio_rate5m", "eval_time": "30m",
                               "exp_samples": [{"labels": f"genobs:system_efficiency:ratio_rate5m{{{GROUP}}}",
                                                "value": 1}]}]},
        # the queue drains: arrivals below finishes, efficiency above 1 (or none): healthy
        {"name": "draining", "interval": "1m", "input_series": fleet(300, "500-10x40", 300, 300),
         "alert_rule_test": quiet},
        # 0.02 req/s arrive: below service.min_request_rate (0.05), whatever the ratio
        {"name": "trickle", "interval": "1m",
         "input_series": fleet(0.3, "0+0.3x40", 0, 0),
         "alert_rule_test": quiet},
    ]
    proc = run(promtool, rules, tests)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


GOODPUT = "Goodput below 95% of finished requests"


def test_goodput_pages_only_when_even_the_upper_bound_misses(rules: Path, promtool: str):
    tests = [
        # 30 % of requests wait longer than 2.5s for the first token: at most 70 % are good
        {"name": "slow first tokens", "interval": "1m", "input_series": fleet(300, "2x40", 210, 300),
         "alert_rule_test": [{"eval_time": "18m", "alertname": "VllmGoodputBelowObjective", "exp_alerts": [alert(
             "VllmGoodputBelowObjective", "goodput",
             "at most 70% of finished requests met the latency bounds (objective 95%).", GOODPUT)]}]},
        # 4 % slow TTFT and 2 % aborts: the upper bound (96 %) meets 95 %, the lower (94 %) does not: silent
        {"name": "uncertain", "interval": "1m", "input_series": fleet(294, "2x40", 288, 300, abort_per_min=6),
         "alert_rule_test": [{"eval_time": "18m", "alertname": "VllmGoodputBelowObjective", "exp_alerts": []}],
         "promql_expr_test": [
             {"expr": "round(genobs:goodput:upper_ratio_rate5m, 0.001)", "eval_time": "18m",
              "exp_samples": [{"labels": f"{{{GROUP}}}", "value": 0.96}]},
             {"expr": "round(genobs:goodput:lower_ratio_rate5m, 0.001)", "eval_time": "18m",
              "exp_samples": [{"labels": f"{{{GROUP}}}", "value": 0.94}]},
         ]},
    ]
    proc = run(promtool, rules, tests)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_generated_capacity_tests_cover_every_capacity_alert():
    out = render_spec(SPEC)
    names = {a["alert"] for g in yaml.safe_load(out.files["prometheus/capacity.rules.yaml"])["groups"]
             for a in g["rules"] if "alert" in a}
    assert names == {
        "VllmGoodputBelowObjective",
        "VllmGoodputUnavailable",
        "VllmSystemEfficiencyLow",
        "VllmTtftDegradedVsBaseline",
        "VllmAutoscalerAtMaxReplicas",
        "VllmGpuSaturated",
        "VllmGpuMemoryBelowReservation",
        "VllmGpuMemoryNearlyFull",
    }
    fired = set()
    for rel in ("prometheus/tests/capacity.test.yaml", "prometheus/tests/capacity-baseline.test.yaml"):
        for group in yaml.safe_load(out.files[rel])["tests"]:
            fired |= {t["alertname"] for t in group["alert_rule_test"] if t["exp_alerts"]}
    assert fired == names
    runbook = out.files["RUNBOOK.md"].decode()
    for name in names:
        assert f"\n## {name}\n" in runbook


def test_goodput_row_sits_next_to_throughput():
    out = render_spec(SPEC)
    dashboard = json.loads(out.files["grafana/genobs-capacity.json"])
    rows = [p["title"] for p in flat_panels(dashboard) if p["type"] == "row"]
    at = rows.index("System throughput (tok/s)")
    assert rows[at + 1] == "Goodput and system efficiency" and "Capacity headroom" in rows
    titles = {p["title"] for p in flat_panels(dashboard)}
    assert {"Goodput (req/s)", "Goodput vs total output (tok/s)", "System efficiency",
            "Running requests per engine vs max_num_seqs", "KV pool (vllm:cache_config_info)"} <= titles


def _problems(text: str) -> list[str]:
    with pytest.raises(SpecError) as exc:
        build_plan(load_spec_text(text, "c.yaml"))
    return [f"{p.field}: {p.message}" for p in exc.value.problems]


BASE = "version: genobs/v1\nname: c\nuse_case: capacity\nservice: {{engine_version: '{v}', selector: {{job: vllm}}}}\ncapacity:\n  goodput: {g}\n"


@pytest.mark.parametrize(
    ("version", "goodput", "expected"),
    [
        ("0.33", "{ttft: 2s}", "capacity.goodput.ttft: 2s is not a bucket boundary"),
        ("0.10.2", "{ttft: 1s, tpot: 100ms}", "capacity.goodput.tpot: vLLM 0.10.2 has no per-request TPOT"),
        ("0.33", "{objective: 99%}", "capacity.goodput: goodput needs a ttft or tpot bound"),
    ],
)
def test_goodput_bounds_are_checked_against_the_version(version: str, goodput: str, expected: str):
    problems = _problems(BASE.format(v=version, g=goodput))
    assert any(p.startswith(expected) for p in problems), problems


def test_other_use_cases_get_no_capacity_group_without_the_block():
    plan = build_plan(load_spec_text("version: genobs/v1\nname: c\nuse_case: chat\nservice: {selector: {job: vllm}}\n", "c.yaml"))
    assert not any(g.name.endswith("-capacity") for g in plan.groups)


GPU_SPEC = """version: genobs/v1
name: g
use_case: {use_case}
service: {{selector: {{job: vllm}}}}
features:
  gpu_metrics: {gpu}
"""


def _gpu_plan(gpu: str, use_case: str = "capacity"):
    return build_plan(load_spec_text(GPU_SPEC.format(gpu=gpu, use_case=use_case), "g.yaml"))


def test_gpu_short_form_is_the_default_block():
    short = _gpu_plan("dcgm")
    block = _gpu_plan("{source: dcgm, pod_label: pod, namespace_label: namespace, saturation: 90%}")
    assert [r.expr for g in short.groups for r in g.rules] == [r.expr for g in block.groups for r in g.rules]
    assert {"VllmGpuSaturated", "VllmGpuMemoryBelowReservation", "VllmGpuMemoryNearlyFull"} <= {
        a.name for a in short.alerts
    }
    off = _gpu_plan("none")
    assert not any(a.name.startswith("VllmGpu") for a in off.alerts)


def test_gpu_join_is_per_pod_and_renames_exported_labels():
    plan = _gpu_plan("{pod_label: exported_pod, namespace_label: exported_namespace, selector: {job: dcgm}}")
    rules = {r.record: r.expr for g in plan.groups for r in g.rules if hasattr(r, "record")}
    util = rules["genobs:gpu_utilization_per_pod:ratio_avg"]
    assert 'label_replace(DCGM_FI_DEV_GPU_UTIL{job="dcgm",exported_pod!=""}, "pod", "$1", "exported_pod", "(.+)")' in util
    assert '"namespace", "$1", "exported_namespace", "(.+)"' in util
    # reduced per pod first, then paired with one series per vLLM pod: never a fleet total
    assert "* on (namespace, pod) group_left () (avg by (namespace, pod) (" in util
    assert "group by (model_name, job, namespace, pod) (vllm:num_requests_waiting{" in util
    pod_only = _gpu_plan("{namespace_label: null}")
    expr = {r.record: r.expr for g in pod_only.groups for r in g.rules if hasattr(r, "record")}
    assert "* on (pod) group_left () (avg by (pod) (" in expr["genobs:gpu_utilization_per_pod:ratio_avg"]


@pytest.mark.parametrize(
    ("gpu", "use_case", "message"),
    [
        ("dcgm", "chat", "features.gpu_metrics: the GPU signals are capacity signals"),
        ("nvml", "capacity", "features.gpu_metrics: 'nvml' is not allowed; expected dcgm, none or a block"),
        ("{source: nvml}", "capacity", "features.gpu_metrics.source: 'nvml' is not allowed"),
        ("{memory_utilization: 99%, reservation_floor: 99%}", "capacity", "must stay below 1 - min_free"),
    ],
)
def test_gpu_settings_errors(gpu: str, use_case: str, message: str):
    with pytest.raises(SpecError) as exc:
        _gpu_plan(gpu, use_case)
    assert any(message in str(p) for p in exc.value.problems), [str(p) for p in exc.value.problems]

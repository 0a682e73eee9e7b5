"""Speculative decoding on a fleet shaped like real vLLM 0.33 output, run through the
real promtool: per-user output speed comes from per-request series and the acceptance
alert reads alpha (position-0 acceptance), so a healthy k=3 fleet stays silent.

Input series are written by hand from vLLM 0.33's own exposition
(/work/shared/reference/vllm_real_exposition.txt: ngram drafts with 3 tokens, 217
drafts, 651 draft tokens, 238 accepted, 142/67/29 accepted at positions 0/1/2; one
inter-token observation per engine step), scaled to a steady per-minute rate."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import yaml

from genobs.build import render_spec
from genobs.compiler import build_plan
from genobs.loader import load_spec_text

SPEC = """\
version: genobs/v1
name: sd
use_case: chat
service:
  engine_version: "0.33"
  selector: {namespace: llm-prod, job: vllm-chat}
features:
  speculative_decoding: true
"""
GROUP = {"model_name": "gpt-oss-120b", "namespace": "llm-prod", "job": "vllm-chat"}
REPLICAS = ("10.0.0.1:8000", "10.0.0.2:8000")
ENGINES = ("0", "1")
MINUTES = 40
# per engine and minute: 60 requests of 211 tokens; each request decodes its 210 tokens after
# the first in 100 engine steps (2.1 tokens per step, the real exposition's 1 + 238/217)
REQUESTS = 60
STEPS = REQUESTS * 100
STEP_SECONDS = 0.0525  # one inter-token observation per step: 1 / 0.0525 = 19.05 "tok/s"
TPOT = 0.025  # per request: 100 steps x 0.0525 s / 210 tokens, so users get 40 tok/s
# drafts: one per step, 3 tokens each; accepted per position in the real 142:67:29 proportion
ACCEPTED_AT = (3926, 1853, 801)  # 3926 / 6000 = 0.654 (alpha); sum 6580 / 18000 = 0.366


def _series(name: str, values: str, **labels: str) -> dict:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return {"series": f"{name}{{{inner}}}", "values": values}


def fleet(accepted_at: tuple[int, ...] = ACCEPTED_AT) -> list[dict]:
    out = []
    for instance in REPLICAS:
        for engine in ENGINES:
            labels = {**GROUP, "instance": instance, "engine": engine}

            def counter(name: str, per_minute: float, labels: dict = labels, **extra: str) -> None:
                out.append(_series(name, f"0+{per_minute:g}x{MINUTES}", **labels, **extra))

            counter("vllm:request_success_total", REQUESTS, finished_reason="stop")
            for reason in ("length", "abort", "error", "repetition"):
                counter("vllm:request_success_total", 0, finished_reason=reason)
            counter("vllm:generation_tokens_total", REQUESTS * 211)
            counter("vllm:inter_token_latency_seconds_count", STEPS)
            counter("vllm:inter_token_latency_seconds_sum", STEPS * STEP_SECONDS)
            counter("vllm:request_time_per_output_token_seconds_count", REQUESTS)
            counter("vllm:request_time_per_output_token_seconds_sum", REQUESTS * TPOT)
            # the recorded TPOT bucket rate carries the request count (le="+Inf")
            counter("vllm:request_time_per_output_token_seconds_bucket", REQUESTS, le="+Inf")
            counter("vllm:spec_decode_num_drafts_total", STEPS)
            counter("vllm:spec_decode_num_draft_tokens_total", STEPS * 3)
            counter("vllm:spec_decode_num_accepted_tokens_total", sum(accepted_at))
            for position, n in enumerate(accepted_at):
                counter("vllm:spec_decode_num_accepted_tokens_per_pos_total", n, position=str(position))
    return out


def run(tmp_path: Path, promtool: str, tests: list[dict]) -> subprocess.CompletedProcess:
    spec = tmp_path / "sd.yaml"
    spec.write_text(SPEC)
    for rel, data in render_spec(spec).files.items():
        if rel.startswith("prometheus/") and rel.endswith(".rules.yaml"):
            (tmp_path / Path(rel).name).write_bytes(data)
    doc = {
        "rule_files": ["recording.rules.yaml", "alerts.rules.yaml"],
        "evaluation_interval": "1m",
        "group_eval_order": ["genobs-sd-recording", "genobs-sd-alerts"],
        "tests": tests,
    }
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return subprocess.run([promtool, "test", "rules", "t.yaml"], cwd=tmp_path, capture_output=True, text=True)


def between(expr: str, low: float, high: float) -> dict:
    """A sample of `expr` lies in (low, high): count() of the filtered series is 1."""
    return {"expr": f"count({expr} > {low:g} < {high:g})", "eval_time": "30m", "exp_samples": [{"value": 1}]}


def test_healthy_k3_speculation_is_silent_and_figures_are_told_apart(tmp_path, promtool):
    sel = '{job="vllm-chat",namespace="llm-prod"}'
    tests = [
        {
            "interval": "1m",
            "input_series": fleet(),
            "alert_rule_test": [
                {"eval_time": "30m", "alertname": "VllmSpecDecodeAcceptanceLow", "exp_alerts": []},
                {"eval_time": "30m", "alertname": "VllmOutputSpeedPerUserLow", "exp_alerts": []},
            ],
            "promql_expr_test": [
                # what users get: 1 / mean TPOT = 40 tok/s, not 1 / mean ITL = 19 tok/s
                between(f"genobs:output_speed_per_user:tokens_per_second_rate5m{sel}", 39.9, 40.1),
                between(f"genobs:spec_decode_acceptance_alpha:ratio_rate5m{sel}", 0.65, 0.66),
                between(f"genobs:spec_decode_accepted_per_draft_token:ratio_rate5m{sel}", 0.36, 0.37),
                between(f"genobs:spec_decode_acceptance_length:mean_rate5m{sel}", 2.09, 2.11),
            ],
        }
    ]
    proc = run(tmp_path, promtool, tests)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _expected(name: str, value_text: str) -> dict:
    """The alert as Prometheus renders it: labels from the fleet, $value formatted by hand."""
    plan = build_plan(load_spec_text(SPEC, "sd.yaml"))
    rule = next(a for a in plan.alerts if a.name == name)

    def fill(text: str) -> str:
        text = re.sub(r"\{\{ \$value \| [^}]+ \}\}", value_text, text)
        return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: GROUP[m.group(1)], text)

    return {
        "exp_labels": {**GROUP, **dict(rule.labels)},
        "exp_annotations": {
            "summary": rule.summary,
            "description": fill(rule.description),
            "runbook_url": rule.runbook_url,
        },
    }


def test_alpha_collapse_fires_with_alpha_as_value(tmp_path, promtool):
    # the first drafted token accepted in 30 % of steps (1800 / 6000), later positions rarer
    tests = [
        {
            "interval": "1m",
            "input_series": fleet(accepted_at=(1800, 540, 162)),
            "alert_rule_test": [
                {
                    "eval_time": "30m",
                    "alertname": "VllmSpecDecodeAcceptanceLow",
                    "exp_alerts": [_expected("VllmSpecDecodeAcceptanceLow", "30%")],
                }
            ],
        }
    ]
    proc = run(tmp_path, promtool, tests)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_versions_without_per_position_counts_get_no_alpha_alert():
    text = SPEC.replace('"0.33"', '"0.8.3"')
    plan = build_plan(load_spec_text(text, "sd.yaml"))
    assert "VllmSpecDecodeAcceptanceLow" not in {a.name for a in plan.alerts}
    assert any("VllmSpecDecodeAcceptanceLow is not generated" in w for w in plan.warnings)

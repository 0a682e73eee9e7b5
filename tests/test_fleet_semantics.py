"""What the generated rules say about a fleet of several replicas, each with two
data-parallel engines, whose input series are written here by hand in vLLM's wire
names (0.33: `vllm:` engine series with model_name/engine, the API server's
`http_requests_total{handler,method,status}`, `vllm:admission_rejections_total`
without engine label, `up`). Nothing here is derived from the plan: the rules are
built from specs/chat.yaml and run by the real promtool, which asserts exactly
which threshold alerts fire (via ALERTS) at the evaluation time."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

MODEL = "gpt-oss-120b"
TARGET = {"namespace": "llm-prod", "job": "vllm-chat"}
MINUTES = 25
EVAL = "20m"


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def _counter(per_minute: float, stop_at: int | None = None) -> str:
    """A counter growing by `per_minute` each minute, flat from minute `stop_at` on."""
    if stop_at is None:
        return f"0+{per_minute:g}x{MINUTES}"
    return f"0+{per_minute:g}x{stop_at} {per_minute * stop_at:g}+0x{MINUTES - stop_at}"


def replica(
    instance: str,
    *,
    rps: float = 10.0,
    mix: dict[str, float] | None = None,
    running: int = 6,
    waiting: int = 0,
    hung_at: int | None = None,
    zeros: bool = False,
    http_5xx_rps: float = 0.0,
    rejected_rps: float = 0.0,
) -> list[dict]:
    """One vLLM pod: two engines share the work; the API server answers every request."""
    mix = mix or {"stop": 1.0}
    out = []
    target = {**TARGET, "instance": instance}
    out.append({"series": "up" + _labels(**target), "values": f"1+0x{MINUTES}"})
    for engine in ("0", "1"):
        eng = {**target, "model_name": MODEL, "engine": engine}
        share = 0.0 if zeros else rps / 2
        for gauge, value in (("vllm:num_requests_running", running), ("vllm:num_requests_waiting", waiting)):
            v = 0 if zeros else value // 2
            out.append({"series": gauge + _labels(**eng), "values": f"{v}+0x{MINUTES}"})
        for reason in ("stop", "length", "abort", "error", "repetition"):
            per_min = share * mix.get(reason, 0.0) * 60
            out.append(
                {
                    "series": "vllm:request_success_total" + _labels(**eng, finished_reason=reason),
                    "values": _counter(per_min, hung_at),
                }
            )
        out.append(
            {"series": "vllm:generation_tokens_total" + _labels(**eng), "values": _counter(share * 300 * 60, hung_at)}
        )
    for reason in ("max_num_queued_reqs", "max_num_queued_tokens"):
        per_min = rejected_rps * 60 if reason == "max_num_queued_reqs" else 0
        series = "vllm:admission_rejections_total" + _labels(**target, model_name=MODEL, reason=reason)
        out.append({"series": series, "values": _counter(per_min)})
    http = {**target, "handler": "/v1/chat/completions", "method": "POST"}
    out.append({"series": "http_requests_total" + _labels(**http, status="2xx"), "values": _counter(rps * 60)})
    if http_5xx_rps:
        out.append(
            {"series": "http_requests_total" + _labels(**http, status="5xx"), "values": _counter(http_5xx_rps * 60)}
        )
    return out


CHAT_MIX = {"stop": 0.975, "length": 0.022, "abort": 0.003}
PODS = ("10.1.0.1:8000", "10.1.0.2:8000", "10.1.0.3:8000", "10.1.0.4:8000")

# scenario -> (series, {(alertname, severity, instance or ""), ...} firing at EVAL)
SCENARIOS: dict[str, tuple[list[dict], set[tuple[str, str, str]]]] = {
    "normal chat mix is silent": ([s for p in PODS for s in replica(p, mix=CHAT_MIX)], set()),
    "HTTP 5xx count against success": (
        [s for p in PODS for s in replica(p, mix=CHAT_MIX, http_5xx_rps=0.3)],
        {("VllmSuccessRatioLow", "warning", ""), ("VllmSuccessRatioLow", "critical", "")},
    ),
    "admission rejections count against success": (
        [s for p in PODS for s in replica(p, mix=CHAT_MIX, rejected_rps=0.1)],
        {("VllmSuccessRatioLow", "warning", "")},
    ),
    "error finishes count against success": (
        [s for p in PODS for s in replica(p, mix={"stop": 0.97, "error": 0.03})],
        {("VllmSuccessRatioLow", "warning", ""), ("VllmSuccessRatioLow", "critical", "")},
    ),
    "one hung replica of four warns and names it": (
        [s for i, p in enumerate(PODS) for s in replica(p, mix=CHAT_MIX, hung_at=5 if i == 2 else None)],
        # the API server keeps answering its clients' give-ups (2xx, no finish): a quarter abandoned
        {("VllmEngineHung", "warning", PODS[2]), ("VllmAbortRatioHigh", "warning", "")},
    ),
    "half the replicas hung pages": (
        [s for i, p in enumerate(PODS) for s in replica(p, mix=CHAT_MIX, hung_at=5 if i < 2 else None)],
        {
            ("VllmEngineHung", "warning", PODS[0]),
            ("VllmEngineHung", "warning", PODS[1]),
            ("VllmFleetNoProgress", "critical", ""),
            ("VllmAbortRatioHigh", "warning", ""),
        },
    ),
    # an engine core stopped while idle (gauges frozen at 0) or broken engine metrics: users may wait
    "all-zero engine series while the API server answers": (
        [s for i, p in enumerate(PODS) for s in replica(p, mix=CHAT_MIX, zeros=i == 3)],
        {("VllmEngineHung", "warning", PODS[3]), ("VllmAbortRatioHigh", "warning", "")},
    ),
}


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fleet")
    subprocess.run(
        [str(REPO / ".venv/bin/genobs"), "build", str(REPO / "specs/chat.yaml"), "-o", str(out)],
        check=True,
        capture_output=True,
    )
    return out / "chat" / "prometheus"


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_fleet_scenario(name: str, built: Path, promtool: str, tmp_path: Path) -> None:
    series, firing = SCENARIOS[name]
    rules = sorted(str(p) for p in built.glob("*.rules.yaml"))
    # SLO burn alerts follow the SLO's own windows and are tested with the SLO math
    query = 'count by (alertname, severity, instance) (ALERTS{alertstate="firing",job="vllm-chat",alertname!~"Slo.*"})'
    samples = []
    for alert, severity, instance in sorted(firing):
        labels = {"alertname": alert, "severity": severity, **({"instance": instance} if instance else {})}
        samples.append({"labels": _labels(**labels), "value": 1})
    groups = yaml.safe_load((built / "alerts.rules.yaml").read_text())["groups"]
    doc = {
        "rule_files": rules,
        "evaluation_interval": "30s",
        "group_eval_order": [g["name"] for f in rules for g in yaml.safe_load(Path(f).read_text())["groups"]],
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [{"expr": query, "eval_time": EVAL, "exp_samples": samples}],
            }
        ],
    }
    assert groups
    test_file = tmp_path / "t.test.yaml"
    test_file.write_text(yaml.safe_dump(doc, sort_keys=False))
    result = subprocess.run([promtool, "test", "rules", str(test_file)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{name}: {result.stdout}\n{result.stderr}"

"""SLO math checked with the real promtool on hand-written vLLM series: burn factors
follow the SLO period (Sloth's rule), the inter-token SLO's traffic gate counts
requests rather than token gaps, and a missing threshold bucket raises
Slo<Name>SliUnavailable instead of silence."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from genobs.build import render_spec
from genobs.compiler import build_plan
from genobs.errors import SpecError
from genobs.loader import load_spec_text

GROUP = {"model_name": "m", "namespace": "llm-prod", "job": "vllm-chat"}
ENGINES = ("0", "1")
# vLLM 0.33 default buckets (vllm_real_exposition.txt)
TTFT_LE = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0)
ITL_LE = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)


def spec(slo: str, service: str = "") -> str:
    return (
        'version: genobs/v1\nname: s\nuse_case: chat\nservice:\n  engine_version: "0.33"\n'
        f"  selector: {{namespace: llm-prod, job: vllm-chat}}\n  models: [m]\n{service}slos:\n  - {slo}\n"
    )


def _series(name: str, values: str, **labels: str) -> dict:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted({**GROUP, **labels}.items()))
    return {"series": f"{name}{{{inner}}}", "values": values}


def run(
    tmp_path: Path, promtool: str, text: str, inputs: list[dict], checks: list[dict]
) -> subprocess.CompletedProcess:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    for rel, data in render_spec(path).files.items():
        if rel.startswith("prometheus/") and rel.endswith(".rules.yaml"):
            (tmp_path / Path(rel).name).write_bytes(data)
    files = sorted(p.name for p in tmp_path.glob("*.rules.yaml"))
    # vLLM exports the running-requests gauge of every engine beside its counters
    inputs = [*inputs, *(_series("vllm:num_requests_running", "1x600", engine=e) for e in ENGINES)]
    doc = {
        "rule_files": files,
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": inputs, "alert_rule_test": checks}],
    }
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return subprocess.run([promtool, "test", "rules", "t.yaml"], cwd=tmp_path, capture_output=True, text=True)


def fired(text: str, name: str, value: str = "") -> dict:
    """The alert as Prometheus renders it: labels from the input series, $value written by hand."""
    rule = next(a for a in build_plan(load_spec_text(text, "s.yaml")).alerts if a.name == name)

    def fill(t: str) -> str:
        t = re.sub(r"\{\{ \$value \| [^}]+ \}\}", value, t)
        return re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: GROUP[m.group(1)], t)

    return {
        "exp_labels": {**GROUP, **dict(rule.labels)},
        "exp_annotations": {k: fill(t) for k, t in rule.annotations().items()},
    }


def factors(text: str) -> dict[str, list[float]]:
    plan = build_plan(load_spec_text(text, "s.yaml"))
    out = {}
    for a in plan.alerts:
        if "ErrorBudgetBurn" in a.name:
            out[a.name[-4:]] = [float(x) for x in re.findall(r"\(genobs:slo_burn_rate:rate\w+\{[^}]*\} > ([0-9.]+) and", a.expr)]
    return out


AVAILABILITY = "{name: availability, sli: success, objective: 99.5%, period: PERIOD}"


@pytest.mark.parametrize(
    ("period", "fast", "slow"),
    [
        # budget share x period / long window: 2 % x 720 h / 1 h, 5 % x 720 / 6, 10 % x 30 d / 1 d, 10 % x 10
        ("30d", [14.4, 6.0], [3.0, 1.0]),
        # 2 % x 168 h / 1 h = 3.36; 5 % x 168 / 6 = 1.4; 10 % x 7 / 1 = 0.7; 10 % x 7 / 3 = 0.2333
        ("7d", [3.36, 1.4], [0.7, 0.2333]),
        # 28 d: 13.44, 5.6, 2.8, 0.9333
        ("28d", [13.44, 5.6], [2.8, 0.9333]),
    ],
)
def test_burn_factors_follow_the_period(period, fast, slow):
    got = factors(spec(AVAILABILITY.replace("PERIOD", period)))
    assert got == {"Fast": fast, "Slow": slow}


def test_a_period_shorter_than_the_longest_window_is_an_error():
    with pytest.raises(SpecError) as err:
        build_plan(load_spec_text(spec(AVAILABILITY.replace("PERIOD", "1d")), "s.yaml"))
    assert "slos[0].period" in str(err.value) and "shorter than the 3d long window" in str(err.value)


def test_a_7d_slo_pages_on_a_5x_burn_that_a_30d_table_would_ignore(tmp_path, promtool):
    # 2 h healthy at 2 req/s, then 2.5 % errors: 5x the 0.5 % budget. The 7-day page needs the
    # 1 h window above 3.36x: about 3.36 / 5 h = 40 min after the burn starts (minute 120).
    text = spec(AVAILABILITY.replace("PERIOD", "7d"))
    inputs = []
    for e in ENGINES:
        inputs.append(
            _series("vllm:request_success_total", "0+60x120 7258.5+58.5x60", engine=e, finished_reason="stop")
        )
        inputs.append(_series("vllm:request_success_total", "0+0x120 1.5+1.5x60", engine=e, finished_reason="error"))
    name = "SloAvailabilityErrorBudgetBurnFast"
    checks = [
        {"eval_time": "150m", "alertname": name, "exp_alerts": []},
        {"eval_time": "170m", "alertname": name, "exp_alerts": [fired(text, name)]},
    ]
    proc = run(tmp_path, promtool, text, inputs, checks)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # the same traffic under a 30-day SLO (14.4x) stays silent
    text30 = spec(AVAILABILITY.replace("PERIOD", "30d"))
    checks = [{"eval_time": "170m", "alertname": name, "exp_alerts": []}]
    proc = run(tmp_path, promtool, text30, inputs, checks)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def _itl_fleet(hourly_requests: int, minutes: int) -> list[dict]:
    """`hourly_requests` requests an hour per engine, each of 500 tokens with every gap at 0.3 s."""
    finished, gaps = [], []
    done = 0
    every = 60 // hourly_requests
    for minute in range(minutes + 1):
        if minute and minute % every == 0:
            done += 1
        finished.append(done)
        gaps.append(done * 499)
    out = []
    for e in ENGINES:
        out.append(
            _series("vllm:request_success_total", " ".join(map(str, finished)), engine=e, finished_reason="stop")
        )
        for le in (*ITL_LE, "+Inf"):
            values = gaps if le == "+Inf" or le >= 0.3 else [0] * len(gaps)
            le_text = le if isinstance(le, str) else repr(float(le))
            out.append(
                _series("vllm:inter_token_latency_seconds_bucket", " ".join(map(str, values)), engine=e, le=le_text)
            )
        out.append(_series("vllm:inter_token_latency_seconds_count", " ".join(map(str, gaps)), engine=e))
    return out


PACE = "{name: token-pace, sli: itl, threshold: 100ms, objective: 99%}"


def test_itl_slo_gate_counts_requests_not_token_gaps(tmp_path, promtool):
    # 4 requests an hour per engine (0.0022 req/s over the fleet) but 4 x 499 gaps an hour (0.55/s):
    # all gaps are slow, yet 8 requests an hour must not page against min_request_rate 0.05 req/s
    text = spec(PACE)
    name = "SloTokenPaceErrorBudgetBurnFast"
    # evaluated one minute after a request, so the 5m window has seen one
    checks = [{"eval_time": t, "alertname": name, "exp_alerts": []} for t in ("31m", "61m", "76m")]
    proc = run(tmp_path, promtool, text, _itl_fleet(4, 90), checks)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_itl_slo_gate_the_check_can_fail(tmp_path, promtool):
    """With the floor removed the same fleet pages: the request gate is what keeps it silent."""
    text = spec(PACE, service="  min_request_rate: 0\n")
    name = "SloTokenPaceErrorBudgetBurnFast"
    checks = [{"eval_time": "61m", "alertname": name, "exp_alerts": []}]
    proc = run(tmp_path, promtool, text, _itl_fleet(4, 90), checks)
    assert proc.returncode != 0 and name in proc.stdout + proc.stderr


FIRST = "{name: first-token, sli: ttft, threshold: 1s, objective: 99%}"


def _ttft_fleet(bounds: tuple[float, ...], minutes: int = 40) -> list[dict]:
    """2 req/s over the fleet, every first token at 0.4 s (bucket 0.5)."""
    out = []
    for e in ENGINES:
        out.append(_series("vllm:request_success_total", f"0+60x{minutes}", engine=e, finished_reason="stop"))
        for le in (*bounds, "+Inf"):
            per_minute = 60 if le == "+Inf" or le >= 0.5 else 0
            le_text = le if isinstance(le, str) else repr(float(le))
            out.append(
                _series("vllm:time_to_first_token_seconds_bucket", f"0+{per_minute}x{minutes}", engine=e, le=le_text)
            )
        out.append(_series("vllm:time_to_first_token_seconds_count", f"0+60x{minutes}", engine=e))
    return out


def test_missing_threshold_bucket_raises_sli_unavailable(tmp_path, promtool):
    # the engine restarted with --custom-histogram-buckets that leave out 1 s: good events vanish
    text = spec(FIRST)
    custom = tuple(b for b in TTFT_LE if b != 1.0)
    name = "SloFirstTokenSliUnavailable"
    # $value: 2 req/s over the fleet (the SLO's 5m request rate)
    checks = [
        {"eval_time": "5m", "alertname": name, "exp_alerts": []},  # pending for 10m
        {"eval_time": "20m", "alertname": name, "exp_alerts": [fired(text, name, "2.00")]},
        {"eval_time": "20m", "alertname": "SloFirstTokenErrorBudgetBurnFast", "exp_alerts": []},
    ]
    proc = run(tmp_path, promtool, text, _ttft_fleet(custom), checks)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_sli_unavailable_silent_when_the_bucket_exists(tmp_path, promtool):
    text = spec(FIRST)
    checks = [{"eval_time": "30m", "alertname": "SloFirstTokenSliUnavailable", "exp_alerts": []}]
    proc = run(tmp_path, promtool, text, _ttft_fleet(TTFT_LE), checks)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ttft_slo_says_what_aborts_before_the_first_token_count():
    plan = build_plan(load_spec_text(spec(FIRST), "s.yaml"))
    entry = next(e for e in plan.slo_runbook if e["alert"] == "SloFirstTokenErrorBudgetBurnFast")
    assert "aborted before their first token are not counted" in entry["objective_text"]

"""Duration units in engine profiles: a histogram exported in milliseconds (SGLang's
sglang:kv_transfer_latency_ms) is recorded in seconds, while every bucket bound genobs writes
(`le` matchers, SLO and goodput bounds) stays in the histogram's own unit."""

from __future__ import annotations

import subprocess
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from genobs.catalog import load_catalog, parse_version
from genobs.cli import main
from genobs.loader import load_spec_text
from tests.conftest import REPO

PD = REPO / "out" / "sglang-pd" / "prometheus"
# the labels of the real prefill body (sglang_0.5.23_pd_prefill_exposition.txt) plus the scrape's
PREFILL = (
    'engine_type="prefill",instance="10.0.0.7:30000",job="sglang-pd",'
    'model_name="meta-llama/Llama-3.1-8B-Instruct",moe_ep_rank="0",namespace="llm-prod",pp_rank="0",tp_rank="0"'
)
# the real body's bounds, as it writes them
KV_LE = ("1.0", "2.0", "5.0", "10.0", "25.0", "50.0", "100.0", "250.0", "500.0", "1000.0", "2500.0", "5000.0", "+Inf")


def test_profile_bounds_are_seconds_and_wire_values_the_histograms_unit():
    sglang, vllm = load_catalog("sglang"), load_catalog("vllm")
    kv = sglang.metric("nixl_xfer_time")
    assert kv.unit == "milliseconds" and kv.per_second == 1000
    assert kv.wire_buckets_for(parse_version("0.5.23")) == tuple(float(b) for b in KV_LE[:-1])
    assert kv.buckets_for(parse_version("0.5.23"))[:3] == (0.001, 0.002, 0.005)
    assert kv.buckets_for(parse_version("0.5.23"))[-2:] == (2.5, 5.0)
    assert [kv.wire_value(s) for s in (0.005, 0.025, 0.5, 2.5)] == [5.0, 25.0, 500.0, 2500.0]
    nixl = vllm.metric("nixl_xfer_time")
    assert nixl.per_second == 1 and nixl.wire_value(0.5) == 0.5
    assert nixl.buckets_for(parse_version("0.33")) == nixl.wire_buckets_for(parse_version("0.33"))


def _context(text: str):
    from genobs.plan import _context

    problems: list = []
    ctx = _context(load_spec_text(text, "probe.yaml"), problems)
    assert not problems and ctx is not None
    return ctx


@pytest.mark.parametrize(
    ("engine", "seconds", "matcher"),
    [
        ("sglang", 0.5, ("le", "=~", r"500(\.0+)?")),
        ("sglang", 0.025, ("le", "=~", r"25(\.0+)?")),
        ("sglang", 2.5, ("le", "=~", r"2500(\.0+)?")),
        ("sglang", 0.001, ("le", "=~", r"1(\.0+)?")),
        ("vllm", 0.5, ("le", "=~", r"0\.50*")),
        ("vllm", 5.0, ("le", "=~", r"5(\.0+)?")),
    ],
)
def test_a_threshold_on_a_millisecond_histogram_picks_its_le(engine: str, seconds: float, matcher: tuple):
    version = "0.5.23" if engine == "sglang" else "0.33"
    ctx = _context(
        f"version: genobs/v1\nname: probe\nservice:\n  engine: {engine}\n  engine_version: \"{version}\"\n"
        "  selector: {job: llm}\n  models: [m]\nuse_case: chat\n"
    )
    assert ctx.le("nixl_xfer_time", seconds) == matcher


def _millisecond_ttft(monkeypatch: pytest.MonkeyPatch) -> None:
    """SGLang's profile with its TTFT histogram exported in milliseconds (as Triton's
    nv_inference_first_response_histogram_ms is): the same bounds, 1000 times larger."""
    real = load_catalog("sglang")
    ttft = real.metric("ttft")
    ms = replace(
        ttft,
        unit="milliseconds",
        buckets=tuple((since, until, tuple(b * 1000 for b in le)) for since, until, le in ttft.buckets),
        _names={},
    )
    fake = replace(real, metrics={**real.metrics, "ttft": ms})
    monkeypatch.setattr("genobs.plan.load_catalog", lambda engine: fake if engine == "sglang" else load_catalog(engine))


def _slo_spec(threshold: str) -> str:
    return (
        "version: genobs/v1\nname: probe\nservice:\n  engine: sglang\n  engine_version: \"0.5.23\"\n"
        "  selector: {job: llm}\n  models: [m]\nuse_case: chat\n"
        f"slos:\n  - {{name: first-token, sli: ttft, threshold: {threshold}, objective: 99%}}\n"
    )


def test_an_slo_on_a_millisecond_histogram_counts_good_events_at_its_le(tmp_path: Path, monkeypatch, promtool: str):
    """The SLO threshold 1s is the bound le="1000" of a millisecond TTFT histogram: the SLI reads
    that bucket, the p99 alert compares seconds, and the generated promtool tests pass."""
    _millisecond_ttft(monkeypatch)
    spec = tmp_path / "probe.yaml"
    spec.write_text(_slo_spec("1s"))
    result = CliRunner().invoke(main, ["build", "-o", str(tmp_path / "out"), str(spec)])
    assert result.exit_code == 0, result.output
    rules = tmp_path / "out" / "probe" / "prometheus"
    slo = (rules / "slo.rules.yaml").read_text()
    assert 'le=~"1000(\\\\.0+)?"' in slo and 'le=~"1(\\\\.0+)?"' not in slo
    recording = (rules / "recording.rules.yaml").read_text()
    assert "genobs:ttft_milliseconds:bucket_rate5m" in recording
    assert "histogram_quantile(0.99, genobs:ttft_milliseconds:bucket_rate5m" in recording
    assert ") / 1000 >= 0" in recording


def test_an_slo_threshold_between_millisecond_bounds_is_a_located_error(tmp_path: Path, monkeypatch):
    _millisecond_ttft(monkeypatch)
    spec = tmp_path / "probe.yaml"
    spec.write_text(_slo_spec("1.5s"))
    result = CliRunner().invoke(main, ["build", "--no-check", "-o", str(tmp_path / "out"), str(spec)])
    assert result.exit_code == 2, result.output
    assert "probe.yaml:10:" in result.output
    assert "slos[0].threshold: 1.5s is not a bucket boundary" in result.output
    assert "nearest boundaries: 800ms, 1s, 2s, 4s" in result.output
    assert "Traceback" not in result.output


def _bucket_series(per_minute: dict[str, int], total_ms: int) -> list[dict]:
    out = [{"series": f"sglang:kv_transfer_latency_ms_bucket{{{PREFILL},le=\"{le}\"}}", "values": f"0+{n}x40"} for le, n in per_minute.items()]
    count = per_minute["+Inf"]
    out.append({"series": f"sglang:kv_transfer_latency_ms_count{{{PREFILL}}}", "values": f"0+{count}x40"})
    out.append({"series": f"sglang:kv_transfer_latency_ms_sum{{{PREFILL}}}", "values": f"0+{total_ms}x40"})
    return out


def _alert_description(value: str) -> str:
    rules = yaml.safe_load((PD / "alerts.rules.yaml").read_text())
    rule = next(r for g in rules["groups"] for r in g["rules"] if r.get("alert") == "SglangKvTransferTimeP99High")
    text = rule["annotations"]["description"]
    for label, v in (("model_name", "meta-llama/Llama-3.1-8B-Instruct"), ("namespace", "llm-prod"), ("job", "sglang-pd")):
        text = text.replace(f"{{{{ $labels.{label} }}}}", v)
    return text.replace("{{ $value | humanizeDuration }}", value)


def test_recorded_kv_transfer_p99_is_in_seconds(tmp_path: Path, promtool: str):
    """On the committed sglang-pd rules, with the real prefill body's series: 99 % of the transfers
    within 2500 ms records a p99 of 2.5 (seconds, not 2500) and warns "2.5s"; the real body's own
    distribution (p99 ~28.5 ms) records 0.0285 and stays silent."""
    p99 = 'genobs:nixl_xfer_time_seconds:quantile_rate5m{quantile="0.99"}'
    labels = {"job": "sglang-pd", "model_name": "meta-llama/Llama-3.1-8B-Instruct", "namespace": "llm-prod", "quantile": "0.99"}
    slow = dict(zip(KV_LE, (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 594, 600, 600)))
    # the real prefill body's cumulative counts, as one minute's transfers
    healthy = dict(zip(KV_LE, (0, 2, 38, 122, 170, 172, 172, 172, 172, 172, 172, 172, 172)))
    tests = [
        {
            "interval": "1m",
            "input_series": _bucket_series(slow, 600 * 2000),
            "promql_expr_test": [
                {"expr": f"round({p99}, 0.001)", "eval_time": "20m", "exp_samples": [{"labels": _text(labels), "value": 2.5}]}
            ],
            "alert_rule_test": [
                {
                    "alertname": "SglangKvTransferTimeP99High",
                    "eval_time": "20m",
                    "exp_alerts": [
                        {
                            "exp_labels": {**labels, "severity": "warning", "signal": "nixl_transfer", "team": "inference-platform"},
                            "exp_annotations": {
                                "summary": "KV transfer p99 above 500ms",
                                "description": _alert_description("2.5s"),
                                "runbook_url": "https://git.example.com/sre/llm-observability/blob/main/out/sglang-pd/RUNBOOK.md#sglangkvtransfertimep99high",
                            },
                        }
                    ],
                }
            ],
        },
        {
            "interval": "1m",
            "input_series": _bucket_series(healthy, 1448),
            "promql_expr_test": [
                {"expr": f"round({p99}, 0.0001)", "eval_time": "20m", "exp_samples": [{"labels": _text(labels), "value": 0.0285}]}
            ],
            "alert_rule_test": [{"alertname": "SglangKvTransferTimeP99High", "eval_time": "20m", "exp_alerts": []}],
        },
    ]
    path = tmp_path / "kv.test.yaml"
    files = [str(PD / "recording.rules.yaml"), str(PD / "alerts.rules.yaml")]
    path.write_text(yaml.safe_dump({"rule_files": files, "evaluation_interval": "30s", "tests": tests}, sort_keys=False))
    run = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_sglang_mebibytes_are_recorded_in_bytes():
    """SGLang's "MB" is total bytes / (1024 * 1024) (req_time_stats.py): the profile says mebibytes,
    bounds in bytes are the wire bounds times 1048576, and the wire value of 64 MiB is 64."""
    mb = load_catalog("sglang").metric("nixl_bytes")
    assert mb.unit == "mebibytes" and mb.bytes_per_unit == 2**20 and mb.per_second == 1
    assert mb.wire_buckets_for(parse_version("0.5.23")) == (1, 5, 10, 50, 100, 500, 1000, 5000, 10000)
    assert mb.buckets_for(parse_version("0.5.23"))[:2] == (2**20, 5 * 2**20)
    assert mb.wire_value(64 * 2**20) == 64.0
    assert load_catalog("sglang").name("nixl_bytes", parse_version("0.5.9")) is None  # a gauge up to 0.5.9


def test_recorded_kv_transfer_bytes_and_throughput_from_the_real_prefill_body(tmp_path: Path, promtool: str):
    """The real prefill body's totals as one minute's transfers: 172 transfers, 30883.875 MiB
    (sglang:kv_transfer_total_mb_sum) in 1448.23 ms (sglang:kv_transfer_latency_ms_sum). The
    committed rules record 30883.875 * 1048576 / 60 bytes/s, and as link throughput the bytes over
    the seconds of transfer time (about 22.4 GB/s), not MiB over milliseconds (21,325)."""
    minute_mb, minute_ms = 30883.875, 1448.2278760019417
    series = [
        {"series": f"sglang:kv_transfer_total_mb_sum{{{PREFILL}}}", "values": f"0+{minute_mb}x40"},
        {"series": f"sglang:kv_transfer_total_mb_count{{{PREFILL}}}", "values": "0+172x40"},
        {"series": f"sglang:kv_transfer_latency_ms_sum{{{PREFILL}}}", "values": f"0+{minute_ms}x40"},
        {"series": f"sglang:kv_transfer_latency_ms_count{{{PREFILL}}}", "values": "0+172x40"},
    ]
    labels = _text({"job": "sglang-pd", "model_name": "meta-llama/Llama-3.1-8B-Instruct", "namespace": "llm-prod"})
    tests = [
        {
            "interval": "1m",
            "input_series": series,
            "promql_expr_test": [
                {
                    "expr": "round(genobs:nixl_bytes_transferred:rate5m)",
                    "eval_time": "20m",
                    "exp_samples": [{"labels": labels, "value": round(minute_mb * 2**20 / 60)}],
                },
                {
                    "expr": "round(genobs:nixl_transfer_throughput:bytes_per_second_rate5m / 1e6)",
                    "eval_time": "20m",
                    "exp_samples": [{"labels": labels, "value": round(minute_mb * 2**20 / (minute_ms / 1000) / 1e6)}],
                },
            ],
        }
    ]
    path = tmp_path / "bytes.test.yaml"
    rules = [str(PD / "recording.rules.yaml")]
    path.write_text(yaml.safe_dump({"rule_files": rules, "evaluation_interval": "30s", "tests": tests}, sort_keys=False))
    run = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def _text(labels: dict[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


def test_kv_transfer_before_0_5_10_is_not_observable(tmp_path: Path):
    """Up to 0.5.9 the latency is a last-value gauge: build says so, and an alert on it is an error."""
    base = (
        "version: genobs/v1\nname: probe\nservice:\n  engine: sglang\n  engine_version: \"0.5.9\"\n"
        "  selector: {job: llm}\n  models: [m]\n  roles: {label: engine_type, prefill: prefill, decode: decode}\n"
        "use_case: chat\nfeatures: {disaggregated_prefill: true}\n"
    )
    spec = tmp_path / "probe.yaml"
    spec.write_text(base)
    result = CliRunner().invoke(main, ["build", "--no-check", "-o", str(tmp_path / "out"), str(spec)])
    assert result.exit_code == 0, result.output
    assert "KV transfer (nixl_transfer) is not observable on SGLang 0.5.9: before 0.5.10" in result.output
    rules = (tmp_path / "out" / "probe" / "prometheus" / "recording.rules.yaml").read_text()
    assert "kv_transfer" not in rules and "transfer_failed" not in rules
    spec.write_text(base + "alerts:\n  nixl_transfer: {warning: 1s}\n")
    result = CliRunner().invoke(main, ["build", "--no-check", "-o", str(tmp_path / "out2"), str(spec)])
    assert result.exit_code == 2, result.output
    assert "error: alerts.nixl_transfer: nixl_transfer is not observable on SGLang 0.5.9" in result.output
    assert "Traceback" not in result.output

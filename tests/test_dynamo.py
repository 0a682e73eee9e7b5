"""NVIDIA Dynamo: its frontend (dynamo_frontend_*, label `model`) as the spec's `gateway:` in front
of vLLM workers whose system port re-exports vllm:* with Dynamo's labels added (docs/gateway.md,
section "Dynamo"). The names the example reads come from the engines catalog's Dynamo rows (here
the hand copy in tests/fleet_metrics.yaml) and vLLM's real 0.33 body; the frontend's figures and
the workers' are recorded once each, never summed together."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from fleet_series import DATA, Fleet
from scenario_runner import build, promtool_expr_tests, rule_groups

from genobs.cli import main
from genobs.compiler import load_plan
from genobs.plan.model import RecordingRule
from genobs.promql import metric_names
from tests.conftest import REPO

SPEC = REPO / "specs" / "dynamo.yaml"
VLLM_BODY = REPO / "tests" / "fixtures" / "vllm_0.33.0_metrics.txt"  # the real 0.33.0 body
MODEL = "meta-llama/Llama-3.1-8B-Instruct"

# engines catalog section 7, "Metric families": every dynamo_frontend_* family of the table
# (histograms with their _bucket/_sum/_count samples)
FRONTEND_COUNTERS_GAUGES = {
    "dynamo_frontend_requests_total", "dynamo_frontend_requests_started_total", "dynamo_frontend_active_requests",
    "dynamo_frontend_inflight_requests", "dynamo_frontend_queued_requests", "dynamo_frontend_disconnected_clients",
    "dynamo_frontend_output_tokens_total", "dynamo_frontend_model_migration_total",
    "dynamo_frontend_model_migration_max_seq_len_exceeded_total", "dynamo_frontend_model_cancellation_total",
    "dynamo_frontend_model_rejection_total", "dynamo_frontend_model_ready",
    "dynamo_frontend_router_queue_pending_requests",
}
FRONTEND_HISTOGRAMS = {
    "dynamo_frontend_request_duration_seconds", "dynamo_frontend_time_to_first_token_seconds",
    "dynamo_frontend_inter_token_latency_seconds", "dynamo_frontend_input_sequence_tokens",
    "dynamo_frontend_output_sequence_tokens", "dynamo_frontend_cached_tokens",
}
FRONTEND = FRONTEND_COUNTERS_GAUGES | {f"{h}{s}" for h in FRONTEND_HISTOGRAMS for s in ("_bucket", "_sum", "_count")}


def _spec(**gateway: str) -> str:
    data = yaml.safe_load(SPEC.read_text())
    data["gateway"].update(gateway)
    return yaml.safe_dump(data, sort_keys=False)


def _read(text: str) -> tuple[set[str], list[str], object]:
    _, plan = load_plan(text=text, file="dynamo.yaml")
    recorded = {r.record for g in plan.groups for r in g.rules if isinstance(r, RecordingRule)}
    exprs = [r.expr for g in plan.groups for r in g.rules]
    exprs += [t.expr for row in plan.dashboard.rows for p in row.panels for t in p.targets]
    names: set[str] = set()
    for expr in exprs:
        names |= metric_names(re.sub(r"\$(\w+)", "x", expr))
    return names - recorded - {"up", "ALERTS"}, exprs, plan


def _vllm_names() -> set[str]:
    names = set()
    for line in VLLM_BODY.read_text().splitlines():
        if line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names | {e["name"] for e in DATA["http_requests"]}


def test_example_reads_only_names_of_the_dynamo_rows_and_the_real_vllm_body():
    names, _, _ = _read(SPEC.read_text())
    frontend = {n for n in names if n.startswith("dynamo_")}
    workers = names - frontend
    assert frontend and frontend <= FRONTEND, sorted(frontend - FRONTEND)
    assert workers and workers <= _vllm_names(), sorted(workers - _vllm_names())
    # the frontend's user-facing histograms and request counter are what its alerts read
    assert {"dynamo_frontend_time_to_first_token_seconds_bucket", "dynamo_frontend_requests_total"} <= frontend


def test_frontend_series_are_read_by_model_and_recorded_as_model_name():
    """The frontend writes `model`; its recorded series carry model_name, the pods' model label, so
    alerts and inhibition of both layers match on it. No frontend selector filters on model_name."""
    _, exprs, _ = _read(SPEC.read_text())
    frontend = [e for e in exprs if "dynamo_frontend_" in e]
    assert frontend and any('model=~"meta-llama/Llama-3\\\\.1-8B-Instruct"' in e for e in frontend)
    for e in frontend:
        for sel in re.findall(r"dynamo_frontend_\w+\{[^}]*\}", e):
            assert not re.search(r"model_name[=!]", sel), sel  # the frontend has no model_name label
        assert 'label_replace(' in e and '"model_name", "$1", "model"' in e, e


def test_errors_count_server_failures_not_cancellations():
    _, exprs, _ = _read(SPEC.read_text())
    errors = next(e for e in exprs if 'status="error"' in e and "dynamo_frontend_requests_total" in e)
    assert 'error_type!~"cancelled|validation|not_found"' in errors


def test_frontend_takes_the_pages_and_the_workers_keep_diagnosis():
    _, _, plan = _read(SPEC.read_text())
    severities: dict[str, set[str]] = {}
    for a in plan.alerts:
        severities.setdefault(a.name, set()).add(a.severity)
    assert severities["GatewayTtftP99High"] == {"critical", "warning"}
    assert severities["VllmTtftP99High"] == {"warning"}
    assert "VllmKvCacheSaturated" in severities
    section = next(e for e in plan.runbook if e.alert == "GatewayTtftP99High")
    shown = " ".join(q for _, q in section.confirm)
    assert "dynamo_frontend_time_to_first_token_seconds_bucket" in shown
    assert "vllm:time_to_first_token_seconds_bucket" in shown and "vllm:kv_cache_usage_perc" in shown
    # the frontend has no InferencePool: no ready-endpoints query or panel
    assert "pool" not in shown and not any("ready endpoints" in p.title for r in plan.dashboard.rows for p in r.panels)


def test_capability_lines_name_what_the_frontend_cannot_observe(tmp_path: Path):
    """No TPOT, queue-time histogram, stop/length finish reasons, preemptions or spec decode on the
    frontend: build prints one line each, explain says it, and the workers' series back them."""
    built = CliRunner().invoke(main, ["build", "--no-check", "-o", str(tmp_path / "out"), str(SPEC)])
    assert built.exit_code == 0, built.output
    text = " ".join(built.output.split())
    for signal in ("tpot", "queue_time", "length_finish", "preemptions", "spec_decode_acceptance"):
        assert f"({signal}) is not observable on Dynamo frontend 1.6.0" in text, signal
    assert "(ttft) is not observable" not in text and "(e2e) is not observable" not in text
    result = CliRunner().invoke(main, ["explain", "--spec", str(SPEC), "queue_time"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "(queue_time) is not observable on Dynamo frontend 1.6.0" in text and "read on the pods (vLLM 0.33.0)" in text


@pytest.mark.parametrize("release", ["1.4.2", "1.7", "0.4"])
def test_release_outside_the_profile_is_a_located_error(release: str, tmp_path: Path):
    spec = tmp_path / "dyn.yaml"
    spec.write_text(_spec(engine_version=release))
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["build", "--no-check", "-o", str(out), str(spec)])
    assert result.exit_code == 2, result.output
    line = next(i + 1 for i, t in enumerate(spec.read_text().splitlines()) if "engine_version" in t and release in t)
    assert f"{spec}:{line}:" in result.output
    assert f"gateway.engine_version: Dynamo frontend {release} is outside the versions genobs knows (1.5.0 to 1.6.1)" in (
        result.output
    )
    assert "Traceback" not in result.output and not out.exists()


def test_frontend_and_workers_are_each_counted_once(tmp_path: Path, promtool: str):
    """4 workers x 2 ranks, 5 req/s per worker: the frontend records 20 req/s (not 40: the
    workers' vllm:* series are another layer) and the workers' own request rate is 20 req/s
    too, whatever Dynamo labels they carry (worker_id, dp_rank, dynamo_* summed away).
    5 % overload errors and 10 % cancellations: success 95 %, not 85 %."""
    spec = yaml.safe_load(SPEC.read_text())
    fleet = Fleet(
        {"replicas": 4, "engines": 2, "duration": "20m", "gateway": {"traffic": {"errors": 0.05, "cancelled": 0.1}}},
        spec,
    )
    series = fleet.series()
    worker = next(s["series"] for s in series if s["series"].startswith("vllm:num_requests_running"))
    for label in ("worker_id", "dp_rank", "dynamo_component", "dynamo_namespace", "dynamo_endpoint", 'model="'):
        assert label in worker, worker  # the fleet is Dynamo-shaped
    files, groups, _, _ = rule_groups(build(spec, tmp_path))
    sel = f'{{job="dynamo-frontend",namespace="dynamo-prod",model_name="{MODEL}"}}'
    tests = [
        {"expr": "round(genobs:gateway_requests:rate5m, 0.001)", "eval_time": "20m",
         "exp_samples": [{"labels": sel, "value": 20}]},
        {"expr": "round(genobs:gateway_request_success:ratio_rate5m, 0.001)", "eval_time": "20m",
         "exp_samples": [{"labels": sel, "value": 0.95}]},
        {"expr": "round(sum(genobs:requests_finished:rate5m), 0.001)", "eval_time": "20m",
         "exp_samples": [{"labels": "{}", "value": 20}]},
        {"expr": 'count(genobs:gateway_ttft_seconds:quantile_rate5m{quantile="0.99"})', "eval_time": "20m",
         "exp_samples": [{"labels": "{}", "value": 1}]},
    ]
    proc = promtool_expr_tests(promtool, files, groups, series, tests, tmp_path / "values.test.yaml")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_simulated_frontend_writes_only_catalog_names_with_label_model():
    """`genobs simulate --engine dynamo`: every family is a row of the catalog's Dynamo table,
    each sample carries `model` (never model_name), and overload and cancellations are split by
    status and error_type as prometheus_names.rs writes them."""
    from genobs.sim.dynamo import DynamoFrontendSimulator

    now = [0.0]
    sim = DynamoFrontendSimulator(None, {"a": "success_drop", "b": "abort_surge"}, fault_after=1, clock=lambda: now[0])
    now[0] = 60.0
    body = sim.render().decode()
    samples = [line for line in body.splitlines() if line and not line.startswith("#")]
    names = {re.split(r"[{ ]", line, maxsplit=1)[0] for line in samples}
    assert names <= FRONTEND, sorted(names - FRONTEND)
    assert all('model="' in line and "model_name" not in line for line in samples)
    assert 'error_type="overload",model="a",request_type="stream",status="error"' in body
    assert 'error_type="cancelled",model="b",request_type="stream",status="error"' in body
    with pytest.raises(ValueError, match="outside the catalog's range"):
        DynamoFrontendSimulator("1.4.2", None)


@pytest.mark.slow  # a real Alertmanager on loopback
def test_alertmanager_pages_once_the_frontend_silences_the_workers_warnings(tmp_path: Path):
    """The frontend's alerts carry model_name (read from its `model` label), so they silence the
    workers' warnings of the same signal and model, and no other model's or job's."""
    from genobs.build import render_spec
    from tests.test_alertmanager import _assert_inhibited, _running

    inhibit = yaml.safe_load(render_spec(SPEC).files["alertmanager/inhibit-rules.yaml"])["inhibit_rules"]
    config = {"route": {"receiver": "null"}, "receivers": [{"name": "null"}], "inhibit_rules": inhibit}

    def alert(name: str, severity: str, signal: str, job: str, **labels: str) -> dict:
        base = {"namespace": "dynamo-prod", "job": job, "model_name": MODEL, "signal": signal}
        return {"labels": {"alertname": name, "severity": severity, **base, **labels}}

    front = "dynamo-frontend"
    workers = "dynamo-vllm-worker"
    page = alert("GatewaySuccessRatioLow", "critical", "success", front, layer="gateway")
    warning = alert("GatewaySuccessRatioLow", "warning", "success", front, layer="gateway")
    pod_success = alert("VllmSuccessRatioLow", "warning", "success", workers)
    other_model = alert("VllmSuccessRatioLow", "warning", "success", workers, model_name="other-model")
    kv = alert("VllmKvCacheSaturated", "warning", "kv_cache", workers, instance="10.0.0.11:8000")
    pod_ttft = alert("VllmTtftP99High", "warning", "ttft", workers)
    alerts = [page, warning, pod_success, other_model, kv, pod_ttft]
    with _running(tmp_path, config) as url:
        _assert_inhibited(url, alerts, [warning, pod_success])
    # a TTFT surge (tests/scenarios/dynamo_frontend_ttft_degradation_pages_once.yaml fires all of
    # these): the first-token SLO's fast burn, read at the frontend, is the one page left
    fast = alert("SloFirstTokenErrorBudgetBurnFast", "critical", "ttft", front, slo="first-token")
    slow = alert("SloFirstTokenErrorBudgetBurnSlow", "warning", "ttft", front, slo="first-token")
    ttft_page = alert("GatewayTtftP99High", "critical", "ttft", front, layer="gateway")
    ttft_warning = alert("GatewayTtftP99High", "warning", "ttft", front, layer="gateway")
    burning = [fast, slow, ttft_page, ttft_warning, pod_ttft, kv]
    (tmp_path / "burn").mkdir()
    with _running(tmp_path / "burn", config) as url:
        _assert_inhibited(url, burning, [slow, ttft_page, ttft_warning, pod_ttft])


@pytest.mark.parametrize(
    ("engine", "release", "bodies"),
    [
        ("sglang", "0.5.23", ("sglang_0.5.23_exposition.txt",)),
        ("trtllm", "1.2.1", ("trtllm_exposition.txt",)),
    ],
)
def test_frontend_in_front_of_other_engines_reads_their_real_bodies(engine: str, release: str, bodies: tuple[str, ...]):
    """Dynamo's SGLang and TensorRT-LLM workers re-export sglang:* and trtllm_*: the spec's
    `service` names their engine, the worker side reads only names of their real bodies, and the
    frontend still takes the user-facing pages."""
    from tests.test_engines import body_names

    data = yaml.safe_load(SPEC.read_text())
    data["service"].update(engine=engine, engine_version=release)
    data["slos"] = [s for s in data["slos"] if s["sli"] != "itl"]  # TensorRT-LLM has no ITL histogram
    data["alerts"] = {"e2e": {"warning": "32s"}}
    names, _, plan = _read(yaml.safe_dump(data, sort_keys=False))
    workers = {n for n in names if not n.startswith("dynamo_")}
    assert workers and workers <= body_names(*bodies), sorted(workers - body_names(*bodies))
    assert {n for n in names if n.startswith("dynamo_")} <= FRONTEND
    assert {a.severity for a in plan.alerts if a.name == "GatewayTtftP99High"} == {"critical", "warning"}


def test_slos_over_another_window_read_the_frontend_raw_series_as_model_name(tmp_path: Path, promtool: str):
    """rate_window 1m: the SLOs' 5m base window reads the frontend's raw counters and buckets,
    relabelled to model_name (and the rules pass promtool)."""
    data = yaml.safe_load(SPEC.read_text())
    data["rate_window"] = "1m"
    spec = tmp_path / "dynamo-1m.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    result = CliRunner().invoke(main, ["build", "--strict", "-o", str(tmp_path / "out"), str(spec)])
    assert result.exit_code == 0, result.output
    _, plan = load_plan(spec)
    gateway_slo = " ".join(r.expr for g in plan.groups if g.name.endswith("-gateway-slo") for r in g.rules)
    assert "dynamo_frontend_time_to_first_token_seconds_count" in gateway_slo
    assert 'status="error",error_type!~"cancelled|validation|not_found"' in gateway_slo
    assert '"model_name", "$1", "model"' in gateway_slo and "vllm:" not in gateway_slo

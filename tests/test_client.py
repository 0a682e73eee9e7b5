"""The application's view (spec `client:`, docs/client.md): OpenTelemetry GenAI client metrics as
a layer in front of the gateway and the pods. Its recording rules read the client names of the
profile's release and translation and keep the grouping labels; its alerts page first and
silence the gateway's and the pods' alerts of the same signal and model; bad input is a located
error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from genobs.cli import main
from genobs.compiler import load_plan
from genobs.errors import SpecError
from tests.conftest import REPO

SPEC = REPO / "specs" / "app-otel.yaml"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def _data() -> dict:
    return yaml.safe_load(SPEC.read_text())


def _plan(data: dict):
    return load_plan(text=yaml.safe_dump(data, sort_keys=False), file="app.yaml")[1]


def _errors(data: dict) -> list[str]:
    with pytest.raises(SpecError) as err:
        _plan(data)
    return [str(p) for p in err.value.problems]


def _client_rules(plan):
    return [r for g in plan.groups if g.name.endswith("-client") for r in g.rules]


# --- the spec section ----------------------------------------------------------------------------


def test_client_selector_without_job_is_a_located_error(tmp_path: Path):
    text = SPEC.read_text().replace("    job: chat-frontend            # the application's own /metrics\n", "")
    spec = tmp_path / "app.yaml"
    spec.write_text(text)
    result = CliRunner().invoke(main, ["build", "--no-check", "-o", str(tmp_path / "out"), str(spec)])
    assert result.exit_code == 2, result.output
    line = next(i + 1 for i, t in enumerate(text.splitlines()) if "namespace: chat-app" in t)
    assert f"{spec}:{line}:" in result.output
    assert "client.selector: must name the scrape job of the application" in result.output
    assert "Traceback" not in result.output and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        (lambda c: c["otel"].update(translation="dots"), "client.otel.translation", "underscores_with_suffixes"),
        (lambda c: c["otel"].update(translation="utf8"), "client.otel.translation", "does not write PromQL for UTF-8"),
        (lambda c: c.update(conventions="1.26.0"), "client.conventions", "outside the releases genobs knows (1.27.0"),
        (lambda c: c.update(model_names={"x": "other-model"}), "client.model_names.x", "not one of service.models"),
        (lambda c: c["alerts"]["ttft"].update(warning="2 seconds"), "client.alerts.ttft.warning", "is not a duration"),
        (lambda c: c["alerts"]["error_ratio"].update(critical="150%"), "client.alerts.error_ratio.critical", "out of range"),
        (lambda c: c.update(selector={"namespace": "llm-prod", "job": "vllm-pool"}), "client.selector", "own job"),
        (lambda c: c.update(selektor={}), "client.selektor", "selector"),
        (lambda c: c["alerts"].update(token_usage={"up": 0.8}), "client.alerts.token_usage.up", "not a factor above 1"),
        (lambda c: c["alerts"].update(token_usage={"down": 1.5}), "client.alerts.token_usage.down", "between 0 and 1"),
        (lambda c: c["alerts"].update(token_usage={"up": "2x"}), "client.alerts.token_usage.up", "number"),
        (lambda c: c["alerts"].update(token_usage={"for": "2h"}), "client.alerts.token_usage.for", "1h"),
        (lambda c: c["alerts"].update(token_usage={"factor": 2}), "client.alerts.token_usage.factor", "unknown key"),
    ],
)
def test_bad_client_input_names_the_field(change, field: str, words: str):
    data = _data()
    change(data["client"])
    found = _errors(data)
    assert any(f" {field}: " in p and words in p for p in found), found
    assert all(p.startswith("app.yaml:") for p in found), found


def test_schema_has_the_client_section():
    schema = json.loads((REPO / "genobs.schema.json").read_text())
    assert "client" in schema["properties"]
    assert schema["$defs"]["ClientOtel"]["properties"]["translation"]["enum"] == [
        "underscores_with_suffixes",
        "utf8",
        "utf8_without_suffixes",
    ]


# --- the plan ------------------------------------------------------------------------------------


def test_client_rules_read_the_client_metrics_and_keep_the_grouping():
    plan = _plan(_data())
    records = {r.record: r.expr for r in _client_rules(plan) if hasattr(r, "record")}
    assert set(records) >= {
        "genobs:client_requests:rate5m",
        "genobs:client_request_errors:rate5m",
        "genobs:client_request_errors:ratio_rate5m",
        "genobs:client_ttft_seconds:quantile_rate5m",
        "genobs:client_operation_duration_seconds:quantile_rate5m",
        "genobs:client_chunk_interval_seconds:quantile_rate5m",
        "genobs:client_prompt_tokens:rate5m",
        "genobs:client_generation_tokens:rate5m",
    }
    errors = records["genobs:client_request_errors:rate5m"]
    assert 'gen_ai_client_operation_duration_seconds_count{namespace="chat-app",job="chat-frontend"' in errors
    assert 'error_type!=""' in errors
    ttft = records["genobs:client_ttft_seconds:bucket_rate5m"]
    # the application's instances are summed away; the model, its selector's labels are kept
    assert ttft.startswith("sum by (model_name, namespace, job, le) (")
    # its name of the model is the pods' name on every recorded series
    assert '"model_name", "meta-llama/Llama-3.1-8B-Instruct", "gen_ai_request_model", "llama-3\\\\.1-8b"' in ttft
    assert 'gen_ai_request_model=~"meta-llama/Llama-3\\\\.1-8B-Instruct|llama-3\\\\.1-8b"' in ttft
    tokens = records["genobs:client_prompt_tokens:rate5m"]
    assert "gen_ai_client_token_usage_sum" in tokens and 'gen_ai_token_type="input"' in tokens


def test_client_alerts_levels_and_layer():
    plan = _plan(_data())
    alerts = [r for r in _client_rules(plan) if hasattr(r, "severity")]
    levels = {(a.name, a.severity, a.threshold) for a in alerts}
    assert levels == {
        ("ClientTtftP99High", "critical", 2.56),
        ("ClientTtftP99High", "warning", 1.28),
        ("ClientErrorRatioHigh", "critical", 0.05),
        ("ClientErrorRatioHigh", "warning", 0.01),
        ("ClientTokenUsageShift", "warning", None),
    }
    assert all(("layer", "client") in a.labels and ("team", "inference-platform") in a.labels for a in alerts)
    assert all(a.protects for a in alerts if a.severity == "critical")
    assert all(not a.protects for a in alerts if a.severity != "critical")


def test_client_levels_default_to_the_specs_own():
    """Without client.alerts: the spec's TTFT levels, and 1 - its success levels."""
    data = _data()
    del data["client"]["alerts"]
    plan = _plan(data)
    client = {(a.name, a.severity): a.threshold for a in plan.alerts if ("layer", "client") in a.labels}
    gateway = {(a.name, a.severity): a.threshold for a in plan.alerts if ("layer", "gateway") in a.labels}
    for severity in ("critical", "warning"):
        assert client[("ClientTtftP99High", severity)] == gateway[("GatewayTtftP99High", severity)]
        success = gateway[("GatewaySuccessRatioLow", severity)]
        assert client[("ClientErrorRatioHigh", severity)] == pytest.approx(1 - success)


def test_conventions_before_first_chunk_have_no_ttft_alert_and_say_so(tmp_path: Path):
    data = _data()
    data["client"]["conventions"] = "1.37.0"
    plan = _plan(data)
    names = {r.name for r in _client_rules(plan) if hasattr(r, "severity")}
    assert names == {"ClientErrorRatioHigh", "ClientTokenUsageShift"}
    assert any("ClientTtftP99High (ttft) is not observable on" in line for line in plan.capabilities)


def test_client_page_silences_the_gateway_and_the_pods_of_its_signal():
    plan = _plan(_data())
    rules = plan.inhibit_rules

    def targets(source: str, severity: str, job: str) -> list[str]:
        return [
            m
            for r in rules
            if f'alertname="{source}"' in r["source_matchers"] and f'severity="{severity}"' in r["source_matchers"]
            and f'job="{job}"' in r["target_matchers"]
            for m in r["target_matchers"]
            if m.startswith("alertname")
        ]

    page_gw = targets("ClientTtftP99High", "critical", "llm-d-epp")
    assert page_gw == ['alertname=~"GatewayTtftP99High|SloFirstTokenErrorBudgetBurnFast|SloFirstTokenErrorBudgetBurnSlow"']
    assert targets("ClientTtftP99High", "critical", "vllm-pool") == ['alertname=~"VllmTtftP99High"']
    assert targets("ClientErrorRatioHigh", "critical", "llm-d-epp") == [
        'alertname=~"GatewaySuccessRatioLow|SloAvailabilityErrorBudgetBurnFast|SloAvailabilityErrorBudgetBurnSlow"'
    ]
    warning = [r for r in rules if 'alertname="ClientTtftP99High"' in r["source_matchers"] and 'severity="warning"' in r["source_matchers"]]
    assert warning and all('severity=~"warning|info"' in r["target_matchers"] for r in warning)
    # the same model (and cluster): labels both sides carry with the same meaning, not the job
    assert all(r["equal"] == ["signal", "model_name"] for r in rules if any("Client" in m for m in r["source_matchers"]) and 'job="chat-frontend"' not in r["target_matchers"])


def test_dashboard_row_and_runbook_come_first():
    plan = _plan(_data())
    titles = [row.title for row in plan.dashboard.rows]
    client, gateway = titles.index("Application (OpenTelemetry GenAI)"), titles.index("Gateway (llm-d EPP 0.10.0)")
    assert client < gateway < titles.index("Latency")
    assert [e.alert for e in plan.runbook[:2]] == ["ClientTtftP99High", "ClientErrorRatioHigh"]
    entry = plan.runbook[0]
    assert entry.first_action.startswith("Now: this is what users' applications measured.")
    assert any("gateway ttft p99" in what for what, _ in entry.confirm)


def test_generated_tests_fire_every_client_alert():
    plan = _plan(_data())
    files = dict(plan.unit_tests)
    fired = {
        (case["alertname"], alert["exp_labels"]["severity"])
        for test in files["client-alerts.test.yaml"]["tests"]
        for case in test["alert_rule_test"]
        for alert in case["exp_alerts"]
    }
    assert fired == {
        ("ClientTtftP99High", "critical"),
        ("ClientTtftP99High", "warning"),
        ("ClientErrorRatioHigh", "critical"),
        ("ClientErrorRatioHigh", "warning"),
    }
    assert "client-healthy.test.yaml" in files and "client-token-shift.test.yaml" in files
    assert not [w for w in plan.warnings if "Client" in w]


def test_client_without_a_gateway_silences_the_pods():
    data = _data()
    del data["gateway"]
    plan = _plan(data)
    rules = [r for r in plan.inhibit_rules if 'alertname="ClientTtftP99High"' in r["source_matchers"]]
    assert {m for r in rules for m in r["target_matchers"] if m.startswith("alertname")} == {
        'alertname=~"SloFirstTokenErrorBudgetBurnFast|SloFirstTokenErrorBudgetBurnSlow|VllmTtftP99High"'
    }
    assert "Gateway" not in " ".join(row.title for row in plan.dashboard.rows)


@pytest.mark.slow  # a real Alertmanager on loopback
def test_alertmanager_pages_once_the_client_silences_the_gateway_and_the_pods(tmp_path: Path):
    from genobs.build import render_spec
    from tests.test_alertmanager import _assert_inhibited, _running

    inhibit = yaml.safe_load(render_spec(SPEC).files["alertmanager/inhibit-rules.yaml"])["inhibit_rules"]
    config = {"route": {"receiver": "null"}, "receivers": [{"name": "null"}], "inhibit_rules": inhibit}

    def alert(name: str, severity: str, signal: str, namespace: str, job: str, **labels: str) -> dict:
        base = {"namespace": namespace, "job": job, "model_name": MODEL, "signal": signal}
        return {"labels": {"alertname": name, "severity": severity, **base, **labels}}

    app = ("chat-app", "chat-frontend")
    client_page = alert("ClientTtftP99High", "critical", "ttft", *app, layer="client")
    client_warning = alert("ClientTtftP99High", "warning", "ttft", *app, layer="client")
    gw_page = alert("GatewayTtftP99High", "critical", "ttft", "llm-prod", "llm-d-epp", layer="gateway")
    gw_warning = alert("GatewayTtftP99High", "warning", "ttft", "llm-prod", "llm-d-epp", layer="gateway")
    burn = alert("SloFirstTokenErrorBudgetBurnFast", "critical", "ttft", "llm-prod", "llm-d-epp", slo="first-token")
    slow = alert("SloFirstTokenErrorBudgetBurnSlow", "warning", "ttft", "llm-prod", "llm-d-epp", slo="first-token")
    pod_warning = alert("VllmTtftP99High", "warning", "ttft", "llm-prod", "vllm-pool")
    other_model = alert("VllmTtftP99High", "warning", "ttft", "llm-prod", "vllm-pool", model_name="other-model")
    kv = alert("VllmKvCacheSaturated", "warning", "kv_cache", "llm-prod", "vllm-pool", instance="10.0.0.11:8000")
    gw_success = alert("GatewaySuccessRatioLow", "critical", "success", "llm-prod", "llm-d-epp", layer="gateway")
    # what fires in tests/scenarios/client_ttft_degradation_pages_once.yaml, and what must not be silenced
    alerts = [client_page, client_warning, gw_page, gw_warning, burn, slow, pod_warning, other_model, kv, gw_success]
    with _running(tmp_path, config) as url:
        # one page: the client's; the gateway's page, warning and burns and the pods' warning of
        # the model are silenced; another model, a cause (KV) and another signal stay active
        _assert_inhibited(url, alerts, [client_warning, gw_page, gw_warning, burn, slow, pod_warning])


def _label_sets(lines) -> set[tuple[str, frozenset[str]]]:
    """(name, label names with a value) of every gen_ai_client_* sample: Prometheus reads a label
    whose value is "" as absent (the SDK writes error_type="" on successes)."""
    import re

    out = set()
    for line in lines:
        m = re.match(r"(gen_ai_client_\w+)\{(.*)\}", line)
        if m:
            labels = {k for k, v in re.findall(r'(\w+)="([^"]*)"', m.group(2)) if v and k not in ("le",)}
            out.add((m.group(1), frozenset(labels - {"job", "namespace", "instance"})))
    return out


@pytest.mark.parametrize("release", ["1.36.0", "1.41.1", "1.44.0"])
def test_scenario_fleet_writes_the_real_client_bodys_names_and_labels(release: str):
    """tests/fleet_series.py writes the application's series as the real OpenTelemetry SDK's
    Prometheus exporter did (tests/fixtures/otel_genai/<release>/client.txt): the same families and
    label sets, successes and failures, so the client scenarios test against them."""
    import sys

    sys.path.insert(0, str(REPO / "tests"))
    from fleet_series import Fleet

    body = (REPO / "tests" / "fixtures" / "otel_genai" / release / "client.txt").read_text().splitlines()
    spec = _data()
    client = {"conventions": release, "traffic": {"errors": 0.1}}
    fleet = Fleet({"replicas": 1, "duration": "2m", "client": client}, spec)
    written = _label_sets(s["series"] for s in fleet.series())
    real = _label_sets(body)
    assert {n for n, _ in written} == {n for n, _ in real}
    assert written <= real, sorted(written - real)


@pytest.mark.parametrize("diet", [False, True])
def test_scrape_config_prints_the_applications_job(tmp_path: Path, diet: bool, promtool: str) -> None:
    """`genobs scrape-config` of a spec with a client block adds the application's job (its
    selector's job and labels, the OpenTelemetry Prometheus exporter's port); with --drop-unread
    it keeps the client families the rules read, which the pods' job no longer lists."""
    import subprocess

    flags = ["--drop-unread"] if diet else []
    result = CliRunner().invoke(main, ["scrape-config", *flags, "--gateway-no-auth", str(SPEC)])
    assert result.exit_code == 0, result.output
    jobs = yaml.safe_load(result.output)["scrape_configs"]
    pods, _, app = jobs
    assert app["job_name"] == "chat-frontend"
    assert app["static_configs"] == [{"targets": ["127.0.0.1:9464"], "labels": {"namespace": "chat-app"}}]
    if diet:
        (keep,) = app["metric_relabel_configs"]
        kept = set(keep["regex"].split("|"))
        read = {n for n in _plan(_data()).raw_metrics if n.startswith("gen_ai_client_")}
        assert read and read <= kept and all(n.startswith("gen_ai_client_") for n in kept)
        assert not any("gen_ai" in r.get("regex", "") for r in pods["metric_relabel_configs"])
    else:
        assert "metric_relabel_configs" not in app
    moved = CliRunner().invoke(main, ["scrape-config", "--client-target", "10.1.0.5:9464", "--gateway-no-auth", str(SPEC)])
    assert yaml.safe_load(moved.output)["scrape_configs"][2]["static_configs"][0]["targets"] == ["10.1.0.5:9464"]
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump({"scrape_configs": jobs}))
    done = subprocess.run([promtool, "check", "config", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_client_target_needs_a_client_block() -> None:
    result = CliRunner().invoke(main, ["scrape-config", "--client-target", "10.1.0.5:9464", str(REPO / "specs" / "chat.yaml")])
    assert result.exit_code == 2 and "--client-target needs SPEC with a client: block" in result.output


def _fake_prometheus(monkeypatch, names: set[str], les: list[str], up: bool = True):
    """doctor_client's queries answered from `names` (live under the client's selector) and the
    `le` values of every duration histogram."""
    from genobs.commands import doctor_client

    monkeypatch.setattr(doctor_client, "live_names", lambda server, matchers: set(names))
    monkeypatch.setattr(doctor_client, "server_up", lambda server, sel: up)
    monkeypatch.setattr(
        doctor_client, "api", lambda server, path, params, post=False: {"result": [{"metric": {"le": le}} for le in les]}
    )
    return doctor_client


RECOMMENDED = ["0.01", "0.02", "0.04", "0.08", "0.16", "0.32", "0.64", "1.28", "2.56", "5.12", "10.24", "20.48", "40.96", "81.92", "+Inf"]
SDK_DEFAULTS = ["0", "5", "10", "25", "50", "75", "100", "250", "500", "750", "1000", "2500", "5000", "7500", "10000", "+Inf"]


def test_doctor_reads_the_client_names_under_the_applications_selector(monkeypatch):
    plan = _plan(_data())
    assert plan.client is not None and plan.client.selector == (("namespace", "chat-app"), ("job", "chat-frontend"))
    needed = plan.client.raw_metrics
    assert needed and all(n.startswith("gen_ai_client_") for n in needed)
    # the pods' check no longer counts the application's names as the pods' missing ones
    pods = plan.raw_metrics - plan.gateway.raw_metrics - plan.client.raw_metrics
    assert not [n for n in pods if n.startswith("gen_ai_")]
    dc = _fake_prometheus(monkeypatch, {"up", *needed}, RECOMMENDED)
    report = dc.diagnose(None, plan.client)
    assert not report.missing and not report.default_buckets
    assert report.release == "OpenTelemetry GenAI client 1.41.0"


def test_doctor_says_when_the_application_keeps_the_sdks_default_buckets(monkeypatch):
    plan = _plan(_data())
    dc = _fake_prometheus(monkeypatch, {"up", *plan.client.raw_metrics}, SDK_DEFAULTS)
    report = dc.diagnose(None, plan.client)
    assert "gen_ai_client_operation_time_to_first_chunk_seconds" in report.default_buckets
    assert any("the SDK's default buckets" in line and "View" in line for line in dc.lines(report))


def test_doctor_without_the_applications_target_says_so(monkeypatch):
    plan = _plan(_data())
    dc = _fake_prometheus(monkeypatch, set(), [], up=False)
    report = dc.diagnose(None, plan.client)
    assert {m.kind for m in report.missing} == {"no_target"}
    assert len(report.missing) == len(plan.client.raw_metrics)
    assert "genobs scrape-config SPEC" in report.hint("no_target")


def test_init_writes_a_client_block_that_builds(tmp_path: Path) -> None:
    target = tmp_path / "app.yaml"
    args = ["init", "--use-case", "chat", "--model", MODEL, "--gateway", "llm-d-epp"]
    args += ["--client-job", "chat-frontend", "--client-namespace", "chat-app", "--client-conventions", "1.41.0"]
    result = CliRunner().invoke(main, [*args, "-o", str(target)])
    assert result.exit_code == 0, result.output
    data = yaml.safe_load(target.read_text())
    assert data["client"]["selector"] == {"namespace": "chat-app", "job": "chat-frontend"}
    assert data["client"]["conventions"] == "1.41.0"
    plan = load_plan(target)[1]
    assert {a.name for a in plan.alerts if ("layer", "client") in a.labels} == {
        "ClientTtftP99High",
        "ClientErrorRatioHigh",
        "ClientTokenUsageShift",
    }
    built = CliRunner().invoke(main, ["build", "-o", str(tmp_path / "out"), str(target)])  # promtool checks included
    assert built.exit_code == 0, built.output


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--client-conventions", "1.41.0"], "--client-conventions needs --client-job"),
        (["--client-namespace", "x"], "--client-namespace needs --client-job"),
        (["--client-job", "a", "--client-conventions", "1.26.0"], "--client-conventions: semantic conventions 1.26.0 are outside"),
        (["--client-job", " "], "must not be empty"),
    ],
)
def test_init_client_options_say_what_is_wrong(flags: list[str], words: str) -> None:
    result = CliRunner().invoke(main, ["init", "--use-case", "chat", "--model", "m1", *flags])
    assert result.exit_code == 2 and words in result.output, result.output


# --- the token-usage shift ---------------------------------------------------------------------


def _shift(plan):
    return next(a for a in plan.alerts if a.name == "ClientTokenUsageShift")


def test_token_usage_shift_compares_the_last_hour_with_the_day_before():
    """Per model and token type, traffic-weighted: the sums of the recorded 5m token and operation
    rates; the baseline (the day ending where the hour starts) in the slower companion group, only
    once the day's first hour was recorded; a warning, with a traffic guard."""
    plan = _plan(_data())
    groups = {g.name: g for g in plan.groups}
    client, slow = groups["genobs-app-otel-client"], groups["genobs-app-otel-client-long"]
    assert slow.interval == "2m" and client.interval == "30s"
    records = {(r.record, dict(r.labels).get("token_type")): r.expr for r in client.rules if hasattr(r, "record")}
    ops = records[("genobs:client_token_operations:rate5m", "input")]
    assert "gen_ai_client_token_usage_count" in ops and 'gen_ai_token_type="input"' in ops
    mean = records[("genobs:client_tokens_per_operation:mean_rate1h", "output")]
    assert mean.startswith("sum_over_time(genobs:client_generation_tokens:rate5m{")
    assert '[1h]) / on (model_name, namespace, job) (sum_over_time(genobs:client_token_operations:rate5m{' in mean
    (baseline,) = {r.expr for r in slow.rules if dict(r.labels).get("token_type") == "input"}
    assert "[1d] offset 1h)" in baseline
    assert baseline.endswith('token_type="input"}[1h] offset 1d)') and "present_over_time(" in baseline
    alert = _shift(plan)
    assert (alert.severity, alert.for_, alert.protects) == ("warning", "15m", "")
    assert ("layer", "client") in alert.labels and ("signal", "token_usage") in alert.labels
    assert " > 2 or " in alert.expr and " < 0.5)" in alert.expr
    assert "and on (model_name, namespace, job, token_type) avg_over_time(" in alert.expr and alert.expr.endswith(">= 0.05")
    # it silences nothing, and nothing of the client's silences it
    assert not [r for r in plan.inhibit_rules if "ClientTokenUsageShift" in " ".join(r["source_matchers"] + r["target_matchers"])]


def test_token_usage_shift_factors_and_for_come_from_the_spec():
    data = _data()
    data["client"]["alerts"]["token_usage"] = {"up": 1.5, "down": None, "for": "30m"}
    alert = _shift(_plan(data))
    assert alert.for_ == "30m" and " > 1.5 " in alert.expr and "<" not in alert.expr.split(" and ")[0]
    data["client"]["alerts"]["token_usage"] = None
    assert not [a for a in _plan(data).alerts if a.name == "ClientTokenUsageShift"]
    data["client"]["alerts"]["token_usage"] = {"up": None, "down": None}
    assert not [a for a in _plan(data).alerts if a.name == "ClientTokenUsageShift"]


def test_token_usage_shift_has_its_panel_runbook_entry_and_firing_case():
    plan = _plan(_data())
    (row,) = [row for row in plan.dashboard.rows if row.title == "Application (OpenTelemetry GenAI)"]
    panel = next(p for p in row.panels if p.title == "Client tokens per operation")
    assert {t.expr.split("{")[0] for t in panel.targets} == {
        "genobs:client_tokens_per_operation:mean_rate1h",
        "genobs:client_tokens_per_operation:mean_rate1d_offset1h",
    }
    entry = next(e for e in plan.runbook if e.alert == "ClientTokenUsageShift")
    assert entry.first_action.startswith("Now: if a release of the application, its prompt template or its retrieval")
    assert [s.threshold_text for s in entry.severities] == ["< 0.5x or > 2x the day before"]
    assert any("pods' input tokens per request" in what and "vllm:request_prompt_tokens_sum" in query for what, query in entry.confirm)
    shift = dict(plan.unit_tests)["client-token-shift.test.yaml"]
    assert shift["group_eval_order"] == ["genobs-app-otel-client", "genobs-app-otel-client-long"]
    fired = {
        alert["exp_labels"]["token_type"]
        for test in shift["tests"]
        for case in test["alert_rule_test"]
        for alert in case["exp_alerts"]
    }
    assert fired == {"input", "output"}


@pytest.mark.parametrize("release", ["1.36.0", "1.41.1", "1.44.0"])
def test_scenario_fleet_replays_the_real_bodys_token_usage(release: str):
    """The token mix of tests/scenarios/client_token_usage_shift_warns.yaml: the operations
    make_bodies.py recorded, replayed without the SDK, add up to the body's token-usage sums."""
    import re
    import sys

    sys.path.insert(0, str(REPO / "tests"))
    from fleet_series import real_operations

    body = (REPO / "tests" / "fixtures" / "otel_genai" / release / "client.txt").read_text()
    found = {
        (kind, suffix): float(value)
        for suffix, kind, value in re.findall(r'gen_ai_client_token_usage_(sum|count)\{[^}]*gen_ai_token_type="(\w+)"[^}]*\} (\S+)', body)
    }
    ops = real_operations()
    assert found[("input", "count")] == found[("output", "count")] == len(ops)
    assert found[("input", "sum")] == sum(i for i, _ in ops) and found[("output", "sum")] == sum(o for _, o in ops)


# --- SLOs read at the client ---------------------------------------------------------------------


def _client_slos(data: dict) -> dict:
    data["slos"] = [
        {"name": "first-token", "sli": "ttft", "threshold": "1.28s", "objective": "99%", "read_at": "client"},
        {"name": "availability", "sli": "success", "objective": "99.5%", "read_at": "client"},
        {"name": "gateway-availability", "sli": "success", "objective": "99.5%"},
        {"name": "token-pace", "sli": "itl", "threshold": "100ms", "objective": "99%"},
    ]
    return data


def test_slos_read_at_the_client_burn_on_the_applications_series():
    plan = _plan(_client_slos(_data()))
    groups = {g.name: g for g in plan.groups}
    assert {"genobs-app-otel-client-slo", "genobs-app-otel-client-slo-long"} <= set(groups)
    events = {
        dict(r.labels)["slo"]: r.expr
        for r in groups["genobs-app-otel-client-slo"].rules
        if getattr(r, "record", "") == "genobs:slo_events:rate5m"
    }
    assert set(events) == {"first-token", "availability"}
    assert "genobs:client_ttft_seconds:bucket_rate5m" in events["first-token"] and 'le=~"1\\\\.280*"' in events["first-token"]
    assert "genobs:client_request_errors:rate5m" in events["availability"]
    # the application's model marker: its operation count (it has no running gauge), labelled layer=client
    (marker,) = [r for r in groups["genobs-app-otel-client-slo"].rules if getattr(r, "record", "") == "genobs:slo_models:info"]
    assert "gen_ai_client_operation_duration_seconds_count" in marker.expr and ("layer", "client") in marker.labels
    burns = [a for a in plan.alerts if dict(a.labels).get("slo") in ("first-token", "availability")]
    assert burns and all(("layer", "client") in a.labels for a in burns)
    at_gateway = [a for a in plan.alerts if dict(a.labels).get("slo") == "gateway-availability"]
    assert at_gateway and not any(dict(a.labels).get("layer") for a in at_gateway)
    assert any("SLO first-token (ttft) is read at the client (OpenTelemetry GenAI client 1.41.0): set by read_at" == line for line in plan.slo_layers)
    assert any(line.startswith("SLO gateway-availability (success) is read at the gateway") for line in plan.slo_layers)
    assert any(line.startswith("SLO token-pace (itl) is read at the pods") for line in plan.slo_layers)
    # dashboard rows and runbook sections as every SLO's
    titles = [row.title for row in plan.dashboard.rows]
    assert any("first-token" in t for t in titles)
    assert {"SloFirstTokenErrorBudgetBurnFast", "SloAvailabilityErrorBudgetBurnSlow"} <= {e["alert"] for e in plan.slo_runbook}


def test_client_burns_silence_the_gateway_and_the_pods_of_their_signal():
    plan = _plan(_client_slos(_data()))

    def targets(source: str, job: str) -> list[str]:
        return [
            m
            for r in plan.inhibit_rules
            if r["source_matchers"][0] == f'alertname=~"{source}"' and f'job="{job}"' in r["target_matchers"]
            for m in r["target_matchers"]
            if m.startswith("alertname")
        ]

    assert targets("SloAvailabilityErrorBudgetBurnFast", "llm-d-epp") == [
        'alertname=~"GatewaySuccessRatioLow|SloGatewayAvailabilityErrorBudgetBurnFast|SloGatewayAvailabilityErrorBudgetBurnSlow"'
    ]
    assert targets("SloAvailabilityErrorBudgetBurnFast", "vllm-pool") == ['alertname=~"VllmSuccessRatioLow"']
    assert targets("SloFirstTokenErrorBudgetBurnFast", "chat-frontend") == ['alertname=~"ClientTtftP99High"']
    slow = [r for r in plan.inhibit_rules if r["source_matchers"][0] == 'alertname=~"SloFirstTokenErrorBudgetBurnSlow"']
    assert slow and all('severity=~"warning|info"' in r["target_matchers"] for r in slow)


def test_generated_tests_fire_the_client_slos_burns():
    plan = _plan(_client_slos(_data()))
    fired = {
        (case["alertname"], alert["exp_labels"]["severity"], alert["exp_labels"].get("layer"))
        for _, doc in plan.unit_tests
        for test in doc["tests"]
        for case in test.get("alert_rule_test", [])
        for alert in case["exp_alerts"]
    }
    for name in ("SloFirstToken", "SloAvailability"):
        assert (f"{name}ErrorBudgetBurnFast", "critical", "client") in fired
        assert (f"{name}ErrorBudgetBurnSlow", "warning", "client") in fired
    assert not [w for w in plan.warnings if "no scenario" in w]


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        (lambda d: d.pop("client"), "slos[0].read_at", "client: the spec has no client: block"),
        (lambda d: d.pop("gateway"), "slos[2].read_at", "gateway: the spec has no gateway: block"),
        (lambda d: d["client"].update(conventions="1.37.0"), "slos[0].read_at", "cannot be read at the client"),
        (lambda d: d["slos"][3].update(read_at="client"), "slos[3].read_at", "only success, ttft, e2e SLOs"),
        (lambda d: d["slos"][0].update(threshold="1s"), "slos[0].threshold", "nearest boundaries: 320ms, 640ms, 1.28s, 2.56s"),
        (lambda d: d["slos"][0].update(read_at="everywhere"), "slos[0].read_at", "client"),
    ],
)
def test_bad_read_at_names_the_field(change, field: str, words: str):
    data = _client_slos(_data())
    data["slos"][2]["read_at"] = "gateway"
    change(data)
    found = _errors(data)
    assert any(f" {field}: " in p and words in p for p in found), found

"""A gateway in front of the engine pods (spec `gateway:`, docs/gateway.md): the names it reads
per release come from the llm-d endpoint picker's catalog rows, one name generation at a time
(never the dual-emitted twin as well), its alerts take over the pods' pages, and Alertmanager
silences the pods' warnings under the gateway's alert of the same model."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from fleet_series import DATA, Fleet, in_range, version
from scenario_runner import build, promtool_expr_tests, rule_groups

from genobs.cli import main
from genobs.compiler import load_plan
from genobs.plan.model import RecordingRule
from genobs.promql import metric_names
from tests.conftest import REPO

SPEC = REPO / "specs" / "gateway-vllm.yaml"
EPP = DATA["llm_d_epp"]  # hand copy of the engines catalog's EPP rows (tests/fleet_metrics.yaml)
VLLM_BODY = REPO / "tests" / "fixtures" / "vllm_0.33.0_metrics.txt"  # the real 0.33.0 body


def _spec(**gateway: str) -> str:
    data = yaml.safe_load(SPEC.read_text())
    data["gateway"].update(gateway)
    return yaml.safe_dump(data, sort_keys=False)


def _read(text: str) -> tuple[set[str], object]:
    """Raw series names the spec's rules and panels read, and the plan."""
    _, plan = load_plan(text=text, file="gateway.yaml")
    recorded = {r.record for g in plan.groups for r in g.rules if isinstance(r, RecordingRule)}
    exprs = [r.expr for g in plan.groups for r in g.rules]
    exprs += [t.expr for row in plan.dashboard.rows for p in row.panels for t in p.targets]
    names: set[str] = set()
    for expr in exprs:
        names |= metric_names(re.sub(r"\$(\w+)", "x", expr))
    return names - recorded - {"up", "ALERTS"}, plan


def _generation_names(gen: str) -> set[str]:
    """Every sample name of one EPP name generation, histograms with their suffixes."""
    g = EPP["generations"][gen]
    out = set()
    for key, name in g.items():
        if key in ("duration", "ttft"):
            out |= {f"{name}_bucket", f"{name}_sum", f"{name}_count"}
        elif isinstance(name, str):
            out.add(name)
    return out


def _vllm_names() -> set[str]:
    names = set()
    for line in VLLM_BODY.read_text().splitlines():
        if line and not line.startswith("#"):
            names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    # the API server's HTTP counter (prometheus-fastapi-instrumentator, not in the engine's registry body)
    return names | {e["name"] for e in DATA["http_requests"]}


EPP_PREFIXES = ("inference_model_", "inference_objective_", "inference_pool_", "llm_d_router_epp_", "llm_d_epp_")


def _gateway_names(names: set[str]) -> set[str]:
    return {n for n in names if n.startswith(EPP_PREFIXES)}


@pytest.mark.parametrize(
    ("release", "generation"),
    [("0.3", "inference_model"), ("0.5", "inference_objective"), ("0.8", "inference_objective"),
     ("0.8.1", "llm_d_router_epp"), ("0.9", "llm_d_epp"), ("0.10", "llm_d_epp")],
)
def test_each_release_reads_exactly_its_own_name_generation(release: str, generation: str):
    """Catalog rows: inference_model_* (GIE <= v1.0), inference_objective_* (GIE v1.1-v1.5,
    llm-d-inference-scheduler <= v0.8), llm_d_router_epp_* (2026-05), llm_d_epp_* (v0.9/v0.10).
    A release that dual-emits (0.8.1 on) is read under its own, newest names only."""
    names, _ = _read(_spec(engine_version=release))
    gateway = _gateway_names(names)
    assert gateway, "the spec reads no gateway series"
    own = _generation_names(generation)
    assert gateway <= own, f"{release} reads {sorted(gateway - own)}, not {generation} names"
    others = set().union(*(_generation_names(g) for g in EPP["generations"] if g != generation)) - own
    assert not gateway & others, f"{release} also reads another generation: {sorted(gateway & others)}"


def test_example_spec_reads_only_names_of_the_catalogs():
    """specs/gateway-vllm.yaml: vLLM names from the real 0.33 body, EPP names from its 0.10 catalog rows."""
    names, _ = _read(SPEC.read_text())
    pods = names - _gateway_names(names)
    assert pods and pods <= _vllm_names(), sorted(pods - _vllm_names())
    gateway = _gateway_names(names)
    release = next(r for r in EPP["releases"] if in_range(r, version("0.10")))
    assert gateway and gateway <= _generation_names(release["emits"][0]), sorted(gateway)


def test_gateway_takes_the_user_facing_pages_and_the_pods_keep_their_warnings():
    _, plan = _read(SPEC.read_text())
    severities: dict[str, set[str]] = {}
    for a in plan.alerts:
        severities.setdefault(a.name, set()).add(a.severity)
    assert severities["GatewayTtftP99High"] == {"critical", "warning"}
    assert severities["VllmTtftP99High"] == {"warning"}  # the page moved to the gateway
    assert severities["GatewaySuccessRatioLow"] == {"critical", "warning"}
    assert "critical" not in severities.get("VllmSuccessRatioLow", set())
    # diagnosis stays on the pods
    assert "VllmKvCacheSaturated" in severities and not any(n.startswith("Gateway") and "Kv" in n for n in severities)
    gw = {a.name: a for a in plan.alerts if a.name.startswith("Gateway")}
    assert all(("layer", "gateway") in a.labels for a in gw.values())
    section = next(e for e in plan.runbook if e.alert == "GatewayTtftP99High")
    shown = " ".join(q for _, q in section.confirm)
    assert "llm_d_epp_request_ttft_seconds_bucket" in shown and "vllm:time_to_first_token_seconds_bucket" in shown
    assert "vllm:kv_cache_usage_perc" in shown  # the walk goes on to the pods' causes


def test_gateway_without_ttft_leaves_the_page_with_the_pods_and_says_so(tmp_path: Path):
    spec = tmp_path / "old.yaml"
    spec.write_text(_spec(engine_version="0.8"))
    result = CliRunner().invoke(main, ["build", "--no-check", "-o", str(tmp_path / "out"), str(spec)])
    assert result.exit_code == 0, result.output
    assert "(ttft) is not observable on llm-d EPP 0.8.0" in result.output
    assert "VllmTtftP99High keeps paging from the pods" in result.output
    explained = CliRunner().invoke(main, ["explain", "--spec", str(spec), "ttft"])
    assert explained.exit_code == 0, explained.output
    assert "(ttft) is not observable on llm-d EPP 0.8.0" in " ".join(explained.output.split())
    _, plan = _read(_spec(engine_version="0.8"))
    assert {a.severity for a in plan.alerts if a.name == "VllmTtftP99High"} == {"critical", "warning"}
    assert not [a for a in plan.alerts if a.name == "GatewayTtftP99High"]


@pytest.mark.parametrize("release", ["0.2", "0.11", "1.5"])
def test_gateway_release_outside_the_profile_is_a_located_error(release: str, tmp_path: Path):
    spec = tmp_path / "gw.yaml"
    spec.write_text(_spec(engine_version=release))
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["build", "--no-check", "-o", str(out), str(spec)])
    assert result.exit_code == 2, result.output
    line = next(i + 1 for i, t in enumerate(spec.read_text().splitlines()) if "engine_version" in t and release in t)
    assert f"{spec}:{line}:" in result.output
    assert f"gateway.engine_version: llm-d EPP {release} is outside the versions genobs knows (0.3.0 to 0.10.0)" in (
        result.output
    )
    assert "Traceback" not in result.output and not out.exists()


def _values(fleet_data: dict, tmp: Path, promtool: str, tests: list[dict]) -> None:
    spec = yaml.safe_load(SPEC.read_text())
    fleet = Fleet(fleet_data, spec)
    files, groups, _, _ = rule_groups(build(spec, tmp))
    proc = promtool_expr_tests(promtool, files, groups, fleet.series(), tests, tmp / "values.test.yaml")
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("emits", [["llm_d_epp", "inference_objective"], ["llm_d_epp"]], ids=["dual", "new-only"])
def test_dual_emission_gives_the_values_of_the_new_names_alone(emits: list[str], tmp_path: Path, promtool: str):
    """4 replicas x 5 req/s pass the gateway: 20 req/s whether or not it also writes the
    deprecated inference_objective_* twins (same values, other names); 5 % errors -> 95 % success."""
    model = 'model_name="meta-llama/Llama-3.1-8B-Instruct"'
    sel = f'{{job="llm-d-epp",namespace="llm-prod",{model}}}'
    tests = [
        {
            "expr": "genobs:gateway_requests:rate5m",
            "eval_time": "20m",
            "exp_samples": [{"labels": f"genobs:gateway_requests:rate5m{sel}", "value": 20}],
        },
        {
            "expr": "genobs:gateway_request_success:ratio_rate5m",
            "eval_time": "20m",
            "exp_samples": [{"labels": f"genobs:gateway_request_success:ratio_rate5m{sel}", "value": 0.95}],
        },
        {   # one series per model and quantile: the TTFT histogram is read once
            "expr": 'count(genobs:gateway_ttft_seconds:quantile_rate5m{quantile="0.99"})',
            "eval_time": "20m",
            "exp_samples": [{"labels": "{}", "value": 1}],
        },
    ]
    fleet = {"replicas": 4, "engines": 2, "duration": "20m", "gateway": {"emits": emits, "traffic": {"errors": 0.05}}}
    _values(fleet, tmp_path, promtool, tests)


@pytest.mark.slow  # a real Alertmanager on loopback
def test_alertmanager_pages_once_the_gateway_silences_the_pods_warnings(tmp_path: Path):
    from genobs.build import render_spec
    from tests.test_alertmanager import _assert_inhibited, _running

    inhibit = yaml.safe_load(render_spec(SPEC).files["alertmanager/inhibit-rules.yaml"])["inhibit_rules"]
    config = {"route": {"receiver": "null"}, "receivers": [{"name": "null"}], "inhibit_rules": inhibit}
    model = "meta-llama/Llama-3.1-8B-Instruct"

    def alert(name: str, severity: str, signal: str, job: str, **labels: str) -> dict:
        base = {"namespace": "llm-prod", "job": job, "model_name": model, "signal": signal}
        return {"labels": {"alertname": name, "severity": severity, **base, **labels}}

    gw_page = alert("GatewayTtftP99High", "critical", "ttft", "llm-d-epp", layer="gateway")
    gw_warning = alert("GatewayTtftP99High", "warning", "ttft", "llm-d-epp", layer="gateway")
    pod_warning = alert("VllmTtftP99High", "warning", "ttft", "vllm-pool")
    other_model = alert("VllmTtftP99High", "warning", "ttft", "vllm-pool", model_name="other-model")
    kv = alert("VllmKvCacheSaturated", "warning", "kv_cache", "vllm-pool", instance="10.0.0.11:8000")
    pod_success = alert("VllmSuccessRatioLow", "warning", "success", "vllm-pool")
    elsewhere = alert("VllmTtftP99High", "warning", "ttft", "someone-else")
    alerts = [gw_page, gw_warning, pod_warning, other_model, kv, pod_success, elsewhere]
    with _running(tmp_path, config) as url:
        # one page: the gateway's; its own warning and the pods' TTFT warning of the model are
        # silenced; another model, a cause (KV), another signal and another job stay active
        _assert_inhibited(url, alerts, [gw_warning, pod_warning])
    # the first-token SLO read at the gateway burns too: its fast burn is the one page left
    fast = alert("SloFirstTokenErrorBudgetBurnFast", "critical", "ttft", "llm-d-epp", slo="first-token")
    slow = alert("SloFirstTokenErrorBudgetBurnSlow", "warning", "ttft", "llm-d-epp", slo="first-token")
    pace = alert("SloTokenPaceErrorBudgetBurnSlow", "warning", "itl", "vllm-pool", slo="token-pace")
    burning = [fast, slow, gw_page, gw_warning, pod_warning, pace, kv]
    (tmp_path / "burn").mkdir()
    with _running(tmp_path / "burn", config) as url:
        _assert_inhibited(url, burning, [slow, gw_page, gw_warning, pod_warning])


def test_slos_over_a_window_other_than_the_rate_window_read_the_gateway_series():
    """rate_window 1m: the SLOs' 5m base window reads the gateway's raw counters and histograms."""
    data = yaml.safe_load(SPEC.read_text())
    data["rate_window"] = "1m"
    _, plan = load_plan(text=yaml.safe_dump(data, sort_keys=False), file="gateway-1m.yaml")
    gateway_slo = [r for g in plan.groups if g.name.endswith("-gateway-slo") for r in g.rules]
    exprs = " ".join(r.expr for r in gateway_slo)
    assert "llm_d_epp_request_ttft_seconds_count" in exprs and "llm_d_epp_request_error_total" in exprs
    assert "vllm:" not in exprs


@pytest.mark.slow  # a real Alertmanager on loopback
def test_two_clusters_the_gateway_silences_its_own_clusters_pods_only(tmp_path: Path):
    """With service.cluster_label both the gateway's and the pods' alerts carry the cluster: the
    gateway page of cluster a silences the pods' warning of cluster a, not cluster b's."""
    from genobs.build import render_spec
    from tests.test_alertmanager import _assert_inhibited, _running

    data = yaml.safe_load(SPEC.read_text())
    data["service"]["cluster_label"] = "cluster"
    spec = tmp_path / "gateway-vllm.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    inhibit = yaml.safe_load(render_spec(spec).files["alertmanager/inhibit-rules.yaml"])["inhibit_rules"]
    assert all("cluster" in rule["equal"] for rule in inhibit)
    config = {"route": {"receiver": "null"}, "receivers": [{"name": "null"}], "inhibit_rules": inhibit}

    def alert(name: str, severity: str, job: str, cluster: str, **labels: str) -> dict:
        base = {"namespace": "llm-prod", "job": job, "model_name": "meta-llama/Llama-3.1-8B-Instruct", "signal": "ttft"}
        return {"labels": {"alertname": name, "severity": severity, "cluster": cluster, **base, **labels}}

    gw_page = alert("GatewayTtftP99High", "critical", "llm-d-epp", "a", layer="gateway")
    pod_a = alert("VllmTtftP99High", "warning", "vllm-pool", "a")
    pod_b = alert("VllmTtftP99High", "warning", "vllm-pool", "b")
    with _running(tmp_path, config) as url:
        _assert_inhibited(url, [gw_page, pod_a, pod_b], [pod_a])

"""Alert names follow the engine (CHANGELOG, issue 21): pod-level alerts carry the engine
profile's prefix (VllmTtftP99High, SglangTtftP99High, TrtllmTtftP99High) everywhere a name
appears - rules, promtool tests, inhibit rules, runbook, dashboard links - and every name the
output refers to is an alert the output defines."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from genobs.build import render_spec
from genobs.catalog import ENGINES, load_catalog
from genobs.cli import main
from genobs.commands.doctor import hint
from genobs.gates.thresholds import load_gates
from genobs.naming import anchor
from tests.conftest import REPO, SPECS

# written here, not read from the profiles: the names users route on (CHANGELOG.md)
PREFIXES = {"vllm": "Vllm", "sglang": "Sglang", "trtllm": "Trtllm"}


def engine_of(spec: Path) -> str:
    return yaml.safe_load(spec.read_text())["service"].get("engine", "vllm")


def rules_of(files: dict[str, bytes]) -> list[dict]:
    out = []
    for name, data in sorted(files.items()):
        if name.startswith("prometheus/") and name.endswith(".rules.yaml"):
            for group in yaml.safe_load(data)["groups"]:
                out += [r for r in group["rules"] if "alert" in r]
    return out


def pod_level(rule: dict) -> bool:
    """Not an SLO's burn (label `slo`), not the gateway's nor the application's own alert (label
    `layer: gateway` or `layer: client`)."""
    labels = rule.get("labels", {})
    return "slo" not in labels and labels.get("layer") not in ("gateway", "client")


def alertnames_in(matchers: list[str]) -> set[str]:
    """Alert names an Alertmanager matcher list refers to: alertname="X" or alertname=~"X|Y"."""
    out: set[str] = set()
    for m in matchers:
        found = re.fullmatch(r'alertname(=~?)"([^"]*)"', m)
        if found:
            out |= set(found.group(2).split("|"))
    return out


@pytest.fixture(scope="module", params=SPECS, ids=[s.stem for s in SPECS])
def built(request) -> tuple[Path, dict[str, bytes]]:
    return request.param, render_spec(request.param).files


def test_the_profiles_declare_the_prefixes() -> None:
    assert {e: load_catalog(e).alert_prefix for e in ENGINES} == PREFIXES


def test_pod_alerts_carry_the_engine_prefix(built) -> None:
    spec, files = built
    engine = engine_of(spec)
    names = {r["alert"] for r in rules_of(files) if pod_level(r)}
    assert names, f"{spec.name}: no pod-level alert"
    wrong = sorted(n for n in names if not n.startswith(PREFIXES[engine]))
    assert not wrong, f"{spec.name} ({engine}): {wrong}"
    if engine != "vllm":  # nowhere in the output: rules, tests, inhibit rules, runbook, dashboard
        leaks = sorted(name for name, data in files.items() if re.search(rb"\bVllm[A-Z]", data))
        assert not leaks, f"{spec.name}: Vllm* names in {leaks}"


def test_the_runbook_has_a_section_for_every_alert(built) -> None:
    spec, files = built
    runbook = files["RUNBOOK.md"].decode()
    headings = {line[3:].strip() for line in runbook.splitlines() if line.startswith("## ")}
    rules = rules_of(files)
    missing = sorted({r["alert"] for r in rules} - headings)
    assert not missing, f"{spec.name}: no runbook section for {missing}"
    for r in rules:  # each alert's link opens its own section
        assert r["annotations"]["runbook_url"].endswith("#" + anchor(r["alert"])), r["alert"]


def test_inhibit_rules_name_only_alerts_that_exist(built) -> None:
    spec, files = built
    names = {r["alert"] for r in rules_of(files)}
    inhibit = yaml.safe_load(files["alertmanager/inhibit-rules.yaml"])["inhibit_rules"]
    referred: set[str] = set()
    for rule in inhibit:
        referred |= alertnames_in(rule["source_matchers"]) | alertnames_in(rule["target_matchers"])
    assert referred, f"{spec.name}: no inhibit rule names an alert"
    assert referred <= names, f"{spec.name}: inhibit rules name {sorted(referred - names)}"


def test_tests_and_dashboard_links_name_alerts_that_exist(built) -> None:
    spec, files = built
    names = {r["alert"] for r in rules_of(files)}
    tested = set()
    for name, data in files.items():
        if name.startswith("prometheus/tests/"):
            for t in yaml.safe_load(data)["tests"]:
                tested |= {a["alertname"] for a in t.get("alert_rule_test", [])}
    assert tested <= names, f"{spec.name}: tests expect {sorted(tested - names)}"
    board = json.loads(next(d for n, d in files.items() if n.startswith("grafana/")))
    texts = json.dumps(board)
    linked = set(re.findall(r"Runbook: (\w+)", texts))
    assert linked <= names, f"{spec.name}: dashboard links to {sorted(linked - names)}"
    # panel texts that name an alert name one of the spec's engine
    said = set(re.findall(r"\((?:Vllm|Sglang|Trtllm)\w+\)", texts))
    assert {s.strip("()") for s in said} <= names, said


def test_a_gateway_in_front_of_sglang_pods_hands_over_sglang_names(tmp_path: Path) -> None:
    """The gateway's alerts keep Gateway*; the pod alerts they take over, inhibit and name in
    capability lines follow service.engine."""
    text = (REPO / "specs" / "gateway-vllm.yaml").read_text()
    text = text.replace("engine: vllm", "engine: sglang").replace('engine_version: "0.33"', 'engine_version: "0.5.23"')
    spec = tmp_path / "gateway-sglang.yaml"
    spec.write_text(text)
    files = render_spec(spec).files
    assert not [n for n, d in files.items() if re.search(rb"\bVllm[A-Z]", d)]
    inhibit = yaml.safe_load(files["alertmanager/inhibit-rules.yaml"])["inhibit_rules"]
    takes_over = [
        r for r in inhibit if alertnames_in(r["source_matchers"]) == {"GatewayTtftP99High"}
        and alertnames_in(r["target_matchers"]) == {"SglangTtftP99High"}
    ]
    assert takes_over, "the gateway's TTFT page silences the SGLang pods' TTFT warning"
    severities = {(r["alert"], r["labels"]["severity"]) for r in rules_of(files)}
    assert ("SglangTtftP99High", "warning") in severities and ("SglangTtftP99High", "critical") not in severities


def test_explain_and_doctor_name_the_engines_alerts() -> None:
    spec = str(REPO / "specs" / "sglang.yaml")
    result = CliRunner().invoke(main, ["explain", "SglangEngineHung", "--spec", spec])
    assert result.exit_code == 0, result.output
    assert result.output.startswith("SglangEngineHung - ")
    wrong = CliRunner().invoke(main, ["explain", "VllmEngineHung", "--spec", spec])
    assert wrong.exit_code == 2 and "SglangEngineHung" in wrong.output
    listing = CliRunner().invoke(main, ["explain", "--spec", spec]).output
    assert "  SglangTtftP99High" in listing and "Vllm" not in listing
    # an alert the spec does not generate, explained in the engine's words
    absent = CliRunner().invoke(main, ["explain", "SglangSuccessRatioLow", "--spec", spec])
    assert absent.exit_code == 0 and "not observable on SGLang 0.5.23" in absent.output
    assert "SglangTargetDown cannot fire" in hint("no_target", [], "colon", "sglang")
    assert "VllmTargetDown cannot fire" in hint("no_target", [], "colon")


def test_gates_name_the_engines_alerts() -> None:
    gates = load_gates(REPO / "specs" / "sglang.yaml")
    assert gates.gate("TtftP99High") is not None
    assert gates.alert_name("TtftP99High") == "SglangTtftP99High"
    assert load_gates(REPO / "specs" / "chat.yaml").alert_name("TtftP99High") == "VllmTtftP99High"


def test_gates_keep_the_gateways_own_alert_names() -> None:
    """A gateway's alerts are named by the gateway, whatever engine the pods run: compare's
    threshold column names GatewayTtftP99High, the alert the rules define."""
    gates = load_gates(REPO / "specs" / "gateway-vllm.yaml")
    rules = (REPO / "out" / "gateway-vllm" / "prometheus" / "gateway.rules.yaml").read_text()
    for key in ("GatewayTtftP99High", "GatewaySuccessRatioLow"):
        assert gates.alert_name(key) == key
        assert f"alert: {key}\n" in rules
    assert gates.alert_name("KvCacheSaturated") == "VllmKvCacheSaturated"

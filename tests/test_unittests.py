"""Generated promtool unit tests: every alert of every spec has a firing case,
the healthy fleet fires nothing, the real `promtool test rules` passes on them,
and a wrong expectation makes it fail. Also checks the Go template helpers
against Prometheus itself."""

from __future__ import annotations

import copy
import math
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from genobs.compiler import build_plan, unit_tests_and_notes
from genobs.loader import load_spec, load_spec_text
from genobs.render.rules import render_rule_files
from genobs.testgen.humanize import expand, go_sprintf, go_value, humanize, humanize_duration, humanize_percentage
from genobs.writer import dump_yaml
from tests.conftest import SPECS

SPEC_IDS = [p.stem for p in SPECS]

# specs that exercise what the examples do not: V0 engine (no engine label), the
# underscore dialect, a job-only selector, extra grouping labels, info severity, custom
# burn rates, a short rate window, several models
VARIANTS = {
    "v0-underscore": """
version: genobs/v1
name: old
use_case: voice
service:
  engine_version: "0.7.3"
  metric_names: underscore
  selector: {job: vllm-old}
features: {speculative_decoding: true, prefix_caching: true}
alerts:
  e2e: {warning: 30s, critical: 50s}
slos:
  - {name: fast-first, sli: ttft, threshold: 500ms, objective: 99.9%}
  - {name: ok, sli: success, objective: 99%, bad_reasons: [abort, length]}
""",
    "bare": """
version: genobs/v1
name: bare
use_case: capacity
service:
  engine_version: "0.10.2"
  selector: {job: vllm-bare}
  min_request_rate: 3
  group_by: [model_name, instance]
features: {speculative_decoding: true}
alerts:
  waiting_requests: {warning: 5, critical: 7, info: 3}
  kv_cache: {warning: 90%, critical: 90.5%}
slos:
  - {name: pace, sli: tpot, threshold: 50ms, objective: 95%}
""",
    "window-2m": """
version: genobs/v1
name: v13
use_case: batch
team: t
rate_window: 2m
service:
  engine_version: "0.13.0"
  selector: {namespace: a, job: b, cluster: c}
  models: [m.x, "y"]
  roles: {label: role, prefill: p, decode: d}
features: {disaggregated_prefill: true}
slos:
  - {name: e2e, sli: e2e, threshold: 120s, objective: 90%}
  - name: q
    sli: queue_time
    threshold: 1s
    objective: 99.5%
    burn_rates:
      - {severity: critical, long: 1h, short: 5m, factor: 10}
      - {severity: info, long: 6h, short: 30m, factor: 2}
""",
}


def _doc(spec: Path | str):
    return load_spec(spec) if isinstance(spec, Path) else load_spec_text(VARIANTS[spec], f"{spec}.yaml")


_CACHE: dict = {}


def generated(spec: Path | str):
    """(plan, unit-test files, notes) of a spec, built once per session."""
    if spec not in _CACHE:
        doc = _doc(spec)
        files, notes = unit_tests_and_notes(doc)
        # a relative runbook.base_url and a cause the spec raised to a page are reported too;
        # they say nothing about what the tests cover
        notes = [n for n in notes if not n.startswith("runbook.base_url") and "pages on a cause" not in n]
        _CACHE[spec] = (build_plan(doc), files, notes)
    return _CACHE[spec]


def write_output(plan, files, root: Path) -> Path:
    prom = root / "prometheus"
    (prom / "tests").mkdir(parents=True)
    for name, data in render_rule_files(plan).items():
        (prom / name).write_bytes(dump_yaml(data, plan.name))
    for name, data in files:
        (prom / "tests" / name).write_bytes(dump_yaml(data, plan.name))
    return prom


def promtool_test(promtool: str, prom: Path, names: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [promtool, "test", "rules", *[f"tests/{n}" for n in names]],
        cwd=prom,
        capture_output=True,
        text=True,
        timeout=300,
    )


def firing(files) -> set[tuple[str, str]]:
    """(alert name, severity) pairs some case expects to fire."""
    out = set()
    for _, doc in files:
        for group in doc["tests"]:
            for t in group.get("alert_rule_test", []):
                out |= {(t["alertname"], a["exp_labels"]["severity"]) for a in t["exp_alerts"]}
    return out


# the example specs' whole test files as users run them: slow (the quick loop's checked build of
# specs/, tests/test_build.py, runs the same groups over the rules each reads); the variants are
# built nowhere else
@pytest.mark.parametrize(
    "spec",
    [*(pytest.param(p, marks=pytest.mark.slow) for p in SPECS), *VARIANTS],
    ids=[*SPEC_IDS, *VARIANTS],
)
def test_promtool_passes_the_generated_tests(spec, tmp_path: Path, promtool: str):
    plan, files, _ = generated(spec)
    prom = write_output(plan, files, tmp_path)
    proc = promtool_test(promtool, prom, [n for n, _ in files])
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-2000:]


def _gateway_groups(plan) -> set[str]:
    return {g.name for g in plan.groups if g.name.removeprefix(f"genobs-{plan.name}-").startswith("gateway")}


def _client_groups(plan) -> set[str]:
    return {g.name for g in plan.groups if g.name == f"genobs-{plan.name}-client"}


def _engine_alerts(plan) -> list:
    """The pods' alerts: a gateway's rule groups (genobs-<spec>-gateway*) and the application's
    (genobs-<spec>-client) have tests of their own."""
    own = [g for g in plan.groups if g.name not in _gateway_groups(plan) | _client_groups(plan)]
    return [r for g in own for r in g.rules if r in plan.alerts]


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_every_alert_and_severity_fires_somewhere(spec: Path):
    """Every alert of the spec, the gateway's included (its tests feed the gateway's own series)."""
    plan, files, notes = generated(spec)
    assert notes == []
    wanted = {(a.name, a.severity) for a in plan.alerts}
    assert wanted
    assert wanted <= firing(files), sorted(wanted - firing(files))


@pytest.mark.parametrize("spec", [*SPECS, *VARIANTS], ids=[*SPEC_IDS, *VARIANTS])
def test_healthy_fleet_checks_every_alert_and_key_recorded_series(spec):
    plan, files, _ = generated(spec)
    healthy = dict(files)["healthy.test.yaml"]["tests"]
    assert len(healthy) == 1
    silent = {t["alertname"] for t in healthy[0]["alert_rule_test"] if t["exp_alerts"] == []}
    # capacity alerts have their own healthy fleet (capacity.test.yaml)
    for group in dict(files).get("capacity.test.yaml", {}).get("tests", [])[:1]:
        silent |= {t["alertname"] for t in group["alert_rule_test"] if t["exp_alerts"] == []}
    assert silent == {a.name for a in _engine_alerts(plan)}
    if _gateway_groups(plan):  # the gateway's healthy fleet: none of its alerts fires
        (gateway,) = dict(files)["gateway-healthy.test.yaml"]["tests"]
        quiet = {t["alertname"] for t in gateway["alert_rule_test"] if t["exp_alerts"] == []}
        in_front = {r.name for g in plan.groups if g.name in _gateway_groups(plan) for r in g.rules if r in plan.alerts}
        assert quiet == in_front
    if _client_groups(plan):  # the application's healthy fleet: none of its alerts fires
        (client,) = dict(files)["client-healthy.test.yaml"]["tests"]
        quiet = {t["alertname"] for t in client["alert_rule_test"] if t["exp_alerts"] == []}
        assert quiet == {r.name for g in plan.groups if g.name in _client_groups(plan) for r in g.rules if r in plan.alerts}
    exprs = " ".join(t["expr"] for t in healthy[0]["promql_expr_test"])
    assert "genobs:ttft_seconds:quantile_rate" in exprs
    # the success ratio where the engine can count failures (SGLang cannot: a capability line instead)
    assert ("genobs:request_success:ratio_rate" in exprs) == (plan.engine != "sglang")
    if any("slo" in r.record for r in plan.recording_rules):
        assert "genobs:slo_burn_rate:" in exprs


@pytest.mark.parametrize("name", VARIANTS)
def test_variants_fire_every_alert_and_severity(name: str):
    plan, files, notes = generated(name)
    # vLLM 0.7 has only the aggregate acceptance gauge: no alpha, no acceptance alert
    expected = ["VllmSpecDecodeAcceptanceLow is not generated"] if name == "v0-underscore" else []
    assert [n.split(":")[0] for n in notes] == expected
    assert {(a.name, a.severity) for a in plan.alerts} <= firing(files)


def test_a_threshold_the_buckets_cannot_reach_is_reported():
    # vLLM 0.7 request-latency buckets end at 60s: a p99 above 120s never shows
    text = "version: genobs/v1\nname: t\nuse_case: batch\nservice: {engine_version: '0.7.3', selector: {job: vllm}}\n"
    files, notes = unit_tests_and_notes(load_spec_text(text, "t.yaml"))
    assert any(n.startswith("VllmE2eLatencyP99High:") for n in notes), notes
    assert ("VllmE2eLatencyP99High", "critical") not in firing(files)


def test_input_series_use_the_versions_names_labels_and_buckets():
    plan, files, _ = generated("v0-underscore")
    series = [s["series"] for _, d in files for g in d["tests"] for s in g["input_series"]]
    assert series and not any(s.startswith("vllm:") for s in series)
    assert not any('engine="' in s for s in series)  # V0 has no data-parallel rank label
    assert any(s.startswith("vllm_gpu_cache_usage_perc{") for s in series)
    ttft = {s.split('le="')[1].split('"')[0] for s in series if s.startswith("vllm_time_to_first_token_seconds_bucket")}
    assert "10.0" in ttft and "+Inf" in ttft and "20.0" not in ttft  # 0.7 buckets end at 10s

    plan, files, _ = generated(next(p for p in SPECS if p.stem == "chat"))
    series = [s["series"] for _, d in files for g in d["tests"] for s in g["input_series"]]
    reasons = {s.split('finished_reason="')[1].split('"')[0] for s in series if "finished_reason=" in s}
    assert reasons == {"stop", "length", "abort", "error", "repetition"}
    assert {m for s in series for m in re.findall(r'[{,](engine="\d+")', s)} == {'engine="0"', 'engine="1"'}
    rss = [s for s in series if s.startswith("process_resident_memory_bytes{")]
    assert rss and all("model_name" not in s and "instance=" in s for s in rss)


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_generated_tests_are_deterministic_and_small(spec: Path):
    _, files, _ = generated(spec)
    again, _ = unit_tests_and_notes(load_spec(spec))
    assert [(n, dump_yaml(d, "x")) for n, d in files] == [(n, dump_yaml(d, "x")) for n, d in again]
    for name, data in files:
        assert name.endswith(".yaml") and "/" not in name
        assert len(dump_yaml(data, "x")) < 300_000, name
        # the baseline test steps hour by hour through a week of recorded TTFT p99
        if name == "capacity-baseline.test.yaml":
            assert data["evaluation_interval"] == "1h"
        else:
            # every 2m (promtool's cost is rules x steps), input sampled every minute, and every
            # firing expectation on a step: promtool reports the alerts of the last step at or
            # before eval_time, so an eval_time between steps would check an older state
            assert data["evaluation_interval"] == "2m"
            for group in data["tests"]:
                assert group["interval"] == "1m"
                for t in group.get("alert_rule_test", []) + group.get("promql_expr_test", []):
                    if t.get("exp_alerts", True):
                        assert int(t["eval_time"].removesuffix("m")) % 2 == 0, (group["name"], t)
        assert all(f.startswith("../") and f.endswith(".rules.yaml") for f in data["rule_files"])


@pytest.mark.parametrize("breakage", ["annotation", "label", "recorded value", "no alert expected"])
def test_a_wrong_expectation_makes_promtool_fail(breakage: str, tmp_path: Path, promtool: str):
    plan, files, _ = generated(next(p for p in SPECS if p.stem == "chat"))
    doc = copy.deepcopy(dict(files)["alerts.test.yaml"])
    # keep only the group with the TTFT case that fires every severity (it also checks the recorded p99)
    doc["tests"] = [g for g in doc["tests"] if "VllmTtftP99High (critical, warning)" in g["name"]]
    group = doc["tests"][0]
    test = next(t for t in group["alert_rule_test"] if t["alertname"] == "VllmTtftP99High" and t["exp_alerts"])
    # unchanged, this group passes (test_promtool_passes_the_generated_tests)
    if breakage == "annotation":
        test["exp_alerts"][0]["exp_annotations"]["description"] += " "
    elif breakage == "label":
        test["exp_alerts"][0]["exp_labels"]["model_name"] = "other"
    elif breakage == "recorded value":
        sample = next(t for t in group["promql_expr_test"] if "ttft" in t["expr"])["exp_samples"][0]
        sample["value"] = math.nextafter(sample["value"], math.inf)
    else:
        test["exp_alerts"] = []
    bad = write_output(plan, [("bad.yaml", doc)], tmp_path / "bad")
    proc = promtool_test(promtool, bad, ["bad.yaml"])
    assert proc.returncode != 0 and "FAILED" in proc.stdout + proc.stderr


def test_the_ttft_case_expects_the_interpolated_p99():
    plan, files, _ = generated(next(p for p in SPECS if p.stem == "chat"))
    groups = dict(files)["alerts.test.yaml"]["tests"]
    exprs = [t for g in groups for t in g.get("promql_expr_test", []) if "ttft_seconds:quantile" in t["expr"]]
    (value,) = [t["exp_samples"][0]["value"] for t in exprs]
    # chat: TTFT p99 critical above 2.5s; 96% of observations in the healthy bucket (0.25, 0.5],
    # 4% in (2.5, 5]: rank 99 of 100 lies 3/4 into (2.5, 5]
    assert value == 2.5 + (5.0 - 2.5) * 0.75
    description = next(
        a["exp_annotations"]["description"]
        for g in groups
        for t in g["alert_rule_test"]
        if t["alertname"] == "VllmTtftP99High"
        for a in t["exp_alerts"]
        if a["exp_labels"]["severity"] == "critical"
    )
    assert "p99 time to first token is 4.375s (threshold 2.5s)" in description


# --- Go template helpers ---------------------------------------------------------------------------

# outputs of Prometheus 2.42 (checked with promtool)
KNOWN = [
    ("{{ $value }}", 1234567.0, "1.234567e+06"),
    ("{{ $value }}", 123456.0, "123456"),
    ("{{ $value }}", 0.00001234, "1.234e-05"),
    ("{{ $value | humanizePercentage }}", 0.15625, "15.62%"),
    ("{{ $value | humanizePercentage }}", 0.0625, "6.25%"),
    ('{{ $value | printf "%.1f" }}', 6.25, "6.2"),
    ('{{ $value | printf "%v|%.2f" }}', 1.0, "1|%!f(MISSING)"),
]


@pytest.mark.parametrize(("template", "value", "text"), KNOWN)
def test_expand_matches_prometheus(template: str, value: float, text: str):
    assert expand(template, {}, value) == text


def test_humanize_functions():
    assert humanize(0) == "0" and humanize(0.5) == "500m" and humanize(1001) == "1.001k"
    assert humanize(2e9) == "2G" and humanize(-0.002) == "-2m" and humanize(math.inf) == "+Inf"
    assert humanize_duration(105) == "1m 45s" and humanize_duration(4.375) == "4.375s"
    assert humanize_duration(0.04975) == "49.75ms" and humanize_duration(0) == "0s"
    assert humanize_duration(90061) == "1d 1h 1m 1s" and humanize_duration(-3.5) == "-3.5s"
    assert humanize_percentage(0.97) == "97%" and humanize_percentage(0.995) == "99.5%"
    assert go_sprintf("%.1f tok/s", 8.0) == "8.0 tok/s" and go_value(0.25) == "0.25"
    assert expand("{{ $labels.a }}|{{ $labels.missing }}|{{$value|humanize}}", {"a": "x"}, 3.0) == "x||3"


def test_humanize_agrees_with_promtool(tmp_path: Path, promtool: str):
    values = [0, 0.5, -1.5, 1, 0.001234, 999.5, 1000, 1234567, 59.99, 60, 3599.9, 172805, 0.15625, 2.5e-7, 7680]
    template = (
        "{{ $value | humanize }} {{ $value | humanizeDuration }} {{ $value | humanizePercentage }} "
        '{{ $value | printf "%.1f" }} {{ $value }} {{ $labels.i }}'
    )
    rules = {"groups": [{"name": "h", "rules": [{"alert": "H", "expr": "h", "annotations": {"d": template}}]}]}
    series = [{"series": f'h{{i="{i}"}}', "values": f"{v!r}+0x2"} for i, v in enumerate(values)]
    expected = [
        {"exp_labels": {"i": str(i)}, "exp_annotations": {"d": expand(template, {"i": str(i)}, float(v))}}
        for i, v in enumerate(values)
    ]
    check = {"eval_time": "1m", "alertname": "H", "exp_alerts": expected}
    test = {"interval": "1m", "input_series": series, "alert_rule_test": [check]}
    (tmp_path / "tests").mkdir()
    (tmp_path / "h.rules.yaml").write_text(yaml.safe_dump(rules))
    doc = {"rule_files": ["../h.rules.yaml"], "evaluation_interval": "1m", "tests": [test]}
    (tmp_path / "tests" / "h.yaml").write_text(yaml.safe_dump(doc))
    proc = promtool_test(promtool, tmp_path, ["h.yaml"])
    assert proc.returncode == 0, proc.stdout[-4000:]


def test_bucket_bounds_are_written_as_the_python_client_writes_them():
    """unittests_fleet.floatToGoString is a copy of prometheus_client's (not imported by the
    build, for speed): the input series' `le` must stay what vLLM's client exports."""
    from prometheus_client.utils import floatToGoString as client

    from genobs.testgen.unittests_fleet import floatToGoString

    values = [0.0, 0.001, 0.005, 0.3, 1, 2.5, 10, 1e-05, 123456.0, 1234567.0, 1e7, 2.5e8, 1.5e300, 7e-300]
    values += [math.inf, -math.inf, math.nan, -1.5, -2e7]
    values += [b * 10.0**e for b in (1, 1.5, 2, 2.5, 5, 7.5) for e in range(-4, 12)]
    for v in values:
        assert floatToGoString(v) == client(v), v


def test_test_generation_grows_linearly_with_the_slos(tmp_path: Path, monkeypatch):
    """The work of generating tests (cases realized, rules matched while following
    dependencies) per SLO stays put from 30 to 90 SLOs; before it grew with their square."""
    from bench import scale_specs
    from genobs.plan import groups
    from genobs.testgen import unittests

    counts = {"realize": 0, "matched": 0}
    realize, matching = unittests._Planner.realize, groups.Recorded.matching

    def counting_realize(self, *args):
        counts["realize"] += 1
        return realize(self, *args)

    def counting_matching(self, name, equal):
        found = matching(self, name, equal)
        counts["matched"] += len(found)
        return found

    monkeypatch.setattr(unittests._Planner, "realize", counting_realize)
    monkeypatch.setattr(groups.Recorded, "matching", counting_matching)
    work = {}
    for n in (30, 90):
        counts.update(realize=0, matched=0)
        plan = build_plan(load_spec(scale_specs.write(tmp_path, f"s{n}", n)))
        packs = [t for _, doc in plan.unit_tests for t in doc["tests"]]
        assert packs and all(len(t.get("alert_rule_tests", [])) <= 2 * unittests.PACK_CASES for t in packs)
        work[n] = dict(counts)
    for what in ("realize", "matched"):
        assert work[90][what] <= 3 * 1.3 * work[30][what], (what, work)

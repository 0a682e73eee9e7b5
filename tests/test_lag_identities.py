"""The identities genobs' rules rely on hold whichever evaluation of a recorded series a rule sees.

A ruler that evaluates against a remote storage (vmalert on VictoriaMetrics, Thanos or Mimir
rulers) hands a rule the previous evaluation of a series recorded earlier in the same group (or
in another group) whenever the write is not yet visible. We model that with the real promtool:
for each lag pattern, every read of a lagged recorded series in every rule gets `offset` one
evaluation interval, the others stay as they are (Prometheus' in-order semantics), and
promtool evaluates the chat spec's rules over a production-shaped fleet (tests/fleet_series,
not genobs) with noisy traffic: healthy for 10 minutes, then a total TTFT and availability
outage (every first token later than 1 s, every request failing).

The patterns split the recorded names by the bits of their index, so every two names a rule
reads are lagged differently in at least one run. In every run and at every minute:
errors <= requests, every burn rate and ratio within its bounds, the unsuccessful-request
rate >= 0; while healthy every burn rate is exactly 0; once the outage fills a window, the
first-token burn is exactly 1 / (1 - 0.99) = 100 and availability's 1 / (1 - 0.995) = 200."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from genobs.build import render_spec
from tests.conftest import REPO
from tests.fleet_series import Fleet
from tests.scenario_runner import promtool_expr_tests, rule_groups

CHAT = REPO / "specs" / "chat.yaml"
INTERVAL_SECONDS = 30  # the chat spec's evaluation interval and the fleet's scrape interval
OUTAGE_FROM = 10  # minutes
DURATION = 50  # minutes: the 30m window lies wholly in the outage at the end
SELECTOR = re.compile(r"(genobs:[A-Za-z0-9_:]+)(\{[^{}]*\})?(\[[^\]]*\])?(?: offset (\d+)([smhdwy]))?")
TOLERANCE = 1e-9
UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


def _fleet(spec: dict) -> list[dict]:
    """4 replicas whose request rate changes every 30 s (so a one-step lag changes every rate),
    TTFT well under 1 s and inter-token gaps under 100 ms; from OUTAGE_FROM on, every first
    token takes 5-20 s and every request finishes with an error."""
    events = []
    for step in range(DURATION * 2 + 1):
        for replica in range(4):
            rate = 2.0 + (step * 7 + replica * 3) % 11 * 0.7
            events.append(
                {"replicas": replica, "from": f"{step * 30}s", "to": f"{step * 30 + 30}s", "set": {"rate": rate}}
            )
    events.append(
        {
            "from": f"{OUTAGE_FROM}m",
            "set": {"ttft": {"min": 5, "p50": 8, "p99": 15, "max": 20}, "finish": {"error": 1.0}},
        }
    )
    fleet = {
        "replicas": 4,
        "duration": f"{DURATION}m",
        "traffic": {"ttft": {"min": 0.05, "p50": 0.2, "p99": 0.5, "max": 0.6}},
        "events": events,
    }
    return Fleet(fleet, spec).series()


def _lagged(expr: str, lagged: set[str]) -> str:
    def sub(m: re.Match) -> str:
        if m.group(1) not in lagged:
            return m.group(0)
        before = int(m.group(4) or 0) * UNIT_SECONDS[m.group(5) or "s"]
        return f"{m.group(1)}{m.group(2) or ''}{m.group(3) or ''} offset {before + INTERVAL_SECONDS}s"

    return SELECTOR.sub(sub, expr)


def _write_rules(out_files: dict[str, bytes], target: Path, lagged: set[str]) -> Path:
    """The build's rule files under `target`, every read of a `lagged` name one interval late."""
    for name, data in out_files.items():
        if not (name.startswith("prometheus/") and name.endswith(".rules.yaml")):
            continue
        doc = yaml.safe_load(data)
        for g in doc["groups"]:
            for r in g["rules"]:
                r["expr"] = _lagged(r["expr"], lagged)
        path = target / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return target / "prometheus"


def _patterns(names: list[str]) -> dict[str, set[str]]:
    out = {"none": set(), "all": set(names)}
    for bit in range(max(1, (len(names) - 1).bit_length())):
        out[f"bit{bit}"] = {n for i, n in enumerate(names) if i >> bit & 1}
    return out


BOUNDS = " or ".join(
    [
        "genobs:slo_burn_rate:rate5m < 0",
        "genobs:slo_burn_rate:rate30m < 0",
        "genobs:slo_burn_rate:rate1h < 0",
        "genobs:slo_burn_rate:rate6h < 0",
        # a burn rate is at most 1 / budget: errors never exceed requests
        'genobs:slo_burn_rate:rate5m{slo=~"first-token|token-pace"} > 100 + 1e-9',
        'genobs:slo_burn_rate:rate1h{slo=~"first-token|token-pace"} > 100 + 1e-9',
        'genobs:slo_burn_rate:rate5m{slo="availability"} > 200 + 1e-9',
        'genobs:slo_burn_rate:rate1h{slo="availability"} > 200 + 1e-9',
        'genobs:slo_events:rate5m{event="errors"} > ignoring (event) genobs:slo_events:rate5m{event="requests"}',
        "genobs:requests_unsuccessful:rate5m < 0",
        "genobs:request_success:ratio_rate5m < 0",
        "genobs:request_success:ratio_rate5m > 1",
        "genobs:request_length_finish:ratio_rate5m > 1",
        "genobs:request_abort_finish:ratio_rate5m > 1",
    ]
)


def _count_close(selector: str, value: float) -> str:
    return f"count(abs({selector} - {value:g}) < {TOLERANCE:g})"


def _tests() -> list[dict]:
    tests = [{"expr": BOUNDS, "eval_time": f"{m}m", "exp_samples": []} for m in range(1, DURATION + 1)]
    burns = ("rate5m", "rate30m", "rate1h", "rate6h")
    healthy = f"{OUTAGE_FROM - 1}m"  # every window still wholly healthy (or partly empty)
    for w in burns:
        # three SLOs, every burn exactly 0
        tests.append(
            {"expr": _count_close(f"genobs:slo_burn_rate:{w}", 0), "eval_time": healthy, "exp_samples": [{"value": 3}]}
        )
    for m in range(OUTAGE_FROM, DURATION + 1):  # token pace stays healthy throughout
        sel = 'genobs:slo_burn_rate:rate5m{slo="token-pace"}'
        tests.append({"expr": _count_close(sel, 0), "eval_time": f"{m}m", "exp_samples": [{"value": 1}]})
    # the 5m window fills with the outage 5m + one evaluation of each hop after it starts
    for m in range(OUTAGE_FROM + 7, DURATION + 1):
        for slo, value in (("first-token", 100), ("availability", 200)):
            sel = f'genobs:slo_burn_rate:rate5m{{slo="{slo}"}}'
            tests.append({"expr": _count_close(sel, value), "eval_time": f"{m}m", "exp_samples": [{"value": 1}]})
    for slo, value in (("first-token", 100), ("availability", 200)):
        sel = f'genobs:slo_burn_rate:rate30m{{slo="{slo}"}}'
        tests.append({"expr": _count_close(sel, value), "eval_time": f"{DURATION}m", "exp_samples": [{"value": 1}]})
    return tests


def _recorded(out) -> list[str]:
    """Every series the built rule files record, sorted."""
    return sorted(
        {
            r["record"]
            for name, data in out.files.items()
            if name.startswith("prometheus/") and name.endswith(".rules.yaml")
            for g in yaml.safe_load(data)["groups"]
            for r in g["rules"]
            if "record" in r
        }
    )


@pytest.fixture(scope="module")
def chat_build():
    out = render_spec(CHAT)
    spec = yaml.safe_load(CHAT.read_text())
    recorded = _recorded(out)
    return out.files, spec, recorded


def _run(tmp_path: Path, promtool: str, files: dict[str, bytes], spec: dict, lagged: set[str]):
    prom = _write_rules(files, tmp_path, lagged)
    rule_files, groups, _, _ = rule_groups(prom)
    return promtool_expr_tests(promtool, rule_files, groups, _fleet(spec), _tests(), tmp_path / "lag_test.json")


@pytest.mark.parametrize("pattern", ["none", "all", "bit0", "bit1", "bit2", "bit3", "bit4", "bit5", "bit6"])
def test_identities_hold_whichever_evaluation_a_rule_sees(chat_build, pattern: str, tmp_path: Path, promtool: str):
    files, spec, recorded = chat_build
    patterns = _patterns(recorded)
    if pattern not in patterns:
        pytest.skip(f"{len(recorded)} recorded names need fewer bits")
    proc = _run(tmp_path, promtool, files, spec, patterns[pattern])
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]


def test_the_patterns_separate_every_two_recorded_names(chat_build):
    _, _, recorded = chat_build
    patterns = _patterns(recorded)
    assert len(recorded) > 20  # the build has its recorded names
    assert len(patterns) <= 9  # the parametrization covers them all
    for i, a in enumerate(recorded):
        for b in recorded[i + 1 :]:
            assert any((a in lagged) != (b in lagged) for lagged in patterns.values()), (a, b)


# The layout genobs had before: errors from the requests rule recorded just before them.
CHAINED = {
    "prometheus/chained.rules.yaml": yaml.safe_dump(
        {
            "groups": [
                {
                    "name": "chained",
                    "interval": "30s",
                    "rules": [
                        {
                            "record": "genobs:ttft_seconds:bucket_rate5m",
                            "expr": "sum by (le) (rate(vllm:time_to_first_token_seconds_bucket[5m]))",
                        },
                        {
                            "record": "genobs:slo_requests:rate5m",
                            "expr": 'sum(genobs:ttft_seconds:bucket_rate5m{le="+Inf"})',
                        },
                        {
                            "record": "genobs:slo_errors:rate5m",
                            "expr": 'genobs:slo_requests:rate5m - sum(genobs:ttft_seconds:bucket_rate5m{le=~"1(\\\\.0+)?"})',
                        },
                        {
                            "record": "genobs:slo_burn_rate:rate5m",
                            "expr": "genobs:slo_errors:rate5m / genobs:slo_requests:rate5m / 0.01",
                        },
                    ],
                }
            ]
        }
    ).encode()
}


@pytest.mark.parametrize(("lagged", "holds"), [((), True), (("genobs:slo_requests:rate5m",), False)])
def test_the_lag_model_catches_rules_chained_on_separately_recorded_series(
    lagged: tuple[str, ...], holds: bool, tmp_path: Path, promtool: str
):
    """The check is not vacuous: errors recorded as the requests rule minus good events break
    once the requests are read one evaluation late (a healthy fleet burns more or less than 0),
    and hold on Prometheus' in-order evaluation."""
    spec = yaml.safe_load(CHAT.read_text())
    prom = _write_rules(CHAINED, tmp_path, set(lagged))
    rule_files, groups, _, _ = rule_groups(prom)
    bad = "genobs:slo_burn_rate:rate5m < -1e-6 or genobs:slo_burn_rate:rate5m > 100 + 1e-6"
    tests = [{"expr": bad, "eval_time": f"{m}m", "exp_samples": []} for m in range(6, DURATION + 1)]
    # while healthy (every first token within 1 s) the burn is exactly 0
    not_zero = "abs(genobs:slo_burn_rate:rate5m) > 1e-6"
    tests += [{"expr": not_zero, "eval_time": f"{m}m", "exp_samples": []} for m in range(6, OUTAGE_FROM)]
    tests.append(
        {"expr": "count(genobs:slo_burn_rate:rate5m) > bool 0", "eval_time": "30m", "exp_samples": [{"value": 1}]}
    )
    proc = promtool_expr_tests(promtool, rule_files, groups, _fleet(spec), tests, tmp_path / "chained_test.json")
    assert (proc.returncode == 0) == holds, (proc.stdout + proc.stderr)[-3000:]


# --- every example spec: the bounds, under every lag pattern ------------------------------------

SPECS = sorted(
    p
    for p in (REPO / "specs").glob("*.yaml")
    if yaml.safe_load(p.read_text())["service"].get("engine", "vllm") == "vllm"
)
GENERIC_MINUTES = 20


def _generic_fleet(spec: dict) -> list[dict]:
    """Noisy traffic on every replica, then (from OUTAGE_FROM) every first token late and every
    request failing; a disaggregated spec gets a prefill and a decode pool."""
    roles = spec["service"].get("roles")
    pools: list[dict] | None = None
    names: list = list(range(4))
    if roles:
        label = roles["label"]
        prefill = {"finish": {"length": 1}, "output_tokens": 1}
        pools = [
            {"name": "prefill", "replicas": 2, "labels": {label: roles["prefill"]}, "traffic": prefill},
            {"name": "decode", "replicas": 2, "labels": {label: roles["decode"]}, "traffic": {}},
        ]
        names = [f"{p['name']}-{i}" for p in pools for i in range(p["replicas"])]
    events = []
    for step in range(GENERIC_MINUTES * 2 + 1):
        for i, which in enumerate(names):
            rate = 2.0 + (step * 7 + i * 3) % 11 * 0.7
            events.append(
                {"replicas": which, "from": f"{step * 30}s", "to": f"{step * 30 + 30}s", "set": {"rate": rate}}
            )
    fleet: dict = {"duration": f"{GENERIC_MINUTES}m"}
    if pools:
        fleet["pools"] = pools
    else:
        fleet["replicas"] = 4
    slow = {"ttft": {"min": 5, "p50": 8, "p99": 15, "max": 20}}
    # every request fails with the failing reason the release has (error since 0.13, abort before)
    for reason in ("error", "abort"):
        outage = {"from": f"{OUTAGE_FROM}m", "set": {**slow, "finish": {reason: 1.0}}}
        try:
            return Fleet({**fleet, "events": [*events, outage]}, spec).series()
        except ValueError as exc:
            if "do not exist" not in str(exc):
                raise
    raise AssertionError("no failing finish reason")


def _generic_tests(spec: dict) -> list[dict]:
    bounds = [
        '{__name__=~"genobs:slo_burn_rate:.+"} < 0',
        '{__name__=~"genobs:slo_events:rate[^_]+",event="errors"} > ignoring (event) '
        '{__name__=~"genobs:slo_events:rate[^_]+",event="requests"}',
        '{__name__=~"genobs:requests_unsuccessful:rate.+"} < 0',
        '{__name__=~"genobs:request_success:ratio_rate.+"} < 0',
        '{__name__=~"genobs:request_success:ratio_rate.+"} > 1',
        '{__name__=~"genobs:request_(length|abort)_finish:ratio_rate.+"} > 1',
    ]
    for slo in spec.get("slos") or []:
        objective = float(str(slo["objective"]).rstrip("%")) / 100
        bounds.append(
            f'{{__name__=~"genobs:slo_burn_rate:.+",slo="{slo["name"]}"}} > {1 / (1 - objective):.12g} + 1e-9'
        )
    every_minute = range(1, GENERIC_MINUTES + 1)
    tests = [{"expr": " or ".join(bounds), "eval_time": f"{m}m", "exp_samples": []} for m in every_minute]
    # not vacuous: the series the bounds read exist
    end = f"{GENERIC_MINUTES}m"
    exists = ['{__name__=~"genobs:requests_unsuccessful:rate.+"}']
    if spec.get("slos"):
        exists.append('{__name__=~"genobs:slo_events:rate[^_]+",event="errors"}')
    tests += [{"expr": f"count({sel}) > bool 0", "eval_time": end, "exp_samples": [{"value": 1}]} for sel in exists]
    return tests


@pytest.mark.slow  # 8 promtool runs per example spec
@pytest.mark.parametrize("spec_path", SPECS, ids=[p.stem for p in SPECS])
def test_bounds_hold_on_every_example_spec_whichever_evaluation_a_rule_sees(
    spec_path: Path, tmp_path: Path, promtool: str
):
    out = render_spec(spec_path)
    spec = yaml.safe_load(spec_path.read_text())
    recorded = _recorded(out)
    series, tests = _generic_fleet(spec), _generic_tests(spec)
    failures = []
    # the bit patterns separate every two names; no lag at all is Prometheus, which the scenarios test
    for name, lagged in _patterns(recorded).items():
        if name == "none":
            continue
        prom = _write_rules(out.files, tmp_path / name, lagged)
        rule_files, groups, _, _ = rule_groups(prom)
        proc = promtool_expr_tests(promtool, rule_files, groups, series, tests, tmp_path / name / "lag_test.json")
        if proc.returncode != 0:
            failures.append(f"{name}: {(proc.stdout + proc.stderr)[-3000:]}")
    assert not failures, "\n".join(failures)

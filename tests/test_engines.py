"""Engine profiles (genobs/data/<engine>.yaml): every name an example spec of an engine reads
exists in that engine's real /metrics body, the plan and renderers hold no engine's wire name,
and what an engine cannot observe is a printed line or a located error, never a silent drop."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from genobs.catalog import ENGINES, load_catalog
from genobs.cli import main
from genobs.compiler import load_plan
from genobs.plan.model import RecordingRule
from genobs.promql import metric_names
from tests.conftest import REPO

BODIES = REPO / "tests" / "fixtures" / "engines"
# example spec -> the real bodies of its engine
ENGINE_SPECS = {
    "sglang": ("sglang_0.5.23_exposition.txt", "sglang_0.5.23_pd_prefill_exposition.txt", "sglang_0.5.23_pd_decode_exposition.txt"),
    "trtllm": ("trtllm_exposition.txt",),
}
# every example spec of an engine other than vLLM -> the real bodies its names must be in
SPEC_BODIES = {
    **ENGINE_SPECS,
    "sglang-pd": ("sglang_0.5.23_pd_prefill_exposition.txt", "sglang_0.5.23_pd_decode_exposition.txt"),
}
WIRE_PREFIXES = ("vllm:", "sglang:", "trtllm_", "dynamo_", "llm_d_")


def body_names(*files: str) -> set[str]:
    """Sample names of real /metrics bodies (text format: `name{labels} value` or `name value`)."""
    names: set[str] = set()
    for file in files:
        for line in (BODIES / file).read_text().splitlines():
            if line and not line.startswith("#"):
                names.add(re.split(r"[{ ]", line, maxsplit=1)[0])
    return names


def read_names(spec: Path) -> set[str]:
    """Every raw series name the spec's rules and dashboard panels read."""
    _, plan = load_plan(spec)
    recorded = {r.record for g in plan.groups for r in g.rules if isinstance(r, RecordingRule)}
    exprs = [r.expr for g in plan.groups for r in g.rules]
    exprs += [t.expr for row in plan.dashboard.rows for p in row.panels for t in p.targets]
    names: set[str] = set()
    for expr in exprs:
        names |= metric_names(re.sub(r"\$(\w+)", "x", expr))
    return names - recorded - {"up", "ALERTS"}


@pytest.mark.parametrize("name", sorted(SPEC_BODIES))
def test_example_spec_reads_only_names_of_the_real_body(name: str):
    spec = REPO / "specs" / f"{name}.yaml"
    read = read_names(spec)
    assert read, "the spec reads no engine series at all"
    missing = read - body_names(*SPEC_BODIES[name])
    assert not missing, f"{spec.name} reads series the real bodies {SPEC_BODIES[name]} do not have: {sorted(missing)}"


def test_sglang_pd_spec_reads_each_series_on_a_server_that_writes_it():
    """A series read under engine_type="prefill" is in the real prefill body, one read under
    "decode" in the decode body: the prefill server writes no TTFT, so no prefill-pool TTFT view
    reads one (it would record nothing)."""
    _, plan = load_plan(REPO / "specs" / "sglang-pd.yaml")
    exprs = [r.expr for g in plan.groups for r in g.rules]
    exprs += [t.expr for row in plan.dashboard.rows for p in row.panels for t in p.targets]
    exprs += [query for entry in plan.runbook for _, query in entry.confirm]
    bodies = {role: body_names(f"sglang_0.5.23_pd_{role}_exposition.txt") for role in ("prefill", "decode")}
    read = {
        (m.group(2), m.group(1))
        for expr in exprs
        for m in re.finditer(r'(sglang:\w+)\{[^}]*engine_type="(prefill|decode)"', expr)
    }
    assert {role for role, _ in read} == {"prefill", "decode"}, read
    missing = sorted((role, name) for role, name in read if name not in bodies[role])
    assert not missing, missing
    assert ("prefill", "sglang:time_to_first_token_seconds_bucket") not in read


def test_sglang_pd_spec_reads_kv_transfer_on_the_prefill_servers():
    """The SGLang P/D example alerts on the KV transfer, from the prefill body's series only."""
    _, plan = load_plan(REPO / "specs" / "sglang-pd.yaml")
    alerts = {r.name for g in plan.groups for r in g.rules if not isinstance(r, RecordingRule)}
    assert {"SglangKvTransferTimeP99High", "SglangKvTransfersFailing"} <= alerts
    prefill = body_names("sglang_0.5.23_pd_prefill_exposition.txt")
    decode = body_names("sglang_0.5.23_pd_decode_exposition.txt")
    kv = {n for n in read_names(REPO / "specs" / "sglang-pd.yaml") if "transfer" in n}
    assert kv == {
        "sglang:kv_transfer_latency_ms_bucket",
        "sglang:kv_transfer_latency_ms_sum",
        "sglang:kv_transfer_latency_ms_count",
        "sglang:num_transfer_failed_reqs_total",
        "sglang:kv_transfer_total_mb_sum",
    }
    assert kv <= prefill and "sglang:kv_transfer_latency_ms_bucket" not in decode
    assert "sglang:kv_transfer_total_mb_sum" not in decode
    exprs = [r.expr for g in plan.groups for r in g.rules]
    assert all('engine_type="prefill"' in e for e in exprs for n in kv if f"{n}{{" in e)


def test_plan_and_renderers_hold_no_wire_name():
    """Only profiles know wire names: the plan asks for signals."""
    found = []
    for folder in ("genobs/plan", "genobs/render"):
        for path in sorted((REPO / folder).rglob("*.py")):
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if any(prefix in line for prefix in WIRE_PREFIXES):
                    found.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert not found, "engine wire names in the plan or a renderer:\n" + "\n".join(found)


def test_one_profile_per_engine():
    for engine in ENGINES:
        catalog = load_catalog(engine)
        assert catalog.engine == engine
        assert catalog.min_version <= catalog.max_version


@pytest.mark.parametrize("engine", sorted(ENGINE_SPECS))
def test_profile_names_exist_in_the_real_bodies(engine: str):
    """Every wire name the profile gives for its newest release is in the engine's real body."""
    catalog = load_catalog(engine)
    names = catalog.names_for(catalog.max_version)
    assert not names - body_names(*ENGINE_SPECS[engine])


def _spec(engine_lines: str, extra: str = "") -> str:
    return (
        "version: genobs/v1\nname: probe\nservice:\n"
        f"{engine_lines}"
        "  selector: {job: llm}\n  models: [m]\nuse_case: chat\n" + extra
    )


def _build(tmp_path: Path, text: str):
    spec = tmp_path / "probe.yaml"
    spec.write_text(text)
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["build", "--no-check", "-o", str(out), str(spec)])
    return result, out


def test_sglang_build_prints_what_it_cannot_observe(tmp_path: Path):
    result, out = _build(tmp_path, _spec('  engine: sglang\n  engine_version: "0.5.23"\n'))
    assert result.exit_code == 0, result.output
    notes = [line for line in result.output.splitlines() if ": note: " in line]
    assert any("Length finishes (length_finish) is not observable on SGLang 0.5.23" in n for n in notes)
    assert any("Success rate (success) is not observable on SGLang 0.5.23" in n for n in notes)
    assert any("Preemptions (preemptions) is an approximation on SGLang 0.5.23" in n for n in notes)
    rules = (out / "probe" / "prometheus" / "alerts.rules.yaml").read_text()
    assert "SglangTtftP99High" in rules  # the engine's own alert names (below: the ones it cannot back)
    assert "SglangLengthFinishRatioHigh" not in rules and "SglangSuccessRatioLow" not in rules
    assert "Approximation on SGLang 0.5.23: SGLang counts retractions" in rules
    runbook = (out / "probe" / "RUNBOOK.md").read_text()
    assert "## What SGLang 0.5.23 can observe" in runbook
    assert "is not observable on SGLang 0.5.23" in runbook
    dashboard = (out / "probe" / "grafana" / "genobs-probe.json").read_text()
    assert "(not observable on SGLang 0.5.23)" in dashboard


@pytest.mark.parametrize(
    ("engine_lines", "extra", "expected"),
    [
        (
            '  engine: sglang\n  engine_version: "0.4.9"\n',
            "",
            "probe.yaml:5:19: error: service.engine_version: SGLang 0.4.9 is outside the versions genobs knows "
            "(0.4.10 to 0.5.23)",
        ),
        (
            "  engine: sglang\n",
            "alerts:\n  length_finish: {warning: 5%}\n",
            "error: alerts.length_finish: length_finish is not observable on SGLang 0.5.23",
        ),
        (
            "  engine: sglang\n",
            "slos:\n  - {name: availability, sli: success, objective: 99%}\n",
            "error: slos[0].sli: the success SLI is not observable on SGLang 0.5.23",
        ),
        (
            '  engine: trtllm\n  engine_version: "1.2.1"\n',
            "slos:\n  - {name: pace, sli: itl, threshold: 100ms, objective: 99%}\n",
            "error: slos[0].sli: the itl SLI is not observable on TensorRT-LLM 1.2.1: TensorRT-LLM has no "
            "inter-token histogram",
        ),
        (
            "  engine: trtllm\n",
            "alerts:\n  preemptions: {warning: 5%}\n",
            "error: alerts.preemptions: preemptions is not observable on TensorRT-LLM 1.2.1",
        ),
    ],
    ids=[
        "version-out-of-range",
        "alert-on-missing-signal",
        "slo-on-missing-signal",
        "trtllm-itl-slo",
        "trtllm-preemption-alert",
    ],
)
def test_engine_cannot_back_it_is_a_located_error(tmp_path: Path, engine_lines: str, extra: str, expected: str):
    result, out = _build(tmp_path, _spec(engine_lines, extra))
    assert result.exit_code == 2, result.output
    assert expected in result.output
    assert "Traceback" not in result.output
    assert not out.exists(), "nothing may be written"


def test_disabling_an_unobservable_alert_is_fine(tmp_path: Path):
    result, _ = _build(tmp_path, _spec("  engine: sglang\n", "alerts:\n  length_finish: {enabled: false}\n"))
    assert result.exit_code == 0, result.output


def body_label_sets(*files: str) -> dict[str, set[frozenset[str]]]:
    """Sample name -> the label-name sets it carries in real bodies (without `le`)."""
    out: dict[str, set[frozenset[str]]] = {}
    for file in files:
        for line in (BODIES / file).read_text().splitlines():
            if line and not line.startswith("#"):
                name, _, rest = line.partition("{")
                keys = frozenset(k for k in re.findall(r'(\w+)="', rest.split("}")[0]) if k != "le") if rest else frozenset()
                out.setdefault(name.split(" ")[0], set()).add(keys)
    return out


@pytest.mark.parametrize(
    ("engine", "version", "core"),
    [
        ("sglang", "0.5.23", {"sglang:num_running_reqs", "sglang:num_requests_total", "sglang:time_to_first_token_seconds_bucket"}),
        ("trtllm", "1.2.1", {"trtllm_num_requests_running", "trtllm_request_success_total", "trtllm_time_to_first_token_seconds_bucket"}),
    ],
)
def test_scenario_fleet_exports_what_the_real_body_has(engine: str, version: str, core: set[str]):
    """The scenario fleet (tests/fleet_series.py) writes the engine's series by the real body's
    names and label sets (plus the scrape's target labels), so the scenarios test against it."""
    from fleet_series import Fleet

    spec = {"service": {"engine": engine, "engine_version": version, "selector": {"job": engine}, "models": ["m"]}}
    fleet = Fleet({"replicas": 1, "duration": "2m", "traffic": {"spec_decode": {"accept": [0.8, 0.6]}}}, spec)
    real = body_label_sets(*ENGINE_SPECS[engine])
    target = {"job", "namespace", "instance", "pod"}
    seen = set()
    for s in fleet.series():
        name, _, rest = s["series"].partition("{")
        if name == "up":
            continue
        keys = frozenset(k for k in re.findall(r'(\w+)="', rest) if k != "le") - target
        assert name in real, f"{name} is not in the real {engine} bodies"
        assert keys in real[name], f"{name} with labels {sorted(keys)}; the real body has {sorted(map(sorted, real[name]))}"
        seen.add(name)
    assert core <= seen


def test_trtllm_build_reads_cancelled_as_aborts_and_5xx_as_failures(tmp_path: Path):
    result, out = _build(tmp_path, _spec('  engine: trtllm\n  engine_version: "1.2.1"\n'))
    assert result.exit_code == 0, result.output
    assert "Inter-token latency (itl) is not observable on TensorRT-LLM 1.2.1" in result.output
    rules = (out / "probe" / "prometheus" / "recording.rules.yaml").read_text()
    assert 'finished_reason="cancelled"' in rules
    assert 'trtllm_request_error_total{job="llm",model_name=~"m",http_code=~"5.."}' in rules
    alerts = (out / "probe" / "prometheus" / "alerts.rules.yaml").read_text()
    assert "TrtllmSuccessRatioLow" in alerts and "TrtllmItlP99High" not in alerts
    assert "TrtllmPreemptionsSustained" not in alerts


@pytest.mark.parametrize("engine", sorted(ENGINE_SPECS))
def test_compare_queries_read_only_names_of_the_real_body(engine: str):
    """`genobs compare` builds its KPI table from the spec's engine profile, not vLLM's."""
    from genobs.catalog import parse_version
    from genobs.gates.promtable import Env, build_queries
    from genobs.gates.sides import Side
    from genobs.loader import load_spec

    spec = load_spec(REPO / "specs" / f"{engine}.yaml").spec
    env = Env(
        catalog=load_catalog(engine),
        version=parse_version(spec.service.engine_version),
        dialect=spec.service.metric_names,
        selector=tuple(spec.service.selector.items()),
        models=tuple(spec.service.models),
        features=frozenset(k for k, on in spec.features.model_dump().items() if on),
    )
    queries = build_queries(env, Side("baseline", "", (), 0.0, 300.0))
    names = set().union(*(metric_names(query.expr) for query in queries))
    assert names and not names - body_names(*ENGINE_SPECS[engine])
    if engine == "sglang":
        assert any('mode=~".*_hit"' in query.expr for query in queries if query.key == "prefix_hit")


@pytest.mark.parametrize("engine", ENGINES)
def test_capability_entries_name_real_signals(engine: str):
    """A profile's not_observable and approximate entries are signals genobs alerts on (a typo
    would silently keep an alert the engine cannot back), and each says why."""
    from genobs.plan.alerts import signal_data

    signals = set(signal_data()["signals"])
    catalog = load_catalog(engine)
    every = (*catalog._notes[0], *catalog._notes[1])  # (signal, why, since, until) of every release
    for signal, why, _, _ in every:
        assert signal in signals, f"{engine}: {signal} is not a signal of genobs/data/signals.yaml"
        assert len(why) > 20, f"{engine}: say why {signal} is missing or approximate"
    bounds = {since for _, _, since, _ in every if since} | {until for _, _, _, until in every if until}
    for v in (catalog.min_version, catalog.max_version, *bounds):
        at = catalog.at(v)  # one entry per signal at every release
        assert not {s for s, _ in at.not_observable} & {s for s, _ in at.approximate}


def test_sglang_pd_fleet_exports_what_the_real_pd_bodies_have():
    """The prefill and decode servers of a scenario P/D pair carry the names and label sets of
    SGLang's real prefill and decode bodies (engine_type prefill | decode, no dp_rank)."""
    from fleet_series import Fleet

    spec = {"service": {"engine": "sglang", "engine_version": "0.5.23", "selector": {"job": "pd"}, "models": ["m"]}}
    pools = [
        {"name": "prefill", "replicas": 1, "labels": {"engine_type": "prefill"}},
        {"name": "decode", "replicas": 1, "labels": {"engine_type": "decode"}},
    ]
    traffic = {"nixl": {"transfers": 5, "failed": 0.5, "latency_ms": {"p50": 8, "p99": 40}}}
    fleet = Fleet({"engines": 1, "duration": "2m", "pools": pools, "traffic": traffic}, spec)
    real = {
        "prefill": body_label_sets("sglang_0.5.23_pd_prefill_exposition.txt"),
        "decode": body_label_sets("sglang_0.5.23_pd_decode_exposition.txt"),
    }
    seen: set[tuple[str, str]] = set()
    les: set[str] = set()
    for s in fleet.series():
        name, _, rest = s["series"].partition("{")
        if name == "up" or name == "sglang:http_responses_total":  # HTTP series: not in the P/D bodies
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', rest))
        role = labels["engine_type"]
        keys = frozenset(labels) - {"le", "job", "namespace", "instance", "pod"}
        assert name in real[role], f"{name} is not in the real SGLang {role} body"
        assert keys in real[role][name], f"{role} {name}: {sorted(keys)} vs {sorted(map(sorted, real[role][name]))}"
        seen.add((role, name))
        if name == "sglang:kv_transfer_latency_ms_bucket":  # milliseconds, as the real body writes them
            les.add(labels["le"])
    assert ("prefill", "sglang:kv_transfer_latency_ms_bucket") in seen
    assert {("prefill", "sglang:num_transfer_failed_reqs_total"), ("decode", "sglang:num_transfer_failed_reqs_total")} <= seen
    real_les = set(re.findall(r'kv_transfer_latency_ms_bucket\{[^}]*le="([^"]+)"', (BODIES / "sglang_0.5.23_pd_prefill_exposition.txt").read_text()))
    assert les == real_les


class _Clock:
    """Simulated seconds for a Simulator (its traffic is a function of elapsed time)."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _scrape(sim) -> dict[str, dict[tuple, float]]:
    """Sample name -> (sorted label pairs -> value) of what the simulator serves."""
    from prometheus_client.parser import text_string_to_metric_families

    simulated: dict[str, dict[tuple, float]] = {}
    for fam in text_string_to_metric_families(sim.render().decode()):
        for s in fam.samples:
            simulated.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return simulated


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_simulated_sglang_pd_server_exports_what_the_real_pd_body_has(role: str):
    """`genobs simulate --engine sglang --role <role>` writes, of the profile's families, exactly
    those the real SGLang 0.5.23 server of that role writes, each with the real body's label names
    (engine_type=<role>, scheduler ranks, is_streaming) and, for the KV-transfer latency, its
    millisecond bucket bounds."""
    from genobs.sim import Simulator

    body = f"sglang_0.5.23_pd_{role}_exposition.txt"
    real = body_label_sets(body)
    clock = _Clock()
    sim = Simulator("0.5.23", {"m": "nixl_slowdown"}, engine="sglang", role=role, fault_after=10, clock=clock)
    clock.t = 40.0  # healthy traffic, then the KV-transfer fault
    simulated = _scrape(sim)
    for name, series in simulated.items():
        assert name in real, f"{name} is not in the real SGLang {role} body"
        for labels in series:
            keys = frozenset(k for k, _ in labels if k != "le")
            assert keys in real[name], f"{role} {name}: {sorted(keys)} vs {sorted(map(sorted, real[name]))}"
            assert dict(labels)["engine_type"] == role
    # every family of the profile this release has: simulated where the real server writes it
    catalog = load_catalog("sglang")
    profile = {n for n in catalog.names_for(catalog.max_version)}
    real_families = {n for n in profile if any(k.startswith(n) for k in real)}
    sim_families = {n for n in profile if any(k.startswith(n) for k in simulated)}
    assert sim_families == real_families, (sorted(sim_families - real_families), sorted(real_families - sim_families))
    text = (BODIES / body).read_text()
    for name, series in simulated.items():  # every histogram's bounds, as the real server writes them
        if name.endswith("_bucket"):
            les = {dict(labels)["le"] for labels in series}
            assert les == set(re.findall(rf'^{re.escape(name)}\{{[^}}]*le="([^"]+)"', text, re.M)), name
    kv = "sglang:kv_transfer_latency_ms_bucket"
    if role == "decode":  # the decode server observes no transfer latency (bootstrap and allocation only)
        assert kv not in simulated and "sglang:time_to_first_token_seconds_bucket" in simulated
        return
    assert "sglang:time_to_first_token_seconds_bucket" not in simulated  # the prefill server's tokenizer has none
    assert {dict(labels)["le"] for labels in simulated[kv]} >= {"1.0", "1000.0", "5000.0"}  # milliseconds
    # the fault: transfers of 1-3 s land above 1000 ms, and failures are counted
    by_le = {dict(labels)["le"]: v for labels, v in simulated[kv].items()}
    assert by_le["+Inf"] - by_le["1000.0"] > 0 and by_le["1000.0"] > 0
    assert next(iter(simulated["sglang:num_transfer_failed_reqs_total"].values())) > 0


def _modes(series: dict[tuple, float]) -> set[str]:
    return {dict(labels)["mode"] for labels in series}


def test_simulated_sglang_rank_hang_stops_one_scheduler_while_the_tokenizer_counts_on():
    """`rank_hang` on a 2-scheduler SGLang server: dp_rank 1 holds its requests and its own
    sglang:realtime_tokens_total stops, dp_rank 0 keeps processing, so the tokenizer's counters (one
    series per server) keep growing: only the per-scheduler tokens show the hang. Each server writes
    the realtime-token modes the real server of its role writes."""
    from genobs.sim import Simulator

    clock = _Clock()
    sim = Simulator("0.5.23", {"m": "rank_hang"}, engine="sglang", fault_after=10, clock=clock)
    clock.t = 30.0
    a = _scrape(sim)
    clock.t = 90.0
    b = _scrape(sim)

    def per_rank(snap: dict, name: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for labels, v in snap[name].items():
            rank = dict(labels)["dp_rank"]
            out[rank] = out.get(rank, 0.0) + v
        return out

    tokens_a, tokens_b = per_rank(a, "sglang:realtime_tokens_total"), per_rank(b, "sglang:realtime_tokens_total")
    assert tokens_b["1"] == tokens_a["1"] > 0  # served until the fault, then nothing
    assert tokens_b["0"] > tokens_a["0"]
    assert per_rank(b, "sglang:num_running_reqs")["1"] > 0
    for name in ("sglang:generation_tokens_total", "sglang:num_requests_total"):
        assert sum(b[name].values()) > sum(a[name].values()), name
    text = (BODIES / "sglang_0.5.23_exposition.txt").read_text()
    assert _modes(b["sglang:realtime_tokens_total"]) == set(re.findall(r'^sglang:realtime_tokens_total\{[^}]*mode="(\w+)"', text, re.M))
    for role in ("prefill", "decode"):
        served = _scrape(Simulator("0.5.23", {"m": "healthy"}, engine="sglang", role=role, clock=clock))
        real = (BODIES / f"sglang_0.5.23_pd_{role}_exposition.txt").read_text()
        assert _modes(served["sglang:realtime_tokens_total"]) == set(
            re.findall(r'^sglang:realtime_tokens_total\{[^}]*mode="(\w+)"', real, re.M)
        ), role


def test_simulated_sglang_data_parallel_server_writes_dp_rank_where_the_real_body_does():
    """`genobs simulate --engine sglang` (default --data-parallel-size 2) writes each scheduler
    family once per data-parallel rank with dp_rank, as the real 2-rank SGLang 0.5.23 body does,
    and the tokenizer's families once per model, summed over the ranks (no dp_rank); with one rank
    no series has a dp_rank. Label names per family, dp_rank values and bucket bounds are the
    real body's."""
    from genobs.sim import Simulator

    body = "sglang_0.5.23_exposition.txt"
    real = body_label_sets(body)
    text = (BODIES / body).read_text()
    real_ranks: dict[str, set[str]] = {}
    for name, ranks in re.findall(r'^(sglang:\w+)\{[^}]*dp_rank="(\d+)"', text, re.M):
        real_ranks.setdefault(name, set()).add(ranks)
    clock = _Clock()
    sim = Simulator("0.5.23", {"m": "healthy", "m-kv": "kv_saturation"}, engine="sglang", fault_after=10, clock=clock)
    clock.t = 40.0
    simulated = _scrape(sim)
    catalog = load_catalog("sglang")
    profile = catalog.names_for(catalog.max_version)
    assert {n for n in profile if any(k.startswith(n) for k in simulated)} == {
        n for n in profile if any(k.startswith(n) for k in real)
    }
    sim_ranks: dict[str, set[str]] = {}
    for name, series in simulated.items():
        assert name in real, f"{name} is not in the real SGLang body"
        for labels in series:
            keys = frozenset(k for k, _ in labels if k != "le")
            assert keys in real[name], f"{name}: {sorted(keys)} vs {sorted(map(sorted, real[name]))}"
            if "dp_rank" in keys:
                sim_ranks.setdefault(name, set()).add(dict(labels)["dp_rank"])
        if name.endswith("_bucket"):
            les = {dict(labels)["le"] for labels in series}
            assert les == set(re.findall(rf'^{re.escape(name)}\{{[^}}]*le="([^"]+)"', text, re.M)), name
    assert sim_ranks == {n: r for n, r in real_ranks.items() if n in simulated}
    assert {"sglang:num_queue_reqs", "sglang:token_usage", "sglang:queue_time_seconds_count"} <= set(sim_ranks)
    assert "sglang:num_requests_total" not in sim_ranks and "sglang:time_to_first_token_seconds_count" in simulated
    # the tokenizer counts what every scheduler served: one series per model, the ranks' sum
    for model in ("m", "m-kv"):
        ttft = [v for labels, v in simulated["sglang:time_to_first_token_seconds_count"].items() if ("model_name", model) in labels]
        queued = {dict(labels)["dp_rank"]: v for labels, v in simulated["sglang:queue_time_seconds_count"].items()
                  if ("model_name", model) in labels}
        assert len(ttft) == 1 and set(queued) == {"0", "1"} and min(queued.values()) > 0
        assert ttft[0] == sum(queued.values())
    # the fault fills the KV pool of each scheduler that holds a queue (what the rules pair per dp_rank)
    usage = {dict(labels)["dp_rank"]: v for labels, v in simulated["sglang:token_usage"].items() if ("model_name", "m-kv") in labels}
    waiting = {dict(labels)["dp_rank"]: v for labels, v in simulated["sglang:num_queue_reqs"].items() if ("model_name", "m-kv") in labels}
    assert min(usage.values()) > 0.95 and min(waiting.values()) > 0 and set(usage) == set(waiting) == {"0", "1"}

    one = _scrape(Simulator("0.5.23", {"m": "healthy"}, engine="sglang", data_parallel_size=1, clock=clock))
    assert one and not [name for name, series in one.items() for labels in series if "dp_rank" in dict(labels)]
    for name, series in one.items():
        for labels in series:
            keys = frozenset(k for k, _ in labels if k != "le")
            assert keys | ({"dp_rank"} if name in real_ranks else set()) in real[name], name
    # a P/D server with two data-parallel ranks writes them too (SGLang adds dp_rank whenever dp_size > 1)
    decode = _scrape(Simulator("0.5.23", {"m": "healthy"}, engine="sglang", role="decode", data_parallel_size=2, clock=clock))
    assert {dict(labels)["dp_rank"] for labels in decode["sglang:num_running_reqs"]} == {"0", "1"}
    assert not any("dp_rank" in dict(labels) for labels in decode["sglang:num_requests_total"])


def test_a_role_on_an_engine_without_roles_is_a_usage_error():
    from genobs.sim import Simulator

    with pytest.raises(ValueError, match="service.roles"):
        Simulator("0.33.0", {"m": "healthy"}, role="prefill")
    with pytest.raises(ValueError, match="unknown role"):
        Simulator("0.5.23", {"m": "healthy"}, engine="sglang", role="unified")
    for args in (["simulate", "--role", "prefill"], ["simulate", "--engine", "trtllm", "--role", "decode"]):
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 2, result.output
        assert "Invalid value for '--role'" in result.output and "service.roles" in result.output
        assert "Traceback" not in result.output


@pytest.mark.parametrize("engine", ENGINES)
def test_one_value_wire_labels_are_summed_away(engine: str):
    """A label a profile writes with one value (SGLang's tp_rank, is_streaming) is one every query
    sums away, so a server that writes other values (several ranks, unstreamed requests) reads the same."""
    catalog = load_catalog(engine)
    for m in catalog.metrics.values():
        assert {k for k, _ in m.wire_labels} <= set(catalog.rank_labels_summed), m.key
        assert m.written_by is None or set(m.written_by) <= {"unified", "prefill", "decode"}, m.key
    assert {*dict(catalog.scheduler_ranks), *catalog.scheduler_labels} <= set(catalog.rank_labels_summed)
    if engine == "sglang":
        assert catalog.roles == ("engine_type", "prefill", "decode")
        assert catalog.per_scheduler(catalog.metric("kv_cache_usage")) and not catalog.per_scheduler(catalog.metric("ttft"))
        assert catalog.metric("nixl_xfer_time").written_by == ("prefill",)

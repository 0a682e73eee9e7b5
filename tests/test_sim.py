"""Tests of the simulated vLLM exporter (genobs.sim): real HTTP on loopback, simulated time via a clock."""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from genobs.catalog import load_catalog, parse_version
from genobs.sim import SCENARIOS, Simulator
from genobs.sim.cli import simulate
from genobs.sim.collector import NOT_SIMULATED

CAT = load_catalog()
REPO = Path(__file__).parents[1]
REAL_EXPOSITION = Path(__file__).parent / "fixtures" / "vllm_0.33.0_metrics.txt"  # vLLM's own output
# What Prometheus 2.x sends when scraping (scrape.go, acceptHeader).
PROM2_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)
VERSIONS = ("0.7.0", "0.9.1", "0.11.0", "0.33.0")


class Clock:
    """Injected simulated time (seconds)."""

    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def fetch(url: str, accept: str | None = None) -> tuple[str, str]:
    req = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(req, timeout=5) as resp:
        return resp.headers["Content-Type"], resp.read().decode()


def parse(body: str) -> list:
    return [s for fam in text_string_to_metric_families(body) for s in fam.samples]


def snapshot(body: str) -> dict[tuple[str, tuple], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for s in parse(body)}


def wire(key: str, v: str = "0.33.0") -> str:
    return CAT.name(key, parse_version(v))


def series_name(key: str, suffix: str = "") -> str:
    return wire(key) + suffix


def total(snap: dict, name: str, model: str | None = None, **match: str) -> float:
    out = 0.0
    for (n, labels), value in snap.items():
        d = dict(labels)
        if n == name and (model is None or d.get("model_name") == model):
            if all(d.get(k) == v for k, v in match.items()):
                out += value
    return out


def delta(a: dict, b: dict, name: str, model: str, **match: str) -> float:
    return total(b, name, model, **match) - total(a, name, model, **match)


def quantile(q: float, a: dict, b: dict, key: str, model: str) -> float:
    """histogram_quantile(q, sum by (le) (increase(<key>_bucket[a..b]))) the way Prometheus does it."""
    name = series_name(key, "_bucket")
    per_le: dict[float, float] = {}
    for snap, sign in ((a, -1), (b, 1)):
        for (n, labels), value in snap.items():
            d = dict(labels)
            if n == name and d["model_name"] == model:
                le = float(d["le"])
                per_le[le] = per_le.get(le, 0.0) + sign * value
    buckets = sorted(per_le.items())
    count = buckets[-1][1]
    assert count > 0, f"no observations of {key} for {model}"
    rank, prev_le, prev_c = q * count, 0.0, 0.0
    for le, c in buckets:
        if c >= rank:
            if math.isinf(le):
                return prev_le
            return prev_le + (le - prev_le) * (rank - prev_c) / (c - prev_c)
        prev_le, prev_c = le, c
    raise AssertionError("unreachable")


def mean(a: dict, b: dict, key: str, model: str) -> float:
    return delta(a, b, series_name(key, "_sum"), model) / delta(a, b, series_name(key, "_count"), model)


# the HTTP middleware's families by handler: their series appear with the first answer (the
# instrumentator creates them lazily, as a real server before its first request shows)
PER_HANDLER = ("http_requests", "http_request_size", "http_response_size", "http_request_duration")


def expected_created(v: tuple, answered: bool = False) -> set[str]:
    """`_created` families: every engine counter and histogram, the middleware's (not
    prometheus_client's process and GC collectors'), the per-handler ones once answered."""
    if v < load_catalog().created_series_since:
        return set()
    out = set()
    for key, m in CAT.metrics.items():
        n = m.name_for(v)
        if not n or m.type not in ("counter", "histogram", "summary") or (key in PER_HANDLER and not answered):
            continue
        if not m.process or n.startswith("http_"):  # a histogram keeps its name (iteration_tokens_total)
            out.add((n.removesuffix("_total") if m.type == "counter" else n) + "_created")
    return out


def exported(v: tuple, answered: bool = False) -> set[str]:
    """Every sample name the simulator writes for release `v` (before any answer, or after)."""
    lazy = {n + suffix for k in PER_HANDLER if (n := CAT.name(k, v)) for suffix in CAT.metric(k).suffixes}
    names = CAT.names_for(v) - {CAT.name(k, v) for k in NOT_SIMULATED}
    return (names if answered else names - lazy) | expected_created(v, answered)


COUNTED = ("_total", "_bucket", "_sum", "_count")


def process_series(v: tuple) -> list[tuple[str, str]]:
    """The API server's process and platform series of vLLM's exposition: one each, the GC ones
    per generation (the HTTP middleware's apart)."""
    out = []
    for key, m in CAT.metrics.items():
        if m.process and m.name_for(v) and not key.startswith("http_"):
            out += [(key, g) for g in "012"] if m.labels == ("generation",) else [(key, "")]
    return sorted(out)


def test_scenarios_listed_once() -> None:
    assert SCENARIOS == (
        "healthy",
        "ttft_degradation",
        "itl_degradation",
        "queue_buildup",
        "length_surge",
        "abort_surge",
        "success_drop",
        "kv_saturation",
        "preemption_storm",
        "nixl_slowdown",
        "spec_acceptance_collapse",
        "rss_leak",
        "flat_zero_metrics",
        "rank_hang",
        "idle_hang",
        "exporter_down",
        "http_5xx",
        "network_retry",
    )


# Independent spot checks (the rest of the test derives names from the catalog).
SPOT = {
    "0.7.0": (
        {"vllm:gpu_cache_usage_perc", "vllm:gpu_prefix_cache_hit_rate", "vllm:iteration_tokens_total_bucket"},
        {"vllm:kv_cache_usage_perc", "http_requests_total", "http_request_duration_highr_seconds_count"},
    ),
    "0.9.1": ({"vllm:gpu_cache_usage_perc", "vllm:time_per_output_token_seconds_bucket"}, {"vllm:kv_cache_usage_perc"}),
    "0.11.0": (
        {"vllm:kv_cache_usage_perc", "vllm:request_time_per_output_token_seconds_bucket"},
        {"vllm:nixl_xfer_time_seconds_bucket", "vllm:engine_sleep_state", "vllm:request_prefill_kv_computed_tokens_sum"},
    ),
    "0.33.0": (
        {
            "vllm:inter_token_latency_seconds_bucket", "vllm:nixl_bytes_transferred_sum", "vllm:engine_sleep_state",
            "vllm:prompt_tokens_cached_by_source_total", "vllm:request_num_preemptions_bucket",
            "vllm:num_requests_kv_fetch_by_stage", "process_cpu_seconds_total", "python_info",
        },
        {"vllm:gpu_cache_usage_perc"},
    ),
}


@pytest.mark.parametrize("version", VERSIONS)
def test_exposition_matches_catalog(version: str) -> None:
    v = parse_version(version)
    with Simulator(version, {"m-a": "healthy", "m-b": "length_surge"}, clock=Clock()) as sim:
        sim.start()
        content_type, body = fetch(sim.url)
    assert content_type.startswith("text/plain; version=0.0.4")
    samples = parse(body)
    names = {s.name for s in samples}
    created = {n for n in names if n.endswith("_created")}
    assert names == exported(v)
    assert created == expected_created(v)
    present, absent = SPOT[version]
    assert present <= names and not absent & names

    by_name: dict[str, tuple] = {}
    for m in CAT.metrics.values():
        n = m.name_for(v)
        if n is None:
            continue
        if m.type in ("histogram", "summary"):
            for suffix in (*m.suffixes, "_created"):
                by_name[n + suffix] = (m, suffix)
        else:
            by_name[n] = (m, "")
            by_name[n.removesuffix("_total") + "_created"] = (m, "_created")
    engine = v >= CAT.engine_label_since
    engines, reasons = set(), {}
    for s in samples:
        m, suffix = by_name[s.name]
        keys = set(s.labels)
        if m.unit == "info" and not m.process:  # config fields as labels, no model_name (vllm:cache_config_info)
            assert keys - {"engine"} == set(m.info_labels_for(v)) and "block_size" in keys and s.value == 1.0, keys
            continue
        want = set(m.labels) | ({"le"} if suffix == "_bucket" else set())
        if not m.process:
            want |= {"model_name"} | ({"engine"} if engine and m.engine_label else set())
            if m.engine_label:
                engines.add(s.labels.get("engine"))
        assert keys == want, (s.name, keys)
        if m.key == "request_success" and suffix == "":
            reasons.setdefault((s.labels["model_name"], s.labels.get("engine")), {})[s.labels["finished_reason"]] = (
                s.value
            )
    assert engines == ({"0", "1"} if engine else {None})
    assert len(reasons) == 2 * len(engines)
    for per_reason in reasons.values():
        assert tuple(per_reason) == CAT.reasons_for(v) and set(per_reason.values()) == {0.0}

    for m in CAT.metrics.values():
        n = m.name_for(v)
        if n and m.type == "histogram" and not m.process:
            les = [s.labels["le"] for s in samples if s.name == n + "_bucket" and s.labels["model_name"] == "m-a"]
            per_series = les[: len(les) // len(engines)]
            assert per_series[-1] == "+Inf"
            assert tuple(float(x) for x in per_series[:-1]) == m.buckets_for(v), n
    process = [s for s in samples if by_name[s.name][0].process and not by_name[s.name][0].key.startswith("http_")]
    by_key = sorted((by_name[s.name][0].key, s.labels.get("generation", "")) for s in process)
    assert by_key == process_series(v), by_key
    start = next(s.value for s in process if by_name[s.name][0].key == "process_start_time")
    assert abs(start - time.time()) < 3600  # Unix seconds of the exporter's start, as prometheus_client reports
    # nothing answered yet: the middleware's per-handler families have no series
    assert not [s for s in samples if by_name[s.name][0].key in PER_HANDLER]


def test_optional_families_are_flags() -> None:
    v = parse_version("0.33.0")
    sim = Simulator("0.33", {"m": "healthy"}, speculative_decoding=False, disaggregated_prefill=False)
    names = {s.name for s in parse(sim.render().decode())}
    for key, m in CAT.metrics.items():
        n = m.name_for(v)
        if n is None or key in NOT_SIMULATED or key in PER_HANDLER:  # nothing answered yet
            continue
        exposed = any(x.startswith(n) for x in names)
        assert exposed == (not key.startswith(("spec_decode_", "nixl_"))), key
    with pytest.raises(ValueError, match="NIXL"):
        Simulator("0.33", {"m": "nixl_slowdown"}, disaggregated_prefill=False)
    with pytest.raises(ValueError, match="outside"):
        Simulator("0.6.0")


def test_label_sets_exist_in_real_vllm_033() -> None:
    real: dict[str, set] = {}
    real_types = {}
    for fam in text_string_to_metric_families(REAL_EXPOSITION.read_text()):
        for s in fam.samples:
            real.setdefault(s.name, set()).add(frozenset(s.labels))
            real_types[s.name] = fam.type
    sim = Simulator("0.33.0", {"m": "healthy"}, clock=Clock())
    for fam in text_string_to_metric_families(sim.render().decode()):
        for s in fam.samples:
            if s.name.startswith("http_"):  # the real body was taken without the HTTP middleware
                continue
            assert s.name in real, f"{s.name} is not in the real vLLM 0.33 exposition"
            assert frozenset(s.labels) in real[s.name], (s.name, sorted(s.labels), real[s.name])
            assert real_types[s.name] == fam.type, s.name


def test_prometheus2_accept_header_gets_underscored_names() -> None:
    """Observed with prometheus_client 0.26: Prometheus 2.x's Accept header negotiates
    OpenMetrics 1.0.0 with escaping=underscores; sample lines then carry `vllm_...` (the
    colon escaped) while the # HELP/# TYPE lines keep `vllm:...`, and `_created` samples are
    inline. A plain GET (no Accept) gets text 0.0.4 with the `vllm:` names."""
    v = parse_version("0.33.0")
    with Simulator("0.33.0", {"m": "healthy"}, clock=Clock()) as sim:
        sim.start()
        content_type, body = fetch(sim.url, PROM2_ACCEPT)
        filtered = parse(fetch(f"{sim.url}?name[]={wire('requests_running')}")[1])
    assert {s.name for s in filtered} == {wire("requests_running")} and len(filtered) == 2
    assert content_type == "application/openmetrics-text; version=1.0.0; charset=utf-8; escaping=underscores"
    assert body.endswith("# EOF\n")
    sample_names = {re.split(r"[{ ]", line, maxsplit=1)[0] for line in body.splitlines() if not line.startswith("#")}
    assert sample_names == {n.replace(":", "_") for n in exported(v)}
    assert not any(n.startswith("vllm:") for n in sample_names)
    assert f"# TYPE {wire('ttft')} histogram" in body
    assert f"# TYPE {wire('prompt_tokens').removesuffix('_total')} counter" in body


FAULT_AFTER = 10.0
MID = 40.0
END = 70.0
WHOLE_EXPORTER = ("exporter_down", "idle_hang")  # tested each in a simulator of its own


@pytest.fixture(scope="module")
def fault_run():
    """Every scenario but those that stop the whole exporter (exporter_down, idle_hang) in one
    exporter: snapshots at 0 s, fault start, MID and END."""
    models = {f"m-{s}": s for s in SCENARIOS if s not in WHOLE_EXPORTER}
    clock = Clock()
    with Simulator("0.33.0", models, seed=7, clock=clock, fault_after=FAULT_AFTER) as sim:
        sim.start()
        snaps = []
        for t in (0.0, FAULT_AFTER, MID, END):
            clock.t = t
            snaps.append(snapshot(fetch(sim.url)[1]))
    return snaps


def finish_ratio(a: dict, b: dict, model: str, reason: str) -> float:
    name = wire("request_success")
    return delta(a, b, name, model, finished_reason=reason) / delta(a, b, name, model)


def gauge(snap: dict, key: str, model: str) -> float:
    return total(snap, wire(key), model)


def gauge_max(snap: dict, key: str, model: str) -> float:
    return max(v for (n, lab), v in snap.items() if n == wire(key) and dict(lab)["model_name"] == model)


def test_healthy_baseline(fault_run) -> None:
    s0, a, _, b = fault_run
    m, window = "m-healthy", END - FAULT_AFTER
    assert 4.0 < delta(a, b, wire("request_success"), m) / window < 6.0
    assert 0.2 <= quantile(0.5, a, b, "ttft", m) and quantile(0.99, a, b, "ttft", m) <= 0.5
    assert 0.02 <= quantile(0.5, a, b, "itl", m) <= 0.04
    assert 0.02 <= mean(a, b, "tpot", m) <= 0.04
    assert 0.03 <= mean(a, b, "queue_time", m) <= 0.07
    assert 1000 <= mean(a, b, "prompt_length", m) <= 4000 and 100 <= mean(a, b, "generation_length", m) <= 500
    e2e = mean(a, b, "e2e", m)
    assert e2e == pytest.approx(mean(a, b, "ttft", m) + mean(a, b, "decode_time", m), rel=1e-6)
    assert 15 <= gauge(b, "requests_running", m) <= 25 and gauge(b, "requests_waiting", m) <= 2
    assert 0.4 <= gauge_max(b, "kv_cache_usage", m) <= 0.6
    assert delta(a, b, wire("preemptions"), m) == 0
    assert finish_ratio(a, b, m, "stop") > 0.99
    hits = delta(a, b, wire("prefix_cache_hits"), m) / delta(a, b, wire("prefix_cache_queries"), m)
    assert 0.45 <= hits <= 0.55
    assert 0.65 <= _alpha(a, b, m) <= 0.75
    # the aggregate accepted / draft tokens ratio is lower by construction: (a + a^2 + a^3) / 3
    acc = delta(a, b, wire("spec_decode_accepted_tokens"), m) / delta(a, b, wire("spec_decode_draft_tokens"), m)
    assert 0.45 <= acc <= 0.57
    assert 0.012 <= mean(a, b, "nixl_xfer_time", m) <= 0.03
    assert 56 <= mean(a, b, "nixl_bytes", m) / 2**20 <= 72
    assert delta(a, b, wire("nixl_failed_transfers"), m) == 0
    assert 1.45e9 <= total(a, wire("process_rss")) <= 1.55e9
    gc = wire("gc_collections")
    assert delta(s0, a, gc, None, generation="0") > 0 and delta(s0, a, gc, None, generation="2") >= 0
    # before the fault every model looks healthy
    assert quantile(0.99, s0, a, "ttft", "m-ttft_degradation") <= 0.5
    assert delta(s0, a, wire("prompt_tokens"), "m-flat_zero_metrics") > 0


def _alpha(a, b, m):
    """Accepted tokens at draft position 0 per drafting step."""
    first = delta(a, b, wire("spec_decode_accepted_per_pos"), m, position="0")
    return first / delta(a, b, wire("spec_decode_drafts"), m)


CHECKS = {
    "ttft_degradation": lambda a, b, m: quantile(0.99, a, b, "ttft", m) > 8.0,
    "itl_degradation": lambda a, b, m: (
        quantile(0.5, a, b, "itl", m) > 0.3 and 1 / mean(a, b, "tpot", m) < 5.0 and mean(a, b, "e2e", m) > 60
    ),
    "queue_buildup": lambda a, b, m: (
        gauge(b, "requests_waiting", m) - gauge(a, "requests_waiting", m) > 150
        and quantile(0.5, a, b, "queue_time", m) > 5.0
    ),
    "length_surge": lambda a, b, m: 0.22 <= finish_ratio(a, b, m, "length") <= 0.38,
    # vLLM counts no client's give-up as a finished request: ~20% of the requests that got a first
    # token never finish, and none is an abort
    "abort_surge": lambda a, b, m: (
        0.14 <= 1 - _count(a, b, "e2e", m) / _count(a, b, "ttft", m) <= 0.26
        and delta(a, b, wire("request_success"), m, finished_reason="abort") == 0
    ),
    "success_drop": lambda a, b, m: (
        0.78 <= finish_ratio(a, b, m, "stop") <= 0.92 and finish_ratio(a, b, m, "error") > 0.02
    ),
    "kv_saturation": lambda a, b, m: (
        gauge_max(b, "kv_cache_usage", m) >= 0.98
        and gauge(b, "requests_waiting", m) - gauge(a, "requests_waiting", m) > 40
    ),
    "preemption_storm": lambda a, b, m: 1.5 <= delta(a, b, wire("preemptions"), m) / (END - FAULT_AFTER) <= 2.5,
    "nixl_slowdown": lambda a, b, m: (
        quantile(0.5, a, b, "nixl_xfer_time", m) >= 1.0
        and 0.25 <= delta(a, b, wire("nixl_failed_transfers"), m) / (END - FAULT_AFTER) <= 0.8
    ),
    "spec_acceptance_collapse": lambda a, b, m: 0.15 <= _alpha(a, b, m) <= 0.25,
    "rss_leak": lambda a, b, m: total(b, wire("process_rss")) / total(a, wire("process_rss")) > 1.4,
    # per exporter: the 5xx answers are ~10% of every generation answer it gave (13 models, 5 req/s each)
    "http_5xx": lambda a, b, m: 0.08 <= _http_share(a, b, "5xx") <= 0.12,
    "flat_zero_metrics": lambda a, b, m: (
        all(delta(a, b, n, m) == 0 for n in {n for n, _ in b if n.startswith("vllm") and n.endswith(COUNTED)})
        and gauge(b, "requests_running", m) > 0
    ),
    # the last data-parallel engine (engine="1") counts nothing while it holds requests; engine 0 serves on
    "rank_hang": lambda a, b, m: (
        all(delta(a, b, n, m, engine="1") == 0 for n in {n for n, _ in b if n.startswith("vllm") and n.endswith(COUNTED)})
        and total(b, wire("requests_running"), m, engine="1") > 0
        and delta(a, b, wire("generation_tokens"), m, engine="0") > 0
        and delta(a, b, wire("request_success"), m, engine="0") > 0
    ),
}


def _count(a: dict, b: dict, key: str, model: str) -> float:
    return delta(a, b, series_name(key, "_count"), model)


def _http_share(a: dict, b: dict, status: str) -> float:
    name = wire("http_requests")
    return (total(b, name, status=status) - total(a, name, status=status)) / (total(b, name) - total(a, name))


def test_http_5xx_start_with_the_fault(fault_run) -> None:
    s0, a, _, _ = fault_run
    assert total(a, wire("http_requests"), status="5xx") == 0 and _http_share(s0, a, "2xx") == 1.0


@pytest.mark.parametrize("scenario", sorted(CHECKS))
def test_fault_moves_its_signal(fault_run, scenario: str) -> None:
    _, a, mid, b = fault_run
    assert CHECKS[scenario](a, b, f"m-{scenario}")
    if scenario not in ("rss_leak", "http_5xx"):  # the same check does not pass on the healthy model
        assert not CHECKS[scenario](a, b, "m-healthy")
    if scenario == "queue_buildup":  # waiting keeps growing while running stays put
        m = "m-queue_buildup"
        assert gauge(mid, "requests_running", m) == gauge(b, "requests_running", m)
        assert gauge(a, "requests_waiting", m) < gauge(mid, "requests_waiting", m) < gauge(b, "requests_waiting", m)


def test_exporter_down_stops_answering() -> None:
    clock = Clock()
    with Simulator("0.33", {"m": "exporter_down"}, clock=clock, fault_after=5.0, exporter_down_delay=1.0) as sim:
        sim.start()
        clock.t = 5.5
        assert wire("requests_running") in fetch(sim.url)[1]
        clock.t = 6.1
        assert sim.down.wait(3.0)
        with pytest.raises(urllib.error.URLError):
            fetch(sim.url)


def test_deterministic_given_seed() -> None:
    def body(seed: int) -> list[str]:
        clock = Clock()
        sim = Simulator("0.11.0", {"x": "healthy", "y": "abort_surge"}, seed=seed, clock=clock)
        clock.t = 20.0
        # `_created` and the process start time are wall-clock seconds of the exporter's start, as in vLLM
        wall = ("_created", "process_start_time_seconds")
        return [line for line in sim.render().decode().splitlines() if not any(w in line for w in wall)]

    assert body(3) == body(3)
    assert body(3) != body(4)


def test_cli_lists_and_validates() -> None:
    out = CliRunner().invoke(simulate, ["--list-scenarios"])
    assert out.exit_code == 0 and all(s in out.output for s in SCENARIOS)
    bad = CliRunner().invoke(simulate, ["--model", "m=nope"])
    assert bad.exit_code == 2 and "unknown scenario" in bad.output


def test_cli_serves_until_sigterm() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    cmd = [sys.executable, "-m", "genobs.sim", "--port", "0", "--version", "0.9.1"]
    cmd += ["--model", "a=healthy", "--model", "b=preemption_storm", "--no-nixl", "--seed", "2"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        url = re.search(r"http://\S+/metrics", line).group(0)
        names = {s.name for s in parse(fetch(url)[1])}
        v = parse_version("0.9.1")
        # the per-handler HTTP families appear with the first answer, which may not have come yet
        assert exported(v) <= names <= exported(v, answered=True)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=5) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

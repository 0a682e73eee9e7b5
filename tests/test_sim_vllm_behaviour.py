"""What the simulated vLLM server does that a real one showed: client disconnects that are no
finished request, an engine that hangs while it holds nothing, and counters that agree with each
other the way vLLM's own code makes them agree (simulated time through an injected clock)."""

from __future__ import annotations

import math

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families

from genobs.catalog import load_catalog, parse_version
from genobs.cli import main
from genobs.sim import Simulator
from genobs.sim.scenarios import DISCONNECT, profile_for

CAT = load_catalog()
V032 = parse_version("0.32.0")


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


Snapshot = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def snapshot(sim: Simulator, clock: Clock, t: float) -> Snapshot:
    clock.t = t
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for fam in text_string_to_metric_families(sim.render().decode())
        for s in fam.samples
    }


def total(snap: Snapshot, name: str, **match: str) -> float:
    return sum(v for (n, labels), v in snap.items() if n == name and all(dict(labels).get(k) == x for k, x in match.items()))


def wire(key: str, suffix: str = "") -> str:
    return CAT.name(key, V032) + suffix


def grew(a: Snapshot, b: Snapshot, name: str, **match: str) -> float:
    return total(b, name, **match) - total(a, name, **match)


COMPLETIONS = {"handler": "/v1/chat/completions", "status": "2xx"}


def test_client_disconnects_are_answered_but_never_finish() -> None:
    """abort_surge on vLLM: about a fifth of the clients leave mid-stream. vLLM 0.32 records no
    finished request for them (no finished_reason="abort", no e2e or token-count observation), the
    API server counts each as a 2xx answer, and the tokens generated before they left count."""
    clock = Clock()
    sim = Simulator("0.32.0", {"m": "abort_surge"}, data_parallel_size=1, fault_after=10.0, clock=clock, request_rate=20)
    a, b = snapshot(sim, clock, 10.0), snapshot(sim, clock, 70.0)
    answered = grew(a, b, wire("http_requests"), **COMPLETIONS)
    finished = grew(a, b, wire("request_success"))
    first_tokens = grew(a, b, wire("ttft", "_count"))
    assert grew(a, b, wire("request_success"), finished_reason="abort") == 0
    assert answered == first_tokens  # every request got a first token and an answer
    assert 0.14 <= 1 - finished / answered <= 0.26
    assert grew(a, b, wire("e2e", "_count")) == finished == grew(a, b, wire("generation_length", "_count"))
    # the disconnected requests' tokens are in the counter, not in the finished requests' histogram
    assert grew(a, b, wire("generation_tokens")) > grew(a, b, wire("generation_length", "_sum"))
    # before the fault every answer is a finished request
    assert total(a, wire("http_requests"), **COMPLETIONS) == total(a, wire("request_success")) > 0


def test_abort_surge_follows_the_release_boundary() -> None:
    """The profile's client_disconnects_not_aborts_since decides: before it abort_surge finishes
    requests as aborts (as engines that count a give-up do), from it they are disconnects."""
    reasons = CAT.reasons_for(V032)
    assert dict(profile_for("abort_surge", 5.0, 5.0, reasons).reasons)["abort"] == 0.20
    moved = dict(profile_for("abort_surge", 5.0, 5.0, reasons, disconnects=True).reasons)
    assert moved[DISCONNECT] == 0.20 and "abort" not in moved
    assert CAT.client_disconnects_not_aborts_since <= CAT.min_version  # no vLLM release counts them
    assert load_catalog("sglang").client_disconnects_not_aborts_since > load_catalog("sglang").max_version


def test_idle_hang_freezes_every_engine_while_clients_time_out() -> None:
    """idle_hang (per exporter, both models, both engines): running, waiting and KV usage read 0
    from the hang on, no engine counter or histogram moves; the API server answers nothing for the
    first client-timeout seconds, then counts each give-up as a 2xx at about the arrival rate."""
    clock = Clock()
    sim = Simulator("0.32.0", {"a": "idle_hang", "b": "healthy"}, fault_after=10.0, client_timeout=20.0, clock=clock)
    before, hung, timing_out, end = (snapshot(sim, clock, t) for t in (10.0, 30.0, 40.0, 70.0))
    engine_series = {n for n, _ in end if n.startswith("vllm:") and n.endswith(("_total", "_bucket", "_sum", "_count"))}
    assert engine_series and all(grew(before, end, n) == 0 for n in engine_series)
    for key in ("requests_running", "requests_waiting", "kv_cache_usage"):
        assert {v for (n, _), v in end.items() if n == wire(key)} == {0.0}, key
    assert total(end, "vllm:engine_sleep_state", sleep_state="awake") == 4  # 2 models x 2 engines, awake
    assert grew(before, hung, wire("http_requests")) == 0  # nobody has given up yet
    rate = grew(timing_out, end, wire("http_requests"), **COMPLETIONS) / 30.0
    assert 8.0 <= rate <= 12.0  # 2 models x 5 requests/s
    # each give-up lasted the client's timeout
    slow = grew(timing_out, end, "http_request_duration_highr_seconds_bucket", le="+Inf") - grew(
        timing_out, end, "http_request_duration_highr_seconds_bucket", le="10.0"
    )
    assert slow == grew(timing_out, end, wire("http_requests"))


def test_counters_agree_as_vllm_makes_them() -> None:
    """Prompt tokens split by source, cached tokens, tokens per engine step and the API server's
    answers add up the way vLLM's IterationStats and the HTTP middleware add them."""
    clock = Clock()
    sim = Simulator("0.32.0", {"m": "healthy"}, clock=clock)
    s = snapshot(sim, clock, 60.0)
    prompt = total(s, wire("prompt_tokens"))
    computed = total(s, wire("prompt_tokens_by_source"), source="local_compute")
    cached = total(s, wire("prompt_tokens_cached"))
    assert 0 < cached < prompt and computed + cached == prompt
    assert total(s, wire("prompt_tokens_by_source")) == prompt
    assert total(s, wire("prompt_tokens_cached_by_source"), source="device") == cached == total(s, wire("prefix_cache_hits"))
    assert total(s, wire("prompt_tokens_cached_by_source")) == cached  # no host, disk or peer tier
    steps = total(s, wire("iteration_tokens", "_count"))
    assert total(s, wire("iteration_tokens", "_sum")) == pytest.approx(computed + total(s, wire("generation_tokens")))
    assert 50 <= total(s, wire("iteration_tokens", "_sum")) / steps <= 2000  # tokens per step of a busy engine
    finished = total(s, wire("request_success"))
    for key in ("request_n", "max_tokens_param", "inference_time", "request_preemptions", "prefill_kv_computed_length"):
        assert total(s, wire(key, "_count")) == finished, key
    assert total(s, wire("prefill_kv_computed_length", "_sum")) == computed
    assert total(s, wire("inference_time", "_sum")) == pytest.approx(
        total(s, wire("prefill_time", "_sum")) + total(s, wire("decode_time", "_sum"))
    )
    answers = total(s, wire("http_requests"))
    assert answers == finished  # every request finished: one answer each
    for name in ("http_request_duration_seconds_count", "http_request_duration_highr_seconds_count",
                 "http_request_size_bytes_count", "http_response_size_bytes_count"):
        assert total(s, name) == answers, name
    assert total(s, "vllm:engine_sleep_state", sleep_state="awake") == 2
    assert total(s, "vllm:engine_sleep_state") == 2  # asleep in no other state


def test_preemptions_per_request_sum_to_the_engine_counter() -> None:
    clock = Clock()
    sim = Simulator("0.32.0", {"m": "preemption_storm"}, clock=clock, request_rate=20)
    s = snapshot(sim, clock, 60.0)
    counted = total(s, wire("preemptions"))
    assert counted > 60
    assert counted - 10 <= total(s, wire("request_preemptions", "_sum")) <= counted  # a few await a finish


@pytest.mark.parametrize(("max_model_len", "top"), [(512, 500.0), (4096, 2000.0), (None, 100000.0)])
def test_max_model_len_sets_the_token_buckets(max_model_len: int | None, top: float) -> None:
    sim = Simulator("0.32.0", {"m": "healthy"}, max_model_len=max_model_len, clock=Clock())
    text = sim.render().decode()
    for key in ("prompt_length", "generation_length", "max_generation_length", "max_tokens_param",
                "prefill_kv_computed_length"):
        les = {float(s.labels["le"]) for fam in text_string_to_metric_families(text) for s in fam.samples
               if s.name == wire(key, "_bucket")}
        assert max(le for le in les if not math.isinf(le)) == top, key
        assert {1.0, 2.0, 5.0, 10.0} <= les


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--max-model-len", "512", "--engine", "sglang"], "maximum model length"),
        (["--max-model-len", "512", "--engine", "dynamo"], "max-model-len"),
    ],
)
def test_max_model_len_needs_a_profile_that_follows_it(args: list[str], needle: str) -> None:
    result = CliRunner().invoke(main, ["simulate", *args])
    assert result.exit_code == 2 and needle in result.output and "Traceback" not in result.output


def test_cache_config_labels_follow_the_release() -> None:
    """vllm:cache_config_info's label set is the asked release's CacheConfig (0.32 has no
    simple_cpu_offload_num_blocks, 0.33 has it; 0.11 still had swap_space)."""

    def labels(version: str) -> set[str]:
        text = Simulator(version, {"m": "healthy"}, clock=Clock()).render().decode()
        found = {frozenset(s.labels) for fam in text_string_to_metric_families(text) for s in fam.samples
                 if s.name == "vllm:cache_config_info"}
        assert len(found) == 1
        return set(next(iter(found))) - {"engine"}

    assert "simple_cpu_offload_num_blocks" not in labels("0.32.0")
    assert labels("0.33.0") - labels("0.32.0") == {"simple_cpu_offload_num_blocks"}
    assert {"swap_space", "cpu_offload_gb"} <= labels("0.11.0") and "mamba_cache_mode" not in labels("0.11.0")

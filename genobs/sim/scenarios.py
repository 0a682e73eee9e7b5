"""Simulator scenarios: the fault names and the traffic profile each one imposes per tick."""

from __future__ import annotations

from dataclasses import dataclass, replace

#: Every scenario a simulated model can run, in one place (exported as genobs.sim.SCENARIOS).
SCENARIOS: tuple[str, ...] = (
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

DESCRIPTIONS: dict[str, str] = {
    "healthy": "TTFT 0.2-0.5 s, ITL 20-40 ms, queue ~0.05 s, ~20 running, KV 0.4-0.6, 99.8% stop",
    "ttft_degradation": "prefill slows down: TTFT 8-15 s (p99 >> 5 s)",
    "itl_degradation": "ITL/TPOT 0.3-0.5 s per token (< 5 tok/s per user), E2E grows with it",
    "queue_buildup": "waiting grows ~3/s at constant running; queue time (and so TTFT) >= 8 s",
    "length_surge": "~30% of requests finish with finished_reason=length",
    "abort_surge": "~20% of the clients give up mid-request: on vLLM (which counts no client disconnect as a "
    "finished request) a 2xx answer, the tokens generated so far, no finish and no abort; on engines "
    "that count them (SGLang, TensorRT-LLM), finished_reason=abort (their own abort count)",
    "success_drop": "stop falls to ~85%; the rest split over error/abort/length (as the version has)",
    "kv_saturation": "KV-cache usage ~0.99, waiting grows ~1/s, some preemptions",
    "preemption_storm": "preemptions ~2/s",
    "nixl_slowdown": "KV transfer time 1-3 s and ~0.5 failed transfers/s (vLLM's NIXL; SGLang: --role prefill)",
    "spec_acceptance_collapse": "spec-decode acceptance alpha (position 0) ~0.2 instead of ~0.7",
    "rss_leak": "process RSS +50% per minute (process series: one per exporter, not per model)",
    "flat_zero_metrics": "every counter/histogram of the model frozen while gauges still show running > 0",
    "rank_hang": "one data-parallel rank of the model (the last: vLLM engine, SGLang dp_rank) hangs: its "
    "counters and histograms freeze while it holds its requests, the other ranks serve on (one rank: the model)",
    "idle_hang": "every engine of the server stops at an instant it holds no request (per exporter): running, "
    "waiting and KV usage stay 0, engine counters and histograms stop; the API server counts each "
    "request whose client gives up (after --client-timeout) as 2xx, at the arrival rate",
    "exporter_down": "the whole HTTP exporter stops answering (run it in its own simulator process)",
    "http_5xx": "the API server answers ~10% of generation requests with 5xx before they reach the engine "
    "(http_requests_total{status=\"5xx\"}; per exporter, like the process series)",
    "network_retry": "the network between the application and its servers fails and the client retries: "
    "operation duration and first chunk +2-4 s at the application (--engine otel-genai), nothing at the servers",
}

#: Scenarios only the application sees (its own network, retries): every server's series stay healthy.
CLIENT_ONLY_SCENARIOS = frozenset({"network_retry"})

#: Scenarios that hit one rank of the model (the last), the others staying healthy: scenario -> the
#: profile of that rank.
RANK_SCENARIOS = {"rank_hang": "flat_zero_metrics"}

#: Scenarios that act on the exporter process rather than on the model's engine series.
PROCESS_SCENARIOS = frozenset({"rss_leak", "exporter_down", "http_5xx", "idle_hang"})

#: Scenarios that are invisible unless the matching optional metric family is on.
NEEDS_SPEC_DECODE = frozenset({"spec_acceptance_collapse"})
NEEDS_NIXL = frozenset({"nixl_slowdown"})

MIB = 1024 * 1024
#: the end of a request whose client left: no finish reason, the engine records no finished request
DISCONNECT = "disconnect"


@dataclass(frozen=True)
class Profile:
    """What one model does during one tick. Per-model rates; the caller splits them over ranks."""

    queue_s: tuple[float, float] = (0.02, 0.08)
    prefill_s: tuple[float, float] = (0.18, 0.42)
    itl_s: tuple[float, float] = (0.020, 0.040)
    prompt_tokens: tuple[int, int] = (1000, 4000)
    output_tokens: tuple[int, int] = (100, 500)
    max_tokens: int = 512
    # (finished_reason, weight); reasons the version lacks are dropped and the rest renormalised
    reasons: tuple[tuple[str, float], ...] = (("stop", 0.998), ("length", 0.0015), ("abort", 0.0005))
    running: float = 20.0
    running_jitter: float = 1.5
    waiting: float | None = None  # None: healthy 0-2 noise; else this mean (per model)
    kv_usage: tuple[float, float] = (0.4, 0.6)
    preemptions_per_s: float = 0.0
    prefix_hit: tuple[float, float] = (0.35, 0.65)
    spec_acceptance: float = 0.7  # alpha: per-token acceptance probability of the geometric model
    nixl_time_s: tuple[float, float] = (0.012, 0.030)
    nixl_bytes: tuple[float, float] = (48 * MIB, 80 * MIB)
    nixl_failures_per_s: float = 0.0
    frozen: bool = False  # nothing counted (gauges still move unless `idle`)
    idle: bool = False  # the gauges read an engine that holds no request


HEALTHY = Profile()
#: idle_hang: the engine core stopped with nothing running or waiting
IDLE_HANG = Profile(frozen=True, idle=True)


def _split_rest(stop: float, candidates: tuple[str, ...], available: tuple[str, ...]) -> tuple:
    rest = [r for r in candidates if r in available] or ["abort"]
    share = (1.0 - stop) / len(rest)
    return (("stop", stop),) + tuple((r, share) for r in rest)


def profile_for(
    scenario: str, fault_age: float, request_rate: float, reasons: tuple[str, ...], *, disconnects: bool = False
) -> Profile:
    """The profile of `scenario` `fault_age` seconds after the fault started (negative: not yet).
    `disconnects`: the engine does not count a client's give-up as a finished request (vLLM)."""
    if scenario not in DESCRIPTIONS:
        raise ValueError(f"unknown scenario {scenario!r}; known: {', '.join(SCENARIOS)}")
    if fault_age < 0 or scenario in PROCESS_SCENARIOS or scenario in CLIENT_ONLY_SCENARIOS or scenario == "healthy":
        return HEALTHY
    if scenario in RANK_SCENARIOS:
        raise ValueError(f"{scenario} hits one rank: ask for the profile of {RANK_SCENARIOS[scenario]} on that rank")
    p = HEALTHY
    rate = max(request_rate, 1e-6)
    if scenario == "ttft_degradation":
        return replace(p, prefill_s=(8.0, 15.0))
    if scenario == "itl_degradation":
        return replace(p, itl_s=(0.3, 0.5))
    if scenario == "queue_buildup":
        waiting = 1.0 + 3.0 * fault_age
        q = 8.0 + waiting / rate
        return replace(p, waiting=waiting, running=24.0, running_jitter=0.0, queue_s=(0.9 * q, 1.1 * q))
    if scenario == "length_surge":
        return replace(p, reasons=(("stop", 0.699), ("length", 0.30), ("abort", 0.001)))
    if scenario == "abort_surge":
        return replace(p, reasons=(("stop", 0.799), ("length", 0.001), (DISCONNECT if disconnects else "abort", 0.20)))
    if scenario == "success_drop":
        return replace(p, reasons=_split_rest(0.85, ("error", "abort", "length"), reasons))
    if scenario == "kv_saturation":
        waiting = 1.0 + 1.0 * fault_age
        q = 1.0 + waiting / rate
        return replace(p, kv_usage=(0.985, 0.995), waiting=waiting, preemptions_per_s=0.2, queue_s=(0.9 * q, 1.1 * q))
    if scenario == "preemption_storm":
        return replace(p, preemptions_per_s=2.0)
    if scenario == "nixl_slowdown":
        return replace(p, nixl_time_s=(1.0, 3.0), nixl_failures_per_s=0.5)
    if scenario == "spec_acceptance_collapse":
        return replace(p, spec_acceptance=0.2)
    if scenario == "flat_zero_metrics":
        return replace(p, frozen=True)
    raise AssertionError(f"scenario {scenario!r} has no profile")  # pragma: no cover


def parse_model_spec(text: str) -> tuple[str, str]:
    """'m-bad=ttft_degradation' -> ('m-bad', 'ttft_degradation'); a bare name means healthy."""
    name, sep, scenario = text.partition("=")
    name, scenario = name.strip(), (scenario.strip() if sep else "healthy")
    if not name:
        raise ValueError(f"empty model name in {text!r} (expected NAME=SCENARIO)")
    if any(not c.isprintable() for c in name):
        # a label value with a newline or escape breaks the exposition and every line that prints it
        raise ValueError(f"model name {name!r} holds a control character (a newline, tab or escape)")
    if scenario not in DESCRIPTIONS:
        raise ValueError(f"unknown scenario {scenario!r} in {text!r}; known: {', '.join(SCENARIOS)}")
    return name, scenario

"""Deterministic traffic model: per (model, engine rank) counters, gauges and histograms, stepped in fixed ticks."""

from __future__ import annotations

import random
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from .api_server import COMPLETIONS, GC_GENERATIONS, ApiServer, Hist, poisson, request_bytes, response_bytes
from .scenarios import DISCONNECT, HEALTHY, IDLE_HANG, RANK_SCENARIOS, Profile, profile_for

__all__ = ["GC_GENERATIONS", "SPEC_TOKENS", "TICK", "Fleet", "Hist", "SeriesState", "poisson"]

#: Simulated seconds per tick. State is a pure function of (seed, elapsed // TICK), so the
#: exposition does not depend on when or how often it is scraped.
TICK = 0.2
#: Speculative tokens proposed per drafting step (like --num-speculative-tokens 3).
SPEC_TOKENS = 3
#: ITL observations per request are recorded in this many chunks (weights), not token by token.
ITL_CHUNKS = 4
HTTP_5XX_SHARE = 0.10  # http_5xx: share of all generation answers that are 5xx
#: one-label gauges the engine sets at start (the others read 0): awake, not put to sleep
START_GAUGES = {"engine_sleep_state:awake": 1.0}


@dataclass
class SeriesState:
    """Everything one engine series (model_name, engine rank) exposes."""

    model: str
    rank: str | None
    scenario: str
    share: float  # this rank's fraction of the model's traffic
    rng: random.Random
    hist_buckets: Mapping[str, tuple[float, ...]]
    api: ApiServer  # the exporter's API server, which answers every request of every series
    counters: dict[tuple[str, str], float] = field(default_factory=dict)
    gauges: dict[str, float] = field(default_factory=dict)
    hists: dict[str, Hist] = field(default_factory=dict)
    # preemptions counted per step, not yet observed in a finished request's histogram
    preempted: int = 0

    def __post_init__(self) -> None:
        self.hists = {k: Hist(b) for k, b in self.hist_buckets.items()}
        self.gauges["requests_running"] = float(round(HEALTHY.running * self.share))
        self.gauges["requests_waiting"] = 0.0
        self.gauges["kv_cache_usage"] = 0.5
        self.gauges["prefix_cache_hit_rate_gauge"] = 0.5
        self.gauges["spec_decode_acceptance_gauge"] = 0.7
        self.gauges.update(START_GAUGES)

    # -- accessors used by the collector -------------------------------------------------
    def counter(self, key: str, label: str = "") -> float:
        return self.counters.get((key, label), 0.0)

    def gauge(self, key: str, label: str = "") -> float:
        """A gauge, or one child of a gauge with one label (kept as "<key>:<label value>")."""
        return self.gauges.get(f"{key}:{label}" if label else key, 0.0)

    def _inc(self, key: str, value: float, label: str = "") -> None:
        self.counters[(key, label)] = self.counters.get((key, label), 0.0) + value

    def _observe(self, key: str, value: float, weight: float = 1.0) -> None:
        h = self.hists.get(key)
        if h is not None:
            h.observe(value, weight)

    # -- one tick ----------------------------------------------------------------------------
    def step(self, dt: float, p: Profile, rate: float, reasons: tuple[str, ...]) -> None:
        rng, share = self.rng, self.share
        self._step_gauges(p)
        if p.frozen:  # a broken multiprocess dir or a hung engine: nothing counted
            return
        preempted = poisson(rng, p.preemptions_per_s * share * dt)
        self._inc("preemptions", preempted)
        self.preempted += preempted
        self._inc("nixl_failed_transfers", poisson(rng, p.nixl_failures_per_s * share * dt))
        weights = [(r, w) for r, w in p.reasons if r in reasons or r == DISCONNECT]
        total = sum(w for _, w in weights)
        arrivals = poisson(rng, rate * share * dt)
        tokens = 0
        for i in range(arrivals):
            tokens += self._request(p, weights, total, arrivals - i)
        if tokens:
            # the engine steps once per inter-token gap: this tick's computed and generated tokens
            # spread over its steps (the tokens-per-step histogram sums to them)
            steps = max(1, round(dt / (sum(p.itl_s) / 2)))
            self._observe("iteration_tokens", tokens / steps, steps)

    def _step_gauges(self, p: Profile) -> None:
        rng, share, g = self.rng, self.share, self.gauges
        if p.idle:  # hung at an instant without requests: the API server keeps what it last read
            for key in ("requests_running", "requests_waiting", "requests_waiting_by_reason:capacity", "kv_cache_usage"):
                g[key] = 0.0
            return
        g["requests_running"] = max(1.0, round(rng.gauss(p.running * share, p.running_jitter * share)))
        if p.waiting is None:
            g["requests_waiting"] = float(rng.choice((0, 0, 1)))
        else:
            g["requests_waiting"] = float(round(p.waiting * share))
        # a single-pool simulator defers nothing: every waiting request waits for capacity (vLLM >= 0.20)
        g["requests_waiting_by_reason:capacity"] = g["requests_waiting"]
        g["requests_waiting_by_reason:deferred"] = 0.0
        lo, hi = p.kv_usage
        kv = g["kv_cache_usage"]
        kv += 0.2 * ((lo + hi) / 2 - kv) + rng.gauss(0.0, (hi - lo) / 12)  # mean-reverting walk
        g["kv_cache_usage"] = min(hi, max(lo, kv))
        g["spec_decode_acceptance_gauge"] = min(1.0, max(0.0, rng.gauss(p.spec_acceptance, 0.02)))

    def _request(self, p: Profile, weights: list[tuple[str, float]], total: float, left: int) -> int:
        """One request of this tick (`left` of them still to come, this one included); returns
        the tokens the engine computed and generated for it."""
        rng = self.rng
        reason = weights[-1][0]
        x = rng.random() * total
        for r, w in weights:
            x -= w
            if x < 0:
                reason = r
                break
        n_prompt = rng.randint(*p.prompt_tokens)
        n_out = rng.randint(*p.output_tokens)
        if reason == "length":
            n_out = p.max_tokens
        elif reason in ("abort", "error", DISCONNECT):
            n_out = rng.randint(1, n_out)
        queue = rng.uniform(*p.queue_s)
        prefill = rng.uniform(*p.prefill_s)
        ttft = queue + prefill
        decode = 0.0
        tokens = n_out - 1
        # first token and inter-token gaps are observed as tokens come out, also for a request
        # whose client leaves before it finishes
        self._observe("ttft", ttft)
        if tokens > 0:
            chunks = min(ITL_CHUNKS, tokens)
            for i in range(chunks):
                weight = tokens // chunks + (1 if i < tokens % chunks else 0)
                itl = rng.uniform(*p.itl_s)
                self._observe("itl", itl, weight)
                decode += itl * weight
        hit = rng.uniform(*p.prefix_hit)
        cached = round(n_prompt * hit)
        self._prompt(n_prompt, cached, hit)
        self._inc("generation_tokens", n_out)
        self._spec_decode(p, tokens)
        self._observe("nixl_xfer_time", rng.uniform(*p.nixl_time_s))
        self._observe("nixl_bytes", round(rng.uniform(*p.nixl_bytes)))
        if reason != DISCONNECT:  # a client's disconnect is no finished request (no stats, no reason)
            self._finished(p, reason, n_prompt, n_out, cached, queue, prefill, decode, left)
        # the API server answers 2xx when the request ends, also a streamed one that an error ended
        # and one whose client left (its headers were sent, or with_cancellation answered 200)
        self.api.answer("2xx", ttft + decode, request_bytes(n_prompt), response_bytes(n_out), COMPLETIONS)
        return n_prompt - cached + n_out

    def _prompt(self, n_prompt: int, cached: int, hit: float) -> None:
        """Prompt tokens by where they came from: computed, or the local prefix cache."""
        self.gauges["prefix_cache_hit_rate_gauge"] = hit
        self._inc("prompt_tokens", n_prompt)
        self._inc("prefix_cache_queries", n_prompt)
        self._inc("prefix_cache_hits", cached)
        self._inc("prompt_tokens_by_source", n_prompt - cached, "local_compute")
        self._inc("prompt_tokens_by_source", cached, "local_cache_hit")
        self._inc("prompt_tokens_cached", cached)
        self._inc("prompt_tokens_cached_by_source", cached, "device")

    def _spec_decode(self, p: Profile, tokens: int) -> None:
        # geometric model: the drafted token at position i is accepted with probability alpha^(i+1)
        alpha = min(1.0, max(0.0, self.rng.gauss(p.spec_acceptance, 0.03)))
        per_step = sum(alpha ** (i + 1) for i in range(SPEC_TOKENS))
        drafts = max(1, round(tokens / (1 + per_step)))
        self._inc("spec_decode_drafts", drafts)
        self._inc("spec_decode_draft_tokens", drafts * SPEC_TOKENS)
        accepted = [round(drafts * alpha ** (i + 1)) for i in range(SPEC_TOKENS)]
        for i, n in enumerate(accepted):
            self._inc("spec_decode_accepted_per_pos", n, str(i))
        self._inc("spec_decode_accepted_tokens", sum(accepted))

    def _finished(
        self, p: Profile, reason: str, n_prompt: int, n_out: int, cached: int, queue: float, prefill: float,
        decode: float, left: int,
    ) -> None:
        """What the engine records once a request finishes (vLLM's update_from_finished_request)."""
        if n_out > 1:
            self._observe("tpot", decode / (n_out - 1))
        # the tick's preemptions, spread over the requests finishing in it
        preemptions = self.preempted // left
        self.preempted -= preemptions
        for key, value in (
            ("e2e", queue + prefill + decode),
            ("queue_time", queue),
            ("prefill_time", prefill),
            ("decode_time", decode),
            ("inference_time", prefill + decode),
            ("prompt_length", n_prompt),
            ("generation_length", n_out),
            ("max_generation_length", n_out),  # one sequence per request (n = 1)
            ("request_n", 1),
            ("max_tokens_param", p.max_tokens),
            ("request_preemptions", preemptions),
            ("prefill_kv_computed_length", n_prompt - cached),
        ):
            self._observe(key, value)
        self._inc("request_success", 1, reason)


class Fleet:
    """All simulated series of one exporter, advanced lazily to the elapsed simulated time.

    `disconnects`: the engine counts a client's give-up as no finished request (vLLM), so
    abort_surge plays client disconnects instead of aborts. `idle_hang` anywhere in `models` stops
    every engine of the exporter `client_timeout` seconds before its clients start giving up."""

    def __init__(
        self,
        models: Mapping[str, str],
        ranks: tuple[str | None, ...],
        hist_buckets: Mapping[str, tuple[float, ...]],
        reasons: tuple[str, ...],
        *,
        seed: int = 0,
        request_rate: float = 5.0,
        fault_after: float = 0.0,
        disconnects: bool = False,
        client_timeout: float = 60.0,
        http_buckets: tuple[tuple[float, ...], tuple[float, ...]] = ((), ()),
    ):
        self.models = dict(models)
        self.ranks = ranks
        self.reasons = reasons
        self.request_rate = float(request_rate)
        self.fault_after = float(fault_after)
        self.disconnects = disconnects
        self.idle_hang = "idle_hang" in self.models.values()
        self.lock = threading.RLock()
        self.ticks = 0
        arrivals = self.request_rate * len(self.models)
        # the engine still finishes every request it gets; the rejected ones come on top
        errors = arrivals * HTTP_5XX_SHARE / (1 - HTTP_5XX_SHARE)
        self.process = ApiServer(
            rng=random.Random(f"genobs-sim:{seed}:process"),
            duration_bounds=http_buckets,
            leak="rss_leak" in self.models.values(),
            http_5xx_rate=errors if "http_5xx" in self.models.values() else 0.0,
            timeout_rate=arrivals if self.idle_hang else 0.0,
            client_timeout=client_timeout,
        )
        share = 1.0 / len(ranks)
        self.series = [
            SeriesState(
                model=m,
                rank=r,
                scenario=s,
                share=share,
                rng=random.Random(f"genobs-sim:{seed}:{m}:{r}"),
                hist_buckets=hist_buckets,
                api=self.process,
            )
            for m, s in self.models.items()
            for r in ranks
        ]

    @property
    def sim_time(self) -> float:
        return self.ticks * TICK

    def advance(self, elapsed: float) -> None:
        """Run every whole tick up to `elapsed` seconds since the start."""
        with self.lock:
            target = int(elapsed / TICK + 1e-9)
            while self.ticks < target:
                t = self.ticks * TICK
                age = t - self.fault_after
                for s in self.series:
                    scenario = s.scenario
                    if scenario in RANK_SCENARIOS:  # the model's last rank has the fault, the others none
                        scenario = RANK_SCENARIOS[scenario] if s.rank == self.ranks[-1] else "healthy"
                    if self.idle_hang and age >= 0:  # every engine of the server stops with nothing held
                        p = IDLE_HANG
                    else:
                        p = profile_for(scenario, age, self.request_rate, self.reasons, disconnects=self.disconnects)
                    s.step(TICK, p, self.request_rate, self.reasons)
                self.process.step(TICK, age)
                self.ticks += 1

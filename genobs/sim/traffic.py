"""Deterministic traffic model: per (model, engine rank) counters, gauges and histograms, stepped in fixed ticks."""

from __future__ import annotations

import math
import random
import threading
from bisect import bisect_left
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from .scenarios import HEALTHY, RANK_SCENARIOS, Profile, profile_for

#: Simulated seconds per tick. State is a pure function of (seed, elapsed // TICK), so the
#: exposition does not depend on when or how often it is scraped.
TICK = 0.2
#: Speculative tokens proposed per drafting step (like --num-speculative-tokens 3).
SPEC_TOKENS = 3
#: ITL observations per request are recorded in this many chunks (weights), not token by token.
ITL_CHUNKS = 4
GC_GENERATIONS = ("0", "1", "2")
_GC_START = (1394.0, 126.0, 8.0)
_GC_RATE = (5.0, 0.45, 0.03)  # collections per second, per generation
RSS_BASE = 1.5e9
RSS_LEAK_PER_MIN = 0.5  # +50% of the base per minute
HTTP_5XX_SHARE = 0.10  # http_5xx: share of all generation answers that are 5xx


def poisson(rng: random.Random, lam: float) -> int:
    """A Poisson draw (Knuth for small means, normal approximation above 30)."""
    if lam <= 0:
        return 0
    if lam > 30:
        return max(0, round(rng.gauss(lam, math.sqrt(lam))))
    limit, k, p = math.exp(-lam), 0, 1.0
    while True:
        p *= rng.random()
        if p <= limit:
            return k
        k += 1


class Hist:
    """A cumulative-on-read Prometheus histogram with weighted observations."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: Iterable[float]):
        self.bounds = tuple(sorted(float(b) for b in bounds))
        self.counts = [0.0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float, weight: float = 1.0) -> None:
        self.counts[bisect_left(self.bounds, value)] += weight
        self.sum += value * weight

    @property
    def count(self) -> float:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[float, float]]:
        """[(le, cumulative count), ..., (inf, total)]."""
        out, acc = [], 0.0
        for le, c in zip((*self.bounds, math.inf), self.counts):
            acc += c
            out.append((le, acc))
        return out


@dataclass
class SeriesState:
    """Everything one engine series (model_name, engine rank) exposes."""

    model: str
    rank: str | None
    scenario: str
    share: float  # this rank's fraction of the model's traffic
    rng: random.Random
    hist_buckets: Mapping[str, tuple[float, ...]]
    counters: dict[tuple[str, str], float] = field(default_factory=dict)
    gauges: dict[str, float] = field(default_factory=dict)
    hists: dict[str, Hist] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.hists = {k: Hist(b) for k, b in self.hist_buckets.items()}
        self.gauges["requests_running"] = float(round(HEALTHY.running * self.share))
        self.gauges["requests_waiting"] = 0.0
        self.gauges["kv_cache_usage"] = 0.5
        self.gauges["prefix_cache_hit_rate_gauge"] = 0.5
        self.gauges["spec_decode_acceptance_gauge"] = 0.7

    # -- accessors used by the collector -------------------------------------------------
    def counter(self, key: str, label: str = "") -> float:
        return self.counters.get((key, label), 0.0)

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
        if p.frozen:  # a broken multiprocess dir: nothing counted, gauges still move
            return
        self._inc("preemptions", poisson(rng, p.preemptions_per_s * share * dt))
        self._inc("nixl_failed_transfers", poisson(rng, p.nixl_failures_per_s * share * dt))
        weights = [(r, w) for r, w in p.reasons if r in reasons]
        total = sum(w for _, w in weights)
        for _ in range(poisson(rng, rate * share * dt)):
            self._request(p, weights, total)

    def _step_gauges(self, p: Profile) -> None:
        rng, share, g = self.rng, self.share, self.gauges
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

    def _request(self, p: Profile, weights: list[tuple[str, float]], total: float) -> None:
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
        elif reason in ("abort", "error"):
            n_out = rng.randint(1, n_out)
        queue = rng.uniform(*p.queue_s)
        prefill = rng.uniform(*p.prefill_s)
        ttft = queue + prefill
        decode = 0.0
        tokens = n_out - 1
        if tokens > 0:
            chunks = min(ITL_CHUNKS, tokens)
            for i in range(chunks):
                weight = tokens // chunks + (1 if i < tokens % chunks else 0)
                itl = rng.uniform(*p.itl_s)
                self._observe("itl", itl, weight)
                decode += itl * weight
            self._observe("tpot", decode / tokens)
        for key, value in (
            ("ttft", ttft),
            ("e2e", ttft + decode),
            ("queue_time", queue),
            ("prefill_time", prefill),
            ("decode_time", decode),
            ("prompt_length", n_prompt),
            ("generation_length", n_out),
        ):
            self._observe(key, value)
        self._inc("request_success", 1, reason)
        self._inc("prompt_tokens", n_prompt)
        self._inc("generation_tokens", n_out)
        hit = rng.uniform(*p.prefix_hit)
        self.gauges["prefix_cache_hit_rate_gauge"] = hit
        self._inc("prefix_cache_queries", n_prompt)
        self._inc("prefix_cache_hits", round(n_prompt * hit))
        # geometric model: the drafted token at position i is accepted with probability alpha^(i+1)
        alpha = min(1.0, max(0.0, rng.gauss(p.spec_acceptance, 0.03)))
        per_step = sum(alpha ** (i + 1) for i in range(SPEC_TOKENS))
        drafts = max(1, round(tokens / (1 + per_step)))
        self._inc("spec_decode_drafts", drafts)
        self._inc("spec_decode_draft_tokens", drafts * SPEC_TOKENS)
        accepted = [round(drafts * alpha ** (i + 1)) for i in range(SPEC_TOKENS)]
        for i, n in enumerate(accepted):
            self._inc("spec_decode_accepted_per_pos", n, str(i))
        self._inc("spec_decode_accepted_tokens", sum(accepted))
        self._observe("nixl_xfer_time", rng.uniform(*p.nixl_time_s))
        self._observe("nixl_bytes", round(rng.uniform(*p.nixl_bytes)))


@dataclass
class ProcessState:
    """The API-server process: RSS and GC collections, one series per exporter."""

    rng: random.Random
    leak: bool
    http_5xx_rate: float = 0.0  # 5xx answers per second once the fault is on (http_5xx)
    rss: float = RSS_BASE
    gc: list[float] = field(default_factory=lambda: list(_GC_START))
    http_errors: float = 0.0

    def step(self, dt: float, fault_age: float) -> None:
        for i, rate in enumerate(_GC_RATE):
            self.gc[i] += poisson(self.rng, rate * dt)
        if fault_age >= 0:
            self.http_errors += poisson(self.rng, self.http_5xx_rate * dt)
        growth = RSS_LEAK_PER_MIN * fault_age / 60.0 if self.leak and fault_age >= 0 else 0.0
        jitter = self.rng.uniform(-1.0, 1.0) * 2 * 1024 * 1024
        self.rss = round(RSS_BASE * (1.0 + growth) + jitter)


class Fleet:
    """All simulated series of one exporter, advanced lazily to the elapsed simulated time."""

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
    ):
        self.models = dict(models)
        self.ranks = ranks
        self.reasons = reasons
        self.request_rate = float(request_rate)
        self.fault_after = float(fault_after)
        self.lock = threading.RLock()
        self.ticks = 0
        share = 1.0 / len(ranks)
        self.series = [
            SeriesState(
                model=m,
                rank=r,
                scenario=s,
                share=share,
                rng=random.Random(f"genobs-sim:{seed}:{m}:{r}"),
                hist_buckets=hist_buckets,
            )
            for m, s in self.models.items()
            for r in ranks
        ]
        leak = "rss_leak" in self.models.values()
        # the engine still finishes every request it gets; the rejected ones come on top
        errors = self.request_rate * len(self.models) * HTTP_5XX_SHARE / (1 - HTTP_5XX_SHARE)
        self.process = ProcessState(
            rng=random.Random(f"genobs-sim:{seed}:process"),
            leak=leak,
            http_5xx_rate=errors if "http_5xx" in self.models.values() else 0.0,
        )

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
                    p = profile_for(scenario, age, self.request_rate, self.reasons)
                    s.step(TICK, p, self.request_rate, self.reasons)
                self.process.step(TICK, age)
                self.ticks += 1

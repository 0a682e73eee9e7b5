"""The simulated API-server process in front of the engines: its HTTP answers (what
prometheus_fastapi_instrumentator counts in vLLM), memory, CPU and GC. One per exporter, stepped
with the engines' traffic by genobs.sim.traffic.Fleet and rendered by genobs.sim.api_families."""

from __future__ import annotations

import math
import random
from bisect import bisect_left
from collections.abc import Iterable
from dataclasses import dataclass, field

RSS_BASE = 1.5e9
RSS_LEAK_PER_MIN = 0.5  # +50% of the base per minute
VIRTUAL_PER_RSS = 1.5  # the address space of a Python server with its libraries, beside what is resident
GC_GENERATIONS = ("0", "1", "2")
_GC_START = (1394.0, 126.0, 8.0)
_GC_RATE = (5.0, 0.45, 0.03)  # collections per second, per generation
_OBJECTS_PER_COLLECTION = (10.0, 15.0, 50.0)  # objects each collection of a generation frees
OPEN_FDS = 35.0
MAX_FDS = 1048576.0
CPU_IDLE_PER_S = 0.02  # CPU seconds per second of an idle API server (event loop, scrapes)
CPU_PER_ANSWER = 0.004  # CPU seconds to parse, tokenize and answer one request
#: the handler every simulated generation request goes to (a handler of the profile's completion_handlers)
COMPLETIONS = "/v1/chat/completions"
POST = "POST"
REJECT_SECONDS = 0.004  # a request the server fails before it reaches the engine
TYPICAL_PROMPT = 2000  # tokens of a request the engine never saw (failed, or given up on)
ERROR_BYTES = 100.0  # a JSON error answer


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


def request_bytes(prompt_tokens: int) -> float:
    """Content-Length of a generation request: JSON around the prompt (~4 bytes a token)."""
    return 200.0 + 4.0 * prompt_tokens


def response_bytes(output_tokens: int) -> float:
    return 300.0 + 4.0 * output_tokens


@dataclass
class ApiServer:
    """The API-server process: one series set per exporter. `duration_bounds` are the bounds of
    the instrumentator's two latency histograms (few buckets by handler, many without labels)."""

    rng: random.Random
    duration_bounds: tuple[tuple[float, ...], tuple[float, ...]] = ((), ())
    leak: bool = False
    http_5xx_rate: float = 0.0  # 5xx answers per second once the fault is on (http_5xx)
    # idle_hang: requests per second whose clients give up once `client_timeout` seconds have passed
    timeout_rate: float = 0.0
    client_timeout: float = 60.0
    rss: float = RSS_BASE
    cpu: float = 0.0
    gc: list[float] = field(default_factory=lambda: list(_GC_START))
    # (handler, method, status) -> answers
    answers: dict[tuple[str, str, str], float] = field(default_factory=dict)
    # handler -> (count, sum) of the request and response Content-Length summaries
    request_size: dict[str, list[float]] = field(default_factory=dict)
    response_size: dict[str, list[float]] = field(default_factory=dict)
    durations: dict[tuple[str, str], Hist] = field(default_factory=dict)
    durations_all: Hist = field(init=False)

    def __post_init__(self) -> None:
        # the middleware's series of a handler, method and status appear with its first answer
        self.durations_all = Hist(self.duration_bounds[1])

    @property
    def gc_objects(self) -> list[float]:
        return [c * n for c, n in zip(self.gc, _OBJECTS_PER_COLLECTION)]

    @property
    def virtual_memory(self) -> float:
        return round(self.rss * VIRTUAL_PER_RSS)

    def answer(self, status: str, seconds: float, in_bytes: float, out_bytes: float, handler: str = COMPLETIONS) -> None:
        """One request the server answered (counted when it ends, with the status of its headers):
        how long it took, the request's and the answer's Content-Length."""
        key = (handler, POST, status)
        self.answers[key] = self.answers.get(key, 0.0) + 1
        for sizes, size in ((self.request_size, in_bytes), (self.response_size, out_bytes)):
            count_sum = sizes.setdefault(handler, [0.0, 0.0])
            count_sum[0] += 1
            count_sum[1] += size
        self.durations.setdefault((handler, POST), Hist(self.duration_bounds[0])).observe(seconds)
        self.durations_all.observe(seconds)
        self.cpu += CPU_PER_ANSWER

    def step(self, dt: float, fault_age: float) -> None:
        for i, rate in enumerate(_GC_RATE):
            self.gc[i] += poisson(self.rng, rate * dt)
        self.cpu += CPU_IDLE_PER_S * dt
        if fault_age >= 0:
            for _ in range(poisson(self.rng, self.http_5xx_rate * dt)):
                self.answer("5xx", REJECT_SECONDS, request_bytes(TYPICAL_PROMPT), ERROR_BYTES)
            # a client that gave up counts as a 2xx answer (vLLM's with_cancellation returns 200 to a
            # client that left; a stream had sent its headers): none before the first timeout
            if fault_age >= self.client_timeout:
                for _ in range(poisson(self.rng, self.timeout_rate * dt)):
                    self.answer("2xx", self.client_timeout, request_bytes(TYPICAL_PROMPT), 0.0)
        growth = RSS_LEAK_PER_MIN * fault_age / 60.0 if self.leak and fault_age >= 0 else 0.0
        jitter = self.rng.uniform(-1.0, 1.0) * 2 * 1024 * 1024
        self.rss = round(RSS_BASE * (1.0 + growth) + jitter)

    @property
    def http_errors(self) -> float:
        return sum(n for (_, _, status), n in self.answers.items() if status == "5xx")

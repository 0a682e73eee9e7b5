"""`genobs simulate --engine llm-d-epp`: a simulated gateway endpoint picker (/metrics of the llm-d
EPP), names and buckets from its profile (genobs/data/llm-d-epp.yaml) for the chosen release, the
deprecated twins dual-emitted where the release does. Traffic is a deterministic function of
elapsed time: every model receives `request_rate` requests/s; its scenario sets TTFT, duration
and the error share once `fault_after` seconds have passed."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, generate_latest, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

from genobs import data as data_files
from genobs.catalog import Version, format_version, load_catalog, parse_version
from genobs.sim.simulator import metrics_url


@dataclass(frozen=True)
class GatewayProfile:
    """What the gateway sees of one model's requests: uniform ranges, seconds."""

    ttft: tuple[float, float] = (0.2, 0.5)
    duration: tuple[float, float] = (2.0, 6.0)
    errors: float = 0.0  # share of requests answered with an error


GATEWAY_SCENARIOS = {
    "healthy": GatewayProfile(),
    "ttft_degradation": GatewayProfile(ttft=(8.0, 15.0), duration=(10.0, 20.0)),
    "success_drop": GatewayProfile(errors=0.15),
}
STREAMING = 0.8  # share of streaming requests (the TTFT of the others is their whole duration)
RUNNING_PER_RPS = 4.0  # requests in flight per request/s (a few seconds each)


def _uniform_cdf(lo: float, hi: float, x: float) -> float:
    return 0.0 if x <= lo else 1.0 if x >= hi else (x - lo) / (hi - lo)


class _Histogram:
    def __init__(self, bounds: tuple[float, ...]):
        self.bounds = bounds
        self.counts = [0.0] * len(bounds)
        self.count = 0.0
        self.sum = 0.0

    def observe(self, n: float, lo: float, hi: float) -> None:
        for i, b in enumerate(self.bounds):
            self.counts[i] += n * _uniform_cdf(lo, hi, b)
        self.count += n
        self.sum += n * (lo + hi) / 2

    def buckets(self) -> list[tuple[str, float]]:
        return [*((floatToGoString(b), c) for b, c in zip(self.bounds, self.counts)), ("+Inf", self.count)]


class GatewaySimulator:
    """The same interface as sim.Simulator (start, stop, url, render, down, models, catalog, version)."""

    def __init__(
        self,
        version: str | Version | None,
        models: Mapping[str, str] | None,
        *,
        fault_after: float = 0.0,
        request_rate: float = 5.0,
        pool: str = "vllm-pool",
        clock: Callable[[], float] | None = None,
        engine: str = "llm-d-epp",
    ):
        self.catalog = catalog = load_catalog(engine)
        v = catalog.max_version if version is None else parse_version(version) if isinstance(version, str) else version
        if not catalog.min_version <= v <= catalog.max_version:
            raise ValueError(
                f"{catalog.display_name} {format_version(v)} is outside the catalog's range "
                f"{format_version(catalog.min_version)}-{format_version(catalog.max_version)}"
            )
        self.version: Version = v
        self.models = dict(models or {"demo-model": "healthy"})
        for name, scenario in self.models.items():
            if scenario not in GATEWAY_SCENARIOS:
                raise ValueError(
                    f"model {name!r}: scenario {scenario!r} is not simulated for {catalog.display_name}; "
                    f"known: {', '.join(GATEWAY_SCENARIOS)}"
                )
        self.fault_after, self.request_rate, self.pool = float(fault_after), float(request_rate), pool
        raw = data_files.load(f"{engine}.yaml")
        dual = raw.get("dual_emission")
        self.legacy: Version | None = None
        if dual and v >= parse_version(dual["since"]):
            self.legacy = parse_version(dual["legacy_release"])
        self._clock = clock or time.monotonic
        self._t0 = self._clock()
        self._last = 0.0
        self._lock = threading.Lock()
        self._state = {
            m: {
                "requests": 0.0,
                "errors": 0.0,
                "e2e": _Histogram(catalog.metric("e2e").buckets_for(v)),
                "ttft_true": _Histogram(catalog.metric("ttft").buckets_for(v)) if catalog.name("ttft", v) else None,
                "ttft_false": _Histogram(catalog.metric("ttft").buckets_for(v)) if catalog.name("ttft", v) else None,
            }
            for m in self.models
        }
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)
        self.down = threading.Event()  # never set: the gateway has no exporter_down scenario
        self._httpd = None
        self._thread = None
        self._addr = "127.0.0.1"
        self.port: int | None = None

    # -- traffic -------------------------------------------------------------------------------
    def elapsed(self) -> float:
        return max(0.0, self._clock() - self._t0)

    def _profile(self, scenario: str, t: float) -> GatewayProfile:
        return GATEWAY_SCENARIOS["healthy" if t < self.fault_after else scenario]

    def _advance(self) -> None:
        now = self.elapsed()
        dt, self._last = max(0.0, now - self._last), now
        for model, scenario in self.models.items():
            p, s = self._profile(scenario, now), self._state[model]
            n = self.request_rate * dt
            s["requests"] += n
            s["errors"] += n * p.errors
            s["e2e"].observe(n, *p.duration)
            if s["ttft_true"] is not None:
                s["ttft_true"].observe(n * STREAMING, *p.ttft)
                s["ttft_false"].observe(n * (1 - STREAMING), *p.duration)  # non-streaming: TTFT = duration

    # -- exposition ----------------------------------------------------------------------------
    def _names(self, key: str) -> list[tuple[str, bool]]:
        """(wire name, legacy?) of `key`: this release's name and, where it dual-emits, the twin."""
        out = []
        own = self.catalog.name(key, self.version)
        if own is not None:
            out.append((own, False))
        if self.legacy is not None:
            twin = self.catalog.name(key, self.legacy)
            if twin is not None and twin != own:
                out.append((twin, True))
        return out

    def _labels(self, legacy: bool) -> list[str]:
        return ["model_name", "target_model_name", "priority"] if legacy else [
            "model_name", "target_model_name", "fairness_id", "priority"
        ]

    def collect(self):
        with self._lock:
            self._advance()
            yield from self._families()

    def _families(self):
        for name, legacy in self._names("requests_finished"):
            c = CounterMetricFamily(name, "Total number of processed requests.", labels=self._labels(legacy))
            for m, s in self._state.items():
                c.add_metric(self._values(m, legacy), s["requests"])
            yield c
        for name, legacy in self._names("gateway_errors"):
            labels = [*self._labels(legacy)[:2], *(["fairness_id", "priority"] if not legacy else []), "error_code"]
            c = CounterMetricFamily(name, "Total number of request errors.", labels=labels)
            for m, s in self._state.items():
                values = [m, m, *(["", "0"] if not legacy else []), "ModelServerError"]
                c.add_metric(values, s["errors"])
            yield c
        for name, legacy in self._names("e2e"):
            labels = self._labels(legacy)[:2] if legacy else self._labels(False)
            h = HistogramMetricFamily(name, "End-to-end request latency.", labels=labels)
            for m, s in self._state.items():
                h.add_metric([m, m] if legacy else [m, m, "", "0"], s["e2e"].buckets(), s["e2e"].sum)
            yield h
        for name, _ in self._names("ttft"):
            h = HistogramMetricFamily(name, "Time to first token.", labels=[*self._labels(False), "streaming"])
            for m, s in self._state.items():
                for flag in ("true", "false"):
                    hist = s[f"ttft_{flag}"]
                    h.add_metric([m, m, "", "0", flag], hist.buckets(), hist.sum)
            yield h
        for name, legacy in self._names("requests_running"):
            g = GaugeMetricFamily(name, "Requests in flight.", labels=["model_name"] if legacy else self._labels(False))
            for m in self._state:
                g.add_metric([m] if legacy else self._values(m, False), self.request_rate * RUNNING_PER_RPS)
            yield g
        pool_values = {"pool_kv_cache_usage": 0.5, "pool_queue_size": 0.0, "pool_ready_endpoints": 4.0}
        for key, value in pool_values.items():
            for name, _ in self._names(key):
                g = GaugeMetricFamily(name, self.catalog.metric(key).help, labels=["name"])
                g.add_metric([self.pool], value)
                yield g

    def _values(self, model: str, legacy: bool) -> list[str]:
        return [model, model, "0"] if legacy else [model, model, "", "0"]

    def render(self) -> bytes:
        return generate_latest(self.registry)

    # -- HTTP ----------------------------------------------------------------------------------
    @property
    def url(self) -> str:
        if self.port is None:
            raise RuntimeError("simulator not started")
        return metrics_url(self._addr, self.port)

    def start(self, port: int = 0, addr: str = "127.0.0.1") -> int:
        httpd, thread = start_http_server(port, addr=addr, registry=self.registry)
        self._httpd, self._thread = httpd, thread
        self._addr, self.port = addr, httpd.server_address[1]
        return self.port

    def stop(self) -> None:
        httpd, thread = self._httpd, self._thread
        self._httpd = self._thread = None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if thread is not None:
            thread.join(timeout=5)

"""`genobs simulate --engine dynamo`: a simulated NVIDIA Dynamo frontend (/metrics of its HTTP
service), names and buckets from its profile (genobs/data/dynamo.yaml): dynamo_frontend_* with
label `model`, requests_total by endpoint, request_type, status and error_type. Traffic is a
deterministic function of elapsed time: every model receives `request_rate` requests/s; its
scenario sets TTFT, duration, overload errors and client cancellations once `fault_after` seconds
have passed."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily

from genobs.catalog import Version

from .gateway import RUNNING_PER_RPS, GatewaySimulator, _Histogram


@dataclass(frozen=True)
class FrontendProfile:
    """What the frontend sees of one model's requests: uniform ranges, seconds, shares."""

    ttft: tuple[float, float] = (0.2, 0.5)
    duration: tuple[float, float] = (2.0, 6.0)
    itl: tuple[float, float] = (0.01, 0.03)
    overload: float = 0.0  # status="error", error_type="overload" (also model_rejection_total)
    cancelled: float = 0.0  # status="error", error_type="cancelled" (also model_cancellation_total)


FRONTEND_SCENARIOS = {
    "healthy": FrontendProfile(),
    "ttft_degradation": FrontendProfile(ttft=(8.0, 15.0), duration=(10.0, 20.0)),
    "success_drop": FrontendProfile(overload=0.15),
    "abort_surge": FrontendProfile(cancelled=0.3),  # clients cancel: error_type="cancelled"
}
STREAMING = 0.8  # share of request_type="stream"
ENDPOINT = "chat_completions"
OUTPUT_TOKENS = 200.0  # per request


class DynamoFrontendSimulator(GatewaySimulator):
    """The same interface as sim.Simulator (start, stop, url, render, down, models, catalog, version)."""

    def __init__(
        self,
        version: str | Version | None,
        models: Mapping[str, str] | None,
        *,
        fault_after: float = 0.0,
        request_rate: float = 5.0,
        clock: Callable[[], float] | None = None,
    ):
        models = dict(models or {"demo-model": "healthy"})
        for name, scenario in models.items():
            if scenario not in FRONTEND_SCENARIOS:
                raise ValueError(
                    f"model {name!r}: scenario {scenario!r} is not simulated for the Dynamo frontend; "
                    f"known: {', '.join(FRONTEND_SCENARIOS)}"
                )
        # the base checks the release against the profile and sets up the registry and the clock
        super().__init__(
            version,
            {m: "healthy" for m in models},
            fault_after=fault_after,
            request_rate=request_rate,
            clock=clock,
            engine="dynamo",
        )
        self.models = models
        v, c = self.version, self.catalog
        self._state = {
            m: {
                "requests": {kind: 0.0 for kind in ("", "overload", "cancelled")},
                "output_tokens": 0.0,
                "e2e": _Histogram(c.metric("e2e").buckets_for(v)),
                "ttft": _Histogram(c.metric("ttft").buckets_for(v)),
                "itl": _Histogram(c.metric("itl").buckets_for(v)),
            }
            for m in models
        }

    def _profile(self, scenario: str, t: float) -> FrontendProfile:  # type: ignore[override]
        return FRONTEND_SCENARIOS["healthy" if t < self.fault_after else scenario]

    def _advance(self) -> None:
        now = self.elapsed()
        dt, self._last = max(0.0, now - self._last), now
        for model, scenario in self.models.items():
            p, s = self._profile(scenario, now), self._state[model]
            n = self.request_rate * dt
            s["requests"]["overload"] += n * p.overload
            s["requests"]["cancelled"] += n * p.cancelled
            s["requests"][""] += n * max(0.0, 1.0 - p.overload - p.cancelled)
            s["output_tokens"] += n * OUTPUT_TOKENS
            s["e2e"].observe(n, *p.duration)
            s["ttft"].observe(n, *p.ttft)
            s["itl"].observe(n * (OUTPUT_TOKENS - 1), *p.itl)

    def _families(self):
        name = self.catalog.name
        v = self.version
        labels = ["model", "endpoint", "request_type", "status", "error_type"]
        c = CounterMetricFamily(name("requests_finished", v), "Total number of LLM requests processed", labels=labels)
        for m, s in self._state.items():
            for kind, count in s["requests"].items():
                status = "success" if kind == "" else "error"
                for rtype, share in (("stream", STREAMING), ("unary", 1 - STREAMING)):
                    c.add_metric([m, ENDPOINT, rtype, status, kind], count * share)
        yield c
        cancel = CounterMetricFamily(
            name("cancellations", v), "Total number of request cancellations", labels=["model", "endpoint", "request_type"]
        )
        reject = CounterMetricFamily(
            name("rejections", v), "Total number of requests rejected due to resource exhaustion", labels=["model", "endpoint"]
        )
        for m, s in self._state.items():
            for rtype, share in (("stream", STREAMING), ("unary", 1 - STREAMING)):
                cancel.add_metric([m, ENDPOINT, rtype], s["requests"]["cancelled"] * share)
            reject.add_metric([m, ENDPOINT], s["requests"]["overload"])
        yield cancel
        yield reject
        tokens = CounterMetricFamily(name("generation_tokens", v), "Total number of output tokens generated", labels=["model"])
        for m, s in self._state.items():
            tokens.add_metric([m], s["output_tokens"])
        yield tokens
        for key in ("e2e", "ttft", "itl"):
            h = HistogramMetricFamily(name(key, v), self.catalog.metric(key).help, labels=["model"])
            for m, s in self._state.items():
                h.add_metric([m], s[key].buckets(), s[key].sum)
            yield h
        for key, per_rps in (("requests_running", RUNNING_PER_RPS), ("requests_waiting", 0.5), ("model_ready", None)):
            g = GaugeMetricFamily(name(key, v), self.catalog.metric(key).help, labels=["model"])
            for m in self._state:
                g.add_metric([m], 1.0 if per_rps is None else self.request_rate * per_rps)
            yield g

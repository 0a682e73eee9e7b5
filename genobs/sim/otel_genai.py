"""`genobs simulate --engine otel-genai | otel-genai-server`: the /metrics body of an application
recording the OpenTelemetry GenAI client instruments (or of a server recording the
`gen_ai.server.*` ones), as the Python SDK's Prometheus exporter serves it
(`underscores_with_suffixes`) or as an OpenTelemetry Collector's prometheus exporter serves it
under a UTF-8 translation (`utf8`, `utf8_without_suffixes`). Names, buckets, attributes and the
exporter's habits of each conventions release come from the profile
(genobs/data/otel-genai.yaml, otel-genai-server.yaml); tests/test_sim_real_otel_genai.py holds
the simulated bodies to the real ones. Traffic is a deterministic function of elapsed time: every
model receives `request_rate` streamed chat completions per second; its scenario sets the
latencies and the error share once `fault_after` seconds have passed."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace

from prometheus_client import generate_latest
from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily

from genobs import data as data_files
from genobs import translations
from genobs.catalog import Version, format_version, load_catalog

from .gateway import GatewaySimulator, _Histogram


@dataclass(frozen=True)
class CallProfile:
    """One model's streamed chat completions: uniform ranges in seconds and tokens, shares."""

    server_ttft: tuple[float, float] = (0.2, 0.5)
    tpot: tuple[float, float] = (0.012, 0.03)  # the server's time per output token, one token per chunk
    network: tuple[float, float] = (0.005, 0.03)  # what the application adds: the hop, TLS, its retries
    input_tokens: tuple[float, float] = (200.0, 3000.0)
    output_tokens: tuple[float, float] = (40.0, 400.0)
    errors: float = 0.0  # share of operations failing at the server (client InternalServerError, server 500)
    error_seconds: tuple[float, float] = (0.2, 0.5)


HEALTHY = CallProfile()
CALL_SCENARIOS = {
    "healthy": HEALTHY,
    # the servers' prefill slows: the first chunk is late at the application and the server alike
    "ttft_degradation": replace(HEALTHY, server_ttft=(8.0, 15.0)),
    "success_drop": replace(HEALTHY, errors=0.15),
    # retries after connection errors: only the application waits longer, the servers see the same requests
    "network_retry": replace(HEALTHY, network=(2.0, 4.0)),
}
CLIENT_ERROR, SERVER_ERROR = "InternalServerError", "500"
SERVICE = "chat-app"


class OtelGenAISimulator(GatewaySimulator):
    """The same interface as sim.Simulator (start, stop, url, render, down, models, catalog, version)."""

    def __init__(
        self,
        version: str | Version | None,
        models: Mapping[str, str] | None,
        *,
        engine: str = "otel-genai",
        translation: str | None = None,
        fault_after: float = 0.0,
        request_rate: float = 5.0,
        clock: Callable[[], float] | None = None,
    ):
        models = dict(models or {"demo-model": "healthy"})
        for name, scenario in models.items():
            if scenario not in CALL_SCENARIOS:
                raise ValueError(
                    f"model {name!r}: scenario {scenario!r} is not simulated for OpenTelemetry GenAI "
                    f"metrics; known: {', '.join(CALL_SCENARIOS)}"
                )
        # the base checks the release against the profile and sets up the registry and the clock
        super().__init__(version, {m: "healthy" for m in models}, fault_after=fault_after,
                         request_rate=request_rate, clock=clock, engine=engine)
        self.models, self.client = models, engine == "otel-genai"
        self.raw = data_files.load(f"{engine}.yaml")
        self.catalog = catalog = load_catalog(engine, translation)
        self.translation = catalog.translation
        v = self.version
        # the histograms this release defines: key -> (family name, what it observes)
        keys = ("e2e", "prompt_length", "ttft", "itl") if self.client else ("e2e", "ttft", "tpot")
        self.families = {k: catalog.name(k, v) for k in keys if catalog.name(k, v) is not None}
        self._state = {m: self._empty() for m in models}

    def _empty(self) -> dict:
        bounds = {k: self.catalog.metric(k).buckets_for(self.version) for k in self.families}
        return {
            "ok": {k: _Histogram(b) for k, b in bounds.items()},
            "failed": _Histogram(bounds["e2e"]),
            "output_tokens": _Histogram(bounds["prompt_length"]) if self.client else None,
        }

    # -- traffic -------------------------------------------------------------------------------
    def _profile(self, scenario: str, t: float) -> CallProfile:  # type: ignore[override]
        return CALL_SCENARIOS["healthy" if t < self.fault_after else scenario]

    def _advance(self) -> None:
        now = self.elapsed()
        dt, self._last = max(0.0, now - self._last), now
        for model, scenario in self.models.items():
            p, s = self._profile(scenario, now), self._state[model]
            n = self.request_rate * dt
            ok, failed = n * (1.0 - p.errors), n * p.errors
            net = p.network if self.client else (0.0, 0.0)
            chunks = sum(p.output_tokens) / 2
            ttft = (p.server_ttft[0] + net[0], p.server_ttft[1] + net[1])
            e2e = (ttft[0] + p.tpot[0] * (chunks - 1), ttft[1] + p.tpot[1] * (chunks - 1))
            s["ok"]["e2e"].observe(ok, *e2e)
            if failed:
                s["failed"].observe(failed, *p.error_seconds)
            if "ttft" in self.families:
                s["ok"]["ttft"].observe(ok, *ttft)
            if "itl" in self.families:  # one observation per chunk after the first
                s["ok"]["itl"].observe(ok * (chunks - 1), p.tpot[0] * 0.7, p.tpot[1] * 1.3)
            if "tpot" in self.families:
                s["ok"]["tpot"].observe(ok, *p.tpot)
            if self.client:
                s["ok"]["prompt_length"].observe(ok, *p.input_tokens)
                s["output_tokens"].observe(ok, *p.output_tokens)

    # -- exposition ----------------------------------------------------------------------------
    def _attribute(self, role: str) -> dict:
        """The profile's attribute `role` in this release (the provider's name changed in 1.37.0)."""
        entry = self.raw["attributes"][role]
        if isinstance(entry, list):
            v = self.version
            entry = next(e for e in entry if _within(v, e.get("since"), e.get("until")))
        return entry

    def _label(self, attribute: str) -> str:
        return translations.attribute_label(self.raw, attribute, self.translation)

    def _exporter(self) -> dict:
        """The Python exporter's habits that ship with this release (profile: python_exporter)."""
        return next(e for e in self.raw["python_exporter"] if _within(self.version, e.get("since"), e.get("until")))

    def _series(self, key: str, model: str) -> Iterator[tuple[dict[str, str], _Histogram]]:
        """(attributes, histogram) of every series of `key` for `model`, OpenTelemetry names."""
        a = self._attribute
        base = {
            a("operation")["name"]: a("operation")["value"],
            a("provider")["name"]: a("provider")["value"],
            a("request_model")["name"]: model,
            a("server_address")["name"]: a("server_address")["value"],
            a("server_port")["name"]: a("server_port")["value"],
        }
        answered = {**base, a("response_model")["name"]: model}
        s = self._state[model]
        if key == "prompt_length":
            yield {**answered, a("token_type")["name"]: "input"}, s["ok"][key]
            yield {**answered, a("token_type")["name"]: "output"}, s["output_tokens"]
            return
        yield answered, s["ok"][key]
        if key == "e2e" and s["failed"].count:  # a series exists from its first observation
            yield {**base, a("error")["name"]: CLIENT_ERROR if self.client else SERVER_ERROR}, s["failed"]

    def _families(self):
        python = self.translation == "underscores_with_suffixes"
        habits = self._exporter()
        yield self._target_info(python)
        for key, name in self.families.items():
            series = [(attrs, h) for m in self._state for attrs, h in self._series(key, m)]
            help_text = self.catalog.metric(key).help
            if python and habits["one_block_per_attribute_set"]:
                blocks: dict[tuple[str, ...], list] = {}
                for attrs, h in series:
                    blocks.setdefault(tuple(sorted(attrs)), []).append((attrs, h))
                for group in blocks.values():
                    yield self._family(name, help_text, group, sorted(group[0][0]), extra={})
            elif python:
                union = sorted({k for attrs, _ in series for k in attrs})
                scope = {"otel_scope_name": SERVICE, "otel_scope_schema_url": self._schema_url(), "otel_scope_version": ""}
                yield self._family(name, help_text, series, union, extra=scope if habits["scope_labels"] else {})
            else:
                yield self._collector_family(name, help_text, series)

    def _family(self, name: str, help_text: str, series: list, keys: list[str], extra: dict) -> HistogramMetricFamily:
        """One family block as the Python exporter writes it: `keys` on every series, "" where absent."""
        labels = [*(self._label(k) for k in keys), *extra]
        family = HistogramMetricFamily(name, help_text, labels=labels)
        for attrs, h in series:
            family.add_metric([*(str(attrs.get(k, "")) for k in keys), *extra.values()], h.buckets(), h.sum)
        return family

    def _collector_family(self, name: str, help_text: str, series: list) -> HistogramMetricFamily | None:
        """One family as a Collector's prometheus exporter writes it: each series its own attributes,
        then otel_scope_*, job and instance."""
        extra = {"otel_scope_name": SERVICE, "otel_scope_version": "", "otel_scope_schema_url": self._schema_url(),
                 "job": SERVICE, "instance": f"{SERVICE}-0"}
        merged = None
        for attrs, h in series:
            one = self._family(name, help_text, [(attrs, h)], sorted(attrs), extra)
            if merged is None:
                merged = one
            else:
                merged.samples.extend(one.samples)
        return merged

    def _target_info(self, python: bool) -> GaugeMetricFamily:
        sdk = {"telemetry.sdk.language": "python", "telemetry.sdk.name": "opentelemetry",
               "telemetry.sdk.version": self._exporter()["sdk"]}
        if python:  # every resource attribute, underscored
            resource = {"service.instance.id": f"{SERVICE}-0", "service.name": SERVICE, **sdk}
            resource = {k.replace(".", "_"): v for k, v in resource.items()}
        else:  # the Collector: job and instance for the service, the other attributes as they are
            resource = {"job": SERVICE, "instance": f"{SERVICE}-0", **sdk}
        info = GaugeMetricFamily("target_info", "Target metadata", labels=list(resource))
        info.add_metric(list(resource.values()), 1.0)
        return info

    def _schema_url(self) -> str:
        return f"https://opentelemetry.io/schemas/{format_version(self.version)}"

    def render(self) -> bytes:
        python = self.translation == "underscores_with_suffixes"
        return generate_latest(self.registry) if python else generate_latest(self.registry, escaping="allow-utf-8")


def _within(v: Version, since: str | None, until: str | None) -> bool:
    from genobs.catalog import parse_version

    return (since is None or parse_version(since) <= v) and (until is None or v < parse_version(until))

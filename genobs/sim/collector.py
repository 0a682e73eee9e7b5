"""prometheus_client Collector that turns the simulated fleet into the engine profile's metric families."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from genobs.catalog import Catalog, MetricDef, Version, load_catalog

from .api_families import ApiFamilies
from .traffic import GC_GENERATIONS, SPEC_TOKENS, Fleet, SeriesState

#: Catalog keys of the optional families (registered by vLLM only with the matching config).
SPEC_DECODE_PREFIX = "spec_decode_"
NIXL_PREFIX = "nixl_"


@dataclass(frozen=True)
class Family:
    """One metric family the simulator exposes for the chosen version."""

    key: str
    wire: str
    metric: MetricDef


#: the server of a plain deployment, in a profile's `written_by` beside the P/D roles
UNIFIED = "unified"


def plan_families(
    catalog: Catalog,
    version: Version,
    *,
    speculative_decoding: bool,
    disaggregated_prefill: bool,
    role: str = UNIFIED,
) -> list[Family]:
    """Catalog metrics that exist for `version`, are switched on and are written by a server of
    `role` (unified, prefill or decode), one per wire name.

    Before 0.10.2 the catalog maps both `itl` and `tpot` to the same wire histogram; the first
    key in catalog order (`itl`, per-token latency, which is what vLLM recorded there) wins.
    """
    out: list[Family] = []
    seen: set[str] = set()
    for key, m in catalog.metrics.items():
        wire = m.name_for(version)
        if wire is None or wire in seen or key in NOT_SIMULATED:
            continue
        if key.startswith(SPEC_DECODE_PREFIX) and not speculative_decoding:
            continue
        if key.startswith(NIXL_PREFIX) and not disaggregated_prefill:
            continue
        written_by = m.written_by if m.written_by is not None else ((m.observed_on,) if m.observed_on else None)
        if written_by is not None and role not in written_by:
            continue  # another server writes it (SGLang's KV-transfer latency: the P/D prefill server)
        seen.add(wire)
        out.append(Family(key, wire, m))
    return out


NOT_SIMULATED: frozenset[str] = frozenset()


class FleetCollector:
    """Custom Collector: advances the fleet to the clock, then renders every planned family."""

    def __init__(
        self,
        fleet: Fleet,
        families: list[Family],
        *,
        version: Version,
        engine_label: bool,
        elapsed: Callable[[], float],
        created_at: float | None = None,
        catalog: Catalog | None = None,
        static: dict[str, str] | None = None,
        bounds: dict[str, tuple[float, ...]] | None = None,
    ):
        self.catalog = catalog or load_catalog()
        self.fleet = fleet
        self.families = families
        self.version = version
        self.engine_label = engine_label
        self.elapsed = elapsed
        # the V0 engine disabled `<name>_created` samples; the catalog says from when they appear
        self.created = version >= self.catalog.created_series_since
        # labels every engine series carries with one value (SGLang: engine_type, the server's role)
        self.static = dict(self.catalog.static_labels) if static is None else dict(static)
        self.created_at = time.time() if created_at is None else created_at
        # histogram key -> bounds where they are not the profile's (vLLM's --max-model-len)
        self.bounds = dict(bounds or {})
        self.api = ApiFamilies(fleet.process, created_at=self.created_at, created=self.created)
        self.reasons = fleet.reasons
        # several engines or schedulers per model (data-parallel ranks), each a series of the fleet
        self.ranked = any(r is not None for r in fleet.ranks)
        if self.ranked and not engine_label and len(self.catalog.scheduler_labels) > 1:
            raise ValueError(f"simulator writes one scheduler label, not {self.catalog.scheduler_labels}")

    def describe(self) -> list[Metric]:
        """Empty families, so the registry knows the names (`/metrics?name[]=...` filtering works)."""
        out = []
        for f in self.families:
            name = f.wire.removesuffix("_total") if f.metric.type == "counter" else f.wire
            out.append(Metric(name, f.metric.help, f.metric.type))
        return out

    def collect(self) -> Iterator[Metric]:
        with self.fleet.lock:
            self.fleet.advance(self.elapsed())
            families = [self._family(f) for f in self.families]
        yield from families

    # -- helpers -------------------------------------------------------------------------------
    def _extra_values(self, label: str, metric: MetricDef | None = None) -> tuple[str, ...]:
        if metric is not None and metric.values_of(label):  # a label's values differ per metric (reason)
            return metric.values_of(label)
        if label == "finished_reason":
            return self.reasons
        if label == "generation":
            return GC_GENERATIONS
        if label == "position":
            return tuple(str(i) for i in range(SPEC_TOKENS))
        values = next((m.values_of(label) for m in self.catalog.metrics.values() if m.values_of(label)), ())
        if values:
            return values
        raise ValueError(f"simulator does not know the values of catalog label {label!r}")

    def _fixed(self, m: MetricDef) -> dict[str, str]:
        """The one-value labels of a family: the server's (engine_type) and the family's own (tp_rank)."""
        return {**self.static, **dict(m.wire_labels)}

    def _rank_names(self, m: MetricDef) -> list[str]:
        """The labels that tell a model's series of `m` apart: the engine's rank label (vLLM engine)
        where the family carries it, the scheduler labels (SGLang dp_rank) on the families each
        scheduler writes when there are several; none where one series sums the model's ranks."""
        if self.engine_label:
            return [self.catalog.rank_label] if m.engine_label and self.catalog.rank_label else []
        if self.ranked and self.catalog.per_scheduler(m):
            return list(self.catalog.scheduler_labels)
        return []

    def _groups(self, m: MetricDef) -> list[tuple[list[str], list[SeriesState]]]:
        """Each series of `m`: its model and rank label values (with the one-value labels), and the
        fleet series it sums: one per rank, or all of a model's ranks (SGLang's tokenizer families)."""
        fixed = list(self._fixed(m).values())
        if self._rank_names(m):
            return [([s.model, str(s.rank), *fixed], [s]) for s in self.fleet.series]
        models = dict.fromkeys(s.model for s in self.fleet.series)
        return [([model, *fixed], [s for s in self.fleet.series if s.model == model]) for model in models]

    def _label_names(self, m: MetricDef, *extra: str) -> list[str]:
        return ["model_name", *self._rank_names(m), *self._fixed(m), *extra]

    def _info_family(self, f: Family) -> Metric:
        """vllm:cache_config_info: value 1, the release's CacheConfig fields as labels (the profile's
        info_labels), one series per engine, no model_name."""
        config = f.metric.info_labels_for(self.version)
        names = (["engine"] if self.engine_label else []) + sorted(config)
        fam = GaugeMetricFamily(f.wire, f.metric.help, labels=names)
        ranks = sorted({s.rank for s in self.fleet.series if s.rank is not None}) if self.engine_label else [None]
        for rank in ranks:
            fam.add_metric(([rank] if rank is not None else []) + [config[k] for k in sorted(config)], 1.0)
        return fam

    def _family(self, f: Family) -> Metric:
        m = f.metric
        if m.process:
            return self.api.family(f.wire, m)
        if m.unit == "info":
            return self._info_family(f)
        if f.key == "scheduler_tokens":
            return self._scheduler_tokens(f)
        if m.labels == ("mode",):
            return self._prefill_modes(f)
        if f.key == "requests_finished":  # no finish reasons: stop and length finishes, aborts apart
            return self._counter_of(f, lambda s: sum(s.counter("request_success", r) for r in ("stop", "length")))
        if f.key == "requests_aborted":
            return self._counter_of(f, lambda s: s.counter("request_success", "abort"))
        if f.key == "request_errors":  # TensorRT-LLM: the server's HTTP errors per model (none simulated)
            return self._labelled(f, "http_code", {"500": lambda s: 0.0})
        if f.key == "spec_decode_drafts" and m.fixed_labels():  # drafted tokens at position 0 = drafts
            label, value = next(iter(m.fixed_labels().items()))
            return self._labelled(f, label, {value: lambda s: s.counter("spec_decode_drafts")})
        if f.key == "spec_decode_accepted_per_pos" and m.label_aliases:
            positions = {str(i): (lambda s, i=i: s.counter(f.key, str(i))) for i in range(SPEC_TOKENS)}
            return self._labelled(f, m.wire_label("position"), positions)
        if f.key == "request_success" and self.catalog.abort_reason != "abort":
            # the traffic model's `abort` is the engine's own reason (TensorRT-LLM: cancelled)
            own = {r: (lambda s, r=r: s.counter(f.key, "abort" if r == self.catalog.abort_reason else r))
                   for r in self.catalog.reasons_for(self.version)}
            return self._labelled(f, "finished_reason", own)
        if len(m.labels) > 1:
            raise ValueError(f"simulator supports at most one extra label, {f.key} has {m.labels}")
        extra = m.labels[0] if m.labels else None
        names = self._label_names(m, *m.labels)
        if extra and m.type == "histogram":
            raise ValueError(f"simulator supports extra labels on counters and gauges only, not on {f.key}")
        extra_values = self._extra_values(extra, m) if extra else ("",)
        if m.type == "counter":
            fam = CounterMetricFamily(f.wire.removesuffix("_total"), m.help, labels=names)
            for labels, group in self._groups(m):
                for v in extra_values:
                    created = self.created_at if self.created else None
                    total = sum(s.counter(f.key, v) for s in group)
                    fam.add_metric(labels + ([v] if extra else []), total, created=created)
            return fam
        if m.type == "gauge":  # a gauge of several ranks in one series is their sum
            fam = GaugeMetricFamily(f.wire, m.help, labels=names)
            for labels, group in self._groups(m):
                for v in extra_values:
                    fam.add_metric(labels + ([v] if extra else []), sum(s.gauge(f.key, v) for s in group))
            return fam
        if m.type == "histogram":
            fam = HistogramMetricFamily(f.wire, m.help, labels=names)
            for labels, group in self._groups(m):
                hists = [s.hists[f.key] for s in group if f.key in s.hists]
                if not hists:  # a key the traffic model does not feed: an empty histogram
                    buckets = [(b, 0.0) for b in (*self.bounds.get(f.key, m.buckets_for(self.version)), math.inf)]
                    total = 0.0
                else:  # the ranks' observations merged, bucket by bucket
                    counts = zip(*(h.cumulative() for h in hists))
                    buckets = [(per_rank[0][0], sum(c for _, c in per_rank)) for per_rank in counts]
                    total = sum(h.sum for h in hists)
                # the traffic model observes seconds and bytes; the engine writes its own unit
                # (milliseconds, mebibytes)
                wire = [(floatToGoString(m.wire_value(le)), c) for le, c in buckets]
                fam.add_metric(labels, wire, total * m.per_second / m.bytes_per_unit)
                if self.created:
                    fam.samples.append(Sample(f.wire + "_created", dict(zip(names, labels)), self.created_at))
            return fam
        raise ValueError(f"simulator cannot expose metric type {m.type!r} ({f.key})")

    def _counter_of(self, f: Family, value: Callable[[SeriesState], float]) -> Metric:
        """A counter without extra labels, one series per model (and rank)."""
        fam = CounterMetricFamily(f.wire.removesuffix("_total"), f.metric.help, labels=self._label_names(f.metric))
        for labels, group in self._groups(f.metric):
            fam.add_metric(labels, sum(value(s) for s in group))
        return fam

    def _labelled(self, f: Family, label: str, values: dict[str, Callable[[SeriesState], float]]) -> Metric:
        """A counter with one extra label, one series per model (and rank) and label value."""
        fam = CounterMetricFamily(f.wire.removesuffix("_total"), f.metric.help, labels=self._label_names(f.metric, label))
        for labels, group in self._groups(f.metric):
            for value, read in values.items():
                fam.add_metric([*labels, value], sum(read(s) for s in group))
        return fam

    def _prefill_modes(self, f: Family) -> Metric:
        """SGLang's sglang:prefill_effective_tokens_total: prefix-cache hits and queries are one counter
        by mode (input = computed tokens, device_hit = tokens served from the cache)."""
        fam = CounterMetricFamily(f.wire.removesuffix("_total"), f.metric.help, labels=self._label_names(f.metric, "mode"))
        for labels, group in self._groups(f.metric):
            hits = sum(s.counter("prefix_cache_hits") for s in group)
            queries = sum(s.counter("prefix_cache_queries") for s in group)
            for mode, value in (("input", queries - hits), ("device_hit", hits), ("host_hit", 0.0), ("storage_hit", 0.0)):
                fam.add_metric([*labels, mode], value)
        return fam

    def _scheduler_tokens(self, f: Family) -> Metric:
        """SGLang's sglang:realtime_tokens_total: each scheduler's tokens by mode, the modes its role
        processes (a prefill server prefill_compute and prefill_cache, a decode server decode, as in
        the real P/D bodies; a unified server all three)."""
        modes: dict[str, Callable[[SeriesState], float]] = {
            "prefill_compute": lambda s: s.counter("prefix_cache_queries") - s.counter("prefix_cache_hits"),
            "prefill_cache": lambda s: s.counter("prefix_cache_hits"),
            "decode": lambda s: s.counter("generation_tokens"),
        }
        if self.catalog.roles is not None:
            label, prefill, decode = self.catalog.roles
            role = self.static.get(label)
            if role == prefill:
                del modes["decode"]
            elif role == decode:
                modes = {"decode": modes["decode"]}
        return self._labelled(f, "mode", modes)

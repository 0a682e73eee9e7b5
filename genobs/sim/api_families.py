"""The API-server process's families (catalog entries with `process: true`): its HTTP middleware's
(vLLM: prometheus_fastapi_instrumentator) and prometheus_client's process, GC and platform
collectors, rendered from genobs.sim.api_server.ApiServer for genobs.sim.collector."""

from __future__ import annotations

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
    SummaryMetricFamily,
)
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

from genobs.catalog import MetricDef

from .api_server import GC_GENERATIONS, MAX_FDS, OPEN_FDS, ApiServer, Hist

#: prometheus_client's own collectors (process, GC, platform) write no `_created` samples; the
#: HTTP middleware's metrics are ordinary prometheus_client metrics, which do
DEFAULT_COLLECTORS = ("process_", "python_")


class ApiFamilies:
    """Renders one process-level family from the exporter's API-server state."""

    def __init__(self, api: ApiServer, *, created_at: float, created: bool):
        self.api = api
        self.created_at = created_at
        self.created = created

    def family(self, wire: str, m: MetricDef) -> Metric:
        api = self.api
        created = self.created and not wire.startswith(DEFAULT_COLLECTORS)
        stamp = self.created_at if created else None
        base = wire.removesuffix("_total")
        if m.key == "http_requests":
            fam = CounterMetricFamily(base, m.help, labels=["handler", "method", "status"])
            for labels, n in api.answers.items():
                fam.add_metric(list(labels), n, created=stamp)
            return fam
        if m.type == "summary":
            sizes = api.request_size if m.key == "http_request_size" else api.response_size
            fam = SummaryMetricFamily(wire, m.help, labels=["handler"])
            for handler, (count, total) in sizes.items():
                fam.add_metric([handler], count, total)
                if created:
                    fam.samples.append(Sample(wire + "_created", {"handler": handler}, self.created_at))
            return fam
        if m.type == "histogram":
            return self._durations(wire, m, created)
        if m.type == "counter" and "generation" in m.labels:
            per_generation = {
                "gc_collections": api.gc,
                "gc_objects_collected": api.gc_objects,
            }.get(m.key, [0.0] * len(GC_GENERATIONS))
            fam = CounterMetricFamily(base, m.help, labels=["generation"])
            for gen, value in zip(GC_GENERATIONS, per_generation):
                fam.add_metric([gen], value)
            return fam
        if m.type == "gauge" and m.labels:  # an info gauge: every label has one value (python_info)
            fam = GaugeMetricFamily(wire, m.help, labels=list(m.labels))
            fam.add_metric([m.values_of(label)[0] for label in m.labels], 1.0)
            return fam
        value = {
            "process_rss": api.rss,
            "process_start_time": self.created_at,
            "process_virtual_memory": api.virtual_memory,
            "process_cpu": api.cpu,
            "process_open_fds": OPEN_FDS,
            "process_max_fds": MAX_FDS,
        }.get(m.key, 0.0)
        if m.type == "counter":
            fam = CounterMetricFamily(base, m.help, labels=[])
        elif m.type == "gauge":
            fam = GaugeMetricFamily(wire, m.help, labels=[])
        else:
            raise ValueError(f"simulator cannot expose process metric {m.key} ({m.type}, labels {m.labels})")
        fam.add_metric([], value)
        return fam

    def _durations(self, wire: str, m: MetricDef, created: bool) -> Metric:
        """The middleware's latency histograms: by handler and method, or every answer in one."""
        series: dict[tuple[str, ...], Hist] = (
            dict(self.api.durations) if m.labels else {(): self.api.durations_all}
        )
        fam = HistogramMetricFamily(wire, m.help, labels=list(m.labels))
        for labels, hist in series.items():
            buckets = [(floatToGoString(le), c) for le, c in hist.cumulative()]
            fam.add_metric(list(labels), buckets, hist.sum)
            if created:
                fam.samples.append(Sample(wire + "_created", dict(zip(m.labels, labels)), self.created_at))
        return fam

"""`genobs doctor` for the application of a spec's `client:` block: the OpenTelemetry GenAI client
names its rules read, looked up under the application's own selector, the cause of each missing
one, and whether the application records its durations with the conventions' recommended bucket
boundaries or with the SDK's defaults (0, 5, 10, ... 10000 s), which tell a 50 ms first chunk
from a 4 s one not at all (docs/client.md)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from genobs import promql as q
from genobs.catalog import load_catalog, parse_version
from genobs.commands.doctor_gateway import Missing, live_names, server_up
from genobs.plan.model import GatewayLayer
from genobs.promhttp import Server, api

# the OpenTelemetry SDKs' default explicit bucket boundaries (ExplicitBucketHistogramAggregation)
SDK_DEFAULT_BOUNDS = (0.0, 5.0, 10.0, 25.0, 50.0, 75.0, 100.0, 250.0, 500.0, 750.0, 1000.0, 2500.0, 5000.0, 7500.0, 10000.0)

_HINTS = {
    "no_target": "No scrape target carries the application's selector labels (`up` has no series under "
    "client.selector). Name the application's scrape job after the selector's job and add the other selector "
    "labels as target labels (`genobs scrape-config SPEC` prints it), or fix client.selector.",
    "no_series": "The application's targets are under the selector but none of its GenAI client names arrives: "
    "{why}",
    "absent": "Not recorded by the application (yet): a family appears with the first call it measures; time to "
    "first chunk and time per output chunk only for streaming calls, from conventions 1.41.0 (client.conventions "
    "{conventions}).",
}
_TITLES = {
    "no_target": "no application target under the selector",
    "no_series": "no GenAI client series under the selector",
    "absent": "not recorded by the application",
}


def title(kind: str, _engine: str = "") -> str:
    return _TITLES[kind]


@dataclass
class ClientReport:
    release: str  # 'OpenTelemetry GenAI client 1.41.0'
    conventions: str
    selector: str
    present: set[str]
    needed: frozenset[str]
    target: bool
    scraped: bool
    default_buckets: list[str] = field(default_factory=list)  # histograms with the SDK's default bounds
    missing: list[Missing] = field(default_factory=list)

    def hint(self, kind: str) -> str:
        why = (
            "every scrape fails (`up` is 0): check the target's address and port (the OpenTelemetry Prometheus "
            "exporter's customary port is 9464) and the path /metrics."
            if not self.scraped
            else "the application records no GenAI call yet, or its instrumentation has no metrics reader "
            "(a PrometheusMetricReader, or an OTLP exporter to a Collector or Prometheus' OTLP receiver)."
        )
        return _HINTS[kind].format(why=why, conventions=self.conventions)


def diagnose(server: Server, layer: GatewayLayer) -> ClientReport:
    catalog = load_catalog(layer.engine)
    every = catalog.names_for(catalog.max_version)
    sel: tuple[q.Matcher, ...] = tuple((k, "=", v) for k, v in layer.selector)
    names_re = "|".join(re.escape(n) for n in sorted(every | {"up"}))
    present = live_names(server, (("__name__", "=~", names_re), *sel))
    report = ClientReport(
        release=catalog.release(parse_version(layer.engine_version)),
        conventions=layer.engine_version,
        selector=q.selector("", sel) or "(no selector)",
        present=present - {"up"},
        needed=layer.raw_metrics,
        target="up" in present,
        scraped=server_up(server, sel),
    )
    for name in sorted(n for n in report.present if n.endswith("_seconds_bucket")):
        data = api(server, "query", {"query": f"count by (le) ({q.selector(name, sel)})"}, post=True)
        bounds = {r["metric"].get("le", "") for r in data.get("result", [])}
        if _sdk_defaults(bounds):
            report.default_buckets.append(name.removesuffix("_bucket"))
    for name in sorted(report.needed - report.present):
        kind = "no_target" if not report.target else ("no_series" if not report.present else "absent")
        report.missing.append(Missing(name, kind))
    order = list(_HINTS)
    report.missing.sort(key=lambda m: (order.index(m.kind), m.metric))
    return report


def _sdk_defaults(les: set[str]) -> bool:
    """Whether a histogram's `le` values are the SDK's defaults (no bound below 5 s but 0)."""
    try:
        bounds = {float(v) for v in les if v != "+Inf"}
    except ValueError:
        return False
    return bool(bounds) and bounds <= set(SDK_DEFAULT_BOUNDS) and max(bounds) >= 1000


def lines(report: ClientReport) -> list[str]:
    out = [f"application: {report.release} under {report.selector}: {len(report.present)} of its names live"]
    out.append(f"  its rules read {len(report.needed)} raw metrics under the application's selector")
    for name in report.default_buckets:
        out.append(
            f"  {name}: the SDK's default buckets (0, 5, 10, 25, ... 10000 s), useless for seconds: set the "
            "conventions' recommended boundaries (0.01, 0.02, 0.04, ... 81.92) with a View or the instrument's "
            "explicit_bucket_boundaries_advisory"
        )
    return out

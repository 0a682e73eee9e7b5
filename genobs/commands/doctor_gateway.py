"""`genobs doctor` for the gateway of a spec's `gateway:` block (llm-d EPP, Dynamo frontend): the
raw names the gateway's rules read, looked up under the gateway's own selector, the cause of each
missing one, and which name generation of the gateway's profile the live server exposes against
the one gateway.engine_version picks (the llm-d EPP renamed its families three times)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from genobs import promql as q
from genobs.catalog import Catalog, Version, format_version, load_catalog, parse_version
from genobs.plan.model import GatewayLayer
from genobs.promhttp import Server, api


@dataclass(frozen=True)
class Missing:
    metric: str
    kind: str  # a key of _HINTS
    detail: str = ""


def live_names(server: Server, matchers: tuple[q.Matcher, ...]) -> set[str]:
    """Names of the series matching `matchers` that have a fresh sample (an instant query)."""
    data = api(server, "query", {"query": f"count by (__name__) ({q.selector('', matchers)})"}, post=True)
    return {r["metric"].get("__name__", "") for r in data.get("result", [])} - {""}


@dataclass(frozen=True)
class Generation:
    since: Version
    until: Version | None  # None: to the newest release of the profile
    names: frozenset[str]  # every wire series name its releases expose
    example: str  # the request counter's name: what the generation looks like

    def text(self) -> str:
        end = f" before {format_version(self.until)}" if self.until else " on"
        return f"{format_version(self.since)}{end} ({self.example} …)"

    def contains(self, v: Version) -> bool:
        return self.since <= v and (self.until is None or v < self.until)


@dataclass
class GatewayReport:
    release: str  # the spec's: 'llm-d EPP 0.10.0'
    selector: str
    present: set[str]
    needed: frozenset[str]
    target: bool  # `up` exists under the selector
    scraped: bool  # some `up` under the selector is 1
    live: list[Generation] = field(default_factory=list)  # newest first
    spec_generation: Generation | None = None
    missing: list[Missing] = field(default_factory=list)


def generations(catalog: Catalog) -> list[Generation]:
    """The releases of a profile grouped by the set of names they expose, oldest first."""
    bounds = {catalog.min_version}
    for m in catalog.metrics.values():
        for r in m.names:
            bounds |= {v for v in (r.since, r.until) if v is not None and catalog.min_version < v <= catalog.max_version}
    starts = sorted(bounds)
    out: list[Generation] = []
    for i, start in enumerate(starts):
        names = frozenset(catalog.names_for(start))
        until = starts[i + 1] if i + 1 < len(starts) else None
        if out and out[-1].names == names:
            out[-1] = Generation(out[-1].since, until, names, out[-1].example)
            continue
        example = catalog.name("requests_finished", start) or sorted(names)[0]
        out.append(Generation(start, until, names, example))
    return out


def _distinctive(gens: list[Generation]) -> list[frozenset[str]]:
    """Each generation's names that no other generation has (the pool gauges outlived a rename)."""
    return [g.names - frozenset().union(*(o.names for o in gens if o is not g)) for g in gens]


_HINTS = {
    "no_target": "No scrape target carries the gateway's selector labels (`up` has no series under "
    "gateway.selector). Name the gateway's scrape job after the selector's job and add the other selector labels "
    "as target labels (`genobs scrape-config SPEC` prints it beside the pods' job), or fix gateway.selector.",
    "no_series": "The gateway's targets are under the selector but none of its names arrives: {why}",
    "version": "The gateway's names differ from the ones gateway.engine_version picks: set gateway.engine_version "
    "to the {engine} release that runs (the live name generation is above).",
    "absent": "Not exported by the gateway (yet): its request families appear after the first request of their "
    "kind{absent}.",
}

_TITLES = {
    "no_target": "no gateway target under the selector",
    "no_series": "no {engine} series under the selector",
    "version": "gateway name generation mismatch",
    "absent": "not exported by the gateway",
}


def title(kind: str, engine: str) -> str:
    return _TITLES[kind].format(engine=load_catalog(engine).display_name)


def hint(kind: str, engine: str, scraped: bool = True) -> str:
    catalog = load_catalog(engine)
    port = f" (its metrics port is {catalog.metrics_port} by default)" if catalog.metrics_port else ""
    if not scraped and catalog.metrics_auth == "bearer":
        why = (
            f"every scrape fails (`up` is 0). {catalog.display_name}'s /metrics answers only an authorized bearer "
            "token by default (--metrics-endpoint-auth): give the job the token of a service account allowed to "
            "`get` the non-resource URL /metrics (`genobs scrape-config SPEC --gateway-token-file FILE`), or "
            f"start the endpoint picker with --metrics-endpoint-auth=false; else check the port{port}."
        )
    elif not scraped:
        why = f"every scrape fails (`up` is 0): check the target's address and port{port} and the path /metrics."
    else:
        why = f"wrong port or path{port}, or another exporter answers there."
    absent = "; TTFT only for streaming requests" if catalog.metric("ttft").matchers else ""
    return _HINTS[kind].format(why=why, engine=catalog.display_name, absent=absent)


def diagnose(server: Server, layer: GatewayLayer) -> GatewayReport:
    catalog = load_catalog(layer.engine)
    version = parse_version(layer.engine_version)
    gens = generations(catalog)
    every = frozenset().union(*(g.names for g in gens))
    sel: tuple[q.Matcher, ...] = tuple((k, "=", v) for k, v in layer.selector)
    names_re = "|".join(re.escape(n) for n in sorted(every | {"up"}))
    present = live_names(server, (("__name__", "=~", names_re), *sel))
    up = server_up(server, sel)
    report = GatewayReport(
        release=catalog.release(version),
        selector=q.selector("", sel) or "(no selector)",
        present=present - {"up"},
        needed=layer.raw_metrics,
        target="up" in present,
        scraped=up,
    )
    distinct = _distinctive(gens)
    report.live = [g for g, own in reversed(list(zip(gens, distinct))) if own & present]
    report.spec_generation = next((g for g in gens if g.contains(version)), None)
    report.missing = _classify(report, catalog, gens)
    return report


def server_up(server: Server, sel: tuple[q.Matcher, ...]) -> bool:
    data = api(server, "query", {"query": f"max({q.selector('up', sel)}) == 1"}, post=True)
    return bool(data.get("result"))


def _classify(report: GatewayReport, catalog: Catalog, gens: list[Generation]) -> list[Missing]:
    out = []
    for name in sorted(report.needed - report.present):
        if not report.target:
            out.append(Missing(name, "no_target"))
        elif not report.present:
            out.append(Missing(name, "no_series"))
        else:
            found = _renamed(name, catalog, report.present)
            if found:
                out.append(Missing(name, "version", found))
            else:
                out.append(Missing(name, "absent"))
    order = list(_HINTS)
    return sorted(out, key=lambda m: (order.index(m.kind), m.metric))


def _renamed(name: str, catalog: Catalog, present: set[str]) -> str:
    """'Prometheus has llm_d_epp_request_total (llm-d EPP 0.9.0 on)' for a family present under another name."""
    for m in catalog.metrics.values():
        suffixes = ("_bucket", "_sum", "_count") if m.type == "histogram" else ("",)
        suffix = next((s for s in suffixes if any(name == r.name + s for r in m.names)), None)
        if suffix is None:
            continue
        for r in reversed(m.names):
            if r.name + suffix != name and r.name + suffix in present:
                end = f" before {format_version(r.until)}" if r.until else " on"
                return f"Prometheus has {r.name + suffix} ({catalog.display_name} {format_version(r.since)}{end})"
    return ""


def generation_lines(report: GatewayReport, engine: str) -> list[str]:
    """Which name generation the live gateway exposes, beside the spec's."""
    spec = report.spec_generation
    if not report.live:
        return [f"  name generation: none live (the spec's gateway.engine_version reads {spec.text() if spec else '?'})"]
    newest, older = report.live[0], report.live[1:]
    line = f"  name generation live: {newest.text()}"
    if older:
        line += "; also the deprecated twins of " + ", ".join(g.text() for g in older) + " (dual emission)"
    lines = [line]
    if spec is not None and spec != newest:
        verb = "older" if spec.since < newest.since else "newer"
        lines.append(
            f"  version mismatch: gateway.engine_version picks {report.release}, names {spec.text()}, {verb} than the "
            f"live gateway's; set gateway.engine_version to a release from {format_version(newest.since)}"
            + (f" before {format_version(newest.until)}" if newest.until else " on")
        )
    else:
        lines.append(f"  gateway.engine_version: {report.release}, the same generation")
    return lines

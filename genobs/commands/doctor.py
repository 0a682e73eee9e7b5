"""`genobs doctor`: ask a live Prometheus which engine series (vLLM, SGLang, TensorRT-LLM) it
stores, in which metric-name dialect, and which raw metrics a spec's rules read that are missing,
with the likely cause of each; the gateway's names under its own selector (doctor_gateway.py).
Only the standard library (genobs/promhttp.py): no client library."""

from __future__ import annotations

import re
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import click

from genobs import promql as q
from genobs.catalog import Catalog, Version, format_version, load_catalog, parse_version
from genobs.commands.promopts import prometheus_options, server_from, url_option
from genobs.commands.scrape_config import colon_prefix, underscore_prefix
from genobs.errors import printable
from genobs.promhttp import PrometheusError, Server, api

# catalog key prefix -> (spec feature, how vLLM is started with it)
_FEATURE_KEYS = {
    "spec_decode_": ("speculative_decoding", "start vLLM with speculative decoding (--speculative-config)"),
    "nixl_": (
        "disaggregated_prefill",
        "start vLLM with the NIXL KV connector (--kv-transfer-config with kv_connector NixlConnector)",
    ),
    "prefix_cache": ("prefix_caching", "start vLLM with prefix caching on (--enable-prefix-caching)"),
}

_HINTS = {
    "no_target": "No scrape target carries the spec's selector labels (`up` has no series under it, so "
    "{alert:TargetDown} cannot fire either). Name the scrape job after the selector's job and add the other selector "
    "labels as target labels (`genobs scrape-config SPEC` prints such a job), or fix service.selector.",
    "no_series": "No {engine} series under the selector: the targets are scraped but export no engine metrics "
    "(wrong port or path, {engine} {hint:metrics_off}, or the engine has not started), or the series live under "
    "other labels.",
    "dialect": "",  # filled in per direction
    "version": "The metric names differ from the ones service.engine_version picks: set service.engine_version "
    "to the {engine} version that runs.",
    "rollout": "Targets under the selector export these families under another {engine} release's names (a "
    "rename separates the two releases): pods in the middle of an upgrade or a rollback. The rules read only the "
    "names of service.engine_version (and of service.other_engine_version, when the spec names one), so those pods "
    "are invisible to every rule on these families. Set service.other_engine_version to the release they run (its "
    "range is on each line); once every pod runs one release, make it service.engine_version and drop "
    "other_engine_version.",
    "feature": "A feature the spec turns on exports no series: {hows}; or turn it off in the spec ({flags}).",
    "unanswered": "The {engine} API server creates http_requests_total with the first HTTP request it answers "
    "(prometheus_fastapi_instrumentator): its process_* series are there, so it has answered none yet. Send a "
    "request or wait for traffic, then ask again; until then success and hang checks see no API-server answers.",
    "process": "The {engine} API server's process_* / python_gc_* series are missing: prometheus_client in multiprocess "
    "mode (PROMETHEUS_MULTIPROC_DIR set, e.g. several API-server processes) does not export the process and "
    "GC collectors. Scrape them another way or ignore the RSS/GC panels and {alert:ApiServerRssGrowing}.",
    "other_exporter": "Another exporter's series (NVIDIA dcgm-exporter for features.gpu_metrics) are missing under "
    "features.gpu_metrics.selector: scrape the exporter in a job those labels match, or fix the selector; the GPU "
    "alerts stay silent without them.",
    "absent": "Not exported by the scraped engine (yet): some series appear only after the first request of "
    "their kind, or the engine runs with options that drop them.",
}


@dataclass(frozen=True)
class Missing:
    metric: str
    kind: str  # a key of _HINTS
    detail: str = ""
    feature: str = ""


@dataclass
class Report:
    dialect: str  # colon | underscore | both | none
    selector: str
    present: set[str]  # vLLM series names under the selector, live
    elsewhere: set[str]  # vLLM names Prometheus knows that are not under the selector
    needed: frozenset[str] = frozenset()
    missing: list[Missing] = field(default_factory=list)


# --- Prometheus HTTP API -----------------------------------------------------------------------


_api = api  # genobs.commands.compare reads it from here


def metric_names(server: Server) -> set[str]:
    """Every metric name Prometheus knows (`/api/v1/label/__name__/values`)."""
    return set(_api(server, "label/__name__/values"))


def live_names(server: Server, matchers: tuple[q.Matcher, ...]) -> set[str]:
    """Names of the series matching `matchers` that have a fresh sample (an instant query)."""
    expr = f"count by (__name__) ({q.selector('', matchers)})"
    data = _api(server, "query", {"query": expr}, post=True)
    return {r["metric"].get("__name__", "") for r in data.get("result", [])} - {""}


# --- analysis --------------------------------------------------------------------------------


def dialect_of(names: set[str], engine: str = "vllm") -> str:
    if colon_prefix(engine) == underscore_prefix(engine):  # no ':' in the engine's names: one dialect
        return "colon" if any(n.startswith(colon_prefix(engine)) for n in names) else "none"
    colon = any(n.startswith(colon_prefix(engine)) for n in names)
    underscore = any(n.startswith(underscore_prefix(engine)) for n in names)
    return {(True, True): "both", (True, False): "colon", (False, True): "underscore"}.get((colon, underscore), "none")


def _other_dialect(name: str, engine: str) -> str | None:
    c, u = colon_prefix(engine), underscore_prefix(engine)
    if c == u:
        return None
    if name.startswith(c):
        return u + name[len(c) :]
    if name.startswith(u):
        return c + name[len(u) :]
    return None


def _catalog_index(catalog: Catalog) -> dict[str, tuple[str, set[str]]]:
    """Every wire series name of any version, in both dialects -> (catalog key, all its names)."""
    names_of: dict[str, set[str]] = {}
    for key, m in catalog.metrics.items():
        suffixes = ("_bucket", "_sum", "_count") if m.type == "histogram" else ("",)
        out = set()
        for r in m.names:
            for s in suffixes:
                out.add(r.name + s)
                out.add(r.name.replace(":", "_") + s)
        names_of[key] = out
    index: dict[str, tuple[str, set[str]]] = {}
    for key, names in names_of.items():
        for n in names:
            index.setdefault(n, (key, names))
    return index


def _version_note(catalog: Catalog, key: str, found: str) -> str:
    m = catalog.metric(key)
    suffixes = ("_bucket", "_sum", "_count") if m.type == "histogram" else ("",)
    for r in m.names:
        if found in {n + s for n in (r.name, r.name.replace(":", "_")) for s in suffixes}:
            end = f" before {format_version(r.until)}" if r.until else " on"
            return f"Prometheus has {found} ({catalog.display_name} {format_version(r.since)}{end})"
    return f"Prometheus has {found}"


def rollout(
    needed: frozenset[str], present: set[str], catalog: Catalog, version: Version, other: Version | None = None
) -> list[Missing]:
    """Needed names that are live, of families a rename separates, whose name in another release
    is live under the selector too: targets on that release (a fleet mid-upgrade or rollback)
    export only the other name, which the rules read only for service.other_engine_version.
    A name the spec's own release (or the named other release) writes too is no sign of one."""
    out: list[Missing] = []
    for key, m in catalog.metrics.items():
        own = m.renamed_in(version)
        if own is None:
            continue
        suffixes = ("_bucket", "_sum", "_count") if m.type == "histogram" else ("",)
        for s in suffixes:
            read = [n for n in (own + s, own.replace(":", "_") + s) if n in needed and n in present]
            if not read:
                continue
            found = sorted(
                n
                for r in m.names
                if not r.stand_in and r.name != own and not r.contains(version) and not (other and r.contains(other))
                for n in (r.name + s, r.name.replace(":", "_") + s)
                if n in present
            )
            if found:
                out.append(Missing(read[0], "rollout", _version_note(catalog, key, found[0]).replace(" has ", " also has ", 1)))
    return out


def _process_present(catalog: Catalog, present: set[str]) -> bool:
    """Whether another of the API server's process series is there (not multiprocess mode)."""
    names = {r.name for k, m in catalog.metrics.items() if m.process and k != "http_requests" for r in m.names}
    return bool(names & present)


def _feature_of(key: str) -> str | None:
    return next((feature for prefix, (feature, _) in _FEATURE_KEYS.items() if key.startswith(prefix)), None)


def classify(
    needed: frozenset[str],
    present: set[str],
    catalog: Catalog,
    features: frozenset[str],
) -> list[Missing]:
    """Why each needed raw metric is not in `present`, most likely cause first."""
    engine = catalog.engine
    index = _catalog_index(catalog)
    has_vllm = dialect_of(present, engine) != "none"
    no_target = "up" in needed and "up" not in present and not has_vllm
    out: list[Missing] = []
    for name in sorted(needed - present):
        if name == "up" or no_target:
            out.append(Missing(name, "no_target"))
            continue
        other = _other_dialect(name, engine)
        if other and other in present:
            out.append(Missing(name, "dialect", f"Prometheus has {other}"))
            continue
        key, all_names = index.get(name, (None, set()))
        if key is None:
            out.append(Missing(name, "absent" if has_vllm else "no_series"))
            continue
        found = sorted(n for n in all_names if n in present and n not in (name, other))
        if found:
            same_suffix = [n for n in found if n.rsplit("_", 1)[-1] == name.rsplit("_", 1)[-1]]
            out.append(Missing(name, "version", _version_note(catalog, key, (same_suffix or found)[0])))
        elif not has_vllm:
            out.append(Missing(name, "no_series"))
        elif _feature_of(key) in features:
            out.append(Missing(name, "feature", f"features.{_feature_of(key)}", feature=_feature_of(key)))
        elif catalog.metric(key).process and key == "http_requests" and _process_present(catalog, present):
            out.append(Missing(name, "unanswered"))
        elif catalog.metric(key).process:
            out.append(Missing(name, "process"))
        else:
            out.append(Missing(name, "absent"))
    order = list(_HINTS)
    return sorted(out, key=lambda m: (order.index(m.kind), m.metric))


_TITLES = {
    "no_target": "no target under the selector",
    "no_series": "no {engine} series under the selector",
    "dialect": "metric-name dialect mismatch",
    "version": "engine version mismatch",
    "rollout": "pods on another release's names, not read",
    "feature": "feature metrics absent",
    "unanswered": "no HTTP request answered yet",
    "process": "process metrics absent",
    "other_exporter": "another exporter's series absent",
    "absent": "not exported",
}


def title(kind: str, engine: str = "vllm") -> str:
    return _TITLES[kind].format(engine=load_catalog(engine).display_name)


def hint(kind: str, missing: list[Missing], spec_dialect: str, engine: str = "vllm") -> str:
    """What to do about the missing metrics of one kind, in the words of the spec's engine (its
    display name, its alert names)."""
    catalog = load_catalog(engine)
    name = catalog.display_name
    if kind == "dialect":
        if spec_dialect == "colon":
            return (
                "Prometheus stores these names with '_' instead of ':' (prometheus_client >= 0.23 escapes them when "
                "Prometheus 2.x negotiates OpenMetrics). Either set `service.metric_names: underscore` in the spec, "
                "or keep `colon` and add the metric_relabel_configs that `genobs scrape-config` prints to the scrape job."
            )
        return (
            f"Prometheus stores these names with ':' (as {name} exposes them, or relabelled by the scrape job); "
            "set `service.metric_names: colon` in the spec."
        )
    if kind == "feature":
        feats = sorted({m.feature for m in missing})
        hows = "; ".join(
            how if engine == "vllm" else f"start {name} with {f.replace('_', ' ')} on"
            for f, how in _FEATURE_KEYS.values()
            if f in feats
        )
        flags = ", ".join(f"features.{f}: false" for f in feats)
        return _HINTS["feature"].format(hows=hows, flags=flags)
    return catalog.texts(_HINTS[kind])


def _foreign(spec) -> tuple[tuple[frozenset[str], tuple[q.Matcher, ...]], ...]:
    """DCGM's series live in the exporter's own job: look for them under features.gpu_metrics.selector."""
    from genobs.plan import capacity_gpu

    gpu = capacity_gpu.settings(spec)
    if gpu is None:
        return ()
    names = frozenset(m["name"] for m in capacity_gpu.dcgm_data()["metrics"].values())
    return ((names, tuple((k, "=", v) for k, v in gpu.selector.items())),)


def diagnose(
    server: Server,
    selector: tuple[tuple[str, str], ...] = (),
    models: tuple[str, ...] = (),
    needed: frozenset[str] = frozenset(),
    features: frozenset[str] = frozenset(),
    engine: str = "vllm",
    foreign: tuple[tuple[frozenset[str], tuple[q.Matcher, ...]], ...] = (),
    releases: tuple[Version, Version | None] | None = None,
) -> Report:
    """`foreign`: needed names another job exports (DCGM), with the matchers of that job
    instead of the spec's selector. `releases`: the spec's engine_version and
    other_engine_version, to tell pods on another release's names (a rename rollout)."""
    catalog = load_catalog(engine)
    sel: list[q.Matcher] = [(k, "=", v) for k, v in selector]
    engine_re = f"{re.escape(colon_prefix(engine))}.+|{re.escape(underscore_prefix(engine))}.+"
    engine_matchers: tuple[q.Matcher, ...] = (("__name__", "=~", engine_re), *sel)
    if models:
        engine_matchers += (("model_name", "=~", q.any_of(models)),)
    present = live_names(server, engine_matchers)
    elsewhere = {n for names, _ in foreign for n in names}
    for names, matchers in foreign:
        wanted = sorted(names & needed)
        if wanted:
            present |= live_names(server, (("__name__", "=~", "|".join(re.escape(n) for n in wanted)), *matchers))
    others = sorted(n for n in needed if dialect_of({n}, engine) == "none" and n not in elsewhere)
    if others:
        present |= live_names(server, (("__name__", "=~", "|".join(re.escape(n) for n in others)), *sel))
    known = metric_names(server)
    vllm_known = {n for n in known if dialect_of({n}, engine) != "none"}
    vllm_present = {n for n in present if dialect_of({n}, engine) != "none"}
    report = Report(
        dialect=dialect_of(vllm_present, engine),
        selector=q.selector("", tuple(sel)) or "(no selector)",
        present=vllm_present,
        elsewhere=vllm_known - vllm_present,
        needed=needed,
    )
    report.missing = classify(needed, present, catalog, features)
    if releases is not None:
        report.missing += rollout(needed, present, catalog, *releases)
    order = list(_HINTS)
    missing = [Missing(m.metric, "other_exporter") if m.metric in elsewhere else m for m in report.missing]
    report.missing = sorted(missing, key=lambda m: (order.index(m.kind), m.metric))
    return report


# --- command ---------------------------------------------------------------------------------

_DIALECT_TEXT = {
    "colon": "colon ({c}…, as {engine} exposes them)",
    "underscore": "underscore ({u}…, escaped by the scrape)",
    "both": "both colon ({c}…) and underscore ({u}…) names",
    "none": "none: no {engine} series",
}


def _dialect_text(dialect: str, engine: str) -> str:
    name = load_catalog(engine).display_name
    return _DIALECT_TEXT[dialect].format(c=colon_prefix(engine), u=underscore_prefix(engine), engine=name)


@click.command("doctor")
@click.argument("spec", required=False, type=click.Path(path_type=Path))
@url_option
@prometheus_options
def doctor(spec: Path | None, url: str, **reach) -> None:
    """Check a live Prometheus against SPEC: which engine series exist, in which
    metric-name dialect, and which raw metrics the rules need are missing; with a
    `gateway:` block, the gateway's names under its selector and its name generation.

    Exit 0 when every raw metric is there, 1 when something is missing, 2 when the
    spec is wrong or Prometheus cannot be asked. Without SPEC it only reports the
    dialect of the vLLM series it finds (exit 1 when there are none).
    """
    from genobs.errors import SpecError

    try:
        server = server_from(url, **reach)
    except PrometheusError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    selector: tuple = ()
    releases: tuple | None = None
    models: tuple = ()
    needed: frozenset[str] = frozenset()
    features: frozenset[str] = frozenset()
    foreign: tuple = ()
    engine, spec_dialect, plan = "vllm", "colon", None
    if spec is not None:
        if not spec.exists() and not spec.is_symlink():  # special files: load_spec says what they are
            click.echo(f"{spec}: error: no such file", err=True)
            sys.exit(2)
        from genobs.compiler import build_plan
        from genobs.loader import load_spec

        try:
            doc = load_spec(spec)
            plan = build_plan(doc)
        except SpecError as exc:
            for p in exc.problems:
                click.echo(str(p), err=True)
            sys.exit(2)
        s = doc.spec
        selector = tuple(s.service.selector.items())
        models = tuple(s.service.models)
        needed = plan.raw_metrics - (plan.gateway.raw_metrics if plan.gateway else frozenset())
        needed -= plan.client.raw_metrics if plan.client else frozenset()
        foreign = _foreign(s)
        features = frozenset(k for k, on in s.features.model_dump().items() if on)
        engine, spec_dialect = s.service.engine, s.service.metric_names
        catalog = load_catalog(engine)
        releases = (
            parse_version(s.service.engine_version) if s.service.engine_version else catalog.max_version,
            parse_version(s.service.other_engine_version) if s.service.other_engine_version else None,
        )
    try:
        report = diagnose(server, selector, models, needed, features, engine, foreign, releases)
        gateway = None
        if plan is not None and plan.gateway is not None:
            from genobs.commands import doctor_gateway

            gateway = doctor_gateway.diagnose(server, plan.gateway)
        client = None
        if plan is not None and plan.client is not None:
            from genobs.commands import doctor_client

            client = doctor_client.diagnose(server, plan.client)
    except PrometheusError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)

    name = load_catalog(engine).display_name
    click.echo(f"Prometheus {server.shown}")
    click.echo(f"  {name} series under {report.selector}: {len(report.present)} names")
    click.echo(f"  dialect: {_dialect_text(report.dialect, engine)}")
    if report.elsewhere and report.dialect == "none":
        click.echo(
            f"  {len(report.elsewhere)} other {name} names exist outside the selector or without fresh samples "
            f"(dialect {dialect_of(report.elsewhere, engine)}), e.g. {printable(sorted(report.elsewhere)[0][:200])}"
        )
    if plan is None:
        sys.exit(0 if report.dialect != "none" else 1)
    click.echo(
        f"spec {plan.name}: {plan.engine_release}, metric_names: {spec_dialect}; "
        f"its rules read {len(needed)} raw metrics" + (" on the pods" if gateway or client else "")
    )
    _print_missing(report.missing, len(needed), list(_HINTS), title, lambda kind, group: hint(kind, group, spec_dialect, engine), engine)
    if gateway is not None:
        from genobs.commands import doctor_gateway as dg

        gw_engine = plan.gateway.engine
        click.echo(f"gateway: {gateway.release} under {gateway.selector}: {len(gateway.present)} of its names live")
        for line in dg.generation_lines(gateway, gw_engine):
            click.echo(line)
        click.echo(f"  its rules read {len(gateway.needed)} raw metrics under the gateway's selector")
        _print_missing(
            gateway.missing, len(gateway.needed), list(dg._HINTS), dg.title, lambda kind, _: dg.hint(kind, gw_engine, gateway.scraped), gw_engine
        )
    if client is not None:
        from genobs.commands import doctor_client as dc

        for line in dc.lines(client):
            click.echo(line)
        _print_missing(client.missing, len(client.needed), list(dc._HINTS), dc.title, lambda kind, _: client.hint(kind), "otel-genai")
    client_bad = client is not None and bool(client.missing or client.default_buckets)
    sys.exit(1 if report.missing or (gateway is not None and gateway.missing) or client_bad else 0)


def _print_missing(missing: list[Missing], needed: int, kinds: list[str], title_of, hint_of, engine: str) -> None:
    if not missing:
        click.echo(f"  all {needed} are present")
        return
    click.echo(f"  {len(missing)} missing:")
    width = max(len(m.metric) for m in missing)
    for kind in kinds:
        group = [m for m in missing if m.kind == kind]
        if not group:
            continue
        click.echo(f"  {title_of(kind, engine)} ({len(group)}):")
        for m in group:
            click.echo(f"    {m.metric:{width}}  {m.detail}".rstrip())
        click.echo(textwrap.fill(hint_of(kind, group), 100, initial_indent="    hint: ", subsequent_indent="      "))

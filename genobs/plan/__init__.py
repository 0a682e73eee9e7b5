"""`plan` stage: turn a loaded spec into the Plan every renderer takes, checking
that the engine version supports what the spec asks for."""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from genobs import naming
from genobs import promql as q
from genobs.catalog import format_version, load_catalog, parse_version
from genobs.errors import Problem, SpecError
from genobs.loader import SpecDocument, sort_problems
from genobs.plan import backend, gateway, links, pages, slo, slo_layers
from genobs.plan.alerts import LATENCY_ALERTS, AlertBuilder, preset_data, resolve, runbook_entries, signal_data
from genobs.plan.annotations import build_annotations
from genobs.plan.confirm import confirm_queries
from genobs.plan.context import Context
from genobs.plan.dashboard import build_dashboard_rows, build_variables, lead_row, threshold_steps
from genobs.plan.groups import panels_interval, split_recording
from genobs.plan.inhibit import build_inhibit_rules
from genobs.plan.model import AlertRule, Dashboard, Plan, RecordingRule, RuleGroup, RunbookEntry
from genobs.plan.recorder import Recorder
from genobs.plan.recording import build_recording
from genobs.plan.where import Where
from genobs.units import format_seconds, prom_duration_seconds

if TYPE_CHECKING:  # imported when a spec asks for capacity signals
    from genobs.plan.capacity import CapacityPlan

# feature -> (logical metric whose presence it needs, human explanation)
_FEATURE_NEEDS = {
    "speculative_decoding": (
        ("spec_decode_accepted_tokens", "spec_decode_acceptance_gauge"),
        "speculative-decoding acceptance metrics",
    ),
    "disaggregated_prefill": (("nixl_xfer_time",), "{hint:xfer_kv}-transfer metrics"),
    "prefix_caching": (("prefix_cache_hits", "prefix_cache_hit_rate_gauge"), "prefix-cache metrics"),
}


def _other_version(doc: SpecDocument, catalog, version, problems: list[Problem]):
    """service.other_engine_version: a known release other than engine_version, or None."""
    text = doc.spec.service.other_engine_version
    if text is None:
        return None
    where = ("service", "other_engine_version")
    try:
        other = parse_version(text)
    except ValueError as exc:
        problems.append(doc.problem(where, str(exc)))
        return None
    if not catalog.min_version <= other <= catalog.max_version:
        known = f"{format_version(catalog.min_version)} to {format_version(catalog.max_version)}"
        problems.append(
            doc.problem(where, f"{catalog.display_name} {text} is outside the versions genobs knows ({known})")
        )
        return None
    if other == version:
        problems.append(
            doc.problem(where, f"is engine_version itself ({format_version(version)}); name the other release")
        )
        return None
    return other


def _context(doc: SpecDocument, problems: list[Problem]) -> Context | None:
    spec = doc.spec
    catalog = load_catalog(spec.service.engine)
    version = catalog.max_version
    if spec.service.engine_version is not None:
        try:
            version = parse_version(spec.service.engine_version)
        except ValueError as exc:
            problems.append(doc.problem(("service", "engine_version"), str(exc)))
            return None
        if not catalog.min_version <= version <= catalog.max_version:
            problems.append(
                doc.problem(
                    ("service", "engine_version"),
                    f"{catalog.display_name} {spec.service.engine_version} is outside the versions genobs knows "
                    f"({format_version(catalog.min_version)} to {format_version(catalog.max_version)})",
                )
            )
            return None
    catalog = catalog.at(version)
    other = _other_version(doc, catalog, version, problems)
    if "job" not in spec.service.selector:
        problems.append(
            doc.problem(
                ("service", "selector"),
                f"must name the scrape job of the {catalog.display_name} targets (e.g. {{job: {catalog.engine}}}): "
                "up and process_* exist for "
                "every target, so without a job node-exporter, kube-state-metrics and Prometheus itself "
                "would fire target-down, metrics-absent and memory alerts",
            )
        )
    features = {name for name, on in spec.features.model_dump().items() if on is True}
    unavailable = set()
    for feature in sorted(features):
        keys, what = _FEATURE_NEEDS[feature]
        what = catalog.texts(what)
        if feature == "disaggregated_prefill" and catalog.missing_reason("nixl_transfer") is not None:
            continue  # prefill/decode pools without KV-transfer series: the capability notes say so
        if not any(catalog.name(k, version) for k in keys):
            unavailable.add(feature)
            known = [catalog.metrics[k] for k in keys if k in catalog.metrics]
            if not known:
                problems.append(doc.problem(("features", feature), f"{catalog.release(version)} exports no {what}"))
                continue
            ranges = "; ".join(m.versions_text() for m in known)
            problems.append(
                doc.problem(
                    ("features", feature),
                    f"{catalog.release(version)} exports no {what}; {feature} needs a version where they exist ({ranges})",
                )
            )
    roles = spec.service.roles
    if "disaggregated_prefill" in features - unavailable and roles is None:
        problems.append(
            doc.problem(
                ("features", "disaggregated_prefill"),
                "disaggregated prefill/decode needs service.roles: {label: <label>, prefill: <value>, "
                "decode: <value>}; prefill legs run with max_tokens=1 and finish as length, so "
                "finish-reason alerts and user-facing SLIs must read the decode pods only",
            )
        )
    elif roles is not None and roles.prefill == roles.decode:
        problems.append(doc.problem(("service", "roles", "decode"), "prefill and decode must be different values"))
    elif roles is not None and roles.label in spec.service.selector:
        problems.append(
            doc.problem(
                ("service", "roles", "label"), f"{roles.label!r} is fixed by service.selector; the pools cannot differ"
            )
        )
    # one backend, many clusters: the cluster is a grouping label like the others, and a dashboard variable
    where = Where(
        group_by=tuple(spec.service.group_by),
        fixed=tuple(spec.service.selector),
        cluster=spec.service.cluster_label,
        role=roles.label if roles is not None and "disaggregated_prefill" in features else None,
        rank=catalog.rank_label if catalog.has_rank_label(version) else None,
        schedulers=catalog.scheduler_labels,
    )
    return Context(
        catalog=catalog,
        version=version,
        dialect=spec.service.metric_names,
        selector=tuple(spec.service.selector.items()),
        models=tuple(spec.service.models),
        where=where,
        window=spec.rate_window,
        min_request_rate=spec.service.min_request_rate,
        features=frozenset(features),
        roles=(roles.label, roles.prefill, roles.decode) if roles is not None else None,
        spec=spec.name,
        evaluation_seconds=prom_duration_seconds(spec.evaluation_interval),
        other_version=other,
    )


def _lines(alerts: list[AlertRule]) -> dict[str, tuple]:
    """Thresholds of each signal's primary alert, drawn on its panel, red on the side that fires."""
    out: dict[str, list] = {}
    bad: dict[str, str] = {}
    for a in alerts:
        if a.threshold is not None and a.key == _primary(a.signal):
            out.setdefault(a.signal, []).append((a.severity, a.threshold))
            bad[a.signal] = "below" if a.comparator == "<" else "above"
    return {k: threshold_steps(v, bad[k]) for k, v in out.items()}


def _primary(signal: str) -> str:
    """The key of the signal's primary alert (signals.yaml)."""
    return next(n for n, a in signal_data()["alerts"].items() if a["signal"] == signal and a.get("primary"))


def _runbook(alerts: list[AlertRule], ctx: Context, rec) -> tuple[RunbookEntry, ...]:
    entries = runbook_entries(alerts, signal_data(), ctx, lambda key: confirm_queries(ctx, rec, key))
    return tuple(_with_caveat(e, ctx) for e in entries)


def _with_caveat(entry: RunbookEntry, ctx: Context) -> RunbookEntry:
    """A signal the engine gives only approximately says so in its runbook section."""
    how = ctx.catalog.caveat(entry.signal)
    if how is None:
        return entry
    return replace(entry, meaning=f"{entry.meaning} Approximation on {ctx.release}: {how}.")


def _raw_metrics(
    groups: tuple[RuleGroup, ...], ctx: Context, recorded: set[str], other: frozenset[str] = frozenset()
) -> frozenset[str]:
    """Parse every expression once; every raw series it reads must exist for the version (or
    for service.other_engine_version where a rename separates the two, or be one of the `other` exporters' series the spec names: DCGM, kube-state-metrics, a gateway)."""
    known = ctx.catalog.names_for(ctx.version) | {"up"}
    if ctx.dialect == "underscore":
        known = {n.replace(":", "_") for n in known}
    known |= other
    # around a rename (service.other_engine_version), the other release's name of a renamed family
    for key, metric in ctx.catalog.metrics.items():
        name = ctx.renamed(key)
        if name is not None:
            suffixes = ("_bucket", "_sum", "_count") if metric.type == "histogram" else ("",)
            known |= {name + s for s in suffixes}
    raw: set[str] = set()
    for g in groups:
        for rule in g.rules:
            for name in q.metric_names(rule.expr) - recorded:
                if name not in known:
                    raise AssertionError(f"{name} in {rule.expr} is not exported by {ctx.release}")
                raw.add(name)
    return frozenset(raw)


def _unreachable(ctx: Context, alerts: list[AlertRule]) -> list[str]:
    """histogram_quantile never returns more than the largest finite bucket bound."""
    out = []
    for a in alerts:
        key = LATENCY_ALERTS.get(a.key, (None,))[0]
        if key is None or a.threshold is None:
            continue
        top = max(ctx.catalog.metric(key).buckets_for(ctx.version), default=None)
        if top is not None and a.threshold >= top:
            out.append(
                f"{a.name} ({a.severity}, > {a.threshold_text}) can never fire: the largest finite bucket of "
                f"{ctx.metric(key)} in {ctx.release} is {format_seconds(top)}; lower the threshold below it"
            )
    return out


def _feature_notes(ctx: Context, rec) -> list[str]:
    """Features the version supports only in part."""
    out = []
    if ctx.catalog.missing_reason("spec_decode_acceptance") is not None:
        return out  # said in the capability lines
    if "speculative_decoding" in ctx.features and "spec_alpha" not in rec.names:
        per_pos = ctx.catalog.metrics.get("spec_decode_accepted_per_pos")
        since = f" (from {format_version(per_pos.available_from())})" if per_pos is not None else ""
        out.append(
            f"{ctx.alert('SpecDecodeAcceptanceLow')} is not generated: {ctx.release} exports no per-position "
            f"acceptance counts{since}, only accepted / draft tokens, which is below alpha by construction; "
            "the dashboard still shows that ratio"
        )
    return out


def _check_panels(rows, recorded: set[str]) -> None:
    """Every panel query parses (variables filled in) and reads recorded series only."""
    for row in rows:
        for panel in row.panels:
            for target in panel.targets:
                names = q.metric_names(re.sub(r"\$(\w+)", "x", target.expr))
                unknown = names - recorded
                if unknown:
                    raise AssertionError(f"panel {panel.title!r} reads {sorted(unknown)}, not recorded series")


def _with_capacity(rows: tuple, cap) -> tuple:
    """Capacity rows go right after the system-throughput row (goodput next to throughput)."""
    if cap is None:
        return rows
    at = next((i + 1 for i, r in enumerate(rows) if r.title.startswith("System throughput")), len(rows))
    return rows[:at] + cap.rows + rows[at:]


def _checked(doc: SpecDocument) -> tuple[Context | None, list, list[Problem]]:
    """(context, resolved alerts, problems): the version, feature, threshold and SLO checks."""
    spec = doc.spec
    problems: list[Problem] = []
    ctx = _context(doc, problems)
    overrides = {
        signal: value.model_dump(by_alias=True, exclude_unset=True)
        for signal, value in spec.alerts
        if value is not None
    }
    report = lambda path, msg: problems.append(doc.problem(path, msg))  # noqa: E731
    resolved = resolve(spec.use_case, overrides, report)
    backend.validate(doc, report)
    if ctx is not None:
        _check_observable(ctx, overrides, report)
        resolved = [a for a in resolved if ctx.catalog.missing_reason(a.signal) is None]
        gctx = gateway.gateway_context(doc, ctx, problems)
        cctx = _client_context(doc, ctx, problems)
        where = slo_layers.layers(doc, gctx, cctx, report)
        slo.validate(doc, ctx, report, only=where["pods"] if gctx or cctx else None)
        if gctx is not None:
            slo.validate(doc, gctx, report, only=where["gateway"])
        if cctx is not None:
            slo.validate(doc, cctx, report, only=where["client"])
            _client().levels(doc, cctx, resolved, problems)
        if _capacity_asked(spec):
            _capacity().validate(doc, ctx, report)
    return ctx, resolved, problems


def _check_observable(ctx: Context, overrides: dict[str, dict], report) -> None:
    """An alert the spec asks for on a signal the engine cannot observe is an error, never a
    rule that can never fire (`enabled: false` is fine: it asks for nothing)."""
    for signal, layer in overrides.items():
        why = ctx.catalog.missing_reason(signal)
        if why is not None and layer.get("enabled", True) is not False:
            report(
                ("alerts", signal),
                f"{signal} is not observable on {ctx.release}: {why}; remove alerts.{signal} "
                "(genobs cannot back an alert on it)",
            )


# signals whose alerts exist only with a feature on
_SIGNAL_FEATURE = {
    "nixl_transfer": "disaggregated_prefill",
    "nixl_failures": "disaggregated_prefill",
    "nixl_kv_expiry": "disaggregated_prefill",
    "spec_decode_acceptance": "speculative_decoding",
}


def capability_lines(ctx: Context, preset: str) -> list[str]:
    """One line per signal the engine cannot observe that the use case would alert on, and per
    signal read through an approximation: what build prints and explain says."""
    data = signal_data()
    wanted = {
        a.signal
        for a in resolve(preset, {}, lambda path, msg: None)
        if _SIGNAL_FEATURE.get(a.signal, "") in ("", *ctx.features)
    }
    out = []
    for signal, why in ctx.catalog.not_observable:
        if signal in wanted:
            out.append(
                f"{ctx.alert_refs(data['signals'][signal]['title'])} ({signal}) is not observable on {ctx.release}: {why}"
            )
    for signal, how in ctx.catalog.approximate:
        if signal in wanted:
            out.append(
                f"{ctx.alert_refs(data['signals'][signal]['title'])} ({signal}) is an approximation on {ctx.release}: {how}"
            )
    return out


def plan_problems(error: SpecError) -> SpecError:
    """The load problems of `error` plus the plan's checks on what is left of the spec
    (`error.partial`), in file order, so one run reports both kinds."""
    partial = getattr(error, "partial", None)
    if partial is None:
        return error
    where = {(p.line, p.column, p.field) for p in error.problems}
    extra = [p for p in _checked(partial)[2] if (p.line, p.column, p.field) not in where]
    return SpecError(sort_problems([*error.problems, *extra])) if extra else error


def _absolute(url: str) -> bool:
    return re.match(r"^https?://", url, re.IGNORECASE) is not None


def slo_alerts(slos) -> list[AlertRule]:
    return [r for r in (*slos.rules, *slos.long_rules) if isinstance(r, AlertRule)]


def _with_lead(rows: tuple, preset: dict) -> tuple:
    lead = preset.get("dashboard_lead")
    return (lead_row(rows, lead, preset["primary_kpi"]), *rows) if lead else rows


def _runbook_notes(base_url: str) -> list[str]:
    """Alert notifications are read in Slack, mail or a pager: a relative link opens nothing."""
    if _absolute(base_url):
        return []
    return [
        f"runbook.base_url is {base_url!r}, a relative path: runbook_url links in notifications cannot open it "
        "(set runbook.base_url to where RUNBOOK.md is published, e.g. https://git.example.com/.../RUNBOOK.md)"
    ]


def _policy_notes(ctx: Context, resolved) -> list[str]:
    """A cause the spec raised to a page is allowed, and said out loud (docs/alerting-policy.md)."""
    return [
        f"alerts.{a.signal}.critical: {ctx.alert(a.key)} pages on a cause, not on a symptom users feel, because the spec "
        "sets its critical threshold (see docs/alerting-policy.md)"
        for a in resolved
        if not a.protects and any(sev == "critical" for sev, _ in a.levels)
    ]


@dataclass(frozen=True)
class Assembly:
    """The plan stage's product: the Plan without its unit tests, and what the `testgen`
    stage generates them from (genobs.compiler runs both)."""

    plan: Plan
    ctx: Context
    rec: Recorder
    tested: tuple[RuleGroup, ...]  # the groups the alert tests load (all but the capacity group)
    cap: CapacityPlan | None
    cap_group: RuleGroup | None
    # the gateway's own groups, its context and recorded names: its alerts get tests of their own
    gateway: tuple[Context, Recorder, tuple[RuleGroup, ...]] | None = None
    client: tuple[Context, Recorder, tuple[RuleGroup, ...]] | None = None  # the same, of the application


def _releases(ctx: Context, gctx: Context | None, cctx: Context | None) -> dict[str, str]:
    return {"pods": ctx.release, "gateway": gctx.release if gctx else "", "client": cctx.release if cctx else ""}


def _gateway_row(gw) -> tuple:
    return () if gw is None else (gw.row,)


def _client():
    """genobs.plan.client, imported for specs with a client block only."""
    return importlib.import_module("genobs.plan.client")


def _client_context(doc: SpecDocument, ctx: Context, problems: list[Problem]) -> Context | None:
    return None if doc.spec.client is None else _client().client_context(doc, ctx, problems)


def _capacity():
    """genobs.plan.capacity, imported for specs that ask for capacity signals only."""
    return importlib.import_module("genobs.plan.capacity")


def _capacity_asked(spec) -> bool:
    """Whether a spec has anything genobs.plan.capacity validates or builds: a capacity block or
    use case, GPU signals, autoscaling."""
    return (
        spec.capacity is not None
        or spec.use_case == "capacity"
        or spec.features.gpu_metrics is not None
        or spec.kubernetes.autoscaling is not None
    )


def _client_row(cl) -> tuple:
    return () if cl is None else (cl.row,)


def assemble(doc: SpecDocument) -> Assembly:
    spec = doc.spec
    ctx, resolved, problems = _checked(doc)
    if problems or ctx is None:
        raise SpecError(sort_problems(problems))

    rec = build_recording(ctx)
    base_url = spec.runbook.base_url or "RUNBOOK.md"
    gctx = gateway.gateway_context(doc, ctx, problems)
    gw = None if gctx is None else gateway.build_gateway(gctx, ctx, resolved, rec.names, base_url, spec.team)
    # user-facing pages the gateway takes over: the pods' alerts keep their warnings
    pods = resolved if gw is None else gateway.demote(resolved, gw.taken_over)
    alerts = AlertBuilder(ctx, rec, base_url, spec.team).build(pods)
    cctx = _client_context(doc, ctx, problems)
    # each SLO read where the spec says (read_at), by default at the gateway where it observes the SLI
    where = slo_layers.layers(doc, gctx, cctx, lambda path, msg: None)
    pod_slos = slo.build_slos(gateway.with_slos(doc, where["pods"], True), ctx, base_url, spec.team, rec.names)
    slos = pod_slos
    gw_slos = None
    if gw is not None:
        gw_slos = gateway.marked(
            slo.build_slos(gateway.with_slos(doc, where["gateway"], True), gctx, base_url, spec.team, gw.names)
        )
        slos = gateway.merge_slos(gw_slos, pod_slos)
        gw = gateway.with_inhibit(gw, ctx, slo_alerts(gw_slos))
    cl = None
    cl_slos = None
    if cctx is not None:
        gw_alerts = frozenset(a.name for a in gw.alerts) if gw else frozenset()
        burns = (("pods", tuple(slo_alerts(pod_slos))),)
        if gw_slos is not None:
            burns += (("gateway", tuple(slo_alerts(gw_slos))),)
        gw_names = gw.names if gw else {}
        client, client_slo = _client(), importlib.import_module("genobs.plan.client_slo")
        cl = client.build_client(doc, cctx, ctx, gctx, resolved, gw_names, gw_alerts, burns, base_url, problems)
        cl_slos = gateway.marked(
            slo.build_slos(gateway.with_slos(doc, where["client"], True), cctx, base_url, spec.team, cl.names),
            "client",
        )
        slos = gateway.merge_slos(cl_slos, slos)
        cl = client_slo.with_inhibit(cl, ctx, gctx, gw_alerts, burns, slo_alerts(cl_slos))
    cap = _capacity().build(doc, ctx, rec, base_url, spec.team) if _capacity_asked(spec) else None
    readers = (*alerts, *slos.rules, *slos.long_rules, *(cap.rules if cap else ()))
    fast, panels = split_recording(tuple(rec.rules), readers)
    groups = (RuleGroup(naming.group(spec.name, "recording"), spec.evaluation_interval, fast),)
    if panels:
        interval = panels_interval(spec.evaluation_interval)
        groups += (RuleGroup(naming.group(spec.name, "recording-panels"), interval, panels),)
    groups += (RuleGroup(naming.group(spec.name, "alerts"), spec.evaluation_interval, tuple(alerts)),)
    if pod_slos.rules:
        groups += (RuleGroup(naming.group(spec.name, "slo"), spec.evaluation_interval, pod_slos.rules),)
    if pod_slos.long_rules:
        interval = slo.long_interval(spec.evaluation_interval)
        groups += (RuleGroup(naming.group(spec.name, "slo-long"), interval, pod_slos.long_rules),)
    preset = preset_data()[spec.use_case]
    title = spec.dashboard.title or f"{ctx.catalog.display_name} - {spec.name}"
    dashboard = Dashboard(
        title=title,
        uid=spec.dashboard.uid or naming.dashboard_uid(spec.name),
        folder=spec.dashboard.folder or "LLM serving",
        refresh=spec.dashboard.refresh,
        tags=("genobs", spec.service.engine, spec.use_case),
        variables=build_variables(ctx, rec),
        rows=_with_lead(
            _with_capacity(
                slos.rows + _client_row(cl) + _gateway_row(gw) + build_dashboard_rows(ctx, rec, _lines(alerts)), cap
            ),
            preset,
        ),
        runbook_url=base_url if _absolute(base_url) else None,
        annotations=build_annotations(ctx),
    )
    shown = [
        *alerts,
        *(gw.alerts if gw else ()),
        *(cl.alerts if cl else ()),
        *slo_alerts(slos),
        *(cap.rules if cap else ()),
    ]
    dashboard = replace(dashboard, panel_links=links.runbook_links(shown, dashboard.rows))
    # every alert links to its panel (dashboard.base_url), before its unit tests expect the annotation
    grafana = spec.dashboard.base_url
    groups = tuple(replace(g, rules=links.with_dashboard_urls(g.rules, grafana, dashboard)) for g in groups)
    if cap is not None:
        cap = replace(cap, rules=links.with_dashboard_urls(cap.rules, grafana, dashboard))
    keep = pages.hold(
        next((r.for_ for r in resolved if r.key == "ServingCapacityLost"), None), spec.evaluation_interval
    )
    other = pages.slack(spec.evaluation_interval)
    groups = pages.with_hold(groups, keep, other)
    tested = groups
    tested_gateway = None
    if gw is not None:  # the gateway's groups read its own series only: tested on their own
        gw_rules = links.with_dashboard_urls(gw.rules, grafana, dashboard)
        gw_groups = (RuleGroup(naming.group(spec.name, "gateway"), spec.evaluation_interval, gw_rules),)
        gw_groups += gateway.slo_groups(
            spec, gw_slos, lambda rules: links.with_dashboard_urls(rules, grafana, dashboard)
        )
        gw_groups = pages.with_hold(gw_groups, keep, other)
        groups += gw_groups
        tested_gateway = (gw.ctx, gateway.recorder(gw), gw_groups)
    tested_client = None
    if cl is not None:  # the application's group reads its own series only: tested on its own
        cl_rules = links.with_dashboard_urls(cl.rules, grafana, dashboard)
        cl_groups = (RuleGroup(naming.group(spec.name, "client"), spec.evaluation_interval, cl_rules),)
        if cl.long_rules:  # the token-usage baseline reads a day of samples: evaluated less often
            interval = slo.long_interval(spec.evaluation_interval)
            cl_groups += (RuleGroup(naming.group(spec.name, "client-long"), interval, cl.long_rules),)
        linked = lambda rules: links.with_dashboard_urls(rules, grafana, dashboard)  # noqa: E731
        cl_groups += gateway.slo_groups(spec, cl_slos, linked, "client-slo")
        cl_groups = pages.with_hold(cl_groups, keep, other)
        groups += cl_groups
        tested_client = (cl.ctx, _client().recorder(cl), cl_groups)
    cap_group = None
    if cap is not None:
        cap_group = pages.with_hold(
            (RuleGroup(naming.group(spec.name, "capacity"), spec.evaluation_interval, cap.rules),), keep, other
        )[0]
        groups += (cap_group,)
    recorded = {r.record for g in groups for r in g.rules if isinstance(r, RecordingRule)}
    raw = _raw_metrics(
        groups,
        ctx,
        recorded,
        (cap.known if cap else frozenset()) | (gw.raw if gw else frozenset()) | (cl.raw if cl else frozenset()),
    )
    _check_panels(dashboard.rows, recorded)
    plan = Plan(
        name=spec.name,
        title=title,
        use_case=spec.use_case,
        use_case_text=preset["description"],
        primary_kpi=preset["primary_kpi"],
        description=(spec.description or "").strip(),
        engine=spec.service.engine,
        engine_version=ctx.version_text,
        metric_names=ctx.dialect,
        selector_text=q.selector("", ctx.raw_matchers()) or "(none)",
        group_by=ctx.group,
        groups=groups,
        dashboard=dashboard,
        runbook=(cl.runbook if cl else ())
        + (gw.runbook if gw else ())
        + _runbook(alerts, ctx, rec)
        + (cap.runbook if cap else ()),
        slo_runbook=slos.runbook,
        warnings=tuple(_runbook_notes(base_url))
        + tuple(_policy_notes(ctx, resolved))
        + tuple(_unreachable(ctx, alerts))
        + tuple(_feature_notes(ctx, rec)),
        raw_metrics=raw,
        gateway=None if gw is None else gateway.layer(gw, raw),
        client=None if cl is None else _client().layer(cl, raw),
        capabilities=tuple(capability_lines(ctx, spec.use_case))
        + tuple(gateway.capability_lines(gctx, ctx) if gctx else ())
        + tuple(_client().capability_lines(cctx) if cctx else ()),
        slo_layers=tuple(slo_layers.lines(doc, where, _releases(ctx, gctx, cctx))),
        engine_release=ctx.release,
        alert_prefix=ctx.catalog.alert_prefix,
        alert_renames=ctx.catalog.alert_renames,
        global_slos=tuple(s.name for s in spec.slos if s.scope == "global" and ctx.cluster),
        unobservable=ctx.catalog.not_observable,
        approximations=ctx.catalog.approximate,
    )
    # the pods' inhibitions name the pods' alerts (the gateway's carry the gateway's selector)
    at_gateway = {a.name for a in gw.alerts} if gw else set()
    at_gateway |= {a.name for a in cl.alerts} if cl else set()
    at_gateway |= {a.name for a in slo_alerts(cl_slos)} if cl_slos else set()
    pod_alerts = [a for a in plan.alerts if a.name not in at_gateway]
    inhibit = build_inhibit_rules(ctx, pod_alerts) + (gw.inhibit if gw else ()) + (cl.inhibit if cl else ())
    plan = replace(plan, inhibit_rules=inhibit)
    return Assembly(
        plan=plan,
        ctx=ctx,
        rec=rec,
        tested=tested,
        cap=cap,
        cap_group=cap_group,
        gateway=tested_gateway,
        client=tested_client,
    )


__all__ = ["Assembly", "assemble", "plan_problems"]

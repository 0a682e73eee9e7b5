"""Gateway planning (part of the `plan` stage): the user-facing layer a spec's `gateway:` block
names in front of the engine pods of `service:` (docs/gateway.md).

The gateway has its own profile (genobs/data/<engine>.yaml), release and selector, so it gets its
own Context. User-facing latency and error alerts read it; each takes over the page of the pod
alert on the same signal (genobs/data/gateway.yaml): the pod alert keeps its warning, loses its
critical level, and is inhibited by the gateway alert for the same model, so one incident pages
once. Diagnosis (KV cache, queue, preemptions, speculative decoding) stays on the pods. A signal
the gateway's release cannot observe stays where it was: the pod alert keeps paging."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace

from genobs import data as data_files
from genobs import naming, translations
from genobs import promql as q
from genobs.catalog import format_version, load_catalog, parse_version
from genobs.errors import Problem
from genobs.plan import gateway_liveness, liveness
from genobs.plan.alerts import Resolved, format_threshold, labels_template, signal_data
from genobs.plan.context import Context
from genobs.plan.model import (
    AlertRule,
    GatewayLayer,
    Panel,
    RecordingRule,
    Row,
    RuleGroup,
    RunbookEntry,
    Severity,
    Target,
)
from genobs.plan.recorder import Recorder
from genobs.plan.recording import _histogram
from genobs.plan.slo import long_interval
from genobs.plan.slo_sli import MARKER

_HUMANIZE = {"seconds": "humanizeDuration", "ratio": "humanizePercentage"}
# histogram key -> recorded subject at the gateway
_LATENCIES = {"ttft": "gateway_ttft_seconds", "e2e": "gateway_e2e_seconds"}


@functools.cache
def gateway_data() -> dict:
    return data_files.load("gateway.yaml")


def gateway_context(doc, ctx: Context, problems: list[Problem]) -> Context | None:
    """The gateway's Context (its profile, release and selector; the pods' models and grouping),
    or None without a gateway block or when the block has a problem (added to `problems`)."""
    gw = doc.spec.gateway
    if gw is None:
        return None
    found = _catalog(doc, gw, problems)
    if found is None:
        return None
    catalog, version = found
    if "job" not in gw.selector:
        problems.append(
            doc.problem(
                ("gateway", "selector"),
                "must name the scrape job of the gateway (e.g. {job: llm-d-epp}): without it the gateway's "
                "queries would also read the engine pods and every other target",
            )
        )
        return None
    if dict(gw.selector) == dict(ctx.selector):
        problems.append(
            doc.problem(("gateway", "selector"), "is service.selector itself; the gateway is scraped under its own job")
        )
        return None
    return replace(
        ctx,
        catalog=catalog,
        version=version,
        dialect="colon",
        selector=tuple(gw.selector.items()),
        where=ctx.where.at(tuple(gw.selector)),
        features=frozenset(),
        roles=None,
        other_version=None,
    )


def _catalog(doc, gw, problems: list[Problem]):
    """(the gateway's profile as its release sees it, the release), or None with a problem added.
    A profile with name translations (the OpenTelemetry GenAI server metrics) is read by its
    semantic-conventions release (`conventions`) under the translation of `otel`; the others by
    their own release (`engine_version`)."""
    otel_profile = "translations" in data_files.load(f"{gw.engine}.yaml")
    own, other = ("conventions", "engine_version") if otel_profile else ("engine_version", "conventions")
    if getattr(gw, other) is not None:
        hint = "its names follow the semantic conventions" if otel_profile else "its names follow its own release"
        problems.append(
            doc.problem(("gateway", other), f"is not read for a gateway of engine {gw.engine} ({hint}); use {own}")
        )
        return None
    translation = None
    if gw.otel is not None:
        if not otel_profile:
            problems.append(
                doc.problem(("gateway", "otel"), f"is for OpenTelemetry metrics; {gw.engine} writes Prometheus names itself")
            )
            return None
        translation = gw.otel.translation
        refused = translations.refusal(translation)
        if refused is not None:
            problems.append(doc.problem(("gateway", "otel", "translation"), refused))
            return None
    catalog = load_catalog(gw.engine, translation)
    version = known_release(doc, problems, ("gateway", own), catalog, getattr(gw, own), otel_profile)
    if version is None:
        return None
    return catalog.at(version), version


def known_release(doc, problems: list, field: tuple[str, ...], catalog, given: str | None, conventions: bool):
    """The release a spec block names in `field` (`given`; the newest the profile knows when
    None), or None with a located problem when the profile does not know it. `conventions`: the
    release is an OpenTelemetry semantic-conventions one, not the engine's own."""
    if given is None:
        return catalog.max_version
    version = parse_version(given)  # the spec model checked the form
    if catalog.min_version <= version <= catalog.max_version:
        return version
    known = f"{format_version(catalog.min_version)} to {format_version(catalog.max_version)}"
    text = (
        f"semantic conventions {given} are outside the releases genobs knows ({known})"
        if conventions
        else f"{catalog.display_name} {given} is outside the versions genobs knows ({known})"
    )
    problems.append(doc.problem(field, text))
    return None


@dataclass(frozen=True)
class GatewayPlan:
    """The gateway layer in front of the pods: its context, rules, alerts, row and runbook."""

    ctx: Context
    rules: tuple[RecordingRule | AlertRule, ...]
    alerts: tuple[AlertRule, ...]
    row: Row
    runbook: tuple[RunbookEntry, ...]
    inhibit: tuple[dict, ...]
    taken_over: frozenset[str]  # keys of the pod alerts whose page the gateway took
    raw: frozenset[str]  # wire names the gateway's release exports (its rules and SLOs may read)
    names: dict[str, str]  # signal key -> recorded name, for the SLOs that read the gateway


def covered(gctx: Context) -> frozenset[str]:
    """Keys of the pod alerts whose page the gateway's release can take over."""
    out = set()
    for a in gateway_data()["alerts"].values():
        key = a.get("histogram")
        if key is None or gctx.has(key):
            out.add(a["takes_over"])
    return frozenset(out)


def demote(resolved: list[Resolved], taken: frozenset[str]) -> list[Resolved]:
    """The pods' alerts the gateway took over keep their warning and info levels, not the page."""
    out = []
    for a in resolved:
        if a.key in taken:
            levels = tuple(lv for lv in a.levels if lv[0] != "critical")
            if not levels:
                continue
            a = replace(a, levels=levels, protects="")
        out.append(a)
    return out


def _record(gctx: Context) -> Recorder:
    r = Recorder(gctx)
    g = gctx.group
    r.add("attempted", "gateway_requests", "rate", gctx.sum_rate("requests_finished"))
    errors = f"{gctx.sum_rate('gateway_errors')} or ({r.ref('attempted')} * 0)"
    r.add("failed", "gateway_request_errors", "rate", errors)
    # requests rejected before the body is parsed count as errors only: both sides are summed
    # before dividing, and the share cannot go below 0
    r.add(
        "success_ratio",
        "gateway_request_success",
        "ratio",
        f"clamp_min(1 - {q.ratio(r.ref('failed'), r.ref('attempted'))}, 0)",
    )
    for key, subject in _LATENCIES.items():
        if gctx.has(key):
            _histogram(r, key, key, subject)
    # the gateway's alerts, SLOs and panels read quantiles and buckets, no means
    means = {name for key, name in r.names.items() if key.endswith("_mean")}
    r.rules = [rule for rule in r.rules if rule.record not in means]
    r.names = {k: v for k, v in r.names.items() if v not in means}
    if gctx.has("requests_running"):  # the OpenTelemetry GenAI server metrics count no requests in flight
        r.add("running", "gateway_requests_running", "sum", q.sum_by(g, gctx.raw("requests_running")))
    if gctx.has("pool_ready_endpoints"):
        pool = tuple(label for label in g if label != "model_name") + ("name",)
        ready = gctx.raw("pool_ready_endpoints", models=False)
        r.add("pool_ready", "gateway_pool_ready_endpoints", "max", q.max_by(pool, ready))
    gateway_liveness.record(r)
    return r


def _model_labels(gctx: Context) -> tuple[str, ...]:
    """The requested model, and the served model where the gateway writes both (the EPP's target_model_name)."""
    return ("model_name", *(label for label in ("target_model_name",) if label in gctx.catalog.rank_labels_summed))


def _words(gctx: Context) -> dict[str, str]:
    """The gateway profile's words for the placeholders of genobs/data/gateway.yaml."""
    return dict(gctx.catalog.words)


def _resolved_levels(resolved_all: list[Resolved], key: str) -> Resolved | None:
    return next((a for a in resolved_all if a.key == key), None)


def _alerts(gctx: Context, r: Recorder, resolved_all: list[Resolved], base_url: str, team: str | None) -> list[AlertRule]:
    out = []
    gate = f"and {q.on(gctx.group)} {r.ref('attempted')} >= {gctx.min_request_rate:g}"
    for name, a in gateway_data()["alerts"].items():
        pod = _resolved_levels(resolved_all, a["takes_over"])
        key = a.get("histogram")
        if pod is None or (key is not None and not gctx.has(key)):
            continue
        series = r.ref(f"{key}_quantile", (("quantile", "=", "0.99"),)) if key else r.ref("success_ratio")
        for severity, threshold in pod.levels:
            text = format_threshold(pod.kind, threshold) + pod.unit
            value = f"{{{{ $value | {_HUMANIZE[pod.kind]} }}}}"
            description = " ".join(a["description"].split()).format(value=value, threshold=text, **_words(gctx))
            caveat = gctx.catalog.caveat(a["signal"])
            if caveat is not None:
                description += f" Approximation on {gctx.release}: {caveat}."
            labels = [("severity", severity), ("signal", a["signal"]), ("layer", "gateway")]
            if team:
                labels.append(("team", team))
            out.append(
                AlertRule(
                    name=name,
                    signal=a["signal"],
                    severity=severity,
                    expr=f"{series} {pod.comparator} {threshold:g} {gate}",
                    for_=pod.for_,
                    summary=a["summary"].format(threshold=text),
                    description=f"{labels_template(gctx.group)}: {description}",
                    runbook_url=naming.runbook_url(base_url, name),
                    labels=tuple(labels),
                    threshold_text=text,
                    threshold=threshold,
                    comparator=pod.comparator,
                    query=series,
                    panel=a["panel"],
                    protects=pod.page_reason() if severity == "critical" else "",
                )
            )
    return out


def _confirm(gctx: Context, ctx: Context, name: str) -> tuple[tuple[str, str], ...]:
    """From the gateway to the pods: the gateway's own view, then the same signal per pod, then
    the pods' causes."""
    a = gateway_data()["alerts"][name]
    key = a.get("histogram")
    per_pod = liveness.replica_labels(ctx)
    models = _model_labels(gctx)
    out: list[tuple[str, str]] = []
    if key is not None:
        at_gw = gctx.in_seconds(key, q.quantile(0.99, models, gctx.rate(key, "_bucket")))
        out.append((f"gateway {key} p99 per requested and target model", at_gw))
        if ctx.has(key):
            pods = ctx.in_seconds(key, q.quantile(0.99, per_pod, ctx.rate(key, "_bucket")))
            out.append((f"pods' {key} p99 per instance", pods))
    else:
        kinds = gctx.catalog.metric("gateway_errors").labels
        errors = q.sum_by(("model_name", *kinds), gctx.rate("gateway_errors"))
        out.append((f"gateway errors per second by model and {', '.join(kinds)}", errors))
        if ctx.has("request_success"):
            reasons = q.sum_by((*per_pod, "finished_reason"), ctx.rate("request_success"))
            out.append(("pods' finished requests per second by instance and finish reason", reasons))
    out.append(("pods' waiting requests per instance", q.sum_by(per_pod, ctx.raw("requests_waiting"))))
    out.append(("pods' KV cache usage per instance (max over ranks)", q.max_by(per_pod, ctx.raw("kv_cache_usage"))))
    if gctx.has("pool_ready_endpoints"):
        pool = q.selector(gctx.metric("pool_ready_endpoints"), gctx.raw_matchers(models=False))
        out.append(("gateway ready endpoints per InferencePool", pool))
    return tuple(out)


def _runbook(gctx: Context, ctx: Context, alerts: list[AlertRule]) -> tuple[RunbookEntry, ...]:
    return runbook_entries(
        gctx,
        alerts,
        gateway_data()["alerts"],
        _words(gctx),
        lambda name: _confirm(gctx, ctx, name),
        lambda check: "ready endpoints" not in check or gctx.has("pool_ready_endpoints"),
    )


def runbook_entries(
    lctx: Context,
    alerts: list[AlertRule],
    data: dict,
    words: dict[str, str],
    confirm: Callable[[str], tuple[tuple[str, str], ...]],
    keep_check: Callable[[str], bool] = lambda check: True,
) -> tuple[RunbookEntry, ...]:
    """One runbook entry per alert name of a layer in front of the pods (gateway, application),
    its severities merged: texts from the layer's alert data with `words` filled in, the catalog's
    caveat of the signal, the next checks `keep_check` keeps and the confirm queries of `confirm`."""
    entries: dict[str, RunbookEntry] = {}
    for a in alerts:
        sev = Severity(a.severity, f"{a.comparator} {a.threshold_text}".strip(), a.for_)
        if a.name in entries:
            e = entries[a.name]
            entries[a.name] = replace(e, severities=(*e.severities, sev), protects=e.protects or a.protects)
            continue
        d = data[a.name]
        meaning = " ".join(d["meaning"].split()).format(**words)
        caveat = lctx.catalog.caveat(a.signal)
        if caveat is not None:
            meaning += f" Approximation on {lctx.release}: {caveat}."
        entries[a.name] = RunbookEntry(
            alert=a.name,
            anchor=naming.anchor(a.name),
            signal=a.signal,
            title=d["title"],
            meaning=meaning,
            first_action=" ".join(d["first_action"].split()).format(**words),
            next_checks=tuple(check.format(**words) for check in d["next_checks"] if keep_check(check)),
            severities=(sev,),
            summary=a.summary,
            query=a.query,
            panel=a.panel,
            expr=a.expr,
            confirm=confirm(a.name),
            protects=a.protects,
        )
    return tuple(entries.values())


def _matcher(label: str, op: str, value: str) -> str:
    return f"{label}{op}{q.quote(value)}"


def _inhibit(gctx: Context, ctx: Context, alerts: list[AlertRule], burns: tuple[AlertRule, ...] = ()) -> tuple[dict, ...]:
    """A gateway page silences its own warning; a gateway alert silences the warnings of the pod
    alert it took over, for the same model (labels both sides carry with the same meaning); an SLO
    read at the gateway burning fast silences its slow burn and the gateway's and the pods'
    threshold alerts of its signal (a fast burn every severity of the gateway's, a slow burn warnings)."""
    names = sorted({a.name for a in alerts})
    if not names:
        return ()
    gw_fixed = [_matcher(k, "=", v) for k, v in gctx.selector]
    pod_fixed = [_matcher(k, "=", v) for k, v in ctx.selector]
    shared = [
        label
        for label in gctx.group
        if label in ctx.group and dict(gctx.selector).get(label) == dict(ctx.selector).get(label)
    ]
    own = _matcher("alertname", "=~", q.any_of(names))
    rules = [
        {
            "source_matchers": [own, 'severity="critical"', *gw_fixed],
            "target_matchers": [own, 'severity=~"warning|info"', *gw_fixed],
            "equal": ["alertname", *gctx.group],
        }
    ]
    rules += _burn_rules(gctx, ctx, alerts, burns, gw_fixed, pod_fixed, shared)
    for name in names:
        pod = ctx.alert(gateway_data()["alerts"][name]["takes_over"])
        rules.append(
            {
                "source_matchers": [_matcher("alertname", "=", name), *gw_fixed],
                "target_matchers": [_matcher("alertname", "=", pod), 'severity=~"warning|info"', *pod_fixed],
                "equal": ["signal", *shared],
            }
        )
    return tuple(rules)


def _burn_rules(gctx, ctx, alerts, burns, gw_fixed, pod_fixed, shared) -> list[dict]:
    fast = sorted({a.name for a in burns if a.severity == "critical"})
    slow = sorted({a.name for a in burns if a.severity != "critical"})
    out: list[dict] = []
    if fast and slow:
        out.append(
            {
                "source_matchers": [_matcher("alertname", "=~", q.any_of(fast)), *gw_fixed],
                "target_matchers": [_matcher("alertname", "=~", q.any_of(slow)), *gw_fixed],
                "equal": ["slo", *gctx.group],
            }
        )
    signals = {a.signal for a in burns}
    mine = sorted({a.name for a in alerts if a.signal in signals})
    theirs = sorted({ctx.alert(gateway_data()["alerts"][n]["takes_over"]) for n in mine})
    for source, severities in ((fast, ""), (slow, "warning|info")):
        if not source or not mine:
            continue
        sev = [_matcher("severity", "=~", severities)] if severities else []
        out.append(
            {
                "source_matchers": [_matcher("alertname", "=~", q.any_of(source)), *gw_fixed],
                "target_matchers": [_matcher("alertname", "=~", q.any_of(mine)), *sev, *gw_fixed],
                "equal": ["signal", *gctx.group],
            }
        )
        out.append(
            {
                "source_matchers": [_matcher("alertname", "=~", q.any_of(source)), *gw_fixed],
                "target_matchers": [
                    _matcher("alertname", "=~", q.any_of(theirs)), 'severity=~"warning|info"', *pod_fixed
                ],
                "equal": ["signal", *shared],
            }
        )
    return out


def _row(gctx: Context, r: Recorder, pod_names: dict[str, str], ctx: Context) -> Row:
    m = gctx.panel_matchers()
    by = q.by(gctx.group)
    panels = []
    for key, title in (("ttft", "Gateway time to first token"), ("e2e", "Gateway end-to-end latency")):
        if f"{key}_quantile" not in r.names:
            continue
        targets = [
            Target(
                q.selector(r.names[f"{key}_quantile"], (*m, ("quantile", "=~", "0.5|0.99"))),
                "gateway p{{quantile}} {{model_name}}",
            )
        ]
        if f"{key}_quantile" in pod_names:
            pods = q.selector(pod_names[f"{key}_quantile"], (*ctx.panel_matchers(), ("quantile", "=", "0.99")))
            targets.append(Target(pods, "pods p99 {{model_name}}"))
        panels.append(
            Panel(
                title,
                f"p50 and p99 at the gateway ({gctx.release}) beside the pods' p99: the gap is routing and the "
                "network hop; both high means the pods are the cause.",
                "s",
                tuple(targets),
            )
        )
    panels.append(
        Panel(
            "Gateway request success",
            "Share of requests the gateway answered without an error (errors include requests it rejected "
            "before routing).",
            "percentunit",
            (Target(f"sum {by} ({q.selector(r.names['success_ratio'], m)})", "{{model_name}}"),),
            min=0,
            max=1,
        )
    )
    traffic = [Target(q.selector(r.names["attempted"], m), "received {{model_name}}")]
    if "running" in r.names:
        traffic.append(Target(q.selector(r.names["running"], m), "in flight {{model_name}}"))
    panels.append(
        Panel(
            "Gateway requests per second",
            "Requests received by the gateway"
            + (", and requests in flight through it." if "running" in r.names else " (it counts none in flight)."),
            "reqps",
            tuple(traffic),
        )
    )
    if "pool_ready" not in r.names:
        return Row(f"Gateway ({gctx.release})", tuple(panels))
    panels.append(
        Panel(
            "Gateway ready endpoints",
            "Ready endpoints (pods) of each InferencePool, as the endpoint picker sees them.",
            "short",
            (Target(q.selector(r.names["pool_ready"], [(k, "=", v) for k, v in gctx.selector]), "{{name}}"),),
            min=0,
        )
    )
    return Row(f"Gateway ({gctx.release})", tuple(panels))


def build_gateway(
    gctx: Context, ctx: Context, resolved_all: list[Resolved], pod_names: dict[str, str], base_url: str, team: str | None
) -> GatewayPlan:
    r = _record(gctx)
    alerts = _alerts(gctx, r, resolved_all, base_url, team)
    live = gateway_liveness.build(gctx, r, resolved_all, base_url, team)
    row = _row(gctx, r, pod_names, ctx)
    return GatewayPlan(
        ctx=gctx,
        rules=(*r.rules, *alerts, *live.alerts),
        alerts=(*alerts, *live.alerts),
        row=replace(row, panels=(*row.panels, live.panel)),
        runbook=_runbook(gctx, ctx, alerts) + live.runbook,
        inhibit=_inhibit(gctx, ctx, alerts),
        taken_over=covered(gctx),
        raw=frozenset(gctx.catalog.names_for(gctx.version)),
        names=dict(r.names),
    )


def recorder(gw: GatewayPlan) -> Recorder:
    """The gateway's recorded names behind a Recorder, as the generated tests read them."""
    r = Recorder(gw.ctx)
    r.names = dict(gw.names)
    return r


def probe_keys() -> dict[str, str]:
    """Each gateway alert -> the engine-neutral key of the pod alert whose fault makes it fire
    (the one it takes over, or whose levels it reads): the generated tests' probes."""
    data = gateway_data()
    return {
        **{name: a["takes_over"] for name, a in data["alerts"].items()},
        **{name: a["levels_of"] for name, a in data["liveness"].items()},
    }


def layer(gw: GatewayPlan, raw: frozenset[str]) -> GatewayLayer:
    """What the live-Prometheus commands need of the gateway; `raw`: every raw name the plan reads."""
    g = gw.ctx
    signals = {a["signal"] for a in gateway_data()["alerts"].values() if a.get("histogram") is None or g.has(a["histogram"])}
    return GatewayLayer(
        engine=g.catalog.engine,
        engine_version=g.version_text,
        release=g.release,
        selector=g.selector,
        models=g.models,
        raw_metrics=raw & gw.raw,
        signals=frozenset(signals),
    )


def capability_lines(gctx: Context, ctx: Context) -> list[str]:
    """One line per user-facing signal the gateway's release cannot observe: the pods keep its page."""
    out = []
    for a in gateway_data()["alerts"].values():
        key = a.get("histogram")
        if key is not None and not gctx.has(key):
            why = gctx.catalog.missing_reason(key) or f"{gctx.release} has no {key} histogram"
            out.append(
                f"{a['title']} ({a['signal']}) is not observable on {gctx.release}: {why}; "
                f"{ctx.alert(a['takes_over'])} keeps paging from the pods ({ctx.release})"
            )
    # the profile's other blind spots (the Dynamo frontend's TPOT, queue time, finish reasons...):
    # the pods' own series back those signals
    said = {a.get("histogram") for a in gateway_data()["alerts"].values()}
    titles = signal_data()["signals"]
    for signal, why in gctx.catalog.not_observable:
        if signal in said or gctx.has(signal):
            continue
        title = ctx.alert_refs(titles[signal]["title"]) if signal in titles else _TITLES.get(signal, signal)
        out.append(f"{title} ({signal}) is not observable on {gctx.release}: {why}; read on the pods ({ctx.release})")
    return out


_TITLES = {"tpot": "Time per output token", "itl": "Inter-token latency"}


def with_slos(doc, indices: frozenset[int], inside: bool):
    """`doc` with only the SLOs at `indices` (inside) or only the others."""
    kept = [s for i, s in enumerate(doc.spec.slos) if (i in indices) == inside]
    return replace(doc, spec=doc.spec.model_copy(update={"slos": kept}))


def marked(slos, layer: str = "gateway"):
    """An SloPlan of a layer in front of the pods with its model marker labelled `layer`: two rules
    recording one name with the same labels would be ambiguous. The application's burns also
    carry layer="client", as its other alerts do."""
    own = tuple(
        replace(r, labels=(*r.labels, ("layer", layer))) if getattr(r, "record", None) == MARKER else r
        for r in slos.rules
    )
    slos = replace(slos, rules=own)
    if layer != "client":
        return slos

    def labelled(rules):
        return tuple(
            replace(r, labels=(*r.labels[:1], ("layer", layer), *r.labels[1:])) if isinstance(r, AlertRule) else r
            for r in rules
        )

    return replace(slos, rules=labelled(slos.rules), long_rules=labelled(slos.long_rules))


def slo_groups(spec, slos, linked, part: str = "gateway-slo") -> tuple[RuleGroup, ...]:
    """A front layer's SLO rules in their own groups (gateway-slo.rules.yaml, client-slo.rules.yaml), beside the pods'."""
    out: tuple[RuleGroup, ...] = ()
    if slos is not None and slos.rules:
        out += (RuleGroup(naming.group(spec.name, part), spec.evaluation_interval, linked(slos.rules)),)
    if slos is not None and slos.long_rules:
        interval = long_interval(spec.evaluation_interval)
        out += (RuleGroup(naming.group(spec.name, f"{part}-long"), interval, linked(slos.long_rules)),)
    return out


def merge_slos(first, second):
    """Two SloPlans as one (dashboard rows, runbook): the gateway's SLOs first."""
    return replace(
        first,
        rules=first.rules + second.rules,
        rows=first.rows + second.rows,
        runbook=first.runbook + second.runbook,
        long_rules=first.long_rules + second.long_rules,
    )


def with_inhibit(gw: GatewayPlan, ctx: Context, burns: list[AlertRule]) -> GatewayPlan:
    """The gateway's inhibitions, with the burns of the SLOs read at the gateway: those of the
    alerts that take over a pod alert (the gateway's own liveness alerts silence nothing)."""
    took = [a for a in gw.alerts if a.name in gateway_data()["alerts"]]
    return replace(gw, inhibit=_inhibit(gw.ctx, ctx, took, tuple(burns)))

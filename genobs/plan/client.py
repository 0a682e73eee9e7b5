"""Client planning (part of the `plan` stage): the application's view a spec's `client:` block
names (docs/client.md), read from the OpenTelemetry GenAI client metrics its instrumentation
records (genobs/data/otel-genai.yaml, under the name translation of its path into Prometheus).

The client has its own profile, release (the semantic conventions its instrumentation follows)
and selector, so it gets its own Context, like the gateway (plan/gateway.py): the spec's grouping
and cluster, the application's instances aggregated away, its model label copied to model_name
(and renamed to the pods' names where client.model_names says so). What users' applications
measured pages first: a client page silences the gateway's and the pods' alerts of the same
signal and model, a client warning their warnings. The gateway and the pods keep their own
alerts, which page when the application's series are missing."""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace

from genobs import data as data_files
from genobs import naming, translations
from genobs import promql as q
from genobs.catalog import load_catalog
from genobs.errors import Problem
from genobs.plan import client_tokens
from genobs.plan.alerts import Resolved, format_threshold, labels_template
from genobs.plan.context import Context
from genobs.plan.gateway import _matcher, known_release, runbook_entries
from genobs.plan.model import AlertRule, GatewayLayer, Panel, RecordingRule, Row, RunbookEntry, Target
from genobs.plan.recorder import Recorder
from genobs.plan.recording import _histogram
from genobs.units import parse_ratio, parse_seconds

ROW_TITLE = "Application (OpenTelemetry GenAI)"
# histogram key -> recorded subject at the client
_LATENCIES = {
    "ttft": "client_ttft_seconds",
    "e2e": "client_operation_duration_seconds",
    "itl": "client_chunk_interval_seconds",
}
_HUMANIZE = {"seconds": "humanizeDuration", "ratio": "humanizePercentage"}


@functools.cache
def client_data() -> dict:
    return data_files.load("client.yaml")


def client_context(doc, ctx: Context, problems: list[Problem]) -> Context | None:
    """The client's Context (its profile under its translation, its release and selector; the
    pods' models and grouping), or None without a client block or when the block has a problem
    (added to `problems`)."""
    cl = doc.spec.client
    if cl is None:
        return None
    translation = cl.otel.translation
    refused = translations.refusal(translation)
    if refused is not None:
        problems.append(doc.problem(("client", "otel", "translation"), refused))
        return None
    catalog = load_catalog("otel-genai", translation)
    version = known_release(doc, problems, ("client", "conventions"), catalog, cl.conventions, True)
    if version is None:
        return None
    if "job" not in cl.selector:
        problems.append(
            doc.problem(
                ("client", "selector"),
                "must name the scrape job of the application (e.g. {job: chat-frontend}): without it the "
                "client's queries would read every target that records GenAI client metrics",
            )
        )
        return None
    others = [dict(ctx.selector)]
    if doc.spec.gateway is not None:
        others.append(dict(doc.spec.gateway.selector))
    if dict(cl.selector) in others:
        problems.append(
            doc.problem(
                ("client", "selector"),
                "is the selector of the pods or of the gateway; the application is scraped under its own job",
            )
        )
        return None
    for mine, pods in cl.model_names.items():
        if ctx.models and pods not in ctx.models:
            problems.append(
                doc.problem(
                    ("client", "model_names", mine),
                    f"{pods!r} is not one of service.models ({', '.join(ctx.models)})",
                )
            )
            return None
    return replace(
        ctx,
        catalog=catalog.at(version),
        version=version,
        dialect="colon",
        selector=tuple(cl.selector.items()),
        where=ctx.where.at(tuple(cl.selector)),
        features=frozenset(),
        roles=None,
        other_version=None,
        model_map=tuple(cl.model_names.items()),
    )


@dataclass(frozen=True)
class Level:
    key: str  # the client's alert in client.yaml
    pod_key: str  # the pod alert (signals.yaml) whose levels are the default, and which it silences
    kind: str  # seconds | ratio
    comparator: str
    levels: tuple[tuple[str, float], ...]
    for_: str
    protects: str  # the page's annotation


def levels(doc, cctx: Context, resolved_all: list[Resolved], problems: list[Problem]) -> list[Level]:
    """The client's alerts with their thresholds: the spec's client.alerts, or the pods' own
    levels of the same signal (an error ratio is 1 - the success level)."""
    spec_alerts = doc.spec.client.alerts
    out = []
    for name, a in client_data()["alerts"].items():
        key = a.get("histogram")
        if key is not None and not cctx.has(key):
            continue
        pod = next((r for r in resolved_all if r.key == a["levels_of"]), None)
        field = a["field"]
        own = getattr(spec_alerts, field)
        kind = "seconds" if key else "ratio"
        parse = parse_seconds if key else parse_ratio
        found: list[tuple[str, float]] = []
        for severity in ("critical", "warning"):
            if own is not None and severity in own.model_fields_set:
                value = getattr(own, severity)
                if value is None:
                    continue
                try:
                    found.append((severity, parse(value)))
                except ValueError as exc:
                    problems.append(doc.problem(("client", "alerts", field, severity), str(exc)))
                continue
            if pod is None:
                continue
            default = dict(pod.levels).get(severity)
            if default is not None:
                found.append((severity, default if key else round(1 - default, 12)))
        if not found:
            continue
        for_ = (own.for_ if own is not None else None) or (pod.for_ if pod is not None else "5m")
        protects = pod.page_reason() if pod is not None else ""
        out.append(Level(name, a["levels_of"], kind, ">", tuple(found), for_, protects))
    return out


def _record(cctx: Context, shift: client_tokens.Shift | None) -> tuple[Recorder, list[RecordingRule]]:
    """The client group's rules (in the Recorder) and those of its slower companion group."""
    r = Recorder(cctx)
    r.add("attempted", "client_requests", "rate", cctx.sum_rate("requests_finished"))
    r.add("failed", "client_request_errors", "rate", f"{cctx.sum_rate('errors')} or ({r.ref('attempted')} * 0)")
    r.add("error_ratio", "client_request_errors", "ratio", q.ratio(r.ref("failed"), r.ref("attempted")))
    for key, subject in _LATENCIES.items():
        if cctx.has(key):
            _histogram(r, key, key, subject)
    # the client's alerts and panels read quantiles, no means
    means = {name for key, name in r.names.items() if key.endswith("_mean")}
    r.rules = [rule for rule in r.rules if rule.record not in means]
    r.names = {k: v for k, v in r.names.items() if v not in means}
    r.add("prompt_tps", "client_prompt_tokens", "rate", cctx.sum_rate("prompt_tokens"))
    r.add("generation_tps", "client_generation_tokens", "rate", cctx.sum_rate("generation_tokens"))
    long_rules = client_tokens.record(cctx, r, shift) if shift is not None else []
    return r, long_rules


def _words(cctx: Context) -> dict[str, str]:
    return {"release": cctx.release, "job": dict(cctx.selector)["job"]}


def _alerts(cctx: Context, r: Recorder, found: list[Level], base_url: str, team: str | None) -> list[AlertRule]:
    data = client_data()["alerts"]
    gate = f"and {q.on(cctx.group)} {r.ref('attempted')} >= {cctx.min_request_rate:g}"
    out = []
    for lv in found:
        a = data[lv.key]
        key = a.get("histogram")
        series = r.ref(f"{key}_quantile", (("quantile", "=", "0.99"),)) if key else r.ref("error_ratio")
        for severity, threshold in lv.levels:
            text = format_threshold(lv.kind, threshold)
            value = f"{{{{ $value | {_HUMANIZE[lv.kind]} }}}}"
            description = " ".join(a["description"].split()).format(value=value, threshold=text, **_words(cctx))
            labels = [("severity", severity), ("signal", a["signal"]), ("layer", "client")]
            if team:
                labels.append(("team", team))
            out.append(
                AlertRule(
                    name=lv.key,
                    signal=a["signal"],
                    severity=severity,
                    expr=f"{series} {lv.comparator} {threshold:g} {gate}",
                    for_=lv.for_,
                    summary=a["summary"].format(threshold=text),
                    description=f"{labels_template(cctx.group)}: {description}",
                    runbook_url=naming.runbook_url(base_url, lv.key),
                    labels=tuple(labels),
                    threshold_text=text,
                    threshold=threshold,
                    comparator=lv.comparator,
                    query=series,
                    panel=a["panel"],
                    protects=lv.protects if severity == "critical" else "",
                )
            )
    return out


def _confirm(
    cctx: Context, ctx: Context, gctx: Context | None, gw_names: dict[str, str], name: str
) -> tuple[tuple[str, str], ...]:
    """From the application to the servers: the client's view per application instance and error
    type, then the gateway's and the pods' of the same signal."""
    a = client_data()["alerts"][name]
    key = a.get("histogram")
    out: list[tuple[str, str]] = []
    if key is not None:
        per_instance = q.quantile(0.99, ("model_name", "instance"), cctx.rate(key, "_bucket"))
        out.append((f"client {key} p99 per instance of the application, per model", per_instance))
        if gctx is not None and f"{key}_quantile" in gw_names:
            at_gw = gctx.recorded(gw_names[f"{key}_quantile"], (("quantile", "=", "0.99"),))
            out.append((f"gateway {key} p99", at_gw))
        if ctx.has(key):
            out.append((f"pods' {key} p99", q.quantile(0.99, ("model_name",), ctx.rate(key, "_bucket"))))
    else:
        kinds = cctx.catalog.metric("errors").labels
        errors = q.sum_by(("model_name", "instance", *kinds), cctx.rate("errors"))
        out.append((f"client errors per second per instance of the application, by model and {', '.join(kinds)}", errors))
        if gctx is not None and "success_ratio" in gw_names:
            out.append(("gateway request success", gctx.recorded(gw_names["success_ratio"])))
    return tuple(out)


def _runbook(
    cctx: Context,
    ctx: Context,
    gctx: Context | None,
    alerts: list[AlertRule],
    gw_names: dict[str, str],
    shift: client_tokens.Shift | None,
) -> tuple[RunbookEntry, ...]:
    data = {**client_data()["alerts"], **client_data()["token_usage"]}
    words = _words(cctx)
    if shift is not None:
        words |= client_tokens.texts_of(shift)

    def confirm(name: str) -> tuple[tuple[str, str], ...]:
        if shift is not None and name == shift.name:
            return client_tokens.confirm(cctx, ctx, shift)
        return _confirm(cctx, ctx, gctx, gw_names, name)

    return runbook_entries(cctx, alerts, data, words, confirm)


def _inhibit(
    cctx: Context,
    layers: list[tuple[Context, dict[str, tuple[str, ...]]]],
    found: list[Level],
) -> tuple[dict, ...]:
    """A client page silences its own warning; a client page silences every alert of the
    gateway and of the pods on its signal (their threshold alerts and SLO burns), a client warning
    their warnings, for the same model (labels the layers carry with the same meaning).
    `layers`: each layer's context and, per signal, the names of its alerts on it."""
    names = sorted({lv.key for lv in found})
    if not names:
        return ()
    own_fixed = [_matcher(k, "=", v) for k, v in cctx.selector]
    own = _matcher("alertname", "=~", q.any_of(names))
    rules: list[dict] = [
        {
            "source_matchers": [own, 'severity="critical"', *own_fixed],
            "target_matchers": [own, 'severity=~"warning|info"', *own_fixed],
            "equal": ["alertname", *cctx.group],
        }
    ]
    for layer, by_signal in layers:
        shared = [
            label
            for label in cctx.group
            if label in layer.group and dict(cctx.selector).get(label) == dict(layer.selector).get(label)
        ]
        fixed = [_matcher(k, "=", v) for k, v in layer.selector]
        for lv in found:
            targets = by_signal.get(client_data()["alerts"][lv.key]["signal"], ())
            if not targets:
                continue
            target = _matcher("alertname", "=~", q.any_of(sorted(targets)))
            for severity, target_severity in (("critical", ""), ("warning", "warning|info")):
                sev = [_matcher("severity", "=~", target_severity)] if target_severity else []
                rules.append(
                    {
                        "source_matchers": [
                            _matcher("alertname", "=", lv.key),
                            _matcher("severity", "=", severity),
                            *own_fixed,
                        ],
                        "target_matchers": [target, *sev, *fixed],
                        "equal": ["signal", *shared],
                    }
                )
    return tuple(rules)


def burn_names(burns, which: str, signal: str) -> set[str]:
    """The burn alerts on `signal` of the SLOs read at `which` ("gateway" | "pods"; `burns`:
    (where, burn alerts) pairs), not their SLI-unavailable warnings."""
    return {
        a.name
        for w, alerts in burns
        if w == which
        for a in alerts
        if a.signal == signal and a.name != naming.slo_unavailable(dict(a.labels).get("slo", ""))
    }


def _targets(
    ctx: Context,
    gctx: Context | None,
    found: list[Level],
    gw_alerts: frozenset[str],
    burns: tuple[tuple[str, tuple[AlertRule, ...]], ...],
) -> list[tuple[Context, dict[str, tuple[str, ...]]]]:
    """Per layer in front of which the client stands (the gateway, the pods), its alerts on the
    signals of the client's: the one a client alert stands for (the gateway's that took it over,
    the pods' own) and the SLO burns read there. `burns`: ("gateway" | "pods", burn alerts)."""
    takes = {pod_key: name for name, pod_key in _gateway_takes().items()}
    data = client_data()["alerts"]
    out: list[tuple[Context, dict[str, tuple[str, ...]]]] = []
    for which, layer in (("gateway", gctx), ("pods", ctx)):
        if layer is None:
            continue
        by_signal: dict[str, tuple[str, ...]] = {}
        for lv in found:
            signal = data[lv.key]["signal"]
            own = takes.get(lv.pod_key) if which == "gateway" else ctx.alert(lv.pod_key)
            names = {own} if own is not None and (which == "pods" or own in gw_alerts) else set()
            names |= burn_names(burns, which, signal)
            if names:
                by_signal[signal] = tuple(sorted(names))
        out.append((layer, by_signal))
    return out


def _gateway_takes() -> dict[str, str]:
    """Gateway alert -> the pod alert key it takes over (genobs/data/gateway.yaml)."""
    from genobs.plan.gateway import gateway_data

    return {name: a["takes_over"] for name, a in gateway_data()["alerts"].items()}


def _row(
    cctx: Context, r: Recorder, gw_names: dict[str, str], gctx: Context | None, shift: client_tokens.Shift | None
) -> Row:
    m = cctx.panel_matchers()
    by = q.by(cctx.group)
    panels = []
    titles = (
        ("ttft", "Client time to first chunk", "gateway"),
        ("e2e", "Client operation duration", "gateway"),
        ("itl", "Client time per output chunk", None),
    )
    for key, title, beside in titles:
        if f"{key}_quantile" not in r.names:
            continue
        targets = [
            Target(
                q.selector(r.names[f"{key}_quantile"], (*m, ("quantile", "=~", "0.5|0.99"))),
                "application p{{quantile}} {{model_name}}",
            )
        ]
        if beside and gctx is not None and f"{key}_quantile" in gw_names:
            at_gw = q.selector(gw_names[f"{key}_quantile"], (*gctx.panel_matchers(), ("quantile", "=", "0.99")))
            targets.append(Target(at_gw, "gateway p99 {{model_name}}"))
        panels.append(
            Panel(
                title,
                f"p50 and p99 as the application measured them ({cctx.release}): network, gateway and queueing "
                "included; beside the gateway's p99 where there is one, the gap is the path in front of it.",
                "s",
                tuple(targets),
            )
        )
    panels.append(
        Panel(
            "Client error ratio",
            "Share of the application's GenAI operations that failed (error.type set): its own timeouts, "
            "connection errors and retries' give-ups included.",
            "percentunit",
            (Target(f"sum {by} ({q.selector(r.names['error_ratio'], m)})", "{{model_name}}"),),
            min=0,
            max=1,
        )
    )
    panels.append(
        Panel(
            "Client operations per second",
            "GenAI operations the application finished, and those that failed.",
            "reqps",
            (
                Target(q.selector(r.names["attempted"], m), "finished {{model_name}}"),
                Target(q.selector(r.names["failed"], m), "failed {{model_name}}"),
            ),
        )
    )
    panels.append(
        Panel(
            "Client tokens per second",
            "Input and output tokens the application's operations used (the providers' usage; successful "
            "operations only).",
            "short",
            (
                Target(q.selector(r.names["prompt_tps"], m), "input {{model_name}}"),
                Target(q.selector(r.names["generation_tps"], m), "output {{model_name}}"),
            ),
            min=0,
        )
    )
    if shift is not None:
        panels.append(client_tokens.panel(cctx, r, shift))
    return Row(ROW_TITLE, tuple(panels))


@dataclass(frozen=True)
class ClientPlan:
    ctx: Context
    rules: tuple[RecordingRule | AlertRule, ...]
    alerts: tuple[AlertRule, ...]
    row: Row
    runbook: tuple[RunbookEntry, ...]
    inhibit: tuple[dict, ...]
    raw: frozenset[str]  # wire names the client's release exports
    names: dict[str, str]  # signal key -> recorded name
    long_rules: tuple[RecordingRule, ...] = ()  # the slower companion group: the token-usage baseline


def build_client(
    doc,
    cctx: Context,
    ctx: Context,
    gctx: Context | None,
    resolved_all: list[Resolved],
    gw_names: dict[str, str],
    gw_alerts: frozenset[str],
    burns: tuple[tuple[str, tuple[AlertRule, ...]], ...],
    base_url: str,
    problems: list[Problem],
) -> ClientPlan:
    shift = client_tokens.resolve(doc, problems)
    r, long_rules = _record(cctx, shift)
    found = levels(doc, cctx, resolved_all, problems)
    alerts = _alerts(cctx, r, found, base_url, doc.spec.team)
    if shift is not None:
        alerts.append(client_tokens.alert(cctx, r, shift, base_url, doc.spec.team, _words(cctx)))
    return ClientPlan(
        ctx=cctx,
        rules=(*r.rules, *alerts),
        alerts=tuple(alerts),
        row=_row(cctx, r, gw_names, gctx, shift),
        runbook=_runbook(cctx, ctx, gctx, alerts, gw_names, shift),
        inhibit=_inhibit(cctx, _targets(ctx, gctx, found, gw_alerts, burns), found),
        raw=frozenset(cctx.catalog.names_for(cctx.version)),
        names=dict(r.names),
        long_rules=tuple(long_rules),
    )


def layer(cl: ClientPlan, raw: frozenset[str]) -> GatewayLayer:
    """What the live-Prometheus commands need of the application; `raw`: every raw name the plan reads."""
    c = cl.ctx
    return GatewayLayer(
        engine=c.catalog.engine,
        engine_version=c.version_text,
        release=c.release,
        selector=c.selector,
        models=c.wire_models,
        raw_metrics=raw & cl.raw,
        signals=frozenset(a.signal for a in cl.alerts),
    )


def recorder(cl: ClientPlan) -> Recorder:
    """The client's recorded names behind a Recorder, as the generated tests read them."""
    r = Recorder(cl.ctx)
    r.names = dict(cl.names)
    return r


def probe_keys() -> dict[str, str]:
    """Each client alert -> the engine-neutral key of the pod alert whose fault makes it fire."""
    return {name: a.get("probe", a["levels_of"]) for name, a in client_data()["alerts"].items()}


def capability_lines(cctx: Context) -> list[str]:
    """One line per client alert the application's conventions release cannot back."""
    out = []
    for name, a in client_data()["alerts"].items():
        key = a.get("histogram")
        if key is not None and not cctx.has(key):
            why = cctx.catalog.missing_reason(key) or f"{cctx.release} has no {key} histogram"
            out.append(f"{name} ({a['signal']}) is not observable on {cctx.release}: {why}")
    return out

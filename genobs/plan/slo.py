"""SLO planning: SLI recording rules per window, error budget, burn rates and
multi-window multi-burn-rate alerts (burn-rate table as data)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from fractions import Fraction

from genobs import data as data_files
from genobs import naming
from genobs import promql as q
from genobs.plan import liveness
from genobs.plan.alerts import labels_template
from genobs.plan.context import Context
from genobs.plan.model import AlertRule, RecordingRule, Row
from genobs.plan.slo_sli import Sli, event_selector, events, marker_rule, without_event
from genobs.plan.slo_views import LATENCY_SLIS, slo_row, unavailable
from genobs.units import format_percent, format_seconds, parse_ratio, parse_seconds, prom_duration_seconds

SPEED_TEXT = {
    "fast": (
        "The error budget burns fast: at this pace the whole budget of the period is gone in hours to days. "
        "Users are being hurt now.",
        "Now: treat it as an incident: roll back what changed (deploy, config), shed load or scale out after a "
        "traffic shift or node loss. Then follow the runbook section of the signal's own alert.",
    ),
    "slow": (
        "The error budget burns slowly but steadily: the SLO will be missed this period if nothing changes.",
        "Now: if the burn started with a deploy or config change, roll it back; otherwise open a ticket. Then "
        "compare the SLI over the last days with the dashboard's latency and finish-reason panels, and plan "
        "capacity or configuration work before the budget runs out.",
    ),
}


@functools.cache
def burn_table() -> dict:
    return data_files.load("burn_rates.yaml")


@dataclass(frozen=True)
class SloPlan:
    """The SLOs' recording rules, burn-rate alerts, dashboard rows and runbook entries."""

    rules: tuple[RecordingRule | AlertRule, ...]
    rows: tuple[Row, ...]
    runbook: tuple[dict, ...]
    long_rules: tuple[RecordingRule | AlertRule, ...] = ()  # evaluated at long_interval()


def _nearest(bounds: tuple[float, ...], value: float) -> str:
    below = [b for b in bounds if b < value][-2:]
    above = [b for b in bounds if b > value][:2]
    return ", ".join(format_seconds(b) for b in (*below, *above))


def validate(doc, ctx: Context, report, only: frozenset[int] | None = None) -> None:
    """Check each SLO against the engine version; report(path, message). `only`: the SLOs this
    context reads (a gateway reads some, the pods the others); names are checked over all."""
    seen: set[str] = set()
    for i, slo in enumerate(doc.spec.slos):
        path = ("slos", i)
        if slo.name in seen and (only is None or i in only):
            report((*path, "name"), f"SLO name {slo.name!r} is used twice")
        seen.add(slo.name)
        if only is not None and i not in only:
            continue
        if not slo.burn_rates:
            longest = max(burn_table()["alerts"], key=lambda r: prom_duration_seconds(r["long"]))["long"]
            if prom_duration_seconds(slo.period) < prom_duration_seconds(longest):
                report(
                    (*path, "period"),
                    f"period {slo.period} is shorter than the {longest} long window of the default burn-rate table "
                    f"(burn factors are budget share x period / long window); use a period of at least {longest} "
                    "or give burn_rates",
                )
        if slo.sli == "success":
            why = ctx.catalog.missing_reason("success")
            if why is not None:
                report((*path, "sli"), f"the success SLI is not observable on {ctx.release}: {why}")
                continue
            if slo.threshold is not None:
                report((*path, "threshold"), "the success SLI has no threshold; it counts finish reasons")
            available = ctx.catalog.reasons_for(ctx.version)
            for j, reason in enumerate(slo.bad_reasons or ()):
                if reason not in available:
                    report(
                        (*path, "bad_reasons", j),
                        f"finished_reason {reason!r} does not exist in {ctx.release} (it has: {', '.join(available)})",
                    )
            continue
        if slo.bad_reasons is not None:
            report((*path, "bad_reasons"), "bad_reasons applies only to sli: success")
        if slo.threshold is None:
            report((*path, "threshold"), f"a {slo.sli} SLO needs a threshold, e.g. threshold: 1s")
            continue
        key = LATENCY_SLIS[slo.sli][0]
        if not ctx.has(key):
            why = ctx.catalog.missing_reason(slo.sli) or f"{ctx.catalog.display_name} exports no such histogram"
            report((*path, "sli"), f"the {slo.sli} SLI is not observable on {ctx.release}: {why}")
            continue
        if slo.buckets is not None and ctx.version < ctx.catalog.custom_buckets_since:
            report((*path, "buckets"), f"custom histogram buckets need {_bucket_flag_text(ctx, key)}")
            continue
        metric = ctx.catalog.metric(key)
        # the spec's buckets are the engine flag's values, in the histogram's own unit
        bounds = tuple(b / metric.per_second for b in slo.buckets) if slo.buckets else metric.buckets_for(ctx.version)
        value = parse_seconds(slo.threshold)
        if not any(abs(b - value) < 1e-9 for b in bounds):
            report(
                (*path, "threshold"),
                f"{slo.threshold} is not a bucket boundary of {ctx.metric(key)} in {ctx.release}; "
                f"nearest boundaries: {_nearest(bounds, value)}",
            )
        for j, row in enumerate(slo.burn_rates or ()):
            if prom_duration_seconds(row.short) >= prom_duration_seconds(row.long):
                report((*path, "burn_rates", j), "the short window must be shorter than the long window")


def burn_factor(budget_share: float, period: str, long: str) -> float:
    """Sloth's rule: the burn rate at which `budget_share` of the period's budget is spent
    within the long window (2 % in 1 h of 30 d: 14.4). Rounded to 4 digits for the rules."""
    exact = (
        Fraction(str(budget_share)) * Fraction(prom_duration_seconds(period)) / Fraction(prom_duration_seconds(long))
    )
    return float(f"{float(exact):.4g}")


def _rows(slo) -> list[dict]:
    if slo.burn_rates:
        return [r.model_dump() for r in slo.burn_rates]
    return [
        {
            "severity": row["severity"],
            "long": row["long"],
            "short": row["short"],
            "factor": burn_factor(parse_ratio(row["budget"]), slo.period, row["long"]),
        }
        for row in burn_table()["alerts"]
    ]


def _windows(slo) -> list[str]:
    found = set(burn_table()["windows"]) if not slo.burn_rates else set()
    for row in _rows(slo):
        found |= {row["long"], row["short"]}
    return sorted(found, key=prom_duration_seconds)


# Windows from a day up are "long": recorded in their own group at a longer interval,
# unless a paging (critical) row reads one of them.
LONG_WINDOW_SECONDS = 86400
LONG_INTERVAL_CAP_SECONDS = 120


def long_interval(evaluation_interval: str) -> str:
    """Interval of the long-window group: 4x the spec's, at most 2m (never shorter than the
    spec's). 2m keeps each recorded sample well inside Prometheus' 5m lookback, so alerts
    reading it from a faster group never see a gap."""
    base = prom_duration_seconds(evaluation_interval)
    return _duration(max(base, min(4 * base, LONG_INTERVAL_CAP_SECONDS)))


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def _is_long(window: str, table: list[dict]) -> bool:
    paging = {r["long"] for r in table if r["severity"] == "critical"} | {
        r["short"] for r in table if r["severity"] == "critical"
    }
    return prom_duration_seconds(window) >= LONG_WINDOW_SECONDS and window not in paging


def _over(short: str, base: str, w: str) -> tuple[str, float]:
    """(k * avg_over_time(base rate[w - base]) + base rate now, k + 1): see _derived."""
    k = (prom_duration_seconds(w) - prom_duration_seconds(base)) / prom_duration_seconds(base)
    span = _duration(prom_duration_seconds(w) - prom_duration_seconds(base))
    return f"{k:g} * avg_over_time({short}[{span}]) + {short}", k + 1


def _burn(errors: str, requests: str, budget: float) -> str:
    """errors / requests / budget over the two sides of one events series (see slo_sli.events)."""
    return f"{q.ratio(without_event(errors), without_event(requests))} / {budget:g}"


def _derived_burn(errors: str, requests: str, base: str, w: str, budget: float) -> str:
    """Burn rate over window `w` in one rule, from the two sides of the recorded base-window
    events: both are derived as in _derived, and their common 1 / (k + 1) cancels in the ratio.
    The sides were recorded together, so every sample of the window pairs errors and requests
    of the same evaluation: a total outage burns exactly 1 / budget, a healthy fleet 0."""
    return _burn(_over(errors, base, w)[0], _over(requests, base, w)[0], budget)


def _derived(short: str, name: str, base: str, w: str, tag: tuple, strip: bool = False) -> RecordingRule:
    """A rate over window `w` (requests, for a traffic gate) from the recorded base-window rate
    `short`, recorded as `name` (`strip`: without the event label of an SLO's events).

    avg_over_time of the base rate over w - base covers w, but a base-window rate sees a
    change only gradually, so the newest base window is counted once more:
    (k * avg_over_time(base rate[w - base]) + base rate now) / (k + 1), k = (w - base) / base.
    In steady traffic this is the rate over w; after a step change it is never below the
    raw rate over w (the newest base window weighs between 1 and 2), so no alert on w fires
    later than on raw counters."""
    total, weight = _over(short, base, w)
    expr = f"({total}) / {weight:g}"
    return RecordingRule(name, without_event(expr) if strip else expr, tag)


def _period_budget(own, events_name: str, period: str, budget: float, step: str, tag: tuple):
    """The budget left over the SLO period. Each evaluation of the long-window group (every
    `step`) records the mean of the base-window events recorded since the last one (both sides
    in one rule); the period's error ratio is the sum of those means over the period, errors
    over requests. Those means tile the base-window samples exactly (a `step` window holds
    step / evaluation interval of them), so the ratio is the one a sum over every base-window
    sample gives, from 4x fewer samples (a 30d period: 21,600 instead of 86,400 per series and side)."""
    mean = f"{events_name}_avg{step}"
    rules = [RecordingRule(mean, f"avg_over_time({own(events_name)}[{step}])", tag)]
    errors, requests = (f"sum_over_time({own(mean, event)}[{period}])" for event in ("errors", "requests"))
    remaining = f"1 - {_burn(errors, requests, budget)}"
    return [*rules, RecordingRule(naming.record("slo_error_budget", f"remaining_{period}"), remaining, tag)]


def build_slos(doc, ctx: Context, base_url: str, team: str | None, recorded: dict[str, str]) -> SloPlan:
    """`recorded`: the recording group's signal key -> recorded name (over the rate window).

    Only the shortest window of an SLO reads the engine's series (through the recorded bucket
    or finish-reason rates when the window is the rate window) and selects the spec's models,
    through one marker series per spec (slo_sli);
    every longer window is derived from that recorded short-window rate. We follow Sloth's
    "optimized" idea (long windows from recorded 5m results, read over the window) but
    traffic-weighted like Pyrra's increases: the average recorded error rate divided by the
    average recorded request rate is the window's error ratio, where Sloth's average of 5m
    ratios over-weights quiet hours (Sloth #241) and Pyrra's increase over the raw counters
    still reads every pod's samples (Pyrra #1440). See _derived for the window arithmetic.
    The cost no longer grows with the fleet: a long window reads one recorded series per
    group_by value instead of every pod's raw counters. The base window's requests and errors
    are one rule (slo_sli.events), so every window's ratio pairs the two sides of one evaluation,
    also on a ruler that reads recorded series late (vmalert on a remote storage)."""
    rules: list[RecordingRule | AlertRule] = []
    long_rules: list[RecordingRule | AlertRule] = []
    rows: list[Row] = []
    runbook: list[dict] = []
    g = ctx.group
    labels_text = labels_template(g)
    step = long_interval(doc.spec.evaluation_interval)
    marker = marker_rule(ctx) if doc.spec.slos else None
    if marker is not None:
        rules.append(marker)  # first in the group: the base rules below read it in the same evaluation
    per_cluster = ctx
    for slo in doc.spec.slos:
        # scope: global sums the clusters away (service.cluster_label), per cluster keeps them apart
        ctx = per_cluster.without_cluster() if slo.scope == "global" else per_cluster
        g = ctx.group
        labels_text = labels_template(g)
        objective = parse_ratio(slo.objective)
        budget = 1 - objective
        tag = tuple((k, v) for k, _, v in ctx.slo_labels(slo.name))
        base = _windows(slo)[0]
        sli = Sli(ctx, recorded, base)
        if slo.sli == "success":
            signal = "success"
            bad = tuple(slo.bad_reasons or liveness.failed_reasons(ctx))
            wording = liveness.success_wording(ctx, format_percent(objective), list(bad))
            base_totals, base_errors = sli.attempts(), sli.failures(bad)
        else:
            key, signal, verb = LATENCY_SLIS[slo.sli]
            wording = f"{format_percent(objective)} of requests {verb} {slo.threshold}"
            if slo.sli == "ttft":
                # vLLM observes TTFT when the first token is produced; earlier aborts never reach it
                wording += " (requests aborted before their first token are not counted)"
            base_totals = sli.observed(key)
            base_errors = sli.within(key, parse_seconds(slo.threshold), base_totals)

        def own(name: str, event: str = "", slo_name: str = slo.name, ctx: Context = ctx) -> str:
            """This SLO's recorded series (one side of its events): the models were selected
            once, in the base window."""
            return event_selector(ctx, name, slo_name, event) if event else ctx.slo_recorded(name, slo_name)

        table = _rows(slo)
        windows = _windows(slo)
        # the low-traffic gate counts requests: an inter-token histogram counts token gaps (steps)
        per_token = slo.sli == "itl" or (slo.sli == "tpot" and ctx.version < ctx.catalog.per_request_tpot_since)
        gate_subject = "slo_gate_requests" if per_token else "slo_requests"
        if per_token:
            # finished requests over the base window from the engine; longer windows derived from it
            gate = own(naming.record("slo_gate_requests", f"rate{base}"))
            rules.append(RecordingRule(naming.record("slo_gate_requests", f"rate{base}"), sli.finished(), tag))
            for w in sorted({row["long"] for row in table} - {base}, key=prom_duration_seconds):
                out = long_rules if _is_long(w, table) else rules
                out.append(_derived(gate, naming.record("slo_gate_requests", f"rate{w}"), base, w, tag))
        # a request-rate rule only where a traffic gate reads it; every burn rate is one rule
        gated = {row["long"] for row in table} - {base} if gate_subject == "slo_requests" else set()
        events_name = naming.record("slo_events", f"rate{base}")
        requests, errors = own(events_name, "requests"), own(events_name, "errors")
        for w in windows:
            out = long_rules if _is_long(w, table) else rules
            if w == base:
                out.append(RecordingRule(events_name, events(base_totals, base_errors), tag))
                burn = _burn(errors, requests, budget)
            else:
                if w in gated:
                    out.append(_derived(requests, naming.record("slo_requests", f"rate{w}"), base, w, tag, strip=True))
                burn = _derived_burn(errors, requests, base, w, budget)
            out.append(RecordingRule(naming.record("slo_burn_rate", f"rate{w}"), burn, tag))
        # budget remaining over the period: the period's errors over its requests, against the budget
        long_rules.extend(_period_budget(own, events_name, slo.period, budget, step, tag))

        by_severity: dict[str, list[dict]] = {}
        for row in table:
            by_severity.setdefault(row["severity"], []).append(row)
        for severity, pairs in by_severity.items():
            speed = "fast" if severity == "critical" else "slow"
            name = naming.slo_alert(slo.name, speed)
            parts = []
            for row in pairs:
                f = f"{row['factor']:g}"
                long_ = own(naming.record("slo_burn_rate", f"rate{row['long']}"))
                short = own(naming.record("slo_burn_rate", f"rate{row['short']}"))
                gate = own(naming.record(gate_subject, f"rate{row['long']}"))
                parts.append(
                    f"({long_} > {f} and {q.on((*g, 'slo'))} {short} > {f} "
                    f"and {q.on((*g, 'slo'))} {gate} >= {ctx.min_request_rate:g})"
                )
            windows_text = "; ".join(f"{r['factor']:g}x over {r['long']} and {r['short']}" for r in pairs)
            extra = [("severity", severity), ("signal", signal), *((k, v) for k, _, v in ctx.slo_labels(slo.name))]
            if team:
                extra.append(("team", team))
            # an alert on a long window is evaluated where that window is recorded, right after it
            target = long_rules if any(_is_long(r["long"], table) for r in pairs) else rules
            target.append(
                AlertRule(
                    name=name,
                    signal=signal,
                    severity=severity,
                    expr=" or ".join(parts),
                    for_="",
                    summary=f"SLO {slo.name}: error budget burning {speed}",
                    description=f"{labels_text}: the error budget of SLO {slo.name} ({wording} over {slo.period}) "
                    f"burns faster than {windows_text}.",
                    runbook_url=naming.runbook_url(base_url, name),
                    labels=tuple(extra),
                    threshold_text=windows_text,
                    query=own(naming.record("slo_burn_rate", f"rate{pairs[0]['long']}")),
                    panel=f"SLO {slo.name}",
                    protects=f"objective: SLO {slo.name}, {wording} over {slo.period}" if severity == "critical" else "",
                )
            )
            meaning, action = SPEED_TEXT[speed]
            runbook.append(
                {
                    "alert": name,
                    "anchor": naming.anchor(name),
                    "signal": signal,
                    "slo": slo.name,
                    "title": f"SLO {slo.name}: {'fast' if speed == 'fast' else 'slow'} burn",
                    "objective_text": f"{wording} over {slo.period}",
                    "severity_text": f"{severity}: {windows_text}",
                    "protects": f"the objective of SLO {slo.name}" if severity == "critical" else "",
                    "meaning": meaning,
                    "first_action": action,
                    "next_checks": [
                        f"Error budget remaining over {slo.period} on the SLO row.",
                        f"The `{signal}` panels and alerts: which part of the service degrades.",
                    ],
                    "confirm": "It fires when both windows of a pair burn faster than the pair's factor "
                    f"(and the long window has at least {ctx.min_request_rate:g} req/s). Burn rate per window, "
                    "each against its factor:",
                    "windows": [
                        {
                            "long": row["long"],
                            "short": row["short"],
                            "factor": f"{row['factor']:g}",
                            "long_query": own(naming.record("slo_burn_rate", f"rate{row['long']}")),
                            "short_query": own(naming.record("slo_burn_rate", f"rate{row['short']}")),
                        }
                        for row in pairs
                    ],
                    "windows_query": _all_windows(own, [w for row in pairs for w in (row["long"], row["short"])]),
                    "query": own(naming.record("slo_burn_rate", f"rate{pairs[0]['long']}")),
                    "panel": f"SLO {slo.name}",
                }
            )
        if slo.sli != "success":
            unit = "token gaps/s" if per_token else "req/s"
            found = unavailable(ctx, slo, without_event(requests), base_url, team, f"{wording} over {slo.period}", unit)
            rules.append(found[0])
            runbook.append(found[1])
        rows.append(slo_row(ctx, slo, objective, windows, table))
    return SloPlan(tuple(rules), tuple(rows), tuple(runbook), tuple(long_rules))


def _all_windows(own, windows: list[str]) -> str:
    """One query for the burn rate of every window an alert reads (legend: the series name)."""
    names = [naming.record("slo_burn_rate", f"rate{w}") for w in dict.fromkeys(windows)]
    sel = own(names[0])
    return "{" + f"__name__=~{q.quote(q.any_of(names))}," + sel[len(names[0]) + 1 :]


def _bucket_flag_text(ctx: Context, key: str) -> str:
    """Which release and flag let the engine export other buckets for histogram `key`."""
    flag = dict(ctx.catalog.bucket_flags).get(key)
    if flag is None:
        if ctx.catalog.custom_buckets_since >= (10**6, 0, 0):
            return f"an engine flag {ctx.catalog.display_name} does not have"
        since = ".".join(map(str, ctx.catalog.custom_buckets_since))
        return f"{ctx.catalog.display_name} >= {since} (--custom-histogram-buckets)"
    return f"{flag} on {ctx.catalog.display_name}"

"""What an SLO shows besides its burn-rate rules: the SLI-unavailable alert of a latency SLO
and the SLO's dashboard row."""

from __future__ import annotations

from genobs import naming
from genobs import promql as q
from genobs.plan.alerts import labels_template
from genobs.plan.context import Context
from genobs.plan.dashboard import threshold_steps
from genobs.plan.model import AlertRule, Panel, Row, Target
from genobs.plan.slo_sli import pick
from genobs.units import format_percent, parse_seconds

# SLI -> (histogram key, signal label, wording)
LATENCY_SLIS = {
    "ttft": ("ttft", "ttft", "get their first token within"),
    "itl": ("itl", "itl", "see inter-token gaps within"),
    "tpot": ("tpot", "itl", "get a time per output token within"),
    "e2e": ("e2e", "e2e", "complete within"),
    "queue_time": ("queue_time", "queue_time", "wait in the queue at most"),
}


def unavailable(ctx: Context, slo, requests: str, base_url: str, team: str | None, objective: str, unit: str):
    """Slo<Name>SliUnavailable: requests flow but the threshold bucket is missing (e.g. the engine
    was restarted with other --custom-histogram-buckets), so good events cannot be counted and
    every burn alert of the SLO would stay silent. `requests`: the SLO's base-window request rate."""
    g = ctx.group
    key, signal, _ = LATENCY_SLIS[slo.sli]
    bound = parse_seconds(slo.threshold)
    name = naming.slo_unavailable(slo.name)
    # `unless on` the grouping labels keeps the spec's models when model_name is one of them
    good = ctx.raw(key, "_bucket", (ctx.le(key, bound),), models=False)
    if "model_name" not in g:
        good = pick(ctx, good)
    bucket = f'{ctx.metric(key, "_bucket")}{{le="{ctx.le_text(key, bound)}"}}'
    extra = [("severity", "warning"), ("signal", signal), *((k, v) for k, _, v in ctx.slo_labels(slo.name))]
    if team:
        extra.append(("team", team))
    rule = AlertRule(
        name=name,
        signal=signal,
        severity="warning",
        expr=f"{requests} > 0 unless {q.on(g)} count {q.by(g)} ({good})",
        for_="10m",
        summary=f"SLO {slo.name}: SLI cannot be computed",
        description=f'{labels_template(g)}: requests flow ({{{{ $value | printf "%.2f" }}}} {unit}) but no {bucket} '
        f"series exists, so SLO {slo.name} counts no good events and its burn-rate alerts cannot fire.",
        runbook_url=naming.runbook_url(base_url, name),
        labels=tuple(extra),
        threshold_text="requests flow, threshold bucket missing",
        query=requests,
        panel=f"SLO {slo.name}",
    )
    entry = {
        "alert": name,
        "anchor": naming.anchor(name),
        "signal": signal,
        "slo": slo.name,
        "title": f"SLO {slo.name}: SLI unavailable",
        "objective_text": objective,
        "severity_text": "warning: requests flow but the threshold bucket is missing",
        "meaning": f"The SLO is blind: {ctx.metric(key)} has no bucket with upper bound {slo.threshold}, usually "
        "because the engine runs with --custom-histogram-buckets that leave it out (or a new release changed the "
        "defaults). Good events cannot be counted, so the burn-rate alerts of this SLO stay silent whatever "
        "users see.",
        "first_action": f"Now: restart the engine with {slo.threshold} among its histogram buckets (or roll back "
        "the deploy that changed them). Then, if that bound is gone for good, move the SLO's "
        "threshold (and `buckets:` in the spec) to a bound the engine exports; until then judge the SLI from the "
        "latency panels.",
        "next_checks": [
            f"The buckets the engine exports: `count by (le) ({ctx.metric(key, '_bucket')})`.",
            "The engine's start-up flags (--custom-histogram-buckets) and release.",
        ],
        "confirm": "Requests counted by the SLO while its threshold bucket is missing:",
        "query": requests,
        "panel": f"SLO {slo.name}",
    }
    return rule, entry


def slo_row(ctx: Context, slo, objective: float, windows: list[str], table: list[dict]) -> Row:
    matchers = ctx.panel_matchers() + ctx.slo_labels(slo.name)
    legend = " ".join(f"{{{{{label}}}}}" for label in ctx.variables)

    def s(name: str) -> str:
        return q.selector(name, matchers)

    # the SLI is 1 - error ratio = 1 - burn rate x budget (the error ratio has no rule of its own)
    budget = f"{1 - objective:g}"
    sli_targets = tuple(
        Target(f"1 - {s(naming.record('slo_burn_rate', f'rate{w}'))} * {budget}", f"{legend} SLI {w}".strip())
        for w in (windows[0], "1h")
        if w in windows
    )
    return Row(
        f"SLO {slo.name}",
        (
            Panel(
                f"SLO {slo.name}: SLI vs objective",
                f"Share of good events ({slo.sli}) against the objective {format_percent(objective)}.",
                "percentunit",
                sli_targets,
                thresholds=threshold_steps((("critical", objective),), "below"),
                width=8,
            ),
            Panel(
                f"SLO {slo.name}: error budget remaining ({slo.period})",
                "Share of the period's error budget still unspent (1 = untouched, 0 = exhausted, below 0 = SLO missed).",
                "percentunit",
                (Target(s(naming.record("slo_error_budget", f"remaining_{slo.period}")), legend or "remaining"),),
                thresholds=threshold_steps((("critical", 0.0),), "below"),
                width=8,
            ),
            Panel(
                f"SLO {slo.name}: burn rate per window",
                "Error-budget burn rate per window (1 = exactly the sustainable rate). Lines: alert factors.",
                "none",
                tuple(Target(s(naming.record("slo_burn_rate", f"rate{w}")), f"{legend} {w}".strip()) for w in windows),
                thresholds=threshold_steps(sorted({(r["severity"], float(r["factor"])) for r in table}), "above"),
                width=8,
            ),
        ),
    )

"""Goodput recording rules and alerts (part of the `plan` stage's capacity signals): the
requests within the spec's latency bounds, as an upper and a lower bound, or exact from a
gateway, and the warning when a bound's histogram bucket is not exported."""

from __future__ import annotations

from genobs import naming
from genobs import promql as q
from genobs.plan.alerts import labels_template
from genobs.plan.capacity_builder import Builder
from genobs.spec_capacity import Capacity
from genobs.units import parse_ratio, parse_seconds


def _successful(b: Builder) -> str:
    """Finished requests/s that were not aborted and did not fail."""
    ctx = b.ctx
    bad = [r for r in (ctx.catalog.abort_reason, "error") if r in ctx.catalog.reasons_for(ctx.version)]
    if not bad or "finish_by_reason" not in b.rec.names:
        return b.rec.ref("finished")  # no finish reasons (SGLang): aborted requests are not counted as finished
    failed = q.sum_by(ctx.group, b.rec.ref("finish_by_reason", (("finished_reason", "=~", "|".join(bad)),)))
    return f"{b.rec.ref('finished')} - ({failed} or ({b.rec.ref('finished')} * 0))"


def goodput(b: Builder, cap: Capacity) -> None:
    g = cap.goodput
    if g is None:
        return
    ctx = b.ctx
    w = ctx.window
    parts: list[tuple[str, str]] = []
    buckets: list[tuple[str, str]] = []  # (bucket series at a bound, its text) the goodput needs
    for key, bound in (("ttft", g.ttft), ("tpot", g.tpot)):
        if bound is None:
            continue
        le = (ctx.le(key, parse_seconds(bound)),)
        buckets.append((ctx.raw(key, "_bucket", le), f'{ctx.metric(key, "_bucket")}{{le="{ctx.le_text(key, parse_seconds(bound))}"}}'))
        name = b.add(
            f"goodput_{key}",
            naming.record(f"goodput_{key}_requests", naming.rate_op("rate", w)),
            q.sum_by(ctx.group, ctx.rate(key, "_bucket", le)),
        )
        parts.append((key, b.ctx.recorded(name)))
    if parts:
        succ = b.add("goodput_successful", naming.record("requests_served", naming.rate_op("rate", w)), _successful(b))
        parts.append(("served", ctx.recorded(succ)))
        union = " or ".join(
            sel if i == 0 else f'label_replace({sel}, "part", "{part}", "", "")' for i, (part, sel) in enumerate(parts)
        )
        # a request good on every bound is counted in every part: at most the smallest part; no
        # value where a part is missing (its bucket is not exported): the others alone overstate it
        complete = f"count {q.by(ctx.group)} ({union}) == {len(parts)}"
        upper = f"min {q.by(ctx.group)} ({union}) and {q.on(ctx.group)} ({complete})"
        b.add("goodput_upper", naming.record("goodput_requests", naming.rate_op("upper", w)), upper)
        _unavailable(b, buckets)
        # and at least what the parts must share: sum of parts - (parts - 1) x finished
        total = " + ".join(sel for _, sel in parts)
        lower = f"clamp_min({total} - {len(parts) - 1} * {b.rec.ref('finished')}, 0)"
        b.add("goodput_lower", naming.record("goodput_requests", naming.rate_op("lower", w)), lower)
        for bound in ("upper", "lower"):
            b.add(
                f"goodput_{bound}_ratio",
                naming.record("goodput", naming.rate_op(f"{bound}_ratio", w)),
                q.ratio(b.ref(f"goodput_{bound}"), b.rec.ref("finished")),
            )
            # tokens of good requests are not counted apart: assume they have the mean output length
            b.add(
                f"goodput_{bound}_tokens",
                naming.record("goodput_output_tokens", naming.rate_op(bound, w)),
                f"{b.ref(f'goodput_{bound}')} * {b.rec.ref('generation_length_mean')}",
            )
    labels: tuple[str, ...] = ()
    const: tuple[tuple[str, str], ...] = ()
    if g.gateway is not None:
        gw = g.gateway
        b.known |= {gw.good, gw.total}
        labels = tuple(label for label in ctx.variables if label == "model_name")
        matchers = tuple((k, "=", v) for k, v in gw.selector.items())
        # the gateway's series carry its own job; the spec's selector labels are set on the result
        const = tuple((k, v) for k, v in ctx.selector if k in ctx.group)
        good = b.add(
            "goodput_gateway",
            naming.record("goodput_gateway_requests", naming.rate_op("rate", w)),
            q.sum_by(labels, q.rate(q.selector(gw.good, matchers), w)),
            const,
        )
        total = q.sum_by(labels, q.rate(q.selector(gw.total, matchers), w))
        b.add(
            "goodput_gateway_ratio",
            naming.record("goodput_gateway", naming.rate_op("ratio", w)),
            q.ratio(ctx.recorded(good), total),
            const,
        )
    if g.objective is not None:
        objective = parse_ratio(g.objective)
        gate, label_text = b.gate(), None
        if g.gateway is not None:
            series = b.ref("goodput_gateway_ratio")
            kept = (*labels, *(k for k, _ in const))
            finished = q.sum_by(kept, b.rec.ref("finished"))
            gate = f"and {q.on(kept)} {finished} >= {ctx.min_request_rate:g}"
            label_text = labels_template(kept)
        else:
            series = b.ref("goodput_upper_ratio")
        b.alert(
            "GoodputBelowObjective",
            f"{series} < {objective:g} {gate}",
            objective,
            g.for_,
            series,
            "Goodput share",
            label_text=label_text,
        )


def _unavailable(b: Builder, buckets: list[tuple[str, str]]) -> None:
    """GoodputUnavailable: requests flow but a bound's bucket is missing (as Slo<Name>SliUnavailable)."""
    g = b.ctx.group
    present = f" and {q.on(g)} ".join(f"count {q.by(g)} ({sel})" for sel, _ in buckets)
    finished = b.rec.ref("finished")
    texts = {"bounds": ", ".join(text for _, text in buckets)}
    expr = f"{finished} >= {b.ctx.min_request_rate:g} unless {q.on(g)} ({present})"
    b.alert("GoodputUnavailable", expr, None, "10m", finished, "Goodput share", texts=texts)
    b.confirm["GoodputUnavailable"] = tuple(
        (f"{text} series per instance (none: that instance's buckets leave the bound out)", f"count by (instance) ({sel})")
        for sel, text in buckets
    )

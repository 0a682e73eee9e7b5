"""The base (shortest) window of each SLO: the only SLO rules that read series the recording
group did not compute for the SLO, and the one place the spec's models are selected.

The spec's model list is written once per spec, in a marker series (`genobs:slo_models:info`,
one series per served model of the spec, labelled `spec`), not once per SLO: the base rules read
the recorded series (or, when the base window is not the rate window, the raw counters) without
the model list and keep the spec's models by joining on the marker. Several specs may share one
Prometheus and one selector with different models, so the recorded series of the selector hold
other specs' models too; the join drops them. Without a model list (every model behind the
selector) there is nothing to select and no marker."""

from __future__ import annotations

from genobs import naming
from genobs import promql as q
from genobs.plan import liveness
from genobs.plan.context import Context
from genobs.plan.model import RecordingRule

MARKER = naming.record("slo_models", "info")


def model_labels(ctx: Context) -> tuple[str, ...]:
    """The labels of the marker: the grouping labels and the model."""
    return tuple(dict.fromkeys((*ctx.group, "model_name")))


def marker_rule(ctx: Context) -> RecordingRule | None:
    """One series per model of the spec that an engine serves. The running-requests gauge is
    exported by every engine from start-up, whatever traffic it had: it exists whenever the
    finish-reason and histogram series do (vLLM 0.x creates some of those only once observed).
    A layer without that gauge (the OpenTelemetry GenAI server metrics, an application's
    client metrics) marks the models it finished requests of: its request series appear with the first request, as its histograms do."""
    if not ctx.models:
        return None
    key = "requests_running" if ctx.has("requests_running") else "requests_finished"
    expr = f"group {q.by(model_labels(ctx))} ({ctx.raw(key)})"
    return RecordingRule(MARKER, expr, (("spec", ctx.spec),))


def pick(ctx: Context, vector: str) -> str:
    """The spec's models out of `vector`, read without the model list and carrying model_name.
    `vector` must bind tighter than `and` (no top-level `or`/`unless`)."""
    if not ctx.models:
        return vector
    labels = model_labels(ctx)
    matchers = [(k, "=", v) for k, v in ctx.selector if k in labels]
    marker = q.selector(MARKER, (*matchers, ("spec", "=", ctx.spec)))
    return f"({vector} and {q.on(labels)} {marker})"


def pick_recorded(ctx: Context, vector: str) -> str:
    """As pick, for recorded series: without model_name among the grouping labels they are
    already sums over the spec's models (the recording group selected them)."""
    return pick(ctx, vector) if "model_name" in ctx.group else vector


class Sli:
    """Request and error rates of one SLO over its base window `w`. `direct`: `w` is the rate
    window, so the recording group's series cover it."""

    def __init__(self, ctx: Context, recorded: dict[str, str], w: str):
        self.ctx, self.recorded, self.w = ctx, recorded, w
        self.direct = w == ctx.window

    def rec(self, key: str, extra: tuple[q.Matcher, ...] = ()) -> str:
        return self.ctx.recorded(self.recorded[key], extra, models=False)

    def raw_rate(self, key: str, suffix: str = "", extra: tuple[q.Matcher, ...] = ()) -> str:
        return self.ctx.rate(key, suffix, extra, window=self.w, models=False)

    def finished(self) -> str:
        """Finished requests of any reason (the per-token SLOs' traffic gate)."""
        if self.direct:
            return pick_recorded(self.ctx, self.rec("finished"))
        return q.sum_by(self.ctx.group, pick(self.ctx, self.raw_rate(self.ctx.finished_key)))

    # --- success: the server did not fail ---------------------------------
    # Attempts and failures are built from the same recorded inputs (the rate by finish reason,
    # HTTP 5xx, rejections), never from requests_attempted / requests_failed: the SLO's one
    # events rule reads each input once, so failures <= attempts whichever evaluation it sees.
    def _extra_failures(self) -> list[str]:
        return [self.rec(k) for k in ("http_5xx", "rejected") if k in self.recorded]

    def attempts(self) -> str:
        ctx = self.ctx
        if self.direct:
            if "finish_by_reason" not in self.recorded:  # no finish reasons (SGLang), or a gateway
                return pick_recorded(ctx, self.rec("attempted"))
            finished = q.sum_by(ctx.group, self.rec("finish_by_reason"))
            return pick_recorded(ctx, " + ".join([finished, *self._extra_failures()]))
        finished = q.sum_by(ctx.group, pick(ctx, self.raw_rate(ctx.finished_key)))
        return " + ".join([finished, *liveness.failure_terms(ctx, self.w, f"{finished} * 0", self._pick)])

    def failures(self, bad: tuple[str, ...]) -> str:
        ctx, g = self.ctx, self.ctx.group
        reasons = (("finished_reason", "=~", q.any_of(bad)),)
        if self.direct:
            if "finish_by_reason" not in self.recorded:  # no finish reasons (SGLang), or a gateway
                return pick_recorded(ctx, self.rec("failed"))
            finished = q.sum_by(g, self.rec("finish_by_reason"))
            terms = [f"({q.sum_by(g, self.rec('finish_by_reason', reasons))} or {finished} * 0)"] if bad else []
            return pick_recorded(ctx, " + ".join(terms + self._extra_failures()))
        finished = q.sum_by(g, pick(ctx, self.raw_rate(ctx.finished_key)))
        terms = liveness.failure_terms(ctx, self.w, f"{finished} * 0", self._pick)
        if ctx.has("gateway_errors"):  # a gateway's own error answers (counted in its requests too)
            errors = q.sum_by(g, pick(ctx, self.raw_rate("gateway_errors")))
            terms.append(f"({errors} or {finished} * 0)")
        if bad:
            # V0 creates a finished_reason series only once seen: absent means 0
            failed = q.sum_by(g, pick(ctx, self.raw_rate("request_success", extra=reasons)))
            terms.insert(0, f"({failed} or {finished} * 0)")
        return " + ".join(terms)

    def _pick(self, vector: str) -> str:
        return pick(self.ctx, vector)

    # --- latency: good = observed within the threshold bucket ---------------
    def observed(self, key: str) -> str:
        ctx = self.ctx
        buckets = self.recorded.get(f"{key}_buckets") if self.direct else None
        if buckets:
            return pick_recorded(ctx, q.sum_by(ctx.group, self.rec(f"{key}_buckets", (("le", "=", "+Inf"),))))
        return q.sum_by(ctx.group, pick(ctx, self.raw_rate(key, "_count")))

    def within(self, key: str, bound: float, requests: str) -> str:
        """Requests minus good events, never below 0. `requests` is the expression `observed`
        gives (the spec's models already picked), not a recorded series: requests and errors
        come from one read of the same inputs, so errors <= requests at any evaluation;
        matching on the grouping labels keeps the spec's models of the good side."""
        ctx, g = self.ctx, self.ctx.group
        le = (ctx.le(key, bound),)  # in the histogram's own unit
        buckets = self.recorded.get(f"{key}_buckets") if self.direct else None
        if buckets:
            good = q.sum_by(g, self.rec(f"{key}_buckets", le))
        else:
            good = self.raw_rate(key, "_bucket", le)
            # summed over model_name, the other specs' models must go before the sum
            good = q.sum_by(g, good if "model_name" in g else pick(ctx, good))
        return f"clamp_min({requests} - {q.on(g)} {good}, 0)"


EVENT = "event"


def events(requests: str, errors: str) -> str:
    """One rule for an SLO's requests and errors over its base window, told apart by the `event`
    label: every reader sees both from the same evaluation, so a ratio of the two keeps
    errors <= requests on a ruler that hands a rule the previous evaluation of some recorded
    series (vmalert on a remote storage)."""
    return (
        f'label_replace({requests}, "{EVENT}", "requests", "", "") '
        f'or label_replace({errors}, "{EVENT}", "errors", "", "")'
    )


def event_selector(ctx: Context, name: str, slo: str, event: str) -> str:
    """One side (`requests` or `errors`) of an SLO's recorded events."""
    own = ctx.slo_recorded(name, slo)  # always ends in the slo and spec matchers
    return f'{own[:-1]},{EVENT}="{event}"}}'


def without_event(expr: str) -> str:
    """`expr` without the event label, so the two sides of an SLO's events match."""
    return f"sum without ({EVENT}) ({expr})"

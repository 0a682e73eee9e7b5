"""Client planning, the token-usage shift (part of the `plan` stage): the application's tokens per
operation of each token type (gen_ai.client.token.usage by gen_ai.token.type), its last hour
against the day before it (genobs/data/client.yaml `token_usage`, docs/client.md).

The mean over a window is the sum of the recorded 5m token rates over it divided by the sum of
the recorded 5m operation rates (both recorded in one evaluation, so it is weighted by traffic
and reads one series per model, not every instance's counters). The baseline is the same over
the day that ends where the last hour starts, recorded in a slower companion group (a day of
samples per evaluation); it exists only once the application's token usage was recorded over
that day's first hour, so a young application, or a new token type, has no baseline and no
warning. It warns, never pages, and silences nothing: a shift explains, it is no outage."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from genobs import data as data_files
from genobs import naming
from genobs import promql as q
from genobs.errors import Problem
from genobs.plan.alerts import labels_template
from genobs.plan.context import Context
from genobs.plan.model import AlertRule, Panel, RecordingRule, Target
from genobs.plan.recorder import Recorder

LABEL = "token_type"  # the recorded series' token type (gen_ai.token.type: input, output)
# token type -> (the profile's per-operation histogram, the recorder's key of its token rate)
TYPES = {"input": ("prompt_length", "prompt_tps"), "output": ("generation_length", "generation_tps")}


@functools.cache
def shift_data() -> dict:
    return data_files.load("client.yaml")["token_usage"]


@dataclass(frozen=True)
class Shift:
    """The warning's resolved settings: factors (None: that direction is off) and windows."""

    name: str
    up: float | None
    down: float | None
    for_: str
    window: str
    baseline: str
    baseline_text: str  # "the day before", as the texts say it

    @property
    def factors_text(self) -> str:
        """'< 0.5x or > 2x'."""
        return " or ".join(f"{op} {f:g}x" for op, f in (("<", self.down), (">", self.up)) if f is not None)

    @property
    def threshold_text(self) -> str:
        """'< 0.5x or > 2x the day before' (the runbook's and the table's threshold)."""
        return f"{self.factors_text} {self.baseline_text}"


def resolve(doc, problems: list[Problem]) -> Shift | None:
    """The spec's client.alerts.token_usage over the data's defaults; None when it is dropped."""
    (name, d), = shift_data().items()
    own = doc.spec.client.alerts.token_usage
    if own is None:
        return None
    up = own.up if "up" in own.model_fields_set else d["up"]
    down = own.down if "down" in own.model_fields_set else d["down"]
    if up is None and down is None:
        return None
    return Shift(name, up, down, own.for_ or d["for"], d["window"], d["baseline"], d["baseline_text"])


def texts_of(s: Shift) -> dict[str, str]:
    """The words of the data's texts: {window}, {baseline}, {baseline_text}."""
    return {"window": s.window, "baseline": s.baseline, "baseline_text": s.baseline_text}


def record(cctx: Context, r: Recorder, s: Shift) -> list[RecordingRule]:
    """Operations with a token usage per type, the last window's mean per type and the shift
    against the baseline (into `r`, the client group); returns the baseline's rules, for the
    slower companion group."""
    g = cctx.group
    mean = naming.record("client_tokens_per_operation", f"mean_rate{s.window}")
    base = naming.record("client_tokens_per_operation", f"mean_rate{s.baseline}_offset{s.window}")
    long_rules = []
    for kind, (histogram, tokens) in TYPES.items():
        tag = ((LABEL, kind),)
        r.add(f"token_ops_{kind}", "client_token_operations", "rate", cctx.sum_rate(histogram, "_count"), tag)
        own_ops = r.ref(f"token_ops_{kind}", ((LABEL, "=", kind),))
        r.rules.append(RecordingRule(mean, _mean(r.ref(tokens), own_ops, g, s.window, ""), tag))
        baseline = _mean(r.ref(tokens), own_ops, g, s.baseline, s.window)
        # the baseline day's first hour recorded: a younger series has no baseline
        present = f"present_over_time({own_ops}[{s.window}] offset {s.baseline})"
        long_rules.append(RecordingRule(base, f"{baseline} and {q.on(g)} {present}", tag))
    r.names["token_ops"] = r.names["token_ops_input"]
    r.names["token_mean"], r.names["token_baseline"] = mean, base
    shift = naming.record("client_token_usage_shift", f"ratio_rate{s.window}")
    r.rules.append(RecordingRule(shift, q.ratio(r.ref("token_mean"), r.ref("token_baseline"))))
    r.names["token_shift"] = shift
    return long_rules


def _mean(tokens: str, ops: str, g: tuple[str, ...], window: str, offset: str) -> str:
    """Tokens per operation over `window` (ending `offset` ago): the sums of both recorded rates."""
    at = f" offset {offset}" if offset else ""
    return f"sum_over_time({tokens}[{window}]{at}) / {q.on(g)} (sum_over_time({ops}[{window}]{at}) > 0)"


def alert(cctx: Context, r: Recorder, s: Shift, base_url: str, team: str | None, words: dict[str, str]) -> AlertRule:
    d = shift_data()[s.name]
    g = (*cctx.group, LABEL)
    series = r.ref("token_shift")
    sides = []
    if s.up:
        sides.append(f"{series} > {s.up:g}")
    if s.down:
        sides.append(f"{series} < {s.down:g}")
    condition = sides[0] if len(sides) == 1 else f"({' or '.join(sides)})"
    gate = f"and {q.on(g)} avg_over_time({r.ref('token_ops')}[{s.window}]) >= {cctx.min_request_rate:g}"
    texts = {**words, **texts_of(s), "token_type": "{{ $labels.token_type }}"}
    description = " ".join(d["description"].split()).format(
        value='{{ $value | printf "%.1f" }}', threshold=s.factors_text, **texts
    )
    labels = [("severity", "warning"), ("signal", d["signal"]), ("layer", "client")]
    if team:
        labels.append(("team", team))
    return AlertRule(
        name=s.name,
        signal=d["signal"],
        severity="warning",
        expr=f"{condition} {gate}",
        for_=s.for_,
        summary=d["summary"].format(**texts),
        description=f"{labels_template(g)}: {description}",
        runbook_url=naming.runbook_url(base_url, s.name),
        labels=tuple(labels),
        threshold_text=s.threshold_text,
        query=series,
        panel=d["panel"],
    )


def confirm(cctx: Context, ctx: Context, s: Shift) -> tuple[tuple[str, str], ...]:
    """The application's tokens per operation per instance, then the pods' prompt and generation
    lengths, over the last window."""
    out = []
    for kind, (histogram, _) in TYPES.items():
        by = ("model_name", "instance")
        own = q.ratio(
            q.sum_by(by, cctx.rate(histogram, "_sum", window=s.window)),
            q.sum_by(by, cctx.rate(histogram, "_count", window=s.window)),
        )
        out.append((f"client {kind} tokens per operation over the last {s.window}, per instance of the application", own))
        if ctx.has(histogram):
            pods = q.ratio(
                q.sum_by(("model_name",), ctx.rate(histogram, "_sum", window=s.window)),
                q.sum_by(("model_name",), ctx.rate(histogram, "_count", window=s.window)),
            )
            out.append((f"pods' {kind} tokens per request ({histogram}) over the last {s.window}", pods))
    return tuple(out)


def panel(cctx: Context, r: Recorder, s: Shift) -> Panel:
    m = cctx.panel_matchers()
    return Panel(
        shift_data()[s.name]["panel"],
        f"Mean input and output tokens per operation over the last {s.window}, and over the {s.baseline} before it "
        f"(the baseline of {s.name}, which warns at {s.threshold_text}).",
        "short",
        (
            Target(q.selector(r.names["token_mean"], m), f"{{{{{LABEL}}}}} last {s.window} {{{{model_name}}}}"),
            Target(q.selector(r.names["token_baseline"], m), f"{{{{{LABEL}}}}} {s.baseline} before {{{{model_name}}}}"),
        ),
        min=0,
    )

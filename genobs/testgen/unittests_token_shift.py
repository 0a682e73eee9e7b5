"""Part of the `plan` stage (promtool unit tests): the application's token-usage shift compares
the last hour with the day before it, so no fleet of the generated alert tests (minutes of
history) can make it fire. Its own file feeds the client's groups a day and more of the
application's token-usage counters: steady, then input tokens per operation tripled and output
tokens cut to a fifth (both token types warn, silent before); the same change on an application
two hours old (no baseline: silent)."""

from __future__ import annotations

import re

from genobs import naming
from genobs.plan.client_tokens import LABEL, TYPES
from genobs.plan.context import Context
from genobs.plan.model import AlertRule, RuleGroup
from genobs.testgen.humanize import expand, expected_alert
from genobs.testgen.unittests_fleet import EVALUATION_STEP, identity, series_entry
from genobs.units import prom_duration_seconds

SHIFT_ALERT = "ClientTokenUsageShift"
STEADY = {"input": 1000.0, "output": 200.0}  # tokens per operation before the change
# after it, as multiples of the rule's factors: a longer prompt (input up), truncated answers (output down)
BEYOND = {"input": (">", (1.5, 2.0, 2.5)), "output": ("<", (0.4, 0.3, 0.25))}
PAST_WINDOW = 6  # minutes past the first full window after the change: the baseline holds at most these


def _minutes(duration: str) -> int:
    return round(prom_duration_seconds(duration) / 60)


def _counter(per_minute: list[float]) -> str:
    """promtool's values notation of a counter growing by `per_minute[i]` in minute i (runs of equal steps)."""
    out, total, i = [], 0.0, 0
    while i < len(per_minute):
        j = i
        while j + 1 < len(per_minute) and per_minute[j + 1] == per_minute[i]:
            j += 1
        steps = j - i + 1
        out.append(f"{total:g}+{per_minute[i]:g}x{steps}" if i == 0 else f"{total + per_minute[i]:g}+{per_minute[i]:g}x{steps - 1}")
        total += per_minute[i] * steps
        i = j + 1
    return " ".join(out)


def token_shift_tests(
    cctx: Context, groups: tuple[RuleGroup, ...], spec_name: str
) -> tuple[tuple[str, dict], ...]:
    rules = [r for g in groups for r in g.rules if isinstance(r, AlertRule) and r.key == SHIFT_ALERT]
    if not rules:
        return ()
    (rule,) = rules
    ident = identity(cctx)
    assert ident is not None
    raw = {k: v for k, v in ident.engine.items() if k != "model_name"}
    raw[cctx.catalog.model_label] = ident.engine["model_name"]
    group = {k: ident.engine[k] for k in cctx.group}
    window, baseline = _minutes("1h"), _minutes("1d")
    ops = max(1.0, cctx.min_request_rate * 10) * 60  # operations per minute, each token type
    factor = {kind: _factor(rule, kind) for kind in TYPES}
    if not any(factor.values()):
        return ()
    hold = _minutes(rule.for_)

    def series(history: int) -> tuple[list[dict], int]:
        """The counters of `history` steady minutes, then `window` + PAST_WINDOW minutes changed."""
        total = history + window + PAST_WINDOW
        out = []
        for kind, (histogram, _) in TYPES.items():
            labels = {**raw, **{k: v for k, _, v in cctx.catalog.metric(histogram).matchers_for(cctx.version)}}
            changed = factor[kind] or 1.0
            tokens = [STEADY[kind] * (changed if m >= history else 1.0) * ops for m in range(total)]
            out.append(series_entry(cctx.metric(histogram, "_count"), labels, _counter([ops] * total)))
            out.append(series_entry(cctx.metric(histogram, "_sum"), labels, _counter(tokens)))
        return out, total

    day = baseline + 2 * window  # the baseline day's first hour is recorded
    shifted, at = series(day)
    young, young_at = series(2 * window)
    expected = [expected_alert(rule, {**group, LABEL: kind}, f) for kind, f in factor.items() if f]
    what = " and ".join(f"{kind} x{f:g}" for kind, f in factor.items() if f)
    tests = [
        {
            "name": f"{rule.name}: a day steady, then {what} tokens per operation",
            "interval": "1m",
            "input_series": shifted,
            "alert_rule_test": [
                {"eval_time": f"{day}m", "alertname": rule.name, "exp_alerts": []},  # a steady day
                {"eval_time": f"{day + window // 2}m", "alertname": rule.name, "exp_alerts": []},
                {"eval_time": f"{at}m", "alertname": rule.name, "exp_alerts": sorted(expected, key=str)},
            ],
        },
        {
            "name": f"{rule.name}: the same change two hours after the first sample, no baseline: silent",
            "interval": "1m",
            "input_series": young,
            "alert_rule_test": [{"eval_time": f"{young_at}m", "alertname": rule.name, "exp_alerts": []}],
        },
    ]
    assert hold + window // 2 < window + PAST_WINDOW  # the change fires within the test
    document = {
        "rule_files": list(dict.fromkeys(f"../{naming.rule_file(spec_name, g.name)}" for g in groups)),
        "evaluation_interval": EVALUATION_STEP,
        "group_eval_order": [g.name for g in groups],
        "tests": tests,
    }
    return (("client-token-shift.test.yaml", document),)


def _factor(rule: AlertRule, kind: str) -> float | None:
    """The change of `kind`'s tokens per operation that passes the rule's factor on its side
    (None: the rule has no such side), one whose text is the same whatever the few changed
    samples the baseline holds at the evaluation (at most PAST_WINDOW + 5 of a day's minutes)
    make of the ratio."""
    op, multiples = BEYOND[kind]
    limit = _limit(rule.expr, op)
    if limit is None:
        return None
    share = (PAST_WINDOW + 5) / (24 * 60)
    template = rule.annotations()["description"]
    for multiple in multiples:
        factor = limit * multiple
        worst = factor / (1 + share * (factor - 1))
        if len({expand(template, {}, v) for v in (factor, worst)}) == 1:
            return factor
    raise ValueError(f"{rule.name}: no {kind} change past {op} {limit:g} has a stable text")


def _limit(expr: str, op: str) -> float | None:
    m = re.search(rf"ratio_rate\w*\{{[^}}]*\}} {op} ([0-9.e+-]+)", expr)
    return float(m.group(1)) if m else None

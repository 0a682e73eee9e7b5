"""Part of the `plan` stage (promtool unit tests): SLOs read back from their
recording rules (SLI, threshold, budget, windows), the fault that burns their
error budget and the burn rates Prometheus then computes."""

from __future__ import annotations

import functools
import math
from dataclasses import replace

import promql_parser

from genobs import naming
from genobs import promql as q
from genobs.plan.context import Context
from genobs.plan.model import AlertRule, RecordingRule, RuleGroup
from genobs.testgen.unittests_fleet import STEP_MINUTES, Fleet, bounds, canonical, fleet_rate, observations
from genobs.testgen.unittests_probes import _COMPARE, Env, Probe, SloDef
from genobs.units import prom_duration_seconds


def _matcher_value(selector: q.Selector, label: str) -> tuple[str, str] | None:
    for name, op, value in selector.matchers:
        if name == label:
            return ("=~" if op == "=~" else "="), value
    return None


def _le_value(op: str, text: str) -> float:
    if op == "=~":
        for tail in (r"(\.0+)?", "0*"):
            if text.endswith(tail):
                text = text[: -len(tail)]
                break
        text = text.replace("\\", "")
    return float(text)


def wire_keys(ctx: Context) -> dict[str, tuple[str, str]]:
    """Exported series name -> (catalog key, histogram suffix); a histogram's _count that a counter
    key reads (gen_ai.server.request.duration's requests and errors) stands for the counter."""
    out: dict[str, tuple[str, str]] = {}
    counted = ctx.has("errors")  # the client profiles: the count stands in for finished and failed operations
    items = list(ctx.catalog.metrics.items())
    if not counted:  # histograms first: a counter on the same name takes it over (gen_ai.server.*)
        items.sort(key=lambda item: item[1].type != "histogram")
    for key, m in items:
        if not ctx.has(key):
            continue
        for suffix in ("_bucket", "_sum", "_count") if m.type == "histogram" else ("",):
            name = ctx.metric(key, suffix)
            if name in out and counted:
                continue  # an application's operation count, not its duration histogram's _count
            out[name] = (canonical(ctx, key), suffix)
    return out


# series the success SLI reads beside finish reasons: HTTP 5xx (attributed to models through
# the running gauge) and admission rejections
# and an application's operations (its count family is canonically `errors`: errors < requests_finished)
_SUCCESS_TERMS = (
    "http_requests", "request_errors", "admission_rejections", "requests_running", "gateway_errors", "requests_finished",
    "errors",
)
# failures counted beside the finished requests: HTTP 5xx, a gateway's error answers, an
# application's failed operations (error.type set)
_ERROR_TERMS = ("http_requests", "request_errors", "gateway_errors", "errors")


def discover_slos(ctx: Context, groups: tuple[RuleGroup, ...]) -> dict[str, SloDef]:
    """SLO name -> definition, for every SLO whose rules have the expected shape."""
    recording = [r for g in groups for r in g.rules if isinstance(r, RecordingRule)]
    rules = [r for r in recording if dict(r.labels).get("slo")]
    wires = wire_keys(ctx)
    # a recorded (not exported) series stands for the exported series its rule reads
    for r in recording:
        if r.record not in wires:
            for sel in q.vector_selectors(r.expr):
                if sel.name in wires:
                    wires[r.record] = wires[sel.name]
                    break
    # the recording group's rules, to read what a recorded series an SLO reads stands for
    sources = {r.record: r.expr for r in recording if not dict(r.labels).get("slo")}
    out: dict[str, SloDef] = {}
    for name in sorted({dict(r.labels)["slo"] for r in rules}):
        found = _read_slo(name, [r for r in rules if dict(r.labels)["slo"] == name], wires, sources)
        if found is not None and found.key is not None and found.threshold is not None:
            # the rule's `le` is in the histogram's own unit; the fleet's bounds are seconds
            per_second = ctx.catalog.metric(found.key).per_second
            found = replace(found, threshold=found.threshold / per_second) if per_second != 1 else found
        if found is not None:
            out[name] = found
    return out


def _leaves(sel, sources: dict[str, str], seen: tuple[str, ...] = ()) -> list:
    """A selector and, when it reads a recorded series, the selectors of the rules behind it
    (the outer one carries matchers such as finished_reason, the inner ones the exported names)."""
    out = [sel]
    expr = sources.get(sel.name)
    if expr is not None and sel.name not in seen:
        for inner in q.vector_selectors(expr):
            out += _leaves(inner, sources, (*seen, sel.name))
    return out


def _read_slo(
    name: str, rules: list[RecordingRule], wires: dict[str, tuple[str, str]], sources: dict[str, str]
) -> SloDef | None:
    errors_prefix = naming.record("slo_events", "")  # requests and errors of the base window, one rule
    burn_prefix = naming.record("slo_burn_rate", "rate")
    errors = [r for r in rules if r.record.startswith(errors_prefix)]
    burns = {r.record[len(burn_prefix) :]: r for r in rules if r.record.startswith(burn_prefix)}
    if not errors or not burns:
        return None
    key, thr, bad, http = None, None, (), False
    read = [leaf for sel in q.vector_selectors(errors[0].expr) for leaf in _leaves(sel, sources)]
    for sel in read:
        found = wires.get(sel.name)
        http = http or (found is not None and found[0] in _ERROR_TERMS)
        if found is None or found[0] in _SUCCESS_TERMS:
            continue
        if found[0] == "request_success":
            reason = _matcher_value(sel, "finished_reason")
            if reason:
                bad = tuple(v.replace("\\", "") for v in reason[1].split("|"))
        else:
            key = found[0]
            le = _matcher_value(sel, "le")
            if le and le[1] != "+Inf":
                thr = _le_value(*le)
    shortest = min(burns, key=prom_duration_seconds)
    tree = q.parse(burns[shortest].expr)
    if not (isinstance(tree, promql_parser.BinaryExpr) and str(tree.op) == "/"):
        return None
    if not isinstance(tree.rhs, promql_parser.NumberLiteral) or (thr is None if key else not (bad or http)):
        return None
    return SloDef(name, key, thr, bad, tree.rhs.val, shortest)


def slo_totals(env: Env, slo: SloDef, fleet: Fleet, at: int, window: int) -> tuple[float, float]:
    """(errors, requests) rates of an SLO over a window. Windows longer than the shortest derive
    from the shortest window's recorded rate (slo._derived), sampled at every evaluation step of the tests
    (STEP_MINUTES apart), both ends of the range included as in Prometheus 2.x.

    Memoized per (SLO, fleet, minute, window): the probes ask for the same totals for every
    candidate fault, window and alert of an SLO, and a long window reads every minute of the
    history; without it test generation grew with SLOs x windows x minutes."""
    table = _table(env, slo, fleet)
    found = table.get((at, window))
    if found is None:
        before, env.inexact = env.inexact, False
        found = (*_slo_totals(env, slo, fleet, at, window, table), env.inexact)
        table[(at, window)] = found
        env.inexact = before
    env.inexact = env.inexact or found[2]
    return found[0], found[1]


def _table(env: Env, slo: SloDef, fleet: Fleet) -> dict[tuple[int, int], tuple[float, float, bool]]:
    """(minute, window) -> (errors, requests, inexact) of one SLO on one fleet: the long windows
    read hundreds of minutes each, and hashing the SLO and the fleet for every one of them cost
    more than the lookups."""
    key = (slo, fleet)
    table = env.memo.get(key)
    if table is None:
        table = env.memo[key] = {}
    return table


def _slo_totals(
    env: Env, slo: SloDef, fleet: Fleet, at: int, window: int, table: dict[tuple[int, int], tuple[float, float, bool]]
) -> tuple[float, float]:
    base = _minutes(slo.shortest)
    if window <= base:
        return _direct_totals(env, slo, fleet, at, window)
    # the recorded base-window rate has a sample at every evaluation step (STEP_MINUTES apart)
    first = max(at - (window - base), 1)
    samples = []
    for m in range(first, at + 1):
        if m % STEP_MINUTES == 0:
            found = table.get((m, base))
            # a sample's own inexactness does not matter: the long window's value is inexact anyway
            samples.append(found[:2] if found is not None else slo_totals(env, slo, fleet, m, base))
    now = slo_totals(env, slo, fleet, at, base)
    k = (window - base) / base
    n = len(samples)
    errors = (k * env.sum(e for e, _ in samples) / n + now[0]) / (k + 1)
    requests = (k * env.sum(t for _, t in samples) / n + now[1]) / (k + 1)
    env.inexact = True  # avg_over_time's rounding is Prometheus' own
    return errors, requests


def _direct_totals(env: Env, slo: SloDef, fleet: Fleet, at: int, window: int) -> tuple[float, float]:
    if slo.key is None:
        rates = fleet.reasons()
        total = env.sum(env.rate(rates.get(r, 0), at, window) for r in env.all_reasons())
        terms = []
        if env.ctx.has("gateway_errors"):  # a gateway's error answers: its requests count them already
            return fleet_rate(fleet.http_5xx, 1, window, at), total
        if env.ctx.has("http_requests") or env.ctx.has("request_errors") or env.ctx.has("errors"):
            terms.append(fleet_rate(fleet.http_5xx, 1, window, at))
        if env.ctx.has("admission_rejections"):
            terms.append(fleet_rate(fleet.rejected, 1, window, at))
        errors = env.sum(env.rate(rates.get(r, 0), at, window) for r in slo.bad) if slo.bad else None
        for v in terms:
            errors = v if errors is None else errors + v
            total = total + v
        return errors or 0.0, total
    bs = bounds(env.ctx, slo.key, fleet)
    idx = bs.index(slo.threshold) if slo.threshold in bs else len(bs)
    total = env.rate(sum(n for _, n in fleet.dist(slo.key)), at, window)
    good = env.rate(sum(n for j, n in fleet.dist(slo.key) if j <= idx), at, window)
    return total - good, total


def _minutes(window: str) -> int:
    return int(prom_duration_seconds(window) // 60)


def burn_rate(env: Env, slo: SloDef, fleet: Fleet, at: int, window: str | None = None) -> float:
    """The burn rate over a window (default the shortest): error ratio / budget."""
    errors, total = slo_totals(env, slo, fleet, at, _minutes(window or slo.shortest))
    return (errors / total) / slo.budget


def slo_probe(slo: SloDef) -> Probe:
    def fault(env: Env, fleet: Fleet, k: object) -> Fleet:
        assert isinstance(k, int)
        if slo.key is None:  # bad finishes, else (no error reason in the version) HTTP 5xx
            return fleet.with_share(slo.bad[0], k) if slo.bad else replace(fleet, http_5xx=k)
        bs = bounds(env.ctx, slo.key, fleet)
        above = bs.index(slo.threshold) + 1 if slo.threshold in bs else len(bs)
        body = fleet.dist(slo.key)[0][0]
        n = observations(slo.key)
        bad = n * k // 100
        dist = ((body, n - bad), (above, bad)) if bad < n else ((above, n),)
        return fleet.with_dist(slo.key, dist)

    return Probe(
        "slo",
        lambda env, fleet, at: burn_rate(env, slo, fleet, at),
        fault,
        lambda env, _: range(1, 101),
        slo=slo.name,
    )


def unavailable_probe(slo: SloDef) -> Probe:
    """Slo<Name>SliUnavailable: the engine exports the SLO's histogram without its threshold bucket;
    $value is the SLO's request rate over its shortest window."""

    def fault(env: Env, fleet: Fleet, _: object) -> Fleet:
        assert slo.key is not None and slo.threshold is not None
        dropped = {**dict(fleet.dropped_bounds), slo.key: (slo.threshold,)}
        return replace(fleet, dropped_bounds=tuple(sorted(dropped.items())))

    return Probe(
        "slo",
        lambda env, fleet, at: slo_totals(env, slo, fleet, at, _minutes(slo.shortest))[1],
        fault,
        lambda env, _: [None],
        thresholded=False,
        tag=slo.name,
    )


@functools.lru_cache(maxsize=4096)
def branches(expr: str) -> tuple[tuple[tuple[str, str, float], ...], ...]:
    """An alert expression as OR of AND-ed comparisons (series name, operator, number).
    Cached: every candidate fault of every probe asks again for the same few alerts."""

    def walk(node) -> list[list[tuple[str, str, float]]]:
        if isinstance(node, promql_parser.ParenExpr):
            return walk(node.expr)
        if isinstance(node, promql_parser.BinaryExpr):
            op = str(node.op)
            if op == "or":
                return walk(node.lhs) + walk(node.rhs)
            if op == "and":
                return [a + b for a in walk(node.lhs) for b in walk(node.rhs)]
            if op in _COMPARE and isinstance(node.rhs, promql_parser.NumberLiteral):
                lhs = node.lhs.expr if isinstance(node.lhs, promql_parser.ParenExpr) else node.lhs
                if isinstance(lhs, promql_parser.VectorSelector):
                    return [[(lhs.name, op, node.rhs.val)]]
        raise ValueError(f"cannot read the condition of {expr!r}")

    return tuple(tuple(branch) for branch in walk(promql_parser.parse(expr)))


def slo_fires(env: Env, slo: SloDef, rule: AlertRule, fleet: Fleet, at: int) -> bool | None:
    """Whether an SLO alert fires; None when a compared value sits within rounding of its threshold."""
    burn_prefix, requests_prefix = naming.record("slo_burn_rate", "rate"), naming.record("slo_requests", "rate")
    gate_prefix = naming.record("slo_gate_requests", "rate")
    fires = False
    for branch in branches(rule.expr):
        ok = True
        for name, op, number in branch:
            if name.startswith(burn_prefix):
                value = burn_rate(env, slo, fleet, at, name[len(burn_prefix) :])
            elif name.startswith(requests_prefix):
                value = slo_totals(env, slo, fleet, at, _minutes(name[len(requests_prefix) :]))[1]
            elif name.startswith(gate_prefix):  # finished requests of any reason
                value = env.finish_rate(fleet, env.all_reasons(), at, _minutes(name[len(gate_prefix) :]))
            else:
                raise ValueError(f"unknown series {name} in SLO alert {rule.name}")
            if math.isclose(value, number, rel_tol=1e-9):
                return None
            ok = ok and _COMPARE[op](value, number)
        fires = fires or ok
    return fires

"""Replica drill-down (part of the `plan` stage): dashboard variables `role` (with
service.roles), `instance` and `engine` (vLLM >= 0.8.3), chained from the spec's own
variables, and the row whose panels honour them.

Every other panel reads series aggregated per model, which keeps a refresh cheap at any
fleet size; the drill-down reads per-engine copies of three gauges, bounded by the number
of engines (the raw gauges' own cardinality). `instance` is a single choice (the first
replica by default, or the one an alert's dashboard_url names), so a refresh reads one
replica's engines, not the fleet's."""

from __future__ import annotations

from genobs import promql as q
from genobs.plan import liveness
from genobs.plan.context import Context
from genobs.plan.model import Panel, Row, Target, Variable
from genobs.plan.recorder import Recorder

GAUGES = (
    ("engine_kv_cache_usage", "kv_cache_usage", "engine_kv_cache_usage", "max"),
    ("engine_running", "requests_running", "engine_requests_running", "sum"),
    ("engine_waiting", "requests_waiting", "engine_requests_waiting", "sum"),
)


def role_label(ctx: Context) -> str | None:
    return ctx.where.role


def engine_labels(ctx: Context) -> tuple[str, ...]:
    """An engine's labels, with the pool's role label where roles are configured."""
    labels = liveness.engine_labels(ctx)
    role = role_label(ctx)
    return tuple(dict.fromkeys((*labels[:-1], role, labels[-1]) if role else labels))


def record(r: Recorder) -> None:
    ctx = r.ctx
    labels = engine_labels(ctx)
    for key, metric, subject, op in GAUGES:
        # every pool: a replica's own state (read both prefill and decode pods)
        sel = q.selector(ctx.metric(metric), ctx.raw_matchers())
        r.add(key, subject, op, f"{op} {q.by(labels)} ({sel})")


def _matchers(ctx: Context, upto: str | None = None) -> tuple[q.Matcher, ...]:
    """The spec's variable matchers, then role, instance, engine up to (not including) `upto`."""
    out = list(ctx.panel_matchers())
    chain = ctx.where.drilldown
    for label in chain:
        if label == upto:
            break
        out.append((label, "=~", f"${label}"))
    return tuple(out)


def variables(ctx: Context, rec: Recorder) -> tuple[Variable, ...]:
    source = rec.names["engine_running"]
    out = []
    role = role_label(ctx)
    if role:
        out.append(Variable(role, f"label_values({q.selector(source, _matchers(ctx, role))}, {role})", "role"))
    out.append(
        Variable(
            "instance",
            f"label_values({q.selector(source, _matchers(ctx, 'instance'))}, instance)",
            "instance",
            multi=False,
        )
    )
    rank = ctx.rank_label
    if rank is not None:
        out.append(Variable(rank, f"label_values({q.selector(source, _matchers(ctx, rank))}, {rank})", rank))
    return tuple(out)


def row(ctx: Context, rec: Recorder) -> Row:
    sel = lambda key: q.selector(rec.names[key], _matchers(ctx))  # noqa: E731
    replica = tuple(m for m in _matchers(ctx) if m[0] not in (ctx.rank_label, role_label(ctx)))
    rank = ctx.rank_label
    per = f"{{{{instance}}}} {rank} {{{{{rank}}}}}" if rank is not None else "{{instance}}"
    # liveness per scheduler where the engine counts each one's tokens (SGLang dp_rank)
    live = per + "".join(
        f" {label} {{{{{label}}}}}" for label in liveness.liveness_labels(ctx) if label not in liveness.engine_labels(ctx)
    )
    return Row(
        "Replica drill-down ($instance)",
        (
            Panel(
                "Replica liveness",
                f"Requests the replica holds (running + waiting) and its progress ({liveness.progress_words(ctx)} per second). Holding "
                f"requests with no progress is a hung engine ({ctx.alert('EngineHung')}).",
                "short",
                (
                    Target(q.selector(rec.names["engine_active"], replica), f"{live} requests held"),
                    Target(q.selector(rec.names["engine_progress"], replica), f"{live} progress /s"),
                ),
                width=8,
            ),
            Panel(
                "KV cache usage per engine",
                "KV-cache usage of each data-parallel engine of the replica (1 = full): one full engine with "
                "waiting requests saturates while the fleet maximum looks the same.",
                "percentunit",
                (Target(sel("engine_kv_cache_usage"), per),),
                width=8,
                max=1,
            ),
            Panel(
                "Running and waiting per engine",
                "Requests in each engine's running batch and queue.",
                "short",
                (
                    Target(sel("engine_running"), f"{per} running"),
                    Target(sel("engine_waiting"), f"{per} waiting"),
                ),
                width=8,
            ),
        ),
    )

"""Capacity signals (`capacity:` block, the capacity use case, features.gpu_metrics,
kubernetes.autoscaling): goodput bounds, system efficiency, TTFT against a
baseline, headroom, DCGM GPU saturation and the autoscaler-at-max alert. They
form their own rule group (`capacity.rules.yaml`) reading the recorded series of
the recording group."""

from __future__ import annotations

from dataclasses import dataclass

from genobs import naming
from genobs import promql as q
from genobs.catalog import format_version
from genobs.plan import capacity_gpu
from genobs.plan.alerts import runbook_entries
from genobs.plan.capacity_builder import Builder, capacity_data
from genobs.plan.capacity_goodput import goodput
from genobs.plan.context import Context
from genobs.plan.model import AlertRule, RecordingRule, Row, RunbookEntry
from genobs.plan.recorder import Recorder
from genobs.spec_capacity import Autoscaling, Capacity, Degradation, Gpu
from genobs.units import parse_ratio, parse_seconds, prom_duration_seconds

P99 = (("quantile", "=", "0.99"),)


def settings(spec) -> Capacity | None:
    """The spec's capacity block; the capacity use case switches the defaults on without one."""
    if spec.capacity is not None:
        return spec.capacity
    if spec.use_case == "capacity":
        return Capacity()
    return None


def degradation(spec, cap: Capacity) -> Degradation | None:
    d = cap.degradation if cap.degradation is not None else (Degradation() if spec.use_case == "capacity" else None)
    return d if d is not None and d.enabled else None


def validate(doc, ctx: Context, report) -> None:
    """Goodput bounds must be bucket boundaries of the version's histograms; report(path, message)."""
    spec = doc.spec
    if capacity_gpu.settings(spec) is not None and settings(spec) is None:
        report(("features", "gpu_metrics"), "the GPU signals are capacity signals: add a capacity block or use_case: capacity")
    capacity_gpu.validate(spec, report)
    if spec.kubernetes.autoscaling is not None:
        from genobs.plan.capacity_autoscaling import validate as validate_autoscaling

        validate_autoscaling(spec, spec.kubernetes.autoscaling, settings(spec) is not None, report)
    cap = spec.capacity
    if cap is not None and cap.goodput is not None:
        g = cap.goodput
        path = ("capacity", "goodput")
        if g.ttft is None and g.tpot is None and g.gateway is None:
            report(path, "goodput needs a ttft or tpot bound (or a gateway metric)")
        for key, value in (("ttft", g.ttft), ("tpot", g.tpot)):
            if value is None:
                continue
            since = ctx.catalog.per_request_tpot_since
            if key == "tpot" and ctx.version < since:
                report(
                    (*path, key),
                    f"{ctx.release} has no per-request TPOT histogram "
                    f"({ctx.catalog.name('tpot', since)} exists from {format_version(since)}); goodput needs it",
                )
                continue
            bounds = ctx.catalog.metric(key).buckets_for(ctx.version)
            seconds = parse_seconds(value)
            if not any(abs(b - seconds) < 1e-9 for b in bounds):
                near = ", ".join(f"{b:g}s" for b in bounds if seconds / 4 <= b <= seconds * 4) or "none near"
                report(
                    (*path, key),
                    f"{value} is not a bucket boundary of {ctx.metric(key)} in {ctx.release}; "
                    f"boundaries near it: {near}",
                )
        if g.objective is not None and g.ttft is None and g.tpot is None and g.gateway is None:
            report((*path, "objective"), "a goodput objective needs a bound to measure")


def efficiency(b: Builder, cap: Capacity) -> None:
    e = cap.efficiency
    if not e.enabled:
        return
    ctx = b.ctx
    w = ctx.window
    for key in ("running", "waiting"):
        metric = f"requests_{key}"
        b.add(f"{key}_deriv", naming.record(metric, f"deriv{w}"), q.sum_by(ctx.group, f"deriv({ctx.raw(metric)}[{w}])"))
    # arrivals = what finished + what piled up in the batch and the queue
    arrivals = f"{b.rec.ref('finished')} + {b.ref('running_deriv')} + {b.ref('waiting_deriv')}"
    b.add("arrivals", naming.record("request_arrivals", naming.rate_op("rate", w)), arrivals)
    b.add(
        "efficiency",
        naming.record("system_efficiency", naming.rate_op("ratio", w)),
        q.ratio(b.rec.ref("finished"), b.ref("arrivals")),
    )
    threshold = parse_ratio(e.warning)
    series = b.ref("efficiency")
    waiting = f"{b.rec.ref('waiting')} > 0"
    b.alert(
        "SystemEfficiencyLow",
        f"{series} < {threshold:g} {b.gate('arrivals')} and {q.on(ctx.group)} {waiting}",
        threshold,
        e.for_,
        series,
        "System efficiency",
    )


def baseline(b: Builder, d: Degradation) -> None:
    ctx = b.ctx
    p99 = b.rec.ref("ttft_quantile", P99)
    smooth = b.add(
        "ttft_p99_1h",
        naming.record("ttft_seconds", naming.rate_op("quantile", ctx.window) + "_avg_over_time1h"),
        f"avg_over_time({p99}[1h])",
    )
    now = ctx.recorded(smooth, P99)
    b.add(
        "ttft_vs_baseline",
        naming.record("ttft_p99_vs_baseline", f"ratio_offset{d.baseline}"),
        q.ratio(q.max_by(ctx.group, now), q.max_by(ctx.group, f"{now} offset {d.baseline}")),
    )
    series = b.ref("ttft_vs_baseline")
    b.alert(
        "TtftDegradedVsBaseline",
        f"{series} > {d.factor:g} {b.gate()}",
        d.factor,
        d.for_,
        series,
        "TTFT p99 against the baseline",
        texts={"baseline": d.baseline},
    )


def headroom(b: Builder, cap: Capacity) -> None:
    ctx = b.ctx
    if cap.max_num_seqs is not None:
        # max_num_seqs limits each engine (data-parallel rank): compare the fullest one
        name = b.add("running_per_engine", naming.record("requests_running_per_engine", "max"), q.max_by(ctx.group, ctx.raw("requests_running")))
        b.add(
            "max_num_seqs_used",
            naming.record("max_num_seqs_used", "ratio"),
            f"{ctx.recorded(name)} / {cap.max_num_seqs}",
        )
        b.add(
            "max_num_seqs_peak",
            naming.record("max_num_seqs_used", "ratio_max_over_time1d"),
            f"max_over_time({b.ref('max_num_seqs_used')}[1d])",
        )
    b.add(
        "kv_peak",
        naming.record("kv_cache_usage", "max_over_time1d"),
        f"max_over_time({b.rec.ref('kv_cache_usage')}[1d])",
    )
    if ctx.has("cache_config_info"):
        # cache_config_info carries no model_name: take it from the engine series of the same target
        join = ctx.where.engine_of_target
        pool = ("num_gpu_blocks", "block_size", "gpu_memory_utilization")
        info = q.selector(ctx.metric("cache_config_info"), ctx.raw_matchers(process=True))
        copied = [label for label in ctx.group if label not in join]
        owner = f"group {q.by((*join, *copied))} ({ctx.raw('requests_running')})"
        left = q.max_by((*join, *pool), info)
        joined = f"{left} * {q.on(join)} group_left ({', '.join(copied)}) {owner}" if copied else f"{left} * {q.on(join)} {owner}"
        b.add("kv_pool", naming.record("kv_cache_pool", "info"), q.max_by((*ctx.group, *pool), joined))


@dataclass(frozen=True)
class CapacityPlan:
    rules: tuple[RecordingRule | AlertRule, ...]
    rows: tuple[Row, ...]  # shown after the system-throughput row
    runbook: tuple[RunbookEntry, ...]
    known: frozenset[str]  # raw series of other exporters the rules read
    names: dict[str, str]  # recorded names of the recording and the capacity rules, by key
    settings: Capacity
    degradation: Degradation | None
    autoscaling: Autoscaling | None = None  # with the kube-state-metrics at-max alert
    hpa: str = ""  # the HPA's name
    gpu: Gpu | None = None  # features.gpu_metrics


def build(doc, ctx: Context, rec: Recorder, base_url: str, team: str | None) -> CapacityPlan | None:
    from genobs.plan.capacity_panels import goodput_row, gpu_row, headroom_row

    spec = doc.spec
    cap = settings(spec)
    if cap is None:
        return None
    b = Builder(ctx, rec, base_url, team)
    goodput(b, cap)
    efficiency(b, cap)
    deg = degradation(spec, cap)
    if deg is not None:
        baseline(b, deg)
    headroom(b, cap)
    gpu = capacity_gpu.settings(spec)
    if gpu is not None:
        capacity_gpu.build(b, gpu)
    auto = spec.kubernetes.autoscaling if spec.kubernetes.autoscaling and spec.kubernetes.autoscaling.kube_state_metrics else None
    if auto is not None:
        from genobs.plan.capacity_autoscaling import autoscaler

        autoscaler(b, auto, spec.name)
    names = {**rec.names, **b.names}
    objective = parse_ratio(cap.goodput.objective) if cap.goodput and cap.goodput.objective is not None else None
    eff = parse_ratio(cap.efficiency.warning) if cap.efficiency.enabled else None
    rows = [goodput_row(ctx, names, objective, eff), headroom_row(ctx, names, cap.max_num_seqs, deg and deg.baseline)]
    rows.append(gpu_row(ctx, names, gpu))
    return CapacityPlan(
        rules=(*b.rules, *b.alerts),
        rows=tuple(r for r in rows if r is not None and r.panels),
        runbook=runbook_entries(b.alerts, capacity_data(), ctx, lambda key: b.confirm.get(key, ())),
        known=frozenset(b.known),
        names=names,
        settings=cap,
        degradation=deg,
        autoscaling=auto,
        hpa=f"genobs-{spec.name}",
        gpu=gpu,
    )


def window_minutes(duration: str) -> int:
    return int(prom_duration_seconds(duration) // 60)

"""promtool unit tests of the capacity alerts: a healthy fleet on which none fires,
and one fault per alert that makes it fire, with input series named and labelled
as vLLM (and DCGM, kube-state-metrics) export them. The baseline alert compares
with a week ago, so its test feeds the recorded TTFT p99 hour by hour instead of
simulating a week of raw counters."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from genobs import naming
from genobs import promql as q
from genobs.plan import capacity_gpu
from genobs.plan.capacity import P99, CapacityPlan
from genobs.plan.context import Context
from genobs.plan.model import AlertRule, RuleGroup
from genobs.testgen.humanize import expected_alert
from genobs.testgen.unittests_fleet import (
    EVALUATION_STEP,
    INPUT_INTERVAL,
    MARGIN_MINUTES,
    Identity,
    floatToGoString,
    identity,
    on_step,
    per_minute,
    series_entry,
)
from genobs.units import parse_ratio, parse_seconds, prom_duration_seconds

FB_TOTAL = 81559  # MiB of framebuffer an H100 80GB reports (used + free)
POD = "vllm-0"  # the vLLM pod of the simulated fleet; its two GPUs are DCGM's gpu 0 and 1


@dataclass(frozen=True)
class State:
    """Fleet-wide rates (per second) and gauges of the simulated fleet."""

    finished: int  # finished requests/s, all with reason stop
    ttft_ok: int  # of which within the goodput TTFT bound
    tpot_ok: int  # of which within the goodput TPOT bound
    gateway_good: int  # requests/s the gateway counts as within every SLO
    waiting: int = 2
    waiting_growth: float = 0.0  # waiting requests added per second over the fleet
    running: int = 8
    hpa: tuple[int, int] = (1, 1)  # kube-state-metrics: current and max replicas
    gpu_util: int = 50  # DCGM utilisation (%) of both GPUs of the pod
    fb_used: tuple[int, int] = (0, 0)  # DCGM framebuffer used (MiB) of GPU 0 and 1; total FB_TOTAL
    missing: str = ""  # histogram (ttft, tpot) whose bucket at the goodput bound is not exported


def _labels(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={q.quote(v)}" for k, v in sorted(labels.items()))


def _num(x: float) -> str:
    return str(int(x)) if float(x) == int(x) else repr(float(x))


class _Gen:
    def __init__(self, ctx: Context, cap: CapacityPlan, ident: Identity, minutes: int):
        self.ctx, self.cap, self.ident, self.minutes = ctx, cap, ident, minutes

    def engine(self, rank: str | None, **extra: str) -> dict[str, str]:
        labels = dict(self.ident.engine)
        if self.cap.gpu is not None:  # the GPU join needs the pod (and namespace) the scrape adds
            labels.update(pod_labels(self.ident))
        if rank is not None and self.ctx.rank_label is not None:
            labels[self.ctx.rank_label] = rank
        return {**labels, **extra}

    def counter(self, per_second: float) -> str:
        return f"0+{_num(per_minute(per_second, len(self.ident.ranks)))}x{self.minutes}"

    def histogram(self, key: str, bound: float, ok: int, total: int, missing: bool = False) -> list[dict]:
        """Requests within `bound` in its bucket, the others above every finite bucket (`missing`:
        the engine runs with custom buckets that leave `bound` out)."""
        name = self.ctx.metric(key, "_bucket")
        out = []
        for upper in (*self.ctx.catalog.metric(key).buckets_for(self.ctx.version), math.inf):
            if missing and abs(upper - bound) < 1e-12:
                continue
            count = total if math.isinf(upper) else (ok if upper >= bound - 1e-12 else 0)
            for rank in self.ident.ranks:
                le = floatToGoString(self.ctx.catalog.metric(key).wire_value(upper))
                out.append(series_entry(name, self.engine(rank, le=le), self.counter(count)))
        return out

    def inputs(self, s: State, gpu_only: bool = False) -> list[dict]:
        """The fleet's series; `gpu_only`: just what the GPU alerts read (the vLLM gauges and DCGM)."""
        ctx, out = self.ctx, []
        n = len(self.ident.ranks)
        if gpu_only:
            return self.gauges(s, n) + self.dcgm(s)
        if not ctx.has("request_success"):  # finished requests without a reason (SGLang)
            for rank in self.ident.ranks:
                out.append(series_entry(ctx.metric("requests_finished"), self.engine(rank), self.counter(s.finished)))
        for reason in ctx.catalog.reasons_for(ctx.version):
            rate = s.finished if reason == "stop" else 0
            for rank in self.ident.ranks:
                out.append(
                    series_entry(ctx.metric("request_success"), self.engine(rank, finished_reason=reason), self.counter(rate))
                )
        g = self.cap.settings.goodput
        if g is not None and g.ttft is not None:
            out += self.histogram("ttft", parse_seconds(g.ttft), s.ttft_ok, s.finished, s.missing == "ttft")
        if g is not None and g.tpot is not None:
            out += self.histogram("tpot", parse_seconds(g.tpot), s.tpot_ok, s.finished, s.missing == "tpot")
        if g is not None and g.gateway is not None:
            labels = dict(g.gateway.selector)
            if "model_name" in ctx.variables:
                labels["model_name"] = self.ident.engine["model_name"]
            for name, rate in ((g.gateway.good, s.gateway_good), (g.gateway.total, s.finished)):
                out.append(series_entry(name, labels, f"0+{_num(rate * 60)}x{self.minutes}"))
        out += self.gauges(s, n)
        if self.cap.gpu is not None:
            out += self.dcgm(s)
        auto = self.cap.autoscaling
        if auto is not None:
            hpa = {"namespace": auto.target.namespace, "horizontalpodautoscaler": self.cap.hpa}
            ksm = {**hpa, "job": "kube-state-metrics", "instance": "10.0.6.1:8080"}
            for name, value in zip(
                ("kube_horizontalpodautoscaler_status_current_replicas", "kube_horizontalpodautoscaler_spec_max_replicas"),
                s.hpa,
            ):
                out.append(series_entry(name, ksm, f"{value}x{self.minutes}"))
        return out


    def gauges(self, s: State, n: int) -> list[dict]:
        out = []
        for key, value, growth in (("requests_running", s.running, 0.0), ("requests_waiting", s.waiting, s.waiting_growth)):
            step = growth * 60 / n
            for rank in self.ident.ranks:
                sign = "-" if step < 0 else "+"
                out.append(
                    series_entry(self.ctx.metric(key), self.engine(rank), f"{_num(value / n)}{sign}{_num(abs(step))}x{self.minutes}")
                )
        return out

    def dcgm(self, s: State) -> list[dict]:
        """dcgm-exporter's series of the pod's two GPUs, labelled as the exporter labels them."""
        gpu = self.cap.gpu
        assert gpu is not None
        pod = pod_labels(self.ident)
        out = []
        for index, used in enumerate(s.fb_used):
            labels = {
                **gpu.selector,
                "instance": "10.0.7.1:9400",
                "gpu": str(index),
                "UUID": f"GPU-6f3a1c2e-0b7d-4e59-9a41-00000000000{index}",
                "pci_bus_id": f"00000000:{0x18 + index:02X}:00.0",
                "device": f"nvidia{index}",
                "modelName": "NVIDIA H100 80GB HBM3",
                "Hostname": "gpu-node-1",
                "container": "vllm",
                gpu.pod_label: pod["pod"],
            }
            labels.setdefault("job", "dcgm-exporter")
            if gpu.namespace_label is not None:
                labels[gpu.namespace_label] = pod["namespace"]
            for theirs, ours, exporter in (("pod", gpu.pod_label, "dcgm-exporter-7xk2p"), ("namespace", gpu.namespace_label, "gpu-operator")):
                if ours not in (None, theirs):  # scraped without honorLabels: the exporter's own target labels
                    labels[theirs] = exporter
            for key, value in (("gpu_util", s.gpu_util), ("fb_used", used), ("fb_free", FB_TOTAL - used)):
                out.append(series_entry(capacity_gpu.metric(key), labels, f"{value}x{self.minutes}"))
        return out


def pod_labels(ident: Identity) -> dict[str, str]:
    return {"pod": POD, "namespace": ident.engine.get("namespace", "llm-prod")}


def _minutes(duration: str) -> int:
    return math.ceil(prom_duration_seconds(duration) / 60) if duration else 0


def _below(limit: float) -> int:
    """k such that 1 / (1 + k) is below `limit` (0 < limit < 1)."""
    return math.floor(1 / limit)


def build_capacity_tests(
    ctx: Context, cap: CapacityPlan, recording: RuleGroup, group: RuleGroup, spec_name: str
) -> tuple[tuple[str, dict], ...]:
    alerts = {r.key: r for r in group.rules if isinstance(r, AlertRule)}  # by key; tests name r.name
    if not alerts:
        return ()
    ident = identity(ctx)
    assert ident is not None
    labels = {k: ident.engine[k] for k in ctx.group}
    window = _minutes(ctx.window)
    # enough traffic for every gate, in round numbers
    unit = 10 * max(1, math.ceil(ctx.min_request_rate * 2 / 10))
    g = cap.settings.goodput
    k_goodput = _below(parse_ratio(g.objective)) if g is not None and g.objective is not None else 1
    finished = unit * (1 + k_goodput) * len(ident.ranks)
    healthy = State(finished, finished, finished, finished)
    auto = cap.autoscaling
    if auto is not None:  # healthy includes: at its maximum while the queue holds steady
        healthy = replace(healthy, hpa=(auto.max_replicas, auto.max_replicas))
    gpu = cap.gpu
    if gpu is not None:
        healthy = replace(healthy, fb_used=(_healthy_fb(gpu),) * 2)
    faults: list[tuple[str, State, float, dict[str, str]]] = []  # alert key, state, $value, labels
    faults += _gpu_faults(ctx, cap, alerts, healthy, labels, ident)
    if "AutoscalerAtMaxReplicas" in alerts and auto is not None:
        hpa = {"namespace": auto.target.namespace, "horizontalpodautoscaler": cap.hpa}
        faults.append(("AutoscalerAtMaxReplicas", replace(healthy, waiting_growth=1), auto.max_replicas, hpa))
    if "SystemEfficiencyLow" in alerts:
        k = _below(parse_ratio(cap.settings.efficiency.warning))
        faults.append(("SystemEfficiencyLow", replace(healthy, waiting_growth=finished * k), 1 / (1 + k), labels))
    if "GoodputBelowObjective" in alerts and g is not None:
        good = finished // (1 + k_goodput)
        fault = replace(healthy, ttft_ok=good) if g.ttft is not None else replace(healthy, tpot_ok=good)
        fault_labels = labels
        if g.gateway is not None:
            fault = replace(healthy, gateway_good=good)
            kept = [k for k in ctx.group if k == "model_name" or k in dict(ctx.selector)]
            fault_labels = {k: labels[k] for k in kept}
        faults.append(("GoodputBelowObjective", fault, good / finished, fault_labels))
    if "GoodputUnavailable" in alerts and g is not None:
        # every request misses TTFT, but the bucket that would count it is not exported
        fault = replace(healthy, ttft_ok=0, missing="ttft" if g.ttft is not None else "tpot")
        faults.append(("GoodputUnavailable", fault, float(finished), labels))
    longest = max([_minutes(alerts[key].for_) for key, *_ in faults] or [0])
    minutes = on_step(window + longest + MARGIN_MINUTES)
    gen = _Gen(ctx, cap, ident, minutes)
    tests: list[dict] = []
    healthy_group: dict = {
        "name": "capacity: healthy fleet, no capacity alert fires",
        "interval": INPUT_INTERVAL,
        "input_series": gen.inputs(healthy),
        "alert_rule_test": [{"eval_time": f"{minutes}m", "alertname": r.name, "exp_alerts": []} for r in alerts.values()],
    }
    exprs = []
    for key in ("efficiency", "goodput_upper_ratio", "goodput_lower_ratio"):
        if key in cap.names and key in {k for k, v in cap.names.items() if v in _recorded(group)}:
            name = cap.names[key]
            exprs.append(
                {
                    "expr": ctx.recorded(name),
                    "eval_time": f"{minutes}m",
                    "exp_samples": [{"labels": f"{name}{{{_labels(labels)}}}", "value": 1}],
                }
            )
    if exprs:
        healthy_group["promql_expr_test"] = exprs
    tests.append(healthy_group)
    for key, state, value, fault_labels in faults:
        rule = alerts[key]
        name = rule.name
        at = on_step(window + _minutes(rule.for_) + MARGIN_MINUTES)
        cases = []
        if _minutes(rule.for_) >= 2:  # still pending just before `for` has passed
            cases.append({"eval_time": f"{_minutes(rule.for_) - 1}m", "alertname": name, "exp_alerts": []})
        cases.append({"eval_time": f"{at}m", "alertname": name, "exp_alerts": [expected_alert(rule, fault_labels, value)]})
        tests.append(
            {
                "name": f"capacity fault: {name}",
                "interval": INPUT_INTERVAL,
                "input_series": _Gen(ctx, cap, ident, at).inputs(state, gpu_only=key.startswith("Gpu")),
                "alert_rule_test": cases,
            }
        )
    if "GpuSaturated" in alerts and gpu is not None:
        # busy GPUs with a short queue are good economics, not saturation
        busy = replace(healthy, gpu_util=95, waiting=math.floor(gpu.waiting_per_replica))
        at = on_step(_minutes(alerts["GpuSaturated"].for_) + MARGIN_MINUTES)
        tests.append(
            {
                "name": f"capacity: GPUs at 95% with a short queue, {alerts['GpuSaturated'].name} silent",
                "interval": INPUT_INTERVAL,
                "input_series": _Gen(ctx, cap, ident, at).inputs(busy, gpu_only=True),
                "alert_rule_test": [{"eval_time": f"{at}m", "alertname": alerts["GpuSaturated"].name, "exp_alerts": []}],
            }
        )
    if "AutoscalerAtMaxReplicas" in alerts and auto is not None and auto.max_replicas >= 2:
        below = replace(healthy, waiting_growth=1, hpa=(auto.max_replicas - 1, auto.max_replicas))
        at = on_step(window + _minutes(alerts["AutoscalerAtMaxReplicas"].for_) + MARGIN_MINUTES)
        tests.append(
            {
                "name": f"capacity: the queue grows below the autoscaler's maximum, {alerts['AutoscalerAtMaxReplicas'].name} silent",
                "interval": INPUT_INTERVAL,
                "input_series": _Gen(ctx, cap, ident, at).inputs(below),
                "alert_rule_test": [{"eval_time": f"{at}m", "alertname": alerts["AutoscalerAtMaxReplicas"].name, "exp_alerts": []}],
            }
        )
    files = [("capacity.test.yaml", _document(spec_name, (recording, group), tests))]
    if "TtftDegradedVsBaseline" in alerts and cap.degradation is not None:
        files.append(("capacity-baseline.test.yaml", _baseline(ctx, cap, alerts["TtftDegradedVsBaseline"], group, labels, spec_name)))
    return tuple(files)


def _healthy_fb(gpu) -> int:
    """MiB in use on a healthy GPU: vLLM's reservation, kept inside the two memory alerts' limits."""
    floor = parse_ratio(gpu.memory_utilization) * parse_ratio(gpu.reservation_floor)
    top = 1 - parse_ratio(gpu.min_free)
    share = parse_ratio(gpu.memory_utilization)
    if not floor < share < top:
        share = (floor + top) / 2
    return round(share * FB_TOTAL)


def _gpu_faults(ctx: Context, cap: CapacityPlan, alerts: dict, healthy: State, labels: dict, ident: Identity) -> list:
    gpu = cap.gpu
    if gpu is None:
        return []
    pod = pod_labels(ident)
    at_pod = {**labels, **{k: pod[k] for k in capacity_gpu.join_labels(gpu)}}
    ok = healthy.fb_used[0]
    out = []
    if "GpuSaturated" in alerts:
        waiting = math.floor(gpu.waiting_per_replica) + 1
        out.append(("GpuSaturated", replace(healthy, gpu_util=95, waiting=waiting), 0.95, at_pod))
    floor = parse_ratio(gpu.memory_utilization) * parse_ratio(gpu.reservation_floor)
    if "GpuMemoryBelowReservation" in alerts:
        low = math.floor(floor / 2 * FB_TOTAL)  # one GPU of the pod holds half the floor
        out.append(("GpuMemoryBelowReservation", replace(healthy, fb_used=(low, ok)), low / FB_TOTAL, at_pod))
    if "GpuMemoryNearlyFull" in alerts:
        full = FB_TOTAL - math.floor(parse_ratio(gpu.min_free) / 2 * FB_TOTAL)
        out.append(("GpuMemoryNearlyFull", replace(healthy, fb_used=(ok, full)), full / FB_TOTAL, at_pod))
    return out


def _recorded(group: RuleGroup) -> set[str]:
    return {r.record for r in group.rules if not isinstance(r, AlertRule)}


def _document(spec_name: str, groups: tuple[RuleGroup, ...], tests: list[dict], interval: str = EVALUATION_STEP) -> dict:
    return {
        "rule_files": [f"../{naming.rule_file(spec_name, g.name)}" for g in groups],
        "evaluation_interval": interval,
        "group_eval_order": [g.name for g in groups],
        "tests": tests,
    }


def _baseline(ctx: Context, cap: CapacityPlan, rule: AlertRule, group: RuleGroup, labels: dict, spec_name: str) -> dict:
    """Hourly recorded TTFT p99: steady for the baseline period, then (factor + 1) times higher."""
    assert cap.degradation is not None
    hours = round(prom_duration_seconds(cap.degradation.baseline) / 3600)
    after = 30
    p99 = cap.names["ttft_quantile"]
    finished = cap.names["finished"]
    rate = 10 * max(1, math.ceil(ctx.min_request_rate * 2 / 10))
    factor = cap.degradation.factor
    at = hours + after - 5
    steady = {
        "series": f"{p99}{{{_labels({**labels, 'quantile': '0.99'})}}}",
        "values": f"0.5x{hours + after}",
    }
    traffic = {"series": f"{finished}{{{_labels(labels)}}}", "values": f"{rate}x{hours + after}"}
    degraded = dict(steady, values=f"0.5x{hours} {_num(0.5 * (factor + 1))}x{after - 1}")
    tests = [
        {
            "name": f"capacity baseline: TTFT p99 steady over the {cap.degradation.baseline} baseline, no degradation",
            "interval": "1h",
            "input_series": [steady, traffic],
            "alert_rule_test": [{"eval_time": f"{at}h", "alertname": rule.name, "exp_alerts": []}],
        },
        {
            "name": f"capacity baseline: TTFT p99 {factor + 1:g}x the {cap.degradation.baseline} baseline",
            "interval": "1h",
            "input_series": [degraded, dict(traffic)],  # a copy: a shared dict would be written as a YAML alias
            "alert_rule_test": [
                {"eval_time": f"{hours}h", "alertname": rule.name, "exp_alerts": []},
                {"eval_time": f"{at}h", "alertname": rule.name, "exp_alerts": [expected_alert(rule, labels, factor + 1)]},
            ],
        },
    ]
    return _document(spec_name, (group,), tests, interval="1h")


__all__ = ["build_capacity_tests", "P99"]

"""The PromQL table `genobs compare` runs for each side: raw vLLM series of the
spec's engine version and dialect, restricted to the spec's selector plus the side's
matchers, every value aggregated over the whole side (one number per KPI)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from genobs import promql as q
from genobs.catalog import Catalog, Version
from genobs.gates.sides import Side


@dataclass(frozen=True)
class Query:
    key: str
    title: str
    unit: str  # ratio | s | tok/s | tok/s/user | per request | x
    better: str  # higher | lower | none
    expr: str
    alert: str = ""  # spec alert whose gate level is this KPI's threshold
    floor: float = 0.0  # absolute differences below this are noise
    complement: bool = False  # judge the change on 1 - value (failures), not on the value
    objective: float | None = None  # goodput rows: the SLO objective
    profile: bool = False  # describes the load, not the service: a difference is a warning
    layer: str = "pods"  # where it is read: the engine pods, or the gateway in front of them


@dataclass(frozen=True)
class Env:
    """Names and matchers of the spec, independent of the plan's internals."""

    catalog: Catalog
    version: Version
    dialect: str
    selector: tuple[tuple[str, str], ...]
    models: tuple[str, ...]
    features: frozenset[str]
    slos: tuple[tuple[str, str, float, float], ...] = ()  # (name, histogram key, threshold s, objective)

    def has(self, key: str) -> bool:
        return self.catalog.name(key, self.version) is not None

    def metric(self, key: str, suffix: str = "") -> str:
        name = self.catalog.name(key, self.version)
        if name is None:
            raise KeyError(key)
        name += suffix
        return name.replace(":", "_") if self.dialect == "underscore" else name

    def matchers(self, side: Side, process: bool = False) -> tuple[q.Matcher, ...]:
        """Spec selector and models, with any label the side names taken from the side instead."""
        wire = self.catalog.model_label  # model_name on the side is the profile's model label (Dynamo: model)
        theirs = tuple((wire if k == "model_name" else k, op, v) for k, op, v in side.matchers)
        own = {label for label, _, _ in theirs}
        out: list[q.Matcher] = [(k, "=", v) for k, v in self.selector if k not in own]
        if self.models and not process and wire not in own:
            out.append((wire, "=~", q.any_of(self.models)))
        return (*out, *theirs)


# histogram key -> (title, alert on its p99)
LATENCIES = {
    "ttft": ("TTFT", "TtftP99High"),
    "itl": ("ITL", "ItlP99High"),
    "tpot": ("TPOT", ""),
    "e2e": ("E2E latency", "E2eLatencyP99High"),
    "queue_time": ("queue time", "QueueTimeP99High"),
}


def build_queries(env: Env, side: Side) -> list[Query]:
    m, w = env.matchers(side), side.window

    def sel(key: str, suffix: str = "", extra: tuple[q.Matcher, ...] = ()) -> str:
        # the profile's own matchers: one counter read as two signals (SGLang's prefill tokens by mode)
        return q.selector(env.metric(key, suffix), (*m, *env.catalog.metric(key).matchers_for(env.version), *extra))

    def sum_rate(key: str, suffix: str = "", extra: tuple[q.Matcher, ...] = ()) -> str:
        return f"sum({q.rate(sel(key, suffix, extra), w)})"

    reasons = env.catalog.reasons_for(env.version)
    # an engine without finish reasons (SGLang) counts finished requests in one counter
    finished = sum_rate("request_success" if env.has("request_success") else "requests_finished")
    # server failures, as the availability SLO counts them: `error` finishes where the version
    # has them (client aborts are users pressing stop); before that `abort` is all there is
    bad = ("error",) if "error" in reasons else (env.catalog.abort_reason,)
    out = [Query("requests", "finished requests", "req/s", "none", finished, profile=True)]
    if reasons:
        failed = sum_rate("request_success", extra=(("finished_reason", "=~", "|".join(bad)),))
        out += [
            Query(
                "stop_share",
                "success (finished stop)",
                "ratio",
                "higher",
                q.ratio(
                    f"({sum_rate('request_success', extra=(('finished_reason', '=', 'stop'),))} or vector(0))",
                    finished,
                ),
                alert="SuccessRatioLow",
                floor=0.001,
                complement=True,
            ),
            Query(
                "availability",
                f"availability (not {'/'.join(bad)})",
                "ratio",
                "higher",
                f"1 - {q.ratio(f'({failed} or vector(0))', finished)}",
                floor=0.001,
                complement=True,
            ),
        ]
    if env.has("http_requests") and "model_name" not in {label for label, _, _ in side.matchers}:
        # answers that never reached the engine; per API-server process, so no model_name label
        pm = env.matchers(side, process=True)
        handlers = ("handler", "=~", q.any_of(env.catalog.completion_handlers))
        http = q.selector(env.metric("http_requests"), (*pm, handlers))
        http5 = q.selector(env.metric("http_requests"), (*pm, handlers, ("status", "=", "5xx")))
        out.append(
            Query(
                "http_ok",
                "HTTP answers not 5xx (generation endpoints)",
                "ratio",
                "higher",
                f"1 - {q.ratio(f'(sum({q.rate(http5, w)}) or vector(0))', f'sum({q.rate(http, w)})')}",
                floor=0.001,
                complement=True,
            )
        )
    for key, (title, alert) in LATENCIES.items():
        if not env.has(key):
            continue
        for quant in (0.5, 0.99):
            expr = f"{q.quantile(quant, (), q.rate(sel(key, '_bucket'), w))} >= 0"
            out.append(
                Query(
                    f"{key}_p{quant * 100:g}",
                    f"{title} p{quant * 100:g}",
                    "s",
                    "lower",
                    expr,
                    alert=alert if quant == 0.99 else "",
                    floor=0.001,
                )
            )
    speed_key = "tpot" if env.has("tpot") else "itl"
    out.append(
        Query(
            "output_speed_per_user",
            f"output tok/s/user (1 / mean {'TPOT' if speed_key == 'tpot' else 'ITL'})",
            "tok/s/user",
            "higher",
            q.ratio(sum_rate(speed_key, "_count"), sum_rate(speed_key, "_sum")),
            alert="OutputSpeedPerUserLow",
            floor=0.1,
        )
    )
    prompt, gen = sum_rate("prompt_tokens"), sum_rate("generation_tokens")
    out += [
        # live throughput follows the offered load, not the checkpoint: shown, never judged
        Query("output_tps", "output tok/s (system)", "tok/s", "none", gen),
        Query("total_tps", "total tok/s (system)", "tok/s", "none", f"{prompt} + {gen}"),
        # the load profile of each side: when these differ the comparison is not like for like
        Query(
            "prompt_per_request", "prompt tokens per request", "tok", "none", q.ratio(prompt, finished), profile=True
        ),
        Query(
            "generation_per_request",
            "generation tokens per request",
            "tok",
            "none",
            q.ratio(gen, finished),
            profile=True,
        ),
        Query("io_ratio", "IO ratio (prompt : generation tokens)", "x", "none", q.ratio(prompt, gen), profile=True),
    ]
    if "prefix_caching" in env.features:
        if env.has("prefix_cache_hits"):
            expr = q.ratio(sum_rate("prefix_cache_hits"), sum_rate("prefix_cache_queries"))
        else:
            expr = f"avg(avg_over_time({sel('prefix_cache_hit_rate_gauge')}[{w}]))"
        out.append(Query("prefix_hit", "prefix-cache hit rate", "ratio", "higher", expr, floor=0.01))
    if env.has("preemptions"):  # TensorRT-LLM counts none
        out.append(
            Query(
                "preemptions_per_request",
                "preemptions per finished request",
                "per request",
                "lower",
                q.ratio(f"({sum_rate('preemptions')} or vector(0))", finished),
                floor=0.001,
            )
        )
    out += [
        Query(
            "kv_usage",
            "KV-cache usage (mean)",
            "ratio",
            "lower",
            f"avg(avg_over_time({sel('kv_cache_usage')}[{w}]))",
            floor=0.02,
        ),
    ]
    for name, key, threshold, objective in env.slos:
        if not env.has(key):
            continue
        good = sum_rate(key, "_bucket", (q.le_matcher(threshold),))
        out.append(
            Query(
                f"goodput_{name}",
                f"goodput: share within SLO {name} ({LATENCIES[key][0]} ≤ {threshold:g}s)",
                "ratio",
                "higher",
                q.ratio(good, sum_rate(key, "_count")),
                floor=0.001,
                complement=True,
                objective=objective,
            )
        )
    for query in out:
        q.metric_names(query.expr)  # every expression parses before it is sent
    return out


def scalar(result: list[dict]) -> float | None:
    """The single value of an aggregated instant vector; None when empty or NaN."""
    if not result:
        return None
    value = float(result[0]["value"][1])
    return None if math.isnan(value) or math.isinf(value) else value


# user-facing KPIs a gateway reads in place of the pods: query key -> (histogram key, gateway alert)
_AT_GATEWAY = {
    "ttft_p50": ("ttft", ""),
    "ttft_p99": ("ttft", "GatewayTtftP99High"),
    "e2e_p50": ("e2e", ""),
    "e2e_p99": ("e2e", "GatewayE2eLatencyP99High"),
}


def gateway_readable(side: Side) -> bool:
    """A side the gateway can select: by model, or by time only (pod labels are not on its series)."""
    return all(label == "model_name" for label, _, _ in side.matchers)


def with_gateway(queries: list[Query], gateway: Env, side: Side) -> list[Query]:
    """The pods' table with TTFT, end-to-end latency and success read at the gateway, where its
    release observes them; the rest (load, tokens, KV cache, finish reasons) stays on the pods."""
    m, w = gateway.matchers(side), side.window

    def sum_rate(key: str, suffix: str = "", extra: tuple[q.Matcher, ...] = ()) -> str:
        sel = q.selector(gateway.metric(key, suffix), (*m, *gateway.catalog.metric(key).matchers, *extra))
        return f"sum({q.rate(sel, w)})"

    errors = f"({sum_rate('gateway_errors')} or vector(0))"
    out = []
    for query in queries:
        key, alert = _AT_GATEWAY.get(query.key, (None, ""))
        if query.key == "availability" or (query.key == "stop_share" and not any(x.key == "availability" for x in queries)):
            out.append(query)  # the pods' figure, then the gateway's success below it
            out.append(
                Query(
                    "gateway_success",
                    "success (answers without an error)",
                    "ratio",
                    "higher",
                    f"clamp_min(1 - {q.ratio(errors, sum_rate('requests_finished'))}, 0)",
                    alert="GatewaySuccessRatioLow",
                    floor=0.001,
                    complement=True,
                    layer="gateway",
                )
            )
        elif key is not None and gateway.has(key):
            quant = float(query.key.rsplit("_p", 1)[1]) / 100
            sel = q.selector(gateway.metric(key, "_bucket"), (*m, *gateway.catalog.metric(key).matchers))
            expr = f"{q.quantile(quant, (), q.rate(sel, w))} >= 0"
            out.append(Query(query.key, query.title, query.unit, query.better, expr, alert=alert, floor=query.floor, layer="gateway"))
        elif query.key.startswith("goodput_") and query.objective is not None:
            slo = next((s for s in gateway.slos if f"goodput_{s[0]}" == query.key), None)
            if slo is None:
                out.append(query)
                continue
            _, key, threshold, _ = slo
            good = sum_rate(key, "_bucket", (q.le_matcher(threshold),))
            out.append(Query(query.key, query.title, query.unit, query.better, q.ratio(good, sum_rate(key, "_count")), floor=query.floor, complement=True, objective=query.objective, layer="gateway"))
        else:
            out.append(query)
    for query in out:
        q.metric_names(query.expr)
    return out

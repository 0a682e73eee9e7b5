"""Runbook confirm queries (part of the `plan` stage): what on-call pastes into Prometheus
to see which replica is affected. Recorded series are aggregated per model (cheap for
dashboards and rules), so these read the raw series, broken down by `instance` and, for
engine series on versions that carry it, by `engine` (the data-parallel rank). They run
once, by hand, so their cost does not matter; the recorded per-model series the alert
compares stay in the section too."""

from __future__ import annotations

from typing import TYPE_CHECKING

from genobs import promql as q
from genobs.plan import liveness
from genobs.plan.context import Context

if TYPE_CHECKING:
    from genobs.plan.recorder import Recorder

Query = tuple[str, str]  # (what it shows, PromQL)

_LATENCY = {
    "TtftP99High": ("ttft", "TTFT p99"),
    "ItlP99High": ("itl", "inter-token latency p99"),
    "E2eLatencyP99High": ("e2e", "end-to-end latency p99"),
    "QueueTimeP99High": ("queue_time", "queue time p99"),
    "NixlTransferTimeP99High": ("nixl_xfer_time", "{hint:xfer_noun} time p99"),
}


def replica_labels(ctx: Context, key: str) -> tuple[str, ...]:
    """The spec's grouping labels, `instance`, and `engine` where the series carries it."""
    labels = liveness.replica_labels(ctx)
    if ctx.rank_label and ctx.catalog.metric(key).engine_label:
        labels = (*labels, ctx.rank_label)
    return labels


def _where(ctx: Context, labels: tuple[str, ...]) -> str:
    ranks = [label for label in (ctx.rank_label, *ctx.catalog.scheduler_labels) if label is not None and label in labels]
    return f"per instance and {' and '.join(dict.fromkeys(ranks))}" if ranks else "per instance"


def _rate(ctx: Context, key: str, suffix: str = "", extra: tuple[q.Matcher, ...] = ()) -> str:
    return q.sum_by(replica_labels(ctx, key), ctx.rate(key, suffix, extra))


def _finish_share(ctx: Context, reasons: tuple[str, ...], what: str) -> Query:
    if not ctx.has("request_success"):  # no finish reasons: aborted per finished request (SGLang)
        labels = replica_labels(ctx, "requests_aborted")
        part, total = _rate(ctx, "requests_aborted"), _rate(ctx, "requests_finished")
        return f"{what} {_where(ctx, labels)}", q.ratio(f"{part} or {total} * 0", total)
    labels = replica_labels(ctx, "request_success")
    part = _rate(ctx, "request_success", extra=(("finished_reason", "=~", q.any_of(reasons)),))
    total = _rate(ctx, "request_success")
    return f"{what} {_where(ctx, labels)}", q.ratio(f"{part} or {total} * 0", total)


def _success(ctx: Context) -> list[Query]:
    out = []
    reasons = liveness.failed_reasons(ctx)
    if reasons:
        out.append(_finish_share(ctx, reasons, f"share of finishes that failed ({', '.join(reasons)})"))
    if ctx.has("http_requests"):
        # the API server's series carry no engine (nor model_name): per scrape target
        http = liveness._http(ctx, "5xx")
        out.append(("HTTP 5xx answers per second per instance", q.sum_by(ctx.process_group, q.rate(http, ctx.window))))
    if ctx.has("request_errors"):
        labels = replica_labels(ctx, "request_errors")
        out.append((f"requests failed with HTTP 5xx per second {_where(ctx, labels)}", _rate(ctx, "request_errors")))
    if ctx.has("admission_rejections"):
        labels = replica_labels(ctx, "admission_rejections")
        out.append((f"admission rejections per second {_where(ctx, labels)}", _rate(ctx, "admission_rejections")))
    return out


def _speed(ctx: Context) -> Query:
    if ctx.speed_from_tpot:
        labels = replica_labels(ctx, "tpot")
        expr = q.ratio(_rate(ctx, "tpot", "_count"), ctx.in_seconds("tpot", _rate(ctx, "tpot", "_sum")))
    else:
        labels = replica_labels(ctx, "generation_length")
        decoded = f"{_rate(ctx, 'generation_length', '_sum')} - {_rate(ctx, 'generation_length', '_count')}"
        expr = q.ratio(decoded, ctx.in_seconds("decode_time", _rate(ctx, "decode_time", "_sum")))
    return f"output tok/s per user {_where(ctx, labels)}", expr


def _gauge(ctx: Context, key: str, op: str, what: str, raw: str | None = None) -> Query:
    labels = replica_labels(ctx, key)
    return f"{what} {_where(ctx, labels)}", f"{op} {q.by(labels)} ({raw or ctx.raw(key)})"


def _waiting(ctx: Context) -> Query:
    """The queue the waiting signal reads (capacity only on a disaggregated fleet from vLLM 0.20)."""
    from genobs.plan.recording import deferred_split, waiting_source

    what = "requests waiting for capacity" if deferred_split(ctx) else "waiting requests"
    return _gauge(ctx, "requests_waiting", "sum", what, waiting_source(ctx))


def _nixl_failed(ctx: Context) -> Query:
    """failed / (completed + failed) per replica, counted as the recorded ratio counts them."""
    labels = replica_labels(ctx, "nixl_failed_transfers")
    failed = _rate(ctx, "nixl_failed_transfers")
    if ctx.has("nixl_failed_notifications") and ctx.version < ctx.catalog.nixl_failures_include_notifications_since:
        failed = f"{failed} + {_rate(ctx, 'nixl_failed_notifications')}"
    attempted = f"{_rate(ctx, 'nixl_xfer_time', '_count')} + {failed}"
    return f"share of failed {ctx.words('{hint:xfer_noun}')}s {_where(ctx, labels)}", q.ratio(failed, attempted)


def confirm_queries(ctx: Context, rec: Recorder, alert: str) -> tuple[Query, ...]:
    """Per-replica queries for one alert, by its engine-neutral key (signals.yaml); () when the
    alert has none (fleet-wide capacity signals)."""
    r = rec
    if alert in _LATENCY:
        key, what = _LATENCY[alert]
        labels = replica_labels(ctx, key)
        quantile = ctx.in_seconds(key, q.quantile(0.99, labels, ctx.rate(key, "_bucket")))
        return ((f"{ctx.words(what)} {_where(ctx, labels)}", quantile),)
    if alert == "LengthFinishRatioHigh":
        return (_finish_share(ctx, ("length",), "share of length finishes"),)
    if alert == "AbortRatioHigh":
        return (_finish_share(ctx, (ctx.catalog.abort_reason,), "share of aborted requests"),)
    if alert == "SuccessRatioLow":
        return tuple(_success(ctx))
    if alert == "KvCacheSaturated":
        return (
            _gauge(ctx, "kv_cache_usage", "max", "KV-cache usage"),
            _waiting(ctx),
        )
    if alert == "PreemptionsSustained":
        labels = replica_labels(ctx, "preemptions")
        # every pool finishes requests (prefill legs too): per replica, all of them count
        finished = q.sum_by(labels, q.rate(ctx.raw(ctx.finished_key, all_roles=True), ctx.window))
        return ((f"preemptions per finished request {_where(ctx, labels)}", q.ratio(_rate(ctx, "preemptions"), finished)),)
    if alert == "OutputTokensCollapsed" and not ctx.has("generation_length"):
        labels = replica_labels(ctx, "generation_tokens")
        finished = q.sum_by(labels, q.rate(ctx.raw(ctx.finished_key), ctx.window))
        mean = q.ratio(_rate(ctx, "generation_tokens"), finished)
        return ((f"output tokens per finished request {_where(ctx, labels)}", mean),)
    if alert == "OutputTokensCollapsed":
        labels = replica_labels(ctx, "generation_length")
        mean = q.ratio(_rate(ctx, "generation_length", "_sum"), _rate(ctx, "generation_length", "_count"))
        return ((f"output tokens per finished request {_where(ctx, labels)}", mean),)
    if alert == "RequestsWaitingHigh":
        return (_waiting(ctx),)
    if alert == "ReplicaQueueOutlier":
        return (_waiting(ctx),)
    if alert == "ReplicaTtftOutlier":
        labels = replica_labels(ctx, "ttft")
        mean = q.ratio(ctx.in_seconds("ttft", _rate(ctx, "ttft", "_sum")), _rate(ctx, "ttft", "_count"))
        return (
            (f"mean TTFT {_where(ctx, labels)}", mean),
            (f"TTFT p99 {_where(ctx, labels)}", ctx.in_seconds("ttft", q.quantile(0.99, labels, ctx.rate("ttft", "_bucket")))),
        )
    if alert == "OutputSpeedPerUserLow":
        return (_speed(ctx),)
    if alert == "SpecDecodeAcceptanceLow":
        labels = replica_labels(ctx, "spec_decode_drafts")
        first = _rate(ctx, "spec_decode_accepted_per_pos", extra=(("position", "=", "0"),))
        return ((f"acceptance alpha {_where(ctx, labels)}", q.ratio(first, _rate(ctx, "spec_decode_drafts"))),)
    if alert == "NixlTransfersFailing":
        return (_nixl_failed(ctx),)
    if alert == "NixlKvExpired":  # counted on the prefill pods
        labels = replica_labels(ctx, "nixl_kv_expired")
        return ((f"expired KV leases per second {_where(ctx, labels)}", _rate(ctx, "nixl_kv_expired")),)
    if alert == "ApiServerRssGrowing":
        rss = r.ref("process_rss")
        return (("resident memory growth per hour per instance", f"deriv({rss}[30m]) * 3600 / {rss}"),)
    if alert in ("TargetDown", "ServingCapacityLost"):
        return (("scrape health per instance (0 = down)", ctx.up()),)
    if alert == "MetricsAbsent":
        engine = q.selector(ctx.metric("requests_running"), ctx.raw_matchers(process=True))
        return (
            ("scrape health per instance (0 = down)", ctx.up()),
            ("engine series per instance (none: the instance exports no engine metrics)", f"count {q.by(ctx.target)} ({engine})"),
        )
    if alert in ("EngineHung", "FleetNoProgress"):
        where = _where(ctx, liveness.liveness_labels(ctx))
        out: list[Query] = [
            (f"requests running or waiting {where}", r.ref("engine_active")),
            (f"{liveness.progress_words(ctx)} per second {where}", r.ref("engine_progress")),
        ]
        if "replica_unfinished" in r.names:
            where = _where(ctx, liveness.replica_labels(ctx))
            out.append((f"requests answered by the API server that no engine finished, per second {where}", r.ref("replica_unfinished")))
        return tuple(out)
    return ()

"""Recording rules: every signal the dashboard and the alerts read, computed once
per evaluation, aggregated over the engine (data-parallel rank) label."""

from __future__ import annotations

from genobs import promql as q
from genobs.plan import drilldown, liveness
from genobs.plan.context import Context
from genobs.plan.liveness import pool_label
from genobs.plan.model import RecordingRule
from genobs.plan.recorder import Recorder

QUANTILES = (0.5, 0.9, 0.95, 0.99)  # p95 beside p50/p99: what SLO dashboards and llm-d show
# histogram key -> recorded subject
LATENCIES = {
    "ttft": "ttft_seconds",
    "itl": "itl_seconds",
    "tpot": "tpot_seconds",
    "e2e": "e2e_seconds",
    "queue_time": "queue_time_seconds",
    "prefill_time": "prefill_time_seconds",
    "decode_time": "decode_time_seconds",
    "nixl_xfer_time": "nixl_xfer_time_seconds",
}
# histograms only the E2E decomposition reads (as means): no bucket rate is recorded for them
MEAN_ONLY = frozenset({"prefill_time", "decode_time"})


def _requests_without_reasons(r: Recorder) -> None:
    """An engine without finish reasons (SGLang): finished requests from its plain counter, aborts
    from its own counter (not part of the finished count: the ratio is aborted per finished)."""
    ctx = r.ctx
    r.add("finished", "requests_finished", "rate", ctx.sum_rate("requests_finished"))
    if ctx.has("requests_aborted"):
        aborted = f"{ctx.sum_rate('requests_aborted')} or ({r.ref('finished')} * 0)"
        r.add("abort_ratio", "request_abort_finish", "ratio", q.ratio(aborted, r.ref("finished")))
    liveness.record_failures(r)

def _requests(r: Recorder) -> None:
    ctx = r.ctx
    g = ctx.group
    if not ctx.has("request_success"):
        _requests_without_reasons(r)
        return
    r.add(
        "finish_by_reason",
        "requests_finished_by_reason",
        "rate",
        ctx.sum_rate("request_success", labels=("finished_reason",)),
    )
    # the raw counter is read once, by reason; the totals derive from that recorded rate
    r.add("finished", "requests_finished", "rate", q.sum_by(g, r.ref("finish_by_reason")))
    stop = q.sum_by(g, r.ref("finish_by_reason", (("finished_reason", "=", "stop"),)))
    # V0 creates a finished_reason series only once it is seen: fall back to 0
    r.add("succeeded", "requests_succeeded", "rate", f"{stop} or ({r.ref('finished')} * 0)")
    # from the rate by reason alone, not finished - succeeded (two recorded series a ruler on a
    # remote storage may hand over from different evaluations): never below 0
    not_stop = q.sum_by(g, r.ref("finish_by_reason", (("finished_reason", "!=", "stop"),)))
    r.add("unsuccessful", "requests_unsuccessful", "rate", f"{not_stop} or ({r.ref('finished')} * 0)")
    liveness.record_failures(r)
    # numerator and denominator from one read of the rate by reason: a share between 0 and 1
    all_reasons = q.sum_by(g, r.ref("finish_by_reason"))
    # the engine's own name of a client's give-up (TensorRT-LLM: cancelled), recorded as abort;
    # where the API server counts its answers, after the liveness rules (_aborts)
    shares = [("length", "length", "length_ratio")]
    if not ctx.has("http_requests"):
        shares.append(("abort", ctx.catalog.abort_reason, "abort_ratio"))
    for name, reason, key in shares:
        num = q.sum_by(g, r.ref("finish_by_reason", (("finished_reason", "=", reason),)))
        r.add(key, f"request_{name}_finish", "ratio", q.ratio(f"{num} or ({all_reasons} * 0)", all_reasons))


def _aborts(r: Recorder) -> None:
    """Share of requests clients gave up on: abort finishes plus the requests the API server
    answered that no engine finished (liveness.record_unfinished: vLLM's V1 front end counts no
    finish for a client that disconnects), over finished plus unfinished requests."""
    ctx = r.ctx
    if "replica_unfinished" not in r.names or "finish_by_reason" not in r.names:
        return
    g = ctx.group
    r.add("unfinished", "requests_unfinished", "rate", f"{q.sum_by(g, r.ref('replica_unfinished'))} or {r.ref('finished')} * 0")
    all_reasons = q.sum_by(g, r.ref("finish_by_reason"))
    aborted = q.sum_by(g, r.ref("finish_by_reason", (("finished_reason", "=", ctx.catalog.abort_reason),)))
    unfinished = r.ref("unfinished")
    num = f"({aborted} or {all_reasons} * 0) + {q.on(g)} {unfinished}"
    r.add("abort_ratio", "request_abort_finish", "ratio", q.ratio(num, f"{all_reasons} + {q.on(g)} {unfinished}"))


def _latencies(r: Recorder) -> None:
    """Each latency histogram's buckets are read from the raw series once, as one recorded
    bucket rate per grouping; every quantile, mean and SLO good-event count derives from it.
    Prefill and decode time feed only the E2E decomposition: their means, no buckets (except
    on a disaggregated fleet, whose decode-pool row shows decode-time quantiles)."""
    ctx = r.ctx
    pools = bool(ctx.role("prefill"))
    for key, subject in LATENCIES.items():
        if key == "nixl_xfer_time" and "disaggregated_prefill" not in ctx.features:
            continue
        if not ctx.has(key):
            continue
        if key in MEAN_ONLY and not (pools and key == "decode_time"):
            mean = q.ratio(ctx.in_seconds(key, ctx.sum_rate(key, "_sum")), ctx.sum_rate(key, "_count"))
            r.add(f"{key}_mean", subject, "mean", mean)
            continue
        _histogram(r, key, key, subject)
    if pools:
        # the prefill pool's own view: its legs run with max_tokens=1, so TTFT there is queue + prefill
        for key, subject in (("ttft", "ttft_seconds"), ("prefill_time", "prefill_time_seconds"), ("queue_time", "queue_time_seconds")):
            if not ctx.has(key):
                continue  # SGLang has no prefill-time histogram
            written_by = ctx.catalog.metric(key).written_by
            if written_by is not None and "prefill" not in written_by:
                continue  # an SGLang prefill server writes no TTFT: its first token is the decode server's
            _histogram(r, f"prefill_pool_{key}", key, f"prefill_pool_{subject}", ctx.role("prefill"))


def _histogram(r: Recorder, name: str, key: str, subject: str, extra: tuple[q.Matcher, ...] = ()) -> None:
    """Bucket rate, p50/p90/p99 and mean of histogram `key` (restricted by `extra`), recorded as `name`."""
    ctx = r.ctx
    metric = ctx.catalog.metric(key)
    # the bucket rate keeps the histogram's `le` values: its name says their unit (milliseconds)
    own = subject if metric.per_second == 1 else subject.removesuffix("_seconds") + f"_{metric.unit}"
    r.add(f"{name}_buckets", own, "bucket", q.sum_by((*ctx.group, "le"), ctx.rate(key, "_bucket", extra)))
    buckets = r.ref(f"{name}_buckets")
    for quant in QUANTILES:
        r.rules.append(
            RecordingRule(
                record=ctx.rec(subject, "quantile"),
                # a histogram without observations gives NaN; ">= 0" drops it
                expr=f"{ctx.in_seconds(key, f'histogram_quantile({quant:g}, {buckets})')} >= 0",
                labels=(("quantile", f"{quant:g}"),),
            )
        )
    r.names[f"{name}_quantile"] = ctx.rec(subject, "quantile")
    # from _sum and _count, not the recorded +Inf bucket: a mean an alert reads (1 / mean TPOT is
    # the output speed) then does not hold the whole bucket rate at the alerts' pace
    mean = q.ratio(ctx.in_seconds(key, ctx.sum_rate(key, "_sum", extra)), ctx.sum_rate(key, "_count", extra))
    r.add(f"{name}_mean", subject, "mean", mean)


def _replica_ttft(r: Recorder) -> None:
    """Mean TTFT per replica with traffic (one series per replica, from _sum and _count: no
    per-replica buckets), for the outlier alert that compares replicas with their median."""
    ctx = r.ctx
    rl = liveness.replica_labels(ctx)
    if "instance" in ctx.group or not ctx.has("ttft"):
        return  # every replica is its own group: there are no peers to compare with
    count = q.sum_by(rl, ctx.rate("ttft", "_count"))
    busy = f"({count} >= {ctx.min_request_rate:g}) > 0"
    r.add("replica_ttft_mean", "replica_ttft_seconds", "mean", f"{ctx.in_seconds('ttft', q.sum_by(rl, ctx.rate('ttft', '_sum')))} / ({busy})")


def _tokens(r: Recorder) -> None:
    ctx = r.ctx
    g = ctx.group
    r.add("prompt_tps", "prompt_tokens", "rate", ctx.sum_rate("prompt_tokens"))
    r.add("generation_tps", "generation_tokens", "rate", ctx.sum_rate("generation_tokens"))
    r.add("total_tps", "total_tokens", "rate", f"{r.ref('prompt_tps')} + {r.ref('generation_tps')}")
    r.add("io_ratio", "prompt_to_generation_tokens", "ratio", q.ratio(r.ref("prompt_tps"), r.ref("generation_tps")))
    for key, subject in (
        ("prompt_length", "prompt_tokens_per_request"),
        ("generation_length", "generation_tokens_per_request"),
    ):
        if ctx.has(key):  # TensorRT-LLM has no per-request token histograms
            r.add(f"{key}_buckets", subject, "bucket", q.sum_by((*g, "le"), ctx.rate(key, "_bucket")))
    # the mean generated length feeds the modelled E2E; nothing reads a mean prompt length
    if ctx.has("generation_length"):
        # from _count, not the bucket rate's +Inf: the tokens-per-request alert reads this mean every
        # evaluation, and the generation-length buckets are read by a dashboard panel only (at 1m)
        mean = q.ratio(ctx.sum_rate("generation_length", "_sum"), ctx.sum_rate("generation_length", "_count"))
    else:  # generated tokens over finished requests (an approximation: aborted requests count tokens too)
        mean = q.ratio(r.ref("generation_tps"), r.ref("finished"))
    r.add("generation_length_mean", "generation_tokens_per_request", "mean", mean)
    # per-user speeds: tokens per second one request stream sees (tok/s/user); 0 where requests
    # finish but none decodes a second token (every answer empty), not a missing series
    silent = f"({r.ref('finished')} > 0 and {q.on(g)} {r.ref('generation_length_mean')} <= 1) * 0"
    r.add("output_speed_per_user", "output_speed_per_user", "tokens_per_second", f"{output_speed(r)} or {silent}")
    if ctx.has("prefill_time") and ctx.has("prompt_length"):
        r.add(
            "prefill_speed_per_user",
            "prefill_speed_per_user",
            "tokens_per_second",
            q.ratio(ctx.sum_rate("prompt_length", "_sum"), ctx.in_seconds("prefill_time", ctx.sum_rate("prefill_time", "_sum"))),
        )


def output_speed(r: Recorder) -> str:
    """Per-user output speed from per-request series, never from the inter-token histogram: that
    one observes engine steps, and with speculative decoding a step emits 1 + accepted tokens, so
    1 / mean ITL undercounts what users get by the mean acceptance length."""
    ctx = r.ctx
    if ctx.speed_from_tpot:
        # 1 / mean TPOT; TPOT = decode time / (generated tokens - 1), one observation per request
        # (from the recorded mean: the raw _sum is read once)
        return q.ratio("1", r.ref("tpot_mean"))
    # older releases: tokens after the first over decode time, both observed once per request
    decoded = f"{ctx.sum_rate('generation_length', '_sum')} - {ctx.sum_rate('generation_length', '_count')}"
    return q.ratio(decoded, ctx.in_seconds("decode_time", ctx.sum_rate("decode_time", "_sum")))


def _decomposition(r: Recorder) -> None:
    gen = r.ref("generation_length_mean")
    r.add(
        "e2e_modelled",
        "e2e_seconds",
        "modelled_mean",
        f"{r.ref('ttft_mean')} + clamp_min({gen} - 1, 0) * {r.ref('tpot_mean')}",
    )
    for part in ("queue_time", "prefill_time", "decode_time"):
        if f"{part}_mean" not in r.names:
            continue  # the engine has no such histogram (SGLang: no prefill or decode time)
        r.add(f"{part}_share", f"e2e_{part}_share", "ratio", q.ratio(r.ref(f"{part}_mean"), r.ref("e2e_mean")))


def peer_group(ctx: Context) -> tuple[str, ...]:
    """Replicas that are each other's peers: the grouping labels, and the pool where there are pools."""
    return ctx.where.peers


def _engine(r: Recorder) -> None:
    ctx = r.ctx
    g = ctx.group
    kv, waiting = ctx.raw("kv_cache_usage"), waiting_source(ctx)
    r.add("kv_cache_usage", "kv_cache_usage", "max", q.max_by(g, kv))
    # each engine (data-parallel rank) has its own KV pool and scheduler queue: a full cache is
    # saturation only where requests wait behind it, so pair the two per engine before taking the max
    queueing = f"{kv} and {q.on(liveness.scheduler_labels(ctx))} {waiting} > 0"
    # per replica: saturation is an imbalance to name (one hot replica), not a fleet-wide figure
    replica_kv = q.max_by(liveness.replica_labels(ctx), queueing)
    r.add("replica_kv_cache_usage_queueing", "replica_kv_cache_usage_with_waiting", "max", replica_kv)
    r.add("running", "requests_running", "sum", q.sum_by(g, ctx.raw("requests_running")))
    r.add("waiting", "requests_waiting", "sum", q.sum_by(g, waiting))
    # per replica (and pool): the queue-outlier alert compares each replica with its pool's median
    replica = tuple(dict.fromkeys((*ctx.where.replica, *ctx.where.pool)))
    # each engine counted once where two monitors scrape the same pod (only discovery labels differ)
    engines = tuple(dict.fromkeys((*ctx.where.scheduler, *ctx.where.pool)))
    r.add("replica_waiting", "replica_requests_waiting", "sum", q.sum_by(replica, q.max_by(engines, waiting)))
    # the fleet's queue spread over the replicas that serve the model: a total ignores replica count
    average = f"avg {q.by(g)} ({r.ref('replica_waiting')})"
    if pool_label(ctx):
        # prefill and decode pods differ in what a queue costs and in how many serve: average within
        # each pool and report the worse one, so a queue on the small prefill pool is not diluted
        average = f"max {q.by(g)} (avg {q.by(peer_group(ctx))} ({r.ref('replica_waiting')}))"
    r.add("waiting_per_replica", "requests_waiting_per_replica", "avg", average)
    if deferred_split(ctx):
        deferred = ctx.raw("requests_waiting_by_reason", extra=(("reason", "=", "deferred"),))
        r.add("waiting_deferred", "requests_waiting_deferred", "sum", q.sum_by(g, deferred))
    if ctx.has("preemptions"):  # TensorRT-LLM counts none
        r.add("preemptions", "preemptions", "rate", ctx.sum_rate("preemptions"))
        # preemptions per finished request: the share of work recomputed, comparable across fleet sizes
        r.add(
            "preemptions_per_request",
            "preemptions_per_finished_request",
            "ratio",
            q.ratio(r.ref("preemptions"), r.ref("finished")),
        )
    if "prefix_caching" in ctx.features:
        if ctx.has("prefix_cache_hits"):
            expr = q.ratio(ctx.sum_rate("prefix_cache_hits"), ctx.sum_rate("prefix_cache_queries"))
        else:
            expr = f"avg {q.by(g)} ({ctx.raw('prefix_cache_hit_rate_gauge')})"
        r.add("prefix_cache_hit_ratio", "prefix_cache_hit", "ratio", expr)


def deferred_split(ctx: Context) -> bool:
    """On a disaggregated fleet from vLLM 0.20 num_requests_waiting also counts requests
    deferred while their KV cache is in flight; the by-reason gauge tells them apart."""
    return bool(ctx.role("decode")) and ctx.has("requests_waiting_by_reason")


def waiting_source(ctx: Context) -> str:
    """The raw series of requests queued for capacity: on a disaggregated fleet with the by-reason
    gauge, those deferred for a KV transfer are left out (they wait for the network, not for GPUs)."""
    if deferred_split(ctx):
        return ctx.raw("requests_waiting_by_reason", extra=(("reason", "=", "capacity"),))
    return ctx.raw("requests_waiting")


def _nixl(r: Recorder) -> None:
    """Transfer time and bytes, failures as a share of attempted transfers, expired KV leases as a
    share of user requests. NIXL series are read on every pod: vLLM counts expiries on the prefill
    side, and which side observes a transfer depends on the connector's direction."""
    ctx = r.ctx
    if ctx.has("nixl_bytes"):  # in bytes: SGLang writes mebibytes
        r.add("nixl_bytes_rate", "nixl_bytes_transferred", "rate", ctx.in_bytes("nixl_bytes", ctx.sum_rate("nixl_bytes", "_sum")))
        seconds = ctx.in_seconds("nixl_xfer_time", ctx.sum_rate("nixl_xfer_time", "_sum"))
        r.add("nixl_throughput", "nixl_transfer_throughput", "bytes_per_second", q.ratio(r.ref("nixl_bytes_rate"), seconds))
    if not ctx.has("nixl_failed_transfers"):
        return
    r.add("nixl_failed", "nixl_failed_transfers", "rate", ctx.sum_rate("nixl_failed_transfers"))
    if ctx.has("nixl_failed_notifications"):
        r.add(
            "nixl_failed_notifications",
            "nixl_failed_notifications",
            "rate",
            ctx.sum_rate("nixl_failed_notifications"),
        )
    failed = r.ref("nixl_failed")
    if "nixl_failed_notifications" in r.names and ctx.version < ctx.catalog.nixl_failures_include_notifications_since:
        failed = f"{failed} + {r.ref('nixl_failed_notifications')}"
    # the transfer-time histogram observes completed transfers; a failed one is counted apart
    attempted = f"{r.count('nixl_xfer_time')} + {failed}"
    r.add("nixl_failed_ratio", "nixl_failed_transfers", "ratio", q.ratio(failed, attempted))
    if ctx.has("nixl_kv_expired"):
        r.add("nixl_kv_expired", "nixl_kv_expired_requests", "rate", ctx.sum_rate("nixl_kv_expired"))
        # each user request (finished on the decode pool) had one prefill leg whose lease could expire
        r.add(
            "nixl_kv_expired_ratio",
            "nixl_kv_expired_requests",
            "ratio",
            q.ratio(r.ref("nixl_kv_expired"), r.ref("finished")),
        )


def _features(r: Recorder) -> None:
    ctx = r.ctx
    if "speculative_decoding" in ctx.features:
        _spec_decode(r)
    if "disaggregated_prefill" in ctx.features and ctx.has("nixl_xfer_time"):
        _nixl(r)


def _spec_decode(r: Recorder) -> None:
    """Three different figures, each recorded under its own name:
    - accepted / draft tokens over all positions (the aggregate ratio). Lower than alpha by
      construction: later positions are only reached when every earlier one was accepted;
    - the mean acceptance length, tokens emitted per drafting step (1 + accepted / drafts);
    - alpha, the per-token acceptance probability of the geometric model: accepted tokens at
      draft position 0 per drafting step. The acceptance alert reads this one. vLLM exports the
      per-position counts from the release that added the drafts counter (0.8.5), so every version
      with a mean acceptance length has alpha too; before it only the aggregate ratio exists."""
    ctx = r.ctx
    g = ctx.group
    if ctx.has("spec_decode_accepted_tokens"):
        accepted = ctx.sum_rate("spec_decode_accepted_tokens")
        ratio = q.ratio(accepted, ctx.sum_rate("spec_decode_draft_tokens"))
    else:  # the V0 gauge is the same aggregate ratio
        ratio = f"avg {q.by(g)} ({ctx.raw('spec_decode_acceptance_gauge')})"
    r.add("spec_token_ratio", "spec_decode_accepted_per_draft_token", "ratio", ratio)
    if ctx.has("spec_decode_drafts"):
        drafts = ctx.sum_rate("spec_decode_drafts")
        r.add("spec_acceptance_length", "spec_decode_acceptance_length", "mean", f"1 + {q.ratio(accepted, drafts)}")
    if ctx.has("spec_decode_accepted_per_pos"):
        first = ctx.sum_rate("spec_decode_accepted_per_pos", extra=(("position", "=", "0"),))
        r.add("spec_alpha", "spec_decode_acceptance_alpha", "ratio", q.ratio(first, drafts))


def _process(r: Recorder) -> None:
    ctx = r.ctx
    if ctx.has("process_rss"):  # none in prometheus_client's multiprocess mode (SGLang, TensorRT-LLM)
        rss = q.max_by(ctx.process_group, ctx.raw("process_rss"))
        r.add("process_rss", "api_server_resident_memory", "bytes", rss)
    if ctx.has("gc_collections"):
        gc = ctx.sum_rate("gc_collections", labels=("generation",))
        r.add("process_gc", "api_server_gc_collections", "rate", gc)
    targets = ctx.where.targets
    up = ctx.up()
    r.add("process_targets_up", "scrape_targets_up", "sum", q.sum_by(targets, up))
    r.add("process_targets", "scrape_targets", "count", f"count {q.by(targets)} ({up})")
    liveness.record_targets_down(r)


def build_recording(ctx: Context) -> Recorder:
    r = Recorder(ctx)
    _requests(r)
    _latencies(r)
    _replica_ttft(r)
    _tokens(r)
    _decomposition(r)
    _engine(r)
    liveness.record_liveness(r)
    _aborts(r)
    drilldown.record(r)  # it reads the recorder's liveness names
    _features(r)
    _process(r)
    return r

"""Dashboard plan: rows and panels that query recorded series, with units and
descriptions; per-user panels stand apart from system panels."""

from __future__ import annotations

from dataclasses import replace

from genobs import promql as q
from genobs.plan.context import Context
from genobs.plan.model import Panel, Row, Target, Variable
from genobs.plan.recorder import Recorder
from genobs.plan.recording import QUANTILES
from genobs.units import format_seconds

_COLOURS = {"critical": "red", "warning": "orange", "info": "blue"}
# the query of a recorded series the engine cannot give (no such signal in its profile)
_MISSING = "__not_observable__"


def threshold_steps(levels, bad: str) -> tuple[tuple[str, float | None], ...]:
    """Grafana steps for alert levels ((severity, value), ...) with the bad side red.
    A step's colour applies from its value upward, so for `bad="above"` (latency, queue) the
    base is green and each level's colour starts at its threshold; for `bad="below"` (speed,
    SLI, success, acceptance) the base is red, each threshold starts the next milder colour
    and green starts at the mildest threshold. The far bad side is red even when the alert
    only warns (a low acceptance alpha is bad however it is paged)."""
    ordered = sorted(levels, key=lambda x: x[1])
    if not ordered:
        return ()
    colours = [_COLOURS[sev] for sev, _ in ordered]
    if bad == "above":
        colours[-1] = "red"
        return (("green", None), *zip(colours, (value for _, value in ordered)))
    colours = ["red", *colours[1:], "green"]
    return (("red", None), *((colours[i + 1], value) for i, (_, value) in enumerate(ordered)))


class PanelMaker:
    def __init__(self, ctx: Context, rec: Recorder):
        self.ctx = ctx
        self.rec = rec

    def sel(self, key: str, extra: tuple = ()) -> str:
        """Recorded series filtered by the dashboard variables."""
        if key not in self.rec.names:
            return _MISSING  # the panel says so (not_observable), never queries a series that cannot exist
        matchers = self.ctx.panel_matchers(process=key.startswith("process"))
        return q.selector(self.rec.names[key], matchers + extra)

    def legend(self, extra: str = "") -> str:
        parts = [f"{{{{{label}}}}}" for label in self.ctx.group if label not in dict(self.ctx.selector)]
        return " ".join(parts + ([extra] if extra else [])) or extra or "value"

    def latency(self, key: str, title: str, description: str, thresholds=()) -> Panel | None:
        if f"{key}_quantile" not in self.rec.names:
            return None
        targets = [
            Target(self.sel(f"{key}_quantile", (("quantile", "=", f"{quant:g}"),)), self.legend(f"p{quant * 100:g}"))
            for quant in QUANTILES
        ]
        targets.append(Target(self.sel(f"{key}_mean"), self.legend("mean")))
        first = self.first_bucket(key)
        if first is not None:
            description = (
                f"{description} A quantile at or below {format_seconds(first)} lies in the histogram's first bucket "
                f"(0 to {format_seconds(first)}): no observation says where in it, so the panel shows such a "
                f"quantile as ≤ {format_seconds(first)}, not the number interpolation draws (the mean is exact)."
            )
        return Panel(title, description, "s", tuple(targets), thresholds=thresholds, first_bucket=first)

    def first_bucket(self, key: str) -> float | None:
        """The first bucket bound of the histogram behind recorded `key` (a prefill pool's view reads
        the same histogram), in seconds."""
        hist = key.removeprefix("prefill_pool_")
        if hist not in self.ctx.catalog.metrics or not self.ctx.has(hist):
            return None
        bounds = self.ctx.catalog.metric(hist).buckets_for(self.ctx.version)
        return bounds[0] if bounds else None

    def single(self, key: str, title: str, description: str, unit: str, legend: str = "", **kw) -> Panel:
        return Panel(title, description, unit, (Target(self.sel(key), self.legend(legend)),), **kw)


def build_dashboard_rows(ctx: Context, rec: Recorder, lines: dict[str, tuple]) -> tuple[Row, ...]:
    """`lines`: signal -> threshold steps (threshold_steps) of its primary alert."""
    fallback = ctx.words("{hint:tpot_fallback}")  # how older releases measure it, where they differ
    tpot_fallback = f", {fallback}" if fallback else ""
    not_itl = ctx.words("{hint:tpot_not_itl_panel}")
    not_itl = f", {not_itl}" if not_itl else ""
    p = PanelMaker(ctx, rec)
    rows: list[Row] = []

    overview = [
        Panel(
            "Request throughput vs successes",
            "Finished requests per second and those that ended with reason stop. A widening gap means GPUs "
            "spend work that never succeeds (aborts, timeouts, length limits).",
            "reqps",
            (
                Target(p.sel("finished"), p.legend("finished")),
                Target(p.sel("succeeded"), p.legend("succeeded")),
                Target(p.sel("unsuccessful"), p.legend("gap")),
            ),
        ),
        p.single(
            "success_ratio",
            "Success rate",
            "Share of requests the server did not fail: 1 - (error finishes + HTTP 5xx + admission rejections, "
            "where the version has them) / attempts. Length finishes and client aborts are not failures. Healthy "
            ">= 99.5 %; sustained < 98 % is an emergency.",
            "percentunit",
            "success",
            thresholds=lines.get("success", ()),
            max=1,
        ),
        Panel(
            "Finish-reason mix",
            "Finished requests per second by finished_reason (stop, length, abort, error, repetition).",
            "reqps",
            (Target(p.sel("finish_by_reason"), p.legend("{{finished_reason}}")),),
        ),
        Panel(
            "Length and abort finishes",
            "Share of finished requests that hit the length limit (length) or were aborted (abort).",
            "percentunit",
            (Target(p.sel("length_ratio"), p.legend("length")), Target(p.sel("abort_ratio"), p.legend("abort"))),
            thresholds=lines.get("length_finish", ()),
        ),
    ]
    rows.append(Row("Requests and success", tuple(overview)))

    latency = [
        p.latency(
            "ttft",
            "Time to first token",
            "TTFT p50/p90/p95/p99 and mean: queueing + prefill of the whole prompt.",
            lines.get("ttft", ()),
        ),
        p.latency(
            "itl",
            "Inter-token latency",
            ctx.words("Time between consecutive engine outputs of a request (decode pace), p50/p90/p95/p99 and mean. "
                      "{hint:itl_per_step}"),
            lines.get("itl", ()),
        ),
        p.latency(
            "tpot",
            "Time per output token",
            "Per-request mean time per output token after the first, p50/p90/p95/p99 and mean.",
        ),
        p.latency("e2e", "End-to-end latency", "Whole-request latency, p50/p90/p95/p99 and mean.", lines.get("e2e", ())),
        p.latency(
            "queue_time",
            "Queue time",
            "Time in the scheduler queue before prefill starts. Default buckets start at 0.3 s.",
            lines.get("queue_time", ()),
        ),
        Panel(
            "E2E decomposition",
            "Measured mean E2E against the model TTFT + (N-1) x TPOT, with the share of queue, prefill and decode "
            "time. A high prefill share points at long prompts or low compute; a high decode share at long outputs "
            "or saturated memory bandwidth.",
            "s",
            (
                Target(p.sel("e2e_mean"), p.legend("measured mean")),
                Target(p.sel("e2e_modelled"), p.legend("TTFT + (N-1) x TPOT")),
            ),
        ),
        Panel(
            "E2E share: queue, prefill, decode",
            "Share of mean E2E latency spent queueing, in prefill and in decode.",
            "percentunit",
            tuple(
                Target(p.sel(f"{part}_share"), p.legend(part.split("_")[0]))
                for part in ("queue_time", "prefill_time", "decode_time")
            ),
            max=1,
        ),
    ]
    if ctx.role("prefill"):
        # a disaggregated fleet: the decode pace moves to the decode pool's own row
        decode_pace = [x for x in latency[1:3] if x]
        latency = [latency[0], *latency[3:]]
        rows.append(Row("Latency (user-facing, decode pool)", tuple(x for x in latency if x)))
        rows.extend(_pool_rows(p, ctx, tuple(decode_pace)))
    else:
        rows.append(Row("Latency", tuple(x for x in latency if x)))

    rows.append(
        Row(
            "Per-user experience (tok/s/user)",
            (
                p.single(
                    "output_speed_per_user",
                    "Output speed per user (tok/s/user)",
                    "Output tokens per second ONE request stream receives, from per-request series (1 / mean "
                    f"TPOT{tpot_fallback}){not_itl}. Per-user, not system throughput: never compare it with "
                    "tok/s panels.",
                    "tok/s/user",
                    "tok/s/user",
                    thresholds=lines.get("output_speed_per_user", ()),
                ),
                p.single(
                    "prefill_speed_per_user",
                    "Prefill speed per user (tok/s/user)",
                    "Prompt tokens per second of prefill time for ONE request (prompt tokens / prefill time). Per-user.",
                    "tok/s/user",
                    "tok/s/user",
                ),
            ),
        )
    )

    rows.append(
        Row(
            "System throughput (tok/s)",
            (
                Panel(
                    "Token throughput (tok/s)",
                    "Prompt and generation tokens per second summed over every session and data-parallel rank. "
                    "System throughput, not per-user speed.",
                    "tok/s",
                    (
                        Target(p.sel("prompt_tps"), p.legend("prompt")),
                        Target(p.sel("generation_tps"), p.legend("generation")),
                        Target(p.sel("total_tps"), p.legend("total")),
                    ),
                ),
                p.single(
                    "io_ratio",
                    "IO ratio (prompt : generation tokens)",
                    "Prompt tokens per generated token. ~20 = RAG/summarisation (prefill-heavy); low = chat/code (decode-heavy).",
                    "none",
                    "prompt/generation",
                ),
                Panel(
                    "Prompt length distribution",
                    "Requests per second by prompt-length bucket (tokens). Explains TTFT spikes at moderate QPS.",
                    "short",
                    (Target(f"sum by (le) ({p.sel('prompt_length_buckets')})", "{{le}}", "heatmap"),),
                    kind="heatmap",
                ),
                Panel(
                    "Generation length distribution",
                    "Requests per second by generated-length bucket (tokens).",
                    "short",
                    (Target(f"sum by (le) ({p.sel('generation_length_buckets')})", "{{le}}", "heatmap"),),
                    kind="heatmap",
                ),
            ),
        )
    )

    engine = [
        p.single(
            "kv_cache_usage",
            "KV cache usage",
            "Fullest KV-cache pool across data-parallel ranks (1 = full).",
            "percentunit",
            "max",
            thresholds=lines.get("kv_cache", ()),
            max=1,
        ),
        _running_waiting(p, rec, lines),
        p.single(
            "preemptions_per_request",
            "Preemptions",
            "Preemptions per finished request: the share of requests evicted to free KV blocks and recomputed.",
            "percentunit",
            "preemptions per request",
            thresholds=lines.get("preemptions", ()),
        ),
    ]
    if "prefix_cache_hit_ratio" in rec.names:
        engine.append(
            p.single(
                "prefix_cache_hit_ratio",
                "Prefix-cache hit rate",
                "Share of prompt tokens served from the prefix cache (saved prefill).",
                "percentunit",
                "hit rate",
                max=1,
            )
        )
    engine.append(
        Panel(
            "Scrape targets up",
            "Targets matching the selector that Prometheus scraped successfully, against all targets.",
            "short",
            (
                Target(p.sel("process_targets_up"), "up"),
                Target(p.sel("process_targets"), "targets"),
            ),
        )
    )
    rows.append(Row("Engine and scheduler", tuple(engine)))
    if "replica_ttft_mean" in rec.names:
        rows.append(Row("Replicas", _replica_panels(p), collapsed=True))

    if "spec_token_ratio" in rec.names:
        panels = []
        if "spec_alpha" in rec.names:
            panels.append(
                p.single(
                    "spec_alpha",
                    "Speculative-decoding acceptance alpha",
                    "alpha: share of drafting steps whose first drafted token was accepted (accepted tokens at "
                    "position 0 / drafts), the per-token acceptance probability of the geometric model. The "
                    "acceptance alert reads this. Below ~0.5 drafting can cost more than it saves.",
                    "percentunit",
                    "alpha",
                    thresholds=lines.get("spec_decode_acceptance", ()),
                    max=1,
                )
            )
        panels.append(
            p.single(
                "spec_token_ratio",
                "Accepted / draft tokens (aggregate ratio)",
                "Accepted draft tokens / proposed draft tokens over every position. NOT alpha: a drafted token "
                "at position i counts only if all before it were accepted, so this is lower by construction "
                "(real k=3 drafts: 0.37 here while alpha is 0.65).",
                "percentunit",
                "accepted/draft tokens",
                max=1,
            )
        )
        if "spec_acceptance_length" in rec.names:
            panels.append(
                p.single(
                    "spec_acceptance_length",
                    "Mean acceptance length",
                    "Tokens emitted per drafting step: 1 + accepted / drafts. Output speed per step is this many "
                    "times the engine's step rate; the inter-token histogram observes steps, not tokens.",
                    "short",
                    "tokens/step",
                )
            )
        rows.append(Row("Speculative decoding", tuple(panels)))

    if "nixl_xfer_time_quantile" in rec.names:
        rows.append(Row(ctx.words("Disaggregated prefill ({hint:xfer})"), _nixl(ctx, p, rec, lines)))

    from genobs.plan import drilldown

    rows.append(drilldown.row(ctx, rec))
    rows.append(
        Row(
            "API-server process",
            (
                Panel(
                    "API-server resident memory",
                    ctx.words(
                        "RSS of the {engine} API-server process (not engine cores or GPU workers). Absent in "
                        "multiprocess mode."
                    ),
                    "bytes",
                    (Target(p.sel("process_rss"), "{{instance}}"),),
                ),
                Panel(
                    "Python GC collections",
                    "GC collections per second of the API-server process by generation. Frequent collections cause ITL jitter.",
                    "ops",
                    (Target(p.sel("process_gc"), "{{instance}} gen {{generation}}"),),
                ),
            ),
            collapsed=True,  # one series per target (per generation for GC)
        )
    )
    return tuple(not_observable(row, ctx) for row in rows)


def not_observable(row: Row, ctx: Context) -> Row:
    """Queries of signals the engine cannot give are dropped; a panel left without any says
    "not observable on <engine> <version>" instead of showing an empty graph."""
    panels = []
    for panel in row.panels:
        targets = tuple(t for t in panel.targets if _MISSING not in t.expr)
        if len(targets) == len(panel.targets):
            panels.append(panel)
            continue
        if not targets:
            title = f"{panel.title} (not observable on {ctx.release})"
            description = f"Not observable on {ctx.release}: the engine exports no series for it. {panel.description}"
            panels.append(replace(panel, title=title, description=description, targets=(), thresholds=()))
        else:
            panels.append(replace(panel, targets=targets))
    return replace(row, panels=tuple(panels))


def _pool_rows(p: PanelMaker, ctx: Context, decode_pace: tuple[Panel, ...]) -> tuple[Row, ...]:
    """Each pool of a disaggregated fleet gets its own latency row, read on its role label."""
    assert ctx.roles is not None
    label, prefill, decode = ctx.roles
    prefill_panels = (
        p.latency(
            "prefill_pool_ttft",
            "Prefill pool: time to first token",
            f"TTFT on the prefill pods ({label}={prefill}), p50/p90/p99 and mean: their legs run with "
            "max_tokens=1, so this is their queue + prefill. What users wait for their first token adds the "
            "KV transfer and the decode pod's first step (the user-facing TTFT above reads the decode pool).",
        ),
        p.latency(
            "prefill_pool_prefill_time",
            "Prefill pool: prefill time",
            f"Time requests spend in the PREFILL phase on the prefill pods ({label}={prefill}), p50/p90/p99 and "
            "mean: compute per prompt. Rising with steady prompt lengths means compute pressure.",
        ),
        p.latency(
            "prefill_pool_queue_time",
            "Prefill pool: queue time",
            f"Time in the scheduler queue of the prefill pods ({label}={prefill}) before prefill starts, "
            "p50/p90/p99 and mean. The prefill pool's capacity signal; default buckets start at 0.3 s.",
        ),
    )
    decode_panels = (
        *decode_pace,
        p.latency(
            "decode_time",
            "Decode pool: decode time",
            f"Time requests spend in the DECODE phase on the decode pods ({label}={decode}), p50/p90/p99 and "
            "mean: output length times the decode pace.",
        ),
    )
    return (
        Row(f"Prefill pool ({label}={prefill})", tuple(x for x in prefill_panels if x)),
        Row(f"Decode pool ({label}={decode})", tuple(x for x in decode_panels if x)),
    )


def _running_waiting(p: PanelMaker, rec: Recorder, lines: dict[str, tuple]) -> Panel:
    description = (
        "Requests in the running batch and in the queue, and the queue per replica serving the model (the "
        "waiting alert's lines apply to it). Rising waiting at constant running means the KV pool or "
        "max_num_seqs limits, not CPU."
    )
    targets = [Target(p.sel("running"), p.legend("running")), Target(p.sel("waiting"), p.legend("waiting"))]
    per_replica = Target(p.sel("waiting_per_replica"), p.legend("waiting per replica"))
    if "waiting_deferred" in rec.names:
        description += (
            " Waiting counts requests queued for capacity only (what the waiting alert reads); deferred are "
            "requests held back while their KV cache is transferred from a prefill pod (or by the LoRA budget)."
        )
        targets = [
            targets[0],
            Target(p.sel("waiting"), p.legend("waiting (capacity)")),
            Target(p.sel("waiting_deferred"), p.legend("deferred (KV transfer)")),
        ]
    targets.append(per_replica)
    return Panel(
        "Running vs waiting requests", description, "short", tuple(targets), thresholds=lines.get("waiting_requests", ())
    )


def _nixl(ctx: Context, p: PanelMaker, rec: Recorder, lines: dict[str, tuple]) -> tuple[Panel, ...]:
    """Transfer time, bytes and failures of the KV cache moving from prefill to decode pods (what
    the engine exports of them: SGLang has transfer time and failures, no bytes in base units)."""
    description = "KV-cache transfer time per transfer, p50/p90/p95/p99 and mean."
    how = ctx.catalog.caveat("nixl_transfer")
    if how is not None:
        description += f" Approximation on {ctx.release}: {how}."
    title = ctx.words("{hint:xfer_noun} time")
    panels = [p.latency("nixl_xfer_time", title, description, lines.get("nixl_transfer", ()))]
    if "nixl_throughput" in rec.names:
        bytes_text = "Bytes moved per second of wall time, and per second of transfer time (link throughput)."
        if how is not None:  # the transfer time it divides by is an approximation
            bytes_text += f" The transfer time is the approximation above on {ctx.release}, so the link throughput reads low."
        panels.append(
            Panel(
                ctx.words("{hint:xfer} bytes per second"),
                bytes_text,
                "Bps",
                (
                    Target(p.sel("nixl_bytes_rate"), p.legend("bytes/s")),
                    Target(p.sel("nixl_throughput"), p.legend("per transfer second")),
                ),
            )
        )
    if "nixl_failed" in rec.names:
        panels.extend(_nixl_failures(p, rec, lines))
    return tuple(panels)


def _nixl_failures(p: PanelMaker, rec: Recorder, lines: dict[str, tuple]) -> tuple[Panel, ...]:
    counts = [Target(p.sel("nixl_failed"), p.legend("failed transfers/s"))]
    if "nixl_failed_notifications" in rec.names:
        counts.append(Target(p.sel("nixl_failed_notifications"), p.legend("failed notifications/s")))
    ratios = [Target(p.sel("nixl_failed_ratio"), p.legend("failed / attempted transfers"))]
    if "nixl_kv_expired" in rec.names:
        counts.append(Target(p.sel("nixl_kv_expired"), p.legend("expired KV leases/s")))
        ratios.append(Target(p.sel("nixl_kv_expired_ratio"), p.legend("expired leases / requests")))
    return (
        Panel(
            p.ctx.words("{hint:xfer} failures"),
            p.ctx.words("{hint:kv_transfer_failures}"),
            "ops",
            tuple(counts),
        ),
        Panel(
            p.ctx.words("{hint:xfer} failure and expiry ratios"),
            p.ctx.words(
                "Failed transfers over attempted transfers (completed + failed), and expired KV leases per user "
                "request (finished on the decode pool): what the {hint:xfer} failure and expiry alerts read."
            ),
            "percentunit",
            tuple(ratios),
            thresholds=lines.get("nixl_failures", ()),
            max=1,
        ),
    )


def build_variables(ctx: Context, rec: Recorder) -> tuple[Variable, ...]:
    """The spec's group_by labels, then the drill-down's role, instance and engine, each
    chained from the ones before (drilldown.py)."""
    from genobs.plan import drilldown

    source = ctx.recorded(rec.names["finished"])
    own = tuple(Variable(label, f"label_values({source}, {label})", label) for label in ctx.variables)
    return own + tuple(v for v in drilldown.variables(ctx, rec) if v.name not in ctx.variables)


def lead_row(rows: tuple[Row, ...], titles: list[str], kpi: str) -> Row:
    """The first row: the use case's key panels (presets.yaml `dashboard_lead`), copied
    from their own rows so those stay complete."""
    panels = {panel.title.split(" (not observable on ")[0]: panel for row in rows for panel in row.panels}
    missing = [t for t in titles if t not in panels]
    if missing:
        raise AssertionError(f"dashboard_lead names panels that do not exist: {missing}")
    return Row(f"Key indicators: {kpi}", tuple(panels[t] for t in titles))


def _replica_panels(p: PanelMaker) -> tuple[Panel, ...]:
    """One line per replica: the figures the outlier alerts compare with the model's median."""
    legend = p.legend("{{instance}}")
    return (
        Panel(
            "Mean TTFT by replica",
            "Mean time to first token of each replica with traffic. One line far above the others is "
            f"a replica worse than its peers ({p.ctx.alert('ReplicaTtftOutlier')}).",
            "s",
            (Target(p.sel("replica_ttft_mean"), legend),),
        ),
        Panel(
            "Waiting requests by replica",
            "Requests waiting on each replica. One replica queueing while its peers do not points at "
            f"routing or at that replica, not at missing capacity ({p.ctx.alert('ReplicaQueueOutlier')}).",
            "short",
            (Target(p.sel("replica_waiting"), legend),),
        ),
    )

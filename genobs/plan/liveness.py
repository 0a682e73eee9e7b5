"""Recording rules for "did the server fail" and "is each replica alive" (part of
the `plan` stage): failures that never reach the engine (HTTP 5xx, admission
rejections), per-replica progress, and the shares of a fleet's replicas that are
hung or whose targets are down."""

from __future__ import annotations

from collections.abc import Callable

from genobs import promql as q
from genobs.plan.context import Context
from genobs.plan.recorder import Recorder
from genobs.units import prom_duration_seconds


def replica_labels(ctx: Context) -> tuple[str, ...]:
    """A replica: the spec's grouping labels plus the scrape target (`instance`)."""
    return ctx.where.replica


def engine_labels(ctx: Context) -> tuple[str, ...]:
    """One engine (data-parallel rank) of a replica: its own KV pool and scheduler queue. vLLM
    labels engine series with `engine` from 0.8.3; before, a replica has one engine."""
    return ctx.where.engine


def scheduler_labels(ctx: Context) -> tuple[str, ...]:
    """One scheduler of a replica, on the gauges that carry its labels: the engine's labels, plus
    the profile's per-scheduler labels where the engine has no shared rank label (SGLang dp_rank)."""
    return ctx.where.scheduler


def per_scheduler_progress(ctx: Context) -> bool:
    """Whether the engine counts each scheduler's progress (SGLang's per-scheduler tokens), on both
    releases of a fleet during an upgrade (service.other_engine_version): a pod of a release
    without the counter would read as making no progress."""
    if not ctx.has("scheduler_tokens"):
        return False
    return ctx.other_version is None or ctx.catalog.name("scheduler_tokens", ctx.other_version) is not None


def progress_words(ctx: Context) -> str:
    """What genobs:engine_progress:rate5m counts, per second, for texts."""
    return "prefill and decode tokens processed" if per_scheduler_progress(ctx) else "tokens generated + requests finished"


def liveness_labels(ctx: Context) -> tuple[str, ...]:
    """What hangs on its own and is judged alive on its own: each scheduler where the engine
    counts every scheduler's progress (one hung data-parallel scheduler among busy ones), else
    each engine (a replica's progress counted as a whole)."""
    return scheduler_labels(ctx) if per_scheduler_progress(ctx) else engine_labels(ctx)


def failed_reasons(ctx: Context) -> tuple[str, ...]:
    """finished_reason values that mean the server failed. vLLM has `error` from 0.13; before
    0.8.3 there is no HTTP status either, so `abort` (client or internal) is all there is."""
    reasons = ctx.catalog.reasons_for(ctx.version)
    if "error" in reasons:
        return ("error",)
    if ctx.has("http_requests") or ctx.has("request_errors"):
        return ()
    return ("abort",) if "abort" in reasons else ()


def _http(ctx: Context, status: str, handlers: bool = True) -> str:
    extra: list[q.Matcher] = [("status", "=", status)]
    if handlers:
        extra.append(("handler", "=~", q.any_of(ctx.catalog.completion_handlers)))
    return ctx.raw("http_requests", extra=tuple(extra))


def http_by_model(ctx: Context, status: str, window: str, pick: Callable[[str], str] | None = None) -> str:
    """Per-model rate of the API server's HTTP answers of one status class. http_requests_total
    has no model_name: each replica's rate is attributed to the model(s) its engine series carry.
    `pick`: selects the spec's models from a series read without the model list."""
    per_target = q.sum_by(ctx.process_group, q.rate(_http(ctx, status), window))
    running = pick(ctx.raw("requests_running", models=False)) if pick else ctx.raw("requests_running")
    models = f"group {q.by(replica_labels(ctx))} ({running})"
    return q.sum_by(ctx.group, f"{models} * {q.on(ctx.process_group)} group_left () {per_target}")


def success_wording(ctx: Context, objective: str, bad: list[str]) -> str:
    sources = [f"finished_reason {', '.join(bad)}"] if bad else []
    if ctx.has("gateway_errors"):
        sources.append(f"error answers of the {ctx.catalog.display_name}")
    if ctx.has("http_requests") or ctx.has("request_errors"):
        sources.append("HTTP 5xx")
    if ctx.has("admission_rejections"):
        sources.append("admission rejections")
    return f"{objective} of requests do not fail (bad: {', '.join(sources)})"


def failure_terms(ctx: Context, window: str, zero: str, pick: Callable[[str], str] | None = None) -> list[str]:
    """Failure rates beside finished requests over a window (HTTP 5xx, admission rejections),
    each `or {zero}` so a series that was never created counts as 0 (`pick`: as http_by_model)."""
    out = []
    if ctx.has("http_requests"):
        out.append(f"({http_by_model(ctx, '5xx', window, pick)} or {zero})")
    if ctx.has("request_errors"):  # per model already (TensorRT-LLM)
        errors = q.rate(ctx.raw("request_errors", models=not pick), window)
        out.append(f"({q.sum_by(ctx.group, pick(errors) if pick else errors)} or {zero})")
    if ctx.has("admission_rejections"):
        if pick:
            rejected = pick(q.rate(ctx.raw("admission_rejections", models=False), window))
        else:
            rejected = q.rate(ctx.raw("admission_rejections"), window)
        out.append(f"({q.sum_by(ctx.group, rejected)} or {zero})")
    return out


# Below the traffic gate a model may see a request every few minutes: its success is judged
# over this window instead, from at least MIN_FAILED failed requests (a count, not a rate).
COUNT_WINDOW = "1h"
MIN_FAILED = 10


def low_traffic_failures(r: Recorder, op: str, t: str) -> str:
    """The success ratio over COUNT_WINDOW against the threshold, with MIN_FAILED failures in it,
    only while attempts stay below the traffic gate (above it the 5m ratio decides, and an alert
    resolves minutes after a recovery, not an hour)."""
    ctx = r.ctx
    failed, attempted = r.ref("failed_1h"), r.ref("attempted_1h")
    ratio = f"1 - {q.ratio(failed, attempted)}"
    busy = f"{r.ref('attempted')} >= {ctx.min_request_rate:g}"
    return f"{ratio} {op} {t} and {q.on(ctx.group)} {failed} >= {MIN_FAILED} unless {q.on(ctx.group)} {busy}"


def record_failures(r: Recorder) -> None:
    """Success = the server did not fail: 1 - failures / attempts, where failures are error
    finishes, HTTP 5xx and admission rejections (what the version has). Length finishes and
    client aborts are not failures; they have their own ratios."""
    ctx = r.ctx
    zero = f"{r.ref('finished')} * 0"
    reasons = failed_reasons(ctx) if ctx.has("request_success") else ()
    parts = []
    if reasons:
        # from the recorded rate by reason: the raw counter is read once per evaluation
        sel = r.ref("finish_by_reason", (("finished_reason", "=~", q.any_of(reasons)),))
        r.add("failed_finishes", "requests_failed_finish", "rate", f"{q.sum_by(ctx.group, sel)} or {zero}")
        parts.append(r.ref("failed_finishes"))
    if ctx.has("http_requests"):
        r.add("http_5xx", "http_server_errors", "rate", f"{http_by_model(ctx, '5xx', ctx.window)} or {zero}")
        parts.append(r.ref("http_5xx"))
    if ctx.has("request_errors"):
        r.add("http_5xx", "http_server_errors", "rate", f"{ctx.sum_rate('request_errors')} or {zero}")
        parts.append(r.ref("http_5xx"))
    if ctx.has("admission_rejections"):
        r.add("rejected", "requests_rejected", "rate", f"{ctx.sum_rate('admission_rejections')} or {zero}")
        parts.append(r.ref("rejected"))
    if not parts:
        return  # the engine counts no failures (no error finishes, no HTTP status per model)
    r.add("failed", "requests_failed", "rate", " + ".join(parts))
    attempted = " + ".join([r.ref("finished"), *parts[1 if reasons else 0 :]])
    r.add("attempted", "requests_attempted", "rate", attempted)
    # from the inputs of failed and attempted, each read once in this rule (not from the two
    # recorded sums, which a ruler on a remote storage may hand over from different
    # evaluations): failures <= attempts, so the ratio stays within 0..1
    all_reasons = q.sum_by(ctx.group, r.ref("finish_by_reason"))
    failed_now, attempted_now = [], [all_reasons]
    if reasons:
        sel = r.ref("finish_by_reason", (("finished_reason", "=~", q.any_of(reasons)),))
        failed_now.append(f"({q.sum_by(ctx.group, sel)} or {all_reasons} * 0)")
    for key in ("http_5xx", "rejected"):
        if key in r.names:
            failed_now.append(r.ref(key))
            attempted_now.append(r.ref(key))
    ratio = q.ratio(" + ".join(failed_now), " + ".join(attempted_now))
    r.add("success_ratio", "request_success", "ratio", f"1 - {ratio}")
    # requests over the last hour, a low-traffic model's evidence: the recorded 5m rates summed
    # over the hour's evaluations times the interval (a series younger than the hour is not
    # extrapolated to a full hour, as an average times 3600 would be)
    step = f"{ctx.evaluation_seconds:g}"
    for key in ("failed", "attempted"):
        r.add(f"{key}_1h", f"requests_{key}", "increase1h", f"sum_over_time({r.ref(key)}[{COUNT_WINDOW}]) * {step}")


# A gauge's last sample within this window: one failed scrape (a busy pod's /metrics timing
# out, Prometheus writes a staleness marker) must not make a held request vanish for a step
# and reset the `for` of a hang alert. Range selectors skip staleness markers.
HELD_WINDOW = "2m"


def hung_engines(r: Recorder) -> str:
    """Engines (data-parallel ranks; a replica before vLLM 0.8.3) holding requests (running or
    waiting) that generated no token and finished no request over the rate window: ranks of a
    dense model hang independently. The value is the number of requests they hold."""
    return f"{r.ref('engine_active')} > 0 and {q.on(liveness_labels(r.ctx))} {r.ref('engine_progress')} == 0"


def stalled_replicas(r: Recorder) -> str | None:
    """Replicas whose API server answered requests (2xx on a completion handler) that their engines
    never finished, while those engines made no progress at all over the rate window: an engine
    core that stopped at an instant it held nothing. vLLM's running and waiting gauges come from
    the engine core's outputs, so they freeze at 0 and the held-requests test cannot see it; the
    API server still counts each request a client gives up on when it ends. The value is those
    requests over the rate window. None where the engine has no HTTP answers of its own."""
    if "replica_unfinished" not in r.names:
        return None
    rl = replica_labels(r.ctx)
    progress = f"sum {q.by(rl)} ({r.ref('engine_progress')}) == 0"
    return f"{r.ref('replica_unfinished')} * {window_seconds(r.ctx):g} > 0 and {q.on(rl)} ({progress})"


def window_seconds(ctx: Context) -> float:
    return prom_duration_seconds(ctx.window)


def hung_replicas(r: Recorder) -> str:
    """Replicas with at least one hung engine, the value being the requests their hung engines hold;
    or whose engines stopped while idle (stalled_replicas), the value being the requests clients
    gave up on over the rate window."""
    held = q.sum_by(replica_labels(r.ctx), hung_engines(r))
    stalled = stalled_replicas(r)
    return held if stalled is None else f"{held} or {stalled}"


def held(ctx: Context, key: str) -> str:
    """A gauge per engine (or scheduler, liveness_labels), gap-tolerant (HELD_WINDOW) and counted
    once when two monitors scrape the same pod (they differ only in discovery labels such as
    `service` or `endpoint`)."""
    latest = q.max_by(scheduler_labels(ctx), f"last_over_time({ctx.raw(key)}[{HELD_WINDOW}])")
    if scheduler_labels(ctx) == liveness_labels(ctx):
        return latest
    return q.sum_by(liveness_labels(ctx), latest)  # a replica holds what its schedulers hold


def record_liveness(r: Recorder) -> None:
    """Per engine (or scheduler, liveness_labels): requests it holds and the progress it makes;
    per replica: requests its API server answered that its engines never finished; per model: the
    share of engines that are hung (holding requests, or on a stalled replica)."""
    ctx = r.ctx
    el = liveness_labels(ctx)
    active = f"{held(ctx, 'requests_running')} + {held(ctx, 'requests_waiting')}"
    r.add("engine_active", "engine_requests_active", "sum", active)
    if per_scheduler_progress(ctx):
        # each scheduler's own tokens (prefill and decode); a scheduler that has processed none
        # since it started has no series yet, so its held requests supply the zero
        tokens = q.sum_by(el, q.rate(ctx.raw("scheduler_tokens", all_roles=True), ctx.window))
        progress = f"{tokens} or {r.ref('engine_active')} * 0"
    else:
        tokens = q.sum_by(el, ctx.rate("generation_tokens"))
        # V0 creates a finished_reason series only once seen: no series means no finished request
        # every pool finishes requests (prefill legs as `length`): an engine's liveness reads all
        # (the zero comes from the engine's recorded active requests, not a second raw token read)
        done = ctx.raw("request_success" if ctx.has("request_success") else "requests_finished", all_roles=True)
        r.add("engine_finished", "engine_requests_finished", "rate", q.sum_by(el, q.rate(done, ctx.window)))
        progress = f"{tokens} + ({r.ref('engine_finished')} or {r.ref('engine_active')} * 0)"
    r.add("engine_progress", "engine_progress", "rate", progress)
    if ctx.has("http_requests"):
        r.add(
            "process_http_ok",
            "api_server_completions",
            "rate",
            q.sum_by(ctx.process_group, q.rate(_http(ctx, "2xx"), ctx.window)),
        )
        if "engine_finished" in r.names:
            record_unfinished(r)
    engines = f"count {q.by(ctx.group)} ({r.ref('engine_active')})"
    hung = hung_engines(r)
    stalled = stalled_replicas(r)
    if stalled is not None:  # every engine of a stalled replica counts as hung
        hung = f"{hung} or ({r.ref('engine_active')} and {q.on(replica_labels(ctx))} ({stalled}))"
    r.add("engines_hung_ratio", "engines_hung", "ratio", f"(count {q.by(ctx.group)} ({hung}) or {engines} * 0) / {engines}")


def record_unfinished(r: Recorder) -> None:
    """Requests the API server answered (2xx on a completion handler) that no engine finished,
    per scrape target, then per model on it: clients that gave up before the answer was complete.
    vLLM's front end drops such a request without counting a finish (never `abort`): the API
    server counts it when it ends, with the status of the headers it had sent. Per target and
    never below 0: an HTTP request that fans out into several engine requests (n > 1) must not
    hide another target's give-ups. A target serving several models (vLLM serves one) gives each
    of them its whole count."""
    ctx = r.ctx
    pg, rl = ctx.process_group, replica_labels(ctx)
    finished = q.sum_by(pg, r.ref("engine_finished"))
    answered = r.ref("process_http_ok")
    # the API server creates a handler's series with its first answer, and rate() extrapolates a
    # series that starts inside the window differently from the engine's counters (created at 0
    # when the server starts): a target is compared only once its answer series hold as many
    # samples over the window as its engine's gauges
    window = ctx.window
    young_answers = f"min {q.by(pg)} (count_over_time({_http(ctx, '2xx')}[{window}]))"
    engine = q.selector(ctx.metric("requests_running"), ctx.raw_matchers(process=True))
    young = f"{young_answers} < {q.on(pg)} max {q.by(pg)} (count_over_time({engine}[{window}]))"
    difference = f"(clamp_min({answered} - {q.on(pg)} {finished}, 0) or {answered})"
    r.add("process_unfinished", "api_server_unfinished", "rate", f"{difference} unless {q.on(pg)} ({young})")
    models = f"group {q.by(rl)} ({ctx.raw('requests_running')})"
    r.add("replica_unfinished", "replica_requests_unfinished", "rate", f"{models} * {q.on(pg)} group_left () {r.ref('process_unfinished')}")


def target_labels(ctx: Context) -> tuple[str, ...]:
    """Labels of a scrape job's targets taken together: the process labels without `instance`."""
    return ctx.where.targets


def pool_label(ctx: Context) -> tuple[str, ...]:
    """The role label of a disaggregated fleet's pools (prefill and decode queue differently)."""
    return ctx.where.pool


def capacity_labels(ctx: Context) -> tuple[str, ...]:
    """Targets judged together for lost capacity: the job's, per pool on a P/D fleet (every request
    needs both pools, so a lost prefill pool is an outage however few of the targets it is)."""
    return ctx.where.capacity


# A target counts as serving capacity once it has been up within this window: a pod that an
# HPA or a rollout surge just created answers nothing while it loads its model (minutes).
SERVED_WINDOW = "1h"


def targets_up(ctx: Context) -> str:
    """`up` of the targets behind the selector, each with its pool role on a P/D fleet. The role
    comes from the engine's own series, the one each target last exported within SERVED_WINDOW
    (a down target exports nothing): an engine may write it on its series only, not as a target
    label (SGLang's engine_type), and `up` carries target labels alone."""
    up = ctx.up()
    if ctx.where.role is None:
        return up
    target = ctx.where.process
    engine = q.selector(ctx.metric("requests_running"), ctx.raw_matchers(process=True))
    roles = f"group {q.by((*target, ctx.where.role))} (last_over_time({engine}[{SERVED_WINDOW}]))"
    return f"({up} * {q.on(target)} group_left ({ctx.where.role}) {roles})"


def record_targets_down(r: Recorder) -> None:
    """Share of the targets that served within SERVED_WINDOW and are down now, per pool (1 when
    none is up). A new target that never became ready is not lost capacity (TargetDown
    still warns about it); a target gone from service discovery (scale-in) is not either."""
    ctx = r.ctx
    by, up = capacity_labels(ctx), targets_up(ctx)
    # each target's `up` now, for the targets that served (one read of the hour): 1 - its mean
    served = f"{up} and {q.on(ctx.where.process)} (max_over_time({ctx.up()}[{SERVED_WINDOW}]) == 1)"
    if ctx.where.role is None:
        served = f"{up} and (max_over_time({up}[{SERVED_WINDOW}]) == 1)"
    ratio = f"1 - avg {q.by(by)} ({served})"
    none_up = f"{q.sum_by(by, up)} == 0"
    r.add("process_targets_down_ratio", "serving_targets_lost", "ratio", f"{ratio} or ({none_up}) + 1")

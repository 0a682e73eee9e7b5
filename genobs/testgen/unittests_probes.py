"""Part of the `plan` stage (promtool unit tests): for each alert, the fleet knob
that breaks it, the candidate settings from mild to severe, the value the alert
then reports (computed from the input series) and the labels it carries."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace

from genobs.plan.alerts import LATENCY_ALERTS, MIN_PEERS, waiting_floor
from genobs.plan.context import Context
from genobs.plan.liveness import failed_reasons
from genobs.plan.model import AlertRule
from genobs.testgen.unittests_fleet import (
    FIXED_RATES,
    REQUESTS,
    RSS_AT_EVAL,
    TYPICAL,
    UNLABELLED_FINISHES,
    Fleet,
    Identity,
    Indeterminate,
    accepted_at,
    approx_sum,
    bounds,
    bucket_quantile,
    canonical,
    exact_sum,
    fleet_rate,
    hist_sum_rate,
    observations,
    quantile_of,
    split_over_ranks,
)


@dataclass(frozen=True)
class SloDef:
    """An SLO as its recording rules define it."""

    name: str
    key: str | None  # histogram of a latency SLI; None for the success SLI
    threshold: float | None  # latency bound (a bucket boundary)
    bad: tuple[str, ...]  # finish reasons counted as errors (success SLI)
    budget: float  # the error budget the burn-rate rules divide by
    shortest: str  # the shortest burn-rate window


# output speeds (tok/s/user) the fleet can show exactly (TOKENS / speed and REQUESTS / speed are short binary fractions)
SPEEDS = (1000, 500, 400, 250, 200, 125, 100, 80, 50, 40, 25, 20, 16, 10, 8, 5, 4, 2, 1, 0.5, 0.25, 0.125)
_COMPARE: dict[str, Callable[[float, float], bool]] = {
    ">": lambda a, b: a > b,
    "<": lambda a, b: a < b,
    ">=": lambda a, b: a >= b,
    "<=": lambda a, b: a <= b,
    "==": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
}


@dataclass
class Env:
    """What the probes share: the spec's context, the fleet's labels, the rate window."""

    ctx: Context
    ident: Identity
    window: int  # minutes of the recording rules' rate window
    slos: dict[str, SloDef]
    healthy: Fleet | None = None
    alerts: tuple[AlertRule, ...] = ()
    inexact: bool = False  # set when a computed value may differ from Prometheus' in the last digit
    memo: dict = field(default_factory=dict)  # unittests_slo.slo_totals: (slo, fleet, minute, window) -> totals

    def sum(self, values: Iterable[float]) -> float:
        values = list(values)
        try:
            return exact_sum(values)
        except Indeterminate:
            self.inexact = True
            return approx_sum(values)

    @property
    def ranks(self) -> int:
        return len(self.ident.ranks)

    def rate(self, total_per_second: float, at: int, window: int | None = None) -> float:
        return fleet_rate(total_per_second, self.ranks, window or self.window, at)

    def finish_rate(self, fleet: Fleet, reasons: Iterable[str], at: int, window: int | None = None) -> float:
        rates = fleet.reasons()
        return self.sum(self.rate(rates.get(r, 0), at, window) for r in reasons)

    def all_reasons(self) -> tuple[str, ...]:
        """The finishes the engine's finished-request counter counts (without finish reasons: the
        fixture fleet's stop and length finishes, aborts are counted apart)."""
        return self.ctx.catalog.reasons_for(self.ctx.version) or UNLABELLED_FINISHES


@dataclass(frozen=True)
class Probe:
    """How to make one alert fire and what it then reports."""

    labels: str  # group | quantile | process | up | absent | slo | replica | pool_replica
    value: Callable[[Env, Fleet, int], float]  # the alert's $value at a minute
    fault: Callable[[Env, Fleet, object], Fleet]  # the fleet with the knob set to a candidate
    params: Callable[[Env, tuple[float, ...]], Iterable[object]]  # candidates, mild to severe
    thresholded: bool = True
    needs: tuple[str, ...] = ()  # input series beyond what the alert reads
    slo: str | None = None  # an SLO's burn-rate alert
    approximate: bool = False  # value() may differ from Prometheus' in the last digits
    engine: bool = True  # the alert reads engine series (False: process or scrape series only)
    liveness: str = ""  # hung: the alert is about engine counters that stopped; others cannot fire then
    on_stall: bool = False  # has a value on a stalled fleet where the API server counts its answers
    tag: str | None = None  # the `slo` label of other per-SLO alerts
    compared: Callable[[Env, Fleet, int], float] | None = None  # what the threshold applies to, if not value
    alone: bool = False  # the fault adds replicas: its test group holds no other fault


def threshold(rule: AlertRule) -> tuple[str, float] | None:
    """(operator, threshold) of a thresholded alert: from the rule, else read from `<query> <op> <number>`."""
    if rule.threshold is not None and rule.comparator in _COMPARE:
        return rule.comparator, rule.threshold
    if not rule.query or not rule.expr.startswith(rule.query):
        return None
    parts = rule.expr[len(rule.query) :].split()
    if len(parts) < 2 or parts[0] not in _COMPARE:
        return None
    try:
        return parts[0], float(parts[1])
    except ValueError:
        return None


# --- probes of the built-in alerts ---------------------------------------------------------------


def _latency(alias: str) -> Probe:
    def fault(env: Env, fleet: Fleet, tail: object) -> Fleet:
        key = canonical(env.ctx, alias)
        body = fleet.dist(key)[0][0]
        n = observations(key)
        assert isinstance(tail, int)
        return fleet.with_dist(key, ((body, n * 96 // 100), (tail, n * 4 // 100)))

    def params(env: Env, _: tuple[float, ...]) -> Iterable[object]:
        assert env.healthy is not None
        key = canonical(env.ctx, alias)
        body = env.healthy.dist(key)[0][0]
        return range(body + 1, len(bounds(env.ctx, key, env.healthy)) + 1)

    return Probe(
        "quantile",
        lambda env, fleet, at: quantile_of(env.ctx, fleet, alias, 0.99, env.window, at, env.ranks),
        fault,
        params,
    )


def _finish_share(reason: str) -> Probe:
    def own(env: Env) -> str:
        """The engine's name of the reason: a client that went away is `cancelled` on TensorRT-LLM."""
        return env.ctx.catalog.abort_reason if reason == "abort" else reason

    def value(env: Env, fleet: Fleet, at: int) -> float:
        if not env.ctx.has("request_success"):  # aborted per finished request, counted apart (SGLang)
            return env.finish_rate(fleet, ("abort",), at) / env.finish_rate(fleet, env.all_reasons(), at)
        return env.finish_rate(fleet, (own(env),), at) / env.finish_rate(fleet, env.all_reasons(), at)

    def with_unfinished(env: Env, fleet: Fleet, at: int) -> float:
        """Aborts plus the requests the API server answered that no engine finished (all of them on a
        stalled fleet), over finished plus unfinished requests: the recorded abort ratio of vLLM."""
        ctx = env.ctx
        if reason != "abort" or not (ctx.has("http_requests") and ctx.has("request_success")):
            return value(env, fleet, at)
        stalled = not (fleet.progressing and fleet.counting)
        finished = 0.0 if stalled else env.finish_rate(fleet, env.all_reasons(), at)
        aborted = 0.0 if stalled else env.finish_rate(fleet, (own(env),), at)
        unfinished = max(http_rate(env, REQUESTS, at) - finished, 0.0)
        return (aborted + unfinished) / (finished + unfinished)

    return Probe(
        "group",
        with_unfinished,
        lambda env, fleet, k: fleet.with_share(own(env) if env.ctx.has("request_success") else reason, k),  # type: ignore[arg-type]
        lambda env, _: range(1, REQUESTS + 1),
        on_stall=reason == "abort",
    )


def http_rate(env: Env, per_second: float, at: int) -> float:
    """rate() of an API-server HTTP counter: one series per target, no engine ranks."""
    return fleet_rate(per_second, 1, env.window, at)


def success_value(env: Env, fleet: Fleet, at: int) -> float:
    """1 - failed / attempted, added in the order the recording rules add them."""
    ctx = env.ctx
    reasons = failed_reasons(ctx)
    finished = env.finish_rate(fleet, env.all_reasons(), at)
    parts = [env.finish_rate(fleet, reasons, at)] if reasons else []
    extra = []
    if ctx.has("http_requests"):
        extra.append(http_rate(env, fleet.http_5xx, at))
    if ctx.has("request_errors"):  # per model, one series (TensorRT-LLM)
        extra.append(fleet_rate(fleet.http_5xx, 1, env.window, at))
    if ctx.has("admission_rejections"):
        extra.append(fleet_rate(fleet.rejected, 1, env.window, at))
    if ctx.has("gateway_errors"):  # a gateway's error answers: its requests count them already
        return 1 - fleet_rate(fleet.http_5xx, 1, env.window, at) / finished
    failed, attempted = 0.0, finished
    for i, v in enumerate([*parts, *extra]):
        failed = v if i == 0 else failed + v
    for v in extra:
        attempted = attempted + v
    return 1 - failed / attempted


def _success_fault(env: Env, fleet: Fleet, k: object) -> Fleet:
    """`k` of REQUESTS requests succeed: the rest fail as the version can show it."""
    assert isinstance(k, int)
    reasons = failed_reasons(env.ctx)
    if reasons:
        return fleet.with_share("stop", k, slack=reasons[0])
    return _with(fleet, http_5xx=REQUESTS - k)


_SUCCESS = Probe("group", success_value, _success_fault, lambda env, _: range(REQUESTS - 1, -1, -1))


def _error_ratio_value(env: Env, fleet: Fleet, at: int) -> float:
    """failed / all operations of an application (OpenTelemetry GenAI): one count told apart by
    error.type, the fleet's finished requests without it, its failures with it."""
    ok = env.finish_rate(fleet, env.all_reasons(), at)
    failed = fleet_rate(fleet.http_5xx, 1, env.window, at)
    return failed / (ok + failed)


_ERROR_RATIO = Probe("group", _error_ratio_value, _success_fault, lambda env, _: range(REQUESTS - 1, -1, -1))


def _speed_value(env: Env, fleet: Fleet, at: int) -> float:
    ctx = env.ctx
    if ctx.speed_from_tpot:  # 1 / mean TPOT
        return env.rate(REQUESTS, at) / env.rate(hist_sum_rate(ctx, fleet, "tpot"), at)
    generated = env.rate(hist_sum_rate(ctx, fleet, "generation_length"), at) - env.rate(REQUESTS, at)
    return generated / env.rate(hist_sum_rate(ctx, fleet, "decode_time"), at)


_SPEED = Probe(
    "group",
    _speed_value,
    lambda env, fleet, v: _with(fleet, speed=v),
    lambda env, _: [v for v in SPEEDS if env.healthy and v < env.healthy.speed],
)


def _acceptance_value(env: Env, fleet: Fleet, at: int) -> float:
    """alpha: accepted tokens at draft position 0 / drafting steps (the alert exists only where vLLM
    exports per-position counts)."""
    return env.rate(accepted_at(fleet, 0), at) / env.rate(FIXED_RATES["spec_decode_drafts"], at)


_ACCEPTANCE = Probe(
    "group",
    _acceptance_value,
    lambda env, fleet, k: _with(fleet, acceptance=k),
    lambda env, _: range(99, -1, -1),
)


def _kv_fault(env: Env, fleet: Fleet, k: object) -> Fleet:
    assert isinstance(k, int)
    return _with(fleet, kv=(k / 1000, fleet.kv[1]), waiting=max(fleet.waiting, 1))


def _kv_value(env: Env, fleet: Fleet, at: int) -> float:
    """The fullest KV pool among the engines with requests waiting (the waiting split over ranks)."""
    waiting = split_over_ranks(fleet.waiting, env.ranks)
    queueing = [fleet.kv[0] if i == 0 else fleet.kv[1] for i in range(env.ranks) if waiting[i] > 0]
    # no engine queues: the recorded series has no sample, so the alert cannot fire (as if 0)
    return max(queueing) if queueing else 0.0


_KV = Probe(
    "replica",
    _kv_value,
    _kv_fault,
    lambda env, _: range(round((env.healthy.kv[0] if env.healthy else 0) * 1000) + 1, 1001),
)


def _quarter_steps(_: Env, thresholds: tuple[float, ...]) -> list[float]:
    """Rates just above each threshold, in quarters per second (exact per rank)."""
    return sorted({(math.floor(t * 4) + 1) / 4 for t in thresholds if t >= 0})


def _preemption_steps(_: Env, thresholds: tuple[float, ...]) -> list[float]:
    """Preemptions/s just above each threshold share of the fleet's finished requests."""
    return sorted({(math.floor(t * REQUESTS * 4) + 1) / 4 for t in thresholds if t >= 0})


_PREEMPTIONS = Probe(
    "group",
    lambda env, fleet, at: env.rate(fleet.preemptions, at) / env.finish_rate(fleet, env.all_reasons(), at),
    lambda env, fleet, r: _with(fleet, preemptions=r),
    _preemption_steps,
)
def _ratio_steps(base: float) -> Callable[[Env, tuple[float, ...]], list[float]]:
    """Rates (quarters per second) whose share r / (base + r) is just above each threshold."""

    def params(_: Env, thresholds: tuple[float, ...]) -> list[float]:
        return sorted({(math.floor(t * base / (1 - t) * 4) + 1) / 4 for t in thresholds if 0 <= t < 1})

    return params


def _nixl_failed_value(env: Env, fleet: Fleet, at: int) -> float:
    """failed / (completed + failed): the transfer-time histogram observes completed transfers."""
    failed = env.rate(fleet.nixl_failed, at)
    return failed / (env.rate(observations("nixl_xfer_time"), at) + failed)


_NIXL_FAILED = Probe(
    "group",
    _nixl_failed_value,
    lambda env, fleet, r: _with(fleet, nixl_failed=r),
    _ratio_steps(observations("nixl_xfer_time")),
)
_NIXL_EXPIRED = Probe(
    "group",
    lambda env, fleet, at: env.rate(fleet.nixl_expired, at) / env.finish_rate(fleet, env.all_reasons(), at),
    lambda env, fleet, r: _with(fleet, nixl_expired=r),
    lambda env, thresholds: sorted({(math.floor(t * REQUESTS * 4) + 1) / 4 for t in thresholds if t >= 0}),
)
_WAITING = Probe(
    "group",
    lambda env, fleet, at: float(fleet.waiting),
    lambda env, fleet, w: _with(fleet, waiting=w),
    lambda env, thresholds: sorted({math.floor(t) + 1 for t in thresholds if t >= 0}),
)


def _rss_value(env: Env, fleet: Fleet, at: int) -> float:
    slope = (RSS_AT_EVAL * fleet.rss_growth // 6000) / 60  # bytes per second
    return slope * 3600 / RSS_AT_EVAL


_RSS = Probe(
    "process",
    _rss_value,
    lambda env, fleet, k: _with(fleet, rss_growth=k),
    lambda env, _: range(1, 101),  # up to doubling per hour
    approximate=True,  # deriv() is a least-squares fit
    engine=False,
)
_TARGET_DOWN = Probe(
    "up",
    lambda env, fleet, at: 0.0,
    lambda env, fleet, _: _with(fleet, target_up=False),
    lambda e, t: [None],
    False,
    engine=False,
)
# the unit-test fleet is one target: down, it is 100 % of the job's targets
_CAPACITY_LOST = Probe(
    "targets",
    lambda env, fleet, at: 0.0 if fleet.target_up else 1.0,
    lambda env, fleet, _: _with(fleet, target_up=False),
    lambda e, t: [None],
    engine=False,
)
_ABSENT = Probe(
    "up",
    lambda env, fleet, at: 1.0,
    lambda env, fleet, _: _with(fleet, engine_up=False),
    lambda e, t: [None],
    False,
    needs=("up",),
    engine=False,
)
def _held_or_abandoned(env: Env, fleet: Fleet, at: int) -> float:
    """EngineHung's $value: the requests a hung replica holds, or, on a replica whose engine
    counts nothing (held 0) while its API server answers, the requests answered over the rate
    window that no engine finished."""
    if fleet.counting:
        return float(fleet.running + fleet.waiting)
    return http_rate(env, REQUESTS, at) * env.window * 60


_HUNG = Probe(
    "replica",
    _held_or_abandoned,
    lambda env, fleet, _: _with(fleet, progressing=False),
    lambda e, t: [None],
    False,
    liveness="hung",
)
# the unit-test fleet is one replica: hung, it is 100 % of the model's replicas
_NO_PROGRESS = Probe(
    "group",
    lambda env, fleet, at: 1.0,
    lambda env, fleet, _: _with(fleet, progressing=False),
    lambda e, t: [None],
    liveness="hung",
)

# --- one replica against its peers (the fleet gets MIN_PEERS - 1 healthy peers) ------------------


def _with_peers(env: Env, fleet: Fleet, **changes) -> Fleet:
    assert env.healthy is not None
    return _with(fleet, peer=env.healthy, peers=MIN_PEERS - 1, **changes)


def _mean_ttft(env: Env, fleet: Fleet, at: int) -> float:
    """One replica's recorded mean TTFT: sum over its ranks of rate(_sum) / rate(_count)."""
    total = sum(c for _, c in fleet.dist("ttft"))
    return env.rate(float(hist_sum_rate(env.ctx, fleet, "ttft")), at) / env.rate(total, at)


def _ttft_vs_peers(env: Env, fleet: Fleet, at: int) -> float:
    if fleet.peer is None or fleet.peers + 1 < MIN_PEERS:
        return 0.0
    return _mean_ttft(env, fleet, at) / _mean_ttft(env, fleet.peer, at)  # the median is a peer's


def _ttft_buckets(env: Env, _: tuple[float, ...]) -> Iterable[object]:
    assert env.healthy is not None
    body = env.healthy.dist("ttft")[0][0]
    return range(body + 1, len(bounds(env.ctx, "ttft", env.healthy)))


_TTFT_OUTLIER = Probe(
    "replica",
    _mean_ttft,
    lambda env, fleet, j: _with_peers(env, fleet.with_dist("ttft", ((j, REQUESTS),))),
    _ttft_buckets,
    approximate=True,
    compared=_ttft_vs_peers,
    alone=True,
)


def _queue_vs_peers(env: Env, fleet: Fleet, at: int) -> float:
    if fleet.peer is None or fleet.peers + 1 < MIN_PEERS:
        return 0.0
    levels = {a.severity: a.threshold for a in env.alerts if a.key == "RequestsWaitingHigh"}
    if fleet.waiting <= waiting_floor({k: v for k, v in levels.items() if v is not None}):
        return 0.0
    median = fleet.peer.waiting
    return fleet.waiting / median if median else math.inf


_QUEUE_OUTLIER = Probe(
    "pool_replica",
    lambda env, fleet, at: float(fleet.waiting),
    lambda env, fleet, w: _with_peers(env, fleet, waiting=w),
    lambda env, _: range(1, 2001),
    compared=_queue_vs_peers,
    alone=True,
)

PROBES: dict[str, Probe] = {  # by alert key (signals.yaml)
    "TtftP99High": _latency("ttft"),
    "ItlP99High": _latency("itl"),
    "E2eLatencyP99High": _latency("e2e"),
    "QueueTimeP99High": _latency("queue_time"),
    "NixlTransferTimeP99High": _latency("nixl_xfer_time"),
    "LengthFinishRatioHigh": _finish_share("length"),
    "AbortRatioHigh": _finish_share("abort"),
    "SuccessRatioLow": _SUCCESS,
    "ErrorRatioHigh": _ERROR_RATIO,
    "OutputSpeedPerUserLow": _SPEED,
    "SpecDecodeAcceptanceLow": _ACCEPTANCE,
    "KvCacheSaturated": _KV,
    "PreemptionsSustained": _PREEMPTIONS,
    "NixlTransfersFailing": _NIXL_FAILED,
    "NixlKvExpired": _NIXL_EXPIRED,
    "RequestsWaitingHigh": _WAITING,
    "ApiServerRssGrowing": _RSS,
    "TargetDown": _TARGET_DOWN,
    "ServingCapacityLost": _CAPACITY_LOST,
    "MetricsAbsent": _ABSENT,
    "EngineHung": _HUNG,
    "FleetNoProgress": _NO_PROGRESS,
    "ReplicaTtftOutlier": _TTFT_OUTLIER,
    "ReplicaQueueOutlier": _QUEUE_OUTLIER,
}
LATENCY_KEYS = {name: key for name, (key, _) in LATENCY_ALERTS.items()}


def _with(fleet: Fleet, **changes) -> Fleet:
    return replace(fleet, **changes)


# --- the healthy fleet -----------------------------------------------------------------------------


def _limits(env: Env, alerts: list[AlertRule], keys: Iterable[str]) -> list[float]:
    keys = set(keys)
    out = []
    for a in alerts:
        if a.key in keys:
            found = threshold(a)
            if found:
                out.append(found[1])
    return out


def healthy_fleet(env: Env, alerts: list[AlertRule]) -> Fleet:
    """A fleet no alert fires on: every signal comfortably on the good side of every threshold."""
    ctx = env.ctx
    extra: dict[str, set[float]] = {}
    for slo in env.slos.values():
        if slo.key is not None and slo.threshold is not None:
            extra.setdefault(slo.key, set()).add(slo.threshold)
    base = Fleet(
        finish=tuple(sorted({r: (REQUESTS if r == "stop" else 0) for r in env.all_reasons()}.items())),
        latency=(),
        speed=40,
        acceptance=75,
        kv=(0.6, 0.45),
        waiting=2,
        extra_bounds=tuple(sorted((k, tuple(sorted(v))) for k, v in extra.items())),
    )
    latency = []
    for key in sorted(ctx.catalog.metrics):
        if ctx.catalog.metric(key).type != "histogram" or not ctx.has(key) or canonical(ctx, key) != key:
            continue
        bs = bounds(ctx, key, base)
        if not bs:
            continue  # the profile knows no buckets of it in this release (no rule reads it)
        limit = min([TYPICAL.get(key, bs[len(bs) // 2]), *extra.get(key, ())])
        alerting = [n for n, k in LATENCY_KEYS.items() if ctx.has(k) and canonical(ctx, k) == key]
        alert_limit = min(_limits(env, alerts, alerting), default=math.inf)
        body = 0
        for i, upper in enumerate(bs):
            p99 = bucket_quantile(0.99, [(b, 0.0 if b < upper else 1.0) for b in (*bs, math.inf)])
            if upper <= limit and p99 <= alert_limit / 2:
                body = i
        latency.append((key, ((body, observations(key)),)))
    speed_limit = max(_limits(env, alerts, ["OutputSpeedPerUserLow"]), default=20)
    speed = min((v for v in SPEEDS if v >= 2 * speed_limit), default=max(SPEEDS))
    acc_limit = max(_limits(env, alerts, ["SpecDecodeAcceptanceLow"]), default=0.5)
    acceptance = min(100, max(75, math.ceil((acc_limit + 1) / 2 * 100)))
    kv_limit = min(_limits(env, alerts, ["KvCacheSaturated"]), default=1.0)
    kv0 = math.floor(min(0.6, kv_limit * 0.6) * 1000) / 1000
    wait_limit = min(_limits(env, alerts, ["RequestsWaitingHigh"]), default=10)
    return _with(
        base,
        latency=tuple(latency),
        speed=speed,
        acceptance=acceptance,
        kv=(kv0, math.floor(kv0 * 750) / 1000),
        waiting=max(0, min(2, math.floor(wait_limit / 4))),
    )

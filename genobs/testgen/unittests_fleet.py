"""Part of the `plan` stage (promtool unit tests): a simulated vLLM fleet whose
state is a handful of knobs, the input series it exports, and the PromQL
arithmetic (rate, sum, histogram_quantile) that predicts what Prometheus computes."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, fields, replace
from fractions import Fraction

from genobs import promql as q
from genobs.plan.context import Context


def floatToGoString(d: float) -> str:  # noqa: N802 (prometheus_client's name)
    """A bucket bound as the Python client vLLM uses writes it in `le` (prometheus_client
    0.26's utils.floatToGoString, copied: importing prometheus_client starts its whole HTTP
    exposition stack, a tenth of the build's own time; tests/test_unittests.py compares)."""
    d = float(d)
    if d == math.inf:
        return "+Inf"
    if d == -math.inf:
        return "-Inf"
    if math.isnan(d):
        return "NaN"
    s = repr(d)
    dot = s.find(".")
    # Go switches to exponents sooner than Python (only positive values matter for le)
    if d > 0 and dot > 6:
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1:]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return s

# Fleet-wide rates: round numbers that split evenly over two data-parallel ranks.
# Values compared to the last digit avoid sums whose rounding depends on the order
# Prometheus adds series in (see exact_sum).
# Input series have a sample every minute; promtool evaluates the rules every two minutes.
# Every fault is stationary (it holds from the first sample on), so a rule's value is the
# same at every step once its window is full, and a 2m step only moves the moment an alert
# becomes active by at most one minute, which the 3 minutes of margin past `for` absorb.
# Evaluation times are put on a step (on_step): promtool reports the alerts of the last
# step at or before eval_time, and a growing series (RSS) has another value a minute
# earlier. promtool's cost is rules x steps: the 2m step halves it.
INPUT_INTERVAL = "1m"
EVALUATION_STEP = "2m"
STEP_MINUTES = 2
MARGIN_MINUTES = STEP_MINUTES + 1  # evaluation time past the rate window plus `for` (see above)


def on_step(minutes: int) -> int:
    """The first evaluation step at or after `minutes`."""
    return -(-minutes // STEP_MINUTES) * STEP_MINUTES


REQUESTS = 100  # finished requests per second (also observations/s of request histograms)
TOKENS = 2000  # generated tokens per second (observations/s of the inter-token histogram)
DRAFTS = 1000  # speculative draft tokens per second
SPEC_TOKENS = 4  # draft tokens per drafting step (--num-speculative-tokens)
RSS_AT_EVAL = 6_000_000_000  # API-server resident memory (bytes) at the scenario's evaluation time
INSTANCE = "10.0.0.1:8000"
OTHER_INSTANCE = "10.0.9.9:8000"
# typical value (upper bucket bound) of each histogram in a healthy fleet
TYPICAL = {
    "ttft": 0.5,
    "itl": 0.05,
    "tpot": 0.05,
    "e2e": 20.0,
    "queue_time": 0.3,
    "prefill_time": 0.5,
    "decode_time": 20.0,
    "nixl_xfer_time": 0.05,
    "nixl_bytes": 1_000_000.0,
    "prompt_length": 2000.0,
    "generation_length": 500.0,
}
# counters with a fixed fleet-wide rate (per second)
FIXED_RATES = {
    "prompt_tokens": 40_000,
    "prefix_cache_queries": 40_000,
    "prefix_cache_hits": 20_000,
    "spec_decode_draft_tokens": DRAFTS,
    "spec_decode_drafts": DRAFTS // SPEC_TOKENS,
}


@dataclass(frozen=True)
class Identity:
    """Labels the fleet's series carry."""

    engine: dict[str, str]  # every engine series (besides engine, le, finished_reason)
    process: dict[str, str]  # API-server process series and `up`
    ranks: tuple[str | None, ...]  # values of the engine (data-parallel rank) label; None: no such label


def identity(ctx: Context, foreign: bool = False) -> Identity | None:
    """The spec's fleet, or (foreign) one the spec's selector must not match (None if every series matches)."""
    labels = dict(ctx.selector)
    instance = INSTANCE
    if foreign:
        if not ctx.selector:
            return None
        first = ctx.selector[0][0]
        labels[first] = f"{labels[first]}-other"
        instance = OTHER_INSTANCE
    engine = {"model_name": ctx.models[0] if ctx.models else "m1", **labels}
    engine.setdefault("instance", instance)
    for label in (*ctx.group, *ctx.process_group):
        engine.setdefault(label, f"{label}-a")
    # a disaggregated fixture fleet is its decode pool: the pool user-facing signals read
    for label, _, value in ctx.role("decode"):
        engine[label] = value
    # process series carry no model_name, unless the selector itself requires one
    process = {k: v for k, v in engine.items() if k != "model_name" or k in labels}
    ranks: tuple[str | None, ...] = ("0", "1") if ctx.version >= ctx.catalog.engine_label_since else (None,)
    return Identity(engine, process, ranks)


Dist = tuple[tuple[int, int], ...]  # (bucket index, observations/s over the fleet); index len(bounds) = +Inf


@dataclass(frozen=True)
class Fleet:
    """The knobs of a simulated fleet; faults are copies with one knob turned."""

    finish: tuple[tuple[str, int], ...]  # finished_reason -> requests/s (sums to REQUESTS)
    latency: tuple[tuple[str, Dist], ...]  # histogram key -> distribution of observations
    speed: float  # output tokens/s each user sees (1 / mean TPOT, or decoded tokens / decode time)
    acceptance: int  # alpha in %: accepted tokens at draft position 0 per drafting step
    kv: tuple[float, float]  # KV-cache usage of rank 0, of the other ranks
    waiting: int
    running: int = 8
    preemptions: float = 0.0  # per second over the fleet
    nixl_failed: float = 0.0  # failed transfers per second
    nixl_expired: float = 0.0  # KV leases expired per second
    rss_growth: int = 0  # API-server RSS growth per hour, % of RSS_AT_EVAL
    progressing: bool = True  # engine counters advance (False: a hung engine, gauges keep their values)
    counting: bool = True  # engine series count at all (False: a broken multiprocess dir, every value 0)
    http_5xx: int = 0  # HTTP 5xx answers per second of the completion handlers
    rejected: int = 0  # admission rejections per second
    engine_up: bool = True  # the engine exports its series at all
    target_up: bool = True  # value of `up`
    extra_bounds: tuple[tuple[str, tuple[float, ...]], ...] = field(default=())  # SLO thresholds added as buckets
    dropped_bounds: tuple[tuple[str, tuple[float, ...]], ...] = field(default=())  # buckets the engine lacks
    peer: Fleet | None = None  # other replicas of the model beside this one (outlier cases), all like this
    peers: int = 0  # how many

    def __hash__(self) -> int:
        """The fields' hash, computed once: a fleet keys the probes' memo tables thousands of times."""
        try:
            return self.__dict__["_hash"]
        except KeyError:
            h = hash(tuple(getattr(self, f.name) for f in fields(self)))
            object.__setattr__(self, "_hash", h)
            return h

    def reasons(self) -> dict[str, int]:
        return dict(self.finish)

    def dist(self, key: str) -> Dist:
        try:
            latency = self.__dict__["_latency"]
        except KeyError:  # a dict of the field, made once: the probes ask thousands of times
            latency = dict(self.latency)
            object.__setattr__(self, "_latency", latency)
        return latency.get(key) or ((0, observations(key)),)

    def with_share(self, reason: str, rate: int, slack: str = "stop") -> Fleet:
        """`reason` finishes at `rate` req/s; `slack` absorbs the difference (total stays REQUESTS)."""
        out = self.reasons()
        out[slack] = out.get(slack, 0) + out.get(reason, 0) - rate
        out[reason] = rate
        if out[slack] < 0:
            raise ValueError(f"no {slack} finishes left to turn into {reason}")
        return replace(self, finish=tuple(sorted(out.items())))

    def with_dist(self, key: str, dist: Dist) -> Fleet:
        return replace(self, latency=tuple(sorted({**dict(self.latency), key: dist}.items())))


# (id of the catalog, version, dialect) -> (that catalog, {wire name: smallest key exporting it});
# the entry holds the catalog so that its id stays its own
_CANONICAL: dict[tuple, tuple[object, dict[str, str]]] = {}


def canonical(ctx: Context, key: str) -> str:
    """The key that stands for a series: some versions export one histogram under two keys
    (vLLM before 0.11 has ITL and TPOT both as time_per_output_token_seconds). Test generation
    asks this hundreds of times; the catalog is scanned once per version and dialect."""
    memo = (id(ctx.catalog), ctx.version, ctx.dialect)
    found = _CANONICAL.get(memo)
    if found is None or found[0] is not ctx.catalog:
        keys: dict[str, str] = {}
        for k in ctx.catalog.metrics:
            if ctx.has(k):
                name = ctx.metric(k)
                keys[name] = min(k, keys.get(name, k))
        found = _CANONICAL[memo] = (ctx.catalog, keys)
    return found[1][ctx.metric(key)]


def observations(key: str) -> int:
    return TOKENS if key == "itl" else REQUESTS


def bounds(ctx: Context, key: str, fleet: Fleet | None = None) -> tuple[float, ...]:
    """Bucket upper bounds the engine exports for a histogram (default buckets plus any SLO thresholds),
    in seconds for a duration histogram whatever its unit (series_entry writes `le` in that unit)."""
    extra = dict(fleet.extra_bounds).get(key, ()) if fleet else ()
    dropped = dict(fleet.dropped_bounds).get(key, ()) if fleet else ()
    return _bounds(ctx.catalog.metric(key).buckets_for(ctx.version), extra, dropped)


@functools.lru_cache(maxsize=1024)
def _bounds(default: tuple[float, ...], extra: tuple[float, ...], dropped: tuple[float, ...]) -> tuple[float, ...]:
    return tuple(sorted((set(default) | set(extra)) - set(dropped)))


# --- PromQL arithmetic ----------------------------------------------------------


def num(x: float) -> str:
    """A number as promtool's series notation and YAML read it back exactly."""
    x = float(x)
    return str(int(x)) if x == int(x) and abs(x) < 1e15 else repr(x)


@functools.cache
def per_minute(total_per_second: float, ranks: int) -> float:
    """A counter's increment per minute and rank (exact: promtool adds it up minute after minute).
    Cached: every rate of every candidate fleet asks for a few dozen values, each a Fraction's work."""
    return float(num(Fraction(total_per_second) / ranks * 60))


_COUNTERS: dict[float, list[float]] = {}


def _samples(increment: float, minutes: int) -> list[float]:
    """The samples of 0+<increment>x<minutes> as promtool computes them (repeated float
    addition), shared by every rate of that counter: one pass, not one per minute asked."""
    values = _COUNTERS.setdefault(increment, [0.0])
    while len(values) <= minutes:
        values.append(values[-1] + increment)
    return values


@functools.cache
def prom_rate(increment: float, window_minutes: int, at_minute: int) -> float:
    """rate(x[window]) at minute `at_minute` of a counter written as 0+<increment>x<n> (one sample a
    minute from minute 0; promtool adds the increment repeatedly), with Prometheus 2.x's
    extrapolation: the window holds the samples at both of its ends."""
    values = _samples(increment, at_minute)
    first = max(0, at_minute - window_minutes)
    if at_minute - first < 1:
        return math.nan
    delta = values[at_minute] - values[first]
    sampled = (at_minute - first) * 60.0
    average = sampled / (at_minute - first)
    to_start = (first - (at_minute - window_minutes)) * 60.0
    if delta > 0 and values[first] >= 0:
        to_start = min(to_start, sampled * (values[first] / delta))
    limit = average * 1.1
    interval = sampled + (to_start if to_start < limit else average / 2) + 0.0  # the last sample is at the end
    factor = interval / sampled / (window_minutes * 60.0)
    return delta * factor


class Indeterminate(ArithmeticError):
    """A sum whose rounding depends on the order Prometheus adds the series in."""


def exact_sum(values: Iterable[float]) -> float:
    """Sum of series values, independent of the order Prometheus adds them in (which varies from
    run to run): all non-zero values equal, or all partial sums exact. Else Indeterminate."""
    values = [float(v) for v in values]
    nonzero = {v for v in values if v != 0}
    if len(nonzero) <= 1:
        out = 0.0
        for v in values:
            out += v
        return out
    # in integers of the finest binary unit (float denominators are powers of two): the same
    # test as summing Fractions, without their cost (long SLO windows sum hundreds of values)
    ratios = [v.as_integer_ratio() for v in values]
    unit = max(d for _, d in ratios)
    total = sum(n * (unit // d) for n, d in ratios)
    if all(n >= 0 for n, _ in ratios) and total < 2**53:
        return total / unit
    raise Indeterminate(f"the sum of {sorted(nonzero)} depends on the order of addition")


def approx_sum(values: Iterable[float]) -> float:
    """Sum of series values, correctly rounded (Prometheus' result may differ in the last digit)."""
    values = [float(v) for v in values]
    if all(math.isfinite(v) for v in values):
        return math.fsum(values)  # correctly rounded, as the sum of Fractions
    return float(sum((Fraction(v) for v in values), Fraction(0)))


@functools.cache
def fleet_rate(total_per_second: float, ranks: int, window_minutes: int, at_minute: int) -> float:
    """sum(rate()) over the ranks of a counter that grows by total_per_second over the fleet."""
    inc = per_minute(total_per_second, ranks)
    return exact_sum(prom_rate(inc, window_minutes, at_minute) for _ in range(ranks))


def bucket_quantile(quantile: float, buckets: list[tuple[float, float]]) -> float:
    """histogram_quantile over (upper bound, cumulative count) pairs, as Prometheus 2.x computes it."""
    if quantile < 0:
        return -math.inf
    if quantile > 1:
        return math.inf
    buckets = sorted(buckets)
    if not buckets or not math.isinf(buckets[-1][0]):
        return math.nan
    merged: list[list[float]] = []
    for upper, count in buckets:  # coalesce equal bounds
        if merged and merged[-1][0] == upper:
            merged[-1][1] += count
        else:
            merged.append([upper, count])
    for i in range(1, len(merged)):  # ensure monotonic
        merged[i][1] = max(merged[i][1], merged[i - 1][1])
    if len(merged) < 2:
        return math.nan
    observations_ = merged[-1][1]
    if observations_ == 0:
        return math.nan
    rank = quantile * observations_
    b = next((i for i in range(len(merged) - 1) if merged[i][1] >= rank), len(merged) - 1)
    if b == len(merged) - 1:
        return merged[-2][0]
    if b == 0 and merged[0][0] <= 0:
        return merged[0][0]
    start, end, count = 0.0, merged[b][0], merged[b][1]
    if b > 0:
        start = merged[b - 1][0]
        count -= merged[b - 1][1]
        rank -= merged[b - 1][1]
    return start + (end - start) * (rank / count)


def quantile_of(ctx: Context, fleet: Fleet, key: str, quantile: float, window: int, at: int, ranks: int) -> float:
    """The recorded histogram_quantile of a histogram key, from the fleet's bucket counters."""
    key = canonical(ctx, key)
    bs = bounds(ctx, key, fleet)
    metric = ctx.catalog.metric(key)
    pairs = []
    for i, upper in enumerate((*bs, math.inf)):
        cumulative = sum(n for j, n in fleet.dist(key) if j <= i)
        pairs.append((metric.wire_value(upper), fleet_rate(cumulative, ranks, window, at)))
    # as the recording rule computes it: in the histogram's own unit, then in seconds
    value = bucket_quantile(quantile, pairs)
    return value if metric.per_second == 1 else value / metric.per_second


# --- input series ---------------------------------------------------------------


def series_entry(name: str, labels: dict[str, str], values: str) -> dict:
    """One promtool input series: the name, its labels sorted and quoted, the values notation."""
    inner = ",".join(f"{k}={q.quote(v)}" for k, v in sorted(labels.items()) if k != "__name__")
    return {"series": f"{name}{{{inner}}}", "values": values}


def _counter(total_per_second: float, ranks: int, minutes: int) -> str:
    return f"0+{num(per_minute(total_per_second, ranks))}x{minutes}"


def _gauge(value: float, minutes: int, step: float = 0.0) -> str:
    sign = "-" if step < 0 else "+"
    return f"{num(value)}{sign}{num(abs(step))}x{minutes}"


def split_over_ranks(total: int, ranks: int) -> list[int]:
    return [total // ranks + (1 if i < total % ranks else 0) for i in range(ranks)]


def input_series(ctx: Context, fleet: Fleet, ident: Identity, needed: set[str], minutes: int) -> list[dict]:
    """promtool input_series for every exported series whose name is in `needed`."""
    out: list[dict] = []
    n = len(ident.ranks)

    model_label = ctx.catalog.model_label  # the profile's own name of the model label (Dynamo: model)

    def engine_labels(rank: str | None, **extra: str) -> dict[str, str]:
        labels = dict(ident.engine)
        if model_label != "model_name" and "model_name" in labels:
            labels[model_label] = labels.pop("model_name")
        if rank is not None:
            labels["engine"] = rank
        return {**labels, **extra}

    def role_labels(observed_on: str) -> Callable[..., dict[str, str]]:
        """A series one role writes (the KV-transfer series of SGLang's prefill servers) comes
        from that role's pods, not from the decode pool the fixture fleet otherwise is."""
        role = {label: value for label, _, value in ctx.role(observed_on)}
        return lambda rank, **extra: engine_labels(rank, **{**role, **extra})

    if "up" in needed:
        out.append(series_entry("up", ident.process, _gauge(1 if fleet.target_up else 0, minutes)))
    for key in sorted(ctx.catalog.metrics):
        if not ctx.has(key) or canonical(ctx, key) != key:
            continue
        m = ctx.catalog.metric(key)
        base = ctx.metric(key)
        if m.process:
            if base in needed:
                out.extend(_process(ctx, key, base, fleet, ident, minutes))
            continue
        if not fleet.engine_up:
            continue
        still = not (fleet.progressing and fleet.counting)
        labels_of = role_labels(m.observed_on) if m.observed_on else engine_labels
        if m.type == "histogram":
            flat = replace(fleet, latency=tuple((k, ((0, 0),)) for k in ctx.catalog.metrics)) if still else fleet
            fixed = m.fixed_labels()  # the series the profile reads (a gateway's streaming="true")
            with_fixed = functools.partial(labels_of, **fixed) if fixed else labels_of
            out.extend(_histogram(ctx, key, base, flat, needed, minutes, with_fixed, ident.ranks))
        elif base in needed and m.type == "counter":
            ranks = ident.ranks if m.engine_label else (None,)
            for labels, rate in _counter_rates(ctx, key, fleet):
                # the profile's fixed labels and its names for genobs' labels (position -> token_position)
                labels = {m.wire_label(k): v for k, v in {**m.fixed_labels(), **labels}.items()}
                for rank in ranks:
                    value = 0 if still else rate
                    out.append(series_entry(base, labels_of(rank, **labels), _counter(value, len(ranks), minutes)))
        elif base in needed and key == "requests_waiting_by_reason":
            # the fixture fleet defers nothing: every waiting request waits for capacity
            for i, rank in enumerate(ident.ranks):
                value = _gauge_value("requests_waiting", fleet, i, n) if fleet.counting else 0
                for reason, v in (("capacity", value), ("deferred", 0)):
                    out.append(series_entry(base, engine_labels(rank, reason=reason), _gauge(v, minutes)))
        elif base in needed:
            for i, rank in enumerate(ident.ranks):
                value = _gauge_value(key, fleet, i, n) if fleet.counting else 0
                out.append(series_entry(base, engine_labels(rank), _gauge(value, minutes)))
    if fleet.peer is not None:
        for i in range(fleet.peers):
            out.extend(input_series(ctx, fleet.peer, peer_identity(ident, i), needed, minutes))
    return out


def peer_identity(ident: Identity, index: int) -> Identity:
    """Another replica of the same model: the same labels on another scrape target."""
    instance = f"{ident.engine['instance']}-peer{index + 1}"
    process = {**ident.process, "instance": instance} if "instance" in ident.process else ident.process
    return replace(ident, engine={**ident.engine, "instance": instance}, process=process)


# An engine without finish reasons (SGLang) counts finished requests in one counter and aborted
# ones in another: the fixture fleet's stop and length finishes go to the first, aborts to the second.
UNLABELLED_FINISHES = ("stop", "length")


def _counter_rates(ctx: Context, key: str, fleet: Fleet) -> list[tuple[dict[str, str], float]]:
    if key == "requests_finished":
        return [({}, sum(fleet.reasons().get(r, 0) for r in UNLABELLED_FINISHES))]
    if key == "errors":  # operations an application saw fail besides the finished ones (error.type set)
        return [({ctx.catalog.metric(key).labels[0]: "APITimeoutError"}, fleet.http_5xx)]
    if key == "requests_aborted":
        return [({}, fleet.reasons().get("abort", 0))]
    if key == "request_errors":  # the server's 5xx answers, per model (TensorRT-LLM)
        return [({"http_code": "500"}, fleet.http_5xx)]
    if key == "gateway_errors":  # a gateway's server-side error answers, labelled as the profile says
        errors = [({label: values[0] for label, values in ctx.catalog.metric(key).label_values}, fleet.http_5xx)]
        if ctx.has("requests_finished") and ctx.metric("requests_finished") == ctx.metric(key):
            # one family told apart by labels (Dynamo's requests_total by status): the others succeeded
            ok = {label: values[0] for label, values in ctx.catalog.metric("requests_finished").label_values}
            return [(ok, REQUESTS - fleet.http_5xx), *errors]
        return errors
    if key == "request_success":
        reasons = fleet.reasons()
        return [({"finished_reason": r}, reasons.get(r, 0)) for r in ctx.catalog.reasons_for(ctx.version)]
    if key == "spec_decode_accepted_per_pos":
        # position i is reached only when every earlier one was accepted (geometric model)
        return [
            ({"position": str(i)}, accepted_at(fleet, 0) * (fleet.acceptance / 100) ** i) for i in range(SPEC_TOKENS)
        ]
    if key == "admission_rejections":
        first, *rest = ctx.catalog.metric(key).values_of("reason")
        return [({"reason": first}, fleet.rejected)] + [({"reason": r}, 0) for r in rest]
    rates = {
        "generation_tokens": TOKENS,
        "preemptions": fleet.preemptions,
        "nixl_failed_transfers": fleet.nixl_failed,
        "nixl_failed_notifications": 0,
        "nixl_kv_expired": fleet.nixl_expired,
        "spec_decode_accepted_tokens": sum(accepted_at(fleet, i) for i in range(SPEC_TOKENS)),
        **FIXED_RATES,
    }
    return [({}, rates.get(key, 1))]


def counted_apart(ctx: Context) -> frozenset[str]:
    """Names a gateway's error counter writes with its successful requests, where they are a
    histogram's _count (gen_ai.server.request.duration: one series per error.type, "" for
    successes): the histogram leaves its _count to the counter, so each request is written once."""
    if not (ctx.has("gateway_errors") and ctx.has("requests_finished")):
        return frozenset()
    name = ctx.metric("gateway_errors")
    return frozenset({name}) if ctx.metric("requests_finished") == name else frozenset()


def accepted_at(fleet: Fleet, position: int) -> float:
    """Accepted tokens per second at a draft position (position 0: drafts x alpha, exact)."""
    return FIXED_RATES["spec_decode_drafts"] * fleet.acceptance / 100 * (fleet.acceptance / 100) ** position


def hist_sum_rate(ctx: Context, fleet: Fleet, key: str) -> Fraction:
    """Observed values per second of a histogram: every observation at the upper bound of its
    bucket (the last finite bound for +Inf), except where the per-user output speed is set."""
    per_request = ctx.speed_from_tpot
    if key == "itl":
        return Fraction(TOKENS) / Fraction(fleet.speed)
    if key == "tpot" and per_request:  # mean TPOT = 1 / speed
        return Fraction(REQUESTS) / Fraction(fleet.speed)
    if key == "decode_time" and not per_request:  # tokens after the first / decode time = speed
        decoded = hist_sum_rate(ctx, fleet, "generation_length") - REQUESTS
        return decoded / Fraction(fleet.speed)
    bs = bounds(ctx, key, fleet)
    return sum((Fraction(c) * Fraction(bs[min(j, len(bs) - 1)]) for j, c in fleet.dist(key)), Fraction(0))


def _gauge_value(key: str, fleet: Fleet, rank: int, ranks: int) -> float:
    if key == "requests_running":
        return split_over_ranks(fleet.running, ranks)[rank]
    if key == "requests_waiting":
        return split_over_ranks(fleet.waiting, ranks)[rank]
    if key == "kv_cache_usage":
        return fleet.kv[0] if rank == 0 else fleet.kv[1]
    if key == "spec_decode_acceptance_gauge":
        return fleet.acceptance / 100
    return 0.5


def _histogram(ctx, key, base, fleet, needed, minutes, engine_labels, ranks) -> list[dict]:
    if not any(f"{base}{suffix}" in needed for suffix in ("_bucket", "_sum", "_count")):
        return []  # no rule reads it (an old gateway release's token histograms have no known buckets)
    out: list[dict] = []
    n = len(ranks)
    dist = fleet.dist(key)
    total = sum(c for _, c in dist)
    bs = bounds(ctx, key, fleet)
    if f"{base}_bucket" in needed:
        for i, upper in enumerate((*bs, math.inf)):
            cumulative = sum(c for j, c in dist if j <= i)
            le = floatToGoString(ctx.catalog.metric(key).wire_value(upper))
            for rank in ranks:
                out.append(series_entry(f"{base}_bucket", engine_labels(rank, le=le), _counter(cumulative, n, minutes)))
    metric = ctx.catalog.metric(key)
    sum_rate = hist_sum_rate(ctx, fleet, key) if total else Fraction(0)
    if total and (metric.per_second != 1 or metric.bytes_per_unit != 1):  # in its own unit (ms, MiB)
        sum_rate = sum((Fraction(c) * Fraction(metric.wire_value(bs[min(j, len(bs) - 1)])) for j, c in dist), Fraction(0))
    for suffix, rate in (("_sum", sum_rate), ("_count", total)):
        if f"{base}{suffix}" in needed and f"{base}{suffix}" not in counted_apart(ctx):
            for rank in ranks:
                out.append(series_entry(f"{base}{suffix}", engine_labels(rank), _counter(rate, n, minutes)))
    return out


def _process(ctx: Context, key: str, base: str, fleet: Fleet, ident: Identity, minutes: int) -> list[dict]:
    if key == "process_rss":
        step = RSS_AT_EVAL * fleet.rss_growth // 6000  # bytes per minute: growth% of RSS_AT_EVAL per hour
        return [series_entry(base, ident.process, _gauge(RSS_AT_EVAL - step * minutes, minutes, step))]
    if key == "http_requests":  # one completion handler; the API server answers even when the engine is stuck
        handler = ctx.catalog.completion_handlers[0]
        return [
            series_entry(
                base,
                {**ident.process, "handler": handler, "method": "POST", "status": status},
                _counter(rate, 1, minutes),
            )
            for status, rate in (("2xx", REQUESTS), ("4xx", 0), ("5xx", fleet.http_5xx))
        ]
    if key == "gc_collections":
        return [
            series_entry(base, {**ident.process, "generation": g}, _counter(rate, 1, minutes))
            for g, rate in (("0", 4), ("1", 0.5), ("2", 0.125))
        ]
    return [series_entry(base, ident.process, _gauge(1, minutes))]

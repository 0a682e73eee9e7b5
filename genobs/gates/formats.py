"""Benchmark exports genobs reads, each detected by its shape (not its file name):

- AIPerf `profile_export_aiperf.json`, schema 1.x: one top-level block per metric tag
  with its own `unit` (authoritative), `avg` and percentiles; null means absent. The
  load is `input_config.phases[]` (`concurrency`, or `rate` and its arrival `type`); the
  per-request `profile_export.jsonl` beside it feeds the per-user speed.
- AIPerf <= 0.1.x: the same blocks inside a `records` wrapper, TTFT tagged `ttft`.
- GuideLLM `benchmarks.json`: `benchmarks[i].metrics.<name>.successful.{mean, median,
  percentiles.pNN}`, one run per benchmark (a sweep is several); `_ms` names are ms.
- `vllm bench serve --save-result`: flat `mean_/median_/pNN_<metric>_ms` keys (ms),
  `duration` in s, throughputs in tok/s and req/s.

Everything becomes a genobs.gates.runs.Run in base units; the per-user output speed is
the one statistic genobs.gates.per_user defines, whichever tool wrote the export. A metric the run did not
measure (a non-streaming run has no TTFT) stays absent; it is never read as zero."""

from __future__ import annotations

from pathlib import Path

from genobs.gates import per_user
from genobs.gates.runs import (
    MAX_BYTES,
    MAX_CONTAINERS,
    MAX_RUNS,
    MAX_STRINGS,
    MAX_VALUES,
    METRICS,
    InputError,
    Run,
    Workload,
    finish,
    number,
    time_factor,
)
from genobs.inputs import Unreadable, load_json, read_regular

# --- AIPerf ------------------------------------------------------------------------------------

# AIPerf tag -> canonical metric. AIPerf's inter_token_latency is per request,
# (latency - TTFT) / (OSL - 1): what vLLM calls TPOT; inter_chunk_latency is per gap.
AIPERF_KEYS = {
    "time_to_first_token": "ttft",
    "ttft": "ttft",  # <= 0.1.x
    "inter_token_latency": "tpot",
    "inter_chunk_latency": "itl",
    "request_latency": "e2e",
    "output_token_throughput": "output_tps",
    "input_token_throughput": "input_tps",  # 0.13+; older exports get total - output
    "total_token_throughput": "total_tps",
    "request_throughput": "request_throughput",
    "goodput": "goodput",
    "output_token_throughput_per_user": "output_tps_per_user",
    "prefill_throughput_per_user": "prefill_tps_per_user",
    "prefill_throughput": "prefill_tps_per_user",  # <= 0.1.x docs: a per-request ISL / TTFT
    "e2e_output_token_throughput": "e2e_output_tps_per_user",
}
# the unit each rate must carry: a per-user figure read as a system figure is the classic misreading
RATE_UNITS = {"tok/s": ("tokens/sec",), "tok/s/user": ("tokens/sec/user",), "req/s": ("requests/sec",)}
AIPERF_STATS = ("avg", "min", "max", "p1", "p5", "p10", "p25", "p50", "p75", "p90", "p95", "p99")


def _aiperf_block(run: Run, file: str, where: str, tag: str, block: object) -> None:
    metric = AIPERF_KEYS.get(tag)
    if metric is None or not isinstance(block, dict):
        return
    unit, kind = METRICS[metric]
    if kind == "time":
        factor = time_factor(file, f"{where}.unit", block.get("unit"))
    else:
        allowed = RATE_UNITS[unit] + (("tokens/sec",) if tag == "prefill_throughput" else ())
        if block.get("unit") not in allowed:
            raise InputError(
                file, f"expected unit {allowed[0]!r} for {tag}, got {block.get('unit')!r}", f"{where}.unit"
            )
        factor = 1.0
    for stat in AIPERF_STATS:
        value = number(file, f"{where}.{stat}", block.get(stat))
        if value is not None:
            run.put(metric, stat, value * factor)


def _aiperf_scalar(doc: dict, file: str, where: str, tag: str) -> float | None:
    block = doc.get(tag)
    if not isinstance(block, dict):
        return None
    return number(file, f"{where}{tag}.avg", block.get("avg"))


def _aiperf_workload(doc: dict, cfg: dict, file: str, where: str) -> Workload:
    w = Workload(
        input_tokens=_aiperf_scalar(doc, file, where, "input_sequence_length"),
        output_tokens=_aiperf_scalar(doc, file, where, "output_sequence_length"),
        requests=_aiperf_scalar(doc, file, where, "request_count"),
        failed=_aiperf_scalar(doc, file, where, "error_request_count"),
    )
    duration = doc.get("benchmark_duration")
    if isinstance(duration, dict) and duration.get("avg") is not None:
        factor = time_factor(file, f"{where}benchmark_duration.unit", duration.get("unit"))
        w.duration_s = number(file, f"{where}benchmark_duration.avg", duration["avg"]) * factor
    endpoint = cfg.get("endpoint") if isinstance(cfg.get("endpoint"), dict) else {}
    if isinstance(endpoint.get("streaming"), bool):
        w.streaming = endpoint["streaming"]
    models = cfg.get("models") if isinstance(cfg.get("models"), dict) else {}
    items = models.get("items") if isinstance(models.get("items"), list) else []
    names = endpoint.get("model_names") or [m.get("name") for m in items if isinstance(m, dict)]
    if not isinstance(names, list):
        raise InputError(file, f"expected a list of model names, got {names!r}"[:200], "input_config.endpoint.model_names")
    w.model = ", ".join(str(n) for n in names if n)
    # resolved config: `loadgen` up to 0.1.x, `phases` (one per warmup/profiling phase) later
    loadgen = cfg.get("loadgen") if isinstance(cfg.get("loadgen"), dict) else {}
    phases = [p for p in cfg.get("phases", []) if isinstance(p, dict)] if isinstance(cfg.get("phases"), list) else []
    profiling = [p for p in phases if p.get("name") == "profiling"] or phases[-1:]
    source, path = (profiling[0], "input_config.phases[profiling]") if profiling else (loadgen, "input_config.loadgen")
    w.concurrency = number(file, f"{path}.concurrency", source.get("concurrency"))
    key = "rate" if source.get("rate") is not None else "request_rate"  # 0.13 phases say `rate`
    if source.get(key) is not None:
        w.rate = number(file, f"{path}.{key}", source[key])
        kind = source.get("type")
        w.request_rate = f"{w.rate:g} req/s" + (f" ({kind})" if isinstance(kind, str) and kind else "")
    measured = doc.get("effective_concurrency")
    if w.concurrency is None and isinstance(measured, dict) and measured.get("avg") is not None:
        w.concurrency = number(file, f"{where}effective_concurrency.avg", measured["avg"])
        w.concurrency_note = "measured mean"
    return w


def parse_aiperf(doc: dict, file: str) -> list[Run]:
    legacy = isinstance(doc.get("records"), dict)
    blocks = doc["records"] if legacy else doc
    where = "records." if legacy else ""
    cfg = doc.get("input_config") if isinstance(doc.get("input_config"), dict) else {}
    version = doc.get("aiperf_version") or ("<= 0.1.x" if legacy else "?")
    schema = f", schema {doc['schema_version']}" if doc.get("schema_version") else ""
    tool = f"AIPerf {version}{schema}" + (" (records layout)" if legacy else "")
    run = Run(file, tool, _aiperf_workload(blocks, cfg, file, where))
    for tag, block in blocks.items():
        _aiperf_block(run, file, f"{where}{tag}", tag, block)
    if run.get("total_tps", ["avg"]) is None:
        isl, osl = _aiperf_scalar(blocks, file, where, "total_isl"), _aiperf_scalar(blocks, file, where, "total_osl")
        d = run.workload.duration_s
        if isl is not None and osl is not None and d:
            run.put("total_tps", "avg", (isl + osl) / d, "(total_isl + total_osl) / benchmark_duration")
    if run.workload.streaming is None:
        run.workload.streaming = "ttft" in run.metrics
    speeds, source = per_user.aiperf_record_speeds(Path(file))
    per_user.put_speeds(run, speeds, source)
    return [run]


# --- GuideLLM ----------------------------------------------------------------------------------

# GuideLLM metric -> (canonical, factor to base units)
GUIDELLM_KEYS = {
    "time_to_first_token_ms": ("ttft", 1e-3),
    "inter_token_latency_ms": ("tpot", 1e-3),  # per request, excluding the first token (AIPerf's ITL)
    "request_latency": ("e2e", 1.0),
    "output_tokens_per_second": ("output_tps", 1.0),
    "prompt_tokens_per_second": ("input_tps", 1.0),
    "tokens_per_second": ("total_tps", 1.0),
    "requests_per_second": ("request_throughput", 1.0),
}
GUIDELLM_PERCENTILES = ("p01", "p05", "p10", "p25", "p50", "p75", "p90", "p95", "p99")


def _guidellm_summary(bench: dict, name: str, file: str, where: str) -> dict | None:
    metrics = bench.get("metrics") if isinstance(bench.get("metrics"), dict) else {}
    summary = metrics.get(name)
    if summary is None:
        return None
    if not isinstance(summary, dict) or not isinstance(summary.get("successful"), dict):
        raise InputError(file, "expected a distribution with a 'successful' summary", f"{where}.metrics.{name}")
    return summary["successful"]


def _guidellm_run(bench: dict, file: str, where: str, version: str) -> Run:
    def stat(name: str, key: str) -> float | None:
        s = _guidellm_summary(bench, name, file, where)
        if s is None:
            return None
        if key.startswith("p"):
            pct = s.get("percentiles") if isinstance(s.get("percentiles"), dict) else {}
            return number(file, f"{where}.metrics.{name}.successful.percentiles.{key}", pct.get(key))
        return number(file, f"{where}.metrics.{name}.successful.{key}", s.get(key))

    cfg = bench.get("config") if isinstance(bench.get("config"), dict) else {}
    strategy = cfg.get("strategy") if isinstance(cfg.get("strategy"), dict) else {}
    w = Workload(
        input_tokens=stat("prompt_token_count", "mean"),
        output_tokens=stat("output_token_count", "mean"),
        requests=stat("request_latency", "count"),
        streaming=True,  # GuideLLM measures over streamed responses
    )
    kind = strategy.get("type_")
    if kind == "concurrent":
        w.concurrency = number(file, f"{where}.config.strategy.streams", strategy.get("streams"))
    elif kind == "synchronous":
        w.concurrency = 1.0
    else:
        if strategy.get("rate") is not None:
            w.rate = number(file, f"{where}.config.strategy.rate", strategy["rate"])
            w.request_rate = f"{w.rate:g} req/s ({kind})"
        w.concurrency = stat("request_concurrency", "mean")
        w.concurrency_note = "measured mean" if w.concurrency is not None else ""
    duration = bench.get("duration")
    sm = bench.get("scheduler_metrics") if isinstance(bench.get("scheduler_metrics"), dict) else {}
    if duration is None and sm.get("measure_end_time") is not None and sm.get("measure_start_time") is not None:
        end = number(file, f"{where}.scheduler_metrics.measure_end_time", sm["measure_end_time"])
        duration = end - number(file, f"{where}.scheduler_metrics.measure_start_time", sm["measure_start_time"])
    w.duration_s = number(file, f"{where}.duration", duration)
    made = sm.get("requests_made") if isinstance(sm.get("requests_made"), dict) else {}
    if made.get("errored") is not None:
        w.failed = number(file, f"{where}.scheduler_metrics.requests_made.errored", made["errored"])
    backend = cfg.get("backend") if isinstance(cfg.get("backend"), dict) else {}
    w.model = str(backend.get("model") or "")
    run = Run(f"{file}#{where}", f"GuideLLM {version}", w)
    for name, (metric, factor) in GUIDELLM_KEYS.items():
        for key, out in (
            ("mean", "avg"),
            ("median", "p50"),
            *((p, "p1" if p == "p01" else p) for p in GUIDELLM_PERCENTILES),
        ):
            if key == "p50" and out in run.metrics.get(metric, {}):
                continue
            value = stat(name, key)
            if value is not None:
                run.put(metric, out, value * factor)
    # GuideLLM exports no per-user rate: computed from its per-request records, else 1 / median
    # ITL, whose distribution is over token gaps, not requests
    if not per_user.put_speeds(run, per_user.guidellm_request_speeds(bench, file, where), "requests.successful"):
        itl = stat("inter_token_latency_ms", "median")
        if itl:
            caveat = per_user.aggregate_caveat("a median over token gaps")
            run.put("output_tps_per_user", "p50", 1000.0 / itl, "1 / inter_token_latency_ms median", caveat)
    ttft, isl = stat("time_to_first_token_ms", "median"), w.input_tokens
    if ttft and isl:
        run.put("prefill_tps_per_user", "p50", isl / (ttft / 1000.0), "mean prompt tokens / median TTFT")
    return run


def parse_guidellm(doc: dict, file: str) -> list[Run]:
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    version = str(meta.get("guidellm_version") or "?")
    benches = doc["benchmarks"]
    if not benches:
        raise InputError(file, "the report holds no benchmarks", "benchmarks")
    runs = []
    for i, bench in enumerate(benches):
        if not isinstance(bench, dict):
            raise InputError(file, "expected an object", f"benchmarks[{i}]")
        runs.append(_guidellm_run(bench, file, f"benchmarks[{i}]", version))
    return runs


# --- vllm bench serve ----------------------------------------------------------------------

VLLM_METRICS = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2el": "e2e"}


def _vllm_percentiles(doc: dict, file: str, m: str) -> dict[str, float]:
    """{'avg': .., 'p50': .., 'p99': .., 'p99.9': ..} in seconds from the `_ms` keys."""
    out: dict[str, float] = {}
    for key, value in doc.items():
        if not (isinstance(key, str) and key.endswith(f"_{m}_ms")):
            continue
        prefix = key[: -len(f"_{m}_ms")]
        stat = {"mean": "avg", "median": "p50"}.get(prefix, prefix if prefix.startswith("p") else None)
        if stat is None or (stat.startswith("p") and not stat[1:].replace(".", "", 1).isdigit()):
            continue
        v = number(file, key, value)
        if v is not None:
            out[stat] = v / 1000.0
    return out


def _vllm_lists(doc: dict, file: str) -> list[tuple[float, int, int, float]]:
    """(ttft s, input tokens, output tokens, decode s) per successful request, when the raw lists are saved."""
    keys = ("ttfts", "input_lens", "output_lens", "itls")
    if not all(isinstance(doc.get(k), list) for k in keys) or len({len(doc[k]) for k in keys}) != 1:
        return []
    out = []
    for i, (ttft, isl, osl, itls) in enumerate(zip(*(doc[k] for k in keys))):
        if not isinstance(itls, list):
            raise InputError(file, "expected a list of inter-token latencies", f"itls[{i}]")
        decode = sum(number(file, f"itls[{i}]", x) or 0.0 for x in itls)
        t = number(file, f"ttfts[{i}]", ttft)
        if t and t > 0:
            out.append(
                (
                    t,
                    int(number(file, f"input_lens[{i}]", isl) or 0),
                    int(number(file, f"output_lens[{i}]", osl) or 0),
                    decode,
                )
            )
    return out


def parse_vllm_bench(doc: dict, file: str) -> list[Run]:
    n = lambda key: number(file, key, doc.get(key))  # noqa: E731
    completed = n("completed")
    w = Workload(
        requests=completed,
        failed=n("failed"),
        duration_s=n("duration"),
        concurrency=n("max_concurrency"),
        model=str(doc.get("model_id") or ""),
        streaming=True,  # vllm bench serve always streams: TTFT and ITL come from the stream
    )
    if completed:
        if n("total_input_tokens") is not None:
            w.input_tokens = n("total_input_tokens") / completed
        if n("total_output_tokens") is not None:
            w.output_tokens = n("total_output_tokens") / completed
    rate = doc.get("request_rate")
    if rate in ("inf", float("inf")):
        w.request_rate = "unlimited"
    elif rate is not None:
        w.rate = number(file, "request_rate", rate)
        w.request_rate = f"{w.rate:g} req/s"
    if w.concurrency is None and n("max_concurrent_requests") is not None:
        w.concurrency, w.concurrency_note = n("max_concurrent_requests"), "observed peak, no limit set"
    backend = doc.get("endpoint_type") or doc.get("backend") or "?"
    run = Run(file, f"vllm bench serve ({backend})", w)
    run.put("output_tps", "avg", n("output_throughput"))
    run.put("total_tps", "avg", n("total_token_throughput"))
    run.put("request_throughput", "avg", n("request_throughput"))
    run.put("goodput", "avg", n("request_goodput") if "request_goodput" in doc else n("request_goodput:"))
    for m, metric in VLLM_METRICS.items():
        for stat, value in _vllm_percentiles(doc, file, m).items():
            run.put(metric, stat, value)
    per_request = _vllm_lists(doc, file)
    speeds = [(osl - 1) / dec for _, _, osl, dec in per_request if osl > 1 and dec > 0]
    if not per_user.put_speeds(run, speeds, "--save-detailed output_lens and itls"):
        # 1 / median TPOT is the median request's speed (TPOT is per request and 1/x monotone)
        tpot = run.metrics.get("tpot", {})
        if tpot.get("p50") and tpot["p50"].value > 0:
            caveat = per_user.aggregate_caveat("the median request's speed (--save-detailed gives the mean)")
            run.put("output_tps_per_user", "p50", 1.0 / tpot["p50"].value, "1 / p50 TPOT", caveat)
    prefill = [isl / t for t, isl, _, _ in per_request if isl > 0]
    if prefill:
        run.put("prefill_tps_per_user", "avg", sum(prefill) / len(prefill), "mean of input_lens / ttfts per request")
    return [run]


# --- detection ---------------------------------------------------------------------------------

FORMATS = (
    "AIPerf profile_export_aiperf.json (schema 1.x or the records layout), GuideLLM benchmarks.json, "
    "vllm bench serve --save-result JSON"
)


def detect(doc: object) -> str | None:
    if not isinstance(doc, dict):
        return None
    if isinstance(doc.get("records"), dict) or "schema_version" in doc or "aiperf_version" in doc:
        return "aiperf"
    if isinstance(doc.get("benchmarks"), list):
        return "guidellm"
    if "request_throughput" in doc and ("completed" in doc or "mean_ttft_ms" in doc):
        return "vllm"
    return None


PARSERS = {"aiperf": parse_aiperf, "guidellm": parse_guidellm, "vllm": parse_vllm_bench}


def load_runs(path: Path) -> list[Run]:
    file = str(path)
    try:
        raw = read_regular(path, MAX_BYTES + 1, "export", "a benchmark export is a regular JSON file")
        if len(raw) > MAX_BYTES:
            raise Unreadable(f"larger than {MAX_BYTES // (1024 * 1024)} MiB; not a benchmark export")
        doc = load_json(raw, MAX_CONTAINERS, MAX_VALUES, MAX_STRINGS)
    except Unreadable as exc:
        raise InputError(file, exc.message) from None
    del raw  # the bytes are not needed while the runs are built
    kind = detect(doc)
    if kind is None:
        raise InputError(file, f"not a benchmark export genobs knows; expected one of: {FORMATS}")
    if kind == "guidellm" and len(doc["benchmarks"]) > MAX_RUNS:
        raise InputError(file, f"holds {len(doc['benchmarks'])} benchmarks; at most {MAX_RUNS} are judged", "benchmarks")
    runs = PARSERS[kind](doc, file)
    for run in runs:
        run.family = kind
    return finish(runs)

"""The one per-user output speed genobs judges, whichever tool wrote the export.

Per request: output tokens after the first over the decode time (first to last token), i.e.
1 / that request's TPOT; the run's figure is the mean over its successful requests (`avg`,
what the gates compare), with the median and percentiles over requests beside it. This is
AIPerf's `output_token_throughput_per_user`. The parsers in genobs.gates.formats hand this
module per-request speeds where the export has them; where it has only an aggregate, the
nearest figure is kept with a caveat that it is not this statistic."""

from __future__ import annotations

import json
from pathlib import Path

from genobs.gates.runs import MAX_BYTES, InputError, Run, number, time_factor

METRIC = "output_tps_per_user"
DEFINITION = "mean over requests of (output tokens - 1) / decode time"
PERCENTILES = (1, 5, 10, 25, 50, 75, 90, 95, 99)
# AIPerf writes its per-request records beside the summary under this name by default
AIPERF_RECORDS = "profile_export.jsonl"


def _percentile(ordered: list[float], p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default, which AIPerf uses)."""
    pos = (len(ordered) - 1) * p / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def put_speeds(run: Run, speeds: list[float], source: str) -> bool:
    """Store the mean and percentiles of per-request speeds (tok/s/user); False when there are none."""
    if not speeds:
        return False
    ordered = sorted(speeds)
    n = len(ordered)
    run.put(METRIC, "avg", sum(ordered) / n, f"mean over {n} requests of (output tokens - 1) / decode time ({source})")
    for p in PERCENTILES:
        run.put(
            METRIC,
            f"p{p}",
            _percentile(ordered, p),
            f"p{p} over {n} requests of (output tokens - 1) / decode time ({source})",
        )
    return True


def aggregate_caveat(figure: str) -> str:
    return f"not the mean over requests other exports give: {figure}; the export has no per-request data"


def _record_speed(file: str, where: str, metrics: dict) -> float | None:
    """(output tokens - 1) / decode time of one AIPerf record; None when it did not decode."""

    def value(tag: str) -> tuple[float | None, object]:
        block = metrics.get(tag)
        if not isinstance(block, dict):
            return None, None
        return number(file, f"{where}.metrics.{tag}.value", block.get("value")), block.get("unit")

    osl, _ = value("output_sequence_length")
    decode, unit = value("decode_duration")
    if osl is not None and decode is not None:
        seconds = decode * time_factor(file, f"{where}.metrics.decode_duration.unit", unit)
        return (osl - 1) / seconds if osl > 1 and seconds > 0 else None
    itl, unit = value("inter_token_latency")  # records without decode_duration: AIPerf's ITL is decode / (OSL - 1)
    if itl is not None:
        seconds = itl * time_factor(file, f"{where}.metrics.inter_token_latency.unit", unit)
        return 1.0 / seconds if seconds > 0 else None
    return None


def aiperf_record_speeds(summary: Path) -> tuple[list[float], str]:
    """Per-request speeds from the `profile_export.jsonl` beside an AIPerf summary, profiling
    phase only, failed and cancelled requests left out; ([], "") when there is no such file."""
    path = summary.parent / AIPERF_RECORDS
    if not path.is_file():
        return [], ""
    file = str(path)
    if path.stat().st_size > MAX_BYTES:
        raise InputError(file, f"larger than {MAX_BYTES // (1024 * 1024)} MiB; not an AIPerf record export")
    speeds: list[float] = []
    try:
        lines = path.open(encoding="utf-8")
    except OSError as exc:
        raise InputError(file, f"cannot read: {exc.strerror or exc}") from None
    with lines:
        for n, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except (ValueError, RecursionError):
                raise InputError(file, "not valid JSON", f"line {n}") from None
            if not isinstance(record, dict) or not isinstance(record.get("metrics"), dict):
                raise InputError(file, "expected a record with 'metrics'", f"line {n}")
            meta = record.get("metadata") if isinstance(record.get("metadata"), dict) else {}
            if (
                record.get("error")
                or meta.get("was_cancelled")
                or meta.get("benchmark_phase", "profiling") != "profiling"
            ):
                continue
            speed = _record_speed(file, f"line {n}", record["metrics"])
            if speed is not None:
                speeds.append(speed)
    return speeds, path.name


def guidellm_request_speeds(bench: dict, file: str, where: str) -> list[float]:
    """1 / inter_token_latency_ms of each successful request: GuideLLM's per-request ITL is
    (last token - first token) / (output tokens - 1), the decode time per token."""
    requests = bench.get("requests") if isinstance(bench.get("requests"), dict) else {}
    ok = requests.get("successful")
    if not isinstance(ok, list):
        return []
    speeds = []
    for i, req in enumerate(ok):
        if not isinstance(req, dict):
            raise InputError(file, "expected an object", f"{where}.requests.successful[{i}]")
        itl = number(
            file, f"{where}.requests.successful[{i}].inter_token_latency_ms", req.get("inter_token_latency_ms")
        )
        if itl is not None and itl > 0:
            speeds.append(1000.0 / itl)
    return speeds

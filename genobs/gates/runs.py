"""One benchmark run normalised across tools: every metric in one base unit
(seconds, tok/s, tok/s/user, req/s), the workload it was measured on, and what was
derived rather than exported. Parsers live in genobs.gates.formats."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

# canonical metric -> (unit shown, kind); kind picks the unit conversion and the formatting
METRICS: dict[str, tuple[str, str]] = {
    "ttft": ("s", "time"),
    "tpot": ("s", "time"),  # per request: (latency - TTFT) / (output tokens - 1)
    "itl": ("s", "time"),  # per gap between two streamed chunks
    "e2e": ("s", "time"),
    "output_tps": ("tok/s", "rate"),
    "input_tps": ("tok/s", "rate"),
    "total_tps": ("tok/s", "rate"),
    "request_throughput": ("req/s", "rate"),
    "goodput": ("req/s", "rate"),
    "output_tps_per_user": ("tok/s/user", "rate"),
    "prefill_tps_per_user": ("tok/s/user", "rate"),
    "e2e_output_tps_per_user": ("tok/s/user", "rate"),
}

TITLES = {
    "ttft": "TTFT",
    "tpot": "TPOT",
    "itl": "ITL",
    "e2e": "E2E latency",
    "output_tps": "output tok/s (system)",
    "input_tps": "input tok/s (system)",
    "total_tps": "total tok/s (system)",
    "request_throughput": "request throughput",
    "goodput": "goodput",
    "output_tps_per_user": "output tok/s/user",
    "prefill_tps_per_user": "prefill tok/s/user",
    "e2e_output_tps_per_user": "e2e output tok/s/user",
}

# unit strings benchmark tools write -> factor to seconds
TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "sec": 1.0, "seconds": 1.0}

MAX_BYTES = 256 * 1024 * 1024  # vllm bench keeps generated texts; a bigger file is not a benchmark export
# what json.loads may build from one export: a detailed vllm run holds one itls list per request
# and one float per token; these keep a 256 MiB export's memory a small multiple of its size
MAX_CONTAINERS = 1_000_000
MAX_VALUES = 16_000_000
MAX_STRINGS = 4_000_000  # keys included (json.loads shares repeated keys, so they cost little)
MAX_RUNS = 256  # runs across every input of one command: a sweep is a handful


class InputError(Exception):
    """An export genobs cannot read: names the file and the field."""

    def __init__(self, file: str, message: str, where: str = ""):
        super().__init__(f"{file}{':' + where if where else ''}: error: {message}")
        self.file, self.where, self.message = file, where, message


@dataclass(frozen=True)
class Stat:
    value: float
    derived: str = ""  # how genobs computed it; empty when the tool exported it
    caveat: str = ""  # why it is not the statistic genobs defines (e.g. a median where the gate means a mean)


@dataclass
class Workload:
    input_tokens: float | None = None  # mean per request
    output_tokens: float | None = None
    concurrency: float | None = None
    concurrency_note: str = ""  # e.g. "measured mean" when no limit was configured
    request_rate: str | None = None  # configured arrival rate, when the run used one
    rate: float | None = None  # the same in req/s, None for an unlimited rate
    duration_s: float | None = None
    requests: float | None = None
    failed: float | None = None
    streaming: bool | None = None
    model: str = ""


@dataclass
class Run:
    path: str  # file, plus #benchmarks[i] when one file holds several runs
    tool: str
    workload: Workload
    metrics: dict[str, dict[str, Stat]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    family: str = ""  # the export format (aiperf, guidellm, vllm): picks the tool's names for genobs' terms

    def put(self, metric: str, stat: str, value: float | None, derived: str = "", caveat: str = "") -> None:
        if value is None or metric not in METRICS:
            return
        self.metrics.setdefault(metric, {})[stat] = Stat(float(value), derived, caveat)

    def get(self, metric: str, stats: tuple[str, ...] | list[str]) -> tuple[str, Stat] | None:
        have = self.metrics.get(metric, {})
        for s in stats:
            if s in have:
                return s, have[s]
        return None


def concurrency_text(w: Workload) -> str:
    """A configured limit as written, a measured mean rounded: 4, or 4.2 (measured mean)."""
    if w.concurrency is None:
        return ""
    if not w.concurrency_note:
        return f"{w.concurrency:g}"
    return f"{w.concurrency:.1f} ({w.concurrency_note})"


def number(file: str, where: str, value: object) -> float | None:
    """A finite number, None for null/absent; anything else is an InputError naming the field."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(file, f"expected a number, got {value!r}"[:200], where)
    if isinstance(value, int) and abs(value) > 1e300:
        raise InputError(file, "expected a measured figure, got an integer out of range", where)
    if not math.isfinite(value):
        raise InputError(file, f"expected a finite number, got {value!r}", where)
    return float(value)


def time_factor(file: str, where: str, unit: object) -> float:
    if not isinstance(unit, str) or unit.strip().lower() not in TIME_UNITS:
        known = ", ".join(sorted(set(TIME_UNITS) - {"µs"}))
        raise InputError(file, f"expected a time unit ({known}), got {unit!r}"[:200], where)
    return TIME_UNITS[unit.strip().lower()]


def derive_common(run: Run) -> None:
    """Fill what every tool leaves out the same way, labelled as derived: input tok/s from
    total - output (the sources' rule), total from input + output when only those exist."""
    out = run.get("output_tps", ["avg"])
    total = run.get("total_tps", ["avg"])
    inp = run.get("input_tps", ["avg"])
    if inp is None and out and total:
        run.put("input_tps", "avg", total[1].value - out[1].value, "total - output tok/s")
    elif total is None and out and inp:
        run.put("total_tps", "avg", inp[1].value + out[1].value, "input + output tok/s")


def _physical(run: Run) -> None:
    """Refuse figures no run can measure: a negative time, rate or count, an infinite
    speed, a run of no requests, no concurrency or no duration."""
    for metric, stats in run.metrics.items():
        for name, st in stats.items():
            if not math.isfinite(st.value) or st.value < 0:
                how = f" ({st.derived})" if st.derived else ""
                raise InputError(
                    run.path, f"{TITLES[metric]} {name} is {st.value!r}{how}; it cannot be negative or infinite", metric
                )
    w = run.workload
    rules = (  # (name, value, zero allowed, why)
        ("requests", w.requests, bool(w.failed), "a run of no requests measured nothing"),
        ("concurrency", w.concurrency, False, "concurrency is at least 1 request in flight"),
        ("duration", w.duration_s, False, "a run lasts a positive time"),
        ("input tokens", w.input_tokens, True, ""),
        ("output tokens", w.output_tokens, True, ""),
        ("failed requests", w.failed, True, ""),
    )
    for name, value, zero_ok, why in rules:
        if value is None:
            continue
        if value < 0 or (value == 0 and not zero_ok):
            raise InputError(run.path, f"{name} is {value:g}; {why or 'it cannot be negative'}", f"workload.{name}")


def finish(runs: list[Run]) -> list[Run]:
    """Derived figures filled in, then every run checked for physically impossible values."""
    for run in runs:
        derive_common(run)
        _physical(run)
    return runs

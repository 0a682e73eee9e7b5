"""Fuzz what `genobs backtest` reads from a Prometheus: N mutated /series answers (read and
sized as the pull plans it: series_stats' checks, folding, window_seconds), N mutated range
answers of the raw pull (checked by promhttp, folded and written as OpenMetrics, as
pull.write_answer does) and N mutated query_range answers of an alert (its state machine
stepped through them). The answers start from real shapes (vLLM series, long labels,
millisecond and integer times, NaN and ±Inf values) and are changed as fuzz_gates changes
its answers, plus the hostile values a server may send: lone surrogates, control and
bidi characters, 100 KB label values, NaN and infinite times, huge numbers. A case passes
when it is read or fails with the command's own error (exit 2); any other exception fails
the run. The text of every 250th case that wrote samples goes through the real `promtool
tsdb create-blocks-from openmetrics`, which must accept it. Prints cases/s and peak RSS."""

from __future__ import annotations

import argparse
import json
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.fuzz_gates import edit, mutate  # noqa: E402
from genobs.backtest.alerts import AlertTimeline  # noqa: E402
from genobs.backtest.blocks import BacktestError, series_text  # noqa: E402
from genobs.backtest.labels import Folding, named_labels  # noqa: E402
from genobs.backtest.pull import stats_of, window_seconds, write_answer  # noqa: E402
from genobs.backtest.rules import Rule  # noqa: E402
from genobs.promhttp import PrometheusError, answer  # noqa: E402

BASE = "http://127.0.0.1:9"
T = 1_700_000_000
LONG = "a" * 100_000
HOSTILE = ["\ud800", "\udc80x", "\x1b[2K\r", "\u202e", "a\nb", 'q"uo\\te', LONG, "", " ", "é", "\U0001f600", "0" * 40]
NUMBERS = [T, T + 0.05, -1, 0, 1e308, float("nan"), float("inf"), 2**70, 1e-320, True, None, "1"]
VALUES = ["1", "NaN", "+Inf", "-Inf", "1e308", "1e999", "-0", "0x10", "1_000", "", "fast", " 2 ", "nan"]
NAMED = named_labels(["sum by (namespace, job, model_name, instance) (rate(vllm:x{model_name=~'a'}[5m]))"])
METRIC = {"__name__": "vllm:num_requests_running", "namespace": "llm-prod", "job": "vllm-chat", "instance": "10.0.0.1:8000"}
SERIES = [
    METRIC,
    {**METRIC, "model_name": "gpt-oss-120b", "pod": "vllm-0", "annotation": "x" * 2000},
    {**METRIC, "__name__": "up", "engine": "0"},
]
RANGE = {
    "status": "success",
    "data": {
        "resultType": "matrix",
        "result": [
            {"metric": SERIES[0], "values": [[T - 30, "1"], [T - 15, "2"], [T, "3"]]},
            {"metric": SERIES[1], "values": [[T - 29.95, "NaN"], [T - 14.5, "+Inf"], [T, "0.25"]]},
            {"metric": SERIES[2], "values": [[T - 60, "1"], [T, "-Inf"]]},
        ],
    },
}
LISTING = {"status": "success", "data": SERIES}
ALERT = Rule("g", 30.0, "A", "x > 0", (("severity", "warning"),), True, 60.0, 30.0)


def hostile(rng: random.Random, doc: object) -> object:
    """`doc` with one label value, label name, time or value replaced by a hostile one."""
    text = json.dumps(doc)
    data = json.loads(text)
    series = [s for s in (data.get("data") or {}).get("result", []) if isinstance(s, dict)] if isinstance(data.get("data"), dict) else data.get("data")
    if not isinstance(series, list) or not series:
        return data
    s = rng.choice(series)
    metric = s.get("metric", s) if isinstance(s, dict) else None
    if not isinstance(metric, dict):
        return data
    kind = rng.choice(["value", "name", "time", "sample"])
    if kind == "value" or not isinstance(s.get("values"), list) or not s["values"]:
        metric[rng.choice(list(metric) or ["x"])] = rng.choice(HOSTILE)
    elif kind == "name":
        metric[rng.choice(HOSTILE[:6] + ["__name__", "le", "9x", "genobs_folded"])] = "v"
    elif kind == "time":
        rng.choice(s["values"])[0] = rng.choice(NUMBERS)
    else:
        rng.choice(s["values"])[1] = rng.choice(VALUES)
    return data


def raw_of(rng: random.Random, doc: dict) -> bytes:
    roll = rng.random()
    if roll < 0.45:
        data = hostile(rng, doc)
        return json.dumps(data, allow_nan=True).encode("utf-8", "surrogatepass")
    if roll < 0.8:
        return json.dumps(mutate(rng, doc), allow_nan=True).encode("utf-8", "surrogatepass")
    return edit(rng, json.dumps(doc).encode())


class TextSink:
    """What the pull would write, kept in memory; the BlockWriter's write_series, minus promtool."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def write_series(self, key: str, samples: list, a: float, b: float) -> int:
        text, n = series_text(key, samples, a, b)
        text.encode("utf-8")  # what the file write does
        self.parts.append(text)
        return n


def series_case(rng: random.Random, state: dict) -> str:
    raw = raw_of(rng, LISTING)
    try:
        data = answer(BASE, "series", 200, raw)
        stats = stats_of(data, Folding(NAMED), BASE)
        window_seconds([stats], 15.0)
    except (PrometheusError, BacktestError) as exc:
        assert str(exc), "an empty error"
        return "error"
    return "ok"


def range_case(rng: random.Random, state: dict) -> str:
    raw = raw_of(rng, RANGE)
    sink = TextSink()
    try:
        data = answer(BASE, "query", 200, raw, expect="matrix")
        written = write_answer(data["result"], T - 60.0, float(T), Folding(NAMED), sink, set(), set(), 10)  # type: ignore[arg-type, index]
    except (PrometheusError, BacktestError) as exc:
        assert str(exc), "an empty error"
        return "error"
    if written:
        state["checked"] = state.get("checked", 0) + 1
        if state["checked"] % 250 == 1:
            promtool_accepts("".join(sink.parts), state["folder"])
    return "ok"


def promtool_accepts(text: str, folder: Path) -> None:
    om, tsdb = folder / "case.om", folder / "case-tsdb"
    om.write_text(text + "# EOF\n", encoding="utf-8")
    done = subprocess.run(
        ["promtool", "tsdb", "create-blocks-from", "openmetrics", "-q", str(om), str(tsdb)], capture_output=True, text=True
    )
    shutil.rmtree(tsdb, ignore_errors=True)
    assert done.returncode == 0, f"promtool refused the text genobs wrote: {done.stderr.strip()[-300:]}\n{text[:500]}"


def alerts_case(rng: random.Random, state: dict) -> str:
    doc = {
        "status": "success",
        "data": {
            "resultType": "matrix",
            "result": [{"metric": SERIES[i], "values": [[T + 30 * k, "1"] for k in range(i, 6)]} for i in range(3)],
        },
    }
    raw = raw_of(rng, doc)
    try:
        data = answer(BASE, "query_range", 200, raw)
    except PrometheusError as exc:
        assert str(exc), "an empty error"
        return "error"
    timeline = AlertTimeline(ALERT)
    timeline.answer(data["result"], float(T), float(T + 150), Folding(NAMED))  # type: ignore[index]
    timeline.close()
    for e in timeline.episodes:
        json.dumps(dict(e.labels), ensure_ascii=False).encode("utf-8", "surrogatepass")
    return "ok"


TARGETS: dict[str, Callable[[random.Random, dict], str]] = {
    "series": series_case,
    "range": range_case,
    "alerts": alerts_case,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cases", type=int, default=10_000, help="cases per target")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--target", choices=sorted(TARGETS), action="append", help="default: every target")
    args = parser.parse_args()
    failed = False
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.target or list(TARGETS):
            rng = random.Random(args.seed)
            state: dict = {"folder": Path(tmp)}
            counts, failures, start = {"ok": 0, "error": 0}, 0, time.perf_counter()
            for i in range(args.cases):
                try:
                    counts[TARGETS[name](rng, state)] += 1
                except Exception:  # anything but the command's own error is a defect
                    failures += 1
                    if failures <= 5:
                        print(f"--- {name} case {i}", file=sys.stderr)
                        traceback.print_exc()
            wall = time.perf_counter() - start
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            checked = f", {(state.get('checked', 0) + 249) // 250} texts accepted by promtool" if name == "range" else ""
            print(
                f"{name}: {args.cases} cases in {wall:.0f} s ({args.cases / wall:.0f} cases/s): {counts['ok']} read, "
                f"{counts['error']} clean errors (exit 2), {failures} other outcomes{checked}; peak RSS {peak:.0f} MiB"
            )
            failed = failed or failures > 0
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()

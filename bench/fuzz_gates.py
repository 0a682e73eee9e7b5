"""Fuzz the release gates' inputs: N mutated benchmark exports (the fixtures with
dropped, renamed and retyped keys, random numbers, edited bytes) read and judged as
`genobs benchmark` does, and N mutated Prometheus answers read as `compare` and
`doctor` read them. Every case must either be judged or fail with the command's own
input error (exit 2); any other exception, or output that is not strict JSON, fails
the run. Prints cases/s and peak memory. Deterministic for a given --seed."""

from __future__ import annotations

import argparse
import copy
import json
import random
import resource
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.fuzz_specs import value  # noqa: E402
from genobs.gates.bench_report import render_json, render_text  # noqa: E402
from genobs.gates.formats import load_runs  # noqa: E402
from genobs.gates.kpis import evaluate  # noqa: E402
from genobs.gates.promtable import scalar  # noqa: E402
from genobs.gates.runs import InputError  # noqa: E402
from genobs.gates.thresholds import load_gates  # noqa: E402
from genobs.promhttp import PrometheusError, answer  # noqa: E402
from tests.test_fuzz import paths  # noqa: E402

EXPORTS = sorted((REPO / "tests" / "fixtures" / "benchmarks").glob("*.json"))
DOCS = [json.loads(p.read_bytes()) for p in EXPORTS]
GATES = [load_gates(REPO / "specs" / f"{name}.yaml") for name in ("chat", "rag", "batch", "capacity")]
NUMBERS = [0, -1, 1, 1e-320, -0.0, 1e308, 10**25, 2**63, 0.5, 3]
ANSWERS = [
    {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {"__name__": "a"}, "value": [1, "2"]}]}},
    {"status": "success", "data": {"resultType": "vector", "result": [{"metric": {}, "value": [1.5, "NaN"]}]}},
    {"status": "success", "data": ["vllm:num_requests_running", "up"]},
]


def mutate(rng: random.Random, data: object) -> object:
    data = copy.deepcopy(data)
    for _ in range(rng.randint(1, 4)):
        candidates = [p for p in paths(data) if p]
        if not candidates:
            break
        path = rng.choice(candidates)
        parent = data
        for p in path[:-1]:
            parent = parent[p]
        key, op = path[-1], rng.choice(["drop", "retype", "number", "add", "rename"])
        if op == "drop":
            del parent[key]
        elif op == "retype":
            parent[key] = value(rng)
        elif op == "number":
            parent[key] = rng.choice(NUMBERS) * rng.choice([1, -1])
        elif isinstance(parent, dict):
            parent[str(value(rng)) if op == "rename" else rng.choice(list(parent) or ["x"]) + "x"] = (
                parent.pop(key) if op == "rename" else value(rng)
            )
        else:
            parent.append(value(rng))
    return data


def edit(rng: random.Random, raw: bytes) -> bytes:
    for _ in range(rng.randint(1, 3)):
        pos = rng.randrange(len(raw) + 1)
        piece = bytes(rng.choice(b'{}[]",:0123456789-eE.nulltrue\\\x00\xff') for _ in range(rng.randrange(1, 6)))
        raw = raw[:pos] + piece + raw[pos + rng.randrange(3) :]
    return raw


def export_case(rng: random.Random, folder: Path) -> str:
    doc = rng.choice(DOCS)
    raw = json.dumps(mutate(rng, doc), allow_nan=True).encode() if rng.random() < 0.7 else edit(rng, json.dumps(doc).encode())
    path = folder / "export.json"
    path.write_bytes(raw)
    try:
        runs = load_runs(path)
    except InputError as exc:
        assert str(exc).startswith(str(path)), f"an input error that does not name the file: {exc}"
        return "error"
    report = evaluate(rng.choice(GATES), runs, runs[:1] if rng.random() < 0.3 else [])
    render_text(report, rng.choice(["text", "md"]))
    json.loads(render_json(report), parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
    return "ok"


def answer_case(rng: random.Random, folder: Path) -> str:
    doc = rng.choice(ANSWERS)
    path = "query" if isinstance(doc["data"], dict) else "label/__name__/values"
    raw = json.dumps(mutate(rng, doc)).encode() if rng.random() < 0.7 else edit(rng, json.dumps(doc).encode())
    try:
        data = answer("http://127.0.0.1:9", path, 200, raw)
    except PrometheusError as exc:
        assert str(exc), "an empty error"
        return "error"
    if path == "query":
        scalar(data["result"])
    return "ok"


TARGETS: dict[str, Callable[[random.Random, Path], str]] = {"exports": export_case, "answers": answer_case}


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
            counts, failures, start = {"ok": 0, "error": 0}, 0, time.perf_counter()
            for i in range(args.cases):
                state = rng.getstate()
                try:
                    counts[TARGETS[name](rng, Path(tmp))] += 1
                except Exception:  # anything but the command's own input error is a defect
                    failures += 1
                    if failures <= 5:
                        print(f"--- {name} case {i} (seed state {hash(state)})", file=sys.stderr)
                        traceback.print_exc()
            wall = time.perf_counter() - start
            peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(
                f"{name}: {args.cases} cases in {wall:.0f} s ({args.cases / wall:.0f} cases/s): {counts['ok']} judged, "
                f"{counts['error']} clean input errors (exit 2), {failures} other outcomes; peak RSS {peak:.0f} MiB"
            )
            failed = failed or failures > 0
    if failed:
        raise SystemExit(1)


if __name__ == "__main__":
    main()

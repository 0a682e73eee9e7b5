"""Fuzz the spec pipeline: N mutated example specs (dropped, renamed and retyped keys,
random scalars) and N randomly edited spec texts, each loaded and planned in-process as
`genobs build` does. Every case must either plan or fail with a SpecError whose problems
name the file and a line (what the CLI prints with exit code 2); anything else (an
exception, a problem without a location) is reported with its input and fails the run.
Prints cases/s. Deterministic for a given --seed."""

from __future__ import annotations

import argparse
import copy
import random
import sys
import time
import traceback
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from genobs.compiler import build_plan  # noqa: E402
from genobs.errors import SpecError  # noqa: E402
from genobs.loader import load_spec_text  # noqa: E402
from tests.test_fuzz import INTERESTING, paths  # noqa: E402

FILE = "fuzz.yaml"
SPECS = sorted((REPO / "specs").glob("*.yaml"))
TEXTS = [p.read_text() for p in SPECS]
DATA = [yaml.safe_load(t) for t in TEXTS]
PIECES = list(":{}[]-&*!|>'\"#%@?,\t\n ab01.~\\\x00\ufeffé")


def scalar(rng: random.Random) -> object:
    kind = rng.randrange(7)
    if kind == 0:
        return None
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return rng.randint(-(10**6), 10**6)
    if kind == 3:
        return rng.choice([0.0, -1.5, 1e308, float("inf"), float("nan"), 0.33, 99.9])
    if kind == 4:
        return "".join(rng.choice(PIECES + list("xyz05")) for _ in range(rng.randrange(12)))
    return rng.choice(INTERESTING)


def value(rng: random.Random, depth: int = 0) -> object:
    if depth < 2 and rng.random() < 0.3:
        if rng.random() < 0.5:
            return [value(rng, depth + 1) for _ in range(rng.randrange(3))]
        return {rng.choice(INTERESTING[:30]): value(rng, depth + 1) for _ in range(rng.randrange(3))}
    return scalar(rng)


def mutated(rng: random.Random) -> str:
    data = copy.deepcopy(rng.choice(DATA))
    for _ in range(rng.randint(1, 3)):
        candidates = [p for p in paths(data) if p]
        if not candidates:
            break
        path = rng.choice(candidates)
        parent = data
        for p in path[:-1]:
            parent = parent[p]
        key, op = path[-1], rng.choice(["drop", "rename", "retype", "add"])
        if op == "drop":
            del parent[key]
        elif op == "rename" and isinstance(parent, dict):
            parent[rng.choice(INTERESTING)] = parent.pop(key)
        elif op == "retype":
            parent[key] = value(rng)
        elif isinstance(parent, dict):
            parent[rng.choice(INTERESTING)] = value(rng)
        else:
            parent.append(value(rng))
    return yaml.safe_dump(data, allow_unicode=True, sort_keys=False)


def edited(rng: random.Random) -> str:
    text = rng.choice(TEXTS)
    for _ in range(rng.randint(1, 4)):
        pos = rng.randrange(len(text) + 1)
        piece = "".join(rng.choice(PIECES) for _ in range(rng.randrange(1, 8)))
        kind = rng.randrange(3)
        if kind == 0:
            text = text[:pos] + piece + text[pos:]
        elif kind == 1:
            text = text[:pos] + text[pos + len(piece) + 1 :]
        else:
            lines = text.split("\n")
            lines[rng.randrange(len(lines))] = piece
            text = "\n".join(lines)
    return text


def outcome(text: str) -> str:
    """'ok', 'error' (a clean SpecError, exit 2) or raises AssertionError / anything else."""
    try:
        build_plan(load_spec_text(text, FILE))
    except SpecError as exc:
        assert exc.problems, "a SpecError without problems"
        for p in exc.problems:
            assert p.file == FILE and p.message and p.line is not None, f"problem without a location: {p}"
        return "error"
    return "ok"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cases", type=int, default=10_000, help="cases in all (half mutated data, half edited text)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    counts = {"ok": 0, "error": 0}
    failures = 0
    start = time.perf_counter()
    for i in range(args.cases):
        text = mutated(rng) if i % 2 == 0 else edited(rng)
        try:
            counts[outcome(text)] += 1
        except Exception:  # anything but a clean spec error is a defect
            failures += 1
            if failures <= 5:
                print(f"--- case {i}: input\n{text}\n--- traceback", file=sys.stderr)
                traceback.print_exc()
        if (i + 1) % 1000 == 0:
            wall = time.perf_counter() - start
            print(f"{i + 1} cases, {wall:.0f} s: {counts}, {failures} other outcomes", file=sys.stderr, flush=True)
    wall = time.perf_counter() - start
    print(
        f"{args.cases} cases in {wall:.0f} s ({args.cases / wall:.1f} cases/s): {counts['ok']} planned, "
        f"{counts['error']} clean spec errors (exit 2), {failures} other outcomes"
    )
    if failures:
        raise SystemExit(1)


if __name__ == "__main__":
    main()

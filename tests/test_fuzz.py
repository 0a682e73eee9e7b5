"""Property tests: mutated example specs (dropped, renamed and retyped keys, random
scalars, random YAML text) never crash genobs. Each either builds or fails with a
SpecError whose problems all name the file, a line and a message.

Bounded for CI (derandomized, a few hundred examples); GENOBS_FUZZ_EXAMPLES=5000
runs a longer, randomised search."""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from genobs.build import render_spec
from genobs.compiler import build_plan
from genobs.errors import SpecError
from genobs.loader import load_spec_text
from tests.conftest import REPO, SPECS

FILE = "fuzz.yaml"
TEXTS = [p.read_text() for p in SPECS]
DATA = [yaml.safe_load(t) for t in TEXTS]
LONG = int(os.environ.get("GENOBS_FUZZ_EXAMPLES", "0"))


def bounded(n: int):
    return settings(
        max_examples=LONG or n,
        deadline=None,
        derandomize=not LONG,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )


INTERESTING = [
    "",
    " ",
    "0",
    "-1",
    "1s",
    "500ms",
    "1 sec",
    "10m",
    "1h30m",
    "0s",
    "1000y",
    "30d",
    "5%",
    "150%",
    "99.999%",
    "0.33",
    "0.11.0",
    "0.5.0",
    "9.9.9",
    "latest",
    "vllm",
    "chat",
    "batch",
    "colon",
    "underscore",
    "model_name",
    "engine",
    "le",
    "quantile",
    "instance",
    "__name__",
    "{{ $value }}",
    'a"b',
    "a\\b",
    "a\nb",
    "}",
    "|",
    "<script>",
    "# heading",
    "javascript:x",
    "https://x.example/r",
    "x" * 300,
    "ttft",
    "success",
    "abort",
]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**6), max_value=10**6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12),
    st.sampled_from(INTERESTING),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.sampled_from(INTERESTING[:30]), inner, max_size=3)
    ),
    max_leaves=6,
)
keys = st.one_of(st.sampled_from(INTERESTING), st.text(min_size=1, max_size=10))


def paths(node: object, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += paths(v, (*prefix, i))
    return out


def parent_of(data: object, path: tuple):
    node = data
    for p in path[:-1]:
        node = node[p]
    return node


def mutate(data: dict, draw) -> dict:
    data = copy.deepcopy(data)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        candidates = [p for p in paths(data) if p]
        if not candidates:
            break
        path = draw(st.sampled_from(candidates))
        parent = parent_of(data, path)
        op = draw(st.sampled_from(["drop", "rename", "retype", "add"]))
        key = path[-1]
        if op == "drop":
            del parent[key]
        elif op == "rename" and isinstance(parent, dict):
            parent[draw(keys)] = parent.pop(key)
        elif op == "retype":
            parent[key] = draw(values)
        elif isinstance(parent, dict):
            parent[draw(keys)] = draw(values)
        else:
            parent.append(draw(values))
    return data


def outcome(text: str):
    """The plan, or None after a well-formed SpecError; anything else fails the test."""
    try:
        return build_plan(load_spec_text(text, FILE))
    except SpecError as exc:
        assert exc.problems
        for p in exc.problems:
            assert p.file == FILE and p.message and p.line is not None, str(p)
            assert str(p).startswith(f"{FILE}:{p.line}:")
        return None


@bounded(150)
@given(st.data())
def test_mutated_specs_build_or_fail_cleanly(data):
    original = DATA[data.draw(st.integers(min_value=0, max_value=len(DATA) - 1))]
    mutated = mutate(original, data.draw)
    outcome(yaml.safe_dump(mutated, allow_unicode=True, sort_keys=False))


edits = st.tuples(
    st.sampled_from(["insert", "delete", "replace_line"]),
    st.floats(min_value=0, max_value=1),
    st.text(alphabet=st.sampled_from(list(":{}[]-&*!|>'\"#%@?,\t\n ab01.~\\\x00\ufeffé")), max_size=8),
)


@bounded(150)
@given(st.integers(min_value=0, max_value=len(TEXTS) - 1), st.lists(edits, min_size=1, max_size=4))
def test_random_yaml_text_builds_or_fails_cleanly(index: int, changes):
    text = TEXTS[index]
    for kind, where, piece in changes:
        pos = int(where * len(text))
        if kind == "insert":
            text = text[:pos] + piece + text[pos:]
        elif kind == "delete":
            text = text[:pos] + text[pos + len(piece) + 1 :]
        else:
            lines = text.split("\n")
            lines[int(where * (len(lines) - 1))] = piece
            text = "\n".join(lines)
    outcome(text)


safe_text = st.text(alphabet=st.sampled_from(list("abcXYZ019._-:/@+ ")), min_size=1, max_size=30).filter(
    lambda s: s == s.strip(" ")
)


@bounded(25)
@given(
    st.integers(min_value=0, max_value=len(DATA) - 1),
    safe_text,
    safe_text,
    st.lists(safe_text, max_size=3),
    st.sampled_from(["0.7.0", "0.8.3", "0.9.2", "0.11.0", "0.11.1", "0.12.0", "0.33"]),
    st.sampled_from(["chat", "rag", "agentic", "batch", "voice", "capacity"]),
    st.booleans(),
)
def test_valid_variations_render_every_file(index, team, title, models, version, use_case, kubernetes):
    """Whatever the spec accepts, every renderer copes with (rules, dashboard, runbook, manifests)."""
    spec = copy.deepcopy(DATA[index])
    spec["team"] = team
    spec.setdefault("dashboard", {})["title"] = title
    spec["service"]["models"] = models
    spec["service"]["engine_version"] = version
    spec["use_case"] = use_case
    spec["kubernetes"] = {"enabled": kubernetes}
    text = yaml.safe_dump(spec, sort_keys=False)
    if outcome(text) is None:
        return  # e.g. a feature the version cannot support: a clean SpecError
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.yaml"
        path.write_text(text)
        out = render_spec(path)
    assert out.files["RUNBOOK.md"] and any(rel.startswith("grafana/") for rel in out.files)
    alerts = yaml.safe_load(out.files["prometheus/alerts.rules.yaml"])["groups"][0]["rules"]
    assert all(a["labels"].get("team") == team for a in alerts)


def test_gate_inputs_fuzzer_finds_no_crash_in_a_short_run():
    """`make fuzz` runs 10,000 cases per target; a short run here keeps the fuzzer itself working."""
    r = subprocess.run(
        [sys.executable, "bench/fuzz_gates.py", "--cases", "300", "--seed", "11"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert "exports: 300 cases" in r.stdout and "answers: 300 cases" in r.stdout
    assert r.stdout.count(" 0 other outcomes") == 2


def test_backtest_answers_fuzzer_finds_no_crash_in_a_short_run():
    """`make fuzz` runs 10,000 mutated /series, range and query_range answers per target; a
    short run here keeps the fuzzer working (and its promtool oracle: the text it wrote is
    backfilled)."""
    r = subprocess.run(
        [sys.executable, "bench/fuzz_backtest.py", "--cases", "600", "--seed", "5"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    assert all(f"{t}: 600 cases" in r.stdout for t in ("series", "range", "alerts")), r.stdout
    assert r.stdout.count(" 0 other outcomes") == 3 and "texts accepted by promtool" in r.stdout

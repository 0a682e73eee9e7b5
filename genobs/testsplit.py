"""Part of the `check` stage: each generated promtool test group run on its own, with only
the rules its assertions read.

promtool evaluates every rule of every listed rule file at every step of a test group, so
its cost is rules x steps, whatever the group asserts; a group about one alert pays for all
~200 rules. The result of an alert or a recorded series depends only on the rules it reads,
transitively (no generated rule reads ALERTS), so a group evaluated over that closure gives
exactly the verdict of the whole files, at about half the total cost for the example specs.
The committed tests keep listing the whole rule files: `promtool test rules` on out/ runs
them as they are. This runs only on the build's private copy of the output."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from genobs.promql import metric_names
from genobs.units import prom_duration_seconds
from genobs.writer import FAST_SAFE_LOADER, dump_yaml

SPLIT = ".split"  # beside prometheus/ in the private copy: one folder per test group
_NOT_YAML_TEXT = re.compile("[\x7f-\x9f\u2028\u2029\ufeff]")


@dataclass(frozen=True)
class Part:
    """One test group's file in the private copy, and an estimate of what promtool spends on it:
    it evaluates every listed rule at every evaluation step up to the group's last eval_time,
    over every input series (relative units, to start the longest runs first)."""

    path: Path
    cost: float


def _load(path: Path, cache: dict[Path, object]):
    """The document in a file, read once per `cache` (see split_parts)."""
    path = path.resolve()
    if path not in cache:
        cache[path] = yaml.load(path.read_bytes(), Loader=FAST_SAFE_LOADER)  # noqa: S506
    return cache[path]


def _rule_groups(folder: Path, files: list[str], cache: dict[Path, object]) -> dict[str, list[dict]]:
    """Each rule file's groups; promtool resolves rule_files from the test file's folder."""
    return {f: _load(folder / f, cache)["groups"] for f in files}  # type: ignore[index]


def _write(path: Path, data: object, spec_name: str) -> None:
    """The private copy is read by promtool only: JSON is YAML, and json's C encoder writes it
    about 30 times faster than PyYAML's representer. Data JSON cannot hold as YAML reads it
    (NaN, infinities, non-string keys, dates: json.dumps raises or would turn a key into a string) goes through the YAML emitter."""
    try:
        text = json.dumps(data, ensure_ascii=False, allow_nan=False)
        if not _string_keys(data):
            raise TypeError("a key is not a string")
        # outside JSON's escapes but not plain text to YAML: DEL and C1 controls, the BOM, and the
        # line breaks NEL, LS, PS (YAML folds them in a quoted string); they can only be in strings
        encoded = _NOT_YAML_TEXT.sub(lambda m: f"\\u{ord(m.group()):04x}", text).encode("utf-8")
    except (TypeError, ValueError):
        path.write_bytes(dump_yaml(data, spec_name))
        return
    path.write_bytes(encoded)


def _string_keys(data: object) -> bool:
    """json.dumps writes an int, float, bool or None key as a string; YAML would read it back as
    that other type."""
    todo = [data]
    while todo:
        node = todo.pop()
        if isinstance(node, dict):
            if not all(isinstance(k, str) for k in node):
                return False
            todo.extend(v for v in node.values() if isinstance(v, (dict, list)))
        elif isinstance(node, list):
            todo.extend(v for v in node if isinstance(v, (dict, list)))
    return True


def _cost(case: dict, rules: int, step: float) -> float:
    """promtool evaluates every rule at every step up to the group's last eval_time; measured on
    the example specs, about 0.3 ms per rule and step plus 10 ms per group (units: 0.3 ms)."""
    times = [t.get("eval_time", "0s") for t in case.get("alert_rule_test", []) + case.get("promql_expr_test", [])]
    try:
        last = max((prom_duration_seconds(str(t)) for t in times), default=0.0)
        steps = min(last / step, 1e9) + 1 if step > 0 else 1
    except ValueError:
        steps = 1
    return rules * steps + 30


CHUNK = 2000.0  # about the cost of one promtool run (~0.6 s)


def chunks(parts: list[Part]) -> list[list[Part]]:
    """The test groups of one output in as many promtool runs as they make CHUNKs (every run
    starts a process and parses its rule files; promtool takes several test files), of about
    equal cost (longest group first into the cheapest run), so the last output's tests do not
    leave a core idle while one long run finishes. Each run keeps the groups' order."""
    n = max(1, min(len(parts), round(sum(p.cost for p in parts) / CHUNK)))
    runs: list[list[int]] = [[] for _ in range(n)]
    load = [0.0] * n
    for i in sorted(range(len(parts)), key=lambda i: -parts[i].cost):
        k = load.index(min(load))
        runs[k].append(i)
        load[k] += parts[i].cost
    return [[parts[i] for i in sorted(run)] for run in runs if run]


def _closure(exprs: list[str], recorded: dict[str, list[str]]) -> set[str]:
    """Recorded series the expressions read, following recording rules to their inputs."""
    need: set[str] = set()
    todo = list(exprs)
    while todo:
        for name in metric_names(todo.pop()):
            if name in recorded and name not in need:
                need.add(name)
                todo.extend(recorded[name])
    return need


def split_parts(
    prometheus: Path, test: Path, spec_name: str, cache: dict[Path, object] | None = None
) -> list[Part] | None:
    """One folder per test group of `test` (relative to `prometheus`), each holding that group
    and the rule files cut down to what it reads; the test files to run (absolute; promtool
    reads a test's rule_files from the test file's folder), each with its estimated promtool
    cost. None when the test cannot be split safely (a rule reads ALERTS, or a file is not what
    genobs writes). `cache` (resolved path -> document) shares the parsed rule files between
    the test files of one output; the build fills it beforehand with the documents it has just
    written to those paths, which tests/test_testsplit.py checks read back as the same data."""
    cache = {} if cache is None else cache
    doc = _load(prometheus / test, cache)
    files = doc.get("rule_files") or []
    if not all(isinstance(f, str) and f.startswith("../") and "/" not in f[3:] for f in files):
        return None
    groups = _rule_groups((prometheus / test).parent, files, cache)
    recorded: dict[str, list[str]] = {}
    alerts: dict[str, list[str]] = {}
    for rules in groups.values():
        for group in rules:
            for r in group["rules"]:
                expr = str(r["expr"])
                try:
                    if "ALERTS" in metric_names(expr):
                        return None  # the closure would miss the alerting rules this one reads
                except ValueError:
                    return None  # promtool on the whole files reports the expression, file and rule
                if "record" in r:
                    recorded.setdefault(r["record"], []).append(expr)
                else:
                    alerts.setdefault(r["alert"], []).append(expr)
    try:
        step = prom_duration_seconds(str(doc.get("evaluation_interval", "1m")))
    except ValueError:
        step = 60.0
    out: list[Part] = []
    for i, case in enumerate(doc["tests"]):
        names = {t["alertname"] for t in case.get("alert_rule_test", [])}
        exprs = [e for n in sorted(names) for e in alerts.get(n, [])]
        exprs += [t["expr"] for t in case.get("promql_expr_test", [])]
        try:
            need = _closure(exprs, recorded)
        except ValueError:  # an expression of the test itself does not parse: promtool says where
            return None
        folder = prometheus.parent / SPLIT / f"{test.stem}-{i}" / "prometheus"
        (folder / "tests").mkdir(parents=True, exist_ok=True)
        kept_groups: list[str] = []
        count = 0
        for f, rules in groups.items():
            cut = []
            for group in rules:
                kept = [r for r in group["rules"] if r.get("record") in need or r.get("alert") in names]
                if kept:
                    cut.append({**group, "rules": kept})
                    kept_groups.append(group["name"])
                    count += len(kept)
            _write(folder / f[3:], {"groups": cut}, spec_name)
        one = {**doc, "tests": [case]}
        if "group_eval_order" in doc:
            one["group_eval_order"] = [g for g in doc["group_eval_order"] if g in kept_groups]
        name = Path("tests") / test.name
        _write(folder / name, one, spec_name)
        out.append(Part(folder / name, _cost(case, count, step)))
    return out

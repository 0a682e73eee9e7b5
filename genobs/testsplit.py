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

from pathlib import Path

import yaml

from genobs.promql import metric_names
from genobs.writer import FAST_SAFE_LOADER, dump_yaml

SPLIT = ".split"  # beside prometheus/ in the private copy: one folder per test group


def _load(path: Path):
    return yaml.load(path.read_bytes(), Loader=FAST_SAFE_LOADER)  # noqa: S506


def _rule_groups(folder: Path, files: list[str]) -> dict[str, list[dict]]:
    """Each rule file's groups; promtool resolves rule_files from the test file's folder."""
    return {f: _load(folder / f)["groups"] for f in files}


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


def split_tests(prometheus: Path, test: Path, spec_name: str) -> list[Path] | None:
    """One folder per test group of `test` (relative to `prometheus`), each holding that group
    and the rule files cut down to what it reads; the test files to run, each relative to its
    own folder's prometheus/ (as promtool is run: cwd = <folder>/prometheus). None when the
    test cannot be split safely (a rule reads ALERTS, or a file is not what genobs writes)."""
    doc = _load(prometheus / test)
    files = doc.get("rule_files") or []
    if not all(isinstance(f, str) and f.startswith("../") and "/" not in f[3:] for f in files):
        return None
    groups = _rule_groups((prometheus / test).parent, files)
    recorded: dict[str, list[str]] = {}
    alerts: dict[str, list[str]] = {}
    for rules in groups.values():
        for group in rules:
            for r in group["rules"]:
                expr = str(r["expr"])
                if "ALERTS" in metric_names(expr):
                    return None  # the closure would miss the alerting rules this one reads
                if "record" in r:
                    recorded.setdefault(r["record"], []).append(expr)
                else:
                    alerts.setdefault(r["alert"], []).append(expr)
    out: list[Path] = []
    for i, case in enumerate(doc["tests"]):
        names = {t["alertname"] for t in case.get("alert_rule_test", [])}
        exprs = [e for n in sorted(names) for e in alerts.get(n, [])]
        exprs += [t["expr"] for t in case.get("promql_expr_test", [])]
        need = _closure(exprs, recorded)
        folder = prometheus.parent / SPLIT / f"{test.stem}-{i}" / "prometheus"
        (folder / "tests").mkdir(parents=True, exist_ok=True)
        kept_groups: list[str] = []
        for f, rules in groups.items():
            cut = []
            for group in rules:
                kept = [r for r in group["rules"] if r.get("record") in need or r.get("alert") in names]
                if kept:
                    cut.append({**group, "rules": kept})
                    kept_groups.append(group["name"])
            (folder / f[3:]).write_bytes(dump_yaml({"groups": cut}, spec_name))
        one = {**doc, "tests": [case]}
        if "group_eval_order" in doc:
            one["group_eval_order"] = [g for g in doc["group_eval_order"] if g in kept_groups]
        name = Path("tests") / test.name
        (folder / name).write_bytes(dump_yaml(one, spec_name))
        out.append(folder / name)
    return out

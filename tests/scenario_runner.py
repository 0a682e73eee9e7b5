"""Run one production scenario (tests/scenarios/*.yaml) against the rules genobs builds.

A scenario names a spec, a fleet (tests/fleet_series.py) and what must fire at given
times: `page:` (severity critical), `warn:` (warning), `info:`; every other alert of the
spec must be silent. The check is a promtool unit test whose promql_expr_test asserts
that `count by (alertname, severity, instance, <labels the expectations name>)
(ALERTS{alertstate="firing"})` equals exactly the expected set, run with the real
`promtool test rules` on the rule files genobs wrote.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from fleet_series import Fleet, seconds

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = REPO / "tests" / "scenarios"
LEVELS = {"page": "critical", "warn": "warning", "info": "info"}


class ScenarioError(Exception):
    """The scenario file itself is wrong (not the rules under test)."""


@dataclass(frozen=True)
class Expected:
    alert: str
    severity: str
    labels: tuple[tuple[str, str], ...]
    count: int


@dataclass(frozen=True)
class Check:
    at: int
    expected: tuple[Expected, ...]
    silent: tuple[str, ...]


def load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    if not isinstance(data, dict) or "spec" not in data or "description" not in data:
        raise ScenarioError(f"{path.name}: a scenario needs `description`, `spec`, `fleet` and checks")
    return data


def deep_merge(base: Any, patch: Any) -> Any:
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for k, v in patch.items():
            out[k] = deep_merge(base.get(k), v) if v is not None else None
        return {k: v for k, v in out.items() if v is not None}
    return patch


def spec_of(scenario: dict, name: str) -> dict:
    spec = scenario["spec"]
    if isinstance(spec, str):
        path = REPO / "specs" / f"{spec}.yaml"
        if not path.is_file():
            raise ScenarioError(f"{name}: spec {spec!r}: no specs/{spec}.yaml")
        spec = yaml.safe_load(path.read_text())
    return deep_merge(spec, scenario.get("spec_patch") or {})


def checks_of(scenario: dict, name: str) -> list[Check]:
    raw = scenario.get("checks")
    if raw is None:
        raw = [{k: scenario[k] for k in ("at", "page", "warn", "info", "silent") if k in scenario}]
    checks = []
    for c in raw:
        if "at" not in c:
            raise ScenarioError(f"{name}: every check needs `at:` (e.g. 60m)")
        expected = []
        for level, severity in LEVELS.items():
            for entry in c.get(level) or []:
                if isinstance(entry, str):
                    entry = {"alert": entry}
                labels = tuple(sorted((str(k), str(v)) for k, v in (entry.get("labels") or {}).items()))
                expected.append(Expected(entry["alert"], severity, labels, int(entry.get("count", 1))))
        checks.append(Check(seconds(c["at"]), tuple(expected), tuple(c.get("silent") or [])))
    return checks


_BUILT: dict[str, dict[str, bytes]] = {}


def build(spec: dict, tmp: Path) -> Path:
    """Build the spec with genobs (in memory, like `genobs build`) and write it under tmp/out.
    Scenarios on the same spec share one build."""
    from genobs.build import render_spec

    text = yaml.safe_dump(spec, sort_keys=False)
    src = tmp / "spec.yaml"
    src.write_text(text)
    if text not in _BUILT:
        _BUILT[text] = render_spec(src).files
    root = tmp / "out"
    for rel, data in _BUILT[text].items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
    return root / "prometheus"


def rule_groups(prom: Path) -> tuple[list[Path], list[str], dict[str, set[str]], str]:
    order = ("recording", "alerts", "slo")  # recorded series before the alerts that read them
    files = sorted(
        prom.glob("*.rules.yaml"), key=lambda p: (order.index(p.stem[:-6]) if p.stem[:-6] in order else 9, p.name)
    )
    groups: list[str] = []
    alerts: dict[str, set[str]] = {}
    exprs = []
    for f in files:
        for g in yaml.safe_load(f.read_text())["groups"]:
            groups.append(g["name"])
            for r in g["rules"]:
                exprs.append(r["expr"])
                if "alert" in r:
                    alerts.setdefault(r["alert"], set()).add(r.get("labels", {}).get("severity", ""))
    return files, groups, alerts, "\n".join(exprs)


def raw_names(exprs: str) -> set[str]:
    return set(
        re.findall(
            r"\b(?:vllm[:_]|sglang[:_]|trtllm_|inference_model_|inference_objective_|inference_pool_|llm_d_router_epp_|llm_d_epp_|gen_ai_client_)[a-z0-9_:]+",
            exprs,
        )
    )


def query(labels: list[str]) -> str:
    by = ", ".join(["alertname", "severity", *labels])
    return f'count by ({by}) (ALERTS{{alertstate="firing"}})'


def sample_labels(e: Expected) -> str:
    pairs = [("alertname", e.alert), ("severity", e.severity), *e.labels]
    return "{" + ", ".join(f'{k}="{v}"' for k, v in pairs) + "}"


def run(path: Path, tmp: Path, promtool: str) -> None:
    """Raise AssertionError (with what fired and what was expected) unless the scenario holds."""
    name = path.stem
    scenario = load(path)
    spec = spec_of(scenario, name)
    checks = checks_of(scenario, name)
    fleet = Fleet(scenario.get("fleet") or {}, spec)
    prom = build(spec, tmp)
    files, groups, alerts, exprs = rule_groups(prom)

    problems = []
    for c in checks:
        if c.at > fleet.duration:
            raise ScenarioError(f"{name}: check at {c.at}s is after the fleet's history ({fleet.duration}s)")
        for e in c.expected:
            if e.severity not in alerts.get(e.alert, set()):
                have = sorted(alerts.get(e.alert, set())) or "no such alert"
                problems.append(f"expects {e.alert} with severity {e.severity}; the spec's rules have: {have}")
        for s in c.silent:
            if s not in alerts:
                problems.append(f"names {s} as silent but the spec's rules have no such alert")
    series = fleet.series()
    exported = Fleet.metric_names(series)
    missing = sorted(n for n in raw_names(exprs) if n not in exported and fleet.wire(n) not in exported)
    if missing:
        problems.append(
            f"the rules read {', '.join(missing)}, which this fleet ({fleet.engine} {'.'.join(map(str, fleet.version))}) "
            "does not export: either the rules use a name the version lacks or the fleet misses a family"
        )
    if problems:
        raise AssertionError(f"scenario {name}:\n  " + "\n  ".join(problems))

    tests = []
    for c in checks:
        extra = sorted({k for e in c.expected for k, _ in e.labels} - {"instance"})
        tests.append(
            {
                "expr": query(["instance", *extra]),
                "eval_time": f"{c.at}s",
                "exp_samples": [{"labels": sample_labels(e), "value": e.count} for e in c.expected],
            }
        )
    # Rules are evaluated every minute (promtool evaluates every group at the test's
    # interval): half the work of 30s, and no scenario checks within a minute of a change.
    interval = scenario.get("evaluation_interval", "1m")
    proc = promtool_expr_tests(promtool, files, groups, series, tests, tmp / f"{name}.test.yaml", name, interval)
    if proc.returncode != 0:
        raise AssertionError(
            f"scenario {name} ({scenario['description'].strip()}):\n" + explain(proc.stdout + proc.stderr)
        )


def promtool_expr_tests(
    promtool: str,
    files: list[Path],
    groups: list[str],
    series: list[dict],
    tests: list[dict],
    path: Path,
    name: str | None = None,
    interval: str = "1m",
) -> subprocess.CompletedProcess:
    """Write one promtool test file (expression tests over `series`, the rules of `files`
    evaluated in `groups` order) to `path` and run it."""
    group: dict[str, Any] = {"name": name} if name else {}
    group |= {"interval": "30s", "input_series": series, "promql_expr_test": tests}
    test = {"rule_files": [str(f) for f in files], "evaluation_interval": interval, "group_eval_order": groups}
    test["tests"] = [group]
    path.write_text(json.dumps(test, indent=0))  # YAML is a superset of JSON, and json is fast
    # promtool spends a third of its CPU in Go's garbage collector on these inputs; a lazier
    # GC (GOGC=400, ~200 MB peak) cuts that while keeping memory bounded.
    env = {**os.environ, "GOGC": "400"}
    return subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=300, env=env)


SAMPLE = re.compile(r"(\{[^}]*\}) (\S+?)(?:,|$)")


def explain(output: str) -> str:
    """promtool's FAILED block as: at <time>: unexpected firing ..., missing ..."""
    lines = []
    blocks = re.findall(r"time: (\S+?),\s*\n\s*exp: (.*)\n\s*got: (.*)", output)
    if not blocks:
        return output.strip()
    for when, exp, got in blocks:
        e = {k: v for k, v in SAMPLE.findall(exp)} if exp.strip() != "nil" else {}
        g = {k: v for k, v in SAMPLE.findall(got)} if got.strip() != "nil" else {}
        unexpected = [f"{k} x{float(v):g}" for k, v in g.items() if k not in e]
        missing = [f"{k}" for k in e if k not in g]
        wrong = [f"{k}: expected x{float(e[k]):g}, got x{float(g[k]):g}" for k in e if k in g and e[k] != g[k]]
        lines.append(f"at {when}:")
        lines += [f"  fired unexpectedly: {u}" for u in unexpected]
        lines += [f"  expected but not firing: {m}" for m in missing]
        lines += [f"  wrong number of series: {w}" for w in wrong]
    return "\n".join(lines)


def promtool_path() -> str | None:
    return shutil.which("promtool")

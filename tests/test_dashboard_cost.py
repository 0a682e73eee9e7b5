"""A dashboard load reads about the same whatever the fleet size: outside collapsed rows no
panel reads a series per replica or per target, unless it picks one replica ($instance).

Grafana runs a collapsed row's queries only when someone opens it; at 500 pods the per-replica
and per-target panels read more samples than every other panel together."""

from __future__ import annotations

import json
from pathlib import Path

import promql_parser
import pytest

from genobs.build import render_spec
from genobs.compiler import load_plan
from genobs.plan.model import RecordingRule
from genobs.render.dashboard import flat_panels

REPO = Path(__file__).resolve().parents[1]
SPECS = sorted((REPO / "specs").glob("*.yaml"))
PER_TARGET = {"instance", "pod"}


def _keeps_target(node, rules: dict[str, list[str]]) -> bool:
    """Whether the series of an expression keep a per-target label (recorded series are
    followed into their rules; exported series are per target)."""
    kind = type(node).__name__
    if kind == "AggregateExpr":
        mod = node.modifier
        if str(node.op) in ("topk", "bottomk", "limitk") or (mod is not None and "without" in str(mod).lower()):
            return _keeps_target(node.expr, rules)
        return mod is not None and bool(PER_TARGET & set(mod.labels))
    if kind == "BinaryExpr":
        op = str(node.op).lower()
        if op.endswith("or"):
            return _keeps_target(node.lhs, rules) or _keeps_target(node.rhs, rules)
        card = str(getattr(node.modifier, "card", "")) if node.modifier is not None else ""
        side = node.rhs if "OneToMany" in card else node.lhs
        if type(side).__name__ == "NumberLiteral":
            side = node.rhs if side is node.lhs else node.lhs
        return _keeps_target(side, rules)
    if kind in ("ParenExpr", "UnaryExpr", "SubqueryExpr"):
        return _keeps_target(node.expr, rules)
    if kind == "Call":
        return any(_keeps_target(a, rules) for a in node.args)
    if kind == "MatrixSelector":
        return _keeps_target(node.vector_selector, rules)
    if kind == "VectorSelector":
        if node.name not in rules:
            return True  # an exported series: one per target
        return any(_keeps_target(promql_parser.parse(e), rules) for e in rules[node.name])
    return False  # number and string literals


def _selectors(node):
    kind = type(node).__name__
    if kind == "VectorSelector":
        yield node
    for attr in ("expr", "lhs", "rhs", "vector_selector"):
        child = getattr(node, attr, None)
        if child is not None and not isinstance(child, str | int | float):
            yield from _selectors(child)
    for arg in getattr(node, "args", None) or ():
        yield from _selectors(arg)


def _open_panels(board: dict) -> list[dict]:
    """The panels a dashboard load queries (a collapsed row's panels are not among them)."""
    return [p for p in board["panels"] if p.get("type") != "row"]


@pytest.mark.parametrize("spec", SPECS, ids=[p.stem for p in SPECS])
def test_open_rows_read_no_series_per_replica_or_target(spec: Path):
    _, plan = load_plan(spec)
    rules: dict[str, list[str]] = {}
    for group in plan.groups:
        for r in group.rules:
            if isinstance(r, RecordingRule):
                rules.setdefault(r.record, []).append(r.expr)
    board = json.loads(next(v for k, v in render_spec(spec).files.items() if k.startswith("grafana/")))
    variables = {v["name"] for v in board["templating"]["list"]}
    checked = 0
    for panel in _open_panels(board):
        for target in panel.get("targets", []):
            expr = target["expr"]
            for name in variables:
                expr = expr.replace(f"${name}", "x")
            for sel in _selectors(promql_parser.parse(expr)):
                picked = any(m.name in PER_TARGET and m.value == "x" for m in sel.matchers.matchers)
                checked += 1
                assert picked or not _keeps_target(sel, rules), (panel["title"], target["expr"])
    assert checked > 20
    # the per-replica and per-target panels are still there, in collapsed rows
    collapsed = [p for p in board["panels"] if p.get("collapsed")]
    assert {p["title"] for p in collapsed} >= {"API-server process"}
    assert all(p["panels"] for p in collapsed)
    hidden = [c["title"] for p in collapsed for c in p["panels"]]
    # (on an engine without process_* series, marked "(not observable on <engine> <version>)")
    assert any(t.startswith("API-server resident memory") for t in hidden)
    assert len(flat_panels(board)) == len(board["panels"]) + len(hidden)


def test_the_check_sees_per_replica_series():
    """The analysis itself: a panel reading a per-replica recorded series would be caught."""
    rules = {
        "genobs:replica_x:sum": ["sum by (model_name, instance) (vllm:num_requests_waiting)"],
        "genobs:x:sum": ["sum by (model_name) (vllm:num_requests_waiting)"],
        "genobs:ratio:x": ["genobs:x:sum / on (model_name) group_left () genobs:replica_x:sum"],
    }
    keeps = lambda e: _keeps_target(promql_parser.parse(e), rules)  # noqa: E731
    assert keeps("genobs:replica_x:sum")
    assert keeps("max(genobs:replica_x:sum) or genobs:replica_x:sum")
    assert keeps("vllm:num_requests_waiting")
    assert not keeps("genobs:x:sum")
    assert not keeps("genobs:ratio:x")
    assert not keeps("max by (model_name) (genobs:replica_x:sum)")
    assert keeps("topk(3, genobs:replica_x:sum)")

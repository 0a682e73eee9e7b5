"""The pipeline's modules form no import cycle: load → plan → testgen → render, each stage
reading only the ones before it (genobs.compiler runs plan and testgen in turn). Imports
inside functions and under TYPE_CHECKING count: a lazy import is still a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted((REPO / "genobs").rglob("*.py")):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _edges(mods: dict[str, Path]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                edges[mod].update(a.name for a in node.names if a.name in mods)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*parts, base] if base else parts)
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    if full in mods:
                        edges[mod].add(full)
                    elif base in mods:
                        edges[mod].add(base)
        edges[mod].discard(mod)
    return edges


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycles():
    assert _cycles(_edges(_modules())) == []


def test_the_cycle_finder_finds_cycles():
    # the check itself can fail: a lazy import of the tests' generator by a plan module it reads
    edges = _edges(_modules())
    assert "genobs.plan.context" in edges["genobs.testgen.unittests"]
    edges["genobs.plan.context"].add("genobs.testgen.unittests")
    (cycle,) = _cycles(edges)
    assert {"genobs.plan.context", "genobs.testgen.unittests"} <= set(cycle)


def test_plan_does_not_import_testgen():
    edges = _edges(_modules())
    plan = [m for m in edges if m == "genobs.plan" or m.startswith("genobs.plan.")]
    assert {(m, d) for m in plan for d in edges[m] if d.startswith("genobs.testgen")} == set()

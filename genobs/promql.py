"""PromQL construction: the only place expressions are assembled from parts, and
the parse check every expression passes before it is written."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import NamedTuple

Matcher = tuple[str, str, str]  # (label, op, value)


def quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def regex_escape(value: str) -> str:
    out = []
    for ch in value:
        out.append("\\" + ch if ch in r".^$*+?()[]{}|\\" else ch)
    return "".join(out)


def any_of(values: Iterable[str]) -> str:
    return "|".join(regex_escape(v) for v in values)


def selector(metric: str, matchers: Sequence[Matcher] = ()) -> str:
    if not matchers:
        return metric
    inner = ",".join(f"{name}{op}{quote(value)}" for name, op, value in matchers)
    return f"{metric}{{{inner}}}"


def by(labels: Sequence[str]) -> str:
    return f"by ({', '.join(labels)})"


def on(labels: Sequence[str]) -> str:
    return f"on ({', '.join(labels)})"


def rate(sel: str, window: str) -> str:
    return f"rate({sel}[{window}])"


def sum_by(labels: Sequence[str], expr: str) -> str:
    return f"sum {by(labels)} ({expr})"


def max_by(labels: Sequence[str], expr: str) -> str:
    return f"max {by(labels)} ({expr})"


def quantile(q: float, labels: Sequence[str], bucket_rate: str) -> str:
    return f"histogram_quantile({q:g}, sum {by(['le', *labels])} ({bucket_rate}))"


def ratio(numerator: str, denominator: str) -> str:
    """numerator / denominator, with no result (never NaN or Inf) when the denominator is 0."""
    return f"({numerator}) / (({denominator}) > 0)"


def le_matcher(bound: float) -> Matcher:
    """Matches a bucket boundary as Prometheus 2.x ('1') and 3.x ('1.0') write it."""
    text = f"{bound:g}" if "e" not in f"{bound:g}" else repr(bound)
    if "." in text:
        return ("le", "=~", regex_escape(text) + "0*")
    return ("le", "=~", f"{text}(\\.0+)?")


def parse(expr: str):  # noqa: ANN201 (promql_parser's node types)
    """promql_parser's tree of an expression; raises ValueError if it does not parse. Not
    cached: trees are large (a build's thousand expressions would keep 16 MiB); the cached
    readers (vector_selectors, metric_names, equal_selectors) keep plain tuples."""
    import promql_parser

    try:
        return promql_parser.parse(expr)
    except Exception as exc:  # the parser raises its own error types
        raise ValueError(f"invalid PromQL {expr!r}: {exc}") from None


class Selector(NamedTuple):
    """A vector selector: its metric name (None for `{__name__=~...}`) and its matchers."""

    name: str | None
    matchers: tuple[tuple[str, str, str], ...]  # (label, op, value), op one of = != =~ !~


@functools.lru_cache(maxsize=8192)
def vector_selectors(expr: str) -> tuple[Selector, ...]:
    """Every vector selector of an expression, in the order promql_parser.walk visits them,
    parsed once per process: the planners and the test generator read the same rule
    expressions again and again."""
    import promql_parser

    op = promql_parser.MatchOp
    found: list[Selector] = []

    def text(m: object) -> str:  # MatchOp is not hashable
        o = m.op  # type: ignore[attr-defined]
        return "=" if o == op.Equal else "!=" if o == op.NotEqual else "=~" if o == op.Re else "!~"

    for node in _selector_nodes(parse(expr)):
        found.append(Selector(node.name, tuple((m.name, text(m), m.value) for m in node.matchers.matchers)))
    return tuple(found)


def _selector_nodes(tree) -> list:  # noqa: ANN001 (promql_parser's node types)
    """The VectorSelector nodes of a tree, depth first, left to right. promql_parser.walk calls
    back into Python for every node and costs about 8 µs a node (a third of planning a spec
    the first time); reading the children here costs a sixth of that. A node type this does not
    know (a newer parser's) goes to walk."""
    import promql_parser as p

    out: list = []
    todo = [tree]
    while todo:
        node = todo.pop()
        t = type(node)
        if t is p.VectorSelector:
            out.append(node)
        elif t is p.BinaryExpr:
            todo += (node.rhs, node.lhs)
        elif t is p.AggregateExpr:
            todo += (node.expr,) if node.param is None else (node.expr, node.param)
        elif t is p.Call:
            todo += reversed(node.args)
        elif t is p.MatrixSelector:
            out.append(node.vector_selector)
        elif t is p.ParenExpr or t is p.SubqueryExpr or t is p.UnaryExpr:
            todo.append(node.expr)
        elif t is not p.NumberLiteral and t is not p.StringLiteral:
            out += _walked(node)
    return out


def _walked(tree) -> list:  # noqa: ANN001
    import promql_parser as p

    found: list = []

    def visit(node: object) -> bool:
        if isinstance(node, p.VectorSelector):
            found.append(node)
        return True

    p.walk(tree, visit)
    return found


@functools.lru_cache(maxsize=8192)
def metric_names(expr: str) -> frozenset[str]:
    """Names of every series an expression selects; raises ValueError if it does not parse."""
    return frozenset(sel.name for sel in vector_selectors(expr) if sel.name)


@functools.lru_cache(maxsize=8192)
def equal_selectors(expr: str) -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
    """(name, equality matchers) of every selector of an expression: following recording rules
    to their inputs asks for the same rule expressions hundreds of times."""
    return tuple(
        (sel.name, tuple((label, value) for label, op, value in sel.matchers if op == "="))  # type: ignore[misc]
        for sel in vector_selectors(expr)
    )

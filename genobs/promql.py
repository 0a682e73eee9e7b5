"""PromQL construction: the only place expressions are assembled from parts, and
the parse check every expression passes before it is written."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence

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


@functools.lru_cache(maxsize=8192)
def parse(expr: str):  # noqa: ANN201 (promql_parser's node types)
    """promql_parser's tree of an expression, parsed once per process: the planners and the
    test generator read the same rule expressions again and again. Raises ValueError if it
    does not parse. The tree is shared: read it, never change it."""
    import promql_parser

    try:
        return promql_parser.parse(expr)
    except Exception as exc:  # the parser raises its own error types
        raise ValueError(f"invalid PromQL {expr!r}: {exc}") from None


@functools.lru_cache(maxsize=8192)
def vector_selectors(expr: str) -> tuple:
    """Every vector selector of an expression (promql_parser nodes, shared as parse's tree)."""
    import promql_parser

    found: list = []

    def visit(node: object) -> bool:
        if isinstance(node, promql_parser.VectorSelector):
            found.append(node)
        return True

    promql_parser.walk(parse(expr), visit)
    return tuple(found)


@functools.lru_cache(maxsize=8192)
def metric_names(expr: str) -> frozenset[str]:
    """Names of every series an expression selects; raises ValueError if it does not parse."""
    return frozenset(sel.name for sel in vector_selectors(expr) if sel.name)


@functools.lru_cache(maxsize=8192)
def equal_selectors(expr: str) -> tuple[tuple[str, tuple[tuple[str, str], ...]], ...]:
    """(name, equality matchers) of every selector of an expression: following recording rules
    to their inputs asks for the same rule expressions hundreds of times."""
    import promql_parser

    eq = promql_parser.MatchOp.Equal
    return tuple(
        (sel.name, tuple((m.name, m.value) for m in sel.matchers.matchers if m.op == eq))
        for sel in vector_selectors(expr)
    )

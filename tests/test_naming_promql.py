"""Table-driven tests of the two pure modules every renderer relies on."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from genobs import naming
from genobs import promql as q
from genobs.writer import FAST_SAFE_LOADER

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (lambda: naming.record("ttft_seconds", "quantile_rate5m"), "genobs:ttft_seconds:quantile_rate5m"),
        (lambda: naming.rate_op("rate", "5m"), "rate5m"),
        (lambda: naming.rate_op("ratio", "1m"), "ratio_rate1m"),
        (lambda: naming.group("chat", "slo"), "genobs-chat-slo"),
        (lambda: naming.rule_file("chat", "genobs-chat-recording"), "recording.rules.yaml"),
        (lambda: naming.anchor("VllmTtftP99High"), "vllmttftp99high"),
        (lambda: naming.anchor("SLO first-token: fast burn"), "slo-first-token-fast-burn"),
        (lambda: naming.runbook_url("RUNBOOK.md", "VllmTtftP99High"), "RUNBOOK.md#vllmttftp99high"),
        (lambda: naming.dashboard_uid("chat"), "genobs-chat"),
        (lambda: len(naming.dashboard_uid("x" * 60)), 40),
        (lambda: naming.slo_alert("first-token", "fast"), "SloFirstTokenErrorBudgetBurnFast"),
        (lambda: naming.slo_alert("availability", "slow"), "SloAvailabilityErrorBudgetBurnSlow"),
    ],
)
def test_naming(call, expected):
    assert call() == expected


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (lambda: q.quote('a"b\\c\nd'), '"a\\"b\\\\c\\nd"'),
        (lambda: q.regex_escape("gpt-4.1(mini)"), "gpt-4\\.1\\(mini\\)"),
        (lambda: q.any_of(["a.b", "c"]), "a\\.b|c"),
        (lambda: q.selector("m"), "m"),
        (lambda: q.selector("m", [("a", "=", "x"), ("b", "=~", "y|z")]), 'm{a="x",b=~"y|z"}'),
        (lambda: q.sum_by(["model_name"], "x"), "sum by (model_name) (x)"),
        (lambda: q.ratio("a", "b"), "(a) / ((b) > 0)"),
        (lambda: q.quantile(0.99, ["model_name"], "r"), "histogram_quantile(0.99, sum by (le, model_name) (r))"),
        (lambda: q.le_matcher(1.0), ("le", "=~", "1(\\.0+)?")),
        (lambda: q.le_matcher(2560.0), ("le", "=~", "2560(\\.0+)?")),
        (lambda: q.le_matcher(0.25), ("le", "=~", "0\\.250*")),
    ],
)
def test_promql_builders(call, expected):
    assert call() == expected


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('sum by (a) (rate(x{a="1"}[5m])) / (sum by (a) (rate(y[5m])) > 0)', {"x", "y"}),
        ('absent(up{job="v"}) or (up == 1 unless on (instance) count by (instance) (z))', {"up", "z"}),
        ("vllm:e2e_request_latency_seconds_count", {"vllm:e2e_request_latency_seconds_count"}),
    ],
)
def test_metric_names(expr, names):
    assert q.metric_names(expr) == names


def test_metric_names_rejects_invalid_promql():
    with pytest.raises(ValueError, match="invalid PromQL"):
        q.metric_names("sum by (a (x)")


@pytest.mark.parametrize("bound", [0.001, 0.25, 1.0, 2.5, 10.0, 2560.0])
def test_le_matcher_accepts_both_prometheus_spellings(bound):
    import re

    _, _, pattern = q.le_matcher(bound)
    two = f"{bound:g}"
    three = two if "." in two else two + ".0"
    assert re.fullmatch(pattern, two) and re.fullmatch(pattern, three)
    assert not re.fullmatch(pattern, two + "1")


def _walked(expr: str) -> tuple[q.Selector, ...]:
    """The selectors promql_parser.walk visits, in its order: what vector_selectors reads faster."""
    import promql_parser

    found: list[q.Selector] = []

    def visit(node: object) -> bool:
        if isinstance(node, promql_parser.VectorSelector):
            ops = {"MatchOp.Equal": "=", "MatchOp.NotEqual": "!=", "MatchOp.Re": "=~", "MatchOp.NotRe": "!~"}
            found.append(q.Selector(node.name, tuple((m.name, ops[str(m.op)], m.value) for m in node.matchers.matchers)))
        return True

    promql_parser.walk(promql_parser.parse(expr), visit)
    return tuple(found)


def _rule_exprs() -> list[str]:
    exprs: list[str] = []
    for path in sorted(REPO.glob("out/*/prometheus/*.rules.yaml")):
        for group in yaml.load(path.read_bytes(), Loader=FAST_SAFE_LOADER)["groups"]:
            exprs += [rule["expr"] for rule in group["rules"]]
    return list(dict.fromkeys(exprs))


@pytest.mark.parametrize(
    "expr",
    [
        "topk(scalar(a), b)",
        "quantile(scalar(q{x='1'}), c) + -d",
        "label_replace(x, 'a', 'b', 'c', 'd') or rate(y[5m])",
        "max_over_time((a - b{le=~'1(\\\\.0+)?'})[10m:1m]) / ignoring(le) group_left c",
        "count_values('v', m) unless on(x) w @ 100 offset 5m",
        "absent_over_time(up{job!='a'}[5m]) and on() (sum(rate(b[1m])) > bool 3)",
        "vector(1)",
    ],
)
def test_vector_selectors_are_what_the_parser_walks(expr):
    assert q.vector_selectors(expr) == _walked(expr)


def test_vector_selectors_of_every_example_rule_are_what_the_parser_walks():
    exprs = _rule_exprs()
    assert len(exprs) > 1000
    assert [q.vector_selectors(e) for e in exprs] == [_walked(e) for e in exprs]

"""One hop per alert on vmalert (the `victoriametrics` backend's files, the `render` stage's edge).

Prometheus evaluates the rules of a group one after the other on its own storage: an alert reads
the series a recording rule wrote a moment before. vmalert writes recorded series back through
remote write and reads them with a query: a rule sees what an earlier rule recorded one
evaluation (and a flush) later, in its own group as in another, so each recorded step between the
raw series and an alert costs an evaluation interval (measured on Debian's vmalert 1.79.5: +69 s
for the TTFT page and +74 s for the first-token fast burn at a 30 s interval, against a Prometheus
evaluating the same rules; docs/backends.md).

So in vmalert's files every alerting rule reads, in place of each series recorded by a rule of
the same files (the same ruler), that rule's expression, recursively: the alert reads what the
ruler does not compute itself (raw series, or what an edge Prometheus recorded) in one
evaluation. Only instant reads are replaced: a range (`x[55m]`) or an `offset` needs the recorded
history. The replacement keeps the recording rule's meaning: its `labels:` are added with
`label_replace`, and the read's matchers on labels the rule does not fix filter the result
(`and on (label)` a one-element vector per allowed value, so the file stays PromQL that promtool
checks and runs the generated tests on). A read whose matchers cannot be written that way (a
regex over infinitely many values, a negative matcher), that matches several rules, or whose
replacement would exceed MAX_EXPR keeps reading the recorded series. Recording rules themselves
are unchanged: dashboards and warnings read them."""

from __future__ import annotations

import re

from genobs import promql as q

SELECTOR = re.compile(r'(?<![\w:])(genobs:[A-Za-z0-9_:]+)(\{(?:[^}"]|"(?:[^"\\]|\\.)*")*\})?')
MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*,?')
# VictoriaMetrics refuses queries longer than -search.maxQueryLen (16 KiB by default)
MAX_EXPR = 12_000
MAX_DEPTH = 8

Rules = dict[str, list[tuple[dict[str, str], str]]]  # record -> (labels, expr) of each rule recording it


def _unquote(text: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n"}.get(m.group(1), m.group(1)), text)


def _matchers(text: str | None) -> list[tuple[str, str, str]] | None:
    if not text:
        return []
    body, out, pos = text[1:-1], [], 0
    while pos < len(body):
        m = MATCHER.match(body, pos)
        if m is None:
            return None
        out.append((m.group(1), m.group(2), _unquote(m.group(3))))
        pos = m.end()
    return out


def _values(op: str, value: str) -> list[str] | None:
    """The values a positive matcher allows, where they are finitely many (a literal alternation)."""
    if op == "=":
        return [value]
    if op != "=~":
        return None
    parts = re.split(r"(?<!\\)\|", value)
    literal = [_unquote(p) for p in parts]
    return literal if q.any_of(literal) == value else None


def _allows(op: str, pattern: str, value: str) -> bool:
    if op == "=":
        return value == pattern
    if op == "=~":
        return re.fullmatch(pattern, value) is not None
    if op == "!=":
        return value != pattern
    return re.fullmatch(pattern, value) is None


def _top_level_or(expr: str) -> list[str]:
    """`expr` split at its top-level ` or `s (outside parentheses, braces and strings)."""
    parts, depth, start, i, quoted = [], 0, 0, 0, False
    while i < len(expr):
        ch = expr[i]
        if quoted:
            i += 2 if ch == "\\" else 1
            quoted = quoted and ch != '"'
            continue
        if ch == '"':
            quoted = True
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif depth == 0 and expr.startswith(" or ", i):
            parts.append(expr[start:i])
            start = i = i + 4
            continue
        i += 1
    return [*parts, expr[start:]]


def _constant_label(term: str, label: str) -> str | None:
    """The value `term` sets `label` to, when it is `label_replace(x, "label", "value", "", "")`."""
    m = re.fullmatch(rf'label_replace\((.*), "{re.escape(label)}", "((?:[^"\\]|\\.)*)", "", ""\)', term.strip(), re.S)
    return _unquote(m.group(2)) if m else None


def _filtered(expr: str, residual: list[tuple[str, list[str]]]) -> str:
    """`expr` keeping the series whose labels hold one of the allowed values, each label in turn.
    A top-level `or` of terms that each set the label to a constant keeps only the allowed terms."""
    for label, values in residual:
        terms = _top_level_or(expr)
        constants = [_constant_label(t, label) for t in terms]
        if len(terms) > 1 and None not in constants:
            kept = [t for t, c in zip(terms, constants) if c in values]
            expr = " or ".join(kept) if kept else f"({expr}) and on () vector(1) == 2"
            continue
        allowed = " or ".join(f'label_replace(vector(1), "{label}", {q.quote(v)}, "", "")' for v in values)
        expr = f"({expr}) and on ({label}) ({allowed})"
    return expr


def _implied(expr: str, label: str, values: list[str]) -> bool:
    """Whether every series `expr` yields with `label` holds one of `values` already: every
    selector it reads restricts the label to them (a query never rewrites a label's value but
    with label_replace, which the expression would then carry)."""
    selectors = q.vector_selectors(expr)
    if not selectors or f'"{label}"' in expr:
        return False
    for sel in selectors:
        allowed = [_values(op, v) for name, op, v in sel.matchers if name == label]
        if not any(a is not None and set(a) <= set(values) for a in allowed):
            return False
    return True


# an aggregation of one range function of one selector: what the recording group mostly records
SIMPLE = re.compile(
    r"(?P<head>(?:sum|max|min|avg) by \((?P<by>[^)]*)\) \((?:rate|increase|irate|last_over_time|max_over_time)\("
    r"[A-Za-z_:][\w:]*\{)(?P<inner>[^}]*)(?P<tail>\}\[[^\]]+\]\)\))"
)


def _pushed_down(expr: str, matchers: list[tuple[str, str, str]]) -> tuple[str, list[tuple[str, str, str]]]:
    """Matchers on labels an aggregation of one selector keeps, written into that selector (any
    matcher, a regex too); the others are left to filter the result."""
    m = SIMPLE.fullmatch(expr)
    if m is None:
        return expr, matchers
    kept = {label.strip() for label in m.group("by").split(",")}
    down = [x for x in matchers if x[0] in kept]
    if not down:
        return expr, matchers
    extra = ",".join(f"{label}{op}{q.quote(value)}" for label, op, value in down)
    inner = f"{m.group('inner')},{extra}" if m.group("inner") else extra
    return m.group("head") + inner + m.group("tail"), [x for x in matchers if x[0] not in kept]


def _replacement(name: str, text: str | None, rules: Rules, depth: int) -> str | None:
    matchers = _matchers(text)
    if matchers is None:
        return None
    candidates = [
        (labels, expr)
        for labels, expr in rules.get(name, [])
        if all(_allows(op, value, labels[label]) for label, op, value in matchers if label in labels)
    ]
    if len(candidates) != 1:
        return None
    labels, expr = candidates[0]
    matchers = [m for m in matchers if m[0] not in labels]
    expr, matchers = _pushed_down(expr, matchers)
    residual = []
    for label, op, value in matchers:
        values = _values(op, value)
        if values is None:
            return None
        residual.append((label, values))
    inner = expand(expr, rules, depth + 1)
    out = _filtered(inner, [(label, values) for label, values in residual if not _implied(inner, label, values)])
    for label, value in labels.items():  # what the recording rule's `labels:` add
        out = f'label_replace({out}, "{label}", {q.quote(value)}, "", "")'
    return f"({out})"


def expand(expr: str, rules: Rules, depth: int = 0) -> str:
    """`expr` with each instant read of a series recorded by `rules` replaced by its expression."""
    if depth > MAX_DEPTH:
        return expr
    out, last = [], 0
    for m in SELECTOR.finditer(expr):
        after = expr[m.end() :].lstrip()
        if expr[m.end() : m.end() + 1] == "[" or after.startswith("offset"):
            continue  # a range or an offset reads the recorded history
        found = _replacement(m.group(1), m.group(2), rules, depth)
        if found is not None:
            out.append(expr[last : m.start()] + found)
            last = m.end()
    return "".join(out) + expr[last:]


def recorded_by(groups: list[dict]) -> Rules:
    """What the rendered groups of one ruler record: name -> (labels, expr) of each rule."""
    rules: Rules = {}
    for g in groups:
        for r in g["rules"]:
            if "record" in r:
                rules.setdefault(r["record"], []).append((dict(r.get("labels") or {}), r["expr"]))
    return rules


def one_hop(group: dict, rules: Rules) -> dict:
    """A rendered group whose alerting rules read in one hop what `rules` (the ruler's) record."""
    out = []
    for r in group["rules"]:
        if "alert" in r:
            expanded = expand(r["expr"], rules)
            r = {**r, "expr": expanded} if len(expanded) <= MAX_EXPR else r
        out.append(r)
    return {**group, "rules": out}

"""Prometheus' alert-template rendering in Python: the Go `fmt` verbs and the
humanize functions of prometheus/template/template.go, used to predict the
annotations promtool expects (part of the `plan` stage's unit tests)."""

from __future__ import annotations

import functools
import math
import re
import urllib.parse
from decimal import Decimal


def go_g(value: float, precision: int | None = None) -> str:
    """Go's %.<precision>g; without precision the shortest representation (%g, %v)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if precision is None:
        return _shortest(value)
    # Python and Go agree for finite values: correctly rounded, trailing zeros
    # dropped, exponent from 1e<precision> up or below 1e-4, at least two exponent digits
    return f"{value:.{max(precision, 1)}g}"


def _shortest(value: float) -> str:
    """Shortest digits that round-trip, laid out as Go's strconv 'g' with
    precision -1: exponent form below 1e-4 and from 1e6 up."""
    if value == 0:
        return "-0" if math.copysign(1.0, value) < 0 else "0"
    sign, digits, exp = Decimal(repr(value)).as_tuple()
    text = "".join(map(str, digits)).rstrip("0") or "0"
    point = len(digits) + int(exp)  # decimal point position relative to `text`
    x = point - 1  # decimal exponent of the first digit
    out = "-" if sign else ""
    if x < -4 or x >= 6:
        mant = text[0] + ("." + text[1:] if len(text) > 1 else "")
        return f"{out}{mant}e{'-' if x < 0 else '+'}{abs(x):02d}"
    if point <= 0:
        return f"{out}0.{'0' * -point}{text}"
    if point >= len(text):
        return f"{out}{text}{'0' * (point - len(text))}"
    return f"{out}{text[:point]}.{text[point:]}"


def go_value(value: float) -> str:
    """How text/template prints a float64 such as {{ $value }} (fmt's %v)."""
    return go_g(value)


def humanize(v: float) -> str:
    if v == 0 or math.isnan(v) or math.isinf(v):
        return go_g(v, 4)
    prefix = ""
    if abs(v) >= 1:
        for p in ("k", "M", "G", "T", "P", "E", "Z", "Y"):
            if abs(v) < 1000:
                break
            prefix = p
            v /= 1000
        return go_g(v, 4) + prefix
    for p in ("m", "u", "n", "p", "f", "a", "z", "y"):
        if abs(v) >= 1:
            break
        prefix = p
        v *= 1000
    return go_g(v, 4) + prefix


def humanize1024(v: float) -> str:
    if abs(v) <= 1 or math.isnan(v) or math.isinf(v):
        return go_g(v, 4)
    prefix = ""
    for p in ("ki", "Mi", "Gi", "Ti", "Pi", "Ei", "Zi", "Yi"):
        if abs(v) < 1024:
            break
        prefix = p
        v /= 1024
    return go_g(v, 4) + prefix


def humanize_duration(v: float) -> str:
    if math.isnan(v) or math.isinf(v):
        return go_g(v, 4)
    if v == 0:
        return go_g(v, 4) + "s"
    if abs(v) >= 1:
        sign = ""
        if v < 0:
            sign, v = "-", -v
        whole = int(v)
        seconds, minutes, hours, days = whole % 60, (whole // 60) % 60, (whole // 3600) % 24, whole // 86400
        if days:
            return f"{sign}{days}d {hours}h {minutes}m {seconds}s"
        if hours:
            return f"{sign}{hours}h {minutes}m {seconds}s"
        if minutes:
            return f"{sign}{minutes}m {seconds}s"
        return f"{sign}{go_g(v, 4)}s"
    prefix = ""
    for p in ("m", "u", "n", "p", "f", "a", "z", "y"):
        if abs(v) >= 1:
            break
        prefix = p
        v *= 1000
    return f"{go_g(v, 4)}{prefix}s"


def humanize_percentage(v: float) -> str:
    return go_g(v * 100, 4) + "%"


_VERB = re.compile(r"%([-+ 0#]*)(\d*)(?:\.(\d+))?([a-zA-Z%])")


def go_sprintf(fmt: str, *args: float) -> str:
    """fmt.Sprintf for the float verbs alert templates use (%f %e %g %v %%)."""
    out, rest = [], list(args)

    def one(m: re.Match) -> str:
        flags, width, prec, verb = m.groups()
        if verb == "%":
            return "%"
        if not rest:
            return f"%!{verb}(MISSING)"
        v = float(rest.pop(0))
        if math.isnan(v) or math.isinf(v):
            text = go_g(v)
        elif verb in "fF":
            text = f"{v:{flags}.{int(prec) if prec else 6}f}"
        elif verb in "eE":
            text = f"{v:{flags}.{int(prec) if prec else 6}{verb}}"
        elif verb in "gG":
            text = go_g(v, int(prec)) if prec else go_value(v)
        elif verb == "v":
            text = go_value(v)
        else:
            raise ValueError(f"printf verb %{verb} is not supported")
        return text.rjust(int(width)) if width and "-" not in flags else text.ljust(int(width or 0))

    out.append(_VERB.sub(one, fmt))
    return "".join(out)


_FUNCS = {
    "humanize": humanize,
    "humanize1024": humanize1024,
    "humanizeDuration": humanize_duration,
    "humanizePercentage": humanize_percentage,
}
_ACTION = re.compile(r"\{\{(-?)\s*(.*?)\s*(-?)\}\}", re.S)
_PRINTF = re.compile(r'printf\s+"((?:[^"\\]|\\.)*)"')


def _split_pipes(text: str) -> list[str]:
    """Split a pipeline on | outside double-quoted strings."""
    parts, current, quoted, escaped = [], [], False, False
    for ch in text:
        if quoted:
            current.append(ch)
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                quoted = False
        elif ch == '"':
            quoted = True
            current.append(ch)
        elif ch == "|":
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    parts.append("".join(current))
    return parts


@functools.lru_cache(maxsize=4096)
def _stages(text: str) -> tuple[str, ...]:
    """A pipeline's stages, split once per text: every candidate fault expands the same few
    annotation templates again."""
    return tuple(s.strip() for s in _split_pipes(text))


def _pipeline(text: str, labels: dict[str, str], value: float) -> str:
    stages = _stages(text)
    head = stages[0]
    current: object
    if head in ("$value", ".Value"):
        current = value
    elif head.startswith(("$labels.", ".Labels.")):
        current = labels.get(head.split(".", 2)[-1] if head.startswith(".") else head[len("$labels.") :], "")
    elif head.startswith(("$externalLabels.", ".ExternalLabels.")):
        current = ""
    else:
        raise ValueError(f"template action {{{{ {text} }}}} is not supported")
    for stage in stages[1:]:
        m = _PRINTF.fullmatch(stage)
        if m:
            current = go_sprintf(m.group(1).encode().decode("unicode_escape"), float(current))  # type: ignore[arg-type]
        elif stage == "urlquery":
            # Go's url.QueryEscape: letters, digits and -_.~ stay, space becomes +
            current = urllib.parse.quote_plus(str(current), safe="-_.~")
        elif stage in _FUNCS:
            current = _FUNCS[stage](float(current))  # type: ignore[arg-type]
        else:
            raise ValueError(f"template function {stage!r} is not supported")
    if isinstance(current, float):
        return go_value(current)
    return str(current)


_IF_LABEL = re.compile(r"\{\{\s*if \$labels\.(\w+)\s*\}\}(.*?)\{\{\s*end\s*\}\}", re.S)


def expand(template: str, labels: dict[str, str], value: float) -> str:
    """Render an alert annotation as Prometheus does ($labels, $value; missing labels are empty;
    `{{ if $labels.x }}...{{ end }}` keeps its body when the label is set and not empty)."""
    template = _IF_LABEL.sub(lambda m: m.group(2) if labels.get(m.group(1)) else "", template)
    out: list[str] = []
    pos = 0
    for m in _ACTION.finditer(template):
        before = template[pos : m.start()]
        if m.group(1):
            before = before.rstrip()
        out.append(before)
        out.append(_pipeline(m.group(2), labels, value))
        pos = m.end()
        if m.group(3):
            while pos < len(template) and template[pos].isspace():
                pos += 1
    out.append(template[pos:])
    return "".join(out)


def expected_alert(rule, labels: dict[str, str], value: float) -> dict:
    """promtool's exp_alerts entry for `rule` (a plan AlertRule) firing on a series with `labels`
    and $value `value`: its labels and its annotations as Prometheus expands them."""
    return {
        "exp_labels": dict(sorted({**labels, **dict(rule.labels)}.items())),
        "exp_annotations": {k: expand(t, labels, value) for k, t in rule.annotations().items()},
    }

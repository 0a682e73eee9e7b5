"""What `genobs compare` compares: two label selectors (`model_name=old`) evaluated
over the same window, or one service over two time ranges (`START..END`)."""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass
from datetime import datetime, timezone

from genobs import promql as q
from genobs.units import prom_duration_seconds

_MATCHER = re.compile(r"""\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*("(?:[^"\\]|\\.)*"|'[^']*'|[^,]*?)\s*(?:,|$)""")
_RELATIVE = re.compile(r"now(?:-((?:\d+(?:ms|s|m|h|d|w))+))?")
MAX_UNIX_S = 253402300800.0  # 10000-01-01T00:00:00Z
MAX_RANGE_S = 90 * 86400.0  # a longer range reads months of raw samples for one table


class SideError(ValueError):
    """A selector or time range that cannot be parsed (exit 2, option named)."""


@dataclass(frozen=True)
class Side:
    name: str  # baseline | candidate
    text: str  # as the user wrote it
    matchers: tuple[q.Matcher, ...]  # extra label matchers
    at: float  # evaluation time (unix seconds)
    window_s: float  # range every rate/quantile looks back over

    @property
    def window(self) -> str:
        return f"{max(1, round(self.window_s))}s"


def parse_selector(option: str, text: str) -> tuple[q.Matcher, ...]:
    """'model_name=old', 'model_name="old",revision=~"r1.*"' or '{model_name="old"}'."""
    body = text.strip()
    if body.startswith("{") and body.endswith("}"):
        body = body[1:-1]
    if not body.strip():
        raise SideError(f"{option}: empty selector; write label matchers such as model_name=old")
    out: list[q.Matcher] = []
    pos = 0
    while pos < len(body):
        m = _MATCHER.match(body, pos)
        if m is None or m.end() == pos:
            raise SideError(
                f"{option}: cannot read {text!r} at {body[pos:]!r}; write label=value pairs separated by commas, "
                'e.g. model_name=old or model_name="old",revision=~"r1.*"'
            )
        label, op, value = m.group(1), m.group(2), m.group(3)
        if value[:1] in "\"'" and value[-1:] == value[:1] and len(value) >= 2:
            value = value[1:-1].replace('\\"', '"').replace("\\\\", "\\")
        if label == "__name__":
            raise SideError(f"{option}: select series by labels, not by metric name")
        if op in ("=~", "!~"):
            try:
                re.compile(value)
            except re.error as exc:
                raise SideError(f"{option}: {label}{op}{value!r} is not a valid regular expression: {exc}") from None
        out.append((label, op, value))
        pos = m.end()
    return tuple(out)


def parse_time(option: str, text: str, now: float) -> float:
    """RFC 3339 (`2026-12-01T09:00:00Z`), unix seconds, `now` or `now-2h`."""
    t = text.strip()
    rel = _RELATIVE.fullmatch(t)
    if rel:
        return now - (prom_duration_seconds(rel.group(1)) if rel.group(1) else 0.0)
    try:
        value = float(t)
    except ValueError:
        pass
    else:
        # unix seconds of a time Prometheus can hold: not NaN, not before 1970, not past year 9999
        if not (math.isfinite(value) and 0 <= value < MAX_UNIX_S):
            raise SideError(f"{option}: {text!r} is not a time Prometheus can hold (unix seconds from 0 to year 9999)")
        return value
    try:
        dt = datetime.fromisoformat(t.replace("Z", "+00:00"))
    except ValueError:
        raise SideError(
            f"{option}: {text!r} is not a time; write RFC 3339 (2026-12-01T09:00:00Z), unix seconds, now or now-2h"
        ) from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    if dt.timestamp() < 0:
        raise SideError(f"{option}: {text!r} is before 1970; Prometheus holds no samples that old")
    return dt.timestamp()


def parse_range(option: str, text: str, now: float | None = None) -> tuple[float, float]:
    now = time.time() if now is None else now
    start, sep, end = text.partition("..")
    if not sep or not start.strip() or not end.strip():
        raise SideError(
            f"{option}: expected START..END, e.g. 2026-12-01T08:00:00Z..2026-12-01T09:00:00Z or now-2h..now-1h"
        )
    a, b = parse_time(option, start, now), parse_time(option, end, now)
    if b <= a:
        raise SideError(f"{option}: the range ends before it starts ({text})")
    if b - a > MAX_RANGE_S:
        raise SideError(f"{option}: the range is longer than {MAX_RANGE_S / 86400:g} days; compare shorter windows")
    if b > now + 60:
        raise SideError(f"{option}: the range ends in the future ({text})")
    return a, b


def window_seconds(option: str, text: str) -> float:
    if not re.fullmatch(r"(?:\d+(?:ms|s|m|h|d|w))+", text.strip()):
        raise SideError(f"{option}: {text!r} is not a Prometheus duration; write e.g. 30m, 1h or 6h")
    seconds = prom_duration_seconds(text.strip())
    if not 1 <= seconds <= MAX_RANGE_S:
        raise SideError(f"{option}: the window must be between 1s and {MAX_RANGE_S / 86400:g}d")
    return seconds


def parse_tolerance(text: str) -> float:
    t = text.strip()
    try:
        value = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise SideError(f"--tolerance: {text!r} is not a share; write e.g. 10% or 0.1") from None
    if not 0 <= value <= 10:
        raise SideError(f"--tolerance: {text!r} is out of range (0% to 1000%)")
    return value

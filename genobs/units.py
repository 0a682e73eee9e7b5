"""Strict parsing of the unit-bearing values SREs write in specs ("1s", "500ms",
"99.5%", "30d"); used by the spec models during `load`."""

from __future__ import annotations

import functools
import re

_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_PROM_DURATION_RE = re.compile(r"(?:\d+(?:ms|s|m|h|d|w|y))+")
_MAX_SECONDS = 10 * 365 * 86400.0
_MAX_NUMBER = 1e15
_SIGNED_PERCENT_RE = re.compile(r"([-+]?\d+(?:\.\d+)?) *%")
# unit spellings people write -> the unit genobs reads ("10min" -> "10m")
_UNIT_ALIASES = {
    "ms": "ms", "msec": "ms", "msecs": "ms", "millisecond": "ms", "milliseconds": "ms",
    "s": "s", "sec": "s", "secs": "s", "second": "s", "seconds": "s",
    "m": "m", "min": "m", "mins": "m", "minute": "m", "minutes": "m",
    "h": "h", "hr": "h", "hrs": "h", "hour": "h", "hours": "h",
    "d": "d", "day": "d", "days": "d",
    "w": "w", "wk": "w", "wks": "w", "week": "w", "weeks": "w",
    "y": "y", "yr": "y", "yrs": "y", "year": "y", "years": "y",
}  # fmt: skip
_LOOSE_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?) *([A-Za-z]+)")


def _did_you_mean(value: object, units: tuple[str, ...], whole: bool = False) -> str:
    """' (did you mean 10m?)' when the value is a number with a misspelt or spaced unit."""
    if not isinstance(value, str):
        return ""
    m = _LOOSE_DURATION_RE.fullmatch(value.strip(" "))
    unit = _UNIT_ALIASES.get(m.group(2).lower()) if m else None
    if m is None or unit is None or unit not in units:
        return ""
    number = m.group(1)
    if whole and "." in number:
        return ""  # Prometheus durations take whole numbers; no single obvious rewrite
    guess = f"{number}{unit}"
    return "" if guess == value else f"; did you mean {guess}?"


def parse_seconds(value: object) -> float:
    """'1s' -> 1.0, '500ms' -> 0.5, '2m' -> 120.0. Bare numbers are refused: units are mandatory."""
    if isinstance(value, bool) or not isinstance(value, str):
        raise ValueError(f"expected a duration with a unit such as 500ms, 1s or 2m, got {value!r}")
    m = _DURATION_RE.fullmatch(value.strip(" "))
    if not m:
        hint = _did_you_mean(value, tuple(_DURATION_UNITS))
        raise ValueError(f"{value!r} is not a duration" + (hint or "; write e.g. 500ms, 1s, 2.5s or 10m"))
    seconds = float(m.group(1)) * _DURATION_UNITS[m.group(2)]
    if not seconds <= _MAX_SECONDS:  # float("9" * 400) is inf
        raise ValueError(f"{value[:40]!r} is too large; durations here stay below 10 years")
    return seconds


def parse_prom_duration(value: object) -> str:
    """A Prometheus duration such as '10m' or '1h30m', returned unchanged."""
    if not isinstance(value, str) or not _PROM_DURATION_RE.fullmatch(value.strip(" ")):
        hint = _did_you_mean(value, (*_DURATION_UNITS, "y"), whole=True)
        raise ValueError(f"{value!r} is not a Prometheus duration" + (hint or "; write e.g. 5m, 1h or 1h30m"))
    return value.strip(" ")


@functools.lru_cache(maxsize=4096)
def prom_duration_seconds(value: str) -> float:
    """Seconds of a Prometheus duration (cached: test generation converts the same few windows
    thousands of times)."""
    total = 0.0
    for num, unit in re.findall(r"(\d+)(ms|s|m|h|d|w|y)", value):
        total += int(num) * (_DURATION_UNITS.get(unit) or 365 * 86400.0)
    return total


def parse_ratio(value: object) -> float:
    """'5%' -> 0.05; a bare number must already be a fraction between 0 and 1."""
    if isinstance(value, bool):
        raise ValueError(f"expected a percentage such as 5% or 99.5%, got {value!r}")
    if isinstance(value, (int, float)):
        if 0 <= value <= 1:
            return float(value)
        raise ValueError(f"{value!r} is not a fraction between 0 and 1; write percentages with %, e.g. {value}%")
    if isinstance(value, str):
        m = _SIGNED_PERCENT_RE.fullmatch(value.strip(" "))
        if m and 0 <= float(m.group(1)) <= 100:
            return float(m.group(1)) / 100
        if m:
            raise ValueError(f"{value!r} is out of range; a percentage here is between 0% and 100%")
    raise ValueError(f"{value!r} is not a percentage; write e.g. 5% or 99.5%")


def parse_number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"expected a number, got {value!r}")
    if not -_MAX_NUMBER < value < _MAX_NUMBER:  # also NaN; float() of a 400-digit int overflows
        if value != value:
            raise ValueError("NaN is not a number a threshold can compare with")
        raise ValueError(f"{str(value)[:20]}... is too large; thresholds stay below 1e15")
    if value < 0:
        raise ValueError(f"expected a non-negative number, got {value!r}")
    return float(value)


def format_seconds(seconds: float) -> str:
    """Human form used in summaries and the runbook: 0.5 -> '500ms', 2.0 -> '2s'."""
    if seconds < 1:
        return f"{seconds * 1000:g}ms"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g}m"
    return f"{seconds:g}s"


def format_percent(ratio: float) -> str:
    return f"{round(ratio * 100, 6):g}%"

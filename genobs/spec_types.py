"""Field types and validators shared by the spec models (genobs.spec) and the capacity
models (genobs.spec_capacity): label names, safe label values, durations, thresholds."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict

from genobs.units import parse_prom_duration, parse_ratio, parse_seconds, prom_duration_seconds

_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_LABEL_MAX = 100  # Prometheus has no limit, but every rule and alert repeats the name
_SPEC_NAME = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
# label values, model names and titles end up in PromQL strings, YAML and Markdown
_SAFE_VALUE = re.compile(r"[A-Za-z0-9_.:/@+\- ]+")
_SAFE_MAX = 200
# labels genobs itself puts on recorded series (histogram buckets, quantiles)
_RESERVED_LABELS = ("le", "quantile")
# Kubernetes names (RFC 1123 label) and label keys/values
_K8S_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_K8S_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
_K8S_LABEL_PREFIX = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


def _chars(bad: set[str]) -> str:
    return " ".join(repr(c) if c.isprintable() and c != " " else f"U+{ord(c):04X}" for c in sorted(bad))


def _label_name(v: str) -> str:
    if not _LABEL_NAME.fullmatch(v) or v.startswith("__"):
        raise ValueError(
            f"{v!r} is not a Prometheus label name (letters, digits and _, not starting with a digit or __)"
        )
    if v.lower() in ("inf", "nan"):
        raise ValueError(f"{v!r} cannot be a label name: PromQL reads it as a number in by (...) and on (...)")
    if len(v) > _LABEL_MAX:
        raise ValueError(f"label name is {len(v)} characters long; the limit is {_LABEL_MAX}")
    if v in _RESERVED_LABELS:
        raise ValueError(f"{v!r} is a label genobs sets on recorded series itself; use another label")
    return v


def _safe_value(v: str) -> str:
    """Label values, model names, team, titles: they end up in PromQL strings, YAML,
    Markdown and alert labels (Go templates), so only inert characters are allowed."""
    if not v:
        raise ValueError("must not be empty")
    if not _SAFE_VALUE.fullmatch(v):
        bad = {c for c in v if not _SAFE_VALUE.fullmatch(c)}
        raise ValueError(
            f"{v[:60]!r} contains {_chars(bad)}; use letters, digits, spaces and . _ - : / @ + "
            "(the value ends up in PromQL, YAML and Markdown)"
        )
    if v != v.strip(" "):
        raise ValueError(f"{v!r} must not start or end with a space")
    if len(v) > _SAFE_MAX:
        raise ValueError(f"is {len(v)} characters long; the limit is {_SAFE_MAX}")
    return v


def _engine_version(v: str | None) -> str | None:
    if v is not None:
        from genobs.catalog import parse_version

        parse_version(v)
    return v


def _k8s_labels(v: dict[str, str]) -> dict[str, str]:
    bad = []
    for key, value in v.items():
        prefix, _, name = key.rpartition("/")
        if (prefix and not _K8S_LABEL_PREFIX.fullmatch(prefix)) or not _K8S_LABEL_VALUE.fullmatch(name) or not name:
            bad.append(f"key {key!r}")
        if not _K8S_LABEL_VALUE.fullmatch(value):
            bad.append(f"value {value!r} of {key!r}")
    if bad:
        raise ValueError(
            f"not a Kubernetes label: {', '.join(bad)} (keys: optional DNS prefix and '/', then a name; names and "
            "values: up to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit)"
        )
    return v


def _description_text(v: str) -> str:
    """The description is printed as Markdown at the top of the runbook: plain prose only."""
    if len(v) > 2000:
        raise ValueError(f"is {len(v)} characters long; the limit is 2000")
    problems = []
    bad = {c for c in v if c in "<>`{}[]|\\" or (not c.isprintable() and c != "\n")}
    if bad:
        problems.append(f"must not contain {_chars(bad)}")
    for line in v.splitlines():
        s = line.strip()
        if s.startswith("#") or (len(s) >= 2 and set(s) <= {"=", "-"}):
            problems.append(f"line {s[:40]!r} would become a Markdown heading")
            break
    if problems:
        raise ValueError(
            "; ".join(problems) + ": the description is printed as Markdown in the runbook; write plain text"
        )
    return v


_MAX_REQUEST_RATE = 100_000  # requests/s; a guard above it would silence every alert of any real fleet
_MAX_BUCKET = 7 * 86400  # seconds; vLLM's longest default bucket is 7680 s


def _buckets(v: list[float]) -> list[float]:
    """Bucket boundaries as --custom-histogram-buckets takes them: positive seconds, strictly increasing."""
    if not v:
        raise ValueError("must list at least one bucket boundary")
    for i, b in enumerate(v):
        if b <= 0:
            raise ValueError(f"boundaries are positive seconds; got {b:g}")
        if b > _MAX_BUCKET:
            raise ValueError(f"boundaries are seconds, at most {_MAX_BUCKET} (a week); got {b:g}")
        if i and b <= v[i - 1]:
            raise ValueError(f"boundaries must be strictly increasing; {b:g} follows {v[i - 1]:g}")
    return v


_MAX_DURATION = 10 * 365 * 86400  # Prometheus durations overflow near 292 years; nothing here needs 10


def _pending_duration(v: str) -> str:
    v = parse_prom_duration(v)
    if prom_duration_seconds(v) > _MAX_DURATION:
        raise ValueError(f"{v!r} is longer than 10 years")
    return v


# The generated promtool tests must watch an alert pend for its whole `for` at the tests'
# 1m evaluation interval, so their run time grows with it (a `for` of 1d: minutes of
# promtool and of test generation). A condition that must hold for over an hour is a trend:
# an SLO's slow-burn windows (slos:) watch those, over days, at a bounded cost.
FOR_MAX = 3600


def _alert_for(v: str) -> str:
    v = _pending_duration(v)
    if prom_duration_seconds(v) > FOR_MAX:
        raise ValueError(
            f"{v!r} is longer than 1h: an alert that must hold for hours reacts hours late and its generated "
            "tests would simulate every minute of it; watch slow trends with an SLO (slos:) and its slow-burn "
            "windows instead"
        )
    return v


def _prom_duration(v: str) -> str:
    v = _pending_duration(v)
    if prom_duration_seconds(v) <= 0:
        raise ValueError(f"{v!r} must be longer than 0s")
    return v


# rate() needs >= 2 samples and should survive a missed scrape: at least 4 scrapes per
# window. 1m is 4x a 15s scrape, the fastest interval in common use; shorter windows also
# leave no room for the 1m sample spacing of the generated promtool tests. Beyond 1h
# every alert reacts more than an hour late (SLO windows are separate) and the generated
# tests would simulate days of samples.
RATE_WINDOW_MIN, RATE_WINDOW_MAX = 60, 3600


def _rate_window(v: str) -> str:
    v = _prom_duration(v)
    seconds = prom_duration_seconds(v)
    if seconds < RATE_WINDOW_MIN:
        raise ValueError(
            f"{v!r} is shorter than 1m: rate() needs at least 4 scrapes in its window to survive a missed one, "
            "and 1m is 4x a 15s scrape, the fastest in common use; write 1m or more"
        )
    if seconds > RATE_WINDOW_MAX:
        raise ValueError(
            f"{v!r} is longer than 1h: every alert would react over an hour late; SLO burn-rate windows are set "
            "under slos: instead"
        )
    return v


# Prometheus forgets a sample after its 5m lookback: a rule group must run at least twice
# in it, so one missed evaluation does not make every recorded series vanish. Whole seconds:
# the derived group intervals (panels, SLO long windows) are whole multiples of it.
EVALUATION_INTERVAL_MIN, EVALUATION_INTERVAL_MAX = 1, 120


def _evaluation_interval(v: str) -> str:
    v = _prom_duration(v)
    seconds = prom_duration_seconds(v)
    if seconds < EVALUATION_INTERVAL_MIN or seconds != int(seconds):
        raise ValueError(f"{v!r} is not a whole number of seconds of at least 1s; write e.g. 5s, 30s or 1m")
    if seconds > EVALUATION_INTERVAL_MAX:
        raise ValueError(
            f"{v!r} is longer than 2m: Prometheus drops a recorded series 5m after its last sample, so rules "
            "must run at least twice in that time; write 2m or less"
        )
    return v


def _duration_text(v: str) -> str:
    parse_seconds(v)
    return v.strip(" ")


def _percent_text(v: str | float) -> str | float:
    parse_ratio(v)
    return v


LabelName = Annotated[str, AfterValidator(_label_name)]
SafeValue = Annotated[str, AfterValidator(_safe_value)]
PromDuration = Annotated[str, AfterValidator(_prom_duration)]
PendingDuration = Annotated[str, AfterValidator(_alert_for)]  # an alert's `for`: 0s to 1h
Threshold = str | float | int


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

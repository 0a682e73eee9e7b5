"""Backtest stage, report: the episodes as a report, per alert and severity: how often
it fired, for how long, the longest episode, pages (critical) and warnings per day, each
episode's start and end; with a baseline spec, both side by side and the difference.
Formats: table (terminal), markdown (pull-request comment), json (machines)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime, timezone

from genobs.backtest.alerts import Episode
from genobs.backtest.rules import RuleSet
from genobs.errors import printable
from genobs.gates.table import render


def when(ts: float) -> str:
    return datetime.fromtimestamp(ts, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Result:
    rules: RuleSet
    episodes: tuple[Episode, ...]
    signals: dict = field(default_factory=dict, compare=False)  # (alert, severity) -> plot.Signal


@dataclass(frozen=True)
class Run:
    url: str
    start: float
    end: float
    candidate: Result
    baseline: Result | None = None

    @property
    def days(self) -> float:
        return (self.end - self.start) / 86400


def _keys(result: Result) -> list[tuple[str, str]]:
    return list(dict.fromkeys((a.name, a.severity) for a in result.rules.alerts))


def _stats(result: Result, key: tuple[str, str], run: Run) -> dict:
    eps = [e for e in result.episodes if (e.alert, e.severity) == key]
    durations = [e.duration(run.end) for e in eps]
    return {
        "fired": len(eps),
        "per_day": round(len(eps) / run.days, 3) if run.days else 0.0,
        "firing_seconds": round(sum(durations), 3),
        "longest_seconds": round(max(durations, default=0.0), 3),
    }


def _episode_doc(e: Episode, end: float) -> dict:
    return {
        "alert": e.alert,
        "severity": e.severity,
        "labels": dict(e.labels),
        "start": when(e.start),
        "end": when(e.end) if e.end is not None else None,
        "ongoing_at_end": e.end is None,
        "seconds": round(e.duration(end), 3),
    }


def totals(result: Result, run: Run) -> dict:
    pages = sum(1 for e in result.episodes if e.severity == "critical")
    warnings = sum(1 for e in result.episodes if e.severity == "warning")
    per_day = (lambda n: round(n / run.days, 3)) if run.days else (lambda n: 0.0)
    return {
        "pages": pages,
        "pages_per_day": per_day(pages),
        "warnings": warnings,
        "warnings_per_day": per_day(warnings),
    }


def _side(result: Result, run: Run) -> dict:
    return {
        "spec": result.rules.spec,
        "alerts": [{"alert": k[0], "severity": k[1], **_stats(result, k, run)} for k in _keys(result)],
        "episodes": [_episode_doc(e, run.end) for e in result.episodes],
        **totals(result, run),
    }


def to_json(run: Run) -> str:
    doc = {
        "prometheus": run.url,
        "from": when(run.start),
        "to": when(run.end),
        "days": round(run.days, 4),
        "candidate": _side(run.candidate, run),
    }
    if run.baseline is not None:
        doc["baseline"] = _side(run.baseline, run)
        doc["difference"] = {
            k: doc["candidate"][k] - doc["baseline"][k]
            for k in ("pages", "warnings", "pages_per_day", "warnings_per_day")
        }
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def human(seconds: float) -> str:
    """3d, 1h54m, 55m30s: the two largest units, like people write durations."""
    left, parts = int(round(seconds)), []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if left >= size or (unit == "s" and not parts):
            parts.append(f"{left // size}{unit}")
            left %= size
    return "".join(p for p in parts[:2] if not p.startswith("0") or len(parts) == 1)


SHOWN_VALUE = 80  # characters of a label value in a table (a long annotation stays readable; json has it all)


def _short(labels: tuple[tuple[str, str], ...]) -> str:
    hidden = {"alertname", "severity", "signal", "team", "spec", "slo"}
    return ", ".join(
        f"{k}={printable(v) if len(v) <= SHOWN_VALUE else printable(v[: SHOWN_VALUE - 3]) + '...'}"
        for k, v in labels
        if k not in hidden
    )


def to_text(run: Run, fmt: str) -> str:
    md = fmt == "markdown"
    table_fmt = "md" if md else "text"
    c, b = run.candidate, run.baseline
    head = f"spec {c.rules.spec} on {run.url}, {when(run.start)} .. {when(run.end)} ({run.days:.2f} days)"
    lines = [f"### genobs backtest: {head}" if md else f"backtest: {head}", ""]
    keys = list(dict.fromkeys([*_keys(c), *(_keys(b) if b else [])]))
    rows = []
    for key in keys:
        cs = _stats(c, key, run)
        if b is None:
            if cs["fired"]:
                rows.append(
                    [
                        key[0],
                        key[1],
                        str(cs["fired"]),
                        f"{cs['per_day']:g}",
                        human(cs["firing_seconds"]),
                        human(cs["longest_seconds"]),
                    ]
                )
            continue
        bs = _stats(b, key, run)
        if cs["fired"] or bs["fired"]:
            diff = cs["fired"] - bs["fired"]
            rows.append(
                [
                    key[0],
                    key[1],
                    str(bs["fired"]),
                    str(cs["fired"]),
                    f"{diff:+d}" if diff else "0",
                    human(bs["firing_seconds"]),
                    human(cs["firing_seconds"]),
                ]
            )
    header = (
        ["alert", "severity", "fired", "per day", "firing time", "longest"]
        if b is None
        else [
            "alert",
            "severity",
            "fired (baseline)",
            "fired",
            "change",
            "firing time (baseline)",
            "firing time",
        ]
    )
    silent = len(keys) - len(rows)
    if rows:
        lines += [render(header, rows, table_fmt), ""]
    lines.append(f"{silent} of {len(keys)} alert rules never fired")
    for label, result in ([("baseline", b)] if b else []) + [("spec" if b is None else "candidate", c)]:
        t = totals(result, run)
        lines.append(
            f"{label} {result.rules.spec}: {t['pages']} pages ({t['pages_per_day']:g}/day), "
            f"{t['warnings']} warnings ({t['warnings_per_day']:g}/day)"
        )
    for label, result in ([("baseline episodes", b)] if b else []) + [("candidate episodes" if b else "episodes", c)]:
        if not result.episodes:
            continue
        lines += ["", f"{label} ({result.rules.spec}):"]
        eps = [
            [
                when(e.start),
                when(e.end) if e.end is not None else "(still firing)",
                human(e.duration(run.end)),
                e.alert,
                e.severity,
                _short(e.labels),
            ]
            for e in result.episodes
        ]
        lines.append(render(["start", "end", "duration", "alert", "severity", "labels"], eps, table_fmt))
    return "\n".join(lines) + "\n"

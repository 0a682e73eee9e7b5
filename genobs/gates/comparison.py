"""Side-by-side verdicts of `genobs compare`: a KPI regresses when the candidate
breaks the spec's threshold (the alert's warning level, or an SLO objective) or is
worse than the baseline by more than the tolerance."""

from __future__ import annotations

from dataclasses import dataclass

from genobs.gates.kpis import fmt
from genobs.gates.promtable import Query
from genobs.gates.thresholds import SpecGates

OK, REGRESSION, BREACH, IMPROVED, NO_DATA, INFO = "ok", "REGRESSION", "BREACH", "improved", "no data", "info"
MISSING = "NO DATA"  # a gated KPI the candidate has no samples for: the gate fails closed
FAILING = (REGRESSION, BREACH, MISSING)
JUDGED = (OK, IMPROVED, REGRESSION, BREACH)
# a failure share's relative change means nothing below this many failed requests in the window
MIN_FAILURES = 10


def show(value: float | None, unit: str) -> str:
    if value is None:
        return "—"
    if unit == "ratio":
        return f"{value * 100:.2f} %"
    if unit == "x":
        return f"{value:.2f} : 1"
    if unit == "per request":
        return f"{value:.4f}"
    return fmt(value, unit)


@dataclass
class CompareRow:
    query: Query
    baseline: float | None
    candidate: float | None
    threshold: str = ""
    verdict: str = INFO
    note: str = ""

    @property
    def change(self) -> float | None:
        if self.baseline is None or self.candidate is None or self.baseline == 0:
            return None
        return self.candidate / self.baseline - 1.0


def _worse(q: Query, b: float, c: float, tolerance: float, requests: tuple[float, float]) -> tuple[bool, bool, str]:
    """(worse beyond tolerance, better beyond tolerance, note). `requests`: finished requests per side in the window."""
    if q.better == "none":
        return False, False, ""
    if q.complement:  # 99.9 % -> 99.0 % is ten times the failures, not a 1 % change
        b, c = 1.0 - b, 1.0 - c
        if max(b * requests[0], c * requests[1]) < MIN_FAILURES:
            return False, False, ""
        sign = 1.0
        what = "failures"
    else:
        sign = 1.0 if q.better == "lower" else -1.0
        what = ""
    delta = (c - b) * sign
    if abs(delta) <= q.floor:
        return False, False, ""
    rel = None if b == 0 else abs(c / b - 1.0)
    beyond = rel is None or rel > tolerance
    note = ""
    if what and beyond:
        factor = f" ({c / b:.1f}×)" if b else ""
        note = f"{what} {b * 100:.2f} % -> {c * 100:.2f} %{factor}"
    return delta > 0 and beyond, delta < 0 and beyond, note


def judge(
    gates: SpecGates,
    queries: list[Query],
    base: dict[str, float | None],
    cand: dict[str, float | None],
    tolerance: float,
    requests: tuple[float, float] = (float("inf"), float("inf")),
) -> list[CompareRow]:
    rows = []
    for q in queries:
        b, c = base.get(q.key), cand.get(q.key)
        row = CompareRow(q, b, c)
        level = gates.gate(q.alert) if q.alert else None
        if level is not None:
            sign = "≤" if level.comparator == ">" else "≥"
            row.threshold = f"{sign} {level.text} ({gates.alert_name(q.alert)} {level.severity})"
        elif q.objective is not None:
            row.threshold = f"≥ {q.objective * 100:g} % (SLO objective)"
        if q.better == "none":
            row.verdict = INFO
            rows.append(row)
            continue
        if b is None or c is None:
            # a threshold, or a baseline that had the KPI, makes the candidate's gap a failure
            row.verdict = MISSING if c is None and (row.threshold or b is not None) else NO_DATA
            row.note = "no samples on " + (
                "either side" if b is None and c is None else "the baseline" if b is None else "the candidate"
            )
            rows.append(row)
            continue
        notes = []
        breach = level.breached(c) if level is not None else (q.objective is not None and c < q.objective)
        breached_before = level.breached(b) if level is not None else (q.objective is not None and b < q.objective)
        if q.complement and breach and (1.0 - c) * requests[1] < MIN_FAILURES:
            # 3 failures in 400 requests read as 99.25 %: not evidence of a breach
            breach = False
            notes.append(f"{(1.0 - c) * requests[1]:.0f} failed requests: too few to judge the threshold")
        if q.complement and breached_before and (1.0 - b) * requests[0] < MIN_FAILURES:
            breached_before = False
        if breach:
            notes.append("candidate breaks the threshold" + (" (baseline too)" if breached_before else ""))
        worse, better, why = _worse(q, b, c, tolerance, requests)
        if worse:
            change = row.change
            notes.append(
                why
                or (
                    f"worse by {abs(change) * 100:.0f} % (tolerance {tolerance * 100:g} %)"
                    if change is not None
                    else "worse than a zero baseline"
                )
            )
        elif better and why:
            notes.append(why)
        # newly breaking the threshold or getting worse is a regression; breaking it as before still fails
        if worse or (breach and not breached_before):
            row.verdict = REGRESSION
        elif breach:
            row.verdict = BREACH
        else:
            row.verdict = IMPROVED if better else OK
        row.note = "; ".join(notes)
        rows.append(row)
    return rows


def profile_warnings(rows: list[CompareRow], tolerance: float) -> list[str]:
    """The handbook's rule: compare under a frozen load profile. Say when the two sides' loads differ."""
    out = []
    for r in rows:
        if not r.query.profile or r.change is None:
            continue
        if abs(r.change) > tolerance:
            out.append(
                f"load profile differs: {r.query.title} {show(r.baseline, r.query.unit)} -> "
                f"{show(r.candidate, r.query.unit)} ({r.change * 100:+.0f} %); latency and speed are only comparable "
                "under the same prompt-length mix, output-length mix and concurrency"
            )
    return out


def nothing_judged(rows: list[CompareRow]) -> bool:
    """No KPI had data on both sides: a gate never passes blind."""
    return not any(r.verdict in JUDGED for r in rows)


def failed(rows: list[CompareRow]) -> bool:
    return nothing_judged(rows) or any(r.verdict in FAILING for r in rows)

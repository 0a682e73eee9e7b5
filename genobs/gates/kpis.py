"""Judge benchmark runs by the use case's KPIs (genobs/data/gates.yaml) with the
spec's resolved thresholds: per-user figures against per-user thresholds, system
figures shown beside them and never compared with a per-user number."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from genobs.gates.runs import METRICS, TITLES, Run
from genobs.gates.sweep import RATE, load, load_text, sweep_axis, sweep_of
from genobs.gates.thresholds import Level, SpecGates, gate_data

PASS, FAIL, NO_DATA, INFO, NA = "pass", "FAIL", "no data", "info", "n/a"
GATING = (PASS, FAIL, NO_DATA)  # verdicts that decide the exit code
STREAMING = frozenset({"ttft", "tpot", "itl", "output_tps_per_user", "prefill_tps_per_user"})


@dataclass
class Row:
    run: str
    kpi: str
    value: float | None
    unit: str
    threshold: str = ""
    verdict: str = INFO
    note: str = ""
    derived: str = ""
    baseline: float | None = None
    caveat: str = ""  # the figure is not the statistic genobs defines (e.g. a median for a mean)

    @property
    def change(self) -> float | None:
        if self.value is None or not self.baseline:
            return None
        return self.value / self.baseline - 1.0


@dataclass
class RunReport:
    run: Run
    warnings: list[str] = field(default_factory=list)


@dataclass
class Report:
    spec: SpecGates
    runs: list[RunReport]
    rows: list[Row]
    baseline: list[Run] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        """A gated KPI failed or lacks data, or nothing could be judged at all: a gate never passes blind."""
        gated = [r for r in self.rows if r.verdict in GATING]
        return not gated or any(r.verdict != PASS for r in gated)

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0


def fmt(value: float | None, unit: str) -> str:
    """Value with its unit, in the unit the use case is felt in (ms below a second)."""
    if value is None:
        return "—"
    if unit == "s":
        if abs(value) < 1:
            return f"{value * 1000:.0f} ms"
        return f"{value:.2f} s" if abs(value) < 10 else f"{value:.1f} s" if abs(value) < 100 else f"{value:,.0f} s"
    if unit == "tok":
        return f"{value:,.0f} tok"
    if unit == "x":
        return f"{value:.2f}×"
    if unit == "%":
        return f"{value * 100:+.1f} %"
    mag = abs(value)
    text = f"{value:,.0f}" if mag >= 100 else f"{value:.1f}" if mag >= 10 else f"{value:.2f}"
    return f"{text} {unit}".strip()


def _pass_text(level: Level, unit: str) -> str:
    """The passing side of an alert threshold, in the alert's own words: firing above 1s passes at <= 1s."""
    sign = "≤" if level.comparator == ">" else "≥"
    return f"{sign} {level.text or fmt(level.value, unit)}"


def _kpi_name(metric: str, stat: str) -> str:
    # system throughputs have one figure per run; per-request distributions name their statistic
    single = METRICS[metric][0] in ("tok/s", "req/s") and stat == "avg"
    return TITLES[metric] if single else f"{TITLES[metric]} ({stat})"


def _missing_note(run: Run, metric: str) -> str:
    if metric in STREAMING and run.workload.streaming is False:
        return "not measured: the run did not stream (TTFT, ITL and per-user speeds need a streaming run)"
    return "not in the export"


def _alert_row(spec: SpecGates, run: Run, kpi: dict, row: Row) -> Row:
    level = spec.gate(kpi["alert"])
    alert = spec.alert_name(kpi["alert"])
    if level is None:
        row.threshold = f"none ({alert} is off in spec {spec.name})"
        return row
    row.threshold = f"{_pass_text(level, row.unit)} ({alert} {level.severity})"
    if row.value is None:
        row.verdict, row.note = NO_DATA, row.note or _missing_note(run, kpi["metric"])
        return row
    row.verdict = FAIL if level.breached(row.value) else PASS
    critical = spec.level(kpi["alert"], "critical")
    if row.verdict == FAIL and critical is not None and critical.breached(row.value):
        row.note = f"beyond the critical level too ({critical.comparator} {critical.text})"
    return row


def _prefill_row(spec: SpecGates, run: Run, kpi: dict, row: Row) -> Row:
    ref = gate_data()["rules"]["prefill_for_reference_input"]["reference_input_tokens"]
    level = spec.gate(kpi["alert"])
    if level is None:
        row.threshold = f"none ({spec.alert_name(kpi['alert'])} is off in spec {spec.name})"
        return row
    need = ref / level.value
    row.threshold = (
        f"≥ {fmt(need, row.unit)} ({ref:,}-token input within TTFT {level.text}, "
        f"{spec.alert_name(kpi['alert'])} {level.severity})"
    )
    if row.value is None:
        row.verdict, row.note = NO_DATA, row.note or _missing_note(run, kpi["metric"])
        return row
    row.verdict = FAIL if row.value < need else PASS
    wait = f"~{fmt(ref / row.value, 's')}" if row.value > 0 else "forever (no prefill progress)"
    row.note = row.note or f"a {ref:,}-token input waits {wait} for prefill"
    return row


def run_label(index: int, run: Run) -> str:
    w = run.workload
    if w.rate is not None:
        return f"run {index} ({w.rate:g} req/s)"
    if w.concurrency is None:
        return f"run {index}"
    # a measured mean is rounded and marked: c≈4.2, a configured limit as set: c=4
    return f"run {index} (c≈{w.concurrency:.1f})" if w.concurrency_note else f"run {index} (c={w.concurrency:g})"


def _degradation_row(run: Run, kpi: dict, stat: str, base: Run | None, base_label: str) -> Row:
    factor = gate_data()["rules"]["degradation_vs_baseline"]["max_factor"]
    row = Row("", f"{TITLES[kpi['metric']]} ({stat}) vs {base_label}", None, "x", f"≤ {factor:g}×")
    if base is None:
        row.verdict, row.note = NA, "needs --baseline RESULT or a sweep"
        return row
    if base is run:
        row.verdict, row.note = NA, "this run is the reference"
        return row
    mine, theirs = run.get(kpi["metric"], [stat]), base.get(kpi["metric"], [stat])
    if mine is None or theirs is None or theirs[1].value <= 0:
        row.verdict, row.note = (
            NO_DATA,
            f"{TITLES[kpi['metric']]} {stat} missing in {'this run' if mine is None else base.path}",
        )
        return row
    row.value = mine[1].value / theirs[1].value
    row.verdict = FAIL if row.value > factor else PASS
    row.note = f"{fmt(theirs[1].value, 's')} -> {fmt(mine[1].value, 's')}"
    return row


def workload_warnings(run: Run, use_case: str) -> list[str]:
    w, limits = run.workload, gate_data()["workload"]
    out = []
    missing = [
        name
        for name, value in (
            ("input length", w.input_tokens),
            ("output length", w.output_tokens),
            ("concurrency", w.concurrency if w.request_rate is None else 1),
            ("duration", w.duration_s),
            ("request count", w.requests),
        )
        if value is None
    ]
    if missing:
        out.append(f"workload not stated: {', '.join(missing)} missing; speeds are only comparable with the workload")
    small = []
    if w.requests is not None and w.requests < limits["min_requests"]:
        small.append(f"{w.requests:g} requests (< {limits['min_requests']})")
    if w.duration_s is not None and w.duration_s < limits["min_duration_s"]:
        small.append(f"{fmt(w.duration_s, 's')} (< {limits['min_duration_s']} s)")
    if small:
        out.append(f"workload too small to trust: {' in '.join(small)}; p99 of so few requests is noise")
    if w.failed:
        out.append(f"{w.failed:g} requests failed; their latency is not in the figures")
    ref = gate_data()["rules"]["prefill_for_reference_input"]["reference_input_tokens"]
    if use_case == "rag" and w.input_tokens is not None and w.input_tokens < ref / 2:
        out.append(
            f"mean input is {w.input_tokens:,.0f} tokens: RAG KPIs are stated for long inputs ({ref:,} tokens), "
            "so this run says little about long-context prefill"
        )
    return out


def _match(run: Run, baseline: list[Run]) -> Run | None:
    if len(baseline) == 1:
        return baseline[0]
    axis = RATE if run.workload.rate is not None else "concurrency"
    same = [b for b in baseline if load(b, axis) == load(run, axis)]
    return same[0] if len(same) == 1 else None


def _gain(before: float, after: float) -> float:
    """Relative change; from zero (every request failed) any output is an unbounded rise, none is no rise."""
    if before > 0:
        return after / before - 1.0
    return math.inf if after > 0 else 0.0


def _rises_row(sweep: list[Run], kpi: dict) -> Row:
    min_gain = gate_data()["rules"]["rises_with_concurrency"]["min_gain"]
    metric = kpi["metric"]
    axis = sweep_axis(sweep) or "concurrency"
    c = [load(r, axis) or 0.0 for r in sweep]
    label = f"sweep, {axis} {c[0]:g}..{c[-1]:g}" if sweep else "sweep"
    row = Row(label, f"{TITLES[metric]} rises with {axis}", None, "%", f"each step ≥ +{min_gain:.0%}")
    if not sweep:
        row.verdict, row.note = NA, "needs a sweep: several runs at different concurrency or request rate"
        return row
    values = [r.get(metric, kpi["stat"]) for r in sweep]
    if None in values:
        row.verdict, row.note = NO_DATA, f"{TITLES[metric]} missing in {sweep[values.index(None)].path}"
        return row
    gains = [_gain(values[i - 1][1].value, values[i][1].value) for i in range(1, len(values))]
    stop = next((i for i, g in enumerate(gains) if g < min_gain), None)
    row.value = gains[stop] if stop is not None else min(gains)
    if stop is None:
        row.verdict, row.note = PASS, f"still rising at {load_text(c[-1], axis)}"
    else:
        row.verdict = FAIL
        row.note = f"stops rising above {load_text(c[stop], axis)} ({c[stop]:g} -> {c[stop + 1]:g})"
    return row


def _per_user_ceiling(spec: SpecGates, sweep: list[Run], kpi: dict) -> Row | None:
    level = spec.gate(kpi["alert"])
    if not sweep or level is None:
        return None
    axis = sweep_axis(sweep) or "concurrency"
    ok = [r for r in sweep if (v := r.get(kpi["metric"], kpi["stat"])) and not level.breached(v[1].value)]
    best = max((load(r, axis) or 0.0 for r in ok), default=None)
    row = Row(
        "sweep",
        f"highest {axis} with {TITLES[kpi['metric']]} {_pass_text(level, METRICS[kpi['metric']][0])}",
        None if best is None else round(best, 1),
        "req/s" if axis == RATE else "",
        verdict=INFO,
    )
    row.note = "no run meets it" if best is None else ""
    return row


def evaluate(spec: SpecGates, runs: list[Run], baseline: list[Run] | None = None) -> Report:
    kpis = gate_data()["kpis"][spec.use_case]
    baseline = baseline or []
    rows: list[Row] = []
    sweep = sweep_of(runs)
    for index, run in enumerate(runs, 1):
        base = _match(run, baseline)
        for kpi in kpis:
            metric = kpi["metric"]
            unit = METRICS[metric][0]
            if kpi.get("rule") == "degradation_vs_baseline":
                stat = kpi["stat"][0]
                ref = base if base is not None else (sweep[0] if sweep else None)
                axis = sweep_axis(sweep) or "concurrency"
                label = "baseline" if base is not None or ref is None else load_text(load(ref, axis) or 0.0, axis)
                row = _degradation_row(run, kpi, stat, ref, label)
                row.run = run_label(index, run)
                rows.append(row)
                continue
            found = run.get(metric, kpi["stat"])
            stat = found[0] if found else kpi["stat"][0]
            row = Row(run_label(index, run), _kpi_name(metric, stat), found[1].value if found else None, unit)
            row.derived = found[1].derived if found else ""
            row.caveat = found[1].caveat if found else ""
            if base is not None and (b := base.get(metric, [stat])):
                row.baseline = b[1].value
            if kpi.get("rule") == "prefill_for_reference_input":
                rows.append(_prefill_row(spec, run, kpi, row))
            elif kpi.get("alert"):
                rows.append(_alert_row(spec, run, kpi, row))
            else:
                row.note = row.note or ("" if found else "not in the export")
                rows.append(row)
    for kpi in kpis:
        if kpi.get("rule") == "rises_with_concurrency":
            rows.append(_rises_row(sweep, kpi))
        elif kpi["metric"] == "output_tps_per_user" and kpi.get("alert") and len(runs) > 1:
            ceiling = _per_user_ceiling(spec, sweep, kpi)
            if ceiling is not None:
                rows.append(ceiling)
    reports = [RunReport(r, workload_warnings(r, spec.use_case)) for r in runs]
    return Report(spec, reports, rows, baseline)

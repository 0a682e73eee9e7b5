"""Which load a set of benchmark runs varies: a request-rate sweep (every run states a distinct
arrival rate) or a concurrency sweep (every run states a distinct concurrency). genobs.gates.kpis
judges along it, genobs.commands.benchmark plots along it."""

from __future__ import annotations

from genobs.gates.runs import Run

RATE, CONCURRENCY = "request rate", "concurrency"


def load(run: Run, axis: str) -> float | None:
    """The run's position on the axis: its arrival rate in req/s or its concurrency."""
    return run.workload.rate if axis == RATE else run.workload.concurrency


def _set_load(run: Run, axis: str) -> float | None:
    """The load the run was given; a measured concurrency (a rate run's mean, a peak) was not varied."""
    return None if axis == CONCURRENCY and run.workload.concurrency_note else load(run, axis)


def sweep_axis(runs: list[Run]) -> str | None:
    """RATE before CONCURRENCY; every run must state the load it was given, all different."""
    if len(runs) < 2:
        return None
    for axis in (RATE, CONCURRENCY):
        values = [_set_load(r, axis) for r in runs]
        if None not in values and len(set(values)) == len(values):
            return axis
    return None


def sweep_of(runs: list[Run]) -> list[Run]:
    """Runs ordered along their sweep axis when they form a sweep, else []."""
    axis = sweep_axis(runs)
    return sorted(runs, key=lambda r: load(r, axis) or 0.0) if axis else []


def load_text(value: float, axis: str) -> str:
    """3 req/s, or concurrency 4 (a measured mean concurrency rounded: 4.2)."""
    return f"{value:g} req/s" if axis == RATE else f"concurrency {round(value, 1):g}"

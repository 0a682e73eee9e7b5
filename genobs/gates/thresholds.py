"""Gate thresholds come from the spec's plan: the same resolved alert thresholds
(signal default, use-case preset, spec override) that page in production, so a
benchmark or a before/after comparison is judged by the numbers the spec compiles to."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from genobs import data as data_files
from genobs import naming


@dataclass(frozen=True)
class Level:
    severity: str
    value: float
    comparator: str  # ">" fires above, "<" fires below
    text: str  # "1s", "20 tok/s/user"

    def breached(self, value: float) -> bool:
        return value > self.value if self.comparator == ">" else value < self.value


@dataclass(frozen=True)
class SpecGates:
    name: str
    use_case: str
    engine_version: str
    levels: dict[str, tuple[Level, ...]]  # alert key (gates.yaml: TtftP99High) -> levels, warning first
    plan: object  # genobs.plan.model.Plan
    spec: object = None  # genobs.spec.Spec the plan was built from

    def alert_name(self, key: str) -> str:
        """The alert as the spec's engine names it (VllmTtftP99High, SglangTtftP99High); a
        gateway alert keeps its own name on every engine (GatewayTtftP99High)."""
        if key in _gateway_alerts():
            return key
        return naming.alert(getattr(self.plan, "alert_prefix", ""), key, getattr(self.plan, "alert_renames", ()))

    def gate(self, alert: str) -> Level | None:
        """The level that gates: warning (the sources' warning threshold), else the first one."""
        levels = self.levels.get(alert, ())
        return next((lv for lv in levels if lv.severity == "warning"), levels[0] if levels else None)

    def level(self, alert: str, severity: str) -> Level | None:
        return next((lv for lv in self.levels.get(alert, ()) if lv.severity == severity), None)


@functools.cache
def _gateway_alerts() -> frozenset[str]:
    """The gateway's alert names (genobs/data/gateway.yaml), never prefixed by the pods' engine."""
    return frozenset(data_files.load("gateway.yaml")["alerts"])


_ORDER = {"warning": 0, "critical": 1, "info": 2}


def load_gates(spec: Path) -> SpecGates:
    """Load and plan SPEC (raises SpecError with file/line/field like `build`)."""
    from genobs.compiler import build_plan
    from genobs.loader import load_spec

    doc = load_spec(spec)
    plan = build_plan(doc)
    levels: dict[str, list[Level]] = {}
    for a in plan.alerts:
        if a.threshold is None or not a.comparator:
            continue
        levels.setdefault(a.key, []).append(Level(a.severity, a.threshold, a.comparator, a.threshold_text))
    return SpecGates(
        name=plan.name,
        use_case=plan.use_case,
        engine_version=plan.engine_version,
        levels={k: tuple(sorted(v, key=lambda lv: _ORDER.get(lv.severity, 9))) for k, v in levels.items()},
        plan=plan,
        spec=doc.spec,
    )


@functools.cache
def gate_data() -> dict:
    return data_files.load("gates.yaml")

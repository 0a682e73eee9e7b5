"""The compiler: load → `plan` (rules, dashboard, runbook) → `testgen` (promtool unit
tests of those rules). Every command that needs a spec's whole output goes through here;
`genobs.plan` never imports `genobs.testgen`, which reads the plan's modules."""

from __future__ import annotations

from dataclasses import replace

from genobs.errors import SpecError
from genobs.loader import SpecDocument
from genobs.plan import assemble, plan_problems
from genobs.plan.model import Plan
from genobs.testgen.unittests import build_unit_tests


def build_plan(doc: SpecDocument) -> Plan:
    """The Plan of a loaded spec, its generated unit tests and their notes included."""
    a = assemble(doc)
    overall = frozenset(a.plan.global_slos)
    unit_tests, notes = build_unit_tests(a.ctx, a.rec, a.tested, a.plan.name, overall)
    if a.gateway is not None:  # the gateway's alerts, on the gateway's own series
        gctx, grec, groups = a.gateway
        more, more_notes = build_unit_tests(gctx, grec, groups, a.plan.name, overall, layer="gateway")
        unit_tests, notes = unit_tests + more, notes + more_notes
    if a.client is not None:  # the application's alerts, on its own series
        cctx, crec, groups = a.client
        more, more_notes = build_unit_tests(cctx, crec, groups, a.plan.name, overall, layer="client")
        unit_tests, notes = unit_tests + more, notes + more_notes
    if a.cap is not None and a.cap_group is not None:
        from genobs.testgen.capacity import build_capacity_tests

        unit_tests += build_capacity_tests(a.ctx, a.cap, a.tested[0], a.cap_group, a.plan.name)
    return replace(a.plan, unit_tests=unit_tests, warnings=a.plan.warnings + tuple(notes))


def load_plan(path=None, *, text: str | None = None, file: str = "<spec>") -> tuple[SpecDocument, Plan]:
    """load then plan a spec file (or `text`); a SpecError lists every problem of both stages."""
    from genobs.loader import load_spec, load_spec_text

    try:
        doc = load_spec(path) if text is None else load_spec_text(text, file)
    except SpecError as exc:
        raise plan_problems(exc) from None
    return doc, build_plan(doc)


def unit_tests_and_notes(doc: SpecDocument) -> tuple[tuple[tuple[str, dict], ...], list[str]]:
    """Unit tests of a spec plus notes on what they cannot cover."""
    plan = build_plan(doc)
    return plan.unit_tests, list(plan.warnings)


__all__ = ["build_plan", "load_plan", "unit_tests_and_notes"]

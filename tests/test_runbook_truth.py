"""What on-call reads when paged: every first action starts with what can be done now,
the liveness alerts each say what they mean, and the dashboard colours the side of a
threshold that fires red. Expectations are written here by hand (from DOMAIN.md and the
alert semantics), not read back from the signal data."""

from __future__ import annotations

import functools
import re

import pytest

from genobs.compiler import load_plan
from genobs.render.dashboard import flat_panels, render_dashboard
from tests.conftest import SPECS

# what on-call can do within minutes, before any investigation
NOW = re.compile(
    r"\b(roll(ed)? (it |them )?back|roll back|shed|scale out|restart|delete it|drain|evict|raise maxReplicas"
    r"|pause|stop)\b",
    re.IGNORECASE,
)


@functools.cache
def plan(path):
    return load_plan(path)[1]


def entries(p):
    """(alert, meaning, first action) of every runbook section, SLO sections included."""
    out = [(e.alert, e.meaning, e.first_action) for e in p.runbook]
    out += [(e["alert"], e["meaning"], e["first_action"]) for e in p.slo_runbook]
    return out


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_every_first_action_starts_with_what_on_call_can_do_now(path):
    for alert, _, action in entries(plan(path)):
        assert action.startswith("Now: "), (alert, action)
        now, *then = re.split(r"\. (?:Then|Before)\b", action, maxsplit=1)
        assert NOW.search(now), f"{alert}: the first step names no immediate action: {now!r}"
        assert then, f"{alert}: no follow-up (investigation or capacity work) after the first step"


def test_target_down_metrics_absent_and_hang_each_have_their_own_meaning_and_action():
    p = plan(next(s for s in SPECS if s.stem == "chat"))
    texts = {alert: (meaning, action) for alert, meaning, action in entries(p)}
    liveness = [
        "VllmTargetDown",
        "VllmServingCapacityLost",
        "VllmMetricsAbsent",
        "VllmEngineHung",
        "VllmFleetNoProgress",
    ]
    assert set(liveness) <= set(texts)
    meanings = [texts[a][0] for a in liveness]
    actions = [texts[a][1] for a in liveness]
    assert len(set(actions)) == len(liveness), actions
    assert len(set(meanings)) == len(liveness), meanings
    # each says what it is about, in the words on-call searches for
    assert "15 minutes" in texts["VllmTargetDown"][0] and "loading" in texts["VllmTargetDown"][0]
    assert "capacity" in texts["VllmServingCapacityLost"][0]
    assert "--disable-log-stats" in texts["VllmMetricsAbsent"][0]
    # a real vLLM engine core stopped while idle freezes its gauges at 0: the hang text says so
    assert "held nothing" in texts["VllmEngineHung"][0] and "freeze" in texts["VllmEngineHung"][0]
    assert texts["VllmEngineHung"][1].startswith("Now: restart the pod of the named instance")
    assert "roll back" in texts["VllmFleetNoProgress"][1].split(". Then")[0]


# Dashboard panels with threshold lines and the side that is bad, written by hand.
BAD_SIDE = {
    "Time to first token": "high",
    "Inter-token latency": "high",
    "End-to-end latency": "high",
    "Queue time": "high",
    "NIXL transfer time": "high",
    "NIXL failure and expiry ratios": "high",
    "KV transfer time": "high",  # SGLang's names of the two above
    "KV transfer failure and expiry ratios": "high",
    "Length and abort finishes": "high",
    "KV cache usage": "high",
    "Running vs waiting requests": "high",
    "Preemptions": "high",
    "Running requests per engine vs max_num_seqs": "high",
    "Success rate": "low",
    "Output speed per user (tok/s/user)": "low",
    "Speculative-decoding acceptance alpha": "low",
    "Goodput share": "low",
    "System efficiency": "low",
    "GPU utilisation per pod": "high",
    "Waiting requests per pod": "high",
    "GPU framebuffer used: emptiest GPU per pod": "low",
    "GPU framebuffer used: fullest GPU per pod": "high",
}
SLO_BAD_SIDE = {"SLI vs objective": "low", "error budget remaining": "low", "burn rate per window": "high"}


def bad_side(title: str) -> str:
    if title in BAD_SIDE:
        return BAD_SIDE[title]
    for part, side in SLO_BAD_SIDE.items():
        if title.startswith("SLO ") and part in title:
            return side
    raise AssertionError(f"panel {title!r} has thresholds but no expected bad side in this test")


def colour_at(steps: list[dict], value: float) -> str:
    """Grafana: a step's colour applies from its value upward; the first step has value null."""
    colour = steps[0]["color"]
    for step in steps[1:]:
        if value >= step["value"]:
            colour = step["color"]
    return colour


@pytest.mark.parametrize("path", SPECS, ids=lambda p: p.stem)
def test_dashboard_threshold_colours_are_red_on_the_side_that_fires(path):
    board = render_dashboard(plan(path).dashboard)
    checked = 0
    for panel in flat_panels(board):
        defaults = panel.get("fieldConfig", {}).get("defaults", {})
        steps = defaults.get("thresholds", {}).get("steps", [])
        if len(steps) < 2:
            continue
        checked += 1
        assert steps[0]["value"] is None
        values = [s["value"] for s in steps[1:]]
        assert values == sorted(values), panel["title"]
        low, high = min(values), max(values)
        worst, best = (high + abs(high) + 1, low - abs(low) - 1)
        if bad_side(panel["title"]) == "low":
            worst, best = best, worst
        assert colour_at(steps, worst) == "red", (panel["title"], steps)
        assert colour_at(steps, best) == "green", (panel["title"], steps)
        assert defaults["custom"]["thresholdsStyle"]["mode"] != "off"
    assert checked >= 8


def section(runbook: str, alert: str) -> str:
    start = runbook.index(f"\n## {alert}\n")
    end = runbook.find("\n## ", start + 1)
    return runbook[start : end if end > 0 else None]


def test_slo_burn_sections_show_every_window_of_the_alert_with_its_factor():
    from genobs.render.runbook import render_runbook

    p = plan(next(s for s in SPECS if s.stem == "chat"))
    text = render_runbook(p, "chat")
    burns = [a for a in p.alerts if "ErrorBudgetBurn" in a.name]
    assert len(burns) >= 4
    for alert in burns:
        # (window, factor) of every comparison in the rule itself: "genobs:slo_burn_rate:rate1h{...} > 14.4"
        pairs = re.findall(r"genobs:slo_burn_rate:rate(\w+)\{[^}]*\} > ([\d.]+)", alert.expr)
        assert len(pairs) == 4, alert.expr  # two long/short pairs per alert
        body = section(text, alert.name)
        for window, factor in pairs:
            assert re.search(rf"\| (long|short) {window} \| > {re.escape(factor)} \| `genobs:slo_burn_rate:rate{window}\{{", body), (
                alert.name,
                window,
                factor,
            )
        every = re.search(r"```promql\n(\{__name__=~\"[^\n]+)\n```", body).group(1)
        assert sorted(re.findall(r"genobs:slo_burn_rate:rate(\w+)", every)) == sorted(w for w, _ in pairs)

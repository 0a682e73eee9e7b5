"""Part of the `plan` stage (promtool unit tests): alerts that compare a recorded series with
its own recent average cannot fire on a fleet that is faulty from the start, so their tests
feed the alert group hours of the recorded series, steady and then collapsed."""

from __future__ import annotations

from genobs import naming
from genobs.plan.alerts import TOKENS_BASELINE_OFFSET
from genobs.plan.context import Context
from genobs.plan.model import AlertRule, RuleGroup
from genobs.testgen.humanize import expected_alert
from genobs.testgen.unittests_fleet import EVALUATION_STEP, series_entry
from genobs.units import prom_duration_seconds

# alert key -> the recorded series it compares with its own average
BASELINE_ALERTS = {"OutputTokensCollapsed": "generation_length_mean"}
STEADY = 250.0  # output tokens per finished request before the collapse
STEP_MINUTES = 1  # the recorded series sampled every minute, as the other generated tests sample


def baseline_tests(
    ctx: Context, names: dict[str, str], alerts: RuleGroup, labels: dict[str, str], spec_name: str
) -> tuple[tuple[str, dict], ...]:
    """One test file: for each baseline alert, a steady model that stays silent and one whose
    figure collapses (below the lowest threshold's share of the steady value) that fires."""
    rules = [r for r in alerts.rules if isinstance(r, AlertRule) and r.key in BASELINE_ALERTS]
    if not rules:
        return ()
    # steady for the baseline's offset: at the last check the baseline window still ends before
    # most of the collapse (generated tests stay within rate window + `for` + a few minutes)
    steady_minutes = round(prom_duration_seconds(TOKENS_BASELINE_OFFSET) / 60)
    hold = max(round(prom_duration_seconds(r.for_) / 60) for r in rules)
    after = hold + 15  # minutes after the collapse at which every severity fires (an even step)
    steps_before, steps_after = steady_minutes // STEP_MINUTES, after // STEP_MINUTES
    traffic = series_entry(names["finished"], labels, f"{max(1.0, ctx.min_request_rate * 10):g}x{steps_before + steps_after}")
    tests = []
    for name in dict.fromkeys(r.name for r in rules):
        own = [r for r in rules if r.name == name]
        lowest = min(r.threshold or 0.0 for r in own)
        collapsed = 1.0 if lowest * STEADY > 1.0 else 0.0  # one token per request: every answer empty
        series = names[BASELINE_ALERTS[own[0].key]]
        steady = series_entry(series, labels, f"{STEADY:g}x{steps_before + steps_after}")
        broken = series_entry(series, labels, f"{STEADY:g}x{steps_before - 1} {collapsed:g}x{steps_after}")
        fires = [expected_alert(r, labels, collapsed) for r in own if collapsed < (r.threshold or 0.0) * STEADY]
        collapse_at = steps_before * STEP_MINUTES
        tests += [
            {
                "name": f"{name}: steady at {STEADY:g}, silent",
                "interval": f"{STEP_MINUTES}m",
                "input_series": [steady, dict(traffic)],
                "alert_rule_test": [{"eval_time": f"{collapse_at + after}m", "alertname": name, "exp_alerts": []}],
            },
            {
                "name": f"{name}: {STEADY:g} for {collapse_at}m, then {collapsed:g}",
                "interval": f"{STEP_MINUTES}m",
                "input_series": [broken, dict(traffic)],
                "alert_rule_test": [
                    {"eval_time": f"{collapse_at + hold - 5}m", "alertname": name, "exp_alerts": []},
                    {"eval_time": f"{collapse_at + after}m", "alertname": name, "exp_alerts": fires},
                ],
            },
        ]
    document = {
        "rule_files": [f"../{naming.rule_file(spec_name, alerts.name)}"],
        "evaluation_interval": EVALUATION_STEP,
        "group_eval_order": [alerts.name],
        "tests": tests,
    }
    return (("baseline.test.yaml", document),)


__all__ = ["BASELINE_ALERTS", "baseline_tests"]

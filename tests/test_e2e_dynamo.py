"""End to end for the Dynamo frontend: `genobs simulate --engine dynamo` (a real process serving
dynamo_frontend_* with label `model`, names and buckets from its profile) scraped by Debian's
Prometheus as the gateway job of specs/dynamo.yaml, with every rule file genobs generated for it
(rate window 1m, evaluation 1s). Every rule evaluates cleanly, overload errors and a TTFT surge
raise their frontend alert on their own model, and neither the healthy model nor the model whose
clients cancel 30 % of their requests raises anything."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.e2e_support import (
    PROMETHEUS,
    active_alerts,
    alert_raised,
    assert_rules_healthy,
    poll,
    render_variant,
    rule_files_of,
    scraping_every_second,
)
from tests.test_e2e_engines import Simulate

pytestmark = pytest.mark.slow  # real servers on loopback

SPEC = REPO / "specs" / "dynamo.yaml"
QUIET = ("m-healthy", "m-abort_surge")  # abort_surge: 30 % error_type="cancelled", not a failure
# fault scenario of `genobs simulate --engine dynamo` -> the frontend alert it must raise
FAULTS = {"ttft_degradation": "GatewayTtftP99High", "success_drop": "GatewaySuccessRatioLow"}
DEADLINE = 150.0
WARMUP = 75.0


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    if not Path(PROMETHEUS).exists():
        pytest.fail("the prometheus server is required: install Debian's 'prometheus' package (make test does)")
    tmp = tmp_path_factory.mktemp("e2e-dynamo")
    out, spec = render_variant(SPEC, tmp, models=[])
    rule_files = rule_files_of(out)
    models = [f"--model={m}={m.removeprefix('m-')}" for m in QUIET] + [f"--model=m-{s}={s}" for s in FAULTS]
    sim = Simulate("--engine", "dynamo", "--request-rate", "20", "--fault-after", "5", *models)
    try:
        job = {
            "job_name": spec["gateway"]["selector"]["job"],
            "static_configs": [{"targets": [sim.instance], "labels": {"namespace": spec["gateway"]["selector"]["namespace"]}}],
        }
        with scraping_every_second(tmp, job, rule_files) as prom:
            yield prom, sim
    finally:
        sim.stop()


def test_simulated_frontend_serves_its_names_with_label_model(run) -> None:
    prom, sim = run
    assert sim.banner.startswith("serving simulated Dynamo frontend 1.6.1 metrics on ")
    names = set(prom.label_values("__name__"))
    assert {"dynamo_frontend_requests_total", "dynamo_frontend_time_to_first_token_seconds_bucket"} <= names
    got = prom.query('count by (model) (dynamo_frontend_active_requests{model="m-healthy"})')
    assert got, "the frontend's series carry `model`"


def test_rules_evaluate_cleanly(run) -> None:
    prom, _ = run
    assert_rules_healthy(prom)


def test_frontend_rate_is_recorded_once_under_model_name(run) -> None:
    prom, _ = run
    time.sleep(max(0.0, prom.started + WARMUP - time.monotonic()))
    got = poll(
        lambda: prom.query('genobs:gateway_requests:rate1m{model_name="m-healthy"}'), prom.started + 60, 0.5, "a rate"
    )
    assert len(got) == 1 and abs(float(got[0]["value"][1]) - 20.0) < 1.0, got
    success = prom.query('genobs:gateway_request_success:ratio_rate1m{model_name="m-abort_surge"}')
    assert success and float(success[0]["value"][1]) > 0.999, success  # cancellations are not failures


@pytest.mark.parametrize("scenario", sorted(FAULTS))
def test_fault_raises_its_frontend_alert(run, scenario: str) -> None:
    prom, _ = run
    model, alert = f"m-{scenario}", FAULTS[scenario]

    if alert_raised(prom, model, "alertname", alert, prom.started + DEADLINE) is None:
        pytest.fail(f"{scenario}: no {alert} for {model}; active: {active_alerts(prom)}")


def test_quiet_models_stay_silent(run) -> None:
    prom, _ = run
    time.sleep(max(0.0, prom.started + WARMUP - time.monotonic()))
    loud = [(a["labels"]["alertname"], a["labels"].get("model_name")) for a in prom.alerts()
            if a["labels"].get("model_name") in QUIET]
    assert not loud, f"alerts for the healthy and the cancelling models: {loud}"

"""End to end for the gateway: `genobs simulate --engine llm-d-epp` (a real process serving the
llm-d endpoint picker's names and buckets from its profile, the deprecated twins dual-emitted as
llm-d-router 0.10 does) scraped by Debian's Prometheus as the gateway job of
specs/gateway-vllm.yaml, with every rule file genobs generated for it (rate window 1m,
evaluation 1s). Every rule evaluates cleanly, each injected fault raises its gateway alert on its
own model, and the healthy model stays silent."""

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

SPEC = REPO / "specs" / "gateway-vllm.yaml"
HEALTHY = "m-healthy"
# fault scenario of `genobs simulate --engine llm-d-epp` -> the gateway alert it must raise
FAULTS = {"ttft_degradation": "GatewayTtftP99High", "success_drop": "GatewaySuccessRatioLow"}
DEADLINE = 150.0
WARMUP = 75.0


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    if not Path(PROMETHEUS).exists():
        pytest.fail("the prometheus server is required: install Debian's 'prometheus' package (make test does)")
    tmp = tmp_path_factory.mktemp("e2e-gateway")
    out, spec = render_variant(SPEC, tmp, models=[])
    rule_files = rule_files_of(out)
    models = [f"--model={HEALTHY}=healthy", *(f"--model=m-{s}={s}" for s in FAULTS)]
    sim = Simulate("--engine", "llm-d-epp", "--request-rate", "20", "--fault-after", "5", *models)
    try:
        job = {
            "job_name": spec["gateway"]["selector"]["job"],
            "static_configs": [{"targets": [sim.instance], "labels": {"namespace": spec["gateway"]["selector"]["namespace"]}}],
        }
        with scraping_every_second(tmp, job, rule_files) as prom:
            yield prom, sim
    finally:
        sim.stop()


def test_simulated_gateway_serves_its_names_and_their_deprecated_twins(run) -> None:
    prom, sim = run
    assert sim.banner.startswith("serving simulated llm-d EPP 0.10.0 metrics on ")
    names = set(prom.label_values("__name__"))
    assert {"llm_d_epp_request_total", "llm_d_epp_request_ttft_seconds_bucket"} <= names
    assert {"inference_objective_request_total", "inference_pool_average_kv_cache_utilization"} <= names


def test_rules_evaluate_cleanly(run) -> None:
    prom, _ = run
    assert_rules_healthy(prom)


def test_dual_emission_is_read_once(run) -> None:
    prom, _ = run
    # 20 req/s per model, whatever the deprecated twins add to the scrape (once the 1m window is full)
    time.sleep(max(0.0, prom.started + WARMUP - time.monotonic()))
    got = poll(
        lambda: prom.query(f'genobs:gateway_requests:rate1m{{model_name="{HEALTHY}"}}'), prom.started + 60, 0.5, "a rate"
    )
    assert abs(float(got[0]["value"][1]) - 20.0) < 1.0, got


@pytest.mark.parametrize("scenario", sorted(FAULTS))
def test_fault_raises_its_gateway_alert(run, scenario: str) -> None:
    prom, _ = run
    model, alert = f"m-{scenario}", FAULTS[scenario]

    if alert_raised(prom, model, "alertname", alert, prom.started + DEADLINE) is None:
        pytest.fail(f"{scenario}: no {alert} for {model}; active: {active_alerts(prom)}")


def test_healthy_model_stays_silent(run) -> None:
    prom, _ = run
    time.sleep(max(0.0, prom.started + WARMUP - time.monotonic()))
    loud = [a["labels"]["alertname"] for a in prom.alerts() if a["labels"].get("model_name") == HEALTHY]
    assert not loud, f"alerts for the healthy model: {loud}"

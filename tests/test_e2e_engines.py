"""End to end for engines other than vLLM: `genobs simulate --engine sglang|trtllm` (a real
process serving the engine's metric names, labels and buckets from its profile through
prometheus_client, as the engine serves them) scraped by Debian's Prometheus with the scrape
job `genobs scrape-config` prints (SGLang: the relabel snippet; TensorRT-LLM: its metrics path)
and the rules genobs generated for specs/<engine>.yaml (rate window 1m, evaluation 1s). Every
rule must evaluate cleanly, each injected fault must raise its alert on its own model, the
healthy model none."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from genobs.cli import main
from tests.conftest import REPO
from tests.e2e_support import (
    PROMETHEUS,
    Simulate,
    active_alerts,
    alert_raised,
    assert_rules_healthy,
    render_variant,
    rule_files_of,
    scraping_every_second,
)

pytestmark = pytest.mark.slow  # real servers on loopback

HEALTHY = "m-healthy"
# engine -> fault scenario of `genobs simulate` -> the `signal` label of the alert it must raise
FAULTS = {
    "sglang": {
        "ttft_degradation": "ttft",
        "abort_surge": "abort",  # sglang:num_aborted_requests_total
        "preemption_storm": "preemptions",  # retractions
        "kv_saturation": "kv_cache",
        # one of the two schedulers hangs (dp_rank 1): the tokenizer's counters keep growing with
        # the other's requests, its own sglang:realtime_tokens_total stops
        "rank_hang": "engine_hung",
    },
    "trtllm": {
        "ttft_degradation": "ttft",
        "abort_surge": "abort",  # finished_reason="cancelled"
        "spec_acceptance_collapse": "spec_decode_acceptance",  # token_position="0"
        "kv_saturation": "kv_cache",
    },
}
BANNER = {"sglang": "SGLang 0.5.23", "trtllm": "TensorRT-LLM 1.2.1"}
PREFIX = {"sglang": "Sglang", "trtllm": "Trtllm"}  # the engine's alert names (CHANGELOG: no Vllm* on them)
DEADLINE = 150.0
WARMUP = 75.0


@pytest.fixture(scope="module", params=sorted(FAULTS))
def run(request, tmp_path_factory):
    if not Path(PROMETHEUS).exists():
        pytest.fail("the prometheus server is required: install Debian's 'prometheus' package (make test does)")
    engine = request.param
    spec_path = REPO / "specs" / f"{engine}.yaml"
    tmp = tmp_path_factory.mktemp(f"e2e-{engine}")
    out, spec = render_variant(spec_path, tmp, models=[])
    rule_files = rule_files_of(out)
    models = [f"--model={HEALTHY}=healthy", *(f"--model=m-{s}={s}" for s in FAULTS[engine])]
    sim = Simulate("--engine", engine, "--request-rate", "20", "--fault-after", "5", *models)
    try:
        # the scrape job `genobs scrape-config` prints for the spec (sglang_ names back to sglang:)
        args = ["scrape-config", "--target", sim.instance, "--interval", "1s", str(tmp / spec_path.name)]
        printed = CliRunner().invoke(main, args)
        assert printed.exit_code == 0, printed.output
        job = yaml.safe_load(printed.output)["scrape_configs"][0]
        with scraping_every_second(tmp, job, rule_files) as prom:
            yield engine, prom, sim
    finally:
        sim.stop()


def test_simulated_engine_serves_its_own_names(run) -> None:
    engine, prom, sim = run
    assert sim.banner.startswith(f"serving simulated {BANNER[engine]} metrics on ")
    names = set(prom.label_values("__name__"))
    if engine == "sglang":
        assert "sglang:num_running_reqs" in names and "sglang:time_to_first_token_seconds_bucket" in names
        assert not {n for n in names if n.startswith("sglang_")}, "the relabel snippet restores every sglang: name"
        # two data-parallel schedulers (simulate's default): their families per dp_rank, the tokenizer's not
        assert sorted(prom.label_values("dp_rank", "sglang:num_queue_reqs")) == ["0", "1"]
        assert sorted(prom.label_values("dp_rank", "sglang:token_usage")) == ["0", "1"]
        assert prom.label_values("dp_rank", "sglang:time_to_first_token_seconds_count") == []
    else:
        assert "trtllm_num_requests_running" in names and "trtllm_request_success_total" in names


def test_rules_evaluate_cleanly(run) -> None:
    _, prom, _ = run
    assert_rules_healthy(prom)


def test_each_fault_raises_its_alert(run) -> None:
    """Every fault the engine's simulator injects raises the alert on its own signal, for its own model."""
    engine, prom, _ = run
    missing = []
    for scenario, signal in sorted(FAULTS[engine].items()):
        model = f"m-{scenario}"

        raised = alert_raised(prom, model, "signal", signal, prom.started + DEADLINE)
        if raised is None:
            missing.append(f"{scenario}: no {signal} alert for {model}")
            continue
        # the pod-level alerts of the signal (an SLO's burn carries the signal too, and is Slo*)
        names = {a["labels"]["alertname"] for a in raised if a["labels"].get("signal") == signal and "slo" not in a["labels"]}
        missing += [f"{scenario}: {n} is not named for {engine}" for n in names if not n.startswith(PREFIX[engine])]
    assert not missing, f"{missing}; active: {active_alerts(prom)}"


def test_healthy_model_stays_silent(run) -> None:
    _, prom, _ = run
    # once the healthy model's 1m windows are full and a few evaluations have run
    time.sleep(max(0.0, prom.started + WARMUP - time.monotonic()))
    loud = [a["labels"]["alertname"] for a in prom.alerts() if a["labels"].get("model_name") == HEALTHY]
    assert not loud, f"alerts for the healthy model: {loud}"

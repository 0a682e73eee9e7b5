"""End to end for an SGLang prefill/decode pair: two `genobs simulate --engine sglang` processes,
one `--role prefill` and one `--role decode` (each writes its role in engine_type, as SGLang's
servers do; no target label says it), scraped by Debian's Prometheus through the job `genobs
scrape-config` prints for specs/sglang-pd.yaml, with that spec's rules (rate window 1m,
evaluation 1s, the KV-transfer alerts' `for` shortened). Healthy first: no alert is pending or
firing; then the prefill server's KV transfers slow to 1-3 s (nixl_slowdown):
SglangKvTransferTimeP99High fires with a p99 in seconds, then SglangKvTransfersFailing with a
share of failed transfers, and nothing pages. The healthy phase also checks the transfer sizes,
written in mebibytes, are recorded in bytes."""

from __future__ import annotations

import re
import time
from datetime import datetime, timezone
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
    assert_rules_healthy,
    poll,
    render_variant,
    rule_files_of,
    scraping_every_second,
)

pytestmark = pytest.mark.slow  # real servers on loopback

SPEC = REPO / "specs" / "sglang-pd.yaml"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"
FAULT_AFTER = 35.0  # seconds of healthy traffic, counted from the simulators' start
FIRING_WITHIN = 40.0  # seconds after the fault starts
ALERT = "SglangKvTransferTimeP99High"
FAILING = "SglangKvTransfersFailing"
FAILING_WITHIN = 40.0  # seconds after the p99 alert fires


def evaluated_since(prom, moment: datetime) -> bool:
    """Every rule group of `prom` has been evaluated after `moment` (RFC 3339 with nanoseconds)."""
    last = [re.sub(r"(\.\d{6})\d*", r"\1", g["lastEvaluation"]).replace("Z", "+00:00") for g in prom.rules()]
    return all(datetime.fromisoformat(t) > moment for t in last)


def test_kv_transfer_alert_fires_on_a_real_prometheus(tmp_path: Path) -> None:
    if not Path(PROMETHEUS).exists():
        pytest.fail("the prometheus server is required: install Debian's 'prometheus' package (make test does)")
    data = yaml.safe_load(SPEC.read_text())
    # the shipped 10m / 5m would outlast the test: hold each condition for 5 s
    data["alerts"] = {"nixl_transfer": {"warning": "500ms", "for": "5s"}, "nixl_failures": {"for": "5s"}}
    (tmp_path / SPEC.name).write_text(yaml.safe_dump(data, sort_keys=False))
    out, _ = render_variant(tmp_path / SPEC.name, tmp_path)
    common = ("--engine", "sglang", "--request-rate", "20", "--fault-after", str(FAULT_AFTER))
    prefill = Simulate(*common, "--role", "prefill", f"--model={MODEL}=nixl_slowdown")
    started = time.monotonic()
    try:
        decode = Simulate(*common, "--role", "decode", f"--model={MODEL}=healthy")
    except Exception:
        prefill.stop()
        raise
    try:
        assert prefill.banner.rstrip().endswith("; prefill server)") and "SGLang 0.5.23" in prefill.banner
        args = ["scrape-config", "--target", prefill.instance, "--target", decode.instance, "--interval", "1s"]
        printed = CliRunner().invoke(main, [*args, str(tmp_path / SPEC.name)])
        assert printed.exit_code == 0, printed.output
        job = yaml.safe_load(printed.output)["scrape_configs"][0]
        with scraping_every_second(tmp_path, job, rule_files_of(out)) as prom:
            # both roles come from the engine itself
            roles = lambda: sorted(prom.label_values("engine_type")) == ["decode", "prefill"]  # noqa: E731
            poll(roles, prom.started + 30, 0.5, "a scrape of both servers")
            assert prom.label_values("dp_rank") == []  # one scheduler per server, as the real P/D bodies
            scraped = datetime.now(timezone.utc)
            assert_rules_healthy(prom)
            # an evaluation before the first scrape leaves SglangMetricsAbsent pending until the next one
            poll(lambda: evaluated_since(prom, scraped), prom.started + 30, 0.5, "an evaluation after both scrapes")
            loud: set[tuple] = set()
            while time.monotonic() < started + FAULT_AFTER - 1:  # healthy: nothing pending or firing
                loud |= set(active_alerts(prom))
                time.sleep(1.0)
            assert not loud, f"alerts while healthy: {sorted(loud)}"
            # not silent for want of data: the healthy p99 (12-30 ms transfers) is recorded, in seconds
            (p99,) = prom.query('genobs:nixl_xfer_time_seconds:quantile_rate1m{quantile="0.99"}')
            assert 0.01 < float(p99["value"][1]) <= 0.05, p99
            kv = prom.query(f'sum by (engine_type) (sglang:kv_transfer_latency_ms_count{{model_name="{MODEL}"}})')
            assert [s["metric"]["engine_type"] for s in kv] == ["prefill"]  # the decode server observes none
            # sizes in mebibytes on the wire (the simulated transfers move 48-80 MiB), recorded in bytes
            (moved,) = prom.query("genobs:nixl_bytes_transferred:rate1m")
            (count,) = prom.query(f'sum(rate(sglang:kv_transfer_total_mb_count{{model_name="{MODEL}"}}[1m]))')
            per_transfer = float(moved["value"][1]) / float(count["value"][1]) / 2**20
            assert 48 <= per_transfer <= 80, per_transfer

            def firing() -> list[dict]:
                return [a for a in prom.alerts() if a["labels"]["alertname"] == ALERT and a["state"] == "firing"]

            try:
                alerts = poll(firing, started + FAULT_AFTER + FIRING_WITHIN, 1.0, f"{ALERT} firing")
            except TimeoutError:
                pytest.fail(f"{ALERT} did not fire; active: {active_alerts(prom)}")
            (alert,) = alerts
            assert alert["labels"]["model_name"] == MODEL and alert["labels"]["severity"] == "warning"
            # the p99 in seconds: transfers of 1-3 s, written in milliseconds (le="1000", "2500", "5000")
            assert 0.5 < float(alert["value"]) < 5, alert["value"]
            pages = [a for a in prom.alerts() if a["labels"].get("severity") == "critical"]  # critical pages
            assert not pages, f"pages: {[(a['labels']['alertname'], a['state']) for a in pages]}"
            # the failures (about 0.5/s among 20 transfers/s) pass 1 % of the attempts once the 1m
            # window holds enough of them: the failure alert follows, with a share, not a count
            failing = lambda: [  # noqa: E731
                a for a in prom.alerts() if a["labels"]["alertname"] == FAILING and a["state"] == "firing"
            ]
            try:
                (failed,) = poll(failing, time.monotonic() + FAILING_WITHIN, 1.0, f"{FAILING} firing")
            except TimeoutError:
                pytest.fail(f"{FAILING} did not fire; active: {active_alerts(prom)}")
            assert failed["labels"]["severity"] == "warning" and 0.01 < float(failed["value"]) < 0.5, failed
            pages = [a for a in prom.alerts() if a["labels"].get("severity") == "critical"]
            assert not pages, f"pages: {[(a['labels']['alertname'], a['state']) for a in pages]}"
    finally:
        prefill.stop()
        decode.stop()

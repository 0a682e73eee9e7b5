"""End to end for an SGLang prefill/decode pair: two `genobs simulate --engine sglang` processes,
one `--role prefill` and one `--role decode` (each writes its role in engine_type, as SGLang's
servers do; no target label says it), scraped by Debian's Prometheus through the job `genobs
scrape-config` prints for specs/sglang-pd.yaml, with that spec's rules (rate window 1m,
evaluation 1s, the KV-transfer alerts' `for` shortened). Healthy first: from the first
evaluation over two scrapes of each server to the fault, no alert is pending or firing (read back
from Prometheus' ALERTS series, so a slow test process misses none); then the prefill server's KV transfers slow to 1-3 s (nixl_slowdown):
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
FAULT_AFTER = 40.0  # seconds of healthy traffic, counted from the simulators' start
ALERT = "SglangKvTransferTimeP99High"
FAILING = "SglangKvTransfersFailing"
WINDOW, HOLD = 60.0, 5.0  # the variant's rate window (1m) and the `for` of both KV-transfer alerts
# each alert fires, at the latest, once its window holds nothing but the fault and `for` has passed;
# the rest is room for a loaded machine's late scrapes and evaluations, spent only when it needs it
FIRING_WITHIN = WINDOW + HOLD + 30.0  # seconds after the fault starts
FAILING_WITHIN = WINDOW + HOLD + 30.0  # seconds after the p99 alert fires
HEALTHY_AT_LEAST = 10.0  # seconds of healthy evaluations over full data the test needs to judge silence


def evaluated_since(prom, moment: datetime) -> bool:
    """Every rule group of `prom` has been evaluated after `moment` (RFC 3339 with nanoseconds)."""
    last = [re.sub(r"(\.\d{6})\d*", r"\1", g["lastEvaluation"]).replace("Z", "+00:00") for g in prom.rules()]
    return all(datetime.fromisoformat(t) > moment for t in last)


def at(wall: float) -> float:
    """The monotonic deadline of a wall-clock time (poll's deadlines are monotonic)."""
    return time.monotonic() + wall - time.time()


def two_scrapes_in_every_window(prom) -> bool:
    """Both servers' progress counters hold two samples in the last minute: rate() over the 1m
    window has a value. Before that the hung-engine rules read no progress (their `or ... * 0`),
    which on a starved machine lasts as long as the second scrape is late."""
    counts = prom.query("count by (engine_type) (count_over_time(sglang:realtime_tokens_total[1m]) >= 2)")
    return len(counts) == 2


def query_at(prom, expr: str, moment: float) -> list[dict]:
    """An instant query evaluated at `moment` (unix seconds)."""
    return prom.api("query", {"query": expr, "time": f"{moment:.3f}"})["result"]


def alerts_between(prom, start: float, end: float) -> list[tuple[str, str]]:
    """(alertname, state) of every alert Prometheus held pending or firing at some evaluation
    from `start` to `end` (unix seconds), read back from its ALERTS series: a pending alert one
    evaluation long is seen however late this process polls."""
    found = query_at(prom, f"count_over_time(ALERTS[{max(1, round(end - start))}s])", end)
    return sorted({(r["metric"]["alertname"], r["metric"]["alertstate"]) for r in found})


def test_kv_transfer_alert_fires_on_a_real_prometheus(tmp_path: Path) -> None:
    if not Path(PROMETHEUS).exists():
        pytest.fail("the prometheus server is required: install Debian's 'prometheus' package (make test does)")
    data = yaml.safe_load(SPEC.read_text())
    # the shipped 10m / 5m would outlast the test: hold each condition for 5 s
    data["alerts"] = {"nixl_transfer": {"warning": "500ms", "for": "5s"}, "nixl_failures": {"for": "5s"}}
    (tmp_path / SPEC.name).write_text(yaml.safe_dump(data, sort_keys=False))
    out, _ = render_variant(tmp_path / SPEC.name, tmp_path)
    common = ("--engine", "sglang", "--request-rate", "20", "--fault-after", str(FAULT_AFTER))
    started = time.time()  # the simulators' clocks start after this: their fault, after started + FAULT_AFTER
    prefill = Simulate(*common, "--role", "prefill", f"--model={MODEL}=nixl_slowdown")
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
            assert_rules_healthy(prom)
            # healthy, from the first evaluation over full data to just before the fault: nothing
            # pending or firing (an evaluation before a second scrape of each server judges no data)
            poll(lambda: two_scrapes_in_every_window(prom), time.monotonic() + 60, 0.5, "two scrapes of both servers")
            # an alert reads what other groups recorded at their last evaluation, down a chain of
            # up to three groups (recording, slo, slo-long): three rounds in which every group is
            # evaluated again, and every alert has read series computed from full data
            for _ in range(3):
                since = datetime.now(timezone.utc)
                poll(lambda since=since: evaluated_since(prom, since), time.monotonic() + 60, 0.5, "an evaluation over full data")
            full = datetime.now(timezone.utc)
            healthy_end = started + FAULT_AFTER - 1
            if healthy_end - full.timestamp() < HEALTHY_AT_LEAST:
                pytest.fail(f"only {healthy_end - full.timestamp():.0f} s of healthy evaluations before the fault")
            time.sleep(max(0.0, healthy_end - time.time()))
            loud = alerts_between(prom, full.timestamp(), healthy_end)
            assert not loud, f"alerts while healthy: {loud}"
            # not silent for want of data: the healthy p99 (12-30 ms transfers) is recorded, in seconds
            # (read as of the healthy phase's end, whenever this process gets to ask)
            (p99,) = query_at(prom, 'genobs:nixl_xfer_time_seconds:quantile_rate1m{quantile="0.99"}', healthy_end)
            assert 0.01 < float(p99["value"][1]) <= 0.05, p99
            kv = query_at(prom, f'sum by (engine_type) (sglang:kv_transfer_latency_ms_count{{model_name="{MODEL}"}})', healthy_end)
            assert [s["metric"]["engine_type"] for s in kv] == ["prefill"]  # the decode server observes none
            # sizes in mebibytes on the wire (the simulated transfers move 48-80 MiB), recorded in bytes
            (moved,) = query_at(prom, "genobs:nixl_bytes_transferred:rate1m", healthy_end)
            (count,) = query_at(prom, f'sum(rate(sglang:kv_transfer_total_mb_count{{model_name="{MODEL}"}}[1m]))', healthy_end)
            per_transfer = float(moved["value"][1]) / float(count["value"][1]) / 2**20
            assert 48 <= per_transfer <= 80, per_transfer

            def firing() -> list[dict]:
                return [a for a in prom.alerts() if a["labels"]["alertname"] == ALERT and a["state"] == "firing"]

            try:
                alerts = poll(firing, at(started + FAULT_AFTER + FIRING_WITHIN), 1.0, f"{ALERT} firing")
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

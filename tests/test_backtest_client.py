"""`genobs backtest` of a spec with a client block, against a real Prometheus holding six hours
of a fleet's history (backfilled with promtool) in which the application's series sit beside
the llm-d gateway's and the vLLM pods': two healthy hours, 40 minutes in which the network
between the application and the gateway drops and retries calls (8 % of operations time out
with error_type="APITimeoutError", the others' first chunk 3 s later; the gateway and the pods
serve what reaches them, fast and without error), then healthy hours again. The client's pages
fire within the fault, nothing of the gateway or the pods fires, the healthy hours are silent.
A second history of 28 hours holds the token shift's day-long baseline."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
import yaml
from backtest_history import backfilled_prometheus, episodes, report_time
from click.testing import CliRunner
from e2e_support import PROMETHEUS
from fleet_series import Fleet

from genobs.backtest.rules import load_rules
from genobs.cli import main

pytestmark = pytest.mark.slow  # a real Prometheus over hours of backfilled history

SPEC = Path(__file__).parent / "fixtures" / "backtest" / "client.yaml"  # specs/app-otel.yaml without SLOs
HOUR = 3600
HOURS = 6  # of history
FROM, TO = HOUR, HOURS * HOUR  # the backtest's range, from the history's start: its first hour is warm-up
FAULT_AT, FAULT_FOR = 3 * HOUR, 40 * 60  # 03:00-03:40 of the history: the network fault
EVAL = 30  # the spec's evaluation interval
SCRAPE = 30  # the history's sample interval
WINDOW = 300  # the client rules' rate window
HOLD = 360  # keep_firing_for of a page (the client's: 6m; a warning's: 1m)
MODEL = "meta-llama/Llama-3.1-8B-Instruct"  # the pods' name; the application asks for llama-3.1-8b
FAULT = {"errors": 0.08, "overhead": 3.0}  # ClientModel traffic: timeouts per call, seconds added in front


def run(*args: str | Path):
    return CliRunner().invoke(main, ["backtest", *map(str, args)])


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory):
    if not Path(PROMETHEUS).exists():
        pytest.fail("prometheus is required (Debian's 'prometheus' package; make test installs it)")
    spec = yaml.safe_load(SPEC.read_text())
    fault = {"from": f"{FAULT_AT // 60}m", "to": f"{(FAULT_AT + FAULT_FOR) // 60}m", "set": FAULT}
    data = {"replicas": 4, "duration": f"{HOURS * 60}m", "client": {"events": [fault]}}
    fleet = Fleet(data, spec)
    base = (int(time.time()) // HOUR - HOURS - 2) * HOUR  # the six hours lie in the past
    names = {s.name for s in load_rules(SPEC).raw}
    tmp = tmp_path_factory.mktemp("backtest-client")
    began = time.monotonic()
    prom = backfilled_prometheus(tmp, fleet, base, names, every=SCRAPE // 30)
    try:
        backfilled = time.monotonic()
        result = run(SPEC, "--prometheus", prom.url, "--from", base + FROM, "--to", base + TO, "--format", "json")
        assert result.exit_code == 0, result.output
        seconds = {"history": backfilled - began, "backtest": time.monotonic() - backfilled}
        yield {"url": prom.url, "base": base, "doc": json.loads(result.stdout), "stderr": result.stderr, **seconds}
    finally:
        prom.stop()


def test_the_application_pages_within_the_fault(history):
    base, side = history["base"], history["doc"]["candidate"]
    start, end = base + FAULT_AT, base + FAULT_AT + FAULT_FOR
    for alert in ("ClientErrorRatioHigh", "ClientTtftP99High"):
        for severity in ("critical", "warning"):
            [(a, b)] = episodes(side, alert, severity)
            # `for: 10m` after the 5m window passes the threshold, within one evaluation and one scrape
            assert start + 600 <= a <= start + WINDOW + 600 + EVAL + SCRAPE, (alert, severity, a - start)
            hold = HOLD if severity == "critical" else 60
            # resolved once the window no longer holds the fault, after keep_firing_for
            assert end <= b <= end + WINDOW + EVAL + SCRAPE + hold, (alert, severity, b - end)


def test_only_the_application_fires(history):
    """The gateway and the pods served every request that reached them: none of their alerts
    fires, and nothing fires outside the fault (the healthy hours before and after it)."""
    base, side = history["base"], history["doc"]["candidate"]
    fired = sorted({(e["alert"], e["severity"]) for e in side["episodes"]})
    assert fired == [
        ("ClientErrorRatioHigh", "critical"),
        ("ClientErrorRatioHigh", "warning"),
        ("ClientTtftP99High", "critical"),
        ("ClientTtftP99High", "warning"),
    ]
    for e in side["episodes"]:
        labels = e["labels"]
        # one series per model, the application's name of it mapped to the pods' (model_names)
        assert labels["layer"] == "client" and labels["model_name"] == MODEL, labels
        assert (labels["namespace"], labels["job"]) == ("chat-app", "chat-frontend"), labels
        assert base + FAULT_AT < report_time(e["start"]) and report_time(e["end"]) < base + FAULT_AT + FAULT_FOR + 1200, e
    assert (side["pages"], side["warnings"]) == (2, 2)
    rows = {(a["alert"], a["severity"]): a for a in side["alerts"]}
    # the gateway's and the pods' rules were evaluated over the same history, and stayed silent
    for key in [
        ("GatewaySuccessRatioLow", "critical"),
        ("GatewayTtftP99High", "critical"),
        ("VllmTtftP99High", "warning"),
    ]:
        assert rows[key]["fired"] == 0, key
    # without a day of history before it, the token shift has no baseline and stays silent
    assert rows[("ClientTokenUsageShift", "warning")]["fired"] == 0


def test_healthy_hours_are_silent(history):
    base, url = history["base"], history["url"]
    result = run(SPEC, "--prometheus", url, "--from", base + FROM, "--to", base + FAULT_AT)
    assert result.exit_code == 0, result.output
    assert "0 pages (0/day), 0 warnings (0/day)" in result.stdout


def test_dry_run_lists_the_application_selectors(history):
    """The application's raw series are pulled under its own selector (job, namespace and both
    names of its model); its first level of recording rules is evaluated on the source."""
    base, url = history["base"], history["url"]
    result = run(SPEC, "--prometheus", url, "--from", base + FROM, "--to", base + TO, "--dry-run")
    assert result.exit_code == 0, result.output
    client = '{namespace="chat-app",job="chat-frontend",gen_ai_request_model=~"meta-llama/Llama-3\\\\.1-8B-Instruct|llama-3\\\\.1-8b"'
    listed = {
        m[3]: (int(m[1]), m[2]) for m in re.finditer(r"^ +(\d+)  (copied|on source) +(\S+)$", result.stdout, re.M)
    }
    mine = {sel: v for sel, v in listed.items() if sel.startswith("gen_ai_client_")}
    assert len(mine) == 7 and all(sel.split("{", 1)[1].startswith(client[1:]) for sel in mine), result.stdout
    # two instances: a series of successes each, and one per error type (timeouts, server errors)
    assert mine[f"gen_ai_client_operation_duration_seconds_count{client}}}"] == (6, "on source")
    assert mine[f'gen_ai_client_operation_duration_seconds_count{client},error_type!=""}}'] == (4, "copied")


def test_progress_and_table(history):
    base, url = history["base"], history["url"]
    assert "recording rules: level 1/" in history["stderr"] and "genobs:client_requests:rate5m" in history["stderr"]
    result = run(SPEC, "--prometheus", url, "--from", base + FAULT_AT - HOUR, "--to", base + FAULT_AT + HOUR)
    assert result.exit_code == 0, result.output
    assert "spec app-otel-backtest: 2 pages" in result.stdout
    assert f"job=chat-frontend, layer=client, model_name={MODEL}, namespace=chat-app" in result.stdout, result.stdout


SHIFT_AT = 26 * HOUR  # the application's prompts grow 2.5x: a template or retrieval release
DAY_HOURS = 28  # of history: the token shift's baseline is the day before the last hour


@pytest.fixture(scope="module")
def day(tmp_path_factory: pytest.TempPathFactory):
    """A day and more of one pod, the gateway and the application, whose input tokens per
    operation grow 2.5x at hour 26; backtested over hours 25 to 28."""
    spec = yaml.safe_load(SPEC.read_text())
    shift = {"from": f"{SHIFT_AT // 60}m", "set": {"input_scale": 2.5}}
    fleet = Fleet({"replicas": 1, "duration": f"{DAY_HOURS * 60}m", "client": {"events": [shift]}}, spec)
    base = (int(time.time()) // HOUR - DAY_HOURS - 2) * HOUR
    names = {s.name for s in load_rules(SPEC).raw}
    tmp = tmp_path_factory.mktemp("backtest-client-day")
    prom = backfilled_prometheus(tmp, fleet, base, names, every=2)  # 60 s scrapes
    try:
        result = run(
            SPEC,
            "--prometheus",
            prom.url,
            "--from",
            base + 25 * HOUR,
            "--to",
            base + DAY_HOURS * HOUR,
            "--format",
            "json",
        )
        assert result.exit_code == 0, result.output
        yield {"base": base, "doc": json.loads(result.stdout)}
    finally:
        prom.stop()


def test_token_shift_reads_the_day_before(day):
    """ClientTokenUsageShift's baseline (group -client-long, the day ending an hour ago) is
    recorded from the history before --from: the input shift warns, the output does not."""
    base, side = day["base"], day["doc"]["candidate"]
    [episode] = side["episodes"]
    assert (episode["alert"], episode["severity"]) == ("ClientTokenUsageShift", "warning"), side["episodes"]
    assert episode["labels"]["token_type"] == "input" and episode["labels"]["layer"] == "client"
    start = report_time(episode["start"]) - (base + SHIFT_AT)
    assert 40 * 60 <= start <= 70 * 60, start

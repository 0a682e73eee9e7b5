"""`genobs backtest` against a real Prometheus holding three days of a fleet's history
(backfilled with promtool): a quiet day, a day with a 40-minute TTFT degradation and a
2-hour error burn at known times, a quiet day. The episodes, pages per day and the
baseline spec that misses the TTFT incident are asserted; bad input exits 2."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
import yaml
from backtest_history import backfilled_prometheus, episodes, report_time
from click.testing import CliRunner
from e2e_support import PROMETHEUS, free_port
from fleet_series import Fleet
from test_doctor_hostile import reply, serve

from genobs.backtest.rules import load_rules
from genobs.cli import main
from genobs.compiler import load_plan
from genobs.plan.model import AlertRule

FIXTURES = Path(__file__).parent / "fixtures" / "backtest"
SPEC = FIXTURES / "chat.yaml"
LATENCY = FIXTURES / "latency.yaml"  # no SLOs: minutes of warm-up instead of the slow burn's 3 days
LOOSE = FIXTURES / "loose.yaml"  # TTFT p99 thresholds 5s / 8s: the degradation (p99 4s) stays under them
DAY = 86400
TTFT_AT, TTFT_FOR = DAY + 6 * 3600, 40 * 60  # day 2, 06:00-06:40: TTFT p50 1.5s, p99 4s
BURN_AT, BURN_FOR = DAY + 12 * 3600, 2 * 3600  # day 2, 12:00-14:00: 20% of requests end in error
EVAL = 30  # the spec's evaluation interval
SCRAPE = 60  # the history's sample interval


def run(*args: str | Path):
    return CliRunner().invoke(main, ["backtest", *map(str, args)])


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory):
    if not Path(PROMETHEUS).exists():
        pytest.fail("prometheus is required (Debian's 'prometheus' package; make test installs it)")
    spec = yaml.safe_load(SPEC.read_text())
    events = [
        {
            "from": f"{TTFT_AT // 60}m",
            "to": f"{(TTFT_AT + TTFT_FOR) // 60}m",
            "set": {"ttft": {"p50": 1.5, "p99": 4.0}},
        },
        {
            "from": f"{BURN_AT // 60}m",
            "to": f"{(BURN_AT + BURN_FOR) // 60}m",
            "set": {"finish": {"stop": 0.8, "error": 0.2}},
        },
    ]
    fleet = Fleet({"replicas": 1, "duration": f"{3 * DAY // 60}m", "events": events}, spec)
    base = (int(time.time()) // DAY - 4) * DAY  # midnight four days ago: the three days lie in the past
    names = {s.name for s in load_rules(SPEC).raw}
    tmp = tmp_path_factory.mktemp("backtest")
    prom = backfilled_prometheus(tmp, fleet, base, names, every=SCRAPE // 30)
    try:
        result = run(
            SPEC,
            "--prometheus",
            prom.url,
            "--from",
            base,
            "--to",
            base + 3 * DAY,
            "--baseline-spec",
            LOOSE,
            "--format",
            "json",
            "--plot",
            tmp / "timeline.png",
        )
        assert result.exit_code == 0, result.output
        doc = json.loads(result.stdout)
        yield {"url": prom.url, "base": base, "doc": doc, "stderr": result.stderr, "png": tmp / "timeline.png"}
    finally:
        prom.stop()


# a page keeps firing this long after its condition ends (keep_firing_for: ServingCapacityLost's 5m + 1m)
HOLD = 360


def test_ttft_degradation_fires_once_after_for(history):
    base, side = history["base"], history["doc"]["candidate"]
    start = base + TTFT_AT
    for severity in ("critical", "warning"):
        [(a, b)] = episodes(side, "VllmTtftP99High", severity)
        hold = HOLD if severity == "critical" else 0
        # `for: 10m`, then within one evaluation plus one scrape of the degradation reaching the 5m rate
        assert start + 600 <= a <= start + 600 + EVAL + SCRAPE, (severity, a - start)
        # resolves once the 5m window no longer holds slow requests (a page: after its hold)
        assert start + TTFT_FOR + hold <= b <= start + TTFT_FOR + 300 + EVAL + SCRAPE + hold, (severity, b - start)
    [(a, b)] = episodes(side, "SloFirstTokenErrorBudgetBurnFast", "critical")
    assert start < a <= start + 20 * 60 and start + TTFT_FOR < b <= start + TTFT_FOR + 3600 + EVAL + HOLD


def test_error_burn_pages_and_warns(history):
    base, side = history["base"], history["doc"]["candidate"]
    start = base + BURN_AT
    for severity in ("critical", "warning"):
        [(a, b)] = episodes(side, "VllmSuccessRatioLow", severity)
        hold = HOLD if severity == "critical" else 0
        assert start + 600 <= a <= start + 600 + EVAL + SCRAPE, (severity, a - start)
        assert start + BURN_FOR + hold <= b <= start + BURN_FOR + 300 + EVAL + SCRAPE + hold, (severity, b - start)
    # burn rate 40 (20% errors on a 99.5% objective): the 1h window passes 14.4 after ~22 minutes
    [(a, b)] = episodes(side, "SloAvailabilityErrorBudgetBurnFast", "critical")
    assert start + 15 * 60 <= a <= start + 25 * 60 and start + BURN_FOR < b <= start + BURN_FOR + 3600 + HOLD
    # the slow burn (2h and 1d windows above 3, or 6h and 3d above 1) warns during the incident
    [(a, b)] = episodes(side, "SloAvailabilityErrorBudgetBurnSlow", "warning")
    assert start < a <= start + BURN_FOR and start + BURN_FOR < b <= start + BURN_FOR + 6 * 3600 + 300


def test_only_the_incidents_fire_and_the_quiet_days_are_silent(history):
    base, side = history["base"], history["doc"]["candidate"]
    fired = sorted((e["alert"], e["severity"]) for e in side["episodes"])
    assert fired == sorted(
        [
            ("VllmTtftP99High", "critical"),
            ("VllmTtftP99High", "warning"),
            ("SloFirstTokenErrorBudgetBurnFast", "critical"),
            ("SloFirstTokenErrorBudgetBurnSlow", "warning"),
            ("VllmSuccessRatioLow", "critical"),
            ("VllmSuccessRatioLow", "warning"),
            ("SloAvailabilityErrorBudgetBurnFast", "critical"),
            ("SloAvailabilityErrorBudgetBurnSlow", "warning"),
        ]
    )
    for e in side["episodes"]:  # nothing on day 1 or day 3
        assert base + DAY <= report_time(e["start"]) and report_time(e["end"]) < base + 2 * DAY, e
    assert (side["pages"], side["warnings"]) == (4, 4)
    assert side["pages_per_day"] == pytest.approx(4 / 3, abs=1e-3)
    rows = {(a["alert"], a["severity"]): a for a in side["alerts"]}
    ttft = rows[("VllmTtftP99High", "critical")]
    [(a, b)] = episodes(side, "VllmTtftP99High", "critical")
    assert ttft["fired"] == 1 and ttft["firing_seconds"] == ttft["longest_seconds"] == b - a
    assert rows[("VllmKvCacheSaturated", "warning")]["fired"] == 0


def test_looser_baseline_misses_the_ttft_incident(history):
    doc = history["doc"]
    baseline, candidate = doc["baseline"], doc["candidate"]
    assert baseline["spec"] == candidate["spec"] == "chat-backtest"
    assert not episodes(baseline, "VllmTtftP99High", "critical")
    assert not episodes(baseline, "VllmTtftP99High", "warning")

    # everything else is the same rules over the same history: the same episodes
    def same(e: dict) -> tuple:
        return e["alert"], e["severity"], e["start"], e["end"]

    others = [same(e) for e in candidate["episodes"] if e["alert"] != "VllmTtftP99High"]
    assert [same(e) for e in baseline["episodes"]] == others
    assert doc["difference"]["pages"] == 1 and doc["difference"]["warnings"] == 1


def test_progress_goes_to_stderr(history):
    err = history["stderr"]
    assert "backtest: pulling raw series: window 1/" in err and "recording rules: level 1/" in err
    assert "alerts: 1/" in err


def test_table_and_markdown(history):
    base, url = history["base"], history["url"]
    # quiet hours: nothing fires, the report says so
    result = run(LATENCY, "--prometheus", url, "--from", base + 2 * DAY + 3600, "--to", base + 2 * DAY + 4 * 3600)
    assert result.exit_code == 0, result.output
    assert "0 pages (0/day), 0 warnings (0/day)" in result.stdout
    rules = len([r for g in load_plan(LATENCY)[1].groups for r in g.rules if isinstance(r, AlertRule)])
    assert f"{rules} of {rules} alert rules never fired" in result.stdout
    result = run(
        LATENCY,
        "--prometheus",
        url,
        "--from",
        base + TTFT_AT - 3600,
        "--to",
        base + TTFT_AT + 3600,
        "--format",
        "markdown",
    )
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("### genobs backtest: spec chat-latency on ")
    assert "| VllmTtftP99High | critical | 1 |" in result.stdout


def test_credentials_are_sent_never_shown(history, tmp_path):
    """A password in the URL is sent as basic auth and never printed; the credential options are
    the ones compare and doctor take, checked the same way (exit 2 naming the option)."""
    base, url = history["base"], history["url"]
    secret_url = url.replace("http://", "http://sre:hunter2-secret@")
    result = run(LATENCY, "--prometheus", secret_url, "--from", base + 2 * DAY + 3600, "--to", base + 2 * DAY + 2 * 3600)
    assert result.exit_code == 0, result.output
    assert "hunter2-secret" not in result.output
    assert f"on http://***@{url.removeprefix('http://')}," in result.stdout  # redacted, as compare shows it
    result = run(LATENCY, "--prometheus", secret_url, "--from", base - 5 * DAY, "--to", base - 4 * DAY)
    assert result.exit_code == 2 and "no data" in result.stderr and "hunter2-secret" not in result.output
    token = tmp_path / "token"
    token.write_text("abc\n")
    result = run(LATENCY, "--prometheus", url, "--from", base, "--to", base + 3600, "--dry-run", "--bearer-token-file", token)
    assert result.exit_code == 0, result.output
    result = run(LATENCY, "--prometheus", url, "--from", base, "--to", base + 3600, "--basic-auth-user", "sre")
    assert result.exit_code == 2, result.output
    assert "--basic-auth-user needs --basic-auth-password-file" in result.stderr


def test_dry_run_lists_what_it_would_pull(history):
    base, url = history["base"], history["url"]
    result = run(SPEC, "--prometheus", url, "--from", base, "--to", base + DAY, "--dry-run")
    assert result.exit_code == 0, result.output
    assert "23 selectors, 215 series" in result.stdout
    # the listing adds up: one line per selector with its series count
    listed = re.findall(r"^ +(\d+)  \S", result.stdout, re.M)
    assert len(listed) == 23 and sum(map(int, listed)) == 215
    assert (
        'vllm:time_to_first_token_seconds_bucket{namespace="llm-prod",job="vllm-chat",le=~"1(\\\\.0+)?"}'
        in result.stdout
    )
    assert "warm-up 3d" in result.stdout
    assert "pulling" not in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (lambda b: ["--from", b + DAY, "--to", b], "is not before --to"),
        (lambda b: ["--from", "now-20d", "--to", "now-19d"], "beyond the retention of"),
        (lambda b: ["--from", b - 5 * DAY, "--to", b - 4 * DAY], "error: no data:"),
        (lambda b: ["--from", b, "--to", b + 3600, "--max-series", "100"], "match 215 series"),
        (lambda b: ["--from", "yesterday", "--to", "now"], "--from: 'yesterday' is not a time"),
        (lambda b: ["--from", "0", "--to", "now"], "backtest at most 90d"),
        (lambda b: ["--from", "now-1h", "--to", int(time.time()) + 7200], "is in the future"),
    ],
)
def test_bad_ranges_exit_2(history, args, message):
    result = run(SPEC, "--prometheus", history["url"], *map(str, args(history["base"])))
    assert result.exit_code == 2, result.output
    assert message in result.stderr, result.stderr
    assert "Traceback" not in result.output


def test_unreachable_and_hostile_prometheus_exit_2(tmp_path: Path):
    result = run(SPEC, "--prometheus", f"http://127.0.0.1:{free_port()}", "--from", "now-2h")
    assert result.exit_code == 2 and "cannot reach Prometheus" in result.stderr, result.output
    with serve(reply(b"<html>not json</html>")) as url:
        result = run(SPEC, "--prometheus", url, "--from", "now-2h")
    assert result.exit_code == 2 and "did not answer with a JSON object" in result.stderr, result.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: genobs/v1\nname: x\nuse_case: chat\nservice: {engine_version: '0.33', selector: 5}\n")
    result = run(bad, "--from", "now-2h")
    assert result.exit_code == 2 and str(bad) in result.stderr and "Traceback" not in result.output


def test_plot_has_one_row_per_fired_alert(history):
    import matplotlib.image

    png = history["png"]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 30_000
    image = matplotlib.image.imread(png)
    rows = len({(e["alert"], e["severity"]) for e in history["doc"]["candidate"]["episodes"]})
    assert rows == 8
    # 2.1 inches (210 px) per row: the signal above, the episode lanes (spec and baseline) below
    assert 180 * rows <= image.shape[0] <= 100 + 230 * rows, image.shape
    assert 900 <= image.shape[1] <= 1200, image.shape
    rgb = (image[:, :, :3] * 255).astype(int)

    def share(color: tuple[int, int, int]) -> float:
        return float(((abs(rgb - color)).sum(axis=2) < 30).mean())

    assert share((214, 39, 40)) > 0.001  # tab:red: critical episodes and thresholds
    assert share((255, 127, 14)) > 0.001  # tab:orange: warnings
    assert share((31, 119, 180)) > 0.0005  # tab:blue: the watched signals


@pytest.mark.parametrize(
    ("hold", "keep", "pattern"),
    [
        ("3m", "0s", "0 1 1 1 1 1 0 1 1 1 1 0 0 1 1 1 1 1 1 0 0 0"),
        ("3m", "2m", "0 1 1 1 1 1 0 1 1 0 0 0 1 1 1 1 0 1 0 0 0 0"),
        ("0s", "1m", "1 0 0 1 1 0 1 0 1 1 1 0 0 0 1 _ _ 1 0 0 0 0"),
    ],
)
def test_alert_state_machine_agrees_with_promtool(tmp_path: Path, promtool: str, hold: str, keep: str, pattern: str):
    """The `for` / `keep_firing_for` state machine backtest runs, checked minute by minute
    against Prometheus' own (promtool test rules asserts the alerts it computed)."""
    import subprocess

    from genobs.backtest.alerts import AlertTimeline
    from genobs.backtest.rules import Rule
    from genobs.units import prom_duration_seconds

    rule = Rule(
        "g",
        60.0,
        "A",
        "x > 0",
        (("severity", "warning"),),
        True,
        prom_duration_seconds(hold),
        prom_duration_seconds(keep),
    )
    values = pattern.split()
    timeline = AlertTimeline(rule)
    firing_at = []
    last = "0"
    for i, v in enumerate(values):
        v = last = last if v == "_" else v  # a missed sample: the 5m lookback still returns the last one
        timeline.step(i * 60.0, {(("alertname", "A"), ("severity", "warning"))} if v == "1" else set())
        firing_at.append(any(s.fired_at is not None for s in timeline.states.values()))
    timeline.close()
    assert any(firing_at) and not all(firing_at)
    rules = {
        "groups": [
            {
                "name": "g",
                "interval": "1m",
                "rules": [
                    {
                        "alert": "A",
                        "expr": "x > 0",
                        "for": hold,
                        "keep_firing_for": keep,
                        "labels": {"severity": "warning"},
                    }
                ],
            }
        ]
    }
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules))
    series = " ".join("_" if v == "_" else v for v in values)
    tests = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": [{"series": "x", "values": series}],
                "alert_rule_test": [
                    {
                        "eval_time": f"{i}m",
                        "alertname": "A",
                        "exp_alerts": [{"exp_labels": {"severity": "warning"}}] if firing else [],
                    }
                    for i, firing in enumerate(firing_at)
                ],
            }
        ],
    }
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(tests))
    done = subprocess.run([promtool, "test", "rules", "test.yaml"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("backend", ["victoriametrics", "thanos", "mimir"])
@pytest.mark.parametrize("tier", ["all", "global"])
def test_backtest_reads_each_rule_once_whatever_the_backend(backend: str, tier: str, tmp_path: Path):
    """A backend's copies of the groups (vmalert/, thanos/, mimir/) are the same rules: read
    once, or every alert counts twice and pages per day double; a tiered spec is backtested whole."""
    data = yaml.safe_load(SPEC.read_text())
    plain = load_rules(SPEC)
    data["output"] = {"backend": backend, "tier": tier}
    spec = tmp_path / "chat.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    found = load_rules(spec)
    alerts = [(r.group, r.name, r.labels) for r in found.alerts]
    assert alerts and len(alerts) == len(set(alerts))
    assert sorted(alerts) == sorted((r.group, r.name, r.labels) for r in plain.alerts)

"""`genobs compare` against a real Prometheus on loopback scraping simulated vLLM
exporters: a healthy model, its healthy twin, a model with slow prefill, and one
whose decode slows down at a known time. The degraded side must give a regression
verdict, two healthy sides none."""

from __future__ import annotations

import contextlib
import json
import struct
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner

from genobs.cli import main
from genobs.commands.scrape_config import relabel_configs
from genobs.gates.sides import SideError, parse_range, parse_selector, parse_tolerance
from tests.e2e_support import PROMETHEUS, Prometheus, Simulate, free_port, poll, prometheus_config, stopping
from tests.test_doctor_hostile import ok, reply, serve

JOB = "vllm-compare"
FAULT_AFTER = 24.0  # seconds after the shifting simulator starts, its decode slows down
READY_AT = 38.0  # both ranges below are then complete
BEFORE = (8.0, 22.0)  # seconds after start: healthy
AFTER = (26.0, 38.0)  # fault on
WINDOW = "20s"
SECRET = "pr0m-s3cret"


def run(*args: str | Path):
    result = CliRunner().invoke(main, ["compare", *map(str, args)])
    assert SECRET not in result.output, result.output  # credentials are never printed
    return result


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory):
    if not Path(PROMETHEUS).exists():
        pytest.fail("prometheus is required (Debian's 'prometheus' package; make test installs it)")
    tmp = tmp_path_factory.mktemp("compare")
    spec = tmp / "gate.yaml"
    spec.write_text(
        "version: genobs/v1\nname: gate\nuse_case: chat\n"
        f'service:\n  engine_version: "0.33"\n  selector: {{job: {JOB}}}\n'
        "slos:\n  - {name: first-token, sli: ttft, threshold: 1s, objective: 99%}\n"
    )
    # the exporters run in processes of their own: on a loaded machine a simulator inside this test
    # process waits for its interpreter while the comparisons run here, and its 1 s scrapes time out
    common = ("--request-rate", "40")
    models = Simulate(*common, "--seed", "1", "--model=m-old=healthy", "--model=m-twin=healthy",
                      "--model=m-new=ttft_degradation")
    try:
        # at FAULT_AFTER m-shift's decode slows down and its API server starts answering ~10% with 5xx
        shifting = Simulate(*common, "--seed", "2", "--fault-after", str(FAULT_AFTER), "--model=m-shift=itl_degradation",
                            "--model=m-http=http_5xx")
    except Exception:
        models.stop()
        raise
    try:
        targets = [Exporter("models", models.instance), Exporter("shifting", shifting.instance)]
        # the server requires basic auth: every comparison below sends the URL's userinfo
        prom = Prometheus(tmp, prometheus_config(JOB, targets, relabel_configs()), {}, basic_auth=("gate", SECRET))
        with stopping([], prom):
            prom.start()
            poll(lambda: len(prom.query("vllm:num_requests_running")) >= 8, time.monotonic() + 60, what="scrapes")
            # the shifting exporter's clock starts with its process (its API server's start time)
            (started,) = prom.query('process_start_time_seconds{sim="shifting"}')
            t0 = float(started["value"][1])
            time.sleep(max(0.0, t0 + READY_AT + 2 - time.time()))
            shift_only = tmp / "shift.yaml"
            shift_only.write_text(spec.read_text().replace("  selector:", "  models: [m-shift]\n  selector:"))
            url = prom.url.replace("http://", f"http://gate:{SECRET}@")
            yield {"spec": spec, "shift_spec": shift_only, "url": url, "plain": prom.url, "t0": t0, "tmp": tmp}
    finally:
        models.stop()
        shifting.stop()


@dataclass(frozen=True)
class Exporter:
    """A scrape target prometheus_config reads: a name and an address."""

    name: str
    instance: str
    labels: dict[str, str] = field(default_factory=dict)


def _range(t0: float, span: tuple[float, float]) -> str:
    return f"{t0 + span[0]:.0f}..{t0 + span[1]:.0f}"


def _rows(result) -> dict[str, dict]:
    return {r["key"]: r for r in json.loads(result.stdout)["kpis"]}


def test_degraded_model_is_a_regression(live):
    result = run(
        live["spec"],
        "--prometheus",
        live["url"],
        "--baseline",
        "model_name=m-old",
        "--candidate",
        "model_name=m-new",
        "--window",
        WINDOW,
        "--format",
        "json",
    )
    assert result.exit_code == 1, result.output
    rows = _rows(result)
    ttft = rows["ttft_p99"]
    assert ttft["verdict"] == "REGRESSION" and ttft["candidate"] > 5 and ttft["baseline"] < 1
    assert "breaks the threshold" in ttft["note"] and ttft["threshold"].startswith("≤ 1s (VllmTtftP99High")
    assert rows["goodput_first-token"]["verdict"] == "REGRESSION"
    assert rows["itl_p99"]["verdict"] in ("ok", "improved")  # decode is not what degraded


def test_two_healthy_models_give_no_regression(live, tmp_path: Path):
    png = tmp_path / "before_after.png"
    result = run(
        live["spec"],
        "--prometheus",
        live["url"],
        "--baseline",
        "model_name=m-old",
        "--candidate",
        'model_name="m-twin"',
        "--window",
        WINDOW,
        "--format",
        "json",
        "--plot",
        png,
    )
    assert result.exit_code == 0, result.output
    rows = _rows(result)
    assert not [k for k, r in rows.items() if r["verdict"] in ("REGRESSION", "BREACH")], result.stdout
    judged = [r for r in rows.values() if r["verdict"] != "info"]
    assert len(judged) >= 12 and all(r["baseline"] is not None and r["candidate"] is not None for r in judged)
    assert rows["output_speed_per_user"]["candidate"] == pytest.approx(1 / 0.03, rel=0.15)  # ITL 20-40 ms
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">I", png.read_bytes()[16:20])[0] == 900  # 9 in at 100 dpi


def test_fault_switched_on_at_a_known_time_is_a_regression(live):
    t0 = live["t0"]
    # the spec watches the shifting model only (service.models)
    result = run(
        live["shift_spec"],
        "--prometheus",
        live["url"],
        "--baseline-time",
        _range(t0, BEFORE),
        "--candidate-time",
        _range(t0, AFTER),
        "--format",
        "json",
    )
    assert result.exit_code == 1, result.output
    rows = _rows(result)
    assert rows["itl_p99"]["verdict"] == "REGRESSION"
    assert rows["output_speed_per_user"]["verdict"] == "REGRESSION"
    assert rows["ttft_p99"]["verdict"] in ("ok", "improved")
    # the API server's answers (no model_name: per process) show the 5xx the engine never saw
    http = rows["http_ok"]
    assert http["verdict"] == "REGRESSION" and http["baseline"] == 1.0, http
    # ~10% 5xx; like vLLM's, the 5xx series only appears with the first 5xx, and rate() cannot count
    # the increase up to its first sample, so the range reads a little less than the truth
    assert 0.85 <= http["candidate"] <= 0.97, http
    assert rows["availability"]["verdict"] in ("ok", "improved")  # every request the engine got finished well


def test_same_service_in_two_healthy_ranges_gives_no_regression(live):
    t0 = live["t0"]
    # a selector per side narrows each range to one model
    result = run(
        live["spec"],
        "--prometheus",
        live["url"],
        "--baseline",
        "model_name=m-shift",
        "--candidate",
        "model_name=m-shift",
        "--baseline-time",
        _range(t0, (8.0, 15.0)),
        "--candidate-time",
        _range(t0, (15.0, 22.0)),
        "--format",
        "md",
    )
    assert result.exit_code == 0, result.output
    assert "| KPI | baseline | candidate | change | threshold | verdict | note |" in result.stdout
    assert "REGRESSION" not in result.stdout and "BREACH" not in result.stdout
    assert "verdict: no regression" in result.stdout


def test_no_data_for_a_side_names_the_selector_and_what_exists(live):
    result = run(
        live["spec"],
        "--prometheus",
        live["url"],
        "--baseline",
        "model_name=m-old",
        "--candidate",
        "model_name=m-nope",
        "--window",
        WINDOW,
    )
    assert result.exit_code == 2, result.output
    assert "no data for the candidate (model_name=m-nope)" in result.stderr
    assert "model_name values under the spec's selector: m-http, m-new, m-old, m-shift, m-twin" in result.stderr


def test_no_target_under_the_spec_selector_gives_doctors_hint(live, tmp_path: Path):
    spec = tmp_path / "other.yaml"
    spec.write_text(live["spec"].read_text().replace(JOB, "vllm-elsewhere"))
    result = run(spec, "--prometheus", live["url"], "--baseline", "model_name=m-old", "--candidate", "model_name=m-new")
    assert result.exit_code == 2, result.output
    assert "no data for the baseline (model_name=m-old)" in result.stderr
    assert "no target under the selector" in result.stderr and "genobs scrape-config" in result.stderr


def test_unreachable_prometheus_is_exit_2(live):
    url = f"http://127.0.0.1:{free_port()}"
    result = run(live["spec"], "--prometheus", url, "--baseline", "model_name=a", "--candidate", "model_name=b")
    assert result.exit_code == 2
    assert f"cannot reach Prometheus at {url}" in result.stderr and "Traceback" not in result.output


# --- options, no Prometheus needed -----------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--baseline", "model_name=a"], "give both --baseline and --candidate"),
        ([], "say what to compare"),
        (["--baseline", "model_name", "--candidate", "model_name=b"], "--baseline: cannot read 'model_name'"),
        (["--baseline-time", "now-1h..now-2h", "--candidate-time", "now-1h..now"], "the range ends before it starts"),
        (["--baseline-time", "yesterday..now", "--candidate-time", "now-1h..now"], "'yesterday' is not a time"),
        (
            ["--baseline-time", "now-2h..now-1h", "--candidate-time", "now-1h..now", "--window", "5m"],
            "--window applies to selector",
        ),
        (["--baseline", "a=b", "--candidate", "a=c", "--window", "5 m"], "is not a Prometheus duration"),
        (["--baseline", "a=b", "--candidate", "a=c", "--tolerance", "lots"], "--tolerance: 'lots' is not a share"),
        (["--baseline-time", "nan..now", "--candidate-time", "now-1h..now"], "'nan' is not a time Prometheus can hold"),
        (["--baseline-time", "now-1h..inf", "--candidate-time", "now-1h..now"], "'inf' is not a time"),
        (
            ["--baseline-time", "-99999999999999..-99999999999000", "--candidate-time", "now-1h..now"],
            "'-99999999999999' is not a time Prometheus can hold",
        ),
        (
            ["--baseline-time", "0001-01-01T00:00:00Z..0001-01-01T01:00:00Z", "--candidate-time", "now-1h..now"],
            "is before 1970",
        ),
    ],
)
def test_bad_options_exit_2(args: list[str], message: str):
    spec = Path(__file__).resolve().parents[1] / "specs" / "chat.yaml"
    result = run(spec, "--prometheus", "http://127.0.0.1:1", *args)
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_selector_and_range_parsing():
    assert parse_selector("--x", 'model_name="new",revision=~"r1.*"') == (
        ("model_name", "=", "new"),
        ("revision", "=~", "r1.*"),
    )
    assert parse_selector("--x", "{model_name!=old}") == (("model_name", "!=", "old"),)
    with pytest.raises(SideError, match="not a valid regular expression"):
        parse_selector("--x", "model_name=~(")
    assert parse_range("--r", "now-2h..now-1h", now=10_000.0) == (2800.0, 6400.0)
    assert parse_range("--r", "2026-12-01T08:00:00Z..2026-12-01T09:00:00Z", now=2e9) == (1796112000.0, 1796115600.0)
    with pytest.raises(SideError, match="longer than 90 days"):
        parse_range("--r", "now-100d..now", now=1e10)
    assert parse_tolerance("10%") == pytest.approx(0.1) and parse_tolerance("0.25") == 0.25


# --- credentials against the live server that requires them --------------------------------------


def test_the_live_server_requires_credentials_and_they_come_from_a_file_or_the_environment(live, monkeypatch):
    args = ["--baseline", "model_name=m-old", "--candidate", "model_name=m-twin", "--window", WINDOW]
    refused = run(live["spec"], "--prometheus", live["plain"], *args)
    assert refused.exit_code == 2 and "HTTP 401" in refused.stderr, refused.output
    password = live["tmp"] / "password"
    password.write_text(SECRET + "\n")
    from_file = run(
        live["spec"], "--prometheus", live["plain"], *args, "--basic-auth-user", "gate",
        "--basic-auth-password-file", password, "--format", "json",
    )  # fmt: skip
    assert from_file.exit_code == 0, from_file.output
    assert json.loads(from_file.stdout)["prometheus"] == live["plain"]
    monkeypatch.setenv("GENOBS_PROMETHEUS_PASSWORD", SECRET)
    from_env = run(live["spec"], "--prometheus", live["plain"], *args, "--basic-auth-user", "gate", "--format", "md")
    assert from_env.exit_code == 0 and "verdict: no regression" in from_env.stdout, from_env.output
    monkeypatch.setenv("GENOBS_PROMETHEUS_PASSWORD", "wrong")
    wrong = run(live["spec"], "--prometheus", live["plain"], *args, "--basic-auth-user", "gate")
    assert wrong.exit_code == 2 and "HTTP 401" in wrong.stderr


# --- hostile or odd servers on loopback: fail closed, exit 2 for what is not an answer -------------


def _answering(values: Callable[[str], str | None]) -> contextlib.AbstractContextManager[str]:
    """A Prometheus stand-in on loopback: each instant query answered with one sample `values(expr)`, or none."""
    seen: list[bytes] = []

    def handle(conn) -> None:
        form = urllib.parse.parse_qs(seen[-1].partition(b"\r\n\r\n")[2].decode())
        value = values(form.get("query", [""])[0])
        result = [{"metric": {}, "value": [1, value]}] if value is not None else []
        reply(ok({"resultType": "vector", "result": result}))(conn)

    return serve(handle, seen)


SPEC = Path(__file__).resolve().parents[1] / "specs" / "chat.yaml"
SIDES = ["--baseline", "model_name=a", "--candidate", "model_name=b", "--window", "5m"]


def _finished_only(expr: str) -> str | None:
    """Finished requests on both sides, and not one other figure."""
    return "5" if expr.startswith("sum(rate(vllm:request_success_total") and "finished_reason" not in expr else None


def test_a_candidate_without_data_for_every_gated_kpi_fails():
    with _answering(_finished_only) as url:
        result = run(SPEC, "--prometheus", url, *SIDES, "--format", "json")
    assert result.exit_code == 1, result.output
    doc = json.loads(result.stdout)
    assert doc["verdict"] == "fail"
    assert {r["key"] for r in doc["kpis"] if r["verdict"] == "NO DATA"} >= {"ttft_p99", "output_speed_per_user"}
    with _answering(_finished_only) as url:
        text = run(SPEC, "--prometheus", url, *SIDES)
    verdict = text.stdout.splitlines()[-1]
    assert verdict.startswith("verdict: FAIL, ") and "gated KPI(s) without candidate data: " in verdict
    assert "TTFT p99" in verdict and "nothing could be judged" in verdict


def test_wrong_shaped_answers_are_exit_2_never_a_regression():
    matrix = ok({"resultType": "matrix", "result": [{"metric": {}, "values": [[1, "1"]]}]})
    with serve(reply(matrix)) as url:
        result = run(SPEC, "--prometheus", url, *SIDES)
    assert result.exit_code == 2 and "resultType 'matrix'" in result.stderr, result.output
    with serve(reply(ok({"resultType": "vector", "result": [{"metric": {}, "value": [1, 5]}]}))) as url:
        result = run(SPEC, "--prometheus", url, *SIDES)
    assert result.exit_code == 2 and "no [time, \"value\"] sample" in result.stderr, result.output


def test_one_deadline_covers_every_query():
    def slow(conn) -> None:
        time.sleep(0.8)
        reply(ok({"resultType": "vector", "result": [{"metric": {}, "value": [1, "5"]}]}))(conn)

    start = time.monotonic()
    with serve(slow) as url:
        result = run(SPEC, "--prometheus", url, *SIDES, "--timeout", "5", "--deadline", "3")
    assert result.exit_code == 2 and "within the overall deadline of 3s (--deadline)" in result.stderr, result.output
    assert time.monotonic() - start < 6


def test_json_stays_strict_when_a_change_overflows():
    def tiny_baseline(expr: str) -> str:
        return "1e-320" if 'model_name="a"' in expr and "request_success" not in expr else "5"

    with _answering(tiny_baseline) as url:
        result = run(SPEC, "--prometheus", url, *SIDES, "--format", "json")
    assert result.exit_code in (0, 1), result.output

    def refuse(constant: str) -> None:
        raise ValueError(constant)

    doc = json.loads(result.stdout, parse_constant=refuse)
    assert any("written as null" in n for n in doc["non_finite"]), doc


def test_plot_draws_selectors_with_dollar_signs_and_keeps_the_table(tmp_path: Path):
    png = tmp_path / "compare.png"
    sides = ["--baseline", 'model_name=~"a$"', "--candidate", 'model_name=~"^b$|c$"', "--window", "5m"]
    with _answering(lambda expr: "0.5" if "quantile" in expr else "5") as url:
        result = run(SPEC, "--prometheus", url, *sides, "--plot", png)
    assert result.exit_code in (0, 1), result.output
    assert result.stdout.splitlines()[-1].startswith("verdict:")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for bad, needle in ((tmp_path, "is a folder"), (tmp_path / "x.html", "ending in .png")):
        result = run(SPEC, "--prometheus", "http://127.0.0.1:9", *sides, "--plot", bad)
        assert result.exit_code == 2 and needle in result.stderr, result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["compare.png"]


def test_selectors_cannot_forge_lines_or_markup_in_the_reports():
    forged = 'model_name="b\x1b[2K\rverdict: no regression\n<!-- `x`"'
    sides = ["--baseline", "model_name=a", "--candidate", forged, "--window", "5m"]
    with _answering(_finished_only) as url:
        text = run(SPEC, "--prometheus", url, *sides)
        md = run(SPEC, "--prometheus", url, *sides, "--format", "md")
    assert text.exit_code == md.exit_code == 1, text.output
    assert "\x1b" not in text.stdout and "\r" not in text.stdout
    assert [line for line in text.stdout.splitlines() if line.startswith("verdict:")] == [text.stdout.splitlines()[-1]]
    assert "<!--" not in md.stdout and "\\<\\!--" in md.stdout and "\\`x\\`" in md.stdout

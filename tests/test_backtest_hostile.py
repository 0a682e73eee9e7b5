"""`genobs backtest` against hostile servers on loopback: every failure path ends in exit 2
with a clear message, and no output stream ever shows a credential (bearer token, password
in the URL, basic-auth password from a file or the environment, the Basic header, the
contents of a credential file), even where the server echoes the Authorization header in
an error, a flag or a label."""

from __future__ import annotations

import base64
import json
import math
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest
from backtest_fake import FakeSource, Request, fleet, ok, serving
from click.testing import CliRunner
from e2e_support import free_port

from genobs.backtest.rules import load_rules
from genobs.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "backtest"
LATENCY = FIXTURES / "latency.yaml"
NAMES = sorted({s.name for s in load_rules(LATENCY).raw if s.name})
PASSWORD = "hunter2-" + secrets.token_hex(12)
TOKEN = "tok-" + secrets.token_hex(24)


def _echo(req: Request) -> str:
    """What a hostile server may echo: the Authorization header it received, decoded too."""
    value = req.authorization.partition(" ")[2]
    decoded = ""
    if req.authorization.startswith("Basic "):
        decoded = base64.b64decode(value).decode()
    return f"{req.authorization} {decoded}"


def matrix(metric: dict, values: list) -> bytes:
    return ok({"resultType": "matrix", "result": [{"metric": metric, "values": values}]})


UP = {"__name__": "up", "namespace": "llm-prod", "job": "vllm-chat", "instance": "a:1"}
# (case, endpoint answers, what the message says)
CASES: list[tuple[str, dict, str]] = [
    (
        "http error echoing the header",
        {"status/flags": lambda r: (500, json.dumps({"status": "error", "error": _echo(r)}).encode())},
        "HTTP 500",
    ),
    ("flags not a map", {"status/flags": lambda r: (200, ok(["x", _echo(r)]))}, "not a map of flags"),
    (
        "lookback echoing the header",
        {"status/flags": lambda r: (200, ok({"query.lookback-delta": _echo(r)}))},
        "not a duration",
    ),
    (
        "lookback of 99999999y",
        {"status/flags": lambda r: (200, ok({"query.lookback-delta": "99999999y"}))},
        "at most 1d",
    ),
    ("series not a list", {"series": lambda r: (200, ok({"x": _echo(r)}))}, "not a list of series"),
    (
        "series name echoing the header",
        {"series": lambda r: (200, ok([{"__name__": _echo(r)[:60]}]))},
        "invalid metric name",
    ),
    (
        "series label name echoing",
        {"series": lambda r: (200, ok([{"__name__": "up", _echo(r)[:60]: "x"}]))},
        "invalid label name",
    ),
    (
        "series error echoing",
        {"series": lambda r: (400, json.dumps({"status": "error", "error": _echo(r) * 3}).encode())},
        "HTTP 400",
    ),
    ("query value echoing", {"query": lambda r: (200, matrix(UP, [[1, _echo(r)]]))}, "value that is not a number"),
    (
        "query label echoing a lone surrogate",
        {"query": lambda r: (200, matrix({**UP, "pod": "\ud800"}, [[1, "1"]]))},
        "not valid UTF-8",
    ),
    (
        "query name echoing",
        {"query": lambda r: (200, matrix({"__name__": _echo(r)[:50]}, [[1, "1"]]))},
        "invalid metric name",
    ),
    (
        "redirect",
        {"status/flags": lambda r: (302, json.dumps({"status": "error", "error": _echo(r)}).encode())},
        "a redirect",
    ),
]


def credentials(mode: str, url: str, tmp: Path) -> tuple[list[str], dict[str, str], list[str]]:
    """(arguments, environment, secrets that must never be printed) of a credential mode."""
    host = url.removeprefix("http://")
    basic = base64.b64encode(f"sre:{PASSWORD}".encode()).decode()
    if mode == "bearer":
        (tmp / "token").write_text(TOKEN + "\n")
        return ["--prometheus", url, "--bearer-token-file", str(tmp / "token")], {}, [TOKEN, TOKEN[:12]]
    if mode == "url":
        return ["--prometheus", f"http://sre:{PASSWORD}@{host}"], {}, [PASSWORD, PASSWORD[:12], basic]
    if mode == "file":
        (tmp / "pw").write_text(PASSWORD)
        args = ["--prometheus", url, "--basic-auth-user", "sre", "--basic-auth-password-file", str(tmp / "pw")]
        return args, {}, [PASSWORD, PASSWORD[:12], basic]
    args = ["--prometheus", url, "--basic-auth-user", "sre"]
    return args, {"GENOBS_PROMETHEUS_PASSWORD": PASSWORD}, [PASSWORD, PASSWORD[:12], basic]


MODES = ["bearer", "url", "file", "env"]


def backtest(args: list[str], env: dict[str, str]):
    return CliRunner(env=env).invoke(main, ["backtest", str(LATENCY), "--from", "now-3h", "--to", "now-1h", *args])


def assert_secret_free(streams: list[str], needles: list[str]) -> None:
    for text in streams:
        for needle in needles:
            assert needle not in text, f"{needle!r} printed in {text!r}"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("case", "answers", "message"), CASES, ids=[c[0] for c in CASES])
def test_no_failure_path_prints_a_credential(tmp_path: Path, mode: str, case: str, answers: dict, message: str):
    fake = FakeSource(fleet(NAMES, 1), answers=answers)
    with serving(fake) as url:
        args, env, needles = credentials(mode, url, tmp_path)
        result = backtest([*args, "--timeout", "5"], env)
    assert result.exit_code == 2, (case, result.output)
    assert message in result.stderr, (case, result.stderr)
    assert "Traceback" not in result.output and "internal error" not in result.output, result.output
    assert fake.seen and all(r.authorization for r in fake.seen)  # the credentials were sent
    assert_secret_free([result.stdout, result.stderr], needles)


@pytest.mark.parametrize("mode", MODES)
def test_unreachable_slow_and_dry_run_print_no_credential(tmp_path: Path, mode: str):
    args, env, needles = credentials(mode, f"http://127.0.0.1:{free_port()}", tmp_path)
    result = backtest(args, env)
    assert result.exit_code == 2 and "cannot reach Prometheus" in result.stderr, result.output
    outputs = [result.stdout, result.stderr]
    fake = FakeSource(fleet(NAMES, 1), answers={"status/runtimeinfo": lambda r: (time.sleep(3), (200, ok({})))[1]})
    with serving(fake) as url:
        args, env, _ = credentials(mode, url, tmp_path)
        result = backtest([*args, "--timeout", "1"], env)
        assert result.exit_code == 2 and "within 1s (--timeout)" in result.stderr, result.output
        outputs += [result.stdout, result.stderr]
        fake.answers.clear()
        result = backtest([*args, "--dry-run"], env)
        assert result.exit_code == 0 and "selectors," in result.stdout, result.output
        outputs += [result.stdout, result.stderr]
    assert_secret_free(outputs, needles)


def test_credential_files_are_neither_printed_nor_their_names_raw(tmp_path: Path):
    """A credential file that is not one printable line is refused without quoting it; a file
    name with a terminal escape in it is printed escaped."""
    bad = tmp_path / "token\x1b[2Kforged"
    bad.write_text(f"{TOKEN}\nsecond line {PASSWORD}\n")
    result = backtest(["--bearer-token-file", str(bad)], {})
    assert result.exit_code == 2 and "one line of printable ASCII" in result.stderr, result.output
    assert "\x1b" not in result.output and "token\\x1b[2Kforged" in result.stderr
    assert_secret_free([result.stdout, result.stderr], [TOKEN, TOKEN[:12], PASSWORD])
    missing = tmp_path / "link\x1b]0;title\x07"
    missing.symlink_to(tmp_path / "nowhere\x1b[31m")
    result = backtest(["--basic-auth-user", "sre", "--basic-auth-password-file", str(missing)], {})
    assert result.exit_code == 2 and "\x1b" not in result.output and "\x07" not in result.output, repr(result.output)


def test_a_full_run_scrubs_labels_that_echo_the_secret(tmp_path: Path):
    """A server that puts the password into its series' labels: the run completes (the real
    promtool and private Prometheus in the loop), and no stream of the process, run as its
    own process so that the tools' output would show too, holds the password."""
    series = [{**s, "pod": f"pod-{PASSWORD}"} for s in fleet(["up"], 2)]
    fake = FakeSource(series)
    fake.answers["query"] = lambda r: (200, down(r, fake))
    with serving(fake) as url:
        args, env, needles = credentials("url", url, tmp_path)
        cmd = [sys.executable, "-m", "genobs", "backtest", str(LATENCY), "--from", "now-2h", "--to", "now-1h", *args]
        done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env}, timeout=300)
        out_json = subprocess.run(
            [*cmd, "--format", "json"], capture_output=True, text=True, env={**os.environ, **env}, timeout=300
        )
    assert done.returncode == 0, done.stderr
    assert "VllmTargetDown" in done.stdout and "pod=pod-***" in done.stdout, done.stdout
    assert out_json.returncode == 0 and json.loads(out_json.stdout)["candidate"]["episodes"]
    assert_secret_free([done.stdout, done.stderr, out_json.stdout, out_json.stderr], needles)


def down(req: Request, fake: FakeSource) -> bytes:
    """`up` answers 0: every target is down for the whole history."""
    doc = json.loads(FakeSource(fake.series, fake.scrape).answer(req)[1])
    for s in doc["data"]["result"]:
        s["values"] = [[t, "0"] for t, _ in s.get("values", [])]
    return json.dumps(doc).encode()


def test_max_series_counts_what_is_copied():
    """A server whose /series listing shows one series but whose answers hold many: the copy
    stops at --max-series with a message, instead of pulling whatever the answers hold."""
    fake = FakeSource(fleet(["up"], 1))
    many = fleet(["up"], 6)

    def answers(req: Request) -> tuple[int, bytes]:
        t = float(req.params["time"])
        return 200, ok({"resultType": "matrix", "result": [{"metric": s, "values": [[t, "1"]]} for s in many]})

    fake.answers["query"] = answers
    with serving(fake) as url:
        result = backtest(["--prometheus", url, "--max-series", "3"], {})
    assert result.exit_code == 2, result.output
    assert "the copy holds more than --max-series 3 series" in result.stderr, result.stderr


def test_a_lone_surrogate_in_a_listed_label_is_a_clear_error():
    fake = FakeSource([{**fleet(["up"], 1)[0], "pod": "\udc80"}])
    with serving(fake) as url:
        result = backtest(["--prometheus", url, "--dry-run"], {})
    assert result.exit_code == 2 and "not valid UTF-8" in result.stderr, result.output
    assert "internal error" not in result.output


def test_an_edge_tier_spec_backtests_the_alerts_of_both_tiers(tmp_path: Path):
    """An edge-tier spec's own files hold no alert; its backtest evaluates both tiers' rules over
    one history, so it reports what the untiered spec reports."""
    edge = tmp_path / "edge.yaml"
    edge.write_text(LATENCY.read_text() + "output: {tier: edge}\n")
    fake = FakeSource(fleet(NAMES, 1))
    outputs = []
    with serving(fake) as url:
        for spec in (edge, LATENCY):
            result = CliRunner().invoke(main, ["backtest", str(spec), "--prometheus", url, "--from", "now-2h"])
            assert result.exit_code == 0, result.output
            outputs.append([line for line in result.stdout.splitlines() if "alert rules never fired" in line])
    assert outputs[0] and outputs[0] == outputs[1], outputs


def test_a_server_refusing_long_queries_is_asked_shorter_ones_for_the_rest_of_the_range():
    """A source whose --query.max-samples refuses a rule evaluated over more than 30 steps: the
    query is asked again with half its steps, and the rest of that rule's range no longer (not
    back at the size the answer's series allow, refused again after every answer), nor at the
    same size when the range left is shorter than the steps."""
    fake = FakeSource(fleet(NAMES, 1))
    plain = FakeSource(fake.series, fake.scrape)
    asked: list[tuple[str, int]] = []
    refusal = b'{"status":"error","errorType":"execution","error":"query processing would load too many samples into memory in query execution"}'

    def refuses_long(req: Request) -> tuple[int, bytes]:
        steps = round((float(req.params["end"]) - float(req.params["start"])) / float(req.params["step"])) + 1
        asked.append((req.params["query"], steps))
        return (422, refusal) if steps > 30 else plain.answer(req)

    fake.answers["query_range"] = refuses_long
    with serving(fake) as url:
        result = backtest(["--prometheus", url], {})
    assert result.exit_code == 0, result.output
    by_rule: dict[str, list[int]] = {}
    for query, steps in asked:
        by_rule.setdefault(query, []).append(steps)
    assert len(by_rule) >= 5, by_rule
    for query, steps in by_rule.items():
        refused = [n for n in steps if n > 30]
        # the longest range asked first, halved until under 30: log2(range / 30) refusals at most
        assert len(refused) <= max(1, math.ceil(math.log2(max(steps) / 30))), (query, steps)
        assert len(set(refused)) == len(refused), (query, steps)  # never the same refused size twice


def test_a_server_too_slow_for_long_queries_gets_shorter_ones():
    """A source that takes longer than --timeout to evaluate a rule over more than 30 steps (what
    a day of a bucket rate over 1,000 engine ranks did at 2,000 steps): each query that got no
    answer is asked again with half its steps, and no later query asks for more, so the run
    completes after a few timeouts in all, not a few per rule."""
    fake = FakeSource(fleet(NAMES, 1))
    plain = FakeSource(fake.series, fake.scrape)
    asked: list[int] = []

    def slow_when_long(req: Request) -> tuple[int, bytes]:
        steps = round((float(req.params["end"]) - float(req.params["start"])) / float(req.params["step"])) + 1
        asked.append(steps)
        if steps > 30:
            time.sleep(2.5)
        return plain.answer(req)

    fake.answers["query_range"] = slow_when_long
    with serving(fake) as url:
        result = backtest(["--prometheus", url, "--timeout", "1"], {})
    assert result.exit_code == 0, result.output
    slow = [n for n in asked if n > 30]
    rules = len({r.params["query"] for r in fake.seen if r.path == "query_range"})
    assert rules >= 5 and asked[-1] <= 30, (rules, asked)
    # some 300 steps halved to 30 or fewer is 4 timeouts; two rules are recorded at a time, each
    # halving until the first shared ceiling reaches the other: at most twice that for the whole
    # run, where timeouts per rule would be 4 for each of its rules
    assert 1 <= len(slow) <= 8 < 4 * rules, (rules, asked)

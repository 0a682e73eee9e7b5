"""Input that used to get through validation: special files as specs, values with a
trailing newline, free text that re-shapes the runbook, label names PromQL reads as
numbers, numbers that overflow, and control characters that forge terminal lines.
Every case must end in a spec error (exit 2) naming the field, never a hang, an
internal error or output that fails its own checks."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from genobs.build import render_spec
from genobs.compiler import build_plan
from genobs.errors import Problem, SpecError
from genobs.loader import load_spec, load_spec_text
from tests.conftest import REPO

GOOD = 'version: genobs/v1\nname: t\nuse_case: chat\nservice: {engine_version: "0.33", selector: {job: vllm}}\n'
GENOBS = [sys.executable, "-m", "genobs"]


def problems(text: str) -> list[Problem]:
    with pytest.raises(SpecError) as err:
        build_plan(load_spec_text(text, "s.yaml"))
    return err.value.problems


def one(text: str, field: str) -> str:
    found = problems(text)
    assert [p.field for p in found] == [field], [str(p) for p in found]
    return found[0].message


def run(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*GENOBS, *args], cwd=cwd, capture_output=True, text=True, timeout=timeout)


# --- special files -----------------------------------------------------------------------------


@pytest.mark.parametrize("command", [["build", "--no-check"], ["check"], ["explain", "ttft", "--spec"]])
def test_fifo_as_spec_is_refused_quickly(tmp_path: Path, command: list[str]):
    fifo = tmp_path / "spec.yaml"
    os.mkfifo(fifo)
    start = time.monotonic()
    r = run(*command, str(fifo), cwd=tmp_path, timeout=30)  # before: hung until killed
    elapsed = time.monotonic() - start
    assert r.returncode == 2, r.stderr
    assert "not a regular file" in r.stderr and "FIFO" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
    assert elapsed < 20


def test_device_and_socket_as_spec_are_refused(tmp_path: Path):
    with pytest.raises(SpecError, match="character device"):
        load_spec("/dev/zero")
    path = tmp_path / "s.yaml"
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(path))
        with pytest.raises(SpecError, match="socket"):
            load_spec(path)


def test_spec_folder_reports_fifos_and_dangling_links(tmp_path: Path):
    (tmp_path / "good.yaml").write_text(GOOD)
    os.mkfifo(tmp_path / "pipe.yaml")
    (tmp_path / "gone.yaml").symlink_to(tmp_path / "missing.yaml")
    (tmp_path / "notes.txt").write_text("not a spec")  # other suffixes are not specs: ignored
    r = run("build", "--no-check", str(tmp_path), "-o", str(tmp_path / "out"), cwd=tmp_path, timeout=30)
    assert r.returncode == 2, r.stderr
    assert f"{tmp_path / 'pipe.yaml'}: error: not a regular file (a FIFO)" in r.stderr
    assert f"{tmp_path / 'gone.yaml'}: error: symbolic link to a missing file" in r.stderr
    assert "notes.txt" not in r.stderr
    assert not (tmp_path / "out").exists()


# --- full-match validation ---------------------------------------------------------------------


NEWLINE_CASES = [
    ('name: "t\\n"', "name"),
    ('team: "sre\\n"', "team"),
    ('dashboard: {title: "Chat\\n"}', "dashboard.title"),
    ('dashboard: {uid: "abc\\n"}', "dashboard.uid"),
    ('dashboard: {folder: "LLM\\n"}', "dashboard.folder"),
    ('kubernetes: {namespace: "monitoring\\n"}', "kubernetes.namespace"),
    ('kubernetes: {labels: {release: "kps\\n"}}', "kubernetes.labels"),
    ('kubernetes: {labels: {"release\\n": kps}}', "kubernetes.labels"),
    ('rate_window: "5m\\n"', "rate_window"),
    ('evaluation_interval: "30s\\n"', "evaluation_interval"),
    ('runbook: {base_url: "https://x.example/r\\n"}', "runbook.base_url"),
    ('slos: [{name: "a\\n", sli: ttft, threshold: 1s, objective: 99%}]', "slos[0].name"),
    ('slos: [{name: a, sli: ttft, threshold: "1s\\n", objective: 99%}]', "slos[0].threshold"),
    ('slos: [{name: a, sli: ttft, threshold: 1s, objective: "99%\\n"}]', "slos[0].objective"),
    ('alerts: {ttft: {warning: "2s\\n"}}', "alerts.ttft.warning"),
]


@pytest.mark.parametrize(("line", "field"), NEWLINE_CASES)
def test_trailing_newline_is_refused(line: str, field: str):
    text = GOOD.replace("name: t", line) if line.startswith("name:") else GOOD + line + "\n"
    found = problems(text)
    assert any(p.field.startswith(field) for p in found), [str(p) for p in found]


@pytest.mark.parametrize(
    ("service", "field"),
    [
        ('{selector: {"job\\n": vllm}}', "service.selector"),
        ('{selector: {job: "vllm\\n"}}', "service.selector.job"),
        ('{group_by: ["model_name\\n"]}', "service.group_by[0]"),
        ('{models: ["gpt\\n"]}', "service.models[0]"),
        ('{engine_version: "0.33\\n"}', "service.engine_version"),
    ],
)
def test_trailing_newline_in_service_is_refused(service: str, field: str):
    text = GOOD.replace('service: {engine_version: "0.33", selector: {job: vllm}}', f"service: {service}")
    fields = {p.field for p in problems(text)}
    assert any(f.startswith(field) for f in fields), fields


def test_no_validator_uses_match_with_a_dollar_anchor():
    """`re.match('...$')` accepts a trailing newline: validators use fullmatch."""
    offenders = []
    for path in (REPO / "genobs").rglob("*.py"):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"""\.match\(|re\.compile\(r?["'].*\$["']\)""", line) and "$" in line:
                offenders.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert not offenders, offenders


# --- label names and numbers -------------------------------------------------------------------


@pytest.mark.parametrize("label", ["NaN", "inf", "Inf", "nan", "INF"])
def test_label_names_promql_reads_as_numbers_are_spec_errors(label: str):
    msg = one(
        GOOD.replace("selector: {job: vllm}", f'selector: {{job: vllm}}, group_by: ["{label}"]'), "service.group_by[0]"
    )
    assert "number" in msg


def test_label_name_length_is_limited():
    msg = one(
        GOOD.replace("selector: {job: vllm}", f"selector: {{job: vllm}}, group_by: [{'a' * 200}]"),
        "service.group_by[0]",
    )
    assert "characters" in msg


def test_400_digit_threshold_is_a_spec_error():
    msg = one(GOOD + f"alerts: {{waiting_requests: {{warning: {'9' * 400}}}}}\n", "alerts.waiting_requests.warning")
    assert "too large" in msg


def test_400_digit_duration_threshold_is_a_spec_error():
    assert problems(GOOD + f"alerts: {{ttft: {{warning: {'9' * 400}s}}}}\n")


@pytest.mark.parametrize("value", ['"inf"', '"nan"', '".inf"', "1e308", "true", f"{'9' * 400}", "-1"])
def test_min_request_rate_must_be_a_finite_plausible_number(value: str):
    text = GOOD.replace("selector: {job: vllm}", f"selector: {{job: vllm}}, min_request_rate: {value}")
    assert problems(text)[0].field == "service.min_request_rate"


@pytest.mark.parametrize(
    ("buckets", "reason"),
    [
        ("[1e300]", "number"),  # YAML 1.1 reads 1e300 as text
        ("[1.0e+300]", "at most"),
        ("[2, 1, 0.5]", "increasing"),
        ("[0.5, 0.5, 1]", "increasing"),
        ("[-1, 1]", "positive"),
        ('["NaN", 1]', "number"),
        ('[".inf", 1]', "number"),
        ("[true, 1]", "number"),
    ],
)
def test_slo_buckets_are_finite_sorted_positive(buckets: str, reason: str):
    text = GOOD + f"slos: [{{name: a, sli: ttft, threshold: 1s, objective: 99%, buckets: {buckets}}}]\n"
    found = problems(text)
    assert found[0].field.startswith("slos[0].buckets"), [str(p) for p in found]
    assert reason in found[0].message, found[0].message


@pytest.mark.parametrize(("short", "long"), [("1h", "5m"), ("1h", "1h")])
def test_burn_rate_short_window_must_be_shorter(short: str, long: str):
    text = GOOD + (
        "slos: [{name: a, sli: ttft, threshold: 1s, objective: 99%, "
        f"burn_rates: [{{severity: critical, long: {long}, short: {short}, factor: 14.4}}]}}]\n"
    )
    assert "short window must be shorter" in problems(text)[0].message


@pytest.mark.parametrize("factor", ['"inf"', "1e308", "true"])
def test_burn_rate_factor_is_finite(factor: str):
    text = GOOD + (
        "slos: [{name: a, sli: ttft, threshold: 1s, objective: 99%, "
        f"burn_rates: [{{severity: critical, long: 1h, short: 5m, factor: {factor}}}]}}]\n"
    )
    assert problems(text)[0].field == "slos[0].burn_rates[0].factor"


# --- Markdown ----------------------------------------------------------------------------------

HOSTILE_DESCRIPTIONS = [
    "~~~",
    "~~~python\nall of the runbook is code now",
    "    indented four spaces: a code block",
    "first line\n\n    indented after a blank line",
    "+++\n***\n___",
    "* a list item\n1. numbered",
    "a & b &amp; c",
    "Setext heading\n+++",
    "2024. was a year\n3) ok",
    "trailing spaces make a line break  \nnext",
    "_emphasis_ and *strong*",
    "see https://example.com/a_b_c",
]


def _structure(md: str) -> tuple[list[str], int]:
    """Headings outside code fences and the number of fenced blocks, read as a Markdown parser would."""
    headings, fences, fence = [], 0, None
    for line in md.splitlines():
        m = re.match(r"^ {0,3}(`{3,}|~{3,})", line)
        if fence is None and m:
            fence, fences = m.group(1)[0], fences + 1
        elif fence is not None and m and m.group(1)[0] == fence:
            fence = None
        elif fence is None and re.match(r"^ {0,3}#{1,6} ", line):
            headings.append(line)
    assert fence is None, "a code fence is left open"
    return headings, fences


@pytest.mark.parametrize("description", HOSTILE_DESCRIPTIONS)
def test_description_cannot_change_the_runbook_structure(tmp_path: Path, description: str):
    spec = tmp_path / "s.yaml"
    plain = render_spec(_write(spec, GOOD)).files["RUNBOOK.md"].decode()
    quoted = description.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    hostile = render_spec(_write(spec, GOOD + f'description: "{quoted}"\n')).files["RUNBOOK.md"].decode()
    assert _structure(hostile) == _structure(plain)
    heads, _ = _structure(hostile)
    assert heads[0].startswith("# Runbook") and "## Alert index" in heads
    assert "| Use case |" in hostile and "|---|---|" in hostile
    # the description sits in a quote: every line of it starts with '> ', nothing is indented code
    body = hostile.split("\n\n")[1]
    assert all(line.startswith(">") for line in body.splitlines()), body


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


# --- control characters in messages ------------------------------------------------------------


def test_problem_text_escapes_control_characters():
    p = Problem(message="unknown key '\x1b[2K\rok'", file="a\x1b.yaml", field="alerts.\x1b[31m\r")
    text = str(p)
    assert not any(ord(c) < 32 or 0x7F <= ord(c) < 0xA0 for c in text), repr(text)
    assert "\\x1b" in text and "\\r" in text


def test_spec_key_with_escape_sequence_is_printed_escaped(tmp_path: Path):
    spec = _write(tmp_path / "s.yaml", GOOD + 'alerts: {"\\e[2K\\rttft": {warning: 2s}}\n')
    r = run("build", "--no-check", str(spec), "-o", str(tmp_path / "out"), cwd=tmp_path)
    assert r.returncode == 2
    assert "\x1b" not in r.stderr and "\r" not in r.stderr
    assert "\\x1b[2K\\rttft" in r.stderr


def _test_span(plan) -> tuple[int, int]:
    """(latest eval_time in minutes, input samples) of a plan's generated unit tests."""
    latest, samples = 0, 0
    for _, doc in plan.unit_tests:
        for group in doc["tests"]:
            for case in group.get("alert_rule_test", []) + group.get("promql_expr_test", []):
                t = case["eval_time"]
                latest = max(latest, int(t[:-1]) * (60 if t.endswith("h") else 1))
            for series in group["input_series"]:
                for token in series["values"].split():
                    repeat = re.search(r"x(\d+)$", token)
                    samples += int(repeat.group(1)) + 1 if repeat else 1
    return latest, samples


def test_alert_for_of_days_is_a_spec_error():
    """A `for:` of days made test generation and promtool run for many minutes (1d: 6 min of promtool)."""
    assert "longer than 1h" in one(GOOD + "alerts:\n  ttft: {warning: 1s, for: 2d}\n", "alerts.ttft.for")
    cap = GOOD.replace("use_case: chat", "use_case: capacity") + "capacity:\n  efficiency: {warning: 70%, for: 1d}\n"
    assert "longer than 1h" in one(cap, "capacity.efficiency.for")


def test_longest_accepted_durations_keep_generated_tests_bounded():
    """The longest `for`, rate window, SLO period and burn-rate windows the spec accepts: the
    generated tests span at most rate window + `for` + a few minutes and stay within a small
    multiple of the default spec's samples; an SLO period or window of years costs nothing more."""
    signals = ("ttft", "itl", "e2e", "queue_time", "length_finish", "abort", "success", "kv_cache", "preemptions")
    alerts = "".join(f"  {s}: {{for: 1h}}\n" for s in signals)
    slos = (
        "slos:\n"
        "  - {name: a, sli: ttft, threshold: 1s, objective: 99%, period: 3650d}\n"
        "  - name: b\n    sli: success\n    objective: 99%\n"
        "    burn_rates: [{severity: critical, long: 3650d, short: 365d, factor: 1}]\n"
    )
    default_span, default_samples = _test_span(build_plan(load_spec_text(GOOD + slos, "s.yaml")))
    longest = GOOD + "rate_window: 1h\nalerts:\n" + alerts + slos
    span, samples = _test_span(build_plan(load_spec_text(longest, "s.yaml")))
    assert span <= 60 + 60 + 5, span
    assert samples <= 5 * default_samples, (samples, default_samples)
    assert default_span <= 60, default_span


# --- evaluation_interval: rules that run, in whole seconds -------------------------------------

SLO = "slos: [{name: a, sli: ttft, threshold: 1s, objective: 99%}]\n"


@pytest.mark.parametrize(
    ("interval", "message"),
    [
        ("10y", "is longer than 2m"),
        ("3m", "is longer than 2m"),
        ("500ms", "not a whole number of seconds of at least 1s"),
        ("200ms", "not a whole number of seconds of at least 1s"),
        ("1500ms", "not a whole number of seconds"),
    ],
)
def test_evaluation_interval_out_of_range_is_a_located_error(interval: str, message: str):
    found = problems(GOOD + SLO + f"evaluation_interval: {interval}\n")
    assert [p.field for p in found] == ["evaluation_interval"], [str(p) for p in found]
    assert message in found[0].message and found[0].line == 6


@pytest.mark.parametrize("interval", ["1s", "45s", "2m"])
def test_evaluation_interval_within_range_plans(interval: str):
    plan = build_plan(load_spec_text(GOOD + SLO + f"evaluation_interval: {interval}\n", "s.yaml"))
    assert {g.interval for g in plan.groups if g.name.endswith(("-recording", "-alerts", "-slo"))} == {interval}

"""`genobs simulate` validates its arguments like the spec's numbers: NaN, infinities,
rates it cannot play, absurd rank counts and impossible ports are usage errors
(exit 2) before anything starts, and the largest accepted rate still serves."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request

import pytest
from click.testing import CliRunner

from genobs.cli import main
from genobs.sim.cli import MAX_REQUEST_RATE

GENOBS = [sys.executable, "-m", "genobs"]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--request-rate", "inf"], "request rate"),
        (["--request-rate", "nan"], "request rate"),
        (["--request-rate", "1e9"], "request rate"),
        (["--request-rate", "-1"], "request rate"),
        (["--data-parallel-size", "100000000"], "engine ranks"),
        (["--data-parallel-size", "0"], "engine ranks"),
        (["--port", "70000"], "TCP port"),
        (["--port", "-1"], "TCP port"),
        (["--fault-after", "inf"], "seconds"),
        (["--fault-after", "nan"], "seconds"),
    ],
)
def test_bad_arguments_are_usage_errors(args: list[str], needle: str):
    start = time.monotonic()
    result = CliRunner().invoke(main, ["simulate", *args])
    assert result.exit_code == 2, result.output
    assert needle in result.output and "Traceback" not in result.output
    assert time.monotonic() - start < 5


def test_the_largest_accepted_rate_still_answers():
    proc = subprocess.Popen(
        [*GENOBS, "simulate", "--port", "0", "--request-rate", str(MAX_REQUEST_RATE), "--data-parallel-size", "8"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        url = line.split(" on ", 1)[1].split(" ", 1)[0]
        time.sleep(3)
        for _ in range(3):
            start = time.monotonic()
            with urllib.request.urlopen(url, timeout=10) as resp:
                body = resp.read()
            assert b"vllm:num_requests_running" in body
            assert time.monotonic() - start < 5
    finally:
        proc.terminate()
        proc.wait(10)
        proc.stdout.close()
        proc.stderr.close()


@pytest.mark.parametrize(
    ("args", "option", "needle"),
    [
        (["--addr", "999.1.1.1"], "'--addr'", "cannot serve on '999.1.1.1'"),
        (["--addr", "203.0.113.7"], "'--addr'", "cannot serve on '203.0.113.7'"),  # not an address of this machine
        (["--model", "a\nb=healthy"], "'--model'", "control character"),
        (["--model", "a\x1b[31m"], "'--model'", "control character"),
    ],
)
def test_what_cannot_be_served_names_its_option(args: list[str], option: str, needle: str):
    result = CliRunner().invoke(main, ["simulate", "--port", "0", *args])
    assert result.exit_code == 2, result.output
    assert option in result.output and needle in result.output and "Traceback" not in result.output


def test_a_busy_port_names_the_port_and_ipv6_is_bracketed():
    first = subprocess.Popen([*GENOBS, "simulate", "--port", "0", "--addr", "::1"], stdout=subprocess.PIPE, text=True)
    try:
        banner = first.stdout.readline()
        assert " on http://[::1]:" in banner, banner
        port = banner.split("]:", 1)[1].split("/", 1)[0]
        busy = CliRunner().invoke(main, ["simulate", "--port", port, "--addr", "::1"])
        assert busy.exit_code == 2 and "'--port'" in busy.output and f"port {port} is in use" in busy.output, busy.output
    finally:
        first.terminate()
        first.wait(timeout=10)
        first.stdout.close()

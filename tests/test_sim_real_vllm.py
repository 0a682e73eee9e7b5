"""`genobs simulate --engine vllm` against real vLLM bodies: the families, types, label names,
histogram bounds and enumerated label values of a real vLLM 0.32.0 server
(tests/fixtures/real_vllm_0.32/) and of vLLM 0.33.0's own metrics code with speculative decoding
and NIXL (tests/fixtures/vllm_0.33.0_metrics.txt), each against the simulator run with the same
configuration. Any difference fails with the list of them, so the simulator cannot drift."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from genobs.sim import Simulator
from tests.exposition_diff import differences, shape

FIXTURES = Path(__file__).parent / "fixtures"
REAL_032 = FIXTURES / "real_vllm_0.32"
REFERENCE_033 = FIXTURES / "vllm_0.33.0_metrics.txt"
# the real server's configuration (tests/fixtures/real_vllm_0.32/README.md)
SERVER_032 = ["--version", "0.32.0", "--model", "tiny-llama=healthy", "--no-spec-decode", "--no-nixl",
              "--data-parallel-size", "1", "--max-model-len", "512"]


class Clock:
    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def _report(what: str, found: list[str]) -> str:
    return f"genobs simulate differs from {what} in {len(found)} ways:\n  " + "\n  ".join(found)


def test_simulated_032_server_is_the_real_one_under_load() -> None:
    """Through the CLI, as a user starts it: after some traffic, every family a loaded real server
    writes (the HTTP middleware's included), nothing more."""
    cmd = [sys.executable, "-m", "genobs", "simulate", "--port", "0", "--request-rate", "50", *SERVER_032]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = re.search(r"http://\S+/metrics", proc.stdout.readline()).group(0)
        time.sleep(1.0)  # ~50 answered requests: the middleware's per-handler series exist
        with urllib.request.urlopen(url, timeout=10) as resp:
            body = resp.read().decode()
    finally:
        proc.terminate()
        proc.wait(10)
        proc.stdout.close()
        proc.stderr.close()
    found = differences(shape((REAL_032 / "metrics_loaded.txt").read_text()), shape(body))
    assert not found, _report("a real vLLM 0.32.0 server under load", found)


def test_simulated_032_server_is_the_real_one_at_start() -> None:
    """Before any request: every engine family is there from start-up (histograms included), the
    middleware's per-handler families are declared without series."""
    sim = Simulator("0.32.0", {"tiny-llama": "healthy"}, speculative_decoding=False, disaggregated_prefill=False,
                    data_parallel_size=1, max_model_len=512, request_rate=0.0, clock=Clock())
    found = differences(shape((REAL_032 / "metrics_idle.txt").read_text()), shape(sim.render().decode()))
    assert not found, _report("a real vLLM 0.32.0 server at start", found)


def test_simulated_033_server_is_vllm_033s_own_output() -> None:
    """The 0.33 reference was rendered without the HTTP middleware (no http_* families there), with
    ngram speculative decoding, a NIXL connector (kv_both) and --max-model-len 4096."""
    sim = Simulator("0.33.0", {"demo-model": "healthy"}, data_parallel_size=1, max_model_len=4096, clock=Clock(30.0))
    found = differences(shape(REFERENCE_033.read_text()), shape(sim.render().decode()),
                        keep=lambda family: not family.startswith("http_"))
    assert not found, _report("vLLM 0.33.0's metrics code", found)


def test_the_diff_names_what_drifted() -> None:
    """The comparison itself: a family, a label and a bucket bound that differ each make a line."""
    real = shape((REAL_032 / "metrics_loaded.txt").read_text())
    body = (REAL_032 / "metrics_loaded.txt").read_text()
    drifted = (
        body.replace("vllm:engine_sleep_state", "vllm:engine_sleeping_state")
        .replace('le="500.0"', 'le="512.0"')
        .replace('finished_reason="repetition"', 'finished_reason="repeat"')
    )
    found = differences(real, shape(drifted))
    assert "missing family vllm:engine_sleep_state (gauge)" in found
    assert "extra family vllm:engine_sleeping_state (gauge)" in found
    assert any(line.startswith("vllm:request_prompt_tokens: buckets") for line in found)
    assert "label finished_reason: values ['abort', 'error', 'length', 'repeat', 'stop'], real " \
        "['abort', 'error', 'length', 'repetition', 'stop']" in found

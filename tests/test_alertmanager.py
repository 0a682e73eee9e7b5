"""The generated inhibition rules against the real amtool and a real
Alertmanager on loopback: a critical alert silences its own warning, a fast SLO
burn silences the slow burn, other alerts stay untouched."""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from genobs.build import render_spec
from tests.conftest import SPECS

SPEC_IDS = [p.stem for p in SPECS]


def _binary(*names: str) -> str:
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    pytest.fail(f"{names[0]} is required: install Debian's 'prometheus-alertmanager' package (make test does)")


def _config(spec: Path) -> dict:
    out = render_spec(spec)
    inhibit = yaml.safe_load(out.files["alertmanager/inhibit-rules.yaml"])["inhibit_rules"]
    return {"route": {"receiver": "null"}, "receivers": [{"name": "null"}], "inhibit_rules": inhibit}


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_amtool_accepts_the_inhibit_rules(spec: Path, tmp_path: Path):
    amtool = _binary("amtool")
    path = tmp_path / "alertmanager.yml"
    path.write_text(yaml.safe_dump(_config(spec)))
    proc = subprocess.run([amtool, "check-config", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f" - {len(_config(spec)['inhibit_rules'])} inhibit rules" in proc.stdout, proc.stdout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _request(url: str, body: object | None = None) -> object:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        text = resp.read()
    return json.loads(text) if text else None


@pytest.fixture
def alertmanager(tmp_path: Path):
    binary = _binary("prometheus-alertmanager", "alertmanager")
    spec = next(p for p in SPECS if p.stem == "chat")
    (tmp_path / "am.yml").write_text(yaml.safe_dump(_config(spec)))
    port = _free_port()
    log = open(tmp_path / "am.log", "w")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={tmp_path / 'am.yml'}",
            f"--storage.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/-/ready", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    pytest.fail("alertmanager did not start:\n" + (tmp_path / "am.log").read_text())
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def _alert(name: str, severity: str, **labels: str) -> dict:
    base = {"namespace": "llm-prod", "job": "vllm-chat", "model_name": "gpt-oss-120b", "signal": "x"}
    return {"labels": {"alertname": name, "severity": severity, **base, **labels}}


def test_alertmanager_inhibits_warning_under_critical_and_slow_under_fast_burn(alertmanager: str):
    alerts = [
        _alert("VllmTtftP99High", "critical"),
        _alert("VllmTtftP99High", "warning"),
        _alert("VllmItlP99High", "warning"),  # no critical ITL: stays active
        _alert("VllmTtftP99High", "warning", model_name="other-model"),  # other labels: stays active
        _alert("SloAvailabilityErrorBudgetBurnFast", "critical", slo="availability"),
        _alert("SloAvailabilityErrorBudgetBurnSlow", "warning", slo="availability"),
        _alert("SloFirstTokenErrorBudgetBurnSlow", "warning", slo="first-token"),  # no fast burn: active
        _alert("VllmTtftP99High", "warning", job="someone-else"),  # outside the spec's selector
    ]
    _request(f"{alertmanager}/api/v2/alerts", alerts)
    expected_inhibited = {
        ("VllmTtftP99High", "warning", "gpt-oss-120b", "vllm-chat"),
        ("SloAvailabilityErrorBudgetBurnSlow", "warning", "gpt-oss-120b", "vllm-chat"),
    }
    deadline = time.monotonic() + 20
    while True:
        got = _request(f"{alertmanager}/api/v2/alerts")
        state = {
            (a["labels"]["alertname"], a["labels"]["severity"], a["labels"]["model_name"], a["labels"]["job"]): a[
                "status"
            ]
            for a in got
        }
        inhibited = {k for k, s in state.items() if s["inhibitedBy"]}
        if len(state) == len(alerts) and inhibited == expected_inhibited:
            break
        if time.monotonic() > deadline:
            pytest.fail(f"inhibited {sorted(inhibited)}, expected {sorted(expected_inhibited)}; state {state}")
        time.sleep(0.3)
    for key, status in state.items():
        if key not in expected_inhibited:
            assert status["state"] == "active", (key, status)

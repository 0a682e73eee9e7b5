"""The generated inhibition rules against the real amtool and a real
Alertmanager on loopback: a critical alert silences its own warning, a fast SLO
burn silences the slow burn, an SLO burn silences the threshold alerts of its
signal, a hang silences its queue and latency symptoms; alerts of other models,
instances, signals and selectors stay active."""

from __future__ import annotations

import contextlib
import functools
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
from genobs.compiler import load_plan
from tests.conftest import SPECS

pytestmark = pytest.mark.slow  # real servers on loopback

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


@contextlib.contextmanager
def _running(tmp_path: Path, config: dict):
    """A real Alertmanager on a free loopback port with `config`; yields its URL."""
    binary = _binary("prometheus-alertmanager", "alertmanager")
    (tmp_path / "am.yml").write_text(yaml.safe_dump(config))
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


CHAT = next(p for p in SPECS if p.stem == "chat")


@pytest.fixture
def alertmanager(tmp_path: Path):
    with _running(tmp_path, _config(CHAT)) as url:
        yield url


@functools.cache
def _signals(spec: Path) -> dict[str, str]:
    """alert name -> its `signal` label, as the spec's rules set it."""
    return {a.name: a.signal for a in load_plan(spec)[1].alerts}


def _alert(name: str, severity: str, spec: Path = CHAT, **labels: str) -> dict:
    base = {"namespace": "llm-prod", "job": "vllm-chat", "model_name": "gpt-oss-120b"}
    base["signal"] = _signals(spec).get(name, "x")
    return {"labels": {"alertname": name, "severity": severity, **base, **labels}}


def _key(alert: dict) -> tuple:
    return tuple(sorted(alert["labels"].items()))


def _assert_inhibited(url: str, alerts: list[dict], expected: list[dict]) -> None:
    """Post `alerts`; exactly `expected` (a subset of them) end up inhibited, the rest active."""
    _request(f"{url}/api/v2/alerts", alerts)
    want = {_key(a) for a in expected}
    deadline = time.monotonic() + 20
    while True:
        got = _request(f"{url}/api/v2/alerts")
        state = {tuple(sorted(a["labels"].items())): a["status"] for a in got}
        inhibited = {k for k, s in state.items() if s["inhibitedBy"]}
        if len(state) == len(alerts) and inhibited == want:
            break
        if time.monotonic() > deadline:
            pytest.fail(f"inhibited {sorted(inhibited)}, expected {sorted(want)}")
        time.sleep(0.3)
    for key, status in state.items():
        if key not in want:
            assert status["state"] == "active", (key, status)


def test_alertmanager_inhibits_warning_under_critical_and_slow_under_fast_burn(alertmanager: str):
    alerts = [
        _alert("VllmTtftP99High", "critical"),
        _alert("VllmTtftP99High", "warning"),
        _alert("VllmItlP99High", "warning"),  # no critical ITL: stays active
        _alert("VllmTtftP99High", "warning", model_name="other-model"),  # other labels: stays active
        _alert("SloAvailabilityErrorBudgetBurnFast", "critical", slo="availability"),
        _alert("SloAvailabilityErrorBudgetBurnSlow", "warning", slo="availability"),
        _alert("SloFirstTokenErrorBudgetBurnSlow", "warning", slo="first-token", model_name="third-model"),
        _alert("VllmTtftP99High", "warning", job="someone-else"),  # outside the spec's selector
    ]
    _assert_inhibited(alertmanager, alerts, [alerts[1], alerts[5]])


def test_alertmanager_inhibits_threshold_alerts_under_the_slo_burn_of_their_signal(alertmanager: str):
    ttft_critical = _alert("VllmTtftP99High", "critical")
    ttft_warning = _alert("VllmTtftP99High", "warning")
    itl_critical = _alert("VllmItlP99High", "critical")
    itl_warning = _alert("VllmItlP99High", "warning", model_name="m2")
    success = _alert("VllmSuccessRatioLow", "critical", model_name="m3")
    alerts = [
        _alert("SloFirstTokenErrorBudgetBurnFast", "critical", slo="first-token"),
        ttft_critical,  # the TTFT burn pages: the TTFT threshold alert of the same model is silenced
        ttft_warning,
        _alert("VllmTtftP99High", "critical", model_name="m2"),  # another model: no burn there
        _alert("VllmE2eLatencyP99High", "critical"),  # another signal of the same model
        _alert("SloTokenPaceErrorBudgetBurnSlow", "warning", slo="token-pace", model_name="m2"),
        itl_warning,  # a slow burn silences the warning of its signal ...
        _alert("VllmItlP99High", "critical", model_name="m2"),  # ... but not the page
        itl_critical,  # m1 has no ITL burn
        _alert("SloAvailabilityErrorBudgetBurnFast", "critical", slo="availability", model_name="m3"),
        success,
        _alert("VllmAbortRatioHigh", "warning", model_name="m3"),  # aborts are not the availability signal
    ]
    _assert_inhibited(alertmanager, alerts, [ttft_critical, ttft_warning, itl_warning, success])


def test_alertmanager_inhibits_queue_and_latency_symptoms_under_a_fleet_hang(alertmanager: str):
    symptoms = [
        _alert("VllmQueueTimeP99High", "warning"),
        _alert("VllmRequestsWaitingHigh", "critical"),
        _alert("VllmKvCacheSaturated", "warning"),
        _alert("VllmTtftP99High", "critical"),
        _alert("VllmE2eLatencyP99High", "warning"),
    ]
    alerts = [
        _alert("VllmFleetNoProgress", "critical"),
        *symptoms,
        _alert("VllmReplicaQueueOutlier", "warning", instance="10.0.0.12:8000"),
        _alert("VllmEngineHung", "warning", instance="10.0.0.11:8000"),  # names the replicas to restart
        _alert("VllmSuccessRatioLow", "critical"),  # not a queue symptom: stays
        _alert("VllmQueueTimeP99High", "warning", model_name="m2"),  # another model keeps its alerts
        _alert("VllmRequestsWaitingHigh", "critical", model_name="m2"),
        _alert("VllmTtftP99High", "critical", namespace="llm-staging"),  # outside the selector
    ]
    _assert_inhibited(alertmanager, alerts, [*symptoms, alerts[len(symptoms) + 1]])


def test_alertmanager_inhibits_the_queue_outlier_of_the_hung_instance_only(alertmanager: str):
    hung, other = {"instance": "10.0.0.11:8000"}, {"instance": "10.0.0.12:8000"}
    outlier = _alert("VllmReplicaQueueOutlier", "warning", **hung)  # requests pile up behind the hang
    alerts = [
        _alert("VllmEngineHung", "warning", **hung),
        outlier,
        _alert("VllmReplicaTtftOutlier", "warning", **other),  # a slow replica that is not hung
        _alert("VllmReplicaQueueOutlier", "warning", **hung, model_name="m2"),  # another model on that address
        _alert("VllmTtftP99High", "warning"),  # the model's own alert: the other replicas still serve
    ]
    _assert_inhibited(alertmanager, alerts, [outlier])


def test_alertmanager_inhibits_the_symptoms_of_one_hung_instance(tmp_path: Path):
    spec = tmp_path / "perinstance.yaml"
    text = yaml.safe_load(CHAT.read_text())
    text["service"]["group_by"] = ["model_name", "instance"]
    spec.write_text(yaml.safe_dump(text))
    hung, other = {"instance": "10.0.0.11:8000"}, {"instance": "10.0.0.12:8000"}
    symptoms = [
        _alert("VllmKvCacheSaturated", "warning", spec, **hung),
        _alert("VllmRequestsWaitingHigh", "warning", spec, **hung),
    ]
    alerts = [
        _alert("VllmEngineHung", "warning", spec, **hung),
        *symptoms,
        _alert("VllmKvCacheSaturated", "warning", spec, **other),  # a replica that is not hung
        _alert("VllmRequestsWaitingHigh", "warning", spec, **hung, model_name="m2"),  # another model there
        _alert("VllmSuccessRatioLow", "warning", spec, **hung),  # not a symptom of the hang
    ]
    with _running(tmp_path, _config(spec)) as url:
        _assert_inhibited(url, alerts, symptoms)

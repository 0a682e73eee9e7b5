"""`genobs simulate --engine otel-genai | otel-genai-server` against the real bodies of
tests/fixtures/otel_genai/ (the OpenTelemetry Python SDK's Prometheus exporter, and the
Collector-style UTF-8 translations of the same data points): families, types, label names and
bucket bounds per conventions release and translation; and the faults each scenario puts where
the application and the server would see them."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from genobs.sim import Simulator
from genobs.sim.otel_genai import OtelGenAISimulator
from tests.exposition_diff import differences, shape

FIXTURES = Path(__file__).parent / "fixtures" / "otel_genai"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"  # the fixtures' request model
RELEASES = ("1.36.0", "1.37.0", "1.41.1", "1.44.0")
TRANSLATIONS = {"underscores_with_suffixes": "", "utf8": ".utf8", "utf8_without_suffixes": ".utf8_without_suffixes"}
SIDES = {"otel-genai": "client", "otel-genai-server": "server"}


def genai(family: str) -> bool:
    """The application's other families (its process, its own metrics) are not the GenAI layer's."""
    return family.startswith("gen_ai") or family == "target_info"


class Clock:
    def __init__(self, t: float = 0.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


def simulated(release: str, scenario: str, engine: str = "otel-genai", translation: str | None = None,
              seconds: float = 30.0, fault_after: float = 0.0) -> str:
    clock = Clock()
    sim = OtelGenAISimulator(release, {MODEL: scenario}, engine=engine, translation=translation,
                             fault_after=fault_after, request_rate=10.0, clock=clock)
    clock.t = seconds
    return sim.render().decode()


def real(release: str, engine: str, translation: str) -> str:
    return (FIXTURES / release / f"{SIDES[engine]}{TRANSLATIONS[translation]}.txt").read_text()


def _report(what: str, found: list[str]) -> str:
    return f"genobs simulate differs from {what} in {len(found)} ways:\n  " + "\n  ".join(found)


@pytest.mark.parametrize("translation", TRANSLATIONS)
@pytest.mark.parametrize("engine", SIDES)
@pytest.mark.parametrize("release", RELEASES)
def test_simulated_body_is_the_real_one(release: str, engine: str, translation: str) -> None:
    """With failures among the calls (the real bodies have some), every GenAI family, type, label
    set and bucket bound of the real body, nothing more."""
    found = differences(shape(real(release, engine, translation)),
                        shape(simulated(release, "success_drop", engine, translation)), keep=genai)
    assert not found, _report(f"the real {SIDES[engine]} body of conventions {release} ({translation})", found)


@pytest.mark.parametrize("release", ("1.36.0", "1.44.0"))
def test_healthy_body_lacks_only_the_failure_series(release: str) -> None:
    """Before any failure the SDK has no series with error.type: the families and bounds are the
    real ones, the only difference the failures' label set."""
    found = differences(shape(real(release, "otel-genai", "underscores_with_suffixes")),
                        shape(simulated(release, "healthy")), keep=genai)
    assert found and all(line.startswith("gen_ai_client_operation_duration_seconds: labels") for line in found)
    assert "error_type" in found[0].split(", real")[1] and "error_type" not in found[0].split(", real")[0]


def test_simulate_cli_serves_the_real_body() -> None:
    """Through the CLI, as a user starts it: UTF-8 names as the Collector writes them."""
    cmd = [sys.executable, "-m", "genobs", "simulate", "--engine", "otel-genai", "--version", "1.41.1",
           "--translation", "utf8", "--port", "0", "--model", f"{MODEL}=success_drop", "--request-rate", "50"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert "OpenTelemetry GenAI client 1.41.1" in line, line
        url = re.search(r"http://\S+/metrics", line).group(0)
        time.sleep(0.5)
        # Prometheus 3 asks for UTF-8 names (escaping=allow-utf-8); without it the names come underscored
        accept = {"Accept": "text/plain;version=1.0.0;escaping=allow-utf-8"}
        with urllib.request.urlopen(urllib.request.Request(url, headers=accept), timeout=10) as resp:
            body = resp.read().decode()
    finally:
        proc.terminate()
        proc.wait(10)
        proc.stdout.close()
        proc.stderr.close()
    found = differences(shape(real("1.41.1", "otel-genai", "utf8")), shape(body), keep=genai)
    assert not found, _report("the real client body of conventions 1.41.1 (utf8)", found)


def means(text: str) -> dict[str, float]:
    """Family -> mean observation (sum / count over every series); `<family>:errors` -> the share
    of the operation count carrying error.type."""
    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    errors: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.endswith("_sum"):
                sums[fam.name] = sums.get(fam.name, 0.0) + s.value
            elif s.name.endswith("_count"):
                counts[fam.name] = counts.get(fam.name, 0.0) + s.value
                if s.labels.get("error_type"):
                    errors[fam.name] = errors.get(fam.name, 0.0) + s.value
    out = {f: sums[f] / counts[f] for f in counts if counts[f]}
    out.update({f"{f}:errors": errors.get(f, 0.0) / counts[f] for f in counts if counts[f]})
    return out


CLIENT_TTFT = "gen_ai_client_operation_time_to_first_chunk_seconds"
CLIENT_E2E = "gen_ai_client_operation_duration_seconds"
SERVER_TTFT = "gen_ai_server_time_to_first_token_seconds"
SERVER_E2E = "gen_ai_server_request_duration_seconds"


def test_ttft_degradation_is_a_late_first_chunk_at_the_application_and_the_server() -> None:
    healthy, slow = means(simulated("1.41.1", "healthy")), means(simulated("1.41.1", "ttft_degradation"))
    assert healthy[CLIENT_TTFT] < 0.6 and slow[CLIENT_TTFT] > 8.0
    server = means(simulated("1.41.1", "ttft_degradation", "otel-genai-server"))
    assert server[SERVER_TTFT] > 8.0
    # before the fault starts, the same release is healthy
    assert means(simulated("1.41.1", "ttft_degradation", fault_after=60.0))[CLIENT_TTFT] < 0.6


def test_success_drop_sets_error_type_on_a_share_of_operations() -> None:
    client = means(simulated("1.36.0", "success_drop"))
    server = means(simulated("1.36.0", "success_drop", "otel-genai-server"))
    assert client[f"{CLIENT_E2E}:errors"] == pytest.approx(0.15)
    assert server[f"{SERVER_E2E}:errors"] == pytest.approx(0.15)
    assert means(simulated("1.36.0", "healthy"))[f"{CLIENT_E2E}:errors"] == 0.0


def test_network_retry_is_seen_by_the_application_only() -> None:
    """Operation duration and first chunk grow by the retries at the application; the server's
    series, and the engine pods' under the same scenario, are those of a healthy fleet."""
    healthy, retry = means(simulated("1.41.1", "healthy")), means(simulated("1.41.1", "network_retry"))
    assert retry[CLIENT_E2E] - healthy[CLIENT_E2E] == pytest.approx(3.0, abs=0.1)
    assert retry[CLIENT_TTFT] - healthy[CLIENT_TTFT] == pytest.approx(3.0, abs=0.1)
    assert retry[f"{CLIENT_E2E}:errors"] == 0.0
    for translation in TRANSLATIONS:
        server = [simulated("1.41.1", s, "otel-genai-server", translation) for s in ("healthy", "network_retry")]
        assert server[0] == server[1]
    pods = []
    for scenario in ("healthy", "network_retry"):
        clock = Clock()
        sim = Simulator("0.33.0", {MODEL: scenario}, clock=clock)
        clock.t = 30.0
        pods.append([x for x in sim.render().decode().splitlines() if "_created" not in x and "process_" not in x])
    assert pods[0] == pods[1]


def test_unknown_scenarios_and_translations_are_refused() -> None:
    with pytest.raises(ValueError, match="not simulated for OpenTelemetry GenAI"):
        OtelGenAISimulator("1.41.1", {"m": "kv_saturation"})
    with pytest.raises(ValueError, match="unknown name translation"):
        OtelGenAISimulator("1.41.1", None, translation="dots")
    with pytest.raises(ValueError, match="outside the catalog's range"):
        OtelGenAISimulator("1.26.0", None)
    from click.testing import CliRunner

    from genobs.sim.cli import simulate

    result = CliRunner().invoke(simulate, ["--engine", "vllm", "--translation", "utf8"])
    assert result.exit_code == 2 and "only OpenTelemetry metrics are translated" in result.output

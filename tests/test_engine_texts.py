"""Alert, runbook and dashboard texts follow the engine: a spec on SGLang or TensorRT-LLM says
"SGLang" / "TensorRT-LLM" where a vLLM spec says "vLLM", and names its own metrics switch, never
vLLM's flag or version notes (issue 21)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from genobs.build import render_spec
from genobs.catalog import ENGINES, load_catalog
from genobs.cli import main
from genobs.commands.doctor import hint
from genobs.data import load as load_data
from tests.conftest import REPO, SPECS


def engine_of(spec: Path) -> str:
    return yaml.safe_load(spec.read_text())["service"].get("engine", "vllm")


OTHER_ENGINE_SPECS = [s for s in SPECS if engine_of(s) != "vllm"]

# written here from the engines' docs (engines_catalog.md), not read from the profiles:
# what turns each engine's Prometheus metrics on or off
SWITCH = {
    "vllm": ["--disable-log-stats"],
    "sglang": ["--enable-metrics"],
    "trtllm": ["return_perf_metrics", "/prometheus/metrics"],
}
NAME = {"vllm": "vLLM", "sglang": "SGLang", "trtllm": "TensorRT-LLM"}
PREFIX = {"vllm": "Vllm", "sglang": "Sglang", "trtllm": "Trtllm"}

# sentences of a non-vLLM spec's output that name vLLM on purpose: (spec, text) -> why.
# None today; a comparison with vLLM added later belongs here, with its reason.
COMPARES_WITH_VLLM: dict[tuple[str, str], str] = {}

VLLM_WORD = re.compile(r"\bvLLM\b")


def user_texts(files: dict[str, bytes]) -> dict[str, list[str]]:
    """The prose a user reads, per file: alert annotations, the runbook, dashboard titles and
    descriptions (queries and labels are left out: they hold wire names, not words)."""
    out: dict[str, list[str]] = {}
    for name, data in sorted(files.items()):
        if name.startswith("prometheus/") and name.endswith(".yaml") and "/tests/" not in name:
            doc = yaml.safe_load(data) or {}
            for group in doc.get("groups", []):
                for rule in group["rules"]:
                    if "alert" in rule:
                        out.setdefault(name, []).extend(str(v) for v in rule.get("annotations", {}).values())
        elif name.startswith("prometheus/tests/"):
            doc = yaml.safe_load(data)
            for test in doc.get("tests", []):
                for case in test.get("alert_rule_test", []):
                    for alert in case.get("exp_alerts", []):
                        out.setdefault(name, []).extend(str(v) for v in alert.get("exp_annotations", {}).values())
        elif name.endswith("RUNBOOK.md"):
            out[name] = data.decode().splitlines()
        elif name.endswith(".json"):
            texts: list[str] = []
            _panel_words(json.loads(data), texts)
            out[name] = texts
    return out


def _panel_words(node: object, into: list[str]) -> None:
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("title", "description") and isinstance(value, str):
                into.append(value)
            else:
                _panel_words(value, into)
    elif isinstance(node, list):
        for item in node:
            _panel_words(item, into)


def runbook_section(runbook: str, alert: str) -> str:
    start = runbook.index(f"\n## {alert}\n")
    end = runbook.find("\n## ", start + 1)
    return runbook[start : end if end > 0 else None]


@pytest.fixture(scope="module", params=OTHER_ENGINE_SPECS, ids=[s.stem for s in OTHER_ENGINE_SPECS])
def built(request) -> tuple[Path, dict[str, bytes]]:
    return request.param, render_spec(request.param).files


def test_there_are_examples_on_other_engines() -> None:
    assert {engine_of(s) for s in OTHER_ENGINE_SPECS} == {"sglang", "trtllm"}


def test_no_vllm_word_in_another_engines_output(built) -> None:
    spec, files = built
    found = [
        (name, text)
        for name, texts in user_texts(files).items()
        for text in texts
        if VLLM_WORD.search(text) and (spec.stem, text) not in COMPARES_WITH_VLLM
    ]
    assert not found, found[:5]
    assert not any("--disable-log-stats" in t for texts in user_texts(files).values() for t in texts)


def test_metrics_absent_names_the_engines_own_switch(built) -> None:
    spec, files = built
    engine = engine_of(spec)
    section = runbook_section(files["RUNBOOK.md"].decode(), f"{PREFIX[engine]}MetricsAbsent")
    for switch in SWITCH[engine]:
        assert switch in section, (switch, section)
    assert f"No {NAME[engine]} engine metrics" in section


def test_vllm_keeps_its_flag_and_version_notes() -> None:
    files = render_spec(REPO / "specs" / "chat.yaml").files
    runbook = files["RUNBOOK.md"].decode()
    section = runbook_section(runbook, "VllmMetricsAbsent")
    assert "vLLM runs with --disable-log-stats" in section and "- vLLM started with --disable-log-stats?" in section
    assert "(request_time_per_output_token_seconds, vLLM >= 0.11)" in runbook
    assert "a full cache with nothing waiting is normal (vLLM keeps prefix blocks cached)" in runbook


@pytest.mark.parametrize("spec", SPECS, ids=[s.stem for s in SPECS])
def test_no_placeholder_is_left_unfilled(spec: Path) -> None:
    files = render_spec(spec).files
    left = [
        (name, text)
        for name, texts in user_texts(files).items()
        for text in texts
        if re.search(r"\{(engine|metrics_path|hint:[a-z_]+|alert:[A-Za-z0-9]+)\}", text)
    ]
    assert not left, left[:5]


def test_every_pod_engine_defines_every_hint_the_texts_name() -> None:
    named = set(re.findall(r"\{hint:([a-z_]+)\}", json.dumps([load_data("signals.yaml"), load_data("capacity.yaml")])))
    named |= set(re.findall(r"\{hint:([a-z_]+)\}", (REPO / "genobs" / "plan" / "dashboard.py").read_text()))
    named |= set(re.findall(r"\{hint:([a-z_]+)\}", (REPO / "genobs" / "commands" / "doctor.py").read_text()))
    assert {"metrics_off", "metrics_switch"} <= named
    for engine in ENGINES:
        hints = dict(load_catalog(engine).hints)
        assert named <= set(hints), (engine, named - set(hints))
        if engine != "vllm":
            assert not any(VLLM_WORD.search(text) for text in hints.values()), engine


@pytest.mark.parametrize("engine", ["sglang", "trtllm"])
def test_explain_and_doctor_speak_of_the_engine(engine: str) -> None:
    spec = str(REPO / "specs" / f"{engine}.yaml")
    out = CliRunner().invoke(main, ["explain", f"{PREFIX[engine]}MetricsAbsent", "--spec", spec])
    assert out.exit_code == 0, out.output
    assert SWITCH[engine][0] in out.output and not VLLM_WORD.search(out.output), out.output
    # signals and an alert, explained from the handbook, in the engine's words
    for name in ("metrics_absent", "engine_hung", f"{PREFIX[engine]}FleetNoProgress"):
        told = CliRunner().invoke(main, ["explain", name, "--spec", spec])
        assert told.exit_code == 0 and not VLLM_WORD.search(told.output), told.output
        assert not re.search(r"\{(engine|metrics_path|hint:[a-z_]+|alert:[A-Za-z0-9]+)\}", told.output)
    doctor = hint("no_series", [], "colon", engine)
    assert doctor.startswith(f"No {NAME[engine]} series") and SWITCH[engine][0] in doctor
    assert not VLLM_WORD.search(doctor)


# what sets the GPU memory an engine reserves at start (engines' docs), written here
MEMORY_FLAG = {"sglang": "--mem-fraction-static", "trtllm": "free_gpu_memory_fraction"}


@pytest.mark.parametrize("engine", ["sglang", "trtllm"])
def test_capacity_texts_follow_the_engine(engine: str, tmp_path: Path) -> None:
    """specs/capacity.yaml with one field changed, service.engine (and, on SGLang, a TTFT bound that
    is one of its buckets): the capacity alerts, runbook and panels speak of that engine."""
    spec = yaml.safe_load((REPO / "specs" / "capacity.yaml").read_text())
    spec["service"]["engine"] = engine
    spec["service"]["engine_version"] = {"sglang": "0.5.23", "trtllm": "1.2.1"}[engine]
    if engine == "sglang":
        spec["capacity"]["goodput"]["ttft"] = "2s"  # SGLang's TTFT buckets have no 2.5 s bound
    path = tmp_path / f"capacity-{engine}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    files = render_spec(path).files
    texts = [t for ts in user_texts(files).values() for t in ts]
    assert not [t for t in texts if VLLM_WORD.search(t) or "--gpu-memory-utilization" in t]
    section = runbook_section(files["RUNBOOK.md"].decode(), f"{PREFIX[engine]}GpuMemoryBelowReservation")
    assert f"GPU memory below the {NAME[engine]} reservation" in section
    assert MEMORY_FLAG[engine] in section


@pytest.mark.parametrize("engine", ["sglang", "trtllm"])
def test_init_comments_speak_of_the_engine(engine: str) -> None:
    out = CliRunner().invoke(main, ["init", "--use-case", "chat", "--model", "m", "--engine", engine])
    assert out.exit_code == 0, out.output
    text = out.output.split("\nwarning:")[0]
    assert not VLLM_WORD.search(text), [line for line in text.splitlines() if VLLM_WORD.search(line)]
    assert "disaggregated_prefill: false      # KV-transfer signals" in text


# SGLang's KV-transfer series cover whichever backend moves the cache (Mooncake, NIXL, ...: its
# --disaggregation-transfer-backend), so its texts may name NIXL only as one backend among others
SGLANG_NIXL_AS_ONE_BACKEND = re.compile(r"Mooncake, NIXL|unlike NIXL's time per transfer")


def test_sglang_kv_transfer_is_named_for_every_backend_not_nixl() -> None:
    files = render_spec(REPO / "specs" / "sglang-pd.yaml").files
    rules = yaml.safe_load(files["prometheus/alerts.rules.yaml"])
    names = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    assert {"SglangKvTransferTimeP99High", "SglangKvTransfersFailing"} <= names
    assert not [n for n in names if "Nixl" in n]
    nixl = [
        (name, text)
        for name, texts in user_texts(files).items()
        for text in texts
        if "NIXL" in text and not SGLANG_NIXL_AS_ONE_BACKEND.search(text)
    ]
    assert not nixl, nixl[:5]
    board = json.loads(files["grafana/genobs-sglang-pd.json"])
    titles: list[str] = []
    _panel_words(board, titles)
    assert {"KV transfer time", "KV transfer failures", "Disaggregated prefill (KV transfer)"} <= set(titles)
    runbook = files["RUNBOOK.md"].decode()
    assert "--disaggregation-bootstrap-port" in runbook_section(runbook, "SglangKvTransfersFailing")


def test_vllm_keeps_its_nixl_names() -> None:
    files = render_spec(REPO / "specs" / "disaggregated.yaml").files
    rules = yaml.safe_load(files["prometheus/alerts.rules.yaml"])
    names = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    assert {"VllmNixlTransferTimeP99High", "VllmNixlTransfersFailing", "VllmNixlKvExpired"} <= names
    runbook = files["RUNBOOK.md"].decode()
    assert "the NIXL side-channel port" in runbook_section(runbook, "VllmNixlTransfersFailing")
    assert "**NIXL KV transfer** - NIXL KV transfer p99 above" in runbook

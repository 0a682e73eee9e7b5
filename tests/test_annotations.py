"""The dashboard's change marks (engine restarts, new KV-cache configs), evaluated by the real
promtool on series written from vLLM 0.33's own exposition: a pod restarts with another
gpu_memory_utilization, another restarts with the same config, a third runs on untouched."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from genobs.compiler import build_plan
from genobs.loader import load_spec, load_spec_text
from genobs.render.dashboard import render_dashboard

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "fixtures" / "vllm_0.33.0_metrics.txt"
TARGET = 'namespace="llm-prod",job="vllm-chat"'
PODS = ("10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000")
START = 1796045895  # process_start_time_seconds of the first start


def _config_labels() -> str:
    """vllm:cache_config_info's label set exactly as vLLM 0.33 exports it (engine 0)."""
    line = next(x for x in FIXTURE.read_text().splitlines() if x.startswith("vllm:cache_config_info{"))
    return re.match(r"vllm:cache_config_info\{(.*)\} 1\.0$", line).group(1)


def _annotations(spec_text: str | None = None) -> dict[str, str]:
    doc = load_spec(REPO / "specs" / "chat.yaml") if spec_text is None else load_spec_text(spec_text, "s.yaml")
    dashboard = render_dashboard(build_plan(doc).dashboard)
    return {a["name"]: a["expr"] for a in dashboard["annotations"]["list"] if not a.get("builtIn")}


def _series() -> list[dict]:
    labels = _config_labels()
    new = labels.replace('gpu_memory_utilization="0.92"', 'gpu_memory_utilization="0.95"')
    assert new != labels
    out = []
    for i, pod in enumerate(PODS):
        at = f'{TARGET},instance="{pod}"'
        # pod 1 restarts at 30m with another config, pod 2 at 50m with the same one; pod 3 runs on
        starts = {0: f"{START}x29 {START + 1800}x30", 1: f"{START}x49 {START + 3000}x10", 2: f"{START}x60"}[i]
        out.append({"series": f"process_start_time_seconds{{{at}}}", "values": starts})
        if i == 0:  # the old series goes stale at the restart; the new label set appears
            out.append({"series": f"vllm:cache_config_info{{{at},{labels}}}", "values": "1x29 stale"})
            out.append({"series": f"vllm:cache_config_info{{{at},{new}}}", "values": "_x30 1x30"})
        elif i == 1:  # down for 3 minutes, back with the same config
            out.append({"series": f"vllm:cache_config_info{{{at},{labels}}}", "values": "1x47 stale _ _ 1x10"})
        else:
            out.append({"series": f"vllm:cache_config_info{{{at},{labels}}}", "values": "1x60"})
    return out


def _labels(pod: str, name: str = "", extra: str = "") -> str:
    return f"{name}{{{TARGET},instance=\"{pod}\"{',' + extra if extra else ''}}}"


def test_marks_restarts_and_config_changes_and_nothing_else(tmp_path: Path):
    exprs = _annotations()
    assert set(exprs) == {"Engine restarts", "Engine config"}
    restart, config = exprs["Engine restarts"], exprs["Engine config"]
    labels = _config_labels()
    new = labels.replace('gpu_memory_utilization="0.92"', 'gpu_memory_utilization="0.95"')
    cfg = "vllm:cache_config_info"
    cases = [
        # a fleet that just started: every target is new
        (restart, "1m", [(_labels(p, "process_start_time_seconds"), START) for p in PODS]),
        (config, "1m", [(_labels(p, cfg, labels), 1) for p in PODS]),
        # steady state: no mark
        (restart, "20m", []),
        (config, "20m", []),
        # pod 1 restarted with gpu_memory_utilization 0.95: both marks, on pod 1 only
        (restart, "30m", [(_labels(PODS[0]), 1)]),
        (config, "30m", [(_labels(PODS[0], cfg, new), 1)]),
        (restart, "40m", []),
        (config, "40m", []),
        # pod 2 back after 3 minutes down, same config: the config mark shows it started again
        (restart, "50m", [(_labels(PODS[1]), 1)]),
        (config, "51m", [(_labels(PODS[1], cfg, labels), 1)]),
        (restart, "58m", []),
        (config, "58m", []),
    ]
    tests = [
        {
            "expr": expr,
            "eval_time": at,
            "exp_samples": [{"labels": lab, "value": value} for lab, value in want],
        }
        for expr, at, want in cases
    ]
    rules = tmp_path / "none.rules.yaml"
    rules.write_text("groups: []\n")
    test = tmp_path / "annotations.test.yaml"
    test.write_text(
        yaml.safe_dump(
            {
                "rule_files": [rules.name],
                "evaluation_interval": "1m",
                "tests": [{"interval": "1m", "input_series": _series(), "promql_expr_test": tests}],
            },
            sort_keys=False,
            width=100000,
        )
    )
    out = subprocess.run(["promtool", "test", "rules", test.name], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.parametrize("version", ["0.7.0", "0.10.1", "0.33.0"])
def test_marks_read_the_two_change_series(version: str):
    text = "version: genobs/v1\nname: t\nuse_case: chat\nservice: {engine_version: '%s', selector: {job: v}}\n"
    exprs = _annotations(text % version)
    assert set(exprs) == {"Engine restarts", "Engine config"}
    names = {n for e in exprs.values() for n in re.findall(r"([a-zA-Z_:][\w:]*)\{", e)}
    assert names == {"process_start_time_seconds", "vllm:cache_config_info"}
    # both are in vLLM's real exposition, gauges
    exposition = FIXTURE.read_text()
    assert all(f"# TYPE {n} gauge" in exposition for n in names)


@pytest.mark.parametrize("dialect", ["underscore"])
def test_annotations_follow_the_metric_name_dialect(dialect: str):
    text = (
        "version: genobs/v1\nname: t\nuse_case: chat\n"
        f"service: {{engine_version: '0.33', selector: {{job: v}}, metric_names: {dialect}}}\n"
    )
    exprs = _annotations(text)
    assert "vllm_cache_config_info{" in exprs["Engine config"] and "vllm:" not in exprs["Engine config"]

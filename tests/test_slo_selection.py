"""The spec's models are selected once per spec in the SLO rules: the model list does not grow
with the number of SLOs, and two specs on one selector keep to their own models (real promtool)."""

from __future__ import annotations

import itertools
import subprocess
from pathlib import Path

import pytest
import yaml

from genobs.build import render_spec

MODELS = [f"org/model-{i:03d}" for i in range(50)]
# one SLO of each SLI, and one whose shortest window (10m) is not the rate window: it reads raw counters
KINDS = (
    "{name: N-ttft, sli: ttft, threshold: 1s, objective: 99%}",
    "{name: N-itl, sli: itl, threshold: 100ms, objective: 99%}",
    "{name: N-e2e, sli: e2e, threshold: 10s, objective: 95%}",
    "{name: N-ok, sli: success, objective: 99.5%}",
    "{name: N-aborts, sli: success, objective: 99%, bad_reasons: [error, abort]}",
    "{name: N-raw, sli: success, objective: 99.5%, burn_rates: [{severity: critical, long: 1h, short: 10m, factor: 14.4}]}",
    "{name: N-rawttft, sli: ttft, threshold: 1s, objective: 99%, "
    "burn_rates: [{severity: critical, long: 1h, short: 10m, factor: 14.4}]}",
)


def spec(name: str, models: list[str], slos: list[str], group_by: str = "[model_name]") -> str:
    body = "\n".join(f"  - {s}" for s in slos)
    return (
        f'version: genobs/v1\nname: {name}\nuse_case: chat\nservice:\n  engine_version: "0.33"\n'
        f"  selector: {{namespace: llm-prod, job: vllm}}\n  group_by: {group_by}\n"
        f"  models: [{', '.join(models)}]\nslos:\n{body}\n"
    )


def slos(n: int) -> list[str]:
    kinds = itertools.cycle(KINDS)
    return [next(kinds).replace("N-", f"s{i:02d}-") for i in range(n)]


def rule_files(tmp_path: Path, text: str) -> dict[str, str]:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    files = render_spec(path).files
    return {rel: data.decode() for rel, data in files.items() if rel.endswith(".rules.yaml")}


@pytest.mark.parametrize("group_by", ["[model_name]", "[]"])
def test_the_model_list_does_not_grow_with_the_number_of_slos(tmp_path, group_by):
    regex = "|".join(MODELS).replace(".", "\\\\.")  # as written in YAML
    counts, sizes = {}, {}
    for n in (3, 30):
        files = rule_files(tmp_path, spec("scale", MODELS, slos(n), group_by))
        slo = files["prometheus/slo.rules.yaml"]
        counts[n] = {rel: text.count(regex) for rel, text in files.items()}
        sizes[n] = len(slo)
        assert MODELS[7] not in slo.replace(regex, ""), "a model named outside the one model list"
    assert counts[3] == counts[30]
    assert counts[30]["prometheus/slo.rules.yaml"] == 1  # the marker
    # 10x the SLOs: about 10x the rules, not 10x plus a model list per rule
    assert sizes[30] < 11 * sizes[3]


def _labels(name: str, **labels: str) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


def _fleet(model: str, instance: str, error_per_minute: int) -> list[dict]:
    """One engine serving `model`, 60 requests a minute of which `error_per_minute` fail
    (vllm_real_exposition.txt: request_success_total per finished_reason, the running gauge)."""
    base = {"namespace": "llm-prod", "job": "vllm", "model_name": model, "engine": "0", "instance": instance}
    stop, error = 60 - error_per_minute, error_per_minute
    return [
        {"series": _labels("vllm:request_success_total", **base, finished_reason="stop"), "values": f"0+{stop}x60"},
        {"series": _labels("vllm:request_success_total", **base, finished_reason="error"), "values": f"0+{error}x60"},
        {"series": _labels("vllm:num_requests_running", **base), "values": "3x60"},
    ]


def test_two_specs_on_one_selector_record_slo_series_only_for_their_own_models(tmp_path, promtool):
    availability = ["{name: availability, sli: success, objective: 99.5%}", KINDS[5].replace("N-", "")]
    files: list[str] = []
    for name, models in (("team-a", ["a1", "a2"]), ("team-b", ["b1"])):
        (tmp_path / name).mkdir()
        for rel, text in rule_files(tmp_path / name, spec(name, models, availability)).items():
            path = tmp_path / f"{name}-{Path(rel).name}"
            path.write_text(text)
            files.append(path.name)
    # a2 fails 10 % of its requests (20x the 0.5 % budget); a1 and b1 none
    series = [*_fleet("a1", "p1:8000", 0), *_fleet("a2", "p2:8000", 6), *_fleet("b1", "p3:8000", 0)]

    def per_model(expr: str, rows: dict[tuple[str, str], int]) -> dict:
        """How many series of `expr` each (model, spec) has at minute 30."""
        samples = [{"labels": _labels("", model_name=m, spec=s), "value": v} for (m, s), v in rows.items()]
        return {"expr": f"count by (model_name, spec) ({expr})", "eval_time": "30m", "exp_samples": samples}

    tests = []
    for slo, window in (("availability", "5m"), ("availability", "1h"), ("raw", "10m"), ("raw", "1h")):
        burn = f'genobs:slo_burn_rate:rate{window}{{slo="{slo}"'
        a = {("a1", "team-a"): 1, ("a2", "team-a"): 1}
        tests.append(per_model(f'{burn},spec="team-a"}}', a))
        tests.append(per_model(f'{burn},spec="team-b"}}', {("b1", "team-b"): 1}))
        # only a2 burns, and only in its own spec's series
        tests.append(per_model(f"{burn}}} > 19", {("a2", "team-a"): 1}))
    doc = {
        "rule_files": sorted(files),
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": series, "promql_expr_test": tests}],
    }
    (tmp_path / "t.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    proc = subprocess.run([promtool, "test", "rules", "t.yaml"], cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr

"""service.other_engine_version: a fleet in the middle of an upgrade across a metric rename is
read under both names, one series per target, and only for families a rename separates."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from conftest import spec_text
from fleet_series import Fleet
from scenario_runner import REPO, build, promtool_expr_tests, rule_groups

from genobs.compiler import load_plan
from genobs.errors import SpecError


def plan_of(engine: str, other: str | None):
    fields = {"engine_version": f'"{engine}"'}
    if other is not None:
        fields["other_engine_version"] = f'"{other}"'
    return load_plan(text=spec_text(**fields), file="r.yaml")[1]


def exprs(plan) -> str:
    return "\n".join(r.expr for g in plan.groups for r in g.rules)


def test_renamed_families_are_read_under_both_names_and_nothing_else_changes() -> None:
    alone, both = exprs(plan_of("0.9.1", None)), exprs(plan_of("0.9.1", "0.12.0"))
    assert "kv_cache_usage_perc" not in alone and "inter_token_latency_seconds" not in alone
    # this release's name first, the other's after `or`: a target that exports both counts once
    assert re.search(r"\(vllm:gpu_cache_usage_perc\{[^}]*\} or vllm:kv_cache_usage_perc\{", both)
    assert re.search(
        r"\(rate\(vllm:time_per_output_token_seconds_bucket\{[^}]*\}\[5m\]\) or "
        r"rate\(vllm:inter_token_latency_seconds_bucket\{",
        both,
    )
    assert "rate(vllm:prefix_cache_hits_total{" in both
    # families that were never renamed read exactly what they read before
    renamed = ("vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc", "vllm:time_per_output_token_seconds",
               "vllm:inter_token_latency_seconds", "vllm:gpu_prefix_cache_", "vllm:prefix_cache_")

    def others(text: str) -> set[str]:
        return {n for n in re.findall(r"vllm:\w+", text) if not n.startswith(renamed)}

    assert others(alone) == others(both) and others(alone)


def test_a_stand_in_is_not_a_rename() -> None:
    # before 0.11 the per-token histogram stood in for TPOT; in 0.10.1 that name is the ITL's: the
    # per-request TPOT of a 0.12 spec must not fall back on it
    both = exprs(plan_of("0.12.0", "0.10.1"))
    tpot_reads = re.findall(r"[\w:]+(?=_bucket\{)", both)
    assert "vllm:request_time_per_output_token_seconds" in tpot_reads
    assert re.search(r"rate\(vllm:inter_token_latency_seconds_bucket\{[^}]*\}\[5m\]\) or "
                     r"rate\(vllm:time_per_output_token_seconds_bucket\{", both)
    assert not re.search(r"request_time_per_output_token_seconds_bucket\{[^}]*\}\[5m\]\) or", both)


@pytest.mark.parametrize(
    ("other", "message"),
    [
        ("0.1.0", "service.other_engine_version: vLLM 0.1.0 is outside the versions genobs knows"),
        ("0.9.1", "service.other_engine_version: is engine_version itself (0.9.1); name the other release"),
    ],
)
def test_bad_other_versions_are_located_errors(other: str, message: str) -> None:
    with pytest.raises(SpecError) as err:
        plan_of("0.9.1", other)
    assert message in str(err.value)


def test_pods_exporting_both_names_count_once(tmp_path: Path, promtool: str) -> None:
    """vLLM 0.10.2 exports the ITL under both names and the KV gauge and prefix counters too: with
    a 0.9.1 spec reading both, the recorded ITL rate and KV maximum equal a single name's."""
    spec = yaml.safe_load((REPO / "specs" / "agentic.yaml").read_text())
    spec["service"]["other_engine_version"] = "0.10.2"
    fleet = Fleet({"engines": 2, "duration": "15m", "version": "0.10.2", "replicas": 3, "traffic": {"kv": 0.7}}, spec)
    series = fleet.series()
    assert {"vllm:time_per_output_token_seconds_bucket", "vllm:inter_token_latency_seconds_bucket"} <= {
        s["series"].split("{")[0] for s in series
    }
    files, groups, _, _ = rule_groups(build(spec, tmp_path))
    model = spec["service"]["models"][0]
    sel = f'namespace="{fleet.namespace}",job="{fleet.job}",model_name="{model}"'
    group = "model_name, namespace, job"
    tests = [
        {
            "expr": f'genobs:itl_seconds:bucket_rate5m{{{sel},le="+Inf"}} - on ({group}) '
            f'sum by ({group}) (rate(vllm:inter_token_latency_seconds_bucket{{{sel},le="+Inf"}}[5m]))',
            "eval_time": "15m",
            "exp_samples": [{"labels": f"{{{sel}}}", "value": 0}],
        },
        {
            "expr": f"genobs:kv_cache_usage:max{{{sel}}}",
            "eval_time": "15m",
            "exp_samples": [{"labels": f"genobs:kv_cache_usage:max{{{sel}}}", "value": 0.7}],
        },
    ]
    proc = promtool_expr_tests(promtool, files, groups, series, tests, tmp_path / "t.yaml")
    assert proc.returncode == 0, proc.stdout[-3000:]

"""The engine version picks metric names; unsupported features are clear errors."""

from __future__ import annotations

import pytest

from genobs.compiler import build_plan
from genobs.errors import SpecError
from genobs.loader import load_spec_text
from genobs.promql import metric_names
from tests.conftest import spec_text


def raw_names(version: str, features: str = "") -> set[str]:
    text = spec_text(engine_version=f'"{version}"') + features
    plan = build_plan(load_spec_text(text, "v.yaml"))
    names: set[str] = set()
    for rule in (*plan.recording_rules, *plan.alerts):
        names |= metric_names(rule.expr)
    return names


@pytest.mark.parametrize(
    ("version", "present", "absent"),
    [
        (
            "0.7.3",
            {
                "vllm:gpu_cache_usage_perc",
                "vllm:time_per_output_token_seconds_bucket",
                "vllm:gpu_prefix_cache_hit_rate",
            },
            {"vllm:kv_cache_usage_perc", "vllm:inter_token_latency_seconds_bucket"},
        ),
        (
            "0.9.1",
            {
                "vllm:gpu_cache_usage_perc",
                "vllm:time_per_output_token_seconds_bucket",
                "vllm:gpu_prefix_cache_hits_total",
            },
            {
                "vllm:kv_cache_usage_perc",
                "vllm:inter_token_latency_seconds_bucket",
                "vllm:request_time_per_output_token_seconds_bucket",
            },
        ),
        ("0.9.2", {"vllm:kv_cache_usage_perc", "vllm:prefix_cache_hits_total"}, {"vllm:gpu_cache_usage_perc"}),
        (
            "0.11.0",
            {
                "vllm:kv_cache_usage_perc",
                "vllm:inter_token_latency_seconds_bucket",
                "vllm:request_time_per_output_token_seconds_bucket",
            },
            {
                "vllm:gpu_cache_usage_perc",
                "vllm:time_per_output_token_seconds_bucket",
                "vllm:gpu_prefix_cache_hits_total",
            },
        ),
        (
            "0.33.0",
            {"vllm:kv_cache_usage_perc", "vllm:inter_token_latency_seconds_bucket", "vllm:prefix_cache_queries_total"},
            {"vllm:gpu_cache_usage_perc", "vllm:time_per_output_token_seconds_bucket"},
        ),
    ],
)
def test_version_boundaries_pick_names(version, present, absent):
    names = raw_names(version)
    assert present <= names
    assert not (absent & names)


def test_spec_decode_counters_from_0_8_3_gauge_before():
    feat = "features: {speculative_decoding: true}\n"
    assert "vllm:spec_decode_num_accepted_tokens_total" in raw_names("0.8.3", feat)
    assert "vllm:spec_decode_draft_acceptance_rate" in raw_names("0.7.3", feat)
    assert "vllm:spec_decode_num_drafts_total" in raw_names("0.8.5", feat)


@pytest.mark.parametrize(
    ("version", "feature", "needle"),
    [
        ("0.11.0", "disaggregated_prefill", "vllm:nixl_xfer_time_seconds from 0.11.1"),
        ("0.8.1", "speculative_decoding", "from 0.8.3"),
    ],
)
def test_feature_needs_version(version, feature, needle):
    text = spec_text(engine_version=f'"{version}"') + f"features: {{{feature}: true}}\n"
    with pytest.raises(SpecError) as err:
        build_plan(load_spec_text(text, "v.yaml"))
    msg = str(err.value)
    assert f"features.{feature}" in msg and needle in msg and "v.yaml:" in msg


def test_version_outside_catalog():
    with pytest.raises(SpecError, match="outside the versions genobs knows"):
        build_plan(load_spec_text(spec_text(engine_version='"0.5.0"'), "v.yaml"))


def test_underscore_dialect_renames_every_raw_metric():
    text = spec_text(metric_names="underscore")
    plan = build_plan(load_spec_text(text, "v.yaml"))
    names = set()
    for rule in plan.recording_rules:
        names |= metric_names(rule.expr)
    raw = {n for n in names if not n.startswith("genobs:")}
    assert "vllm_request_success_total" in raw
    assert not any(n.startswith("vllm:") for n in raw)


# the replica drill-down's per-engine copies of three gauges (its panels read recorded series
# only): per engine by design, and only plain gauges, so no rate() work per engine
DRILL_DOWN = {
    "genobs:engine_kv_cache_usage:max": "vllm:kv_cache_usage_perc",
    "genobs:engine_requests_running:sum": "vllm:num_requests_running",
    "genobs:engine_requests_waiting:sum": "vllm:num_requests_waiting",
}


# liveness pairs held requests with progress per engine: a hung data-parallel rank of a dense
# model is invisible once the replica's engines are summed
PER_ENGINE = {"genobs:engine_requests_active:sum", "genobs:engine_progress:rate5m", "genobs:engine_requests_finished:rate5m"}


def test_engine_label_is_always_aggregated_away():
    plan = build_plan(load_spec_text(spec_text(), "v.yaml"))
    kept = {}
    for rule in plan.recording_rules:
        outer = rule.expr.split("by (")[1].split(")")[0] if "by (" in rule.expr else ""
        if "engine" in outer.split(", "):
            kept[rule.record] = rule.expr
    assert set(kept) == set(DRILL_DOWN) | PER_ENGINE, sorted(kept)
    kept = {k: v for k, v in kept.items() if k in DRILL_DOWN}
    for record, expr in kept.items():
        assert "rate(" not in expr and f"({DRILL_DOWN[record]}{{" in expr, expr

"""The scenario fleets (tests/fleet_series.py) against vLLM itself: every vLLM series they
export for 0.33.0 exists in a real 0.33.0 /metrics body with the same label names and
bucket bounds, and the series behave like Prometheus would store them (monotonic integer
counters, cumulative buckets, restarts after a pod was down)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from fleet_series import DEFAULT_TRAFFIC, REAL_K3_ACCEPTANCE, Dist, Fleet
from prometheus_client.parser import text_string_to_metric_families

REAL_EXPOSITION = Path(__file__).parent / "fixtures" / "vllm_0.33.0_metrics.txt"
TARGET_LABELS = {"job", "namespace", "instance", "pod"}  # added by the scrape, not by vLLM
SPEC = {"service": {"engine_version": "0.33", "selector": {"namespace": "ns", "job": "vllm"}, "models": ["m"]}}
FULL = {
    "replicas": 2,
    "max_model_len": 4096,  # as in the real exposition: request-token buckets 1 .. 2000
    "duration": "10m",
    "traffic": {
        "spec_decode": {"accept": REAL_K3_ACCEPTANCE},
        "nixl": {"transfers": 2, "failed": 0.1, "kv_expired": 0.01},
        "finish": {"stop": 0.9, "length": 0.05, "abort": 0.03, "error": 0.02},
        "preemptions": 0.1,
        "waiting": 3,
    },
}


def parse(s: dict[str, str]) -> tuple[str, dict[str, str]]:
    name, body = s["series"].split("{", 1)
    return name, dict(re.findall(r'(\w+)="([^"]*)"', body))


def expand(values: str) -> list[float | None]:
    """promtool's expanding notation back to samples (what promtool loads)."""
    out: list[float | None] = []
    for tok in values.split():
        if tok in ("_", "stale"):
            out.append(None)
        elif m := re.fullmatch(r"_x(\d+)", tok):
            out += [None] * int(m.group(1))
        elif m := re.fullmatch(r"(-?[\d.e+]+)([+-])([\d.e+]+)x(\d+)", tok):
            a, sign, d, n = float(m.group(1)), m.group(2), float(m.group(3)), int(m.group(4))
            out += [a + (d if sign == "+" else -d) * i for i in range(n + 1)]
        else:
            out.append(float(tok))
    return out


@pytest.fixture(scope="module")
def real() -> dict[str, set[frozenset[str]]]:
    names: dict[str, set[frozenset[str]]] = {}
    for fam in text_string_to_metric_families(REAL_EXPOSITION.read_text()):
        for s in fam.samples:
            names.setdefault(s.name, set()).add(frozenset(s.labels.items() if "le" in s.labels else s.labels))
    return names


def test_vllm_series_exist_in_real_033_exposition(real: dict[str, set[frozenset]]) -> None:
    seen = set()
    for s in Fleet(FULL, SPEC).series():
        name, labels = parse(s)
        if not name.startswith("vllm:"):
            continue
        seen.add(name)
        assert name in real, f"{name} is not in vLLM 0.33.0's exposition"
        keys = frozenset(labels) - TARGET_LABELS
        if "le" in labels:  # bucket bounds and their spelling must match too
            les = {dict(x)["le"] for x in real[name]}
            assert labels["le"] in les, f"{name}: le={labels['le']} not among vLLM's {sorted(les)}"
            keys = keys - {"le"}
            real_keys = {frozenset(k for k, _ in x) - {"le"} for x in real[name]}
        else:
            real_keys = real[name]
        assert keys in real_keys, f"{name}: labels {sorted(keys)}, vLLM has {[sorted(k) for k in real_keys]}"
    # the families the rules read are all generated
    for family in ("vllm:request_success_total", "vllm:time_to_first_token_seconds_bucket",
                   "vllm:inter_token_latency_seconds_bucket", "vllm:request_time_per_output_token_seconds_bucket",
                   "vllm:kv_cache_usage_perc", "vllm:num_requests_waiting_by_reason",
                   "vllm:spec_decode_num_accepted_tokens_per_pos_total", "vllm:nixl_num_failed_transfers_total",
                   "vllm:admission_rejections_total"):  # fmt: skip
        assert family in seen, family


def test_counters_are_monotonic_integers_and_buckets_cumulative() -> None:
    series = Fleet(FULL, SPEC).series()
    by_name: dict[tuple, dict[str, float]] = {}
    for s in series:
        name, labels = parse(s)
        vals = expand(s["values"])
        assert len(vals) == 21, name  # 10m of 30s samples
        if name.endswith(("_total", "_bucket", "_count")):
            assert all(v is not None and v == int(v) for v in vals), f"{name} has non-integer samples"
            assert all(b >= a for a, b in zip(vals, vals[1:])), f"{name} decreases"
        if name.endswith("_bucket") or name.endswith("_count"):
            base = re.sub(r"_(bucket|count)$", "", name)
            key = (base, tuple(sorted((k, v) for k, v in labels.items() if k != "le")))
            by_name.setdefault(key, {})[labels.get("le", "count")] = vals[-1]  # type: ignore[assignment]
    for (base, _), buckets in by_name.items():
        les = sorted((float(k), v) for k, v in buckets.items() if k != "count")
        counts = [v for _, v in les]
        assert counts == sorted(counts), f"{base}: buckets are not cumulative"
        assert les[-1][0] == math.inf and les[-1][1] == buckets["count"], f"{base}: +Inf != _count"


def test_rates_and_ratios_follow_the_traffic() -> None:
    """5 req/s per replica over 2 engines: 75 finished requests per engine per 30s."""
    series = {s["series"]: expand(s["values"]) for s in Fleet(FULL, SPEC).series()}
    stop = [v for k, v in series.items() if k.startswith("vllm:request_success_total") and 'reason="stop"' in k]
    assert len(stop) == 4  # 2 replicas x 2 engines
    per_engine = DEFAULT_TRAFFIC["rate"] / 2 * 0.9 * 30
    assert all(abs((v[-1] - v[0]) / 20 - per_engine) < 1 for v in stop)  # type: ignore[operator]
    drafts = next(v for k, v in series.items() if k.startswith("vllm:spec_decode_num_drafts_total"))
    pos0 = next(v for k, v in series.items() if "per_pos" in k and 'position="0"' in k)
    assert abs(pos0[-1] / drafts[-1] - 0.654) < 0.01  # type: ignore[operator]


def test_a_pod_that_was_down_restarts_its_counters() -> None:
    fleet = Fleet(
        {"replicas": 1, "duration": "10m", "events": [{"from": "3m", "to": "5m", "set": {"state": "down"}}]}, SPEC
    )
    series = {parse(s)[0] + str(sorted(parse(s)[1].items())): expand(s["values"]) for s in fleet.series()}
    up = next(v for k, v in series.items() if k.startswith("up"))
    assert up[5] == 1 and up[6] == 0 and up[9] == 0 and up[10] == 1
    tokens = next(v for k, v in series.items() if k.startswith("vllm:generation_tokens_total"))
    assert tokens[6] is None  # stale while down: the scrape failed
    assert tokens[5] > 0 and tokens[10] == 0 and tokens[12] > 0  # type: ignore[operator]


def test_distribution_quantiles() -> None:
    d = Dist.of({"p50": 0.2, "p99": 0.8})
    assert d.cdf(0.2) == pytest.approx(0.5) and d.cdf(0.8) == pytest.approx(0.99) and d.cdf(10) == 1.0
    assert Dist.of(1).cdf(0.999) == 0.0 and Dist.of(1).cdf(1.0) == 1.0


def test_older_release_names() -> None:
    spec = {"service": {"engine_version": "0.10.1", "selector": {"job": "vllm"}}}
    names = Fleet.metric_names(Fleet({"replicas": 1, "duration": "1m"}, spec).series())
    assert "vllm:time_per_output_token_seconds_bucket" in names
    assert "vllm:inter_token_latency_seconds_bucket" not in names  # from 0.10.2
    assert "vllm:request_time_per_output_token_seconds_bucket" not in names  # from 0.11.0
    assert "vllm:admission_rejections_total" not in names  # from 0.32.0
    assert {"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"} <= names  # both until 0.11.0


def _dcgm(fleet: dict) -> dict[tuple[str, str, str], tuple[dict[str, str], list[float | None]]]:
    """(metric, pod or exported_pod, gpu) -> (labels, samples) of the DCGM series."""
    out = {}
    for s in Fleet(fleet, SPEC).series():
        name, labels = parse(s)
        if name.startswith("DCGM_"):
            pod = labels.get("pod") if "exported_pod" not in labels else labels["exported_pod"]
            out[(name, pod or "", labels["gpu"])] = (labels, expand(s["values"]))
    return out


def test_dcgm_series_follow_the_exporters_labels_and_the_pods_state() -> None:
    fleet = {
        "replicas": 3,
        "duration": "5m",
        "gpus": {"per_replica": 2},
        "traffic": {"gpu_util": 80, "gpu_memory": 0.9},
        "events": [{"replicas": [1], "from": "2m", "set": {"state": "down"}},
                   {"replicas": [2], "from": "2m", "set": {"state": "absent"}}],
    }
    series = _dcgm(fleet)
    names = {k[0] for k in series}
    assert names == {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"}
    labels, util = series[("DCGM_FI_DEV_GPU_UTIL", "vllm-0", "0")]
    # dcgm-exporter's device labels and the kubelet mapping of the workload, plus the scrape's job and instance
    assert set(labels) == {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "pod", "namespace",
                           "container", "job", "instance"}
    assert labels["namespace"] == "ns" and labels["job"] == "dcgm-exporter" and set(util) == {80.0}
    used = series[("DCGM_FI_DEV_FB_USED", "vllm-0", "1")][1]
    free = series[("DCGM_FI_DEV_FB_FREE", "vllm-0", "1")][1]
    assert {u + f for u, f in zip(used, free)} == {81559.0} and used[0] == round(81559 * 0.9)
    # a pod that is down keeps its GPUs but holds no memory and runs nothing
    down = series[("DCGM_FI_DEV_FB_USED", "vllm-1", "0")][1]
    assert down[0] > 0 and down[-1] == 0.0
    # an absent pod released its GPUs: the series lose the pod labels
    assert series[("DCGM_FI_DEV_GPU_UTIL", "vllm-2", "0")][1][-1] is None
    assert series[("DCGM_FI_DEV_GPU_UTIL", "", "0")][1][0] is None


def test_dcgm_without_honor_labels_renames_the_workload_labels() -> None:
    series = _dcgm({"replicas": 1, "duration": "2m", "gpus": {"per_replica": 1, "honor_labels": False}})
    labels, _ = series[("DCGM_FI_DEV_GPU_UTIL", "vllm-0", "0")]
    assert labels["exported_pod"] == "vllm-0" and labels["exported_namespace"] == "ns"
    assert labels["pod"].startswith("dcgm-exporter-") and labels["namespace"] == "gpu-operator"


@pytest.mark.parametrize("release", ["1.36.0", "1.44.0"])
def test_otel_server_gateway_series_have_the_real_bodies_names_labels_and_bounds(release: str):
    """The scenario fleet's gen_ai.server.* series (a gateway such as Envoy AI Gateway) carry the
    names, label names and `le` spellings of the real SDK bodies of tests/fixtures/otel_genai."""
    real: dict[str, tuple[set[str], set[str]]] = {}
    text = (Path(__file__).parent / "fixtures" / "otel_genai" / release / "server.txt").read_text()
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.startswith("gen_ai_server"):
                labels, les = real.setdefault(s.name, (set(), set()))
                labels |= {k for k, v in s.labels.items() if v != "" and k != "le"}
                if "le" in s.labels:
                    les.add(s.labels["le"])
    spec = {
        **SPEC,
        "gateway": {"engine": "otel-genai-server", "conventions": release, "selector": {"namespace": "ns", "job": "gw"}},
    }
    fleet = {"replicas": 2, "duration": "10m", "gateway": {"traffic": {"errors": 0.05}}}
    ours: dict[str, tuple[set[str], set[str]]] = {}
    for s in Fleet(fleet, spec).series():
        name, labels = parse(s)
        if name.startswith("gen_ai_server"):
            found, les = ours.setdefault(name, (set(), set()))
            found |= set(labels) - TARGET_LABELS - {"le"}
            if "le" in labels:
                les.add(labels["le"])
    assert set(ours) == set(real)
    for name, (labels, les) in real.items():
        assert ours[name][0] == labels, name
        assert ours[name][1] == les, name

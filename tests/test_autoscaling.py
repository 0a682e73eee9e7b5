"""Autoscaling output (kubernetes.autoscaling): prometheus-adapter rules, an
autoscaling/v2 HPA validated against Kubernetes' own OpenAPI schema
(kubernetes-validate), and a KEDA ScaledObject checked for the fields KEDA's
documentation requires of a Prometheus trigger."""

from __future__ import annotations

import re
from pathlib import Path

import kubernetes_validate
import promql_parser
import pytest
import yaml
from click.testing import CliRunner

from genobs.build import render_spec
from genobs.cli import main
from genobs.compiler import build_plan
from genobs.errors import SpecError
from genobs.loader import load_spec_text
from tests.conftest import REPO

SPEC = REPO / "specs" / "capacity.yaml"
FILES = ("prometheus-adapter-rules.yaml", "hpa.yaml", "keda-scaledobject.yaml")
K8S_VERSION = kubernetes_validate.latest_version()


def _validate_k8s(obj: dict) -> None:
    kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


@pytest.fixture(scope="module")
def manifests() -> dict[str, dict]:
    files = render_spec(SPEC).files
    return {name: yaml.safe_load(files[f"kubernetes/{name}"]) for name in FILES}


def _variant(tmp_path: Path, old: str, new: str) -> dict[str, bytes]:
    text = SPEC.read_text()
    assert old in text
    path = tmp_path / "capacity.yaml"
    path.write_text(text.replace(old, new))
    return render_spec(path).files


def _fill(query: str, matchers: str, group_by: str = "pod") -> str:
    """A metricsQuery as prometheus-adapter fills it in (its documented template fields)."""
    return (
        query.replace("<<.Series>>", "vllm:num_requests_waiting")
        .replace("<<.LabelMatchers>>", matchers)
        .replace("<<.GroupBy>>", group_by)
    )


def test_hpa_is_a_valid_autoscaling_v2_object(manifests):
    hpa = manifests["hpa.yaml"]
    _validate_k8s(hpa)
    spec = hpa["spec"]
    assert hpa["apiVersion"] == "autoscaling/v2" and hpa["kind"] == "HorizontalPodAutoscaler"
    assert hpa["metadata"]["name"] == "genobs-capacity" and hpa["metadata"]["namespace"] == "llm-prod"
    assert hpa["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert spec["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "qwen3-32b"}
    assert (spec["minReplicas"], spec["maxReplicas"]) == (2, 8)
    (metric,) = spec["metrics"]
    assert metric["type"] == "Pods"
    assert metric["pods"]["target"] == {"type": "AverageValue", "averageValue": "4"}
    # the HPA asks for the name the adapter exposes
    assert metric["pods"]["metric"]["name"] == manifests["prometheus-adapter-rules.yaml"]["rules"][0]["name"]["as"]
    assert spec["behavior"]["scaleDown"]["stabilizationWindowSeconds"] == 600
    assert spec["behavior"]["scaleUp"]["stabilizationWindowSeconds"] == 0


def test_the_validator_rejects_a_broken_hpa(manifests):
    """The schema check can fail: a wrong type and a missing required field are refused."""
    broken = yaml.safe_load(yaml.safe_dump(manifests["hpa.yaml"]))
    broken["spec"]["maxReplicas"] = "eight"
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate_k8s(broken)
    missing = yaml.safe_load(yaml.safe_dump(manifests["hpa.yaml"]))
    del missing["spec"]["scaleTargetRef"]
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate_k8s(missing)


def test_adapter_rules_have_the_documented_shape_and_parse(manifests):
    config = manifests["prometheus-adapter-rules.yaml"]
    assert set(config) == {"rules", "externalRules"}
    for kind, resources in (("rules", {"namespace", "pod"}), ("externalRules", {"namespace"})):
        (rule,) = config[kind]
        assert set(rule) == {"seriesQuery", "resources", "name", "metricsQuery"}
        assert set(rule["resources"]["overrides"]) == resources
        assert all(v == {"resource": k} for k, v in rule["resources"]["overrides"].items())
        sel = promql_parser.parse(rule["seriesQuery"])
        assert isinstance(sel, promql_parser.VectorSelector) and sel.name == "vllm:num_requests_waiting"
        assert re.fullmatch(rule["name"]["matches"], sel.name)
        assert re.fullmatch(r"[a-z_][a-z0-9_]*", rule["name"]["as"])  # a metrics API name: no ':'
        assert "<<.Series>>" in rule["metricsQuery"] and "<<.LabelMatchers>>" in rule["metricsQuery"]
        for query in (rule["seriesQuery"], rule["metricsQuery"]):
            assert 'job="vllm-pool"' in query and 'model_name=~"qwen3-32b"' in query
    pod_query = _fill(config["rules"][0]["metricsQuery"], 'namespace="llm-prod",pod=~"qwen3-32b-0|qwen3-32b-1"')
    parsed = promql_parser.parse(pod_query)
    # summed per pod over its data-parallel engines
    assert isinstance(parsed, promql_parser.AggregateExpr) and parsed.modifier.labels == ["pod"]
    model_query = _fill(config["externalRules"][0]["metricsQuery"], 'namespace="llm-prod",model_name="qwen3-32b"')
    assert isinstance(promql_parser.parse(model_query), promql_parser.AggregateExpr)


def test_keda_scaledobject_has_every_required_prometheus_trigger_field(manifests):
    so = manifests["keda-scaledobject.yaml"]
    assert so["apiVersion"] == "keda.sh/v1alpha1" and so["kind"] == "ScaledObject"
    assert so["metadata"]["name"] == "genobs-capacity" and so["metadata"]["namespace"] == "llm-prod"
    spec = so["spec"]
    assert spec["scaleTargetRef"]["name"] == "qwen3-32b"
    assert (spec["minReplicaCount"], spec["maxReplicaCount"]) == (2, 8)
    (trigger,) = spec["triggers"]
    assert trigger["type"] == "prometheus" and trigger["metricType"] == "AverageValue"
    meta = trigger["metadata"]
    assert {"serverAddress", "query", "threshold"} <= set(meta)
    assert all(isinstance(v, str) for v in meta.values())  # KEDA trigger metadata is a string map
    assert float(meta["threshold"]) == 4
    assert re.fullmatch(r"https?://\S+", meta["serverAddress"])
    parsed = promql_parser.parse(meta["query"])
    assert isinstance(parsed, promql_parser.AggregateExpr)
    assert (
        meta["query"] == 'sum(vllm:num_requests_waiting{namespace="llm-prod",job="vllm-pool",model_name=~"qwen3-32b"})'
    )
    behavior = spec["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior["scaleDown"]["stabilizationWindowSeconds"] == 600


def test_fractional_targets(tmp_path):
    files = _variant(tmp_path, "target_waiting_per_replica: 4", "target_waiting_per_replica: 2.5")
    hpa = yaml.safe_load(files["kubernetes/hpa.yaml"])
    assert hpa["spec"]["metrics"][0]["pods"]["target"]["averageValue"] == "2500m"
    _validate_k8s(hpa)
    keda = yaml.safe_load(files["kubernetes/keda-scaledobject.yaml"])
    assert keda["spec"]["triggers"][0]["metadata"]["threshold"] == "2.5"  # KEDA parses a float, not a quantity


def test_external_metric_hpa_selects_the_model(tmp_path):
    files = _variant(tmp_path, "target_waiting_per_replica: 4", "target_waiting_per_replica: 4\n    metric: external")
    hpa = yaml.safe_load(files["kubernetes/hpa.yaml"])
    _validate_k8s(hpa)
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "External"
    assert metric["external"]["metric"] == {
        "name": "vllm_num_requests_waiting_per_model",
        "selector": {"matchLabels": {"model_name": "qwen3-32b"}},
    }
    adapter = yaml.safe_load(files["kubernetes/prometheus-adapter-rules.yaml"])
    assert adapter["externalRules"][0]["name"]["as"] == metric["external"]["metric"]["name"]


def test_underscore_names_reach_every_manifest(tmp_path):
    files = _variant(tmp_path, "  models: [qwen3-32b]\n", "  models: [qwen3-32b]\n  metric_names: underscore\n")
    adapter = yaml.safe_load(files["kubernetes/prometheus-adapter-rules.yaml"])
    assert promql_parser.parse(adapter["rules"][0]["seriesQuery"]).name == "vllm_num_requests_waiting"
    keda = yaml.safe_load(files["kubernetes/keda-scaledobject.yaml"])
    assert keda["spec"]["triggers"][0]["metadata"]["query"].startswith("sum(vllm_num_requests_waiting{")


def test_no_autoscaling_block_no_autoscaling_files(tmp_path):
    start = SPEC.read_text().index("  autoscaling:")
    end = SPEC.read_text().index("runbook:")
    files = _variant(tmp_path, SPEC.read_text()[start:end], "\n")
    assert "kubernetes/prometheusrule.yaml" in files
    assert not any(f"kubernetes/{name}" in files for name in FILES)


def test_build_kubernetes_flag_writes_them(tmp_path):
    text = (
        "version: genobs/v1\nname: a\nuse_case: chat\nservice: {models: [m], selector: {job: vllm}}\n"
        "kubernetes:\n  autoscaling: {target: {name: vllm, namespace: llm}, max_replicas: 3}\n"
    )
    spec = tmp_path / "a.yaml"
    spec.write_text(text)
    assert not any(rel.startswith("kubernetes/") for rel in render_spec(spec).files)  # enabled: false
    result = CliRunner().invoke(main, ["build", "--kubernetes", "--no-check", "-o", str(tmp_path / "out"), str(spec)])
    assert result.exit_code == 0, result.output
    hpa = yaml.safe_load((tmp_path / "out" / "a" / "kubernetes" / "hpa.yaml").read_text())
    _validate_k8s(hpa)
    assert hpa["spec"]["minReplicas"] == 1 and hpa["spec"]["maxReplicas"] == 3
    assert hpa["spec"]["metrics"][0]["pods"]["target"]["averageValue"] == "5"  # the documented default


SPEC_TEXT = """version: genobs/v1
name: a
use_case: chat
service: {{models: [{models}], selector: {{namespace: {ns}, job: vllm}}}}
kubernetes:
  autoscaling: {{target: {{name: vllm, namespace: llm}}, min_replicas: {lo}, max_replicas: {hi}, metric: {metric}, \
scale_down_window: {window}}}
"""


@pytest.mark.parametrize(
    ("models", "ns", "lo", "hi", "metric", "window", "expected"),
    [
        (
            "m",
            "llm",
            5,
            2,
            "pods",
            "10m",
            "kubernetes.autoscaling.min_replicas: min_replicas (5) exceeds max_replicas (2)",
        ),
        ("m1, m2", "llm", 1, 2, "external", "10m", "kubernetes.autoscaling.metric: an external (per-model) metric"),
        ("m", "llm", 1, 2, "pods", "2h", "kubernetes.autoscaling.scale_down_window: at most 1h"),
        ("m", "other", 1, 2, "pods", "10m", "kubernetes.autoscaling.target.namespace: 'llm' differs from"),
    ],
)
def test_autoscaling_settings_are_checked(models, ns, lo, hi, metric, window, expected):
    text = SPEC_TEXT.format(models=models, ns=ns, lo=lo, hi=hi, metric=metric, window=window)
    with pytest.raises(SpecError) as exc:
        build_plan(load_spec_text(text, "a.yaml"))
    problems = [f"{p.field}: {p.message}" for p in exc.value.problems]
    assert any(p.startswith(expected) for p in problems), problems
    assert all(p.line is not None for p in exc.value.problems)


def test_at_max_alert_reads_kube_state_metrics_and_the_queue():
    files = render_spec(SPEC).files
    groups = yaml.safe_load(files["prometheus/capacity.rules.yaml"])["groups"]
    (rule,) = [r for g in groups for r in g["rules"] if r.get("alert") == "VllmAutoscalerAtMaxReplicas"]
    expr = promql_parser.parse(rule["expr"])
    assert isinstance(expr, promql_parser.BinaryExpr)
    for name in (
        "kube_horizontalpodautoscaler_status_current_replicas",
        "kube_horizontalpodautoscaler_spec_max_replicas",
    ):
        assert (
            f'{name}{{namespace="llm-prod",horizontalpodautoscaler=~"genobs-capacity|keda-hpa-genobs-capacity"}}'
            in rule["expr"]
        )
    assert "deriv(vllm:num_requests_waiting{" in rule["expr"] and rule["for"] == "10m"
    tests = yaml.safe_load(files["prometheus/tests/capacity.test.yaml"])["tests"]
    cases = [
        (t["name"], c) for t in tests for c in t["alert_rule_test"] if c["alertname"] == "VllmAutoscalerAtMaxReplicas"
    ]
    assert any(c["exp_alerts"] for _, c in cases)  # fires
    assert sum(1 for _, c in cases if not c["exp_alerts"]) >= 2  # at max with a steady queue; below max
    assert (
        "#### VllmAutoscalerAtMaxReplicas" in files["RUNBOOK.md"].decode()
        or "vllmautoscaleratmaxreplicas" in files["RUNBOOK.md"].decode().lower()
    )


def test_at_max_alert_needs_the_capacity_signals():
    text = SPEC_TEXT.format(models="m", ns="llm", lo=1, hi=2, metric="pods", window="10m").replace(
        "scale_down_window: 10m}", "scale_down_window: 10m, kube_state_metrics: true}"
    )
    with pytest.raises(SpecError) as exc:
        build_plan(load_spec_text(text, "a.yaml"))
    assert any(p.field == "kubernetes.autoscaling.kube_state_metrics" for p in exc.value.problems)

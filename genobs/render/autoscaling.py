"""`render` stage, autoscaling (kubernetes.autoscaling): scale the engine on waiting
requests, not CPU. A prometheus-adapter rule configuration exposes
the engine's waiting-requests gauge per pod (custom metric) and per model (external
metric); an autoscaling/v2 HorizontalPodAutoscaler uses one of them; a KEDA
ScaledObject with a Prometheus trigger is the alternative (apply one of the two:
KEDA creates its own HPA for the same target)."""

from __future__ import annotations

from collections.abc import Callable

from genobs import promql as q
from genobs.catalog import load_catalog, parse_version
from genobs.k8s import MANAGED_BY
from genobs.units import prom_duration_seconds


def pod_metric(spec) -> str:
    """The custom-metrics API name of the waiting gauge: no ':' (a path segment of the API)."""
    return waiting_metric(spec).replace(":", "_")


def model_metric(spec) -> str:
    return f"{pod_metric(spec)}_per_model"


def quantity(value: float) -> str:
    """A Kubernetes quantity: '4', or milli-units for fractions ('2500m')."""
    if float(value).is_integer():
        return str(int(value))
    return f"{round(value * 1000)}m"


def decimal(value: float) -> str:
    """KEDA parses trigger thresholds as plain floats ('2.5'), not as quantities."""
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def waiting_metric(spec) -> str:
    """The waiting-requests gauge as the spec's Prometheus stores it."""
    catalog = load_catalog(spec.service.engine)
    version = parse_version(spec.service.engine_version) if spec.service.engine_version else catalog.max_version
    name = catalog.name("requests_waiting", version)
    if name is None:  # the catalog has it from the first supported release; keep the failure explicit
        raise KeyError(f"requests_waiting does not exist in {spec.service.engine} {spec.service.engine_version}")
    return name.replace(":", "_") if spec.service.metric_names == "underscore" else name


def _fixed(spec) -> tuple[q.Matcher, ...]:
    """The spec's selector and models; the namespace comes from the adapter or the scale target."""
    out: list[q.Matcher] = [(k, "=", v) for k, v in spec.service.selector.items() if k != "namespace"]
    if spec.service.models:
        out.append(("model_name", "=~", q.any_of(spec.service.models)))
    return tuple(out)


def adapter_config(spec) -> dict:
    """prometheus-adapter discovery rules (its config file: `rules` and `externalRules`)."""
    waiting = waiting_metric(spec)
    fixed = _fixed(spec)
    extra = "".join(f",{k}{op}{q.quote(v)}" for k, op, v in fixed)
    escaped = q.regex_escape(waiting)
    return {
        "rules": [
            {
                "seriesQuery": q.selector(waiting, (*fixed, ("namespace", "!=", ""), ("pod", "!=", ""))),
                "resources": {"overrides": {"namespace": {"resource": "namespace"}, "pod": {"resource": "pod"}}},
                "name": {"matches": f"^{escaped}$", "as": pod_metric(spec)},
                # summed over the data-parallel engines of each pod
                "metricsQuery": f"sum by (<<.GroupBy>>) (<<.Series>>{{<<.LabelMatchers>>{extra}}})",
            }
        ],
        "externalRules": [
            {
                "seriesQuery": q.selector(waiting, (*fixed, ("namespace", "!=", ""), ("model_name", "!=", ""))),
                "resources": {"overrides": {"namespace": {"resource": "namespace"}}},
                "name": {"matches": f"^{escaped}$", "as": model_metric(spec)},
                # the HPA's metric selector (model_name) and namespace arrive in LabelMatchers
                "metricsQuery": f"sum (<<.Series>>{{<<.LabelMatchers>>{extra}}})",
            }
        ],
    }


def _metadata(spec) -> dict:
    labels = {**MANAGED_BY, **spec.kubernetes.labels}
    auto = spec.kubernetes.autoscaling
    return {"name": f"genobs-{spec.name}", "namespace": auto.target.namespace, "labels": dict(sorted(labels.items()))}


def _behavior(auto) -> dict:
    # model loads take minutes: scale up at once, scale down only after a quiet window
    return {
        "scaleUp": {"stabilizationWindowSeconds": 0},
        "scaleDown": {"stabilizationWindowSeconds": int(prom_duration_seconds(auto.scale_down_window))},
    }


def _target_ref(auto) -> dict:
    return {"apiVersion": "apps/v1", "kind": auto.target.kind, "name": auto.target.name}


def hpa(spec) -> dict:
    auto = spec.kubernetes.autoscaling
    target = {"type": "AverageValue", "averageValue": quantity(auto.target_waiting_per_replica)}
    if auto.metric == "pods":
        metric = {"type": "Pods", "pods": {"metric": {"name": pod_metric(spec)}, "target": target}}
    else:
        selector = {"matchLabels": {"model_name": spec.service.models[0]}}
        metric = {
            "type": "External",
            "external": {"metric": {"name": model_metric(spec), "selector": selector}, "target": target},
        }
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": _metadata(spec),
        "spec": {
            "scaleTargetRef": _target_ref(auto),
            "minReplicas": auto.min_replicas,
            "maxReplicas": auto.max_replicas,
            "metrics": [metric],
            "behavior": _behavior(auto),
        },
    }


def scaled_object(spec) -> dict:
    auto = spec.kubernetes.autoscaling
    query = f"sum({q.selector(waiting_metric(spec), (('namespace', '=', auto.target.namespace), *_fixed(spec)))})"
    return {
        "apiVersion": "keda.sh/v1alpha1",
        "kind": "ScaledObject",
        "metadata": _metadata(spec),
        "spec": {
            "scaleTargetRef": _target_ref(auto),
            "minReplicaCount": auto.min_replicas,
            "maxReplicaCount": auto.max_replicas,
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": _behavior(auto)}},
            "triggers": [
                {
                    "type": "prometheus",
                    # AverageValue: KEDA divides the query's value by the replicas and aims for the threshold
                    "metricType": "AverageValue",
                    "metadata": {
                        "serverAddress": auto.prometheus_url,
                        "query": query,
                        "threshold": decimal(auto.target_waiting_per_replica),
                    },
                }
            ],
        },
    }


def autoscaling_files(spec, dump: Callable[[object], bytes]) -> dict[str, bytes]:
    """file name (under kubernetes/) -> bytes; `dump(data)` serialises YAML."""
    return {
        "prometheus-adapter-rules.yaml": dump(adapter_config(spec)),
        "hpa.yaml": dump(hpa(spec)),
        "keda-scaledobject.yaml": dump(scaled_object(spec)),
    }

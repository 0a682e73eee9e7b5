"""Spec models for capacity signals: goodput, system efficiency, baseline
degradation, headroom, DCGM GPU metrics and queue-based autoscaling. Imported by
`genobs.spec`, which owns the shared field types."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, field_validator

# genobs.spec imports this module after defining the shared types (import genobs.spec, not this module)
from genobs.spec_types import _K8S_NAME as K8S_NAME
from genobs.spec_types import LabelName, PendingDuration, PromDuration, SafeValue, Threshold
from genobs.spec_types import _Model as Model
from genobs.units import parse_ratio, parse_seconds

_METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]{0,199}")


def _metric_name(v: str) -> str:
    if not _METRIC_NAME.fullmatch(v):
        raise ValueError(f"{v[:60]!r} is not a Prometheus metric name (letters, digits, _ and :, not starting with a digit)")
    return v


def _duration(v: str) -> str:
    parse_seconds(v)
    return v


def _ratio(v: Threshold) -> Threshold:
    r = parse_ratio(v)
    if not 0 < r < 1:
        raise ValueError("must be above 0% and below 100%")
    return v


def _k8s_name(v: str) -> str:
    if not K8S_NAME.fullmatch(v):
        raise ValueError(f"{v!r} is not a Kubernetes name (lower-case letters, digits and '-', up to 63)")
    return v


MetricName = Annotated[str, AfterValidator(_metric_name)]
Seconds = Annotated[str, AfterValidator(_duration)]
Ratio = Annotated[Threshold, AfterValidator(_ratio)]
K8sName = Annotated[str, AfterValidator(_k8s_name)]


class GoodputGateway(Model):
    good: MetricName = Field(
        description="Counter of requests that met every SLO, counted per request by a gateway or router."
    )
    total: MetricName = Field(description="Counter of all requests of the same gateway or router.")
    selector: dict[LabelName, SafeValue] = Field(
        default_factory=dict, description="Labels that pick the gateway's series, e.g. {job: llm-gateway}."
    )


class Goodput(Model):
    ttft: Seconds | None = Field(None, description="TTFT bound of a good request (a TTFT bucket boundary), e.g. 1s.")
    tpot: Seconds | None = Field(
        None, description="Time-per-output-token bound (a bucket boundary; vLLM >= 0.11.0), e.g. 100ms."
    )
    objective: Ratio | None = Field(
        None, description="Optional SLO: alert when even the upper bound of goodput falls below this share."
    )
    for_: PendingDuration = Field("10m", alias="for", description="Pending duration of the goodput alert.")
    gateway: GoodputGateway | None = Field(
        None, description="A gateway/router metric that counts per-request SLO attainment (preferred when it exists)."
    )


class Efficiency(Model):
    enabled: bool = Field(True, description="System efficiency: finished requests against arrivals.")
    warning: Ratio = Field(0.7, description="Warn below this efficiency while requests wait.")
    for_: PendingDuration = Field("15m", alias="for", description="Pending duration.")


class Degradation(Model):
    enabled: bool = Field(True, description="TTFT p99 against the same hour one day or week earlier.")
    factor: float = Field(2.0, gt=1, le=1000, description="Alert when TTFT p99 exceeds the baseline by this factor.")
    baseline: Literal["1d", "1w"] = Field("1w", description="Baseline offset: the same time 1d or 1w earlier.")
    for_: PendingDuration = Field("30m", alias="for", description="Pending duration.")


class Gpu(Model):
    source: Literal["dcgm"] = Field("dcgm", description="GPU metrics exporter: dcgm (NVIDIA dcgm-exporter).")
    selector: dict[LabelName, SafeValue] = Field(
        default_factory=dict, description="Labels that pick the DCGM exporter's series, e.g. {job: dcgm-exporter}."
    )
    pod_label: LabelName = Field(
        "pod",
        description="Label of the DCGM series that names the GPU's workload pod (exported_pod when the scrape "
        "did not honour the exporter's labels); joined with the pod label of the engine's series.",
    )
    namespace_label: LabelName | None = Field(
        "namespace",
        description="Label of the DCGM series that names the workload pod's namespace (exported_namespace without "
        "honorLabels); null joins on the pod name alone (the engine's series carry no namespace).",
    )
    saturation: Ratio = Field(0.9, description="GPU utilisation at or above which waiting requests mean saturation.")
    waiting_per_replica: float = Field(
        5, ge=0, le=1_000_000, description="Waiting requests per pod above which a busy GPU is saturated."
    )
    for_: PendingDuration = Field("10m", alias="for", description="Pending duration of the saturation alert.")
    memory_utilization: Ratio = Field(
        0.9, description="The share of each GPU's memory the engine reserves at start (vLLM's "
        "--gpu-memory-utilization, SGLang's --mem-fraction-static)."
    )
    reservation_floor: Ratio = Field(
        0.5, description="Warn when a serving pod's GPU holds less than this share of that reservation."
    )
    min_free: Ratio = Field(0.02, description="Warn when a serving pod's GPU has less than this share of memory free.")
    memory_for: PendingDuration = Field("15m", description="Pending duration of the two GPU memory alerts.")


class Capacity(Model):
    goodput: Goodput | None = Field(None, description="Goodput: requests/s within TTFT and TPOT bounds.")
    efficiency: Efficiency = Field(default_factory=Efficiency)
    degradation: Degradation | None = Field(
        None, description="Baseline degradation alert. Default: on for use_case capacity, off otherwise."
    )
    max_num_seqs: int | None = Field(
        None, ge=1, le=1_000_000, description="The engines' --max-num-seqs: running requests are shown against it."
    )


class ScaleTarget(Model):
    kind: Literal["Deployment", "StatefulSet"] = Field("Deployment", description="Kind of the scaled workload.")
    name: K8sName = Field(description="Name of the engine pods' Deployment or StatefulSet.")
    namespace: K8sName = Field(description="Namespace the engine pods run in.")


class Autoscaling(Model):
    target: ScaleTarget
    min_replicas: int = Field(1, ge=1, le=10_000, description="Fewest replicas.")
    max_replicas: int = Field(ge=1, le=10_000, description="Most replicas.")
    target_waiting_per_replica: float = Field(
        5, ge=0.001, le=1_000_000, description="Waiting requests per replica the autoscaler aims for (0.001 or more)."
    )
    metric: Literal["pods", "external"] = Field(
        "pods", description="HPA metric type: pods (waiting per pod) or external (waiting per model)."
    )
    prometheus_url: str = Field(
        "http://prometheus-operated.monitoring.svc:9090", description="Prometheus the KEDA trigger queries."
    )
    kube_state_metrics: bool = Field(
        False,
        description="kube-state-metrics exports the HPA's replica counts: alert when the autoscaler is at its maximum "
        "while waiting requests grow (needs the capacity signals: a capacity block or use_case capacity).",
    )
    for_: PendingDuration = Field("10m", alias="for", description="Pending duration of the at-max alert.")
    scale_down_window: PromDuration = Field(
        "10m", description="Scale-down stabilisation window (model loads are slow), at most 1h (the HPA's limit)."
    )

    @field_validator("prometheus_url")
    @classmethod
    def _url(cls, v: str) -> str:
        if not re.fullmatch(r"https?://[A-Za-z0-9.\-]+(:[0-9]{1,5})?(/[A-Za-z0-9._\-/]*)?", v) or len(v) > 300:
            raise ValueError("must be an http(s) URL of Prometheus, e.g. http://prometheus-operated.monitoring.svc:9090")
        return v

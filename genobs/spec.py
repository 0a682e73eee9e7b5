"""The spec models (`load` stage): what an SRE may write in a genobs YAML file.
Unknown keys are rejected; units are parsed strictly. The JSON Schema of these
models is what `genobs schema` prints."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BeforeValidator, Field, field_validator

from genobs.spec_capacity import Autoscaling, Capacity, Gpu
from genobs.spec_types import (
    _K8S_NAME,
    _MAX_REQUEST_RATE,
    _SPEC_NAME,
    LabelName,
    PendingDuration,
    PromDuration,
    SafeValue,
    Threshold,
    _buckets,
    _chars,
    _description_text,
    _duration_text,
    _engine_version,
    _evaluation_interval,
    _k8s_labels,
    _Model,
    _rate_window,
    _safe_value,
)
from genobs.units import parse_ratio

SIGNALS = (
    "ttft",
    "itl",
    "e2e",
    "queue_time",
    "length_finish",
    "abort",
    "success",
    "nixl_transfer",
    "nixl_failures",
    "nixl_kv_expiry",
    "spec_decode_acceptance",
    "kv_cache",
    "preemptions",
    "waiting_requests",
    "output_speed_per_user",
    "rss_growth",
    "metrics_absent",
    "engine_hung",
    "target_down",
    "replica_outlier",
)
USE_CASES = ("chat", "rag", "agentic", "batch", "voice", "capacity")
SLI_KINDS = ("ttft", "itl", "tpot", "e2e", "queue_time", "success")



class Roles(_Model):
    """Disaggregated prefill/decode: the target label that tells the two pools apart."""

    label: LabelName = Field(description="Label naming the pool of a pod, e.g. role.")
    prefill: SafeValue = Field(description="Value of `label` on prefill pods, e.g. prefill.")
    decode: SafeValue = Field(description="Value of `label` on decode pods, e.g. decode.")


class Service(_Model):
    engine: Literal["vllm", "sglang", "trtllm"] = Field(
        "vllm",
        description="Serving engine: vllm, sglang or trtllm (trtllm-serve); picks the engine profile (metric names, "
        "labels, buckets).",
    )
    engine_version: Annotated[str, AfterValidator(_engine_version)] | None = Field(
        None, description="Engine release, e.g. '0.33' or '0.11.1'; picks metric names. Default: newest in the catalog."
    )
    other_engine_version: Annotated[str, AfterValidator(_engine_version)] | None = Field(
        None,
        description="Another engine release running in the same fleet during an upgrade or a rollback, e.g. "
        "'0.9.1' beside engine_version '0.12': every metric family renamed between the two is read under both "
        "names (one series per target, deduplicated). Remove it once the rollout is done.",
    )
    selector: dict[LabelName, SafeValue] = Field(
        default_factory=dict,
        description="Target labels every query is restricted to, e.g. {namespace: llm-prod, job: vllm}.",
    )
    group_by: list[LabelName] = Field(
        default_factory=lambda: ["model_name"],
        description="Labels kept on every recording rule and alert (the engine label is always aggregated away).",
    )
    models: list[SafeValue] = Field(
        default_factory=list, description="Served model names to watch; empty = every model behind the selector."
    )
    roles: Roles | None = Field(
        None,
        description="Prefill/decode pools (required with features.disaggregated_prefill): user-facing "
        "signals read the decode pool only, prefill gets its own latency view.",
    )
    metric_names: Literal["colon", "underscore"] = Field(
        "colon",
        description="How the Prometheus stores engine names with a colon: 'colon' (vllm:..., sglang:...) as "
        "exposed, or 'underscore' (vllm_..., sglang_...) when the scrape escaped them (Prometheus 2.x with prometheus_client >= 0.23, Ray).",
    )
    cluster_label: LabelName | None = Field(
        None,
        description="The label that names a cluster (e.g. cluster, the external label each cluster's Prometheus "
        "adds) when one backend holds several clusters' data: every aggregation, join, alert, inhibition rule "
        "and dashboard variable keeps it, so a fault in one cluster pages for that cluster only.",
    )
    min_request_rate: float = Field(
        0.05,
        ge=0,
        le=_MAX_REQUEST_RATE,
        strict=True,  # true, "inf" and "nan" are not rates
        allow_inf_nan=False,
        description="Requests per second below which latency and ratio alerts stay silent (low-traffic guard).",
    )

    @field_validator("group_by")
    @classmethod
    def _no_engine(cls, v: list[str]) -> list[str]:
        if "engine" in v:
            raise ValueError("'engine' is the data-parallel rank and is always aggregated away; remove it")
        if len(set(v)) != len(v):
            raise ValueError("labels must not repeat")
        return v


class ClientOtel(_Model):
    """How OpenTelemetry GenAI metrics reach Prometheus: an application's (docs/client.md), or a gateway's
    gen_ai.server.* metrics (docs/gateway.md)."""

    translation: Literal["underscores_with_suffixes", "utf8", "utf8_without_suffixes"] = Field(
        "underscores_with_suffixes",
        description="The name translation on the way into Prometheus: underscores_with_suffixes (the SDK's "
        "Prometheus exporter, the Collector's and Prometheus' OTLP default: gen_ai_client_operation_duration_seconds), "
        "utf8 (NoUTF8EscapingWithSuffixes: gen_ai.client.operation.duration_seconds) or utf8_without_suffixes "
        "(NoTranslation: gen_ai.client.operation.duration).",
    )


class Gateway(_Model):
    """The user-facing layer in front of the engine pods of `service` (docs/gateway.md): user-facing
    latency and error alerts and the SLOs read it; diagnosis (KV cache, queue, preemptions) reads
    the pods."""

    engine: Literal["llm-d-epp", "dynamo", "otel-genai-server"] = Field(
        description="The gateway: llm-d-epp (llm-d's endpoint picker, Gateway API Inference Extension), dynamo "
        "(NVIDIA Dynamo's frontend, dynamo_frontend_*) or otel-genai-server (a gateway that records the "
        "OpenTelemetry GenAI server metrics gen_ai.server.*, e.g. Envoy AI Gateway); picks its profile (metric "
        "names per release, buckets)."
    )
    engine_version: Annotated[str, AfterValidator(_engine_version)] | None = Field(
        None,
        description="Gateway release, e.g. '0.10' (llm-d-router, formerly llm-d-inference-scheduler); picks "
        "one name generation (inference_model_, inference_objective_, llm_d_router_epp_, llm_d_epp_). "
        "Default: newest in its profile. Not for otel-genai-server, whose names follow `conventions`.",
    )
    conventions: Annotated[str, AfterValidator(_engine_version)] | None = Field(
        None,
        description="otel-genai-server only: the semantic-conventions release the gateway's instrumentation "
        "follows, e.g. '1.36.0' (its meter's schema URL). Default: newest in the profile.",
    )
    otel: ClientOtel | None = Field(
        None,
        description="otel-genai-server only: how the gateway's metrics reach Prometheus. Default: "
        "{translation: underscores_with_suffixes}.",
    )
    selector: dict[LabelName, SafeValue] = Field(
        default_factory=dict,
        description="Target labels of the gateway's scrape, e.g. {namespace: llm-prod, job: llm-d-epp}; must name "
        "the job.",
    )


class ClientLevels(_Model):
    warning: Threshold | None = Field(None, description="Threshold for severity warning; null drops this level.")
    critical: Threshold | None = Field(None, description="Threshold for severity critical (pages); null drops it.")
    for_: PendingDuration | None = Field(None, alias="for", description="Pending duration, e.g. 10m; 0s to 1h.")


class ClientTokenUsage(_Model):
    up: float | None = Field(
        2.0,
        strict=True,
        allow_inf_nan=False,
        description="Warn when the last hour's mean tokens per operation (input or output) is more than this "
        "multiple of the mean over the day before it, e.g. 2 (a prompt or retrieval change doubling the input); "
        "null drops the upward warning.",
    )
    down: float | None = Field(
        0.5,
        strict=True,
        allow_inf_nan=False,
        description="Warn when it is less than this multiple of the day before, e.g. 0.5 (answers truncated, "
        "context dropped); null drops the downward warning.",
    )
    for_: PendingDuration | None = Field(None, alias="for", description="Pending duration, e.g. 15m; 0s to 1h.")

    @field_validator("up")
    @classmethod
    def _up(cls, v: float | None) -> float | None:
        if v is not None and not 1 < v <= 1000:
            raise ValueError(f"{v:g} is not a factor above 1 (e.g. 2: more than twice the day before)")
        return v

    @field_validator("down")
    @classmethod
    def _down(cls, v: float | None) -> float | None:
        if v is not None and not 0 < v < 1:
            raise ValueError(f"{v:g} is not a factor between 0 and 1 (e.g. 0.5: less than half the day before)")
        return v


class ClientAlerts(_Model):
    ttft: ClientLevels | None = Field(
        None,
        description="p99 time to the first chunk the application measured, e.g. {warning: 2s, critical: 4s}. "
        "Default: the spec's own TTFT levels (alerts.ttft and the preset).",
    )
    error_ratio: ClientLevels | None = Field(
        None,
        description="Share of the application's operations that failed (error.type set), e.g. {warning: 1%, "
        "critical: 5%}. Default: 1 - the spec's success levels (alerts.success and the preset).",
    )
    token_usage: ClientTokenUsage | None = Field(
        default_factory=ClientTokenUsage,
        description="Warning on a shift of the tokens per operation (input and output each): the last hour's mean "
        "against the mean of the day before it, e.g. {up: 2, down: 0.5, for: 15m}; null drops the warning.",
    )


class Client(_Model):
    """The application's view (docs/client.md): what an application instrumented with the
    OpenTelemetry GenAI semantic conventions measured of its own calls, network, gateway and retries
    included. Its alerts take the user-facing page; the gateway and the pods explain it."""

    conventions: Annotated[str, AfterValidator(_engine_version)] | None = Field(
        None,
        description="The semantic-conventions release the application's instrumentation follows, e.g. '1.41.0' "
        "(its meter's schema URL); time to first chunk exists from 1.41.0. Default: newest in the profile.",
    )
    otel: ClientOtel = Field(default_factory=ClientOtel, description="How the metrics reach Prometheus.")
    selector: dict[LabelName, SafeValue] = Field(
        default_factory=dict,
        description="Target labels of the application's scrape (or of its OTLP resource), e.g. {namespace: chat-app, "
        "job: chat-frontend}; must name the job. The application's instances are aggregated away.",
    )
    model_names: dict[SafeValue, SafeValue] = Field(
        default_factory=dict,
        description="gen_ai.request.model as the application writes it -> the pods' model name, where they differ "
        "(e.g. {llama-8b: meta-llama/Llama-3.1-8B-Instruct}); unnamed models are read as they are.",
    )
    alerts: ClientAlerts = Field(default_factory=ClientAlerts, description="Thresholds of the client's alerts.")


def _gpu_short_form(v: object) -> object:
    """`gpu_metrics: dcgm` is the block with every default; `none` is off."""
    if isinstance(v, str):
        if v == "dcgm":
            return {}
        if v == "none":
            return None
        raise ValueError(f"{v[:60]!r} is not allowed; expected dcgm, none or a block such as {{source: dcgm}}")
    return v


def _gpu_schema(schema: dict) -> None:
    schema.setdefault("anyOf", []).insert(1, {"enum": ["dcgm", "none"], "type": "string"})


class Features(_Model):
    prefix_caching: bool = Field(True, description="Prefix-cache hit-rate signals.")
    speculative_decoding: bool = Field(False, description="Speculative-decoding acceptance signals.")
    disaggregated_prefill: bool = Field(False, description="NIXL KV-transfer signals (disaggregated prefill/decode).")
    gpu_metrics: Annotated[Gpu | None, BeforeValidator(_gpu_short_form)] = Field(
        None,
        description="GPU saturation and memory signals from NVIDIA's dcgm-exporter, joined per pod with the engine's "
        "queue: dcgm (the defaults) or a block; none or omitted: off. Needs the capacity signals.",
        json_schema_extra=_gpu_schema,
    )


class AlertOverride(_Model):
    enabled: bool = Field(True, description="false drops every alert of this signal.")
    critical: Threshold | None = Field(None, description="Threshold for severity critical; null drops this level.")
    warning: Threshold | None = Field(None, description="Threshold for severity warning; null drops this level.")
    info: Threshold | None = Field(None, description="Threshold for severity info.")
    for_: PendingDuration | None = Field(None, alias="for", description="Pending duration, e.g. 10m; 0s to 1h.")
    fleet_share: Threshold | None = Field(
        None,
        description="engine_hung: share of a model's replicas that must be hung to page; target_down: share of "
        "the job's targets that must be down to page (default 50%).",
    )


class Alerts(_Model):
    ttft: AlertOverride | None = None
    itl: AlertOverride | None = None
    e2e: AlertOverride | None = None
    queue_time: AlertOverride | None = None
    length_finish: AlertOverride | None = None
    abort: AlertOverride | None = None
    success: AlertOverride | None = None
    nixl_transfer: AlertOverride | None = None
    nixl_failures: AlertOverride | None = None
    nixl_kv_expiry: AlertOverride | None = None
    spec_decode_acceptance: AlertOverride | None = None
    kv_cache: AlertOverride | None = None
    preemptions: AlertOverride | None = None
    waiting_requests: AlertOverride | None = None
    output_speed_per_user: AlertOverride | None = None
    rss_growth: AlertOverride | None = None
    metrics_absent: AlertOverride | None = None
    engine_hung: AlertOverride | None = None
    target_down: AlertOverride | None = None
    replica_outlier: AlertOverride | None = None


class BurnRate(_Model):
    severity: Literal["critical", "warning", "info"] = Field(description="critical pages (fast burn); warning tickets.")
    long: PromDuration = Field(description="Long window, e.g. 1h.")
    short: PromDuration = Field(description="Short window, e.g. 5m.")
    factor: float = Field(
        gt=0,
        le=1000,
        strict=True,
        allow_inf_nan=False,
        description="Burn-rate factor both windows must exceed, e.g. 14.4.",
    )


class SLO(_Model):
    name: Annotated[str, AfterValidator(_safe_value)] = Field(description="SLO name, e.g. first-token.")
    sli: Literal["ttft", "itl", "tpot", "e2e", "queue_time", "success"] = Field(
        description="ttft/itl/tpot/e2e/queue_time: good = at or below threshold; success: good = finished_reason stop."
    )
    objective: Threshold = Field(description="Target share of good events, e.g. 99.5%.")
    threshold: Annotated[str, AfterValidator(_duration_text)] | None = Field(
        None, description="Latency SLIs: the bound, a bucket boundary, e.g. 1s."
    )
    bad_reasons: list[Literal["length", "abort", "error", "repetition"]] | None = Field(
        None, description="Availability SLI: finish reasons that count as bad. Default: abort, error."
    )
    period: PromDuration = Field("30d", description="SLO period.")
    buckets: (
        Annotated[list[Annotated[float, Field(strict=True, allow_inf_nan=False)]], AfterValidator(_buckets)] | None
    ) = Field(
        None,
        description="Histogram buckets the engine was started with (--custom-histogram-buckets), if not the default.",
    )
    scope: Literal["cluster", "global"] = Field(
        "cluster",
        description="With service.cluster_label: cluster (default) keeps one SLO per cluster; global is one SLO "
        "over every cluster's requests (its series and alerts carry no cluster label).",
    )
    read_at: Literal["client", "gateway", "pods"] | None = Field(
        None,
        description="Where the SLI is read: client (the application's OpenTelemetry GenAI metrics, spec client: "
        "block; ttft from conventions 1.41.0, success and e2e), gateway or pods. Default: the gateway where it "
        "observes the SLI, else the pods.",
    )
    burn_rates: list[BurnRate] | None = Field(
        None,
        description="Replaces the SRE-workbook burn-rate table "
        "(page 14.4x over 1h and 5m, 6x over 6h and 30m; ticket 3x over 1d and 2h, 1x over 3d and 6h).",
    )

    @field_validator("objective")
    @classmethod
    def _objective(cls, v: Threshold) -> Threshold:
        r = parse_ratio(v)
        if not 0 < r < 1:
            raise ValueError("objective must be above 0% and below 100%")
        return v


class Runbook(_Model):
    base_url: str | None = Field(
        None, description="Where RUNBOOK.md is published; runbook_url = base_url#anchor. Default: relative RUNBOOK.md."
    )

    @field_validator("base_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is None:
            return v
        bad = {c for c in v if not re.fullmatch(r"[A-Za-z0-9_.:/@+~%?=&\-]", c)}
        if bad or not v or len(v) > 500:
            raise ValueError(
                "base_url must be a plain URL or path of up to 500 characters"
                + (f"; it contains {_chars(bad)} (percent-encode them; no '#': genobs adds the anchor)" if bad else "")
            )
        scheme = re.match(r"^([A-Za-z][A-Za-z0-9+.\-]*):", v)
        if scheme and scheme.group(1).lower() not in ("http", "https"):
            raise ValueError(f"base_url must be an http(s) URL or a relative path, not a {scheme.group(1)}: URL")
        return v


class Dashboard(_Model):
    title: SafeValue | None = Field(None, description="Dashboard title. Default: '<engine> - <name>' (e.g. 'vLLM - chat', 'SGLang - sglang').")
    uid: Annotated[str, AfterValidator(lambda v: _uid(v))] | None = Field(None, description="Grafana uid.")
    folder: SafeValue | None = Field(None, description="Grafana folder (used by the provisioning output).")
    refresh: PromDuration = Field("30s", description="Auto-refresh interval.")
    base_url: str | None = Field(
        None,
        description="Grafana's address (e.g. https://grafana.example.com): alerts then carry a dashboard_url "
        "annotation that opens the alert's panel with its labels as dashboard variables.",
    )

    @field_validator("base_url")
    @classmethod
    def _base_url(cls, v: str | None) -> str | None:
        # it lands in an alert template: no braces, quotes, spaces, query or fragment
        if v is None:
            return v
        if len(v) > 500 or not re.fullmatch(r"https?://[A-Za-z0-9.\-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~%/\-]*)?", v, re.I):
            raise ValueError(
                "base_url must be an absolute http(s) URL of Grafana, e.g. https://grafana.example.com or "
                "https://example.com/grafana (no query, fragment, spaces or braces; at most 500 characters)"
            )
        return v.rstrip("/")


class Kubernetes(_Model):
    enabled: bool = Field(
        False, description="Also write kubernetes/: a PrometheusRule, a dashboard ConfigMap and Grafana provisioning."
    )
    namespace: str = Field("monitoring", description="Namespace of the PrometheusRule and the dashboard ConfigMap.")
    labels: Annotated[dict[str, str], AfterValidator(_k8s_labels)] = Field(
        default_factory=dict,
        description="Labels on both objects, e.g. {release: kube-prometheus-stack} for the operator's ruleSelector.",
    )
    autoscaling: Autoscaling | None = Field(
        None,
        description="Scale the engine pods on waiting requests: prometheus-adapter rules, an autoscaling/v2 HPA and a KEDA "
        "ScaledObject under kubernetes/ (written with the Kubernetes output).",
    )

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, v: str) -> str:
        if not _K8S_NAME.fullmatch(v):
            raise ValueError(f"{v!r} is not a Kubernetes namespace (lower-case letters, digits and '-', up to 63)")
        return v


def _uid(v: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_-]{1,40}", v):
        raise ValueError("uid must be 1-40 letters, digits, - or _")
    return v


_TENANT = re.compile(r"[A-Za-z0-9!_.*'()\-]{1,150}")  # Mimir's tenant ID characters and length


def _tenant(v: str) -> str:
    if not _TENANT.fullmatch(v) or v in (".", ".."):
        raise ValueError(
            f"{v[:60]!r} is not a tenant ID: 1-150 letters, digits and ! - _ . * ' ( ) (not '.' or '..')"
        )
    if v == "__mimir_cluster":  # Mimir keeps its own cluster-wide series under it and refuses it as a tenant
        raise ValueError("'__mimir_cluster' is reserved by Mimir; name the tenants whose series the rules read")
    return v


def _namespace(v: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_.\-]{1,100}", v) or v in (".", ".."):
        raise ValueError(f"{v[:60]!r} is not a ruler namespace: 1-100 letters, digits, '_', '.' and '-'")
    return v


BACKENDS = ("prometheus", "thanos", "mimir", "victoriametrics")
TIERS = ("all", "edge", "global")


class Output(_Model):
    backend: Literal["prometheus", "thanos", "mimir", "victoriametrics"] = Field(
        "prometheus",
        description="Who evaluates the rules: prometheus (rule files), thanos (Thanos ruler: "
        "partial_response_strategy on alerting groups), mimir (Mimir/Cortex ruler: one namespace file for "
        "mimirtool rules load/sync), victoriametrics (vmalert). prometheus/ is always written and checked.",
    )
    tier: Literal["all", "edge", "global"] = Field(
        "all",
        description="all: every rule on one Prometheus; edge: the recording rules that read the engines' "
        "series (each cluster's Prometheus) plus the remote_write that ships their results; global: the "
        "alerts, SLOs and dashboard over the shipped genobs:* series. `build --tier` overrides it.",
    )
    tenants: list[Annotated[str, AfterValidator(_tenant)]] = Field(
        default_factory=list,
        description="mimir only: the tenants whose series the rules read (source_tenants of every group, a "
        "federated rule group); empty: the tenant the rules are loaded into.",
    )
    namespace: Annotated[str, AfterValidator(_namespace)] | None = Field(
        None, description="mimir only: the ruler namespace of the rule file. Default: genobs-<name>."
    )

    @field_validator("tenants")
    @classmethod
    def _tenants_once(cls, v: list[str]) -> list[str]:
        twice = sorted({t for t in v if v.count(t) > 1})
        if twice:
            raise ValueError(f"tenants must not repeat ({', '.join(repr(t) for t in twice[:3])} is listed twice)")
        return v
    partial_response_strategy: Literal["abort", "warn"] = Field(
        "abort",
        description="thanos only: what an alerting group does when a store answers partially; abort (Thanos' "
        "default, recommended for alerts) or warn.",
    )


class Spec(_Model):
    version: Literal["genobs/v1"] = Field(description="Spec format version.")
    name: str = Field(description="Lower-case name: output folder, rule-group prefix and dashboard uid.")
    team: SafeValue | None = Field(None, description="Owning team; added as label `team` on every alert.")
    description: str | None = Field(None, description="Free text shown in the runbook.")
    service: Service = Field(default_factory=Service)
    gateway: Gateway | None = Field(
        None,
        description="A gateway in front of the engine pods (llm-d EPP, Dynamo frontend, or one recording the "
        "OpenTelemetry GenAI server metrics): user-facing alerts and SLOs read it, diagnosis reads the pods.",
    )
    client: Client | None = Field(
        None,
        description="The application in front of the gateway or the pods, measuring OpenTelemetry GenAI client "
        "metrics: users' view, its alerts page first (docs/client.md).",
    )
    use_case: Literal["chat", "rag", "agentic", "batch", "voice", "capacity"] = Field(
        description="Preset of KPIs and thresholds."
    )
    features: Features = Field(default_factory=Features)
    evaluation_interval: Annotated[str, AfterValidator(_evaluation_interval)] = Field(
        "30s", description="Rule-group evaluation interval, 1s to 2m in whole seconds."
    )
    rate_window: Annotated[str, AfterValidator(_rate_window)] = Field(
        "5m",
        description="Window of rate() in recording rules (part of recorded names, e.g. rate5m), 1m to 1h. Keep it at "
        "least 4x the scrape interval so a missed scrape still leaves enough samples: 1m needs a scrape every 15s "
        "or faster (demos), the 5m default suits the common 15s-60s scrapes.",
    )
    slos: list[SLO] = Field(default_factory=list)
    alerts: Alerts = Field(default_factory=Alerts, description="Per-signal overrides of the preset alerts.")
    runbook: Runbook = Field(default_factory=Runbook)
    dashboard: Dashboard = Field(default_factory=Dashboard)
    kubernetes: Kubernetes = Field(
        default_factory=Kubernetes, description="Kubernetes manifests (prometheus-operator, Grafana sidecar)."
    )
    capacity: Capacity | None = Field(
        None, description="Capacity signals: goodput, system efficiency, baseline degradation, headroom, GPU saturation."
    )
    output: Output = Field(
        default_factory=Output, description="Rule backend (prometheus, thanos, mimir, victoriametrics) and tier."
    )

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _SPEC_NAME.fullmatch(v):
            raise ValueError("name must be lower-case letters, digits and '-', e.g. chat-prod")
        return v

    @field_validator("description")
    @classmethod
    def _description(cls, v: str | None) -> str | None:
        return None if v is None else _description_text(v)


def json_schema() -> dict:
    return Spec.model_json_schema(by_alias=True)

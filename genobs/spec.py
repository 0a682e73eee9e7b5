"""The spec models (`load` stage): what an SRE may write in a genobs YAML file.
Unknown keys are rejected; units are parsed strictly. The JSON Schema of these
models is what `genobs schema` prints."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator

from genobs.units import parse_prom_duration, parse_ratio, parse_seconds

SIGNALS = (
    "ttft",
    "itl",
    "e2e",
    "queue_time",
    "length_finish",
    "abort",
    "success",
    "nixl_transfer",
    "spec_decode_acceptance",
    "kv_cache",
    "preemptions",
    "waiting_requests",
    "output_speed_per_user",
    "rss_growth",
    "metrics_absent",
)
USE_CASES = ("chat", "rag", "agentic", "batch", "voice", "capacity")
SLI_KINDS = ("ttft", "itl", "tpot", "e2e", "queue_time", "success")

_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_SPEC_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")
# label values, model names and titles end up in PromQL strings, YAML and Markdown
_SAFE_VALUE = re.compile(r"^[A-Za-z0-9_.:/@+\- ]+$")


def _label_name(v: str) -> str:
    if not _LABEL_NAME.match(v) or v.startswith("__"):
        raise ValueError(
            f"{v!r} is not a Prometheus label name (letters, digits and _, not starting with a digit or __)"
        )
    return v


def _safe_value(v: str) -> str:
    if not v or not _SAFE_VALUE.match(v):
        raise ValueError(
            f"{v!r} contains characters genobs does not put into queries; use letters, digits, spaces and . _ - : / @ +"
        )
    return v


def _prom_duration(v: str) -> str:
    return parse_prom_duration(v)


def _duration_text(v: str) -> str:
    parse_seconds(v)
    return v


def _percent_text(v: str | float) -> str | float:
    parse_ratio(v)
    return v


LabelName = Annotated[str, AfterValidator(_label_name)]
SafeValue = Annotated[str, AfterValidator(_safe_value)]
PromDuration = Annotated[str, AfterValidator(_prom_duration)]
Threshold = str | float | int


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Service(_Model):
    engine: Literal["vllm"] = Field("vllm", description="Serving engine.")
    engine_version: str | None = Field(
        None, description="Engine release, e.g. '0.33' or '0.11.1'; picks metric names. Default: newest in the catalog."
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
    metric_names: Literal["colon", "underscore"] = Field(
        "colon",
        description="How the Prometheus stores vLLM names: 'colon' (vllm:...) as exposed, or 'underscore' "
        "(vllm_...) when the scrape escaped them (Prometheus 2.x with prometheus_client >= 0.23, Ray).",
    )
    min_request_rate: float = Field(
        0.05,
        ge=0,
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


class Features(_Model):
    prefix_caching: bool = Field(True, description="Prefix-cache hit-rate signals.")
    speculative_decoding: bool = Field(False, description="Speculative-decoding acceptance signals.")
    disaggregated_prefill: bool = Field(False, description="NIXL KV-transfer signals (disaggregated prefill/decode).")


class AlertOverride(_Model):
    enabled: bool = Field(True, description="false drops every alert of this signal.")
    critical: Threshold | None = Field(None, description="Threshold for severity critical; null drops this level.")
    warning: Threshold | None = Field(None, description="Threshold for severity warning; null drops this level.")
    info: Threshold | None = Field(None, description="Threshold for severity info.")
    for_: PromDuration | None = Field(None, alias="for", description="Pending duration, e.g. 10m.")


class Alerts(_Model):
    ttft: AlertOverride | None = None
    itl: AlertOverride | None = None
    e2e: AlertOverride | None = None
    queue_time: AlertOverride | None = None
    length_finish: AlertOverride | None = None
    abort: AlertOverride | None = None
    success: AlertOverride | None = None
    nixl_transfer: AlertOverride | None = None
    spec_decode_acceptance: AlertOverride | None = None
    kv_cache: AlertOverride | None = None
    preemptions: AlertOverride | None = None
    waiting_requests: AlertOverride | None = None
    output_speed_per_user: AlertOverride | None = None
    rss_growth: AlertOverride | None = None
    metrics_absent: AlertOverride | None = None


class BurnRate(_Model):
    severity: Literal["critical", "warning", "info"] = Field(description="critical pages (fast burn); warning tickets.")
    long: PromDuration = Field(description="Long window, e.g. 1h.")
    short: PromDuration = Field(description="Short window, e.g. 5m.")
    factor: float = Field(gt=0, description="Burn-rate factor both windows must exceed, e.g. 14.4.")


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
    buckets: list[float] | None = Field(
        None,
        description="Histogram buckets the engine was started with (--custom-histogram-buckets), if not the default.",
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
        if v is not None and not re.match(r"^[A-Za-z0-9_.:/@+~%?=&\-]+$", v):
            raise ValueError("base_url must be a plain URL or path without spaces, quotes or '#'")
        return v


class Dashboard(_Model):
    title: SafeValue | None = Field(None, description="Dashboard title. Default: 'vLLM - <name>'.")
    uid: Annotated[str, AfterValidator(lambda v: _uid(v))] | None = Field(None, description="Grafana uid.")
    folder: SafeValue | None = Field(None, description="Grafana folder (used by the provisioning output).")
    refresh: PromDuration = Field("30s", description="Auto-refresh interval.")


def _uid(v: str) -> str:
    if not re.match(r"^[A-Za-z0-9_-]{1,40}$", v):
        raise ValueError("uid must be 1-40 letters, digits, - or _")
    return v


class Spec(_Model):
    version: Literal["genobs/v1"] = Field(description="Spec format version.")
    name: str = Field(description="Lower-case name: output folder, rule-group prefix and dashboard uid.")
    team: SafeValue | None = Field(None, description="Owning team; added as label `team` on every alert.")
    description: str | None = Field(None, description="Free text shown in the runbook.")
    service: Service = Field(default_factory=Service)
    use_case: Literal["chat", "rag", "agentic", "batch", "voice", "capacity"] = Field(
        description="Preset of KPIs and thresholds."
    )
    features: Features = Field(default_factory=Features)
    evaluation_interval: PromDuration = Field("30s", description="Rule-group evaluation interval.")
    rate_window: PromDuration = Field(
        "5m",
        description="Window of rate() in recording rules (part of recorded names, e.g. rate5m). Keep at least 4x the "
        "scrape interval; shorter windows react faster and are noisier (1m suits demos with a 1-2s scrape).",
    )
    slos: list[SLO] = Field(default_factory=list)
    alerts: Alerts = Field(default_factory=Alerts, description="Per-signal overrides of the preset alerts.")
    runbook: Runbook = Field(default_factory=Runbook)
    dashboard: Dashboard = Field(default_factory=Dashboard)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _SPEC_NAME.match(v):
            raise ValueError("name must be lower-case letters, digits and '-', e.g. chat-prod")
        return v

    @field_validator("description")
    @classmethod
    def _description(cls, v: str | None) -> str | None:
        if v is not None and any(c in v for c in "<>`\r"):
            raise ValueError("description must not contain <, > or backticks")
        return v


def json_schema() -> dict:
    return Spec.model_json_schema(by_alias=True)

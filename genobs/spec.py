"""The spec models (`load` stage): what an SRE may write in a genobs YAML file.
Unknown keys are rejected; units are parsed strictly. The JSON Schema of these
models is what `genobs schema` prints."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, field_validator

from genobs.units import parse_prom_duration, parse_ratio, parse_seconds, prom_duration_seconds

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

_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
_LABEL_MAX = 100  # Prometheus has no limit, but every rule and alert repeats the name
_SPEC_NAME = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
# label values, model names and titles end up in PromQL strings, YAML and Markdown
_SAFE_VALUE = re.compile(r"[A-Za-z0-9_.:/@+\- ]+")
_SAFE_MAX = 200
# labels genobs itself puts on recorded series (histogram buckets, quantiles)
_RESERVED_LABELS = ("le", "quantile")
# Kubernetes names (RFC 1123 label) and label keys/values
_K8S_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_K8S_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")
_K8S_LABEL_PREFIX = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")


def _chars(bad: set[str]) -> str:
    return " ".join(repr(c) if c.isprintable() and c != " " else f"U+{ord(c):04X}" for c in sorted(bad))


def _label_name(v: str) -> str:
    if not _LABEL_NAME.fullmatch(v) or v.startswith("__"):
        raise ValueError(
            f"{v!r} is not a Prometheus label name (letters, digits and _, not starting with a digit or __)"
        )
    if v.lower() in ("inf", "nan"):
        raise ValueError(f"{v!r} cannot be a label name: PromQL reads it as a number in by (...) and on (...)")
    if len(v) > _LABEL_MAX:
        raise ValueError(f"label name is {len(v)} characters long; the limit is {_LABEL_MAX}")
    if v in _RESERVED_LABELS:
        raise ValueError(f"{v!r} is a label genobs sets on recorded series itself; use another label")
    return v


def _safe_value(v: str) -> str:
    """Label values, model names, team, titles: they end up in PromQL strings, YAML,
    Markdown and alert labels (Go templates), so only inert characters are allowed."""
    if not v:
        raise ValueError("must not be empty")
    if not _SAFE_VALUE.fullmatch(v):
        bad = {c for c in v if not _SAFE_VALUE.fullmatch(c)}
        raise ValueError(
            f"{v[:60]!r} contains {_chars(bad)}; use letters, digits, spaces and . _ - : / @ + "
            "(the value ends up in PromQL, YAML and Markdown)"
        )
    if v != v.strip(" "):
        raise ValueError(f"{v!r} must not start or end with a space")
    if len(v) > _SAFE_MAX:
        raise ValueError(f"is {len(v)} characters long; the limit is {_SAFE_MAX}")
    return v


def _engine_version(v: str | None) -> str | None:
    if v is not None:
        from genobs.catalog import parse_version

        parse_version(v)
    return v


def _k8s_labels(v: dict[str, str]) -> dict[str, str]:
    bad = []
    for key, value in v.items():
        prefix, _, name = key.rpartition("/")
        if (prefix and not _K8S_LABEL_PREFIX.fullmatch(prefix)) or not _K8S_LABEL_VALUE.fullmatch(name) or not name:
            bad.append(f"key {key!r}")
        if not _K8S_LABEL_VALUE.fullmatch(value):
            bad.append(f"value {value!r} of {key!r}")
    if bad:
        raise ValueError(
            f"not a Kubernetes label: {', '.join(bad)} (keys: optional DNS prefix and '/', then a name; names and "
            "values: up to 63 letters, digits, '-', '_' or '.', starting and ending with a letter or digit)"
        )
    return v


def _description_text(v: str) -> str:
    """The description is printed as Markdown at the top of the runbook: plain prose only."""
    if len(v) > 2000:
        raise ValueError(f"is {len(v)} characters long; the limit is 2000")
    problems = []
    bad = {c for c in v if c in "<>`{}[]|\\" or (not c.isprintable() and c != "\n")}
    if bad:
        problems.append(f"must not contain {_chars(bad)}")
    for line in v.splitlines():
        s = line.strip()
        if s.startswith("#") or (len(s) >= 2 and set(s) <= {"=", "-"}):
            problems.append(f"line {s[:40]!r} would become a Markdown heading")
            break
    if problems:
        raise ValueError(
            "; ".join(problems) + ": the description is printed as Markdown in the runbook; write plain text"
        )
    return v


_MAX_REQUEST_RATE = 100_000  # requests/s; a guard above it would silence every alert of any real fleet
_MAX_BUCKET = 7 * 86400  # seconds; vLLM's longest default bucket is 7680 s


def _buckets(v: list[float]) -> list[float]:
    """Bucket boundaries as --custom-histogram-buckets takes them: positive seconds, strictly increasing."""
    if not v:
        raise ValueError("must list at least one bucket boundary")
    for i, b in enumerate(v):
        if b <= 0:
            raise ValueError(f"boundaries are positive seconds; got {b:g}")
        if b > _MAX_BUCKET:
            raise ValueError(f"boundaries are seconds, at most {_MAX_BUCKET} (a week); got {b:g}")
        if i and b <= v[i - 1]:
            raise ValueError(f"boundaries must be strictly increasing; {b:g} follows {v[i - 1]:g}")
    return v


_MAX_DURATION = 10 * 365 * 86400  # Prometheus durations overflow near 292 years; nothing here needs 10


def _pending_duration(v: str) -> str:
    v = parse_prom_duration(v)
    if prom_duration_seconds(v) > _MAX_DURATION:
        raise ValueError(f"{v!r} is longer than 10 years")
    return v


# The generated promtool tests must watch an alert pend for its whole `for` at the tests'
# 1m evaluation interval, so their run time grows with it (a `for` of 1d: minutes of
# promtool and of test generation). A condition that must hold for over an hour is a trend:
# an SLO's slow-burn windows (slos:) watch those, over days, at a bounded cost.
FOR_MAX = 3600


def _alert_for(v: str) -> str:
    v = _pending_duration(v)
    if prom_duration_seconds(v) > FOR_MAX:
        raise ValueError(
            f"{v!r} is longer than 1h: an alert that must hold for hours reacts hours late and its generated "
            "tests would simulate every minute of it; watch slow trends with an SLO (slos:) and its slow-burn "
            "windows instead"
        )
    return v


def _prom_duration(v: str) -> str:
    v = _pending_duration(v)
    if prom_duration_seconds(v) <= 0:
        raise ValueError(f"{v!r} must be longer than 0s")
    return v


# rate() needs >= 2 samples and should survive a missed scrape: at least 4 scrapes per
# window. 1m is 4x a 15s scrape, the fastest interval in common use; shorter windows also
# leave no room for the 1m sample spacing of the generated promtool tests. Beyond 1h
# every alert reacts more than an hour late (SLO windows are separate) and the generated
# tests would simulate days of samples.
RATE_WINDOW_MIN, RATE_WINDOW_MAX = 60, 3600


def _rate_window(v: str) -> str:
    v = _prom_duration(v)
    seconds = prom_duration_seconds(v)
    if seconds < RATE_WINDOW_MIN:
        raise ValueError(
            f"{v!r} is shorter than 1m: rate() needs at least 4 scrapes in its window to survive a missed one, "
            "and 1m is 4x a 15s scrape, the fastest in common use; write 1m or more"
        )
    if seconds > RATE_WINDOW_MAX:
        raise ValueError(
            f"{v!r} is longer than 1h: every alert would react over an hour late; SLO burn-rate windows are set "
            "under slos: instead"
        )
    return v


# Prometheus forgets a sample after its 5m lookback: a rule group must run at least twice
# in it, so one missed evaluation does not make every recorded series vanish. Whole seconds:
# the derived group intervals (panels, SLO long windows) are whole multiples of it.
EVALUATION_INTERVAL_MIN, EVALUATION_INTERVAL_MAX = 1, 120


def _evaluation_interval(v: str) -> str:
    v = _prom_duration(v)
    seconds = prom_duration_seconds(v)
    if seconds < EVALUATION_INTERVAL_MIN or seconds != int(seconds):
        raise ValueError(f"{v!r} is not a whole number of seconds of at least 1s; write e.g. 5s, 30s or 1m")
    if seconds > EVALUATION_INTERVAL_MAX:
        raise ValueError(
            f"{v!r} is longer than 2m: Prometheus drops a recorded series 5m after its last sample, so rules "
            "must run at least twice in that time; write 2m or less"
        )
    return v


def _duration_text(v: str) -> str:
    parse_seconds(v)
    return v.strip(" ")


def _percent_text(v: str | float) -> str | float:
    parse_ratio(v)
    return v


LabelName = Annotated[str, AfterValidator(_label_name)]
SafeValue = Annotated[str, AfterValidator(_safe_value)]
PromDuration = Annotated[str, AfterValidator(_prom_duration)]
PendingDuration = Annotated[str, AfterValidator(_alert_for)]  # an alert's `for`: 0s to 1h
Threshold = str | float | int


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


# capacity models use the types above (imported here, after their definition)
from genobs.spec_capacity import Autoscaling, Capacity, Gpu  # noqa: E402


class Roles(_Model):
    """Disaggregated prefill/decode: the target label that tells the two pools apart."""

    label: LabelName = Field(description="Label naming the pool of a pod, e.g. role.")
    prefill: SafeValue = Field(description="Value of `label` on prefill pods, e.g. prefill.")
    decode: SafeValue = Field(description="Value of `label` on decode pods, e.g. decode.")


class Service(_Model):
    engine: Literal["vllm", "sglang"] = Field(
        "vllm", description="Serving engine: vllm or sglang; picks the engine profile (metric names, labels, buckets)."
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
        description="How the Prometheus stores vLLM names: 'colon' (vllm:...) as exposed, or 'underscore' "
        "(vllm_...) when the scrape escaped them (Prometheus 2.x with prometheus_client >= 0.23, Ray).",
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
        description="GPU saturation and memory signals from NVIDIA's dcgm-exporter, joined per pod with vLLM's "
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
    title: SafeValue | None = Field(None, description="Dashboard title. Default: 'vLLM - <name>'.")
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
        description="Scale vLLM on waiting requests: prometheus-adapter rules, an autoscaling/v2 HPA and a KEDA "
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

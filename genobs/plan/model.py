"""The Plan: frozen data every renderer takes. Nothing here reads the spec."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class RecordingRule:
    """A Prometheus recording rule."""

    record: str
    expr: str
    labels: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class AlertRule:
    """A Prometheus alerting rule, with the signal it reads, its threshold and its links."""

    name: str
    signal: str
    severity: str
    expr: str
    for_: str
    summary: str
    description: str
    runbook_url: str
    labels: tuple[tuple[str, str], ...] = ()
    keep_firing_for: str = ""  # how long it holds after its condition ends (plan.pages.with_hold)
    threshold_text: str = ""
    threshold: float | None = None  # None for alerts without a numeric threshold
    comparator: str = ""  # ">" or "<": which side of the threshold fires
    query: str = ""  # the series compared against the threshold, for the runbook
    panel: str = ""  # dashboard panel that shows it
    dashboard_url: str = ""  # annotation template: the panel, with the alert's labels as variables
    protects: str = ""  # a page's user-facing symptom (docs/alerting-policy.md); "" on warnings
    # the engine-neutral key (signals.yaml, capacity.yaml: TtftP99High) the plan compares; the
    # name itself where it is no engine's (SLO and gateway alerts)
    key: str = ""

    def __post_init__(self) -> None:
        if not self.key:
            object.__setattr__(self, "key", self.name)

    def annotations(self) -> dict[str, str]:
        """The annotation templates, in the order the rule file writes them."""
        out = {"summary": self.summary, "description": self.description, "runbook_url": self.runbook_url}
        if self.dashboard_url:
            out["dashboard_url"] = self.dashboard_url
        if self.protects:
            out["protects"] = self.protects
        return out


@dataclass(frozen=True)
class RuleGroup:
    """A Prometheus rule group: its name, interval and rules."""

    name: str
    interval: str
    rules: tuple[RecordingRule | AlertRule, ...]


@dataclass(frozen=True)
class Target:
    """One query of a dashboard panel."""

    expr: str
    legend: str
    format: str = "time_series"


@dataclass(frozen=True)
class Panel:
    """A dashboard panel: its title, kind, queries and unit."""

    title: str
    description: str
    unit: str
    targets: tuple[Target, ...]
    kind: str = "timeseries"  # timeseries | heatmap
    # Grafana threshold steps (colour, value from which it applies), the first with value
    # None (the colour below every line): see dashboard.threshold_steps
    thresholds: tuple[tuple[str, float | None], ...] = ()
    width: int = 12
    min: float | None = None
    max: float | None = None
    # a latency histogram's first bucket bound (seconds): quantiles at or below it lie in the first
    # bucket, where no observation says where; the panel shows them as "<= bound" (their legends
    # end with QUANTILE_LEGEND's pNN)
    first_bucket: float | None = None


@dataclass(frozen=True)
class Row:
    """A dashboard row and its panels."""

    title: str
    panels: tuple[Panel, ...]
    # Grafana runs the queries of a collapsed row only when someone opens it: rows with a
    # series per replica or per target (hundreds at fleet scale) start collapsed, so a
    # refresh of the dashboard reads about the same whatever the fleet size
    collapsed: bool = False


@dataclass(frozen=True)
class Variable:
    """A dashboard template variable."""

    name: str
    query: str
    label: str
    multi: bool = True  # several values and "All"; False: exactly one (the first by default)


@dataclass(frozen=True)
class Severity:
    """One severity of an alert: its threshold and duration."""

    severity: str
    threshold_text: str  # with its comparator, e.g. "> 2.5s"
    for_: str


@dataclass(frozen=True)
class RunbookEntry:
    """An alert's runbook section: what it means, the first action and what to check next."""

    alert: str
    anchor: str
    signal: str
    title: str
    meaning: str
    first_action: str
    next_checks: tuple[str, ...]
    severities: tuple[Severity, ...]
    summary: str
    query: str
    panel: str
    expr: str
    confirm: tuple[tuple[str, str], ...] = ()  # (what it shows, PromQL) per instance/engine
    protects: str = ""  # the symptom its page protects (its critical alert's annotation)


@dataclass(frozen=True)
class Dashboard:
    """The dashboard of a spec: its rows, variables, links and annotations."""

    title: str
    uid: str
    folder: str
    refresh: str
    tags: tuple[str, ...]
    variables: tuple[Variable, ...]
    rows: tuple[Row, ...]
    runbook_url: str | None = None  # an absolute runbook link shown on the dashboard
    # panel title -> ((link title, runbook section url), ...) of the alerts the panel shows
    panel_links: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = ()
    annotations: tuple[Annotation, ...] = ()


@dataclass(frozen=True)
class Annotation:
    """A Grafana annotation query: marks on every panel where `expr` returns a series."""

    name: str
    expr: str
    title: str  # Grafana's titleFormat: {{label}} templates
    text: str  # Grafana's textFormat
    tags: tuple[str, ...]  # labels shown as annotation tags
    colour: str


@dataclass(frozen=True)
class GatewayLayer:
    """The user-facing layer in front of the pods, as the commands that talk to a live
    Prometheus (doctor, compare, scrape-config) need it: its profile, release and scrape selector,
    and the raw names its rules read under that selector."""

    engine: str  # its profile: genobs/data/<engine>.yaml
    engine_version: str  # '0.10.0'
    release: str  # 'llm-d EPP 0.10.0'
    selector: tuple[tuple[str, str], ...]
    models: tuple[str, ...]
    raw_metrics: frozenset[str]  # read under `selector`, never under the pods' selector
    signals: frozenset[str]  # user-facing signals its rules read (ttft, e2e, success)


@dataclass(frozen=True)
class Plan:
    """Everything a spec compiles to before rendering: rule groups, dashboard, runbook, tests."""

    name: str
    title: str
    use_case: str
    use_case_text: str
    primary_kpi: str
    description: str
    engine: str
    engine_version: str
    metric_names: str
    selector_text: str
    group_by: tuple[str, ...]
    groups: tuple[RuleGroup, ...]
    dashboard: Dashboard
    runbook: tuple[RunbookEntry, ...]
    slo_runbook: tuple[dict, ...] = ()
    unit_tests: tuple[tuple[str, dict], ...] = ()
    inhibit_rules: tuple[dict, ...] = ()  # Alertmanager inhibit_rules entries
    warnings: tuple[str, ...] = ()  # things the spec compiles to but a user should know
    # signals the engine cannot observe or observes only approximately, one line each
    capabilities: tuple[str, ...] = ()
    slo_layers: tuple[str, ...] = ()  # where each SLO is read, with a client block (build notes)
    engine_release: str = ""  # 'SGLang 0.5.23': the engine and release in texts
    # signal -> why the engine cannot observe it / how it approximates it (from its profile)
    unobservable: tuple[tuple[str, str], ...] = ()
    approximations: tuple[tuple[str, str], ...] = ()
    raw_metrics: frozenset[str] = field(default_factory=frozenset)
    alert_prefix: str = ""  # the engine profile's prefix of pod-level alert names (naming.alert)
    alert_renames: tuple[tuple[str, str], ...] = ()  # and its renamed first words (naming.alert)
    gateway: GatewayLayer | None = None  # spec `gateway:`; its raw names are also in raw_metrics
    client: GatewayLayer | None = None  # spec `client:` (profile otel-genai); its raw names too
    global_slos: tuple[str, ...] = ()  # SLOs of `scope: global`: one over every cluster (tiers.py runs them global)

    @property
    def alerts(self) -> tuple[AlertRule, ...]:
        return tuple(r for g in self.groups for r in g.rules if isinstance(r, AlertRule))

    @property
    def recording_rules(self) -> tuple[RecordingRule, ...]:
        return tuple(r for g in self.groups for r in g.rules if isinstance(r, RecordingRule))

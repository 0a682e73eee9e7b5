"""Alerting rules: thresholds resolved from signal defaults, the use-case preset
and the spec's overrides, each alert reading recorded series by name."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from genobs import data as data_files
from genobs import naming
from genobs import promql as q
from genobs.plan import liveness
from genobs.plan.context import Context
from genobs.plan.model import AlertRule, RunbookEntry, Severity
from genobs.plan.recorder import Recorder
from genobs.plan.recording import peer_group
from genobs.units import format_percent, format_seconds, parse_number, parse_ratio, parse_seconds

SEVERITIES = ("critical", "warning", "info")
WAITING_FLOOR = 10.0  # queue-outlier floor when the waiting alert is off (its default warning)


@functools.cache
def signal_data() -> dict:
    return data_files.load("signals.yaml")


@functools.cache
def preset_data() -> dict:
    return data_files.load("presets.yaml")


HANDBOOK = ("title", "meaning", "first_action", "next_checks")


def handbook(data: dict, alert: str, signal: str) -> dict:
    """The runbook text of one alert: its own meaning, first action and next checks where
    the alert differs from the others of its signal (target down vs capacity lost, hung
    replica vs fleet without progress), else its signal's."""
    own = data["alerts"].get(alert, {})
    base = data["signals"].get(signal, {})
    return {k: own.get(k, base.get(k)) for k in HANDBOOK}


def runbook_entries(
    alerts: list[AlertRule], data: dict, ctx: Context, confirm: Callable[[str], tuple] = lambda key: ()
) -> tuple[RunbookEntry, ...]:
    """One runbook section per alert (its severities together), its text from `data`
    (signals.yaml or capacity.yaml, read by the alert's key, other alerts named for `ctx`'s
    engine) and its per-replica `confirm` queries (by key)."""
    entries: dict[str, RunbookEntry] = {}
    for a in alerts:
        sev = Severity(a.severity, f"{a.comparator} {a.threshold_text}".strip(), a.for_)
        if a.name in entries:
            e = entries[a.name]
            entries[a.name] = RunbookEntry(
                **{**e.__dict__, "severities": (*e.severities, sev), "protects": e.protects or a.protects}
            )
            continue
        s = handbook(data, a.key, a.signal)
        entries[a.name] = RunbookEntry(
            alert=a.name,
            anchor=naming.anchor(a.name),
            signal=a.signal,
            title=ctx.alert_refs(s["title"]),
            meaning=ctx.words(s["meaning"]),
            first_action=ctx.words(s["first_action"]),
            next_checks=tuple(ctx.alert_refs(c) for c in s["next_checks"]),
            severities=(sev,),
            summary=a.summary,
            query=a.query,
            panel=a.panel,
            expr=a.expr,
            confirm=confirm(a.key),
            protects=a.protects,
        )
    return tuple(entries.values())


_PARSERS = {"seconds": parse_seconds, "ratio": parse_ratio, "number": parse_number}


def format_threshold(kind: str, value: float) -> str:
    if kind == "seconds":
        return format_seconds(value)
    if kind == "ratio":
        return format_percent(value)
    return f"{value:g}"


_HUMANIZE = {"seconds": "humanizeDuration", "ratio": "humanizePercentage", "number": "humanize", "none": "humanize"}


@dataclass(frozen=True)
class Resolved:
    """One alert definition after defaults, preset and overrides."""

    key: str  # engine-neutral (signals.yaml): Context.alert gives the emitted name
    signal: str
    kind: str
    direction: str
    for_: str
    levels: tuple[tuple[str, float], ...]  # (severity, threshold)
    summary: str
    description: str
    unit: str = ""
    value_format: str = ""  # printf format of $value in the description; default by kind
    value_kind: str = ""  # kind of $value when it differs from the threshold's (an outlier's factor)
    protects: str = ""  # the symptom (signals.yaml `symptoms`) a page protects; "" for a cause

    def page_reason(self) -> str:
        """The `protects` annotation of this alert's page: its symptom, or the spec's own say-so."""
        if self.protects:
            return signal_data()["symptoms"][self.protects]
        return f"a cause the spec raised to a page (alerts.{self.signal}.critical), not a symptom users feel"

    @property
    def comparator(self) -> str:
        return {"above": ">", "at_or_above": ">=", "below": "<"}[self.direction]


def resolve(use_case: str, overrides: dict[str, dict], report) -> list[Resolved]:
    """`overrides`: signal -> fields the spec set. `report(path, message)` records problems."""
    data = signal_data()
    preset = preset_data()[use_case].get("alerts", {})
    out: list[Resolved] = []
    shared = {a["signal"] for a in data["alerts"].values() if a.get("share_field")}
    for signal, layer in overrides.items():
        if layer.get("fleet_share") is None:
            continue
        if signal not in shared:
            report(("alerts", signal, "fleet_share"), f"fleet_share applies only to {', '.join(sorted(shared))}")
            continue
        try:
            share = parse_ratio(layer["fleet_share"])
        except ValueError as exc:
            report(("alerts", signal, "fleet_share"), str(exc))
            continue
        if not 0 < share <= 1:
            report(("alerts", signal, "fleet_share"), "must be above 0 % and at most 100 % of the replicas")
    for key, alert in data["alerts"].items():
        signal = alert["signal"]
        kind = alert["kind"]
        layers = [("preset", preset.get(signal, {})), ("spec", overrides.get(signal, {}))]
        enabled = True
        for _, layer in layers:
            enabled = layer.get("enabled", enabled)
        if not enabled:
            continue
        raw = dict(alert["thresholds"])
        for_ = alert["for"]
        for source, layer in layers:
            if layer.get("for"):
                for_ = layer["for"]
            field = alert.get("share_field")
            if field and layer.get(field) is not None:
                raw = {sev: (source, layer[field]) for sev in raw}
            if not alert.get("primary"):
                continue
            for sev in SEVERITIES:
                if sev in layer:
                    if layer[sev] is None:
                        raw.pop(sev, None)
                    elif kind == "none":
                        report(
                            ("alerts", signal, sev), f"{signal} alerts have no threshold; only enabled and for apply"
                        )
                    else:
                        raw[sev] = (source, layer[sev])
        protects = alert.get("protects", "")
        if not protects and not (isinstance(raw.get("critical"), tuple) and raw["critical"][0] == "spec"):
            raw.pop("critical", None)  # a cause pages only where the spec itself says so
        levels = []
        for sev in SEVERITIES:
            if sev not in raw:
                continue
            value = raw[sev]
            source, value = value if isinstance(value, tuple) else ("default", value)
            if kind == "none":
                levels.append((sev, 0.0))
                continue
            try:
                levels.append((sev, _PARSERS[kind](value)))
            except ValueError as exc:
                if source == "spec":
                    report(("alerts", signal, sev), str(exc))
                else:
                    raise
        if not levels:
            continue
        out.append(
            Resolved(
                key,
                signal,
                kind,
                alert["direction"],
                for_,
                tuple(levels),
                alert["summary"],
                alert["description"],
                alert.get("unit", ""),
                alert.get("value_format", ""),
                alert.get("value_kind", ""),
                protects,
            )
        )
    return out


def labels_template(labels: tuple[str, ...]) -> str:
    """'model_name {{ $labels.model_name }}, job {{ $labels.job }}' for alert descriptions."""
    return ", ".join(f"{label} {{{{ $labels.{label} }}}}" for label in labels)


# p99 alerts on a latency histogram: alert key -> (histogram key, dashboard panel)
LATENCY_ALERTS = {
    "TtftP99High": ("ttft", "Time to first token"),
    "ItlP99High": ("itl", "Inter-token latency"),
    "E2eLatencyP99High": ("e2e", "End-to-end latency"),
    "QueueTimeP99High": ("queue_time", "Queue time"),
    "NixlTransferTimeP99High": ("nixl_xfer_time", "{hint:xfer_noun} time"),
}


def _hung(b: AlertBuilder, op: str, t: str) -> tuple[str, str, str]:
    # compared: the requests waiting on the replica's hung engines (its value), not all it holds
    expr = liveness.hung_replicas(b.rec)
    return expr, expr, "Replica liveness"


def _no_progress(b: AlertBuilder, op: str, t: str) -> tuple[str, str, str]:
    series = b.rec.ref("engines_hung_ratio")
    return f"{series} {op} {t}", series, "Replica liveness"


def _capacity_lost(b: AlertBuilder, op: str, t: str) -> tuple[str, str, str]:
    series = b.rec.ref("process_targets_down_ratio")
    return f"{series} {op} {t}", series, "Scrape targets up"


def _outlier(
    b: AlertBuilder, key: str, k: str, floor: float | None, panel: str, g: tuple[str, ...]
) -> tuple[str, str, str] | None:
    """One replica's figure above k x the median of the model's replicas, with at least
    MIN_PEERS replicas to compare (fewer cannot tell which one is the outlier)."""
    if "instance" in b.ctx.group or key not in b.rec.names:
        return None  # every replica is its own group (no peers), or no such series
    series = b.rec.ref(key)
    median = f"{k} * quantile {q.by(g)} (0.5, {series})"
    expr = f"{series} > {q.on(g)} group_left () ({median})"
    if floor is not None:
        expr += f" and {series} > {floor:g}"
    expr += f" and {q.on(g)} count {q.by(g)} ({series}) >= {MIN_PEERS}"
    return expr, series, panel


MIN_PEERS = 3
# tokens per request against the model's average over TOKENS_BASELINE, ending TOKENS_BASELINE_OFFSET
# ago: the offset keeps the first half hour of a collapse out of its own baseline
TOKENS_BASELINE = "6h"
TOKENS_BASELINE_OFFSET = "30m"


def waiting_floor(levels: dict[str, float]) -> float:
    """A queue outlier must also be a real queue: above the per-replica waiting warning
    (`levels`: severity -> threshold of RequestsWaitingHigh; its lowest without a warning)."""
    return levels.get("warning", min(levels.values(), default=WAITING_FLOOR))

_LIVENESS = {
    "ServingCapacityLost": _capacity_lost,
    "EngineHung": _hung, "FleetNoProgress": _no_progress}


class AlertBuilder:
    def __init__(self, ctx: Context, rec: Recorder, base_url: str, team: str | None):
        self.waiting_floor: float = WAITING_FLOOR
        self.ctx = ctx
        self.rec = rec
        self.base_url = base_url
        self.team = team

    def _traffic_gate(self, key: str = "finished") -> str:
        return f"and {q.on(self.ctx.group)} {self.rec.ref(key)} >= {self.ctx.min_request_rate:g}"

    def condition(self, a: Resolved, threshold: float) -> tuple[str, str, str] | None:
        """(expr, compared series, dashboard panel) or None when the signal does not apply."""
        ctx, r = self.ctx, self.rec
        op = a.comparator
        t = f"{threshold:g}"
        p99 = (("quantile", "=", "0.99"),)
        if a.key in LATENCY_ALERTS:
            key, panel = LATENCY_ALERTS[a.key]
            if f"{key}_quantile" not in r.names:
                return None  # feature off (NIXL)
            series = r.ref(f"{key}_quantile", p99)
            gate = "" if key == "nixl_xfer_time" else f" {self._traffic_gate()}"
            return f"{series} {op} {t}{gate}", series, ctx.words(panel)
        if a.key == "SuccessRatioLow":
            # attempts (finished, HTTP 5xx, rejections) gate it: an API server failing every request
            # before the engine finishes none; below the gate, a count over the last hour decides
            series = r.ref("success_ratio")
            recent = f"{series} {op} {t} {self._traffic_gate('attempted')}"
            return f"({recent}) or ({liveness.low_traffic_failures(r, op, t)})", series, "Success rate"
        ratios = {
            "LengthFinishRatioHigh": ("length_ratio", "Length and abort finishes"),
            "AbortRatioHigh": ("abort_ratio", "Length and abort finishes"),
            "OutputSpeedPerUserLow": ("output_speed_per_user", "Output speed per user (tok/s/user)"),
        }
        if a.key in ratios:
            key, panel = ratios[a.key]
            if key not in r.names:
                return None  # the engine has no finish reasons (see the plan's capability lines)
            series = r.ref(key)
            return f"{series} {op} {t} {self._traffic_gate()}", series, panel
        nixl = {
            "NixlTransfersFailing": ("nixl_failed_ratio", "{hint:xfer} failure and expiry ratios"),
            "NixlKvExpired": ("nixl_kv_expired_ratio", "{hint:xfer} failure and expiry ratios"),
        }
        if a.key in nixl:
            key, panel = nixl[a.key]
            if key not in r.names:
                return None  # feature off, or a version without the counter (KV expiry from 0.15.0)
            series = r.ref(key)
            return f"{series} {op} {t} {self._traffic_gate()}", series, ctx.words(panel)
        if a.key == "SpecDecodeAcceptanceLow":
            if "spec_alpha" not in r.names:
                return None  # feature off, or a version without per-position counts (see plan notes)
            series = r.ref("spec_alpha")
            return f"{series} {op} {t} {self._traffic_gate()}", series, "Speculative-decoding acceptance alpha"
        if a.key == "OutputTokensCollapsed":
            # against the model's own recent average: short answers are some workloads' normal
            series = r.ref("generation_length_mean")
            baseline = f"avg_over_time({series}[{TOKENS_BASELINE}] offset {TOKENS_BASELINE_OFFSET})"
            return f"{series} {op} {t} * {baseline} {self._traffic_gate()}", series, "Generation length distribution"
        if a.key == "KvCacheSaturated":
            # KV usage of the engines with requests waiting (paired per engine in the recording rule)
            series = r.ref("replica_kv_cache_usage_queueing")
            return f"{series} {op} {t}", series, "KV cache usage"
        if a.key == "PreemptionsSustained":
            series = r.ref("preemptions_per_request")
            return f"{series} {op} {t} {self._traffic_gate()}", series, "Preemptions"
        if a.key == "RequestsWaitingHigh":
            series = r.ref("waiting_per_replica")
            return f"{series} {op} {t}", series, "Running vs waiting requests"
        if a.key == "ApiServerRssGrowing":
            rss = r.ref("process_rss")
            series = f"deriv({rss}[30m]) * 3600 / {rss}"
            return f"{series} {op} {t}", series, "API-server resident memory"
        if a.key == "TargetDown":
            series = liveness.targets_up(ctx)  # each target with its pool role on a P/D fleet
            return f"{series} == 0", series, "Scrape targets up"
        if a.key == "MetricsAbsent":
            up = ctx.up()
            series = q.selector(ctx.metric("requests_running"), ctx.raw_matchers(process=True))
            # a target that is up but exports no engine series, or no target at all
            expr = f"absent({up}) or ({up} == 1 unless {q.on(ctx.target)} count {q.by(ctx.target)} ({series}))"
            return expr, series, "Running vs waiting requests"
        if a.key == "ReplicaTtftOutlier":
            return _outlier(self, "replica_ttft_mean", t, None, "Mean TTFT by replica", ctx.group)
        if a.key == "ReplicaQueueOutlier":
            return _outlier(self, "replica_waiting", t, self.waiting_floor, "Waiting requests by replica", peer_group(ctx))
        if a.key in _LIVENESS:
            return _LIVENESS[a.key](self, op, t)
        raise KeyError(f"no expression for alert {a.key}")

    def build(self, resolved: list[Resolved]) -> list[AlertRule]:
        rules: list[AlertRule] = []
        waiting = next((a for a in resolved if a.signal == "waiting_requests"), None)
        self.waiting_floor = waiting_floor(dict(waiting.levels) if waiting else {})
        labels_text = labels_template(self.ctx.group)
        process_text = labels_template(self.ctx.process_group)
        for a in resolved:
            for severity, threshold in a.levels:
                found = self.condition(a, threshold)
                if found is None:
                    continue
                expr, series, panel = found
                threshold_text = format_threshold(a.kind, threshold) + a.unit if a.kind != "none" else ""
                value = f"{{{{ $value | {_HUMANIZE[a.value_kind or a.kind]} }}}}"
                if a.value_format:
                    value = f'{{{{ $value | printf "{a.value_format}" }}}}'
                description = self.ctx.alert_refs(a.description).format(
                    value=value, threshold=threshold_text, instance="{{ $labels.instance }}"
                )
                caveat = self.ctx.catalog.caveat(a.signal)
                if caveat is not None:
                    description += f" Approximation on {self.ctx.release}: {caveat}."
                if a.signal == "rss_growth" or a.key == "MetricsFrozen":
                    description = f"{process_text}: {description}"
                elif a.key == "ServingCapacityLost":
                    description = f"{labels_template(liveness.capacity_labels(self.ctx))}: {description}"

                elif a.key not in ("TargetDown", "MetricsAbsent"):
                    description = f"{labels_text}: {description}"
                extra = [("severity", severity), ("signal", a.signal)]
                if self.team:
                    extra.append(("team", self.team))
                name = self.ctx.alert(a.key)
                rules.append(
                    AlertRule(
                        name=name,
                        key=a.key,
                        signal=a.signal,
                        severity=severity,
                        expr=expr,
                        for_=a.for_,
                        summary=self.ctx.alert_refs(a.summary).format(threshold=threshold_text),
                        description=description,
                        runbook_url=naming.runbook_url(self.base_url, name),
                        labels=tuple(extra),
                        threshold_text=threshold_text,
                        threshold=None if a.kind == "none" else threshold,
                        comparator="" if a.kind == "none" else a.comparator,
                        query=series,
                        panel=panel,
                        protects=a.page_reason() if severity == "critical" else "",
                    )
                )
        return rules

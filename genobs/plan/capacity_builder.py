"""The collector of the capacity group's recording rules and alerts (part of the `plan`
stage's capacity signals), shared by the capacity, goodput and GPU builders, and the
capacity alerts' texts (genobs/data/capacity.yaml)."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from genobs import data as data_files
from genobs import naming
from genobs import promql as q
from genobs.plan.alerts import format_threshold, labels_template
from genobs.plan.context import Context
from genobs.plan.model import AlertRule, RecordingRule
from genobs.plan.recorder import Recorder


@functools.cache
def capacity_data() -> dict:
    return data_files.load("capacity.yaml")


@dataclass
class Builder:
    """Collects the capacity group's recording rules and alerts."""

    ctx: Context
    rec: Recorder  # the recording group's names (read only)
    base_url: str
    team: str | None
    rules: list[RecordingRule] = field(default_factory=list)
    alerts: list[AlertRule] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)
    known: set[str] = field(default_factory=set)  # raw series from other exporters (DCGM, kube-state-metrics, gateway)
    confirm: dict[str, tuple[tuple[str, str], ...]] = field(default_factory=dict)  # alert key -> per-instance queries

    def add(self, key: str, name: str, expr: str, labels: tuple = ()) -> str:
        self.rules.append(RecordingRule(record=name, expr=expr, labels=labels))
        self.names[key] = name
        return name

    def ref(self, key: str, extra: tuple = ()) -> str:
        if key in self.names:
            return self.ctx.recorded(self.names[key], extra)
        return self.rec.ref(key, extra)

    def gate(self, key: str = "finished") -> str:
        return f"and {q.on(self.ctx.group)} {self.ref(key)} >= {self.ctx.min_request_rate:g}"

    def alert(
        self,
        key: str,
        expr: str,
        threshold: float | None,
        for_: str,
        query: str,
        panel: str,
        severity: str = "warning",
        texts: dict[str, str] | None = None,
        threshold_text: str | None = None,
        label_text: str | None = None,
    ) -> None:
        a = capacity_data()["alerts"][key]  # by its engine-neutral key; emitted under the engine's prefix
        name = self.ctx.alert(key)
        if threshold_text is None:
            threshold_text = format_threshold(a["kind"], threshold) + a.get("unit", "") if threshold is not None else ""
        value = "{{ $value | humanizePercentage }}" if a["kind"] == "ratio" else "{{ $value | humanize }}"
        if a.get("value_format"):
            value = f'{{{{ $value | printf "{a["value_format"]}" }}}}'
        fill = {"value": value, "threshold": threshold_text, **(texts or {})}
        prefix = labels_template(self.ctx.group) if label_text is None else label_text
        description = self.ctx.alert_refs(a["description"]).format(**fill)
        extra = [("severity", severity), ("signal", a["signal"])]
        if self.team:
            extra.append(("team", self.team))
        comparator = {"above": ">", "at_or_above": ">=", "below": "<"}.get(a["direction"], "")
        self.alerts.append(
            AlertRule(
                name=name,
                key=key,
                signal=a["signal"],
                severity=severity,
                expr=expr,
                for_=for_,
                summary=self.ctx.alert_refs(a["summary"]).format(**fill),
                description=f"{prefix}: {description}" if prefix else description,
                runbook_url=naming.runbook_url(self.base_url, name),
                labels=tuple(extra),
                threshold_text=threshold_text,
                threshold=threshold,
                comparator=comparator if threshold is not None else "",
                query=query,
                panel=panel,
            )
        )

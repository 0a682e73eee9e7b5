"""Whether the gateway answers at all (part of the `plan` stage, beside plan/gateway.py): its own
scrape targets. Users connect through the gateway; when it is down its own series vanish with it,
so its success and latency alerts cannot fire, and the pods behind it only see their traffic stop.
The gateway's targets are judged as the pods' are (plan/liveness.py): the share of those that
served within the last hour and are down now pages, with the pods' levels and `for`
(alerts.target_down); one target down for 15 minutes warns. A gateway whose targets all left
service discovery counts as lost too: unlike a pod, a gateway does not scale in to nothing."""

from __future__ import annotations

import functools
from dataclasses import dataclass

from genobs import data as data_files
from genobs import naming
from genobs import promql as q
from genobs.plan.alerts import Resolved, format_threshold, labels_template, signal_data
from genobs.plan.context import Context
from genobs.plan.liveness import SERVED_WINDOW
from genobs.plan.model import AlertRule, Panel, RunbookEntry, Severity, Target
from genobs.plan.recorder import Recorder

PANEL = "Gateway targets up"


@functools.cache
def _data() -> dict:
    return data_files.load("gateway.yaml")["liveness"]


@dataclass(frozen=True)
class GatewayLiveness:
    """The gateway's own liveness alerts, their runbook entries and panel."""

    alerts: tuple[AlertRule, ...]
    runbook: tuple[RunbookEntry, ...]
    panel: Panel


def record(r: Recorder) -> None:
    """Per gateway job (its target labels): targets up, and the share of those that served within
    SERVED_WINDOW that are down now (1 when none is up, or when all of them left discovery)."""
    ctx = r.ctx
    by, up = ctx.where.targets, ctx.up()
    served = f"{up} and (max_over_time({up}[{SERVED_WINDOW}]) == 1)"
    none_up = f"{q.sum_by(by, up)} == 0"
    gone = f"group {q.by(by)} (max_over_time({up}[{SERVED_WINDOW}]) == 1) unless {q.on(by)} {up}"
    r.add("process_gateway_targets_up", "gateway_scrape_targets_up", "sum", q.sum_by(by, up))
    lost = f"1 - avg {q.by(by)} ({served}) or ({none_up}) + 1 or ({gone})"
    r.add("process_gateway_targets_lost", "gateway_serving_targets_lost", "ratio", lost)


def _words(gctx: Context, **extra: str) -> dict[str, str]:
    return {"gateway": gctx.catalog.display_name, **extra}


def build(gctx: Context, r: Recorder, resolved: list[Resolved], base_url: str, team: str | None) -> GatewayLiveness:
    levels = {a.key: a for a in resolved}
    alerts: list[AlertRule] = []
    runbook: list[RunbookEntry] = []
    for name, d in _data().items():
        pod = levels.get(d["levels_of"])
        if pod is None:
            continue  # the spec turned the pods' target alerts off: the gateway's go too
        if d["levels_of"] == "TargetDown":
            series, where = gctx.up(), gctx.process_group
        else:
            series, where = r.ref("process_gateway_targets_lost"), gctx.where.targets
        made = []
        for severity, threshold in pod.levels:
            text = format_threshold(pod.kind, threshold) + pod.unit
            value = "{{ $value | humanizePercentage }}" if pod.kind == "ratio" else "{{ $value }}"
            words = _words(gctx, value=value, threshold=text, instance="{{ $labels.instance }}")
            labels = [("severity", severity), ("signal", d["signal"]), ("layer", "gateway"), *((("team", team),) if team else ())]
            comparator = "==" if d["levels_of"] == "TargetDown" else pod.comparator
            made.append(
                AlertRule(
                    name=name,
                    signal=d["signal"],
                    severity=severity,
                    expr=f"{series} {comparator} {threshold:g}",
                    for_=pod.for_,
                    summary=d["summary"].format(**words),
                    description=f"{labels_template(where)}: {' '.join(d['description'].split()).format(**words)}",
                    runbook_url=naming.runbook_url(base_url, name),
                    labels=tuple(labels),
                    threshold_text=text,
                    threshold=threshold,
                    comparator=comparator,
                    query=series,
                    panel=PANEL,
                    protects=signal_data()["symptoms"][d["protects"]] if severity == "critical" and "protects" in d else "",
                )
            )
        alerts += made
        runbook.append(_entry(gctx, name, d, made))
    return GatewayLiveness(tuple(alerts), tuple(runbook), _panel(gctx, r))


def _entry(gctx: Context, name: str, d: dict, made: list[AlertRule]) -> RunbookEntry:
    words = _words(gctx)
    up = gctx.up()
    first = made[0]
    return RunbookEntry(
        alert=name,
        anchor=naming.anchor(name),
        signal=d["signal"],
        title=d["title"],
        meaning=" ".join(d["meaning"].split()).format(**words),
        first_action=" ".join(d["first_action"].split()).format(**words),
        next_checks=tuple(d["next_checks"]),
        severities=tuple(Severity(a.severity, f"{a.comparator} {a.threshold_text}", a.for_) for a in made),
        summary=first.summary,
        query=first.query,
        panel=PANEL,
        expr=first.expr,
        confirm=(
            ("the gateway's targets, up now per instance", up),
            (f"the gateway's targets that served within the last {SERVED_WINDOW}", f"max_over_time({up}[{SERVED_WINDOW}])"),
        ),
        protects=next((a.protects for a in made if a.protects), ""),
    )


def _panel(gctx: Context, r: Recorder) -> Panel:
    m = gctx.panel_matchers(process=True)
    return Panel(
        PANEL,
        f"Scrape targets of the gateway ({gctx.release}) that are up, and the share of those that served "
        "within the last hour that are down now (1: none left).",
        "short",
        (
            Target(q.selector(r.names["process_gateway_targets_up"], m), "targets up"),
            Target(q.selector(r.names["process_gateway_targets_lost"], m), "share lost"),
        ),
        min=0,
    )

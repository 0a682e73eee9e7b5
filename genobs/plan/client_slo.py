"""Client planning, the SLOs read at the application (part of the `plan` stage): their burns
are built as every SLO's (plan/slo.py, with the client's context and recorded series, spec
`read_at: client`); here, how they sit in Alertmanager beside the client's other pages. A burn
read at the application stands for users' view as the client's threshold alerts do: a fast burn
silences its own slow burn, and for the same model (and cluster) every alert of the gateway and
of the pods on its signal (their threshold alerts and their SLOs' burns) and the client's own
threshold alerts of the signal; a slow burn silences their warnings."""

from __future__ import annotations

from dataclasses import replace

from genobs import naming
from genobs import promql as q
from genobs.plan.alerts import signal_data
from genobs.plan.client import burn_names
from genobs.plan.context import Context
from genobs.plan.gateway import _matcher, gateway_data
from genobs.plan.model import AlertRule


def _primary(signal: str) -> str | None:
    """The engine-neutral key of the pods' primary alert on `signal` (signals.yaml)."""
    return next((k for k, a in signal_data()["alerts"].items() if a["signal"] == signal and a.get("primary")), None)


def _theirs(
    which: str, layer: Context, signal: str, gw_alerts: frozenset[str], burns: tuple[tuple[str, tuple[AlertRule, ...]], ...]
) -> list[str]:
    """The alerts of the gateway or the pods on `signal`: the gateway's that took the pods' page,
    the pods' own, and the burns of the SLOs read there (not their SLI-unavailable warnings)."""
    names = set()
    if which == "gateway":
        names |= {n for n, a in gateway_data()["alerts"].items() if a["signal"] == signal and n in gw_alerts}
    else:
        key = _primary(signal)
        if key is not None and key in signal_data()["alerts"]:
            names.add(layer.alert(key))
    names |= burn_names(burns, which, signal)
    return sorted(names)


def with_inhibit(cl, ctx: Context, gctx: Context | None, gw_alerts: frozenset[str], burns, own: list[AlertRule]):
    """The client plan with the inhibitions of the burns of the SLOs read at the application
    (`own`); `burns`: ("gateway" | "pods", burn alerts) of the SLOs read there."""
    own = [a for a in own if a.name != naming.slo_unavailable(dict(a.labels).get("slo", ""))]
    if not own:
        return cl
    cctx = cl.ctx
    fixed = [_matcher(k, "=", v) for k, v in cctx.selector]
    rules: list[dict] = []
    fast = sorted({a.name for a in own if a.severity == "critical"})
    slow = sorted({a.name for a in own if a.severity != "critical"})
    if fast and slow:
        rules.append(
            {
                "source_matchers": [_matcher("alertname", "=~", q.any_of(fast)), *fixed],
                "target_matchers": [_matcher("alertname", "=~", q.any_of(slow)), *fixed],
                "equal": ["slo", *cctx.group],
            }
        )
    mine = {a.signal: set() for a in own}
    for a in cl.alerts:
        if a.signal in mine:
            mine[a.signal].add(a.name)
    for signal in sorted(mine):
        sources = {
            "": sorted({a.name for a in own if a.signal == signal and a.severity == "critical"}),
            "warning|info": sorted({a.name for a in own if a.signal == signal and a.severity != "critical"}),
        }
        targets = [(cctx, sorted(mine[signal]))]
        for which, layer in (("gateway", gctx), ("pods", ctx)):
            if layer is not None:
                targets.append((layer, _theirs(which, layer, signal, gw_alerts, burns)))
        for severity, source in sources.items():
            if not source:
                continue
            sev = [_matcher("severity", "=~", severity)] if severity else []
            for layer, names in targets:
                if not names:
                    continue
                shared = [
                    label
                    for label in cctx.group
                    if label in layer.group and dict(cctx.selector).get(label) == dict(layer.selector).get(label)
                ]
                rules.append(
                    {
                        "source_matchers": [_matcher("alertname", "=~", q.any_of(source)), *fixed],
                        "target_matchers": [
                            _matcher("alertname", "=~", q.any_of(names)),
                            *sev,
                            *(_matcher(k, "=", v) for k, v in layer.selector),
                        ],
                        "equal": ["signal", *shared],
                    }
                )
    return replace(cl, inhibit=cl.inhibit + tuple(rules))

"""The autoscaler-at-max alert (kubernetes.autoscaling.kube_state_metrics): the HPA
genobs writes (or the one KEDA creates for the ScaledObject, keda-hpa-<name>)
runs at its maximum replicas while the engine's waiting requests keep growing.
kube-state-metrics exports both replica counts per HPA."""

from __future__ import annotations

from genobs import promql as q
from genobs.units import prom_duration_seconds

KSM_CURRENT = "kube_horizontalpodautoscaler_status_current_replicas"
KSM_MAX = "kube_horizontalpodautoscaler_spec_max_replicas"
HPA_LABELS = ("namespace", "horizontalpodautoscaler")


def hpa_name(spec_name: str) -> str:
    return f"genobs-{spec_name}"  # genobs.render.autoscaling names the HPA and the ScaledObject so


def autoscaler(b, auto, spec_name: str) -> None:
    """Add AutoscalerAtMaxReplicas to the capacity builder `b`."""
    name = hpa_name(spec_name)
    matchers = (("namespace", "=", auto.target.namespace), ("horizontalpodautoscaler", "=~", f"{name}|keda-hpa-{name}"))
    current = q.sum_by(HPA_LABELS, q.selector(KSM_CURRENT, matchers))
    maximum = q.sum_by(HPA_LABELS, q.selector(KSM_MAX, matchers))
    # the queue of the spec's models grows (summed over every replica and engine)
    growing = f"sum(deriv({b.ctx.raw('requests_waiting')}[{b.ctx.window}])) > 0"
    b.known.update({KSM_CURRENT, KSM_MAX})
    b.alert(
        "AutoscalerAtMaxReplicas",
        f"{current} >= {maximum} and on () {growing}",
        None,
        auto.for_,
        current,
        "Running vs waiting requests",
        texts={"hpa": "{{ $labels.namespace }}/{{ $labels.horizontalpodautoscaler }}"},
        label_text="",
    )


def validate(spec, auto, capacity_on: bool, report) -> None:
    """kubernetes.autoscaling against the rest of the spec; report(path, message)."""
    path = ("kubernetes", "autoscaling")
    if auto.min_replicas > auto.max_replicas:
        report((*path, "min_replicas"), f"min_replicas ({auto.min_replicas}) exceeds max_replicas ({auto.max_replicas})")
    if auto.metric == "external" and len(spec.service.models) != 1:
        report((*path, "metric"), "an external (per-model) metric needs exactly one model in service.models")
    if prom_duration_seconds(auto.scale_down_window) > 3600:
        report((*path, "scale_down_window"), "at most 1h: the HPA's stabilizationWindowSeconds is limited to 3600")
    if auto.kube_state_metrics and not capacity_on:
        report((*path, "kube_state_metrics"), "the at-max alert is a capacity signal: add a capacity block")
    ns = spec.service.selector.get("namespace")
    if ns is not None and ns != auto.target.namespace:
        report(
            (*path, "target", "namespace"),
            f"{auto.target.namespace!r} differs from service.selector.namespace {ns!r}: the HPA must run where "
            "the engine pods are",
        )

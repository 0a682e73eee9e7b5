"""The autoscaler-at-max alert (kubernetes.autoscaling.kube_state_metrics): the HPA
genobs writes (or the one KEDA creates for the ScaledObject, keda-hpa-<name>)
runs at its maximum replicas while vLLM's waiting requests keep growing.
kube-state-metrics exports both replica counts per HPA."""

from __future__ import annotations

from genobs import promql as q

KSM_CURRENT = "kube_horizontalpodautoscaler_status_current_replicas"
KSM_MAX = "kube_horizontalpodautoscaler_spec_max_replicas"
HPA_LABELS = ("namespace", "horizontalpodautoscaler")


def hpa_name(spec_name: str) -> str:
    return f"genobs-{spec_name}"  # genobs.render.autoscaling names the HPA and the ScaledObject so


def autoscaler(b, auto, spec_name: str) -> None:
    """Add VllmAutoscalerAtMaxReplicas to the capacity builder `b`."""
    name = hpa_name(spec_name)
    matchers = (("namespace", "=", auto.target.namespace), ("horizontalpodautoscaler", "=~", f"{name}|keda-hpa-{name}"))
    current = q.sum_by(HPA_LABELS, q.selector(KSM_CURRENT, matchers))
    maximum = q.sum_by(HPA_LABELS, q.selector(KSM_MAX, matchers))
    # the queue of the spec's models grows (summed over every replica and engine)
    growing = f"sum(deriv({b.ctx.raw('requests_waiting')}[{b.ctx.window}])) > 0"
    b.known.update({KSM_CURRENT, KSM_MAX})
    b.alert(
        "VllmAutoscalerAtMaxReplicas",
        f"{current} >= {maximum} and on () {growing}",
        None,
        auto.for_,
        current,
        "Running vs waiting requests",
        texts={"hpa": "{{ $labels.namespace }}/{{ $labels.horizontalpodautoscaler }}"},
        label_text="",
    )

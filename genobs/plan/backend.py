"""Checks of the spec's `output:` block and `service.cluster_label` (part of the `plan`
stage's checks): fields that only one rule backend reads, and a cluster label that would
collide with a label the rules already group or match on. Rendering for each backend is at
the edge (genobs/render/backends.py); the plan does not change with the backend."""

from __future__ import annotations

from collections.abc import Callable

# labels genobs itself sets on SLO series and alerts, or that name one replica
OWN_LABELS = ("instance", "engine", "slo", "spec", "severity", "signal", "alertname", "team")

BACKEND_FIELDS = {
    "tenants": ("mimir", "source_tenants of a federated rule group are a Mimir/Cortex ruler field"),
    "namespace": ("mimir", "a ruler namespace is a Mimir/Cortex ruler field"),
    "partial_response_strategy": ("thanos", "partial_response_strategy is a Thanos ruler field"),
}


def _summed(engine: str) -> tuple[str, ...]:
    from genobs.catalog import load_catalog

    try:
        return load_catalog(engine).rank_labels_summed
    except Exception:  # an unknown engine is reported by the version checks
        return ()


def validate(doc, report: Callable[[tuple, str], None]) -> None:
    spec = doc.spec
    out = spec.output
    for name, (backend, why) in BACKEND_FIELDS.items():
        if name in out.model_fields_set and out.backend != backend and getattr(out, name):
            report(
                ("output", name),
                f"backend {out.backend} has no {name}: {why}; set output.backend: {backend} or remove {name}",
            )
    cluster = spec.service.cluster_label
    if cluster is None:
        for i, slo in enumerate(spec.slos):
            if "scope" in slo.model_fields_set and slo.scope == "global":
                report(
                    ("slos", i, "scope"),
                    "scope: global sums the clusters of service.cluster_label together; without a cluster label "
                    "every SLO already covers everything the selector reads: remove scope or set cluster_label",
                )
        return
    roles = spec.service.roles
    if cluster in spec.service.group_by:
        clash = "is in service.group_by"
    elif cluster in spec.service.selector:
        clash = "is a service.selector label"
    elif roles is not None and cluster == roles.label:
        clash = "is service.roles.label"
    elif cluster in OWN_LABELS:
        clash = "is a label genobs sets or pairs replicas on"
    elif cluster in _summed(spec.service.engine):
        clash = f"is a rank label of {spec.service.engine}'s series, which every query sums away"
    else:
        return
    report(
        ("service", "cluster_label"),
        f"{cluster!r} {clash}; the cluster label must be a label of its own (the external label each "
        "cluster's Prometheus adds, e.g. cluster)",
    )

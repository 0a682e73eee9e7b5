"""Where each SLO of a spec is read (part of the `plan` stage): at the application (`read_at:
client`, its OpenTelemetry GenAI metrics), at the gateway or at the pods. Without `read_at` an SLO
is read at the gateway where the gateway's release observes its SLI, else at the pods, as before
the client layer existed: the application's buckets are not the servers' (a 1s threshold is no
bound of the recommended 0.64s, 1.28s ones), so moving an SLO to it is the spec's choice, which
the build says."""

from __future__ import annotations

from genobs.plan.context import Context

LAYERS = ("client", "gateway", "pods")
# SLIs a layer in front of the pods can serve, where its release has the histogram (success: its error count)
FRONT_SLIS = {"success": None, "ttft": "ttft", "e2e": "e2e"}


def unobservable(lctx: Context, sli: str) -> str | None:
    """Why a layer in front of the pods cannot read the SLI, or None."""
    if sli not in FRONT_SLIS:
        return f"only {', '.join(FRONT_SLIS)} SLOs are read in front of the pods"
    key = FRONT_SLIS[sli]
    if key is not None and not lctx.has(key):
        return lctx.catalog.missing_reason(key) or f"{lctx.release} has no {key} histogram"
    return None


def layers(doc, gctx: Context | None, cctx: Context | None, report) -> dict[str, frozenset[int]]:
    """Layer -> the indices of the spec's SLOs read there; report(path, message) for a read_at
    the spec cannot have (no such block, or a release that cannot observe the SLI)."""
    out: dict[str, set[int]] = {layer: set() for layer in LAYERS}
    blocks = {"client": (doc.spec.client, cctx), "gateway": (doc.spec.gateway, gctx)}
    for i, s in enumerate(doc.spec.slos):
        where = s.read_at
        if where in blocks:
            block, lctx = blocks[where]
            path = ("slos", i, "read_at")
            if block is None:
                report(path, f"{where}: the spec has no {where}: block to read the {s.sli} SLI at")
                continue
            if lctx is None:
                continue  # the block's own problem is reported
            why = unobservable(lctx, s.sli)
            if why is not None:
                report(path, f"{where}: the {s.sli} SLI cannot be read at the {where} ({lctx.release}): {why}")
                continue
        elif where is None:
            where = "gateway" if gctx is not None and unobservable(gctx, s.sli) is None else "pods"
        out[where].add(i)
    return {layer: frozenset(found) for layer, found in out.items()}


def lines(doc, where: dict[str, frozenset[int]], releases: dict[str, str]) -> list[str]:
    """With a client block, one line per SLO saying where it is read (the build's notes)."""
    if doc.spec.client is None:
        return []
    out = []
    for layer in LAYERS:
        for i in sorted(where[layer]):
            s = doc.spec.slos[i]
            how = "set by read_at" if s.read_at else "the default; read_at chooses client, gateway or pods"
            out.append(f"SLO {s.name} ({s.sli}) is read at the {layer} ({releases[layer]}): {how}")
    return out

"""Dashboard annotations that mark changes of the engine: restarts and new cache configs.

A checkpoint or config rollout shows on every panel as a mark, so a before/after comparison
(`genobs compare --baseline-time … --candidate-time …`) can pick its ranges from the
dashboard. Both read series the engine exports itself, so no deploy pipeline has to push
annotations: process_start_time_seconds changes when the API server restarts, and
the engine's cache-config info gauge gets a new label set (a new series) when an engine starts with
another KV-cache config (block size, gpu_memory_utilization, num_gpu_blocks, ...).
"""

from __future__ import annotations

import re

from genobs import promql as q
from genobs.plan.context import Context
from genobs.plan.model import Annotation

#: How far back a series must be absent to count as new. Four 30 s scrapes, so one missed
#: scrape does not mark a restart, while a pod that was down for minutes does.
NEW_AFTER = "2m"
#: cache_config_info labels worth reading on the mark (the full set changes between releases)
CONFIG_LABELS = ("gpu_memory_utilization", "block_size", "num_gpu_blocks", "enable_prefix_caching")


def _matchers(ctx: Context) -> tuple[q.Matcher, ...]:
    """The spec's selector, with the labels the dashboard has variables for following them."""
    fixed = [(k, "=", v) for k, v in ctx.selector if k not in ctx.variables]
    varied = [(label, "=~", f"${label}") for label in ctx.process_group if label in ctx.variables]
    return (*fixed, *varied)


def _appeared(series: str) -> str:
    """Series that exist now but did not NEW_AFTER ago: a new target, a restart after a gap, a new label set."""
    return f"{series} unless {series} offset {NEW_AFTER}"


def build_annotations(ctx: Context) -> tuple[Annotation, ...]:
    out: list[Annotation] = []
    where = " ".join(f"{{{{{label}}}}}" for label in ctx.process_group)
    if ctx.has("process_start_time"):
        start = q.selector(ctx.metric("process_start_time"), _matchers(ctx))
        out.append(
            Annotation(
                name="Engine restarts",
                expr=f"(changes({start}[{NEW_AFTER}]) > 0) or ({_appeared(start)})",
                title=f"API server (re)started: {where}",
                text="process_start_time_seconds changed or the target's series are new",
                tags=("instance",),
                colour="orange",
            )
        )
    if ctx.has("cache_config_info"):
        info = q.selector(ctx.metric("cache_config_info"), _matchers(ctx))
        out.append(
            Annotation(
                name="Engine config",
                expr=_appeared(info),
                title=f"engine started with this KV-cache config: {where}",
                text=", ".join(f"{label}={{{{{label}}}}}" for label in CONFIG_LABELS),
                tags=("instance", *CONFIG_LABELS[:1]),
                colour="purple",
            )
        )
    return tuple(out)


def annotation_selectors(annotations: tuple[Annotation, ...]) -> list[q.Selector]:
    """The raw series the annotations read (their dashboard variables filled in), for the scrape
    diet and the edge's remote_write: both must keep them, or the marks vanish."""
    return [sel for a in annotations for sel in q.vector_selectors(re.sub(r"\$(\w+)", "x", a.expr))]

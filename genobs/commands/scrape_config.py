"""Prometheus scrape configuration for engine targets (vLLM, SGLang): the `metric_relabel_configs`
that undo the `:` -> `_` escaping Prometheus 2.x gets from prometheus_client
>= 0.23 (OpenMetrics negotiation), and the `genobs scrape-config` command."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import click
import yaml

from genobs.catalog import ENGINES, load_catalog


@functools.cache
def engine_prefix(engine: str = "vllm") -> str:
    """The namespace before ':' in the engine's metric names (from the catalog), e.g. the engine name;
    for an engine without ':' in its names (TensorRT-LLM), the word before the first '_'."""
    catalog = load_catalog(engine)
    names = [r.name for m in catalog.metrics.values() if not m.process for r in m.names]
    prefixes = {n.split(":", 1)[0] for n in names if ":" in n} or {n.split("_", 1)[0] for n in names}
    if len(prefixes) != 1:
        raise ValueError(f"the {engine} catalog has no single metric prefix: {sorted(prefixes)}")
    return prefixes.pop()


@functools.cache
def has_colon_names(engine: str = "vllm") -> bool:
    """Whether the engine's names hold ':' (escaped to '_' by an OpenMetrics scrape)."""
    catalog = load_catalog(engine)
    return any(":" in r.name for m in catalog.metrics.values() for r in m.names)


def colon_prefix(engine: str = "vllm") -> str:
    """The prefix of the names as the engine exposes them (the same as underscore_prefix without ':')."""
    return engine_prefix(engine) + (":" if has_colon_names(engine) else "_")


def underscore_prefix(engine: str = "vllm") -> str:
    return engine_prefix(engine) + "_"


def relabel_configs(engine: str = "vllm") -> list[dict]:
    """metric_relabel_configs that store `<prefix>_...` samples as `<prefix>:...` again.

    Only names starting with the engine prefix are touched; the regex is anchored by Prometheus.
    """
    if not has_colon_names(engine):
        return []  # nothing to restore: the scrape keeps the names as they are
    p = engine_prefix(engine)
    return [
        {
            "source_labels": ["__name__"],
            "regex": f"{p}_(.*)",
            "target_label": "__name__",
            "replacement": f"{p}:$1",
        }
    ]


def scrape_job(
    job: str,
    targets: list[str],
    labels: dict[str, str] | None = None,
    *,
    engine: str = "vllm",
    relabel: bool = True,
    interval: str | None = None,
) -> dict:
    """One `scrape_configs` entry for vLLM targets (static targets, optional target labels)."""
    static: dict = {"targets": list(targets)}
    if labels:
        static["labels"] = dict(labels)
    out: dict = {"job_name": job}
    if interval:
        out["scrape_interval"] = interval
    path = load_catalog(engine).metrics_path
    if path != "/metrics":  # trtllm-serve: /prometheus/metrics
        out["metrics_path"] = path
    out["static_configs"] = [static]
    if relabel and relabel_configs(engine):
        out["metric_relabel_configs"] = relabel_configs(engine)
    return out


_DURATION = re.compile(r"(?:[1-9]\d*(?:ms|s|m|h|d|w|y))+")  # positive, as Prometheus writes it
_TARGET = re.compile(r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):[0-9]{1,5}")


def dump(data: object) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=1000)


def _spec_selector(spec: Path) -> tuple[str, dict[str, str], str]:
    """(job, other selector labels, engine) of a spec. Raises SpecError."""
    from genobs.loader import load_spec

    s = load_spec(spec).spec
    selector = dict(s.service.selector)
    job = selector.pop("job", None) or "vllm"
    return job, selector, s.service.engine


@click.command("scrape-config")
@click.argument("spec", required=False, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--job", default=None, help="job_name (default: the spec selector's job, else vllm).")
@click.option(
    "--target",
    "targets",
    multiple=True,
    metavar="HOST:PORT",
    help="Target to scrape (repeatable; default 127.0.0.1:9400, what `genobs simulate` serves).",
)
@click.option("--interval", default=None, help="scrape_interval of this job, e.g. 15s (default: the global one).")
@click.option("--relabel-only", is_flag=True, help="Print only the metric_relabel_configs list.")
@click.option(
    "--engine",
    "engine_option",
    type=click.Choice(ENGINES),
    default=None,
    help="Engine whose metric prefix is restored (default: the spec's service.engine, else vllm).",
)
def scrape_config(
    spec: Path | None,
    job: str | None,
    targets: tuple[str, ...],
    interval: str | None,
    relabel_only: bool,
    engine_option: str | None,
) -> None:
    """Print a Prometheus scrape job for an engine (vLLM, SGLang) that keeps the metric names' colons.

    prometheus_client >= 0.23 answers Prometheus 2.x's OpenMetrics Accept header
    with `:` escaped to `_`; the job's metric_relabel_configs turn the names back, so
    specs keep `service.metric_names: colon`. With SPEC, the job name and the other
    selector labels (as target labels) come from the spec's service.selector.
    """
    if relabel_only and spec is None:
        click.echo(dump({"metric_relabel_configs": relabel_configs(engine_option or "vllm")}), nl=False)
        return
    if interval is not None and not _DURATION.fullmatch(interval):
        raise click.BadParameter(f"{interval!r} is not a Prometheus duration; write e.g. 15s or 1m", param_hint="--interval")
    for t in targets:
        if not _TARGET.fullmatch(t):
            raise click.BadParameter(
                f"{t!r} is not HOST:PORT (no scheme, path or spaces; the job sets those), e.g. 10.0.0.5:8000",
                param_hint="--target",
            )
    labels: dict[str, str] = {}
    engine = "vllm"
    if spec is not None:
        from genobs.errors import SpecError

        try:
            spec_job, labels, engine = _spec_selector(spec)
        except SpecError as exc:
            for p in exc.problems:
                click.echo(str(p), err=True)
            raise SystemExit(2) from None
        job = job or spec_job
    engine = engine_option or engine
    if relabel_only:
        click.echo(dump({"metric_relabel_configs": relabel_configs(engine)}), nl=False)
        return
    entry = scrape_job(job or "vllm", list(targets) or ["127.0.0.1:9400"], labels, engine=engine, interval=interval)
    click.echo(dump({"scrape_configs": [entry]}), nl=False)

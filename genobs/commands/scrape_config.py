"""Prometheus scrape configuration for engine targets (vLLM, SGLang) and the gateway in front of
them (llm-d EPP, Dynamo frontend): the `metric_relabel_configs` that undo the `:` -> `_` escaping
Prometheus 2.x gets from prometheus_client >= 0.23 (OpenMetrics negotiation), the scrape diet
(`--drop-unread`: keep only the families a generated rule, panel or runbook query reads), the
edge tier's `remote_write`, and the `genobs scrape-config` command."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import click
import yaml

from genobs.catalog import ENGINES, GATEWAYS, load_catalog
from genobs.errors import printable

# where a Prometheus running in Kubernetes finds its own service-account token
IN_CLUSTER_TOKEN = "/var/run/secrets/kubernetes.io/serviceaccount/token"


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


HISTOGRAM_SUFFIXES = ("_bucket", "_sum", "_count")


def read_families(plan) -> list[str]:
    """Every series name a generated rule, runbook query or dashboard annotation reads that is not
    recorded by the rules themselves (panels read recorded series only), each histogram series widened
    to its family (`_bucket`, `_sum` and `_count`), sorted."""
    from genobs import promql as q
    from genobs.plan.annotations import annotation_selectors

    recorded = {r.record for r in plan.recording_rules}
    exprs = [r.expr for g in plan.groups for r in g.rules]
    exprs += [query for entry in plan.runbook for _, query in entry.confirm]
    names: set[str] = set()
    for expr in exprs:
        names |= q.metric_names(expr) - recorded
    # the dashboard's annotations (engine restarts, engine configs) read raw series too
    names |= {sel.name for sel in annotation_selectors(plan.dashboard.annotations) if sel.name}
    out: set[str] = set()
    for name in names:
        base = next((name[: -len(s)] for s in HISTOGRAM_SUFFIXES if name.endswith(s)), None)
        out |= {base + s for s in HISTOGRAM_SUFFIXES} if base else {name}
    return sorted(out)


def _client_names() -> set[str]:
    """Every OpenTelemetry GenAI client name genobs reads (the translation it writes PromQL for)."""
    catalog = load_catalog("otel-genai")
    return catalog.names_for(catalog.max_version)


def client_families(plan) -> list[str]:
    """The families of read_families an application's job (a spec's `client:` block) exports."""
    names = _client_names()
    return [n for n in read_families(plan) if n in names]


def layer_families(plan) -> tuple[list[str], list[str]]:
    """read_families split by the job that scrapes them: (the pods', the gateway's); an
    application's (client_families) in neither."""
    client = _client_names()
    families = [n for n in read_families(plan) if n not in client]
    if plan.gateway is None:
        return families, []
    from genobs.catalog import parse_version

    gateway = load_catalog(plan.gateway.engine).names_for(parse_version(plan.gateway.engine_version))
    return [n for n in families if n not in gateway], [n for n in families if n in gateway]


def keep_configs(families: list[str], engine: str = "vllm") -> list[dict]:
    """A `keep` over `__name__` that lets through exactly `families`; the engine's names in
    either spelling (`vllm:x` and the `vllm_x` an OpenMetrics scrape stores), so it holds
    before or after the rename rule, and for `service.metric_names: underscore`."""
    p = engine_prefix(engine) if has_colon_names(engine) else None  # no ':' names: one spelling
    alternatives = []
    for name in families:
        for prefix in (f"{p}:", f"{p}_") if p else ():
            if name.startswith(prefix):
                name = f"{p}[:_]" + re.escape(name[len(prefix) :])
                break
        else:
            name = re.escape(name)
        alternatives.append(name)
    return [{"source_labels": ["__name__"], "regex": "|".join(dict.fromkeys(alternatives)), "action": "keep"}]


def scrape_job(
    job: str,
    targets: list[str],
    labels: dict[str, str] | None = None,
    *,
    engine: str = "vllm",
    relabel: bool = True,
    interval: str | None = None,
    keep: list[dict] | None = None,
    token_file: str | None = None,
) -> dict:
    """One `scrape_configs` entry for an engine's or a gateway's targets (static targets, optional
    target labels); `keep`: the scrape diet's rules, after the rename; `token_file`: the bearer
    token a /metrics with authentication (the llm-d EPP's) is scraped with."""
    static: dict = {"targets": list(targets)}
    if labels:
        static["labels"] = dict(labels)
    out: dict = {"job_name": job}
    if interval:
        out["scrape_interval"] = interval
    path = load_catalog(engine).metrics_path
    if path != "/metrics":  # trtllm-serve: /prometheus/metrics
        out["metrics_path"] = path
    if token_file:
        out["authorization"] = {"type": "Bearer", "credentials_file": token_file}
    out["static_configs"] = [static]
    rename = relabel_configs(engine) if relabel else []
    if rename or keep:
        out["metric_relabel_configs"] = rename + (keep or [])
    return out


_DURATION = re.compile(r"(?:[1-9]\d*(?:ms|s|m|h|d|w|y))+")  # positive, as Prometheus writes it
_TARGET = re.compile(r"(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+):[0-9]{1,5}")


def dump(data: object) -> str:
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=1000)


def _spec_selector(spec: Path) -> tuple[str, dict[str, str], str, tuple[str, dict[str, str], str] | None]:
    """(job, other selector labels, engine) of a spec's pods, and the same of its gateway (or
    None). Raises SpecError."""
    from genobs.loader import load_spec

    s = load_spec(spec).spec
    selector = dict(s.service.selector)
    job = selector.pop("job", None) or "vllm"
    gateway = None
    if s.gateway is not None:
        gw_selector = dict(s.gateway.selector)
        gateway = (gw_selector.pop("job", None) or s.gateway.engine, gw_selector, s.gateway.engine)
    return job, selector, s.service.engine, gateway


def _client_selector(spec: Path) -> tuple[str, dict[str, str]] | None:
    """(job, other selector labels) of a spec's application (`client:`), or None. Raises SpecError."""
    from genobs.loader import load_spec

    client = load_spec(spec).spec.client
    if client is None:
        return None
    selector = dict(client.selector)
    return selector.pop("job", None) or "otel-genai", selector


def _check_target(option: str, t: str) -> None:
    if not _TARGET.fullmatch(t):
        raise click.BadParameter(
            f"{t!r} is not HOST:PORT (no scheme, path or spaces; the job sets those), e.g. 10.0.0.5:8000",
            param_hint=option,
        )


CLIENT_TARGET = "127.0.0.1:9464"


def _default_target(engine: str) -> str:
    """What `genobs simulate` serves for an engine; a gateway's own metrics port."""
    port = load_catalog(engine).metrics_port
    return f"127.0.0.1:{port}" if port else "127.0.0.1:9400"


def _token_file(engine: str, given: Path | None, no_auth: bool) -> str | None:
    if load_catalog(engine).metrics_auth != "bearer" or no_auth:
        return None
    return str(given) if given is not None else IN_CLUSTER_TOKEN


def _plan(spec: Path):
    """The spec's plan; spec problems are printed and exit 2."""
    from genobs.compiler import load_plan
    from genobs.errors import SpecError

    try:
        return load_plan(spec)[1]
    except SpecError as exc:
        for p in exc.problems:
            click.echo(str(p), err=True)
        raise SystemExit(2) from None


@click.command("scrape-config")
@click.argument("spec", required=False, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--job", default=None, help="job_name of the engine's job (default: the spec selector's job, else the engine's name).")
@click.option(
    "--target",
    "targets",
    multiple=True,
    metavar="HOST:PORT",
    help="Target to scrape (repeatable; default 127.0.0.1:9400, what `genobs simulate` serves; for "
    "--engine llm-d-epp 127.0.0.1:9090, dynamo 127.0.0.1:8000).",
)
@click.option(
    "--gateway-target",
    "gateway_targets",
    multiple=True,
    metavar="HOST:PORT",
    help="Gateway target of a spec with a `gateway:` block (repeatable; default 127.0.0.1:9090 for the llm-d "
    "EPP's metrics port, 127.0.0.1:8000 for the Dynamo frontend).",
)
@click.option(
    "--client-target",
    "client_targets",
    multiple=True,
    metavar="HOST:PORT",
    help="Target of the application of a spec with a `client:` block, the /metrics of its OpenTelemetry SDK's "
    f"Prometheus exporter (repeatable; default {CLIENT_TARGET}, the exporter's customary port).",
)
@click.option(
    "--gateway-token-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Bearer token file the llm-d EPP is scraped with (its /metrics authenticates by default, "
    f"--metrics-endpoint-auth); default {IN_CLUSTER_TOKEN}, the Prometheus pod's own service-account token.",
)
@click.option(
    "--gateway-no-auth",
    is_flag=True,
    help="Scrape the llm-d EPP without a token (an EPP started with --metrics-endpoint-auth=false).",
)
@click.option("--interval", default=None, help="scrape_interval of these jobs, e.g. 15s (default: the global one).")
@click.option("--relabel-only", is_flag=True, help="Print only the engine job's metric_relabel_configs list.")
@click.option(
    "--drop-unread",
    is_flag=True,
    help="Keep only the metric families the spec's rules and runbook queries read (needs SPEC): a `keep` by "
    "__name__ after the rename, so no series a rule reads is dropped; the gateway job keeps the gateway's.",
)
@click.option(
    "--remote-write",
    "remote_write",
    default=None,
    metavar="URL",
    help="Print instead the edge tier's remote_write entry to URL (needs SPEC): it ships only the recorded "
    "genobs:* series and the raw series the global rules read.",
)
@click.option(
    "--engine",
    "engine_option",
    type=click.Choice(ENGINES + GATEWAYS),
    default=None,
    help="Engine (or gateway: llm-d-epp, dynamo) whose names and metrics path the job is for (default: the spec's "
    "service.engine, else vllm).",
)
def scrape_config(
    spec: Path | None,
    job: str | None,
    targets: tuple[str, ...],
    gateway_targets: tuple[str, ...],
    client_targets: tuple[str, ...],
    gateway_token_file: Path | None,
    gateway_no_auth: bool,
    interval: str | None,
    relabel_only: bool,
    drop_unread: bool,
    remote_write: str | None,
    engine_option: str | None,
) -> None:
    """Print a Prometheus scrape job for an engine (vLLM, SGLang, TensorRT-LLM) that keeps the metric names' colons,
    and one for the gateway in front of it (llm-d EPP, Dynamo frontend) when SPEC has a `gateway:` block,
    and one for the application (its OpenTelemetry GenAI client metrics) when SPEC has a `client:` block.

    prometheus_client >= 0.23 answers Prometheus 2.x's OpenMetrics Accept header
    with `:` escaped to `_`; the job's metric_relabel_configs turn the names back, so
    specs keep `service.metric_names: colon`. With SPEC, the job name and the other
    selector labels (as target labels) come from the spec's service.selector, and those
    of the gateway job from gateway.selector.
    """
    if (drop_unread or remote_write) and spec is None:
        raise click.UsageError(f"{'--drop-unread' if drop_unread else '--remote-write'} needs SPEC: what it keeps is what the spec's rules read")
    # printable ASCII only: the URL is written into YAML a Prometheus loads, a control character could hide there
    if remote_write is not None and not re.fullmatch(r"https?://[!-~]+", remote_write):
        raise click.BadParameter(f"{printable(repr(remote_write))} is not an http(s) URL", param_hint="--remote-write")
    if gateway_token_file is not None and gateway_no_auth:
        raise click.UsageError("give --gateway-token-file or --gateway-no-auth, not both")
    plan = _plan(spec) if spec is not None and (drop_unread or remote_write) else None
    if remote_write is not None:
        from genobs.plan.tiers import write_relabel_configs

        entry = {"url": remote_write, "write_relabel_configs": write_relabel_configs(plan)}
        click.echo(dump({"remote_write": [entry]}), nl=False)
        return
    pod_families, gateway_families = layer_families(plan) if plan is not None else (None, None)
    keep = keep_configs(pod_families, plan.engine) if plan is not None else None
    if relabel_only and spec is None:
        click.echo(dump({"metric_relabel_configs": relabel_configs(engine_option or "vllm")}), nl=False)
        return
    if interval is not None and not _DURATION.fullmatch(interval):
        raise click.BadParameter(f"{interval!r} is not a Prometheus duration; write e.g. 15s or 1m", param_hint="--interval")
    for t in targets:
        _check_target("--target", t)
    for t in gateway_targets:
        _check_target("--gateway-target", t)
    for t in client_targets:
        _check_target("--client-target", t)
    labels: dict[str, str] = {}
    engine = "vllm"
    gateway = None
    client = None
    if spec is not None:
        from genobs.errors import SpecError

        try:
            spec_job, labels, engine, gateway = _spec_selector(spec)
            client = _client_selector(spec)
        except SpecError as exc:
            for p in exc.problems:
                click.echo(str(p), err=True)
            raise SystemExit(2) from None
        job = job or spec_job
    elif gateway_targets:
        raise click.UsageError("--gateway-target needs SPEC with a gateway: block (without SPEC, use --engine and --target)")
    if client_targets and (spec is None or client is None):
        raise click.UsageError("--client-target needs SPEC with a client: block")
    engine = engine_option or engine
    if relabel_only:
        click.echo(dump({"metric_relabel_configs": relabel_configs(engine) + (keep or [])}), nl=False)
        return
    entries = [
        scrape_job(
            job or engine,
            list(targets) or [_default_target(engine)],
            labels,
            engine=engine,
            interval=interval,
            keep=keep,
            token_file=_token_file(engine, gateway_token_file, gateway_no_auth),
        )
    ]
    if gateway is not None:
        gw_job, gw_labels, gw_engine = gateway
        entries.append(
            scrape_job(
                gw_job,
                list(gateway_targets) or [_default_target(gw_engine)],
                gw_labels,
                engine=gw_engine,
                interval=interval,
                keep=keep_configs(gateway_families, gw_engine) if gateway_families is not None else None,
                token_file=_token_file(gw_engine, gateway_token_file, gateway_no_auth),
            )
        )
    if client is not None:
        cl_job, cl_labels = client
        entries.append(
            scrape_job(
                cl_job,
                list(client_targets) or [CLIENT_TARGET],
                cl_labels,
                engine="otel-genai",
                interval=interval,
                keep=keep_configs(client_families(plan), "otel-genai") if plan is not None else None,
            )
        )
    click.echo(dump({"scrape_configs": entries}), nl=False)

"""Before `load`: `genobs init` writes a commented starting spec, validated through load and plan."""

from __future__ import annotations

import functools
import json
import os
from importlib import resources
from pathlib import Path

import click
import yaml

from genobs.catalog import ENGINES, GATEWAYS
from genobs.errors import printable

# gateway -> (its scrape job by default, what its /metrics is)
_GATEWAY_LINES = {
    "llm-d-epp": ("llm-d-epp", "llm-d's endpoint picker", "the endpoint picker's /metrics: port 9090, bearer token"),
    "dynamo": ("dynamo-frontend", "NVIDIA Dynamo's frontend", "the frontend's /metrics on its HTTP port (8000)"),
    "otel-genai-server": (
        "envoy-ai-gateway",
        "a gateway recording the OpenTelemetry GenAI server metrics (Envoy AI Gateway)",
        "the gateway's OpenTelemetry Prometheus exporter",
    ),
}

SCHEMA_FILE = "genobs.schema.json"


@functools.cache
def presets() -> dict:
    return yaml.safe_load(resources.files("genobs.data").joinpath("presets.yaml").read_text(encoding="utf-8"))


def use_cases() -> list[str]:
    return list(presets())


@functools.cache
def devices() -> dict:
    return yaml.safe_load(resources.files("genobs.data").joinpath("devices.yaml").read_text(encoding="utf-8"))


def device_alerts(use_case: str, device: str) -> dict[str, dict[str, str]]:
    """The device's thresholds (devices.yaml) where they are laxer than the use case's preset: a
    CPU engine must not be held to a GPU's speeds, nor to stricter ones than its use case asks."""
    from genobs.plan.alerts import signal_data
    from genobs.units import parse_number, parse_seconds

    if device == "gpu":
        return {}
    preset = presets()[use_case].get("alerts", {})
    below = {a["signal"] for a in signal_data()["alerts"].values() if a.get("primary") and a["direction"] == "below"}
    out: dict[str, dict[str, str]] = {}
    for signal, levels in devices()[device]["alerts"].items():
        if preset.get(signal, {}).get("enabled") is False:
            continue
        parse = parse_number if signal in below else parse_seconds
        kept = {}
        for sev, value in levels.items():
            current = preset.get(signal, {}).get(sev)
            if current is not None:
                mine, theirs = parse(value), parse(current)
                if (mine >= theirs) if signal in below else (mine <= theirs):
                    continue  # the use case is already at least as lax
            kept[sev] = str(value)
        if kept:
            out[signal] = kept
    return out


def newest_version(engine: str = "vllm") -> str:
    from genobs.catalog import format_version, load_catalog

    return format_version(load_catalog(engine).max_version)


def _engine_lines(engine: str) -> dict[str, str]:
    """The comments of the service block that name the engine's own labels and prefix."""
    from genobs.catalog import format_version, load_catalog

    if engine == "vllm":
        return {
            "release": "vLLM",
            "example": "#   length_finish: {warning: 5%, critical: 15%}",
            "version": "the vLLM release you run: picks metric names",
            "job": "required: up and process_* exist for every target, not only vLLM",
            "group_by": "kept on every rule and alert; `engine` (DP rank) is always summed away",
            "names": "underscore when Prometheus stored vllm_... names (escaped scrape)",
            "disagg": "NIXL KV-transfer signals (vLLM >= 0.11.1)",
        }
    catalog = load_catalog(engine)
    name = catalog.display_name
    prefix = next((r.name for m in catalog.metrics.values() for r in m.names), "")
    escaped = prefix.split(":", 1)[0] + "_..." if ":" in prefix else ""
    observable = catalog.missing_reason("length_finish") is None
    transfer = catalog.metrics.get("nixl_xfer_time")
    if catalog.missing_reason("nixl_transfer") is None and transfer is not None:
        disagg = f"KV-transfer signals of prefill/decode pools ({name} >= {format_version(transfer.available_from())})"
    else:
        disagg = f"KV-transfer signals (not observable on {name})"
    return {
        "release": name,
        "example": "#   length_finish: {warning: 5%, critical: 15%}" if observable else "#   queue_time: {warning: 2s}",
        "version": f"the {name} release you run: picks metric names and buckets",
        "job": f"required: up exists for every target, not only {name}",
        "group_by": f"kept on every rule and alert; {', '.join(catalog.rank_labels_summed)} are summed away",
        "names": f"underscore when Prometheus stored {escaped} names (escaped scrape)" if escaped else "",
        "disagg": disagg,
    }


def _q(value: str) -> str:
    """A double-quoted YAML scalar: never read as a number, boolean or null."""
    return json.dumps(value, ensure_ascii=False)


def schema_ref(target: Path | None) -> str | None:
    """Relative path from the spec (or, for stdout, the working folder) to the nearest
    genobs.schema.json at or above it; None when there is none, so the spec never
    points an editor at a file that does not exist."""
    folder = target.resolve().parent if target is not None else Path.cwd()
    for d in (folder, *folder.parents):
        if (d / SCHEMA_FILE).is_file():
            return Path(os.path.relpath(d / SCHEMA_FILE, folder)).as_posix()
    return None


def schema_line(schema: str | None) -> str:
    if schema is None:
        # no modeline: an editor would look for a file that is not there
        return f"# editor completion: `genobs schema > {SCHEMA_FILE}`, then point a yaml-language-server $schema line at it"
    return f"# yaml-language-server: $schema={schema}"


def _threshold_text(value: object) -> str:
    return "off" if value is None else str(value)


def spec_text(
    use_case: str,
    model: str | None,
    name: str | None = None,
    engine_version: str | None = None,
    namespace: str | None = "llm-prod",
    schema: str | None = f"../{SCHEMA_FILE}",
    warnings: tuple[str, ...] = (),
    job: str = "vllm",
    engine: str = "vllm",
    capabilities: tuple[str, ...] = (),
    gateway: tuple[str, str | None, str] | None = None,
    device: str = "gpu",
    client: tuple[str, str | None, str] | None = None,
) -> str:
    """The commented spec `genobs init` writes; no model watches every model behind the selector.
    `gateway`: (profile, release or None for the newest, scrape job) of a gateway in front of the pods;
    `device`: cpu writes devices.yaml's thresholds under alerts:; `client`: (scrape job, conventions
    release or None for the newest, namespace) of an application measuring OpenTelemetry GenAI
    client metrics in front of them."""
    preset = presets()[use_case]
    name = name or use_case
    version = engine_version or newest_version(engine)
    say = _engine_lines(engine)
    preset_lines = []
    for signal, levels in preset.get("alerts", {}).items():
        if levels.get("enabled") is False:
            preset_lines.append(f"#   {signal}: off")
        else:
            parts = [f"{sev} {_threshold_text(levels[sev])}" for sev in ("warning", "critical") if sev in levels]
            preset_lines.append(f"#   {signal}: {', '.join(parts)}")
    title = f"{use_case.capitalize()} - {model}" if model else f"{say['release']} {use_case}"
    models = f"[{_q(model)}]" if model else "[]"

    def c(code: str, comment: str = "") -> str:
        return f"{code:<35} # {comment}" if comment else code

    lines = [
        schema_line(schema),
        f"# {use_case}: {preset['description']}",
        f"# Primary KPI: {preset['primary_kpi']}; secondary: {preset['secondary_kpi']}.",
        "# Build: genobs build <this file>; explain an alert: genobs explain <alert> --spec <this file>",
        "version: genobs/v1",
        c(f"name: {_q(name)}", "out/<name>/, rule groups genobs-<name>-*, dashboard uid genobs-<name>"),
        c("# team: inference-platform", "added as label `team` on every alert"),
        "",
        "service:",
        f"  engine: {engine}",
        c(f"  engine_version: {_q(version)}", say["version"]),
        c("  selector:", "target labels every query is restricted to"),
        *([f"    namespace: {_q(namespace)}"] if namespace else ["    # namespace: llm-prod"]),
        c(f"    job: {_q(job)}", say["job"]),
        c("  group_by: [model_name]", say["group_by"]),
        c(f"  models: {models}", "empty = every model behind the selector"),
        c("  metric_names: colon", say["names"]),
        c("  min_request_rate: 0.05", "req/s below which latency and ratio alerts stay silent"),
        "",
        *(_gateway_block(gateway, namespace) if gateway else []),
        *(_client_block(client) if client else []),
        c(f"use_case: {use_case}", "preset thresholds (override them under alerts:):"),
        *preset_lines,
        "",
        "features:",
        c("  prefix_caching: true", "prefix-cache hit-rate signals"),
        c("  speculative_decoding: false", "acceptance rate and mean acceptance length"),
        c("  disaggregated_prefill: false", say["disagg"]),
        c("  gpu_metrics: none", "dcgm: GPU saturation and memory from NVIDIA dcgm-exporter (capacity signals)"),
        "",
        c("evaluation_interval: 30s", "rule-group interval"),
        "",
        *(
            [f"# what genobs cannot observe (or only approximates) on this engine{' and gateway' if gateway else ''}:"]
            + [f"#   {line}" for line in capabilities]
            + [""]
            if capabilities
            else []
        ),
        *(
            [f"# genobs build warns, with {say['release']} {version} and this preset:"]
            + [f"#   {w}" for w in warnings]
            + ["#   (set thresholds the histogram can reach under alerts:)"]
            if warnings
            else []
        ),
        *_alerts_block(use_case, device, say["example"]),
        "",
        c("# slos:", "multi-window multi-burn-rate alerts on each SLO")
        + ("; ttft, e2e and success read the gateway" if gateway else ""),
        "#   - name: first-token",
        "#     sli: ttft",
        c(f"#     threshold: {_slo_threshold(device)}", "a histogram bucket boundary"),
        "#     objective: 99%",
        "",
        c("runbook: {}", "base_url: where RUNBOOK.md is published (runbook_url of alerts)"),
        "",
        "dashboard:",
        f"  title: {_q(title)}",
        "  folder: LLM serving",
        "",
        c("kubernetes:", "or: genobs build --kubernetes"),
        c("  enabled: false", "true also writes kubernetes/: PrometheusRule, dashboard ConfigMap"),
        "  namespace: monitoring",
        c("  labels: {}", "e.g. {release: kube-prometheus-stack} for the operator's ruleSelector"),
    ]
    return "\n".join(lines) + "\n"


def _alerts_block(use_case: str, device: str, example: str) -> list[str]:
    def c(code: str, comment: str = "") -> str:
        return f"{code:<35} # {comment}" if comment else code

    overrides = device_alerts(use_case, device)
    if not overrides:
        return [
            c("alerts: {}", "only what differs from the preset, e.g.:"),
            "#   ttft: {warning: 1s, critical: 2.5s, for: 10m}",
            example,
            "#   rss_growth: {enabled: false}",
        ]
    lines = [c("alerts:", f"{devices()[device]['description']}: laxer than the preset where it is stricter")]
    for signal, levels in overrides.items():
        lines.append(f"  {signal}: {{{', '.join(f'{sev}: {value}' for sev, value in levels.items())}}}")
    return lines


def _slo_threshold(device: str) -> str:
    return str(devices()[device]["slo_example"]["threshold"]) if device != "gpu" else "1s"


def _gateway_block(gateway: tuple[str, str | None, str], namespace: str | None) -> list[str]:
    engine, version, job = gateway
    _, what, scrape = _GATEWAY_LINES[engine]
    from genobs.catalog import load_catalog

    catalog = load_catalog(engine)
    name = catalog.display_name
    # an OpenTelemetry profile's names follow the semantic conventions, not the gateway's release
    field, picks = ("conventions", "the semantic conventions it follows") if catalog.translation else (
        "engine_version", f"the {name} release you run")

    def c(code: str, comment: str = "") -> str:
        return f"{code:<35} # {comment}" if comment else code

    return [
        c("gateway:", "what users connect to, in front of the pods: user-facing alerts and SLOs read it"),
        c(f"  engine: {engine}", f"{what}; the pods stay under service:"),
        c(f"  {field}: {_q(version or newest_version(engine))}", f"{picks}: picks its metric names"),
        c("  selector:", "target labels of the gateway's own scrape job"),
        *([f"    namespace: {_q(namespace)}"] if namespace else ["    # namespace: llm-prod"]),
        c(f"    job: {_q(job)}", scrape),
        "",
    ]


def _client_block(client: tuple[str, str | None, str]) -> list[str]:
    job, conventions, namespace = client
    from genobs.catalog import format_version, load_catalog

    def c(code: str, comment: str = "") -> str:
        return f"{code:<35} # {comment}" if comment else code

    release = conventions or format_version(load_catalog("otel-genai").max_version)
    return [
        c("client:", "the application's view (OpenTelemetry GenAI client metrics): its alerts page first"),
        c(f"  conventions: {_q(release)}", "its instrumentation's semantic conventions (first chunk from 1.41.0)"),
        c("  otel: {translation: underscores_with_suffixes}", "the SDK's Prometheus exporter, the OTLP default"),
        c("  selector:", "target labels of the application's own scrape job"),
        f"    namespace: {_q(namespace)}",
        c(f"    job: {_q(job)}", "its /metrics (`genobs scrape-config` prints the job)"),
        c("  model_names: {}", "gen_ai.request.model -> the pods' model name, where they differ"),
        c("  alerts: {}", "default: the TTFT and success levels below; e.g. ttft: {warning: 1.28s, critical: 2.56s}"),
        "",
    ]


def validate(text: str, file: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Load and plan the text; its plan warnings and capability lines. SpecError when the options
    make an invalid spec."""
    from genobs.compiler import load_plan

    plan = load_plan(text=text, file=file)[1]
    return plan.warnings, plan.capabilities


# spec field -> the option it came from, for problems with what the user typed
_OPTION_OF_FIELD = (
    ("name", "--name"),
    ("service.models", "--model"),
    ("dashboard.title", "--model"),
    ("service.engine_version", "--engine-version"),
    ("service.selector.job", "--job"),
    ("service.selector", "--namespace"),
    ("features", "--engine-version"),
    ("gateway.engine_version", "--gateway-version"),
    ("gateway.conventions", "--gateway-version"),
    ("gateway.selector", "--gateway-job"),
    ("client.conventions", "--client-conventions"),
    ("client.selector", "--client-job"),
)


@click.command()
@click.option(
    "--use-case",
    required=True,
    type=click.Choice(use_cases()),
    help="Preset of KPIs and thresholds.",
)
@click.option("--model", required=True, help="Served model name (vLLM's model_name label), e.g. gpt-oss-120b.")
@click.option("--name", default=None, help="Spec name (output folder, rule-group prefix). Default: the use case.")
@click.option(
    "--engine",
    type=click.Choice(ENGINES),
    default="vllm",
    show_default=True,
    help="Serving engine (vllm, sglang, trtllm): picks its metric names, labels and buckets.",
)
@click.option(
    "--engine-version", default=None, help="Engine release, e.g. 0.11.1 (vLLM). Default: newest genobs knows."
)
@click.option(
    "--gateway",
    type=click.Choice(GATEWAYS),
    default=None,
    help="A gateway in front of the engine pods (llm-d-epp: llm-d's endpoint picker; dynamo: Dynamo's frontend; "
    "otel-genai-server: one recording the OpenTelemetry GenAI server metrics, e.g. Envoy AI Gateway): "
    "user-facing alerts and SLOs read it, diagnosis the pods.",
)
@click.option("--gateway-version", default=None, help="Gateway release, e.g. 0.10 (llm-d-router); for otel-genai-server the semantic-conventions release, "
    "e.g. 1.36.0. Default: newest genobs knows.")
@click.option(
    "--gateway-job",
    default=None,
    help="Prometheus scrape job of the gateway. Default: llm-d-epp, dynamo-frontend or envoy-ai-gateway.",
)
@click.option(
    "--client-job",
    default=None,
    help="Prometheus scrape job of an application in front of the gateway or the pods that records OpenTelemetry "
    "GenAI client metrics: adds a client: block (its alerts page first).",
)
@click.option(
    "--client-namespace", default=None, help="Kubernetes namespace of the application's targets. Default: --namespace."
)
@click.option(
    "--client-conventions",
    default=None,
    help="Semantic-conventions release of the application's instrumentation, e.g. 1.41.0. Default: newest genobs knows.",
)
@click.option(
    "--device",
    type=click.Choice(["gpu", "cpu"]),
    default="gpu",
    show_default=True,
    help="What the engine runs on: cpu writes thresholds for CPU speeds under alerts: (the presets assume GPUs).",
)
@click.option("--namespace", default="llm-prod", show_default=True, help="Kubernetes namespace of the engine (and gateway) targets.")
@click.option("--job", default=None, help="Prometheus scrape job of the engine's targets. Default: the engine's name.")
@click.option("-o", "--output", type=click.Path(path_type=Path), default=None, help="Write to FILE, not stdout.")
@click.option("--force", is_flag=True, help="Overwrite FILE if it exists.")
def init(
    use_case: str,
    model: str,
    name: str | None,
    engine: str,
    engine_version: str | None,
    gateway: str | None,
    gateway_version: str | None,
    gateway_job: str | None,
    client_job: str | None,
    client_namespace: str | None,
    client_conventions: str | None,
    device: str,
    namespace: str,
    job: str | None,
    output: Path | None,
    force: bool,
) -> None:
    """Write a commented starting spec for a use case (stdout, or -o FILE); with --gateway, a
    gateway in front of the engine pods."""
    job = engine if job is None else job
    if gateway is None and (gateway_version or gateway_job):
        raise click.UsageError(f"{'--gateway-version' if gateway_version else '--gateway-job'} needs --gateway")
    front = None
    if gateway is not None:
        front = (gateway, gateway_version, _GATEWAY_LINES[gateway][0] if gateway_job is None else gateway_job)
        if not front[2].strip():
            raise click.BadParameter("must not be empty", param_hint="--gateway-job")
    if client_job is None and (client_namespace or client_conventions):
        raise click.UsageError(f"{'--client-namespace' if client_namespace else '--client-conventions'} needs --client-job")
    app = None
    if client_job is not None:
        if not client_job.strip():
            raise click.BadParameter("must not be empty", param_hint="--client-job")
        app = (client_job, client_conventions, client_namespace or namespace)
    if output is not None and output.is_dir() and not output.is_symlink():
        raise click.BadParameter(f"{printable(str(output))} is a folder; give a file name", param_hint="-o/--output")
    if output is not None and os.path.lexists(output) and not force:  # a dangling link exists too
        raise click.UsageError(f"{printable(str(output))} exists; pass --force to overwrite it")
    for option, value in (("--model", model), ("--job", job)):
        if not value.strip():
            raise click.BadParameter("must not be empty", param_hint=option)
    args = (use_case, model, name, engine_version, namespace, schema_ref(output))
    text = spec_text(*args, job=job, engine=engine, gateway=front, device=device, client=app)
    from genobs.errors import SpecError

    try:
        warnings, capabilities = validate(text, "<genobs init>")
    except SpecError as exc:
        seen = set()
        for p in exc.problems:
            option = next((o for f, o in _OPTION_OF_FIELD if p.field.startswith(f)), p.field)
            if option not in seen:  # one problem per option (--model also feeds the title)
                seen.add(option)
                click.echo(f"error: {option}: {p.message}", err=True)
        raise SystemExit(2) from None
    if warnings or capabilities:  # the same the build will print; written into the spec as comments too
        text = spec_text(
            *args, warnings=warnings, job=job, engine=engine, capabilities=capabilities, gateway=front, device=device, client=app
        )
        for w in warnings:
            click.echo(f"warning: {w}", err=True)
    if output is None:
        click.echo(text, nl=False)
        return
    from genobs.writer import write_file

    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        write_file(output, text.encode("utf-8"))  # a link at -o is replaced, not followed
    except OSError as exc:
        raise click.BadParameter(f"{printable(str(output))}: cannot write: {exc.strerror or exc}", param_hint="-o/--output") from None
    click.echo(f"wrote {printable(str(output))}; build it with: genobs build {printable(str(output))}", err=True)

"""`genobs simulate` / `python -m genobs.sim`: run a simulated /metrics exporter (an engine, a gateway,
or an application's OpenTelemetry GenAI metrics) until SIGINT/SIGTERM."""

from __future__ import annotations

import errno
import math
import signal
import sys
import threading

import click

from genobs.catalog import ENGINES, GATEWAYS, OTEL_GENAI, load_catalog

from .scenarios import DESCRIPTIONS, SCENARIOS, parse_model_spec
from .simulator import DEFAULT_CLIENT_TIMEOUT, DEFAULT_VERSION, ROLES, Simulator


def _bind_error(exc: OSError, port: int, addr: str) -> click.BadParameter:
    """What made binding fail, on the option that caused it: a port in use, or an address this
    machine does not have or cannot parse."""
    if exc.errno == errno.EADDRINUSE:
        return click.BadParameter(f"port {port} is in use on {addr}; pick another, or 0 for any free port", param_hint="'--port'")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return click.BadParameter(f"binding port {port} is not allowed here ({exc.strerror})", param_hint="'--port'")
    reason = exc.strerror or str(exc)
    return click.BadParameter(f"cannot serve on {addr!r}: {reason} (an address of this machine, e.g. 127.0.0.1 or ::1)", param_hint="'--addr'")


def _models(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> dict[str, str]:
    models: dict[str, str] = {}
    for text in values:
        try:
            name, scenario = parse_model_spec(text)
        except ValueError as exc:
            raise click.BadParameter(str(exc), ctx=ctx, param=param) from None
        if name in models:
            raise click.BadParameter(f"model {name!r} given twice", ctx=ctx, param=param)
        models[name] = scenario
    return models


MAX_REQUEST_RATE = 1000.0  # requests/s per model the simulator can play in real time on one core
MAX_DATA_PARALLEL = 64  # engine ranks per model; each multiplies the exposition
MAX_MODEL_LEN = 100_000_000  # tokens; the 1-2-5 bounds up to it stay a few dozen


def _bounded(low: float, high: float, what: str):
    """A click callback refusing NaN, infinities and values outside [low, high], like the spec's numbers."""

    def check(ctx: click.Context, param: click.Parameter, value: float | int | None) -> float | int | None:
        if value is not None and not (math.isfinite(value) and low <= value <= high):
            raise click.BadParameter(f"{value!r} is not {what} from {low:g} to {high:g}", ctx=ctx, param=param)
        return value

    return check


def _list_scenarios(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if not value or ctx.resilient_parsing:
        return
    for name in SCENARIOS:
        click.echo(f"{name:26} {DESCRIPTIONS[name]}")
    ctx.exit(0)


@click.command("simulate")
@click.option(
    "--port",
    type=int,
    callback=_bounded(0, 65535, "a TCP port"),
    default=9400,
    show_default=True,
    help="TCP port (0 = any free port).",
)
@click.option("--addr", default="127.0.0.1", show_default=True, help="Address to bind.")
@click.option(
    "--engine",
    type=click.Choice(tuple(dict.fromkeys((*ENGINES, *GATEWAYS, *OTEL_GENAI)))),
    default="vllm",
    show_default=True,
    help="Serving engine (or gateway: llm-d-epp, dynamo; or OpenTelemetry GenAI metrics: otel-genai of an "
    "application, otel-genai-server of a server) to mimic: names, labels and buckets come from its profile.",
)
@click.option(
    "--translation",
    type=click.Choice(("underscores_with_suffixes", "utf8", "utf8_without_suffixes")),
    default=None,
    help="otel-genai, otel-genai-server: the name translation the body is in: underscores_with_suffixes (the "
    "Python SDK's Prometheus exporter; default) or a Collector's prometheus exporter keeping UTF-8 names "
    "(utf8: NoUTF8EscapingWithSuffixes, utf8_without_suffixes: NoTranslation).",
)
@click.option(
    "--version",
    "vllm_version",
    default=None,
    help=f"Engine version to mimic (default: the newest in the engine's profile; vLLM {DEFAULT_VERSION}).",
)
@click.option(
    "--model",
    "models",
    multiple=True,
    callback=_models,
    metavar="NAME=SCENARIO",
    help="A served model and its scenario (repeatable; default demo-model=healthy).",
)
@click.option("--seed", type=int, default=0, show_default=True, help="Random seed (traffic is deterministic).")
@click.option(
    "--fault-after",
    type=float,
    callback=_bounded(0, 1e6, "a number of seconds"),
    default=0.0,
    show_default=True,
    help="Seconds of healthy traffic before faults start (exporter_down closes 2 s later).",
)
@click.option(
    "--request-rate",
    type=float,
    callback=_bounded(0, MAX_REQUEST_RATE, "a request rate (requests/s)"),
    default=5.0,
    show_default=True,
    help="Mean requests/s per model.",
)
@click.option(
    "--data-parallel-size",
    type=int,
    callback=_bounded(1, MAX_DATA_PARALLEL, "a number of engine ranks"),
    default=None,
    show_default="2; 1 with --role",
    help="Engine ranks per model (vLLM engine; SGLang schedulers, dp_rank from 2 on).",
)
@click.option("--spec-decode/--no-spec-decode", default=True, show_default=True, help="Expose spec-decode metrics.")
@click.option(
    "--nixl/--no-nixl",
    default=True,
    show_default=True,
    help="Expose the KV-transfer (disaggregated prefill) metrics: vLLM's NIXL ones, SGLang's with --role.",
)
@click.option(
    "--max-model-len",
    type=int,
    callback=_bounded(1, MAX_MODEL_LEN, "a number of tokens"),
    default=None,
    show_default="the profile's bounds, up to 100000 (a 128K context)",
    help="The engine's --max-model-len: token-count histograms (prompt, generation, max_tokens, ...) get "
    "vLLM's 1-2-5 bounds up to it (512: ..., 200, 500).",
)
@click.option(
    "--client-timeout",
    type=float,
    callback=_bounded(0.1, 1e6, "a number of seconds"),
    default=DEFAULT_CLIENT_TIMEOUT,
    show_default=True,
    help="Seconds a client waits before it gives up on a request the engine does not serve (idle_hang).",
)
@click.option(
    "--role",
    type=click.Choice(ROLES),
    default=None,
    help="Serve one server of a prefill/decode pair (SGLang: engine_type=prefill|decode; the prefill "
    "server writes the KV-transfer latency). Engines whose role is a target label (vLLM) have none.",
)
@click.option(
    "--list-scenarios",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=_list_scenarios,
    help="List the scenarios and exit.",
)
def simulate(
    port: int,
    addr: str,
    engine: str,
    translation: str | None,
    vllm_version: str | None,
    models: dict[str, str],
    seed: int,
    fault_after: float,
    request_rate: float,
    data_parallel_size: int | None,
    spec_decode: bool,
    nixl: bool,
    max_model_len: int | None,
    client_timeout: float,
    role: str | None,
) -> None:
    """Serve a simulated engine /metrics endpoint (one scenario per model); with --role, one
    server of an SGLang prefill/decode pair.

    exporter_down closes the whole HTTP server, so run it in a simulator process of its own.
    """
    layer = frozenset((*GATEWAYS, *OTEL_GENAI))  # not an engine: no role, no token-count bounds of its own
    if translation is not None and engine not in OTEL_GENAI:
        raise click.BadParameter(f"{engine} writes Prometheus names itself; only OpenTelemetry metrics are "
                                 "translated", param_hint="'--translation'")
    if role is not None and (engine in layer or load_catalog(engine).roles is None):
        name = engine if engine in layer else load_catalog(engine).display_name
        raise click.BadParameter(
            f"{name} writes no prefill/decode role of its own; only SGLang's servers do (engine_type). "
            "Run one simulator per pool and give each its role as a target label (service.roles).",
            param_hint="'--role'",
        )
    if max_model_len is not None and engine in layer:
        raise click.BadParameter(
            f"{engine} is not an engine: it writes no token-count histogram of an engine", param_hint="'--max-model-len'"
        )
    try:
        if engine in OTEL_GENAI:
            from .otel_genai import OtelGenAISimulator

            sim = OtelGenAISimulator(vllm_version, models or None, engine=engine, translation=translation,
                                     fault_after=fault_after, request_rate=request_rate)
        elif engine == "dynamo":
            from .dynamo import DynamoFrontendSimulator

            sim = DynamoFrontendSimulator(vllm_version, models or None, fault_after=fault_after, request_rate=request_rate)
        elif engine in GATEWAYS:
            from .gateway import GatewaySimulator

            sim = GatewaySimulator(
                vllm_version, models or None, fault_after=fault_after, request_rate=request_rate, engine=engine
            )
        else:
            sim = Simulator(
                vllm_version,
                models or None,
                seed=seed,
                speculative_decoding=spec_decode,
                disaggregated_prefill=nixl,
                fault_after=fault_after,
                request_rate=request_rate,
                data_parallel_size=data_parallel_size,
                engine=engine,
                role=role,
                max_model_len=max_model_len,
                client_timeout=client_timeout,
            )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    stop = threading.Event()

    def _handler(signum: int, frame: object) -> None:
        stop.set()

    previous = {sig: signal.signal(sig, _handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            sim.start(port=port, addr=addr)
        except OSError as exc:
            raise _bind_error(exc, port, addr) from None
        listing = ", ".join(f"{m}={s}" for m, s in sim.models.items())
        if role is not None:
            listing += f"; {role} server"
        click.echo(f"serving simulated {sim.catalog.release(sim.version)} metrics on {sim.url} ({listing})")
        sys.stdout.flush()
        reported = False
        while not stop.wait(0.2):
            if sim.down.is_set() and not reported:
                click.echo("exporter_down: stopped serving /metrics", err=True)
                reported = True
    finally:
        sim.stop()
        for sig, old in previous.items():
            signal.signal(sig, old)

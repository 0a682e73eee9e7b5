"""The Simulator: a fake engine /metrics exporter served by prometheus_client (Python API for tests and CLI)."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Mapping

from prometheus_client import CollectorRegistry, generate_latest, start_http_server

from genobs.catalog import ENGINES, Version, format_version, load_catalog, parse_version

from .collector import UNIFIED, FleetCollector, plan_families
from .scenarios import DESCRIPTIONS, NEEDS_NIXL, NEEDS_SPEC_DECODE, SCENARIOS
from .traffic import Fleet

DEFAULT_VERSION = "0.33.0"
UNLABELLED_REASONS = ("stop", "length", "abort")
DEFAULT_MODELS = {"demo-model": "healthy"}
#: the servers of a prefill/decode pair, for engines whose profile has `roles`
ROLES = ("prefill", "decode")
#: exporter_down: seconds of normal service after --fault-after before the server closes.
EXPORTER_DOWN_DELAY = 2.0
#: seconds a client waits for an answer before it gives up (idle_hang)
DEFAULT_CLIENT_TIMEOUT = 60.0


def one_two_five(limit: int) -> tuple[float, ...]:
    """1, 2, 5, 10, 20, 50, ... up to `limit` (vLLM's build_1_2_5_buckets)."""
    out, scale = [], 1
    while True:
        for mantissa in (1, 2, 5):
            if mantissa * scale > limit:
                return tuple(out)
            out.append(float(mantissa * scale))
        scale *= 10


def metrics_url(addr: str, port: int) -> str:
    """The /metrics URL of a server bound to `addr` (an IPv6 address in brackets, as URLs write it)."""
    host = f"[{addr}]" if ":" in addr else addr
    return f"http://{host}:{port}/metrics"


class Simulator:
    """A simulated vLLM exporter for one vLLM version and a set of models, one scenario each.

    Traffic is a deterministic function of `seed` and the elapsed time of `clock` (seconds,
    default time.monotonic, read relative to construction); pass your own callable to drive
    simulated time from a test. Faults start `fault_after` seconds in. `exporter_down`
    takes the whole HTTP server down, so give it a Simulator (or process) of its own.
    `role` (prefill | decode, engines whose profile has `roles`: SGLang) makes it one server of
    a P/D pair: its role in the engine's own label, and only the families that server writes.
    `data_parallel_size` (default 2, and 1 for a P/D server, as the real P/D bodies were written):
    engine ranks per model, vLLM's `engine` label or SGLang's schedulers (`dp_rank` from 2 on).
    `max_model_len` (None: the profile's bounds, a 128K context) caps the token-count histograms'
    1-2-5 bounds as vLLM's --max-model-len does. `client_timeout`: seconds before a client whose
    request the engine does not serve gives up (idle_hang).
    """

    def __init__(
        self,
        version: str | Version | None = None,
        models: Mapping[str, str] | None = None,
        *,
        seed: int = 0,
        speculative_decoding: bool = True,
        disaggregated_prefill: bool = True,
        fault_after: float = 0.0,
        request_rate: float = 5.0,
        data_parallel_size: int | None = None,
        clock: Callable[[], float] | None = None,
        exporter_down_delay: float = EXPORTER_DOWN_DELAY,
        engine: str = "vllm",
        role: str | None = None,
        max_model_len: int | None = None,
        client_timeout: float = DEFAULT_CLIENT_TIMEOUT,
    ):
        if engine not in ENGINES:
            raise ValueError(f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")
        catalog = load_catalog(engine)
        static = dict(catalog.static_labels)
        if role is not None:
            if catalog.roles is None:
                raise ValueError(
                    f"{catalog.display_name} writes no prefill/decode role of its own: run one simulator per "
                    "pool and give each its role as a target label (service.roles)"
                )
            if role not in ROLES:
                raise ValueError(f"unknown role {role!r}; known: {', '.join(ROLES)}")
            label, prefill, decode = catalog.roles
            static[label] = prefill if role == "prefill" else decode
        if version is None:
            version = catalog.max_version
        v = parse_version(version) if isinstance(version, str) else tuple(version)
        if not catalog.min_version <= v <= catalog.max_version:
            raise ValueError(
                f"{catalog.display_name} {format_version(v)} is outside the catalog's range "
                f"{format_version(catalog.min_version)}-{format_version(catalog.max_version)}"
            )
        self.models = dict(DEFAULT_MODELS if models is None else models)
        if not self.models:
            raise ValueError("at least one model is needed")
        for name, scenario in self.models.items():
            if scenario not in DESCRIPTIONS:
                raise ValueError(f"model {name!r}: unknown scenario {scenario!r}; known: {', '.join(SCENARIOS)}")
            if scenario in NEEDS_SPEC_DECODE and not speculative_decoding:
                raise ValueError(f"model {name!r}: {scenario} needs speculative decoding on")
            if scenario in NEEDS_NIXL and not disaggregated_prefill:
                raise ValueError(f"model {name!r}: {scenario} needs disaggregated prefill (NIXL) on")
        if data_parallel_size is None:
            data_parallel_size = 1 if role is not None else 2
        if not (data_parallel_size >= 1 and math.isfinite(request_rate) and request_rate >= 0) or not (
            math.isfinite(fault_after) and fault_after >= 0
        ):
            raise ValueError("data_parallel_size >= 1, request_rate >= 0 and fault_after >= 0 are required")
        if not (math.isfinite(client_timeout) and client_timeout > 0):
            raise ValueError("client_timeout > 0 is required")
        model_len_keys = {k for k, m in catalog.metrics.items() if m.buckets_to_max_model_len and m.name_for(v)}
        if max_model_len is not None and not (model_len_keys and max_model_len >= 1):
            raise ValueError(
                f"{catalog.display_name} {format_version(v)} writes no token-count histogram that follows a "
                "maximum model length" if not model_len_keys else "max_model_len >= 1 is required"
            )
        self.catalog = catalog
        self.version: Version = v
        self.seed = seed
        self.speculative_decoding = speculative_decoding
        self.disaggregated_prefill = disaggregated_prefill
        self.role = role
        self.fault_after = float(fault_after)
        self.exporter_down_delay = float(exporter_down_delay)
        self._clock = clock or time.monotonic
        self._t0 = self._clock()

        self.engine_label = catalog.has_rank_label(v)
        # vLLM: every engine rank is a series (engine="0"); SGLang: each data-parallel scheduler
        # writes its own families (dp_rank, written only with more than one), the tokenizer sums them
        per_scheduler = bool(catalog.scheduler_labels) and data_parallel_size > 1
        ranks: tuple[str | None, ...] = (
            tuple(str(i) for i in range(data_parallel_size)) if self.engine_label or per_scheduler else (None,)
        )
        self.families = plan_families(
            catalog,
            v,
            speculative_decoding=speculative_decoding,
            disaggregated_prefill=disaggregated_prefill,
            role=role or UNIFIED,
        )
        # the token-count histograms' bounds follow --max-model-len (vLLM: build_1_2_5_buckets)
        bounds = {k: one_two_five(max_model_len) for k in model_len_keys} if max_model_len is not None else {}
        hist_buckets = {
            f.key: bounds.get(f.key, f.metric.buckets_for(v))
            for f in self.families
            if f.metric.type == "histogram" and not f.metric.process
        }
        http_buckets = tuple(
            catalog.metrics[k].buckets_for(v) if k in catalog.metrics else ()
            for k in ("http_request_duration", "http_request_duration_highr")
        )
        self.fleet = Fleet(
            self.models,
            ranks,
            hist_buckets,
            # an engine without finish reasons still finishes requests as stop, length or abort;
            # the traffic model calls a client's give-up `abort` whatever the engine names it
            tuple("abort" if r == catalog.abort_reason else r for r in catalog.reasons_for(v)) or UNLABELLED_REASONS,
            seed=seed,
            request_rate=request_rate,
            fault_after=fault_after,
            # from this release a client's give-up is no finished request: abort_surge disconnects
            disconnects=v >= catalog.client_disconnects_not_aborts_since,
            client_timeout=client_timeout,
            http_buckets=(http_buckets[0], http_buckets[1]),
        )
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(
            FleetCollector(
                self.fleet,
                self.families,
                version=v,
                engine_label=self.engine_label,
                elapsed=self.elapsed,
                catalog=catalog,
                static=static,
                bounds=bounds,
            )
        )
        self.down = threading.Event()  # set once exporter_down has closed the server
        self._httpd = None
        self._http_thread: threading.Thread | None = None
        self._ticker: threading.Thread | None = None
        self._stopping = threading.Event()
        self._addr = "127.0.0.1"
        self.port: int | None = None

    # -- time and rendering ----------------------------------------------------------------
    def elapsed(self) -> float:
        """Simulated seconds since construction."""
        return max(0.0, self._clock() - self._t0)

    def render(self) -> bytes:
        """The exposition in Prometheus text format 0.0.4 (what a plain GET returns)."""
        return generate_latest(self.registry)

    @property
    def wire_names(self) -> dict[str, str]:
        """Catalog key -> wire name of every family this simulator exposes."""
        return {f.key: f.wire for f in self.families}

    @property
    def url(self) -> str:
        if self.port is None:
            raise RuntimeError("simulator not started")
        return metrics_url(self._addr, self.port)

    @property
    def serving(self) -> bool:
        return self._httpd is not None

    # -- HTTP ------------------------------------------------------------------------------------
    def start(self, port: int = 0, addr: str = "127.0.0.1") -> int:
        """Serve /metrics with prometheus_client's own WSGI server; returns the bound port."""
        if self._httpd is not None:
            raise RuntimeError("simulator already started")
        httpd, thread = start_http_server(port, addr=addr, registry=self.registry)
        self._httpd, self._http_thread = httpd, thread
        self._addr, self.port = addr, httpd.server_address[1]
        self._stopping.clear()
        self._ticker = threading.Thread(target=self._tick_loop, name="genobs-sim-ticker", daemon=True)
        self._ticker.start()
        return self.port

    def stop(self) -> None:
        """Stop the ticker and the HTTP server (idempotent)."""
        self._stopping.set()
        if self._ticker is not None and self._ticker is not threading.current_thread():
            self._ticker.join(timeout=5)
        self._ticker = None
        self._close_http()

    def __enter__(self) -> Simulator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _close_http(self) -> None:
        httpd, thread = self._httpd, self._http_thread
        self._httpd = self._http_thread = None
        if httpd is not None:
            httpd.shutdown()
            httpd.server_close()
        if thread is not None:
            thread.join(timeout=5)

    def _tick_loop(self) -> None:
        """Keep the state fresh between scrapes and carry out exporter_down."""
        goes_down = "exporter_down" in self.models.values()
        while not self._stopping.wait(0.1):
            elapsed = self.elapsed()
            self.fleet.advance(elapsed)
            if goes_down and elapsed >= self.fault_after + self.exporter_down_delay and self._httpd is not None:
                self._close_http()
                self.down.set()

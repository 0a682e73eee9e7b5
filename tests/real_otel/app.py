"""An application recording the OpenTelemetry GenAI client instruments through the real
OpenTelemetry Python SDK and serving them with its real Prometheus exporter, for the end-to-end
test of the client layer (tests/test_e2e_client.py).

It makes `--rate` streamed chat completions per second, without end, and records each one when
it ends, with the instruments, Views (the recommended bucket boundaries) and attributes of
tests/fixtures/otel_genai/make_bodies.py (whose code it uses): the installed
opentelemetry-semantic-conventions' own create_gen_ai_client_* helpers, `gen_ai.request.model`
as the application asks for the model (`--request-model`), `gen_ai.response.model` as the
server answers. /metrics is the exporter's HTTP server (prometheus_client's, on the default
registry) on 127.0.0.1:`--port`.

From SIGUSR1 on (or `--fault-after` seconds after it starts) the network between the application
and its servers fails and it retries: every first chunk and operation is 2-4 s later and
`--fault-errors` of the operations give up after `--fault-timeout` seconds with
`error.type=APITimeoutError`, without reaching a server. It prints one line when it starts
serving and one when the fault begins (with the wall-clock time), and exits when its parent does.

usage: app.py --port PORT [--rate 5] [--seed 1] [--request-model llama-3.1-8b] [--fault-after S]
"""

from __future__ import annotations

import argparse
import heapq
import os
import random
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fixtures" / "otel_genai"))

import make_bodies  # noqa: E402 (beside the fixtures it recorded)
from opentelemetry.exporter.prometheus import PrometheusMetricReader  # noqa: E402
from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.view import ExplicitBucketHistogramAggregation, View  # noqa: E402
from opentelemetry.sdk.resources import Resource  # noqa: E402
from prometheus_client import start_http_server  # noqa: E402

HEALTHY_NETWORK = (0.005, 0.03)
RETRY_NETWORK = (2.0, 4.0)  # connection errors and the client's retries, before every first chunk


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, required=True, help="loopback port of /metrics")
    p.add_argument("--rate", type=float, default=5.0, help="chat completions started per second")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--request-model", default="llama-3.1-8b", help="gen_ai.request.model, the application's name")
    p.add_argument("--response-model", default=make_bodies.MODEL, help="gen_ai.response.model, the server's name")
    p.add_argument("--fault-after", type=float, default=None, help="seconds after the start the fault begins")
    p.add_argument("--fault-errors", type=float, default=0.15, help="share of operations that time out in the fault")
    p.add_argument("--fault-timeout", type=float, default=5.0, help="seconds a timed-out operation took")
    return p.parse_args(argv)


class Fault:
    """Off until SIGUSR1 or `after` seconds; says so once, with the wall-clock time."""

    def __init__(self, after: float | None, started: float) -> None:
        self.at = None if after is None else started + after
        self.on = False
        signal.signal(signal.SIGUSR1, lambda *_: self.begin())

    def begin(self) -> None:
        self.at = min(self.at or time.monotonic(), time.monotonic())

    def active(self, now: float) -> bool:
        if not self.on and self.at is not None and now >= self.at:
            self.on = True
            print(f"fault from {time.time():.3f}: network retries, timeouts", flush=True)
        return self.on


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    parent = os.getppid()
    release, metrics, attributes = make_bodies.semconv()
    views = [
        View(instrument_name=name, aggregation=ExplicitBucketHistogramAggregation(boundaries=bounds))
        for name, bounds in make_bodies.BOUNDS.items()
    ]
    resource = Resource.create({"service.name": "chat-app", "service.instance.id": f"chat-app-{os.getpid()}"})
    provider = MeterProvider(metric_readers=[PrometheusMetricReader()], resource=resource, views=views)
    meter = provider.get_meter("genobs.tests.real_otel", schema_url=f"https://opentelemetry.io/schemas/{release}")
    histograms = make_bodies.instruments(meter, metrics, "client")
    start_http_server(args.port, addr="127.0.0.1")
    print(f"serving OpenTelemetry GenAI client metrics (conventions {release}) on "
          f"http://127.0.0.1:{args.port}/metrics", flush=True)

    rng = random.Random(args.seed)
    started = time.monotonic()
    fault = Fault(args.fault_after, started)
    timeouts = (("APITimeoutError", args.fault_errors, args.fault_timeout),)
    ending: list[tuple[float, int, dict]] = []  # (when it ends, sequence, operation)
    begun = 0
    while os.getppid() == parent:
        now = time.monotonic()
        while started + begun / args.rate <= now:  # start the operations due, at a steady rate
            broken = fault.active(now)
            op = make_bodies.operation(
                rng, timeouts if broken else (), RETRY_NETWORK if broken else HEALTHY_NETWORK
            )
            seconds = op["failure"][1] if op["failure"] else op["client_duration"]
            heapq.heappush(ending, (started + begun / args.rate + seconds, begun, op))
            begun += 1
        while ending and ending[0][0] <= now:  # record the ones that ended, as they end
            make_bodies.record(
                histograms, [heapq.heappop(ending)[2]], attributes, args.request_model, args.response_model
            )
        wake = min(started + begun / args.rate, ending[0][0] if ending else float("inf"))
        time.sleep(min(max(0.0, wake - time.monotonic()), 0.2))


if __name__ == "__main__":
    main()

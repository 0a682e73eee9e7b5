"""One missed scrape does not resolve a page, on a real Prometheus.

A one-pod model (a simulated vLLM 0.33 server) degrades: every first token takes seconds, so the
TTFT alert and the first-token SLO's burns fire. Prometheus scrapes the pod every 5 s and
evaluates every 5 s; then exactly one scrape fails (the pod answers 503 for one scrape interval).
Prometheus writes staleness markers for every series of the failed scrape, so for one evaluation
every rule that reads a gauge as an instant vector (the SLOs' model marker, the held requests)
has no input: without `keep_firing_for` the SLO burn pages resolve and fire again one evaluation
later (a second Prometheus runs the same rules without it, and shows that). With the rules genobs
writes, no page leaves the firing state; the warnings' behaviour is measured and asserted too."""

from __future__ import annotations

import contextlib
import http.server
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from genobs.build import render_spec
from genobs.sim import Simulator
from tests.conftest import REPO
from tests.e2e_support import PROMETHEUS, Prometheus, poll, stopping

pytestmark = pytest.mark.slow  # real servers on loopback

MODEL = "m-chat"
INTERVAL = 5  # seconds: scrape and evaluation interval (one missed scrape is one evaluation without data)
FAULT_AFTER = 40.0
WATCH = 40.0  # seconds of watching after the failed scrape: the stale window and several evaluations


class FlakyExporter:
    """Serves a simulator's exposition; `fail_for(seconds)` answers 503 to every scrape meanwhile."""

    def __init__(self, sim: Simulator):
        self.sim, self.failing_until, self.failed = sim, 0.0, 0
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                if time.monotonic() < outer.failing_until:
                    outer.failed += 1
                    self.send_response(503)
                    self.end_headers()
                    return
                body = outer.sim.render()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]

    @contextlib.contextmanager
    def serving(self) -> Iterator[FlakyExporter]:
        thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.server.shutdown()
            self.server.server_close()

    def fail_for(self, seconds: float) -> None:
        self.failing_until = time.monotonic() + seconds


def _spec(tmp: Path) -> Path:
    data = yaml.safe_load((REPO / "specs" / "chat.yaml").read_text())
    data |= {"rate_window": "1m", "evaluation_interval": f"{INTERVAL}s"}
    data["service"]["models"] = [MODEL]
    data["alerts"] = {**(data.get("alerts") or {}), "ttft": {"warning": "1s", "critical": "2.5s", "for": "10s"}}
    burns = [
        {"severity": "critical", "long": "2m", "short": "1m", "factor": 14.4},
        {"severity": "warning", "long": "3m", "short": "1m", "factor": 6},
    ]
    data["slos"] = [{**slo, "burn_rates": burns} for slo in data["slos"]]
    path = tmp / "chat.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _config(port: int) -> dict:
    return {
        "global": {"scrape_interval": f"{INTERVAL}s", "evaluation_interval": f"{INTERVAL}s"},
        "scrape_configs": [
            {
                "job_name": "vllm-chat",
                "scrape_timeout": "2s",
                "static_configs": [{"targets": [f"127.0.0.1:{port}"], "labels": {"namespace": "llm-prod"}}],
            }
        ],
    }


def _rules(tmp: Path, keep_firing: bool) -> dict[str, bytes]:
    out = render_spec(_spec(tmp))
    files = {n.split("/")[-1]: b for n, b in out.files.items() if n.startswith("prometheus/") and n.endswith(".rules.yaml")}
    if keep_firing:
        return files
    return {n: re.sub(rb"\n *keep_firing_for: \S+", b"", b) for n, b in files.items()}


WATCHED = {  # (alert, severity) that fire on the degradation: pages and warnings
    ("VllmTtftP99High", "critical"),
    ("VllmTtftP99High", "warning"),
    ("SloFirstTokenErrorBudgetBurnFast", "critical"),
    ("SloFirstTokenErrorBudgetBurnSlow", "warning"),
}


def _firing(prom: Prometheus) -> set[tuple[str, str]]:
    return {
        (a["labels"]["alertname"], a["labels"]["severity"])
        for a in prom.alerts()
        if a["state"] == "firing" and a["labels"].get("model_name") == MODEL
    }


def test_one_missed_scrape_resolves_no_page(tmp_path: Path, capsys):
    if not Path(PROMETHEUS).exists():
        pytest.fail("the prometheus server is required: install Debian's 'prometheus' package")
    sim = Simulator("0.33.0", {MODEL: "ttft_degradation"}, request_rate=20, seed=5, fault_after=FAULT_AFTER)
    exporter = FlakyExporter(sim)
    with stopping([sim]), exporter.serving():
        sim.start(0)  # the ticker keeps its state fresh; scrapes go through the flaky exporter
        held = Prometheus(tmp_path / "held", _config(exporter.port), _rules(tmp_path, keep_firing=True))
        bare = Prometheus(tmp_path / "bare", _config(exporter.port), _rules(tmp_path, keep_firing=False))
        with stopping([], held), stopping([], bare):
            held.start()
            bare.start()
            poll(lambda: WATCHED <= _firing(held) and WATCHED <= _firing(bare), time.monotonic() + 360, 1.0,
                 "the degradation's alerts firing on both servers")
            time.sleep(2 * INTERVAL)  # steady: every watched alert has fired for a while
            exporter.fail_for(INTERVAL)  # exactly one scrape of each server fails
            left: dict[str, set[tuple[str, str]]] = {"held": set(), "bare": set()}
            end = time.monotonic() + WATCH
            while time.monotonic() < end:
                for name, prom in (("held", held), ("bare", bare)):
                    left[name] |= WATCHED - _firing(prom)
                time.sleep(0.25)
            assert exporter.failed >= 2, "each server missed one scrape"
            assert held.query('up{job="vllm-chat"} == 1') and WATCHED <= _firing(held)
    pages = {a for a in WATCHED if a[1] == "critical"}
    with capsys.disabled():
        print(f"\none missed scrape: left firing with keep_firing_for: {sorted(left['held']) or 'none'}; "
              f"without: {sorted(left['bare']) or 'none'}")
    # the missed scrape matters: without keep_firing_for a page resolves (and fires again)
    assert left["bare"] & pages, left["bare"]
    # with the rules genobs writes, no alert of the degradation leaves the firing state
    assert not left["held"], left["held"]

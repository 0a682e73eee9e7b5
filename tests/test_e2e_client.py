"""End to end for the client layer: a real application process (tests/real_otel/app.py) records
the OpenTelemetry GenAI client instruments through the real OpenTelemetry Python SDK and serves
them with its real Prometheus exporter, in front of a simulated llm-d gateway and vLLM pods
(`genobs simulate`, healthy). Debian's Prometheus scrapes the three with the jobs `genobs
scrape-config --drop-unread` prints for specs/app-otel.yaml (rate window 1m, evaluation 1s, the
client alerts' `for` 30s), evaluates every rule file genobs generated for it and notifies a real
Alertmanager holding the generated inhibit rules.

Healthy, nothing fires, nothing is pending once the windows are full (the pods' layer has
startup transients: `up` absent before the first scrape, an RSS trend over a few samples), and
the client's recorded series have data under the pods' model name (the application asks for
`llama-3.1-8b`, which `client.model_names` maps). Then the network between the application and
its servers fails (SIGUSR1): its first chunks and operations are 2-4 s later and 15 % of its
operations time out (`APITimeoutError`). The client
pages, ClientErrorRatioHigh and ClientTtftP99High, fire; their warnings are inhibited in
Alertmanager; no alert of the gateway or the pods (nor an SLO read at them) is pending or firing
from the warm-up to a whole window after the fault.

Deadlines count from the first scrape of every target and from the fault's own start as the
application prints it (a loaded machine starts scraping late)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from genobs.build import render_spec
from genobs.cli import main
from genobs.promql import metric_names
from tests.conftest import REPO
from tests.e2e_support import (
    PROMETHEUS,
    Prometheus,
    Simulate,
    assert_rules_healthy,
    free_port,
    poll,
    rule_files_of,
    rules_of,
    stop_process,
    stopping,
)
from tests.vm_support import Alertmanager, running

pytestmark = pytest.mark.slow  # real servers on loopback, about 2.5 minutes

SPEC = REPO / "specs" / "app-otel.yaml"
APP = REPO / "tests" / "real_otel" / "app.py"
MODEL = "meta-llama/Llama-3.1-8B-Instruct"  # the pods' model_name
APP_MODEL = "llama-3.1-8b"  # gen_ai.request.model as the application asks
APP_RATE = 5.0  # the application's chat completions per second
WINDOW = 60.0  # the variant's rate window, 1m
FOR = 30.0  # the client alerts' pending duration in the variant
# the healthy windows must be full before silence means anything: a window and some evaluations
WARMUP = WINDOW + 10.0
# the fault shows in the whole window after WINDOW (its timeouts end 5 s after they start, its slow
# answers some seconds later), then `for`; the rest is room for a loaded machine's late scrapes and
# evaluations (a passing check returns as soon as it sees what it waits for)
FAULT_DEADLINE = WINDOW + FOR + 60.0
PAGES = {"ClientErrorRatioHigh", "ClientTtftP99High"}


def _spec(tmp: Path) -> Path:
    data = yaml.safe_load(SPEC.read_text())
    data |= {"rate_window": "1m", "evaluation_interval": "1s"}
    for field in ("ttft", "error_ratio"):
        data["client"]["alerts"][field]["for"] = f"{FOR:g}s"
    path = tmp / SPEC.name
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


class App:
    """tests/real_otel/app.py on a free loopback port; `fault()` starts its network fault and
    returns the wall-clock time it began."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self.instance = f"127.0.0.1:{self.port}"
        self.log_path = workdir / "app.log"
        self.log = open(self.log_path, "wb")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            [sys.executable, str(APP), "--port", str(self.port), "--rate", f"{APP_RATE:g}", "--request-model", APP_MODEL],
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )
        self.banner = self.proc.stdout.readline()
        if " on http://" not in self.banner:
            self.stop()
            raise RuntimeError(f"the application did not start: {self.banner!r}\n{self.log_path.read_text()}")

    def fault(self) -> float:
        self.proc.send_signal(signal.SIGUSR1)
        line = self.proc.stdout.readline()  # the app says so as it starts its next operation
        assert line.startswith("fault from "), (line, self.log_path.read_text())
        return float(line.split()[2].rstrip(":"))

    def stop(self) -> None:
        stop_process(self.proc)
        self.proc.stdout.close()
        self.log.close()


def _alert_states(prom: Prometheus, since: float) -> dict[tuple[str, str, str], float]:
    """(alertname, severity, alertstate) -> the first evaluation (wall clock) from `since` on at
    which the alert was in that state, from the ALERTS series Prometheus holds."""
    window = f"{max(1, int(time.time() - since) + 5)}s"
    data = prom.api("query", {"query": f"ALERTS[{window}]"})
    found: dict[tuple[str, str, str], float] = {}
    for s in data["result"]:
        m = s["metric"]
        key = (m["alertname"], m.get("severity", ""), m["alertstate"])
        at = [float(t) for t, _ in s["values"] if float(t) >= since]
        if at:
            found[key] = min(found.get(key, float("inf")), *at)
    return found


def _pages_and_inhibited(am: Alertmanager) -> tuple[set[str], set[tuple[str, str]]]:
    """(alertnames of the active pages, (alertname, severity) of the alerts an inhibit rule silences)."""
    held = am.alerts()
    active = {a["labels"]["alertname"] for a in held if a["status"]["state"] == "active" and a["labels"]["severity"] == "critical"}
    inhibited = {(a["labels"]["alertname"], a["labels"]["severity"]) for a in held if a["status"]["inhibitedBy"]}
    return active, inhibited


def test_client_fault_through_the_real_sdk_pages_the_client_only(tmp_path: Path, capsys) -> None:
    if not Path(PROMETHEUS).exists():
        pytest.fail("the prometheus server is required: install Debian's 'prometheus' package (make test does)")
    begun = time.monotonic()
    spec = _spec(tmp_path)
    out = render_spec(spec)
    rules = rules_of(out)
    # the token-usage shift needs the day's baseline (the -client-long group): none in a fresh run
    baseline = {r.record for r in rules if r.record and r.group.endswith("-client-long")}
    client_records = sorted(
        {
            r.record
            for r in rules
            if r.record and r.group.endswith("-client") and not metric_names(r.expr) & baseline
        }
    )
    assert len(client_records) >= 7, client_records
    rule_files = rule_files_of(out)
    inhibit = yaml.safe_load(out.files["alertmanager/inhibit-rules.yaml"])["inhibit_rules"]
    pods = Simulate("--version", "0.33.0", "--request-rate", "20", "--seed", "1", f"--model={MODEL}=healthy")
    with stopping([pods]):
        gateway = Simulate("--engine", "llm-d-epp", "--request-rate", "20", "--seed", "2", f"--model={MODEL}=healthy")
        with stopping([gateway]):
            app = App(tmp_path)
            with stopping([app]), running(Alertmanager(tmp_path / "am", inhibit)) as am:
                jobs = CliRunner().invoke(
                    main,
                    ["scrape-config", str(spec), "--drop-unread", "--interval", "1s", "--gateway-no-auth",
                     "--target", pods.instance, "--gateway-target", gateway.instance, "--client-target", app.instance],
                )
                assert jobs.exit_code == 0, jobs.output
                config = {
                    "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
                    "alerting": {"alertmanagers": [{"static_configs": [{"targets": [am.url.removeprefix("http://")]}]}]},
                    **yaml.safe_load(jobs.output),
                }
                prom = Prometheus(tmp_path / "prometheus", config, rule_files)
                with stopping([], prom):
                    prom.start()
                    started = time.time()
                    first_scrape = poll(
                        lambda: len(prom.query("up == 1")) == 3 and time.monotonic(),
                        prom.started + 60,
                        0.5,
                        "a first scrape of the pods, the gateway and the application",
                    )
                    assert_rules_healthy(prom)

                    # healthy: the client's series under the pods' model name, nothing pending or firing
                    time.sleep(max(0.0, first_scrape + WARMUP - time.monotonic()))
                    for record in client_records:
                        got = poll(lambda r=record: prom.query(r), first_scrape + WARMUP + 30, 1.0, f"{record} data")
                        assert {s["metric"].get("model_name") for s in got} == {MODEL}, (record, got)
                    requests = float(prom.query("genobs:client_requests:rate1m")[0]["value"][1])
                    assert abs(requests - APP_RATE) < 1.0, requests
                    assert float(prom.query("genobs:client_request_errors:ratio_rate1m")[0]["value"][1]) == 0.0
                    healthy_ttft = float(prom.query('genobs:client_ttft_seconds:quantile_rate1m{quantile="0.99"}')[0]["value"][1])
                    assert healthy_ttft < 1.28, healthy_ttft
                    # the pods' layer has startup transients, pending only (absent `up` before the first scrape,
                    # the RSS trend over a few seconds of samples): nothing fires, nothing is pending once warm
                    warm = time.time() - 5
                    early = _alert_states(prom, started)
                    assert not {k: at for k, at in early.items() if k[2] == "firing" or at >= warm}, early
                    assert am.alerts() == []

                    # the network between the application and its servers fails
                    fault_at = app.fault()
                    fault = time.monotonic() - (time.time() - fault_at)

                    def paged() -> set[str] | None:
                        firing = {
                            a["labels"]["alertname"]
                            for a in prom.alerts()
                            if a["state"] == "firing" and a["labels"]["severity"] == "critical"
                        }
                        return firing if PAGES <= firing else None

                    poll(paged, max(fault, first_scrape) + FAULT_DEADLINE, 1.0, f"the client pages {sorted(PAGES)}")
                    # the whole window shows the fault: a gateway or pod alert reading it would be pending by now
                    time.sleep(max(0.0, fault + WINDOW + 5 - time.monotonic()))
                    # Alertmanager: the two pages, their warnings silenced by them
                    warnings = {(name, "warning") for name in PAGES}
                    poll(
                        lambda: _pages_and_inhibited(am) == (PAGES, warnings),
                        time.monotonic() + 30,
                        1.0,
                        "the client pages in Alertmanager, their warnings inhibited",
                    )
                    states = _alert_states(prom, warm)
                    assert_rules_healthy(prom)
    runtime = time.monotonic() - begun

    seen = {name for name, _, _ in states}
    assert seen <= PAGES, f"alerts besides the client's: {sorted(seen - PAGES)}"
    assert not {k: at for k, at in states.items() if at < fault_at}, states
    transients = sorted(f"{name} {state} {at - started:.0f}s" for (name, _, state), at in early.items())
    fired = {k: at - fault_at for k, at in states.items()}
    report = [f"{name} {severity} {state}: {secs:.0f}s after the fault" for (name, severity, state), secs in sorted(fired.items())]
    with capsys.disabled():
        print(
            f"\nreal OpenTelemetry SDK client, fault at {fault_at - started:.0f}s after Prometheus started "
            f"(first scrape {first_scrape - prom.started:.0f}s after it); test {runtime:.0f}s; startup transients "
            f"{transients or 'none'}:\n  " + "\n  ".join(report)
        )
    # the critical levels fire within the window and `for` (with room for a loaded machine)
    for name in PAGES:
        assert fired[name, "critical", "firing"] <= FAULT_DEADLINE, fired

"""End to end for engines other than vLLM: `genobs simulate --engine sglang` (a real process
serving SGLang's metric names, labels and buckets from its profile through prometheus_client,
as SGLang serves them) scraped by Debian's Prometheus with the relabel snippet of
`genobs scrape-config` and the rules genobs generated for specs/sglang.yaml (rate window 1m,
evaluation 1s). Every rule must evaluate cleanly, each injected fault must raise its alert on
its own model, the healthy model none."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from genobs.cli import main
from tests.conftest import REPO
from tests.e2e_support import PROMETHEUS, Prometheus, poll, render_variant, stopping

pytestmark = pytest.mark.slow  # real servers on loopback

SPEC = REPO / "specs" / "sglang.yaml"
HEALTHY = "m-healthy"
# fault scenario of `genobs simulate` -> the `signal` label of the alert it must raise
FAULTS = {
    "ttft_degradation": "ttft",
    "abort_surge": "abort",
    "preemption_storm": "preemptions",
    "kv_saturation": "kv_cache",
}
ACTIVE = ("pending", "firing")
DEADLINE = 150.0
WARMUP = 75.0


class Simulate:
    """`genobs simulate --engine sglang` in its own process on a free port."""

    def __init__(self, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "genobs", "simulate", "--port", "0", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=REPO,
        )
        self.banner = self.proc.stdout.readline()
        if " on http://" not in self.banner:
            self.stop()
            raise RuntimeError(f"simulate did not start: {self.banner!r} {self.proc.stderr.read()}")
        self.url = self.banner.split(" on ", 1)[1].split(" ", 1)[0]
        self.instance = self.url.removeprefix("http://").split("/", 1)[0]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self.proc.stdout.close()
        self.proc.stderr.close()


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    if not Path(PROMETHEUS).exists():
        pytest.fail("the prometheus server is required: install Debian's 'prometheus' package (make test does)")
    tmp = tmp_path_factory.mktemp("e2e-sglang")
    out, spec = render_variant(SPEC, tmp, models=[])
    rule_files = {
        name.removeprefix("prometheus/"): data
        for name, data in out.files.items()
        if name.startswith("prometheus/") and name.endswith(".rules.yaml")
    }
    models = [f"--model={HEALTHY}=healthy", *(f"--model=m-{s}={s}" for s in FAULTS)]
    sim = Simulate("--engine", "sglang", "--request-rate", "20", "--fault-after", "5", *models)
    try:
        # the scrape job `genobs scrape-config` prints for the spec: sglang_ names back to sglang:
        printed = CliRunner().invoke(main, ["scrape-config", "--target", sim.instance, "--interval", "1s", str(tmp / SPEC.name)])
        assert printed.exit_code == 0, printed.output
        job = yaml.safe_load(printed.output)["scrape_configs"][0]
        job["scrape_timeout"] = "1s"
        config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"}, "scrape_configs": [job]}
        prom = Prometheus(tmp, config, rule_files)
        with stopping([], prom):
            prom.start()
            poll(lambda: prom.query("up == 1"), prom.started + 30, 0.5, "a first scrape")
            yield prom, sim, out
    finally:
        sim.stop()


def test_simulated_sglang_serves_its_own_names(run) -> None:
    prom, sim, _ = run
    assert sim.banner.startswith("serving simulated SGLang 0.5.23 metrics on ")
    names = set(prom.label_values("__name__"))
    assert "sglang:num_running_reqs" in names and "sglang:time_to_first_token_seconds_bucket" in names
    assert not {n for n in names if n.startswith("sglang_")}, "the relabel snippet restores every sglang: name"


def test_rules_evaluate_cleanly(run) -> None:
    prom, _, _ = run

    def evaluated():
        groups = prom.rules()
        rules = [r for g in groups for r in g["rules"]]
        return groups if rules and all(r["health"] != "unknown" for r in rules) else None

    groups = poll(evaluated, prom.started + 30, 0.5, "every rule evaluated")
    bad = [
        f"{g['name']}: {r.get('name')} {r['health']} {r.get('lastError')!r}"
        for g in groups
        for r in g["rules"]
        if r["health"] != "ok" or r.get("lastError")
    ]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("scenario", sorted(FAULTS))
def test_fault_raises_its_alert(run, scenario: str) -> None:
    prom, _, _ = run
    model, signal = f"m-{scenario}", FAULTS[scenario]

    def raised():
        active = [a for a in prom.alerts() if a["labels"].get("model_name") == model and a["state"] in ACTIVE]
        return active if any(a["labels"].get("signal") == signal for a in active) else None

    try:
        poll(raised, prom.started + DEADLINE, 1.0, f"{scenario} alert")
    except TimeoutError:
        seen = [(a["labels"]["alertname"], a["labels"].get("model_name"), a["state"]) for a in prom.alerts()]
        pytest.fail(f"{scenario}: no {signal} alert for {model}; active: {seen}")


def test_healthy_model_stays_silent(run) -> None:
    prom, _, _ = run
    # once the healthy model's 1m windows are full and a few evaluations have run
    time.sleep(max(0.0, prom.started + WARMUP - time.monotonic()))
    loud = [a["labels"]["alertname"] for a in prom.alerts() if a["labels"].get("model_name") == HEALTHY]
    assert not loud, f"alerts for the healthy model: {loud}"

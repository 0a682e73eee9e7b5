"""Two clusters, each with an llm-d gateway in front of its vLLM pods, on one VictoriaMetrics with
vmalert and a real Alertmanager, VictoriaMetrics and vmalert with their default flags.

Every pod and gateway is a `genobs simulate` process of its own (`--engine llm-d-epp` for the
gateways). In each cluster a Prometheus (`external_labels: {cluster: a|b}`) scrapes its own pod
and gateway, evaluates the spec's edge rules and remote-writes through the generated filter
(its remote-write queue with Prometheus' defaults) to one VictoriaMetrics. vmalert, given only
its addresses and the global tier's vmalert files, evaluates them against it and notifies an
Alertmanager holding the generated inhibit rules. Beside each cluster's Prometheus a reference
Prometheus evaluates every rule over the same targets: the edge's rule files at the same paths
(Prometheus hashes a group's name and file into its moment in the interval, so the two evaluate
them together) and the global tier's; with the same external labels it scrapes at the same
moments. Each alert's delay on vmalert is measured against it, from the evaluation timestamps of
the first firing sample of ALERTS on each side (vmalert writes its ALERTS into VictoriaMetrics).

Cluster a's first tokens degrade, at the gateway and on the pod: Alertmanager is left with
exactly one page, naming cluster a (the first-token fast burn, which silences the gateway's TTFT
alert and the pods' warnings). Then cluster b's gateway stops: GatewayServingCapacityLost pages
and GatewayTargetDown warns, naming cluster b. Every alert that fires on the reference fires on
vmalert within one evaluation interval plus the write path, and nothing fires on one side only.

Deadlines count from the first scrape of every target (a loaded machine starts scraping late)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from genobs.build import render_spec
from genobs.commands.scrape_config import relabel_configs
from genobs.compiler import load_plan
from genobs.plan import tiers
from tests.conftest import REPO
from tests.e2e_support import PROMETHEUS, Prometheus, Simulate, first_firing, poll, stopping
from tests.vm_support import Alertmanager, VictoriaMetrics, VmAlert, running

pytestmark = pytest.mark.slow  # real servers on loopback, about 4 to 5 minutes

MODEL = "m-chat"
EVALUATION = 30.0  # seconds: the spec's evaluation_interval (genobs' default)
SCRAPE = 10.0
# seconds of healthy traffic, from each simulator's start, before cluster a's first tokens degrade:
# the first scrapes come some seconds after the simulators start, then every 1m window fills
FAULT_AFTER = 100.0
B_DOWN = 30.0  # seconds after cluster a's fault: cluster b's gateway stops
# from the fault: the 1m windows show it (about half a window), the 2m fast-burn window and the
# alerts' `for: 30s`, an evaluation of each tier on top, then room for a loaded machine
DEADLINE = 300.0
# what the global path adds besides the evaluations: the edge Prometheus' remote-write batch
# (batch_send_deadline, 5s by default), VictoriaMetrics making the samples searchable (about 1s)
WRITE_PATH = 6.0
EXPECTED_PAGES = {  # (alert, cluster) of the pages vmalert must fire
    ("GatewayTtftP99High", "a"),
    ("SloFirstTokenErrorBudgetBurnFast", "a"),
    ("GatewayServingCapacityLost", "b"),
}


def _spec(tmp: Path) -> Path:
    data = yaml.safe_load((REPO / "specs" / "gateway-vllm.yaml").read_text())
    data |= {"rate_window": "1m", "evaluation_interval": f"{EVALUATION:g}s"}
    data["service"] |= {"models": [MODEL], "cluster_label": "cluster"}
    data["alerts"] = {**(data.get("alerts") or {}), "ttft": {"for": f"{EVALUATION:g}s"}, "target_down": {"for": "30s"}}
    burns = [
        {"severity": "critical", "long": "2m", "short": "1m", "factor": 14.4},
        {"severity": "warning", "long": "3m", "short": "1m", "factor": 6},
    ]
    data["slos"] = [{**slo, "burn_rates": burns} for slo in data["slos"]]
    data["output"] = {"backend": "victoriametrics"}
    path = tmp / "gateway-vllm.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _rules(out, folder: str) -> dict[str, bytes]:
    return {
        n.split("/")[-1]: b for n, b in out.files.items() if n.startswith(f"{folder}/") and n.endswith(".rules.yaml")
    }


def _jobs(pod: Simulate, gateway: Simulate) -> list[dict]:
    """One cluster's scrape jobs: its pod (vllm-pool) and its gateway (llm-d-epp)."""
    return [
        {
            "job_name": job,
            "scrape_interval": f"{SCRAPE:g}s",
            "scrape_timeout": "5s",
            "static_configs": [{"targets": [sim.instance], "labels": {"namespace": "llm-prod"}}],
            "metric_relabel_configs": relabel_configs(),
        }
        for job, sim in (("vllm-pool", pod), ("llm-d-epp", gateway))
    ]


def _config(cluster: str, pod: Simulate, gateway: Simulate, remote_write: list[dict] | None = None) -> dict:
    config = {
        "global": {
            "scrape_interval": f"{SCRAPE:g}s",
            "evaluation_interval": f"{EVALUATION:g}s",
            "external_labels": {"cluster": cluster},
        },
        "scrape_configs": _jobs(pod, gateway),
    }
    return config | ({"remote_write": remote_write} if remote_write else {})


def _firing_now(alerts: list[dict]) -> set[tuple[str, str, str | None]]:
    return {
        (a["labels"]["alertname"], a["labels"]["severity"], a["labels"].get("cluster"))
        for a in alerts
        if a["state"] == "firing"
    }


def test_two_clusters_with_gateways_on_vmalert_with_default_flags(tmp_path: Path, capsys):
    if not Path(PROMETHEUS).exists():
        pytest.fail("the prometheus server is required: install Debian's 'prometheus' package")
    spec = _spec(tmp_path)
    plan = load_plan(spec)[1]
    edge, glob = (render_spec(spec, tier=t) for t in ("edge", "global"))
    inhibit = yaml.safe_load(glob.files["alertmanager/inhibit-rules.yaml"])["inhibit_rules"]
    common = ("--request-rate", "20", "--version", "0.33.0")
    sims: dict[tuple[str, str], Simulate] = {}
    with stopping(sims.values()):
        fault_at = time.time() + FAULT_AFTER  # each simulator's fault clock starts when it does, after this
        fault = ("--fault-after", f"{FAULT_AFTER:g}", f"--model={MODEL}=ttft_degradation")
        sims["pod", "a"] = Simulate(*common, "--seed", "1", *fault)
        sims["gateway", "a"] = Simulate("--engine", "llm-d-epp", *common[:2], "--seed", "2", *fault)
        sims["pod", "b"] = Simulate(*common, "--seed", "3", f"--model={MODEL}=healthy")
        sims["gateway", "b"] = Simulate("--engine", "llm-d-epp", *common[:2], "--seed", "4", f"--model={MODEL}=healthy")
        fault_late = time.time() + FAULT_AFTER  # ... and before this
        vm, am = VictoriaMetrics(tmp_path / "vm", latency_offset=None), Alertmanager(tmp_path / "am", inhibit)
        with running(vm, am):
            write = [{"url": vm.remote_write_url, "write_relabel_configs": tiers.write_relabel_configs(plan)}]
            edges = {
                c: Prometheus(
                    tmp_path / f"edge-{c}",
                    _config(c, sims["pod", c], sims["gateway", c], write),
                    _rules(edge, "prometheus"),
                )
                for c in ("a", "b")
            }
            references = {
                c: Prometheus(
                    tmp_path / f"reference-{c}",
                    _config(c, sims["pod", c], sims["gateway", c]),
                    _rules(glob, "prometheus"),
                    shared_rules=edges[c].rule_paths,
                )
                for c in ("a", "b")
            }
            vmalert = VmAlert(tmp_path / "vmalert", vm.url, _rules(glob, "vmalert"), notifier=am.url, defaults=True)
            servers = [*edges.values(), *references.values()]
            with stopping([], servers[0]), stopping([], servers[1]), stopping([], servers[2]), stopping([], servers[3]):
                for p in servers:
                    p.start()
                with running(vmalert):
                    first_scrape = poll(
                        lambda: all(len(p.query("up")) == 2 for p in servers) and time.monotonic(),
                        time.monotonic() + 90,
                        1.0,
                        "a first scrape of every target",
                    )
                    fault = time.monotonic() + fault_late - time.time()  # monotonic, the latest it can be
                    # the healthy fleet: both clusters' recorded series reach VictoriaMetrics, nothing fires
                    poll(
                        lambda: (
                            {s["metric"].get("cluster") for s in vm.query("genobs:gateway_requests:rate1m")}
                            == {"a", "b"}
                        ),
                        first_scrape + 2 * EVALUATION + WRITE_PATH + 30,
                        1.0,
                        "both clusters' recorded series in VictoriaMetrics",
                    )
                    time.sleep(max(0.0, fault - 2 - time.monotonic()))
                    assert vmalert.rule_errors() == {}
                    stopped: list[str] = []

                    def expected_pages() -> bool:
                        if time.monotonic() >= fault + B_DOWN and not stopped:
                            sims["gateway", "b"].stop()
                            stopped.append(time.time())
                        return EXPECTED_PAGES <= {
                            (n, c) for n, sev, c in _firing_now(vmalert.alerts()) if sev == "critical"
                        }

                    poll(
                        expected_pages,
                        max(fault, first_scrape) + DEADLINE,
                        1.0,
                        f"the pages {sorted(EXPECTED_PAGES)} on vmalert",
                    )
                    # what fires a little later on either side, and the notifications
                    time.sleep(EVALUATION + WRITE_PATH)
                    assert vmalert.rule_errors() == {}
                    held = am.alerts()
                    # vmalert's ALERTS reach VictoriaMetrics with its remote write (5s flush)
                    time.sleep(WRITE_PATH)
                    seen_until = time.time() - WRITE_PATH  # what both sides have had time to fire
                    on_vmalert = first_firing(vm.api, {"nocache": "1"})
                    on_reference = {
                        (name, severity, c): at
                        for c, p in references.items()  # the reference's alerts carry no cluster label
                        for (name, severity, _), at in first_firing(p.api).items()
                    }

    delays = {k: on_vmalert[k] - at for k, at in on_reference.items() if k in on_vmalert}
    causes = {"a": (fault_at, "cluster a's fault"), "b": (stopped[0], "cluster b's gateway stopped")}
    report = [
        f"{name} ({severity}, cluster {c}): "
        + (f"{delays[name, severity, c]:+.1f}s" if (name, severity, c) in delays else "not on vmalert")
        + f" (on the reference {on_reference[name, severity, c] - causes[c][0]:.0f}s after {causes[c][1]})"
        for name, severity, c in sorted(on_reference)
    ]
    report += [
        f"{n} ({sev}, cluster {c}): on vmalert only" for n, sev, c in sorted(set(on_vmalert) - set(on_reference))
    ]
    with capsys.disabled():
        print(
            f"\nvmalert (default flags) against a Prometheus evaluating the same rules every {EVALUATION:g}s "
            "(first firing evaluation on each side):\n  " + "\n  ".join(report)
        )
    # the healthy phase: nothing fired before the fault
    early = {k: at for k, at in {**on_reference, **on_vmalert}.items() if at < fault_at}
    assert not early, early
    # a TTFT fault in cluster a: exactly one page is left for on-call, naming cluster a
    # what Alertmanager notifies: the alerts it holds that no inhibit rule silences
    pages = [a["labels"] for a in held if a["status"]["state"] == "active" and a["labels"]["severity"] == "critical"]
    pages_a = [p["alertname"] for p in pages if p.get("cluster") == "a"]
    assert pages_a == ["SloFirstTokenErrorBudgetBurnFast"], pages
    # cluster b's gateway down: its alerts name cluster b
    down_b = {a["labels"]["alertname"] for a in held if a["labels"].get("cluster") == "b"}
    assert {"GatewayServingCapacityLost", "GatewayTargetDown"} <= down_b, down_b
    assert {p["alertname"] for p in pages if p.get("cluster") == "b"} == {"GatewayServingCapacityLost"}, pages
    # every alert fires on both sides; on vmalert within one evaluation (the two evaluate the global
    # rules at their own moments in the interval) and the write path of the reference
    settled = seen_until - EVALUATION - WRITE_PATH  # an alert firing later on one side may be due on the other
    one_side = {k: at for k, at in on_reference.items() if k not in on_vmalert and at < settled}
    one_side |= {k: at for k, at in on_vmalert.items() if k not in on_reference and at < settled}
    assert not one_side, one_side
    late = {k: d for k, d in delays.items() if d > EVALUATION + WRITE_PATH}
    assert not late, late

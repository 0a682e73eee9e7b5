"""Two clusters, each with an llm-d gateway in front of its vLLM pods, on one VictoriaMetrics with
vmalert and a real Alertmanager, all with their default flags.

In each cluster a Prometheus (`external_labels: {cluster: a|b}`) scrapes its own simulated vLLM
pod and its own simulated gateway (`genobs simulate --engine llm-d-epp`, in process), evaluates
the spec's edge rules and remote-writes through the generated filter to one VictoriaMetrics.
vmalert evaluates the global tier's vmalert files against it and notifies an Alertmanager that
holds the generated inhibit rules. Beside each cluster's Prometheus a reference Prometheus
evaluates every rule (the edge's rule files, at the same paths, so at the same moments, and the
global tier's) over the same targets, scraped at the same moments (the same external labels):
each page's delay on vmalert is measured against it. What differs is only where the global
tier's rules run, and when in the interval each server evaluates them.

Cluster a's first tokens degrade (at the gateway and on the pods): its gateway TTFT page, its
first-token SLO's burns and its pods' TTFT warning fire, and Alertmanager delivers exactly one
page naming cluster a (the fast burn silences the rest). Then cluster b's gateway goes down: the
gateway's target alerts fire for cluster b. Every page that fires on the reference fires on
vmalert, within one evaluation interval plus the write path (the edge's remote-write batch)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from genobs.build import render_spec
from genobs.commands.scrape_config import relabel_configs
from genobs.compiler import load_plan
from genobs.plan import tiers
from genobs.sim import Simulator
from genobs.sim.gateway import GatewaySimulator
from tests.conftest import REPO
from tests.e2e_support import PROMETHEUS, Prometheus, poll, stopping
from tests.vm_support import Alertmanager, VictoriaMetrics, VmAlert, running

pytestmark = pytest.mark.slow  # real servers on loopback, about 6 minutes

MODEL = "m-chat"
EVALUATION = 30.0  # seconds: the spec's evaluation_interval (genobs' default)
SCRAPE = 10.0
WARMUP = 75.0  # healthy traffic: every 1m window full, several evaluations on top
B_DOWN = WARMUP + 30.0  # cluster b's gateway stops answering
DEADLINE = 420.0
# what the global path adds besides the evaluations: the edge Prometheus' remote-write batch
# (batch_send_deadline, 5s by default), VictoriaMetrics making the samples searchable (about 1s)
WRITE_PATH = 6.0
POLL = 0.5
EXPECTED_PAGES = {  # (alert, cluster)
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
    return {n.split("/")[-1]: b for n, b in out.files.items() if n.startswith(f"{folder}/") and n.endswith(".rules.yaml")}


def _jobs(pods: dict, gateways: dict, clusters: list[str], labelled: bool) -> list[dict]:
    """The pods' and the gateways' scrape jobs of `clusters` (`labelled`: the cluster as a target label)."""
    out = []
    for job, targets in (("vllm-pool", pods), ("llm-d-epp", gateways)):
        static = [
            {"targets": [f"127.0.0.1:{targets[c].port}"], "labels": {"namespace": "llm-prod", **({"cluster": c} if labelled else {})}}
            for c in clusters
        ]
        out.append({
            "job_name": job,
            "scrape_interval": f"{SCRAPE:g}s",
            "scrape_timeout": "5s",
            "static_configs": static,
            "metric_relabel_configs": relabel_configs(),
        })
    return out


def _firing(alerts: list[dict]) -> set[tuple[str, str, str | None]]:
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
    pods = {
        "a": Simulator("0.33.0", {MODEL: "ttft_degradation"}, request_rate=20, seed=1, fault_after=WARMUP),
        "b": Simulator("0.33.0", {MODEL: "healthy"}, request_rate=20, seed=2),
    }
    gateways = {
        "a": GatewaySimulator(None, {MODEL: "ttft_degradation"}, request_rate=20, fault_after=WARMUP),
        "b": GatewaySimulator(None, {MODEL: "healthy"}, request_rate=20),
    }
    seen: dict[tuple, float] = {}
    with stopping([*pods.values(), *gateways.values()]):
        t0 = time.monotonic()  # the simulators' clocks start at construction, a moment before
        for s in (*pods.values(), *gateways.values()):
            s.start(0)
        vm, am = VictoriaMetrics(tmp_path / "vm", latency_offset=None), Alertmanager(tmp_path / "am", inhibit)
        with running(vm, am):
            write = [{"url": vm.remote_write_url, "write_relabel_configs": tiers.write_relabel_configs(plan)}]
            edges = [
                Prometheus(
                    tmp_path / f"prom-{c}",
                    {
                        "global": {"scrape_interval": f"{SCRAPE:g}s", "evaluation_interval": f"{EVALUATION:g}s",
                                   "external_labels": {"cluster": c}},
                        "scrape_configs": _jobs(pods, gateways, [c], labelled=False),
                        "remote_write": write,
                    },
                    _rules(edge, "prometheus"),
                )
                for c in ("a", "b")
            ]
            references = {
                c: Prometheus(
                    tmp_path / f"reference-{c}",
                    {"global": {"scrape_interval": f"{SCRAPE:g}s", "evaluation_interval": f"{EVALUATION:g}s",
                                "external_labels": {"cluster": c}},
                     "scrape_configs": _jobs(pods, gateways, [c], labelled=False)},
                    _rules(glob, "prometheus"),
                    shared_rules=edge_c.rule_paths,
                )
                for c, edge_c in zip(("a", "b"), edges)
            }
            vmalert = VmAlert(tmp_path / "vmalert", vm.url, _rules(glob, "vmalert"), notifier=am.url, defaults=True)
            with stopping([], references["a"]), stopping([], references["b"]), stopping([], edges[1]), stopping([], edges[0]):
                for p in (*edges, *references.values()):
                    p.start()
                with running(vmalert):
                    # the healthy fleet: nothing fires anywhere before the fault
                    time.sleep(max(0.0, t0 + WARMUP - 2 - time.monotonic()))
                    assert not _firing(vmalert.alerts()), vmalert.alerts()
                    for reference in references.values():
                        assert not _firing(reference.alerts()), reference.alerts()
                    assert vmalert.rule_errors() == {}

                    stopped: list[str] = []

                    def watch() -> bool:
                        now = time.monotonic() - t0
                        if now >= B_DOWN and not stopped:
                            gateways["b"].stop()
                            stopped.append("b")
                        for key in _firing(vmalert.alerts()):
                            seen.setdefault(("vmalert", *key), now)
                        for c, reference in references.items():  # its series carry no cluster label
                            for name, severity, _ in _firing(reference.alerts()):
                                seen.setdefault(("reference", name, severity, c), now)
                        pages = {(n, c) for side, n, sev, c in seen if sev == "critical" and side == "vmalert"}
                        return EXPECTED_PAGES <= pages

                    poll(watch, t0 + DEADLINE, POLL, "the expected pages on vmalert")
                    time.sleep(EVALUATION + WRITE_PATH)  # what fires late on either side, and the notifications
                    watch()
                    received = am.alerts()
                    assert vmalert.rule_errors() == {}

    delivered = [a for a in received if a["status"]["state"] == "active"]
    pages_a = [a for a in delivered if a["labels"]["severity"] == "critical" and a["labels"].get("cluster") == "a"]
    down_b = [a for a in delivered if a["labels"].get("cluster") == "b"]
    report = []
    for _, name, severity, cluster in sorted(k for k in seen if k[0] == "reference"):
        at = seen[("reference", name, severity, cluster)]
        on_vm = seen.get(("vmalert", name, severity, cluster))
        lag = "never" if on_vm is None else f"{on_vm - at:+.1f}s"
        report.append(f"{name} {severity} cluster={cluster}: {lag}")
    with capsys.disabled():
        print("\nvmalert (default flags) against a Prometheus evaluating the same rules, every "
              f"{EVALUATION:g}s:\n  " + "\n  ".join(report))
    # a TTFT fault in cluster a: exactly one page reaches on-call, naming cluster a
    assert [a["labels"]["alertname"] for a in pages_a] == ["SloFirstTokenErrorBudgetBurnFast"], pages_a
    # cluster b's gateway down: its alerts name cluster b
    assert {a["labels"]["alertname"] for a in down_b} == {"GatewayServingCapacityLost", "GatewayTargetDown"}, down_b
    # every page of the reference fires on vmalert too, within one evaluation (the two evaluate
    # the global rules at their own moments in the interval) and the write path
    for side, name, severity, cluster in [k for k in seen if k[0] == "reference" and k[2] == "critical"]:
        at, on_vm = seen[(side, name, severity, cluster)], seen.get(("vmalert", name, severity, cluster))
        assert on_vm is not None, f"{name} for cluster {cluster} fired on the reference only"
        assert on_vm - at <= EVALUATION + WRITE_PATH + POLL, f"{name} cluster {cluster}: {on_vm - at:+.1f}s"
    # nothing fires on one side only
    assert {k[1:] for k in seen if k[0] == "vmalert"} == {k[1:] for k in seen if k[0] == "reference"}

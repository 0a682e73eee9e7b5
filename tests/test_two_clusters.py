"""A real two-cluster fleet on loopback: in each cluster a Prometheus (`external_labels:
{cluster: a|b}`) scrapes its own `genobs simulate` pod with the spec's edge rules and
remote-writes through the generated filter to one VictoriaMetrics; vmalert evaluates the
global rules (the vmalert files of `output.backend: victoriametrics`) against it, with an
Alertmanager as notifier. Both clusters serve the same model under the same namespace and job.
For comparison a single Prometheus runs every rule (`tier: all`) over cluster a's pod alone.

Cluster a's time to first token degrades after the warm-up: the TTFT alert fires for
cluster a only, and reaches the Alertmanager; before the fault the healthy fleet fires nothing."""

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
from tests.conftest import REPO
from tests.e2e_support import PROMETHEUS, Prometheus, poll, stopping
from tests.vm_support import Alertmanager, VictoriaMetrics, VmAlert, running

pytestmark = pytest.mark.slow  # real servers on loopback

MODEL = "m-chat"
EVALUATION = 5.0  # seconds: the spec's evaluation_interval
WARMUP = 80.0  # the 1m windows are full, a few evaluations on top
FAULT_DEADLINE = 150.0
# Both paths evaluate twice before the alert: the single Prometheus records TTFT p99 and then
# alerts on it; the global path records it on the edge Prometheus and alerts on vmalert. Each
# server runs its groups on its own phase (Prometheus hashes the group's name and file, vmalert
# starts its groups itself), so each of the global path's two evaluations can come up to one
# interval after the single Prometheus's: the bound is two intervals plus what the write path
# adds, the edge's remote-write batch (batch_send_deadline 1s) and VictoriaMetrics'
# -search.latencyOffset (1s here), plus one scrape (the two Prometheus servers scrape the pod
# at their own offsets). POLL: how often the test looks, the resolution of each detection time.
WRITE_PATH = 2.0
SCRAPE = 1.0
POLL = 0.5
# vmalert would otherwise truncate each query's time to a multiple of the group interval, up to
# one more interval late (docs/backends.md)
VMALERT_FLAGS = ("-datasource.queryTimeAlignment=false",)


def spec_file(tmp: Path) -> Path:
    data = yaml.safe_load((REPO / "specs" / "chat.yaml").read_text())
    data |= {"rate_window": "1m", "evaluation_interval": f"{EVALUATION:g}s"}
    data["service"] |= {"models": [MODEL], "cluster_label": "cluster"}
    data["alerts"] = {**(data.get("alerts") or {}), "ttft": {"for": "10s"}}
    data["output"] = {"backend": "victoriametrics"}
    path = tmp / "chat.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def rule_files(out, folder: str) -> dict[str, bytes]:
    return {n.split("/")[-1]: b for n, b in out.files.items() if n.startswith(f"{folder}/") and n.endswith(".rules.yaml")}


def prometheus_config(sim: Simulator, cluster: str | None, remote_write: list[dict]) -> dict:
    config: dict = {
        "global": {"scrape_interval": "1s", "evaluation_interval": f"{EVALUATION:g}s"},
        "scrape_configs": [
            {
                "job_name": "vllm-chat",
                "scrape_interval": "1s",
                "scrape_timeout": "1s",
                "static_configs": [{"targets": [f"127.0.0.1:{sim.port}"], "labels": {"namespace": "llm-prod"}}],
                "metric_relabel_configs": relabel_configs(),
            }
        ],
    }
    if cluster:
        config["global"]["external_labels"] = {"cluster": cluster}
    if remote_write:
        config["remote_write"] = remote_write
    return config


def firing(alerts: list[dict], name: str, state_key: str = "state") -> list[dict]:
    return [a for a in alerts if a["labels"].get("alertname") == name and a[state_key] == "firing"]


def test_fault_in_one_cluster_fires_for_that_cluster_only(tmp_path: Path, capsys):
    if not Path(PROMETHEUS).exists():
        pytest.fail("the prometheus server is required: install Debian's 'prometheus' package")
    spec = spec_file(tmp_path)
    plan = load_plan(spec)[1]
    edge = render_spec(spec, tier="edge")
    glob = render_spec(spec, tier="global")
    single = render_spec(spec, tier="all")
    edge_filter = tiers.write_relabel_configs(plan)
    t0 = time.monotonic()  # the simulators' clocks start here: the fault at t0 + WARMUP
    sims = {
        "a": Simulator("0.33.0", {MODEL: "ttft_degradation"}, request_rate=50, seed=1, fault_after=WARMUP),
        "b": Simulator("0.33.0", {MODEL: "healthy"}, request_rate=50, seed=2),
    }
    with stopping(list(sims.values())):
        for s in sims.values():
            s.start(0)
        vm, am = VictoriaMetrics(tmp_path / "vm", latency_offset="1s"), Alertmanager(tmp_path / "am")
        with running(vm, am):
            write = [{"url": vm.remote_write_url, "write_relabel_configs": edge_filter,
                      "queue_config": {"batch_send_deadline": "1s"}}]
            proms = [
                Prometheus(tmp_path / f"prom-{c}", prometheus_config(sims[c], c, write), rule_files(edge, "prometheus"))
                for c in ("a", "b")
            ]
            one = Prometheus(tmp_path / "prom-single", prometheus_config(sims["a"], None, []),
                             rule_files(single, "prometheus"))
            vmalert = VmAlert(tmp_path / "vmalert", vm.url, rule_files(glob, "vmalert"), notifier=am.url,
                              evaluation_interval=f"{EVALUATION:g}s", flags=VMALERT_FLAGS)
            with stopping([], one), stopping([], proms[1]), stopping([], proms[0]):
                for p in (*proms, one):
                    p.start()
                with running(vmalert):
                    # both clusters' recorded series arrive, each with its cluster label
                    poll(lambda: {s["metric"].get("cluster") for s in vm.query("genobs:requests_finished:rate1m")}
                         == {"a", "b"}, time.monotonic() + 60, 1.0, "both clusters' recorded series")
                    # the healthy fleet: nothing fires anywhere before the fault
                    time.sleep(max(0.0, t0 + WARMUP - 3 - time.monotonic()))
                    assert not [a for a in vmalert.alerts() if a["state"] == "firing"], vmalert.alerts()
                    assert not [a for a in one.alerts() if a["state"] == "firing"], one.alerts()
                    assert vmalert.rule_errors() == {}
                    seen: dict[str, float] = {}

                    def detected() -> bool:
                        now = time.monotonic()
                        if "global" not in seen and firing(vmalert.alerts(), "VllmTtftP99High"):
                            seen["global"] = now
                        if "single" not in seen and firing(one.alerts(), "VllmTtftP99High"):
                            seen["single"] = now
                        return len(seen) == 2

                    poll(detected, time.monotonic() + FAULT_DEADLINE, POLL, "VllmTtftP99High on both paths")
                    time.sleep(EVALUATION * 2)  # let cluster b show anything it would
                    active = [a for a in vmalert.alerts() if a["state"] in ("pending", "firing")]
                    assert active and {a["labels"].get("cluster") for a in active} == {"a"}, active
                    ttft = firing(vmalert.alerts(), "VllmTtftP99High")
                    assert {a["labels"]["cluster"] for a in ttft} == {"a"}
                    assert all(a["labels"]["model_name"] == MODEL for a in ttft)
                    received = poll(lambda: [a for a in am.alerts() if a["labels"].get("alertname") == "VllmTtftP99High"],
                                    time.monotonic() + 30, 0.5, "the alert in Alertmanager")
                    assert {a["labels"]["cluster"] for a in received} == {"a"}
    lag = seen["global"] - seen["single"]
    assert lag <= 2 * EVALUATION + WRITE_PATH + SCRAPE + POLL, f"global detection {lag:.1f}s after the single Prometheus"
    with capsys.disabled():
        print(f"\ntwo clusters: VllmTtftP99High for cluster a on vmalert {lag:+.1f}s after the single Prometheus")

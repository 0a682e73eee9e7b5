"""The scrape diet and the edge tier on vLLM 0.33's real /metrics body, with real servers on
loopback: a Prometheus scrapes the exposition through `genobs scrape-config --drop-unread`'s
relabelling (in vLLM's `:` spelling and in the `_` spelling an OpenMetrics scrape stores) and
without it; an edge Prometheus with the edge rules remote-writes to a real VictoriaMetrics
through the generated `write_relabel_configs`, and, for comparison, unfiltered."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from genobs.build import render_spec
from genobs.cli import main
from genobs.commands.scrape_config import read_families
from genobs.compiler import load_plan
from genobs.plan import tiers
from tests.conftest import REPO
from tests.e2e_support import PROMETHEUS, Prometheus, poll, static_exporter
from tests.vm_support import VictoriaMetrics, running

pytestmark = pytest.mark.slow  # real servers on loopback

EXPOSITION = (REPO / "bench" / "vllm_0.33_exposition.txt").read_text()  # vLLM 0.33.0's own /metrics body
SYNTHETIC = {"up", "scrape_duration_seconds", "scrape_samples_scraped", "scrape_samples_post_metric_relabeling",
             "scrape_series_added"}
SPECS_033 = ["chat", "agentic", "capacity", "disaggregated"]  # the example specs on vLLM 0.33


def underscore(body: str) -> str:
    """The body prometheus_client >= 0.23 serves an OpenMetrics scrape: `vllm:` escaped to `vllm_`."""
    return body.replace("vllm:", "vllm_")


def exporter() -> contextlib.AbstractContextManager[int]:
    return static_exporter({"/colon": EXPOSITION.encode(), "/underscore": underscore(EXPOSITION).encode()})


def job(name: str, port: int, path: str, relabel: list[dict], *pods: dict[str, str]) -> dict:
    """One job scraping the exposition once per label set in `pods` (once without labels by default)."""
    return {
        "job_name": name,
        "scrape_interval": "1s",
        "scrape_timeout": "1s",
        "metrics_path": path,
        "static_configs": [{"targets": [f"127.0.0.1:{port}"], "labels": labels} for labels in pods or ({},)],
        "metric_relabel_configs": relabel,
    }


def generated_relabel(spec: Path, *flags: str) -> list[dict]:
    result = CliRunner().invoke(main, ["scrape-config", "--relabel-only", *flags, str(spec)])
    assert result.exit_code == 0, result.output
    return yaml.safe_load(result.stdout)["metric_relabel_configs"]


def names_by_job(prom: Prometheus, job_name: str) -> dict[str, int]:
    rows = prom.query(f'count by (__name__) ({{job="{job_name}"}})')
    return {r["metric"]["__name__"]: int(float(r["value"][1])) for r in rows}


def test_scrape_diet_keeps_every_family_a_rule_reads(tmp_path: Path, capsys):
    if not Path(PROMETHEUS).exists():
        pytest.skip("prometheus is not installed")
    specs = {name: REPO / "specs" / f"{name}.yaml" for name in SPECS_033}
    with exporter() as port:
        jobs = [job("full", port, "/colon", generated_relabel(specs["chat"]))]
        for name, spec in specs.items():
            diet = generated_relabel(spec, "--drop-unread")
            jobs.append(job(f"diet-{name}", port, "/colon", diet))
            jobs.append(job(f"diet-{name}-underscore", port, "/underscore", diet))
        config = {"global": {"scrape_interval": "1s"}, "scrape_configs": jobs}
        prom = Prometheus(tmp_path, config, {})
        try:
            prom.start()
            want = {j["job_name"] for j in jobs}
            poll(lambda: {r["metric"]["job"] for r in prom.query("count by (job) (scrape_samples_scraped)")} >= want,
                 time.monotonic() + 30, what="a scrape of every job")
            time.sleep(1.5)  # a scrape after the first, with every series in the head block
            full = names_by_job(prom, "full")
            exposed = sum(n for name, n in full.items() if name not in SYNTHETIC)
            report = []
            for name, spec in specs.items():
                families = set(read_families(load_plan(spec)[1]))
                for variant in (f"diet-{name}", f"diet-{name}-underscore"):
                    kept = names_by_job(prom, variant)
                    # every family a rule reads and the engine exports survives, each series of it
                    for family in families & set(full):
                        assert kept.get(family) == full[family], (variant, family)
                    # and nothing else does (besides Prometheus' own scrape series)
                    assert set(kept) - SYNTHETIC <= families, (variant, sorted(set(kept) - SYNTHETIC - families))
                kept_series = sum(n for f, n in names_by_job(prom, f"diet-{name}").items() if f not in SYNTHETIC)
                assert 0 < kept_series < exposed
                report.append(f"{name}: {kept_series} of {exposed} series kept per pod")
        finally:
            prom.stop()
    with capsys.disabled():
        print("\nscrape diet on vLLM 0.33's exposition: " + "; ".join(report))


def test_edge_remote_write_ships_only_what_the_global_tier_reads(tmp_path: Path, capsys):
    """Two pods of the real exposition behind an edge Prometheus running the edge rules; both
    remote-write to one VictoriaMetrics: through the generated filter (marked shipped=edge) and
    unfiltered (shipped=all)."""
    if not Path(PROMETHEUS).exists():
        pytest.skip("prometheus is not installed")
    spec = tmp_path / "chat.yaml"
    data = yaml.safe_load((REPO / "specs" / "chat.yaml").read_text())
    data |= {"rate_window": "1m", "evaluation_interval": "1s"}
    data["service"]["models"] = ["demo-model"]  # the model the exposition serves
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    plan = load_plan(spec)[1]
    out = render_spec(spec, tier="edge")
    rule_files = {n.split("/")[-1]: b for n, b in out.files.items() if n.startswith("prometheus/")}
    assert rule_files
    edge_filter = yaml.safe_load(out.files["remote-write.yaml"])["write_relabel_configs"]
    assert edge_filter == tiers.write_relabel_configs(plan)
    mark = lambda v: {"target_label": "shipped", "replacement": v, "action": "replace"}  # noqa: E731
    with exporter() as port, running(VictoriaMetrics(tmp_path / "vm")) as vm:
        scrape = generated_relabel(spec)
        # one address, scraped as two pods: each its own `pod` and `instance`, as two replicas are
        pods = [{"namespace": "llm-prod", "pod": f"vllm-chat-{i}", "instance": f"10.0.0.{i}:8000"} for i in range(2)]
        jobs = [job("vllm-chat", port, "/colon", scrape, *pods)]
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s", "external_labels": {"cluster": "a"}},
            "scrape_configs": jobs,
            "remote_write": [
                {"url": vm.remote_write_url, "write_relabel_configs": [*edge_filter, mark("edge")],
                 "queue_config": {"batch_send_deadline": "1s"}},
                {"url": vm.remote_write_url, "write_relabel_configs": [mark("all")],
                 "queue_config": {"batch_send_deadline": "1s"}},
            ],
        }
        prom = Prometheus(tmp_path / "prom", config, rule_files)
        try:
            prom.start()
            # every edge-recorded name this exposition can produce has reached VictoriaMetrics
            poll(lambda: vm.query('count({shipped="edge", __name__=~"genobs:.*"})'), time.monotonic() + 60,
                 what="recorded series in VictoriaMetrics")
            time.sleep(6)  # several evaluations and remote-write batches

            def counts(shipped: str) -> dict[str, int]:
                rows = vm.query(f'count by (__name__) ({{shipped="{shipped}"}})')
                return {r["metric"]["__name__"]: int(float(r["value"][1])) for r in rows}

            edge, every = counts("edge"), counts("all")
        finally:
            prom.stop()
    recorded = {n for n in every if n.startswith("genobs:")}
    shipped_raw = {name for name, _ in tiers.split(plan).shipped}
    assert recorded and {n: edge.get(n) for n in recorded} == {n: every[n] for n in recorded}
    assert set(edge) - recorded <= shipped_raw and "up" in edge
    # buckets are shipped at the SLO bounds only: one series per bound, not the whole histogram
    ttft = "vllm:time_to_first_token_seconds_bucket"
    assert 0 < edge.get(ttft, 0) < every[ttft]
    raw_all = sum(n for name, n in every.items() if not name.startswith("genobs:"))
    raw_edge = sum(n for name, n in edge.items() if not name.startswith("genobs:"))
    assert raw_edge < raw_all / 20
    with capsys.disabled():
        print(
            f"\nremote_write from 2 pods: {sum(every.values())} series unfiltered "
            f"({raw_all} raw + {sum(every[n] for n in recorded)} recorded), {sum(edge.values())} through the edge "
            f"filter ({raw_edge} raw + {sum(edge[n] for n in recorded)} recorded); raw per pod {raw_all // 2} -> {raw_edge // 2}"
        )


def _kept(relabel: list[dict], labels: dict[str, str]) -> bool:
    """Prometheus' `keep`: the source labels' values joined by the separator, the regex anchored."""
    import re

    for rule in relabel:
        value = rule["separator"].join(labels.get(k, "") for k in rule["source_labels"])
        if not re.fullmatch(rule["regex"], value):
            return False
    return True


def test_edge_ships_raw_series_only_from_the_jobs_the_rules_read():
    """`up` of every other job of the cluster (node-exporter, kube-state-metrics) stays in the
    cluster; the spec's own `up`, its recorded series and the gateway's SLO bucket ship."""
    plan = load_plan(REPO / "specs" / "gateway-vllm.yaml")[1]
    relabel = tiers.write_relabel_configs(plan)
    pods = {"namespace": "llm-prod", "job": "vllm-pool", "instance": "10.0.0.1:8000"}
    assert _kept(relabel, {"__name__": "up", **pods})
    assert _kept(relabel, {"__name__": "genobs:requests_finished:rate5m", "namespace": "llm-prod", "job": "vllm-pool"})
    assert _kept(relabel, {"__name__": "genobs:scrape_targets:count", "job": "another-spec"})
    assert not _kept(relabel, {"__name__": "up", "namespace": "llm-prod", "job": "node-exporter"})
    assert not _kept(relabel, {"__name__": "up", "namespace": "kube-system", "job": "vllm-pool"})
    assert not _kept(relabel, {"__name__": "vllm:num_requests_running", "namespace": "llm-prod", "job": "other"})
    assert not _kept(relabel, {"__name__": "vllm:num_requests_waiting", **pods})  # not read by the global tier
    gateway = {"namespace": "llm-prod", "job": "llm-d-epp", "streaming": "true"}
    assert _kept(relabel, {"__name__": "llm_d_epp_request_ttft_seconds_bucket", "le": "1", **gateway})
    assert not _kept(relabel, {"__name__": "llm_d_epp_request_ttft_seconds_bucket", "le": "2", **gateway})

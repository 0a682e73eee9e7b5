"""The DCGM join against a real Prometheus: one vLLM pod and the dcgm-exporter of its
node, served as text on loopback and scraped by separate jobs, as in a cluster. The
exporter is scraped twice: with honor_labels (its pod/namespace labels kept) and
without (Prometheus renames them exported_pod/exported_namespace and sets the
exporter's own target labels). Series are written by hand in the exporter's names and
labels (dcgm-exporter's README and default-counters.csv); expected values are
computed here from those numbers."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from genobs.cli import main
from genobs.compiler import build_plan
from genobs.loader import load_spec_text
from tests.conftest import REPO
from tests.e2e_support import PROMETHEUS, Prometheus, poll, static_exporter

pytestmark = pytest.mark.slow  # real servers on loopback

SPEC = REPO / "specs" / "capacity.yaml"
POD = "qwen3-32b-7d9f8-abcde"
# vLLM 0.33's waiting gauge on two data-parallel engines of one pod
VLLM = """# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="qwen3-32b"} 6.0
vllm:num_requests_waiting{engine="1",model_name="qwen3-32b"} 5.0
"""
GPUS = ((0, 97.0, 73400.0), (1, 95.0, 12000.0))  # gpu, utilisation %, framebuffer used MiB
FB_TOTAL = 81559.0


def dcgm_body() -> str:
    lines = []
    for name, kind in (("DCGM_FI_DEV_GPU_UTIL", "util"), ("DCGM_FI_DEV_FB_USED", "used"), ("DCGM_FI_DEV_FB_FREE", "free")):
        lines.append(f"# TYPE {name} gauge")
        for gpu, util, used in GPUS:
            value = {"util": util, "used": used, "free": FB_TOTAL - used}[kind]
            labels = (
                f'gpu="{gpu}",UUID="GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e5{gpu}",pci_bus_id="00000000:{18 + gpu}:00.0",'
                f'device="nvidia{gpu}",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-node-1",'
                f'container="vllm",namespace="llm-prod",pod="{POD}"'
            )
            lines.append(f"{name}{{{labels}}} {value}")
        # a GPU of the node no pod holds: the exporter leaves the pod labels empty
        lines.append(f'{name}{{gpu="2",UUID="GPU-604ac76c-d9cf-fef3-62e9-d92044ab6e52",device="nvidia2",'
                     f'modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-node-1",container="",namespace="",pod=""}} 0')
    return "\n".join(lines) + "\n"


def exporter() -> contextlib.AbstractContextManager[int]:
    return static_exporter({"/vllm": VLLM.encode(), "/dcgm": dcgm_body().encode()})


def job(name: str, port: int, path: str, labels: dict[str, str], honor: bool = False) -> dict:
    return {
        "job_name": name,
        "scrape_interval": "1s",
        "scrape_timeout": "1s",
        "metrics_path": path,
        "honor_labels": honor,
        "static_configs": [{"targets": [f"127.0.0.1:{port}"], "labels": labels}],
    }


@pytest.fixture(scope="module")
def prom(tmp_path_factory) -> Iterator[Prometheus]:
    if not Path(PROMETHEUS).exists():
        pytest.skip("prometheus is not installed")
    with exporter() as port:
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "scrape_configs": [
                job("vllm-pool", port, "/vllm", {"namespace": "llm-prod", "pod": POD}),
                job("dcgm-exporter", port, "/dcgm", {"namespace": "gpu-operator", "pod": "dcgm-exporter-x7k2p"}, True),
                job("dcgm-plain", port, "/dcgm", {"namespace": "gpu-operator", "pod": "dcgm-exporter-x7k2p"}),
            ],
        }
        p = Prometheus(tmp_path_factory.mktemp("dcgm"), config, {})
        try:
            p.start()
            poll(lambda: len(p.query('{__name__=~"DCGM_FI_DEV_FB_FREE|vllm:num_requests_waiting"}')) == 8,
                 time.monotonic() + 60, 0.5, "both jobs scraped")
            yield p
        finally:
            p.stop()


def _rules(patch: dict) -> dict[str, str]:
    spec = yaml.safe_load(SPEC.read_text())
    spec["features"]["gpu_metrics"].update(patch)
    plan = build_plan(load_spec_text(yaml.safe_dump(spec), "capacity.yaml"))
    return {r.record: r.expr for g in plan.groups for r in g.rules if hasattr(r, "record")}


@pytest.mark.parametrize(
    "patch",
    [{}, {"selector": {"job": "dcgm-plain"}, "pod_label": "exported_pod", "namespace_label": "exported_namespace"}],
    ids=["honor_labels", "exported_labels"],
)
def test_gpu_series_pair_with_the_vllm_pod(prom: Prometheus, patch: dict):
    rules = _rules(patch)
    want = {"job": "vllm-pool", "model_name": "qwen3-32b", "namespace": "llm-prod", "pod": POD}
    shares = [used / FB_TOTAL for _, _, used in GPUS]
    expected = {
        "genobs:gpu_utilization_per_pod:ratio_avg": sum(u for _, u, _ in GPUS) / len(GPUS) / 100,
        "genobs:gpu_framebuffer_used_per_pod:ratio_min": min(shares),
        "genobs:gpu_framebuffer_used_per_pod:ratio_max": max(shares),
        "genobs:requests_waiting_per_pod:sum": 11.0,
    }
    for record, value in expected.items():
        result = prom.query(rules[record])
        assert len(result) == 1, (record, result)  # the idle GPU and the exporter's own pod pair with nothing
        assert result[0]["metric"] == want, (record, result)
        assert float(result[0]["value"][1]) == pytest.approx(value, rel=1e-9), record


def test_doctor_finds_dcgm_series_under_their_own_job(prom: Prometheus):
    result = CliRunner().invoke(main, ["doctor", "--prometheus", prom.url, str(SPEC)])
    for name in ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE"):
        assert name not in result.output, result.output
    assert "vllm:num_requests_waiting" not in result.output.split("raw metrics")[-1], result.output


def test_doctor_names_missing_dcgm_series_as_another_exporters(prom: Prometheus, tmp_path: Path):
    spec = yaml.safe_load(SPEC.read_text())
    spec["features"]["gpu_metrics"]["selector"] = {"job": "dcgm-nowhere"}
    path = tmp_path / "capacity.yaml"
    path.write_text(yaml.safe_dump(spec))
    result = CliRunner().invoke(main, ["doctor", "--prometheus", prom.url, str(path)])
    assert "another exporter's series absent" in result.output, result.output
    assert "DCGM_FI_DEV_GPU_UTIL" in result.output, result.output

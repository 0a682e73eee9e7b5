"""genobs' rules on VictoriaMetrics: Debian's victoria-metrics 1.79 scraping simulated vLLM
exporters (its own -promscrape.config), vmalert evaluating the generated rule files against it
and writing the recorded series back, a real Alertmanager as vmalert's notifier."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from genobs.sim import Simulator
from tests.conftest import REPO
from tests.e2e_support import poll, render_variant, rules_of
from tests.vm_support import Alertmanager, VictoriaMetrics, VmAlert, running, scrape_config

pytestmark = pytest.mark.slow  # real servers on loopback

CHAT = REPO / "specs" / "chat.yaml"


def _rule_files(out) -> dict[str, bytes]:
    return {n: b for n, b in out.files.items() if n.startswith("prometheus/") and n.endswith(".rules.yaml")}


def test_vmalert_evaluates_every_generated_rule_without_error(tmp_path: Path):
    out, _ = render_variant(CHAT, tmp_path)
    recorded = {r.record for r in rules_of(out) if r.record}
    with Simulator("0.33.0", {"gpt-oss-120b": "healthy"}, request_rate=20, seed=1) as sim:
        sim.start(0)
        cfg = scrape_config("vllm-chat", [(f"127.0.0.1:{sim.port}", {"namespace": "llm-prod"})])
        with running(VictoriaMetrics(tmp_path / "vm", scrape=cfg), Alertmanager(tmp_path / "am")) as (vm, am):
            with running(VmAlert(tmp_path / "vmalert", vm.url, _rule_files(out), notifier=am.url)) as vmalert:
                poll(
                    lambda: vm.query('genobs:requests_finished:rate1m{model_name="gpt-oss-120b"}'),
                    time.monotonic() + 60,
                )
                time.sleep(3)  # a few evaluations of every group
                assert vmalert.rule_errors() == {}
                assert {g["name"] for g in vmalert.groups()} == {r.group for r in rules_of(out)}
                # the recorded series reach VictoriaMetrics under the names the rules give them
                stored = {s["metric"]["__name__"] for s in vm.query('{__name__=~"genobs:.+"}')}
                assert "genobs:ttft_seconds:bucket_rate1m" in stored
                assert stored <= recorded, stored - recorded

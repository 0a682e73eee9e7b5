"""genobs' rules on VictoriaMetrics: Debian's victoria-metrics 1.79 scraping simulated vLLM
exporters (its own -promscrape.config), vmalert evaluating the generated rule files against it
and writing the recorded series back, a real Alertmanager as vmalert's notifier."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from genobs.build import render_spec
from genobs.sim import Simulator
from tests.conftest import REPO
from tests.e2e_support import poll, rules_of
from tests.vm_support import Alertmanager, VictoriaMetrics, VmAlert, running, scrape_config

pytestmark = pytest.mark.slow  # real servers on loopback

CHAT = REPO / "specs" / "chat.yaml"


def _rule_files(out) -> dict[str, bytes]:
    """The rule files a vmalert user loads: the `victoriametrics` output (vmalert/), which leaves
    out keep_firing_for (Debian's vmalert 1.79 refuses it; the prometheus/ files carry it)."""
    return {n: b for n, b in out.files.items() if n.startswith("vmalert/") and n.endswith(".rules.yaml")}


def _on_vmalert(data: dict, tmp_path: Path):
    data["output"] = {"backend": "victoriametrics"}
    path = tmp_path / "chat.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return render_spec(path)


def test_vmalert_evaluates_every_generated_rule_without_error(tmp_path: Path):
    data = yaml.safe_load(CHAT.read_text())
    data["rate_window"], data["evaluation_interval"] = "1m", "1s"
    out = _on_vmalert(data, tmp_path)
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


# --- identities and alerts on vmalert ----------------------------------------------------------

HEALTHY, BROKEN = "m-healthy", "m-outage"
FAULT_AFTER = 70.0  # seconds of healthy traffic on the broken model before every first token takes 8-15 s
WINDOW = "1m"  # the test spec's rate window and shortest burn window (the shortest genobs allows)
LONG = "2m"  # the test spec's long burn window
OBJECTIVES = {"first-token": 0.99, "token-pace": 0.99, "availability": 0.995}
TOLERANCE = 1e-9
# A burn that must be 0 is `requests - good` over two bucket series. VictoriaMetrics makes the
# samples of one scrape searchable series by series, so an evaluation can read the +Inf bucket a
# scrape newer than the threshold's and record a sliver of errors; averaged into the long window it
# stayed for a minute at 0.0036 (0.36 % of the budget's rate; the slowest page burns at 1) in one
# run of seven. A zero burn may be that far from 0; a burn of exactly 100 is read where the good
# bucket does not move at all, and stays exact.
ZERO = 0.05


def _outage_spec(tmp_path: Path):
    """The chat spec on a 1m rate window and 1s evaluation, both models behind one selector,
    SLO windows of 1m and 2m (one burn-rate pair) and a 5s pending time on the TTFT alert."""
    burn = [{"severity": "critical", "long": LONG, "short": WINDOW, "factor": 14.4}]
    data = yaml.safe_load(CHAT.read_text())
    data["service"]["models"] = [HEALTHY, BROKEN]
    data["rate_window"] = WINDOW
    data["evaluation_interval"] = "1s"
    data.setdefault("alerts", {})["ttft"] = {"warning": "1s", "critical": "2.5s", "for": "5s"}
    for slo in data["slos"]:
        slo["burn_rates"] = burn
    return _on_vmalert(data, tmp_path)


def _values(vm: VictoriaMetrics, expr: str, start: float, end: float) -> dict[tuple, list[float]]:
    """model_name, slo -> every value of `expr` between start and end (1s steps)."""
    out: dict[tuple, list[float]] = {}
    for s in vm.query_range(expr, start, end):
        key = (s["metric"].get("model_name"), s["metric"].get("slo"))
        out.setdefault(key, []).extend(float(v) for _, v in s["values"])
    return out


def _assert_all(found: dict[tuple, list[float]], key: tuple, value: float, what: str) -> None:
    assert found.get(key), f"{what}: no samples for {key} (have {sorted(found)})"
    bad = [v for v in found[key] if abs(v - value) > (ZERO if value == 0 else TOLERANCE)]
    assert not bad, f"{what} {key}: {len(bad)} of {len(found[key])} samples differ from {value}: {bad[:5]}"


def test_slo_identities_hold_and_the_outage_pages_on_vmalert(tmp_path: Path):
    """A healthy model and one whose first tokens all take 8-15 s from FAULT_AFTER on, behind one
    selector, scraped by VictoriaMetrics every second; vmalert evaluates the spec's rules every
    second against it, with -search.latencyOffset making every rule read recorded series a few
    evaluations old. A healthy model burns 0 on every SLO and window (within ZERO); the outage
    burns exactly 1 / (1 - 0.99) = 100 on first-token once its windows are full, and 0 on token
    pace (within ZERO); errors never exceed requests, the unsuccessful rate is never negative. The TTFT burn
    and threshold alerts of the broken model reach the Alertmanager; nothing fires for the
    healthy one."""
    out = _outage_spec(tmp_path)
    healthy = Simulator("0.33.0", {HEALTHY: "healthy"}, request_rate=20, seed=3)
    broken = Simulator("0.33.0", {BROKEN: "ttft_degradation"}, request_rate=20, seed=4, fault_after=FAULT_AFTER)
    with healthy, broken:
        healthy.start(0)
        broken.start(0)
        targets = [(f"127.0.0.1:{s.port}", {"namespace": "llm-prod"}) for s in (healthy, broken)]
        vm_server = VictoriaMetrics(tmp_path / "vm", scrape=scrape_config("vllm-chat", targets))
        with running(vm_server, Alertmanager(tmp_path / "am")) as (vm, am):
            with running(VmAlert(tmp_path / "vmalert", vm.url, _rule_files(out), notifier=am.url)) as vmalert:
                fault_at = time.time() - broken.elapsed() + FAULT_AFTER
                # healthy phase: both models' windows full of healthy traffic
                time.sleep(max(0.0, fault_at - time.time() - 2))
                healthy_end = time.time() - 8  # what vmalert has written by now (latency offset + flush)
                healthy_start = healthy_end - 15
                for w in (f"rate{WINDOW}", f"rate{LONG}"):
                    burn = _values(vm, f"genobs:slo_burn_rate:{w}", healthy_start, healthy_end)
                    for model in (HEALTHY, BROKEN):
                        for slo in OBJECTIVES:
                            _assert_all(burn, (model, slo), 0.0, f"healthy burn {w}")
                assert vmalert.rule_errors() == {}

                # outage: wait until the broken model's long window holds only the outage
                poll(
                    lambda: any(
                        abs(float(s["value"][1]) - 100) < TOLERANCE
                        for s in vm.query(f'genobs:slo_burn_rate:rate{LONG}{{model_name="{BROKEN}",slo="first-token"}}')
                    ),
                    time.monotonic() + 240,
                    1.0,
                    "the broken model's first-token burn at 100",
                )
                full = time.time()
                paged = poll(lambda: _received(am, BROKEN), time.monotonic() + 60, 1.0, "the pages in Alertmanager")
                time.sleep(max(0.0, full + 15 - time.time()))
                end = time.time() - 8
                for w in (f"rate{WINDOW}", f"rate{LONG}"):
                    burn = _values(vm, f"genobs:slo_burn_rate:{w}", full, end)
                    _assert_all(burn, (BROKEN, "first-token"), 1 / (1 - OBJECTIVES["first-token"]), f"outage burn {w}")
                    _assert_all(burn, (BROKEN, "token-pace"), 0.0, f"outage token-pace burn {w}")
                    for slo in OBJECTIVES:
                        _assert_all(burn, (HEALTHY, slo), 0.0, f"healthy burn {w} during the outage")

                # the stored raw series hold no inter-token time above the token-pace threshold:
                # a token-pace burn above 0 is how an evaluation read them, not what was scraped
                span = f"{int(end - fault_at + FAULT_AFTER)}s"
                slow = vm.query(
                    f'sum(increase(vllm:inter_token_latency_seconds_bucket{{le="+Inf"}}[{span}])) - '
                    f'sum(increase(vllm:inter_token_latency_seconds_bucket{{le=~"0\\\\.10*"}}[{span}]))',
                    at=end,
                )
                assert slow and float(slow[0]["value"][1]) == 0, slow

                # over the whole run: the identities on every recorded sample
                start = fault_at - FAULT_AFTER
                violations = {
                    "errors > requests": f'genobs:slo_events:rate{WINDOW}{{event="errors"}} > ignoring (event) '
                    f'genobs:slo_events:rate{WINDOW}{{event="requests"}}',
                    "negative burn": '{__name__=~"genobs:slo_burn_rate:.+"} < 0',
                    "negative unsuccessful": f"genobs:requests_unsuccessful:rate{WINDOW} < 0",
                    "success ratio out of 0..1": f"genobs:request_success:ratio_rate{WINDOW} < 0 or "
                    f"genobs:request_success:ratio_rate{WINDOW} > 1",
                }
                for what, expr in violations.items():
                    assert vm.query_range(expr, start, end) == [], what
                assert vm.query_range(f"genobs:requests_unsuccessful:rate{WINDOW}", start, end), "no samples"

                names = {a["labels"]["alertname"] for a in paged}
                assert {"SloFirstTokenErrorBudgetBurnFast", "VllmTtftP99High"} <= names, names
                assert not _received(am, HEALTHY), "alerts for the healthy model"
                assert not [a for a in vmalert.alerts() if a["labels"].get("model_name") == HEALTHY]
                assert vmalert.rule_errors() == {}


def _received(am: Alertmanager, model: str) -> list[dict]:
    return [a for a in am.alerts() if a["labels"].get("model_name") == model]

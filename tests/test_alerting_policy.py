"""Every generated alert follows the written alerting policy (docs/alerting-policy.md):
a page (critical) only for a symptom users feel, named in its `protects` annotation, and
causes warn unless the spec raises them itself."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from genobs import naming
from genobs.catalog import load_catalog
from genobs.compiler import load_plan

REPO = Path(__file__).resolve().parents[1]
POLICY = (REPO / "docs" / "alerting-policy.md").read_text()
SIGNALS = yaml.safe_load((REPO / "genobs" / "data" / "signals.yaml").read_text())
CAPACITY = yaml.safe_load((REPO / "genobs" / "data" / "capacity.yaml").read_text())
PRESETS = yaml.safe_load((REPO / "genobs" / "data" / "presets.yaml").read_text())
SPECS = sorted((REPO / "specs").glob("*.yaml"))


def section(title: str) -> list[list[str]]:
    """The rows of the first table under the heading that starts with `title`."""
    part = POLICY.split(f"## {title}", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in part.splitlines() if line.startswith("|")][2:]
    return [[c.strip() for c in row.strip("|").split("|")] for row in rows]


def ticks(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


# the policy names pod-level alerts as vLLM does (VllmTtftP99High); other engines put their
# profile's prefix before the same key (SglangTtftP99High): the tables hold keys once
VLLM = load_catalog("vllm").alert_prefix


def _is_key(key: str) -> bool:
    return key in SIGNALS["alerts"] or key in CAPACITY["alerts"]


def policy_key(name: str) -> str:
    """A pod-level alert name of the policy's tables as its engine-neutral key (signals.yaml)."""
    key = name.removeprefix(VLLM)
    return key if _is_key(key) else name


def engine_name(key: str, prefix: str) -> str:
    """A key (or a Gateway* / Slo* name) of the policy's tables as the engine of `prefix` emits it."""
    return naming.alert(prefix, key) if _is_key(key) else key


PAGES = {ticks(row[0])[0]: [policy_key(n) for n in ticks(row[2])] for row in section("1.") if ticks(row[0])}
CAUSES = {name for row in section("2.") for name in ticks(row[0])}


def generated_alerts(spec: Path) -> list[dict]:
    out = []
    for f in sorted((REPO / "out" / spec.stem / "prometheus").glob("*.rules.yaml")):
        for group in yaml.safe_load(f.read_text())["groups"]:
            out += [r for r in group["rules"] if "alert" in r]
    return out


def test_the_policy_and_the_planner_name_the_same_symptoms() -> None:
    assert set(PAGES) == set(SIGNALS["symptoms"])
    assert all(not n.startswith(VLLM) for keys in PAGES.values() for n in keys), "a vLLM name that is no alert key"
    for name, alert in SIGNALS["alerts"].items():
        if "protects" in alert:
            assert name in PAGES[alert["protects"]], f"{name} pages for {alert['protects']}: list it in the policy"
        else:
            assert alert["signal"] in CAUSES, f"{name}: its signal {alert['signal']} is missing from the causes"
            assert "critical" not in alert["thresholds"], f"{name}: a cause must not page by default"


def test_presets_never_raise_a_cause() -> None:
    causes = {a["signal"] for a in SIGNALS["alerts"].values() if "protects" not in a}
    symptoms = {a["signal"] for a in SIGNALS["alerts"].values() if "protects" in a}
    for use_case, preset in PRESETS.items():
        for signal, levels in preset.get("alerts", {}).items():
            if signal in causes - symptoms:
                assert "critical" not in levels, f"preset {use_case} raises the cause {signal} to a page"


@pytest.mark.parametrize("spec", SPECS, ids=[s.stem for s in SPECS])
def test_every_page_protects_a_symptom(spec: Path) -> None:
    raised = {
        signal
        for signal, levels in (yaml.safe_load(spec.read_text()).get("alerts") or {}).items()
        if isinstance(levels, dict) and levels.get("critical") is not None
    }
    pages = [a for a in generated_alerts(spec) if a["labels"]["severity"] == "critical"]
    assert pages, f"{spec.name}: no alert pages at all"
    prefix = load_catalog(yaml.safe_load(spec.read_text())["service"].get("engine", "vllm")).alert_prefix
    texts = {key: SIGNALS["symptoms"][key] for key in PAGES}
    for a in generated_alerts(spec):
        name, protects = a["alert"], a["annotations"].get("protects")
        if a["labels"]["severity"] != "critical":
            assert protects is None, f"{name}: only pages carry `protects`"
            continue
        assert protects, f"{name} pages without saying which symptom it protects"
        if re.fullmatch(r"Slo\w+ErrorBudgetBurnFast", name):
            assert protects.startswith("objective: SLO "), protects
            continue
        if a["labels"]["signal"] in raised and protects.startswith("a cause the spec raised"):
            assert f"alerts.{a['labels']['signal']}.critical" in protects
            continue
        key = next((k for k, t in texts.items() if t == protects), None)
        assert key is not None, f"{name}: protects {protects!r}, not a symptom of the policy"
        allowed = {engine_name(n, prefix) for n in PAGES[key]}
        assert name in allowed, f"{name} pages for {key}, which the policy does not allow ({sorted(allowed)})"


def spec_text(alerts: str = "") -> str:
    return f"""version: genobs/v1
name: policy
service:
  engine: vllm
  engine_version: "0.33"
  selector: {{namespace: llm-prod, job: vllm}}
  models: [m]
use_case: batch
{alerts}
"""


def pages(text: str) -> tuple[set[str], tuple[str, ...]]:
    _, plan = load_plan(text=text, file="policy.yaml")
    return {a.name for a in plan.alerts if a.severity == "critical"}, plan.warnings


def test_causes_warn_unless_the_spec_raises_them() -> None:
    names, warnings = pages(spec_text())
    assert names == {"VllmTtftP99High", "VllmItlP99High", "VllmSuccessRatioLow", "VllmServingCapacityLost",
                     "VllmFleetNoProgress"}
    assert not [w for w in warnings if "pages on a cause" in w]
    names, warnings = pages(spec_text("alerts:\n  kv_cache: {critical: 99%}\n  queue_time: {warning: 1m}"))
    assert "VllmKvCacheSaturated" in names and "VllmQueueTimeP99High" not in names
    assert [w for w in warnings if "pages on a cause" in w] == [
        "alerts.kv_cache.critical: VllmKvCacheSaturated pages on a cause, not on a symptom users feel, because "
        "the spec sets its critical threshold (see docs/alerting-policy.md)"
    ]


def test_policy_names_follow_the_engine() -> None:
    """The tables name vLLM's alerts; an SGLang spec pages under the same keys with its own prefix."""
    _, plan = load_plan(text=spec_text().replace("engine: vllm", "engine: sglang").replace('"0.33"', '"0.5.23"'), file="p.yaml")
    names = {a.name for a in plan.alerts if a.severity == "critical"}
    assert names == {"SglangTtftP99High", "SglangItlP99High", "SglangServingCapacityLost", "SglangFleetNoProgress"}
    assert names <= {engine_name(n, "Sglang") for keys in PAGES.values() for n in keys}

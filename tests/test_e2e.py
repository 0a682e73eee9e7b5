"""End to end against a real Prometheus: simulated vLLM exporters (prometheus_client,
as vLLM serves them) scraped by Debian's Prometheus 2.42 with the rules genobs
generated for specs/disaggregated.yaml (rate_window 1m, evaluation 1s). Every rule
must evaluate, every recorded series and dashboard query must have data for the
healthy model, every injected fault must raise its alert, the healthy model none.

Prometheus 2.x negotiates OpenMetrics, so prometheus_client >= 0.23 sends `vllm_...`
names: one run uses `metric_names: underscore`, the other `colon` plus the relabel
snippet of `genobs scrape-config`."""

from __future__ import annotations

import contextlib
import math
import re
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from click.testing import CliRunner

from genobs.cli import main
from genobs.commands.scrape_config import relabel_configs
from genobs.sim import SCENARIOS, Simulator
from genobs.sim.scenarios import CLIENT_ONLY_SCENARIOS
from tests.conftest import REPO
from tests.e2e_support import (
    PROMETHEUS,
    PanelQuery,
    Prometheus,
    Rule,
    Target,
    dashboard_queries,
    fill_variables,
    free_port,
    poll,
    prometheus_config,
    render_variant,
    rules_of,
    stopping,
    target_level_records,
)

pytestmark = pytest.mark.slow  # real servers on loopback

SPEC = REPO / "specs" / "disaggregated.yaml"
HEALTHY = "m-healthy"
# scenario -> groups of `signal` label values; each group needs one alert active for the fault
EXPECTED: dict[str, tuple[frozenset[str], ...]] = {
    "ttft_degradation": (frozenset({"ttft"}),),
    "itl_degradation": (frozenset({"itl"}), frozenset({"output_speed_per_user"})),
    "queue_buildup": (frozenset({"queue_time", "waiting_requests"}),),
    "length_surge": (frozenset({"length_finish"}),),
    # clients that give up: 2xx answers no engine finishes (vLLM counts no abort for them)
    "abort_surge": (frozenset({"abort"}),),
    "success_drop": (frozenset({"success"}),),
    "kv_saturation": (frozenset({"kv_cache"}),),
    "preemption_storm": (frozenset({"preemptions"}),),
    "nixl_slowdown": (frozenset({"nixl_transfer"}),),
    "spec_acceptance_collapse": (frozenset({"spec_decode_acceptance"}),),
    "rss_leak": (frozenset({"rss_growth"}),),
    # counters flat while the gauges still show running requests: a hung engine
    "flat_zero_metrics": (frozenset({"engine_hung"}),),
    # one data-parallel engine (engine="1") hangs while the other serves: paired per engine
    "rank_hang": (frozenset({"engine_hung"}),),
    # the engines stop while they hold nothing: running and waiting read 0, but the API server still
    # answers (each client's give-up is a 2xx) while every engine counter is flat: a hang
    "idle_hang": (frozenset({"engine_hung"}),),
    # the scrape fails: up == 0, so the target-down warning (not metrics-absent, which needs up == 1)
    "exporter_down": (frozenset({"target_down"}),),
    # 5xx answers that never reach the engine count against success (and the availability SLO)
    "http_5xx": (frozenset({"success"}),),
}
# faults of the whole exporter process: a simulator (scrape target) each, checked per instance
PROCESS_FAULTS = ("rss_leak", "exporter_down", "idle_hang")
# http_5xx and abort_surge act on the whole API server too (a simulator of its own: vLLM serves one
# model per server), but are judged per model
OWN_EXPORTER = (*PROCESS_FAULTS, "http_5xx", "abort_surge")
# faults only the application sees (its network, its retries) leave every server's series healthy
MODEL_FAULTS = tuple(
    s for s in SCENARIOS if s != "healthy" and s not in OWN_EXPORTER and s not in CLIENT_ONLY_SCENARIOS
)
ACTIVE = ("pending", "firing")
# what each check waits for, counted from the first scrape of every target (Prometheus scrapes new
# targets some seconds after it starts, more on a loaded machine): the variant's 1m rate window
WINDOW = 60.0
# the healthy model's windows must be full before its silence means anything: a window + evaluations
WARMUP = WINDOW + 10.0
# a fault raises its alert (pending is enough) once its window shows it, down the chain of recording
# groups; the API server's unfinished answers need their series a whole rate window old
# (genobs:api_server_unfinished), a window after the first answer. The rest is room for a loaded machine's late scrapes and evaluations: a passing check
# returns as soon as it sees what it waits for
FAULT_DEADLINE = WINDOW + 60.0
DATA_DEADLINE = WINDOW + 60.0
# enough traffic that 0.2 % non-stop finishes stay well clear of the 99.5 % success warning in a 1m window
HEALTHY_RATE = 50.0


def test_scenario_map_covers_every_fault() -> None:
    assert set(EXPECTED) == set(SCENARIOS) - {"healthy"} - CLIENT_ONLY_SCENARIOS


@pytest.fixture(scope="module")
def prometheus_binary() -> str:
    if not Path(PROMETHEUS).exists():
        pytest.fail("the prometheus server is required: install Debian's 'prometheus' package (make test does)")
    return PROMETHEUS


@dataclass
class Run:
    """One Prometheus scraping simulators with one generated variant of the spec."""

    prom: Prometheus
    spec_path: Path
    spec: dict
    rules: list[Rule]
    dashboard: dict
    panels: list[PanelQuery]
    targets: dict[str, Target]
    target_level: set[str]
    notes: list[str] = field(default_factory=list)
    first_scrape: float = 0.0  # monotonic time by which every target had been scraped once

    @property
    def started(self) -> float:
        return self.prom.started

    def instance(self, target: str) -> str:
        return self.targets[target].instance

    @contextlib.contextmanager
    def explained(self):
        """On any failure print the tail of Prometheus' log (shown with the failing test)."""
        try:
            yield
        except BaseException:
            print(f"--- prometheus log ({self.prom.log_path}) ---\n{self.prom.log()}")
            print(f"--- prometheus.yml ---\n{self.prom.config_path.read_text()}")
            raise


@contextlib.contextmanager
def start_run(tmp: Path, metric_names: str, sims: dict[str, Simulator], relabel: bool):
    out, spec = render_variant(SPEC, tmp, metric_names=metric_names)
    selector = dict(spec["service"]["selector"])
    job = selector.pop("job")
    # the simulator plays the decode pool of a disaggregated fleet: its pods carry the decode role label
    roles = spec["service"].get("roles")
    target_labels = {**selector, roles["label"]: roles["decode"]} if roles else selector
    rule_files = {
        name.removeprefix("prometheus/"): data
        for name, data in out.files.items()
        if name.startswith("prometheus/") and name.endswith(".rules.yaml") and "/tests/" not in name
    }
    with stopping(list(sims.values())):
        for s in sims.values():
            s.start(port=0)
        targets = {name: Target(name, s, target_labels) for name, s in sims.items()}
        config = prometheus_config(job, list(targets.values()), relabel_configs() if relabel else None)
        prom = Prometheus(tmp, config, rule_files)
        with stopping([], prom):
            try:
                prom.start()
                # Prometheus scrapes new targets ~5 s after start (discovery updates are batched)
                poll(lambda: len(prom.query("up")) == len(targets), prom.started + 60, 0.5, "a first scrape")
            except BaseException:
                print(f"--- prometheus log ({prom.log_path}) ---\n{prom.log()}")
                raise
            first = time.monotonic()
            rules = rules_of(out)
            dash, panels = dashboard_queries(out)
            yield Run(prom, tmp / SPEC.name, spec, rules, dash, panels, targets, target_level_records(rules), first_scrape=first)


def _alerts_matching(run: Run, key: str, value: str) -> list[dict]:
    return [a for a in run.prom.alerts() if a["labels"].get(key) == value and a["state"] in ACTIVE]


def _describe(alerts: list[dict]) -> list[str]:
    return sorted(
        f"{a['labels'].get('alertname')}[{a['labels'].get('severity')}, signal={a['labels'].get('signal')}] {a['state']}"
        for a in alerts
    )


def check_rule_health(run: Run) -> None:
    expected = {}
    for r in run.rules:
        expected[r.group] = expected.get(r.group, 0) + 1

    def evaluated() -> list[dict] | None:
        groups = run.prom.rules()
        if {g["name"] for g in groups} != set(expected):
            return None
        if any(r["health"] == "unknown" for g in groups for r in g["rules"]):
            return None
        return groups

    groups = poll(evaluated, run.started + 60, 0.5, "every rule group loaded and evaluated")
    assert {g["name"]: len(g["rules"]) for g in groups} == expected
    bad = [
        f"{g['name']}: {r.get('name')} health={r['health']} lastError={r.get('lastError')!r}"
        for g in groups
        for r in g["rules"]
        if r["health"] != "ok" or r.get("lastError")
    ]
    assert not bad, "rules that do not evaluate cleanly:\n" + "\n".join(bad)


def _healthy_series(run: Run, rule: Rule) -> list[dict]:
    """The rule's recorded series for the healthy model, or, for per-target rules, the healthy target."""
    labels = dict(rule.labels)
    target_level = rule.record in run.target_level
    if not target_level:
        labels["model_name"] = HEALTHY
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    result = run.prom.query(f"{rule.record}{{{inner}}}")
    if not result and not target_level:
        # a per-target rule that also reads engine series (the API server's unfinished answers):
        # recorded without model_name, per instance
        inner = ",".join(f'{k}="{v}"' for k, v in sorted(rule.labels.items()))
        found = run.prom.query(f"{rule.record}{{{inner}}}")
        if found and not any("model_name" in s["metric"] for s in found):
            result, target_level = found, True
    if target_level and any("instance" in s["metric"] for s in result):
        result = [s for s in result if s["metric"].get("instance") == run.instance("healthy")]
    return result


# the simulator plays the decode pool of the disaggregated spec: the prefill pool's own
# latency rows (role=prefill) have no pods behind them here
PREFILL_POOL = "genobs:prefill_pool_"


def check_recording_rules(run: Run) -> None:
    missing = {
        (r.record, tuple(sorted(r.labels.items()))): r
        for r in run.rules
        if r.record and not r.record.startswith(PREFILL_POOL)
    }
    results: dict[tuple, list] = {}

    def all_have_data() -> bool:
        for key, rule in sorted(missing.items()):
            result = _healthy_series(run, rule)
            if result:
                results[key] = result
                del missing[key]
        return not missing

    with contextlib.suppress(TimeoutError):
        poll(all_have_data, run.first_scrape + DATA_DEADLINE, 1.0, "recorded series for the healthy model")
    assert not missing, f"recording rules without series for {HEALTHY} (or its target):\n" + "\n".join(
        f"{name}{dict(labels) or ''}" for name, labels in sorted(missing)
    )
    nan = sorted(
        f"{name}{dict(labels) or ''}"
        for (name, labels), res in results.items()
        if any(math.isnan(float(s["value"][1])) for s in res)
    )
    if nan:
        run.notes.append("NaN recorded series: " + ", ".join(nan))
        warnings.warn(f"recorded series that are NaN for {HEALTHY}: {nan}", stacklevel=1)


def _variable_values(run: Run) -> dict[str, str]:
    """A real value for every dashboard variable, read the way Grafana reads it."""
    values: dict[str, str] = {}
    for var in run.dashboard.get("templating", {}).get("list", []):
        name, kind = var["name"], var.get("type")
        if kind == "datasource":
            values[name] = "prometheus"
        elif kind == "query":
            query = var["query"] if isinstance(var["query"], str) else var["query"].get("query", "")
            m = re.fullmatch(r"\s*label_values\(\s*(?:(.+),\s*)?(\w+)\s*\)\s*", query)
            assert m, f"dashboard variable ${name}: cannot read query {query!r}"
            series, label = m.group(1), m.group(2)
            # chained variables read the values chosen before them, as Grafana fills them in
            series = fill_variables(series, values) if series else series
            found = run.prom.label_values(label, series)
            if name == "model_name":
                assert HEALTHY in found, f"dashboard variable $model_name does not offer {HEALTHY}: {query} -> {found}"
                values[name] = HEALTHY
            else:
                assert found, f"dashboard variable ${name} has no values: {query}"
                values[name] = found[0]
        else:
            current = var.get("current", {}).get("value")
            values[name] = current if isinstance(current, str) else "1m"
    return values


def check_panels(run: Run) -> None:
    values = poll(lambda: _try(_variable_values, run), run.first_scrape + DATA_DEADLINE, 1.0, "dashboard variable values")
    queries = {(q.panel, fill_variables(q.expr, values), q.legend) for q in run.panels if PREFILL_POOL not in q.expr}
    assert queries, "the dashboard has no queries"
    empty = set(queries)
    results: dict[tuple, list] = {}

    def all_have_data() -> bool:
        for item in sorted(empty):
            result = run.prom.query(item[1])
            if result:
                results[item] = result
                empty.discard(item)
        return not empty

    with contextlib.suppress(TimeoutError):
        poll(all_have_data, run.first_scrape + DATA_DEADLINE, 1.0, "panel data")
    assert not empty, f"dashboard queries without data for {HEALTHY}:\n" + "\n".join(
        f"{t}: {q}" for t, q, _ in sorted(empty)
    )
    problems = []
    for (title, query, legend), result in sorted(results.items()):
        others = {s["metric"].get("model_name") for s in result} - {HEALTHY, None}
        if others:
            problems.append(f"{title}: {query} with $model_name={HEALTHY} also returns models {sorted(others)}")
        for label in re.findall(r"\{\{\s*(\w+)\s*\}\}", legend):
            if not all(s["metric"].get(label) for s in result):
                have = sorted({k for s in result for k in s["metric"]})
                problems.append(
                    f"{title}: legend {legend!r} names label {label!r} that {query} does not return (labels: {have})"
                )
    assert not problems, "dashboard panels that show the wrong thing:\n" + "\n".join(problems)


def _try(fn, *args):
    """fn(*args), or None while it fails an assertion (for polling)."""
    try:
        return fn(*args)
    except AssertionError:
        return None


def check_fault_alert(run: Run, scenario: str) -> None:
    key, value = ("instance", run.instance(scenario)) if scenario in PROCESS_FAULTS else ("model_name", f"m-{scenario}")
    groups = EXPECTED[scenario]

    def raised() -> list[dict] | None:
        active = _alerts_matching(run, key, value)
        signals = {a["labels"].get("signal") for a in active}
        return active if all(g & signals for g in groups) else None

    try:
        poll(raised, run.first_scrape + FAULT_DEADLINE, 1.0, f"{scenario} alerts")
    except TimeoutError:
        seen = _describe(_alerts_matching(run, key, value))
        want = " and ".join("|".join(sorted(g)) for g in groups)
        pytest.fail(f"{scenario}: no alert with signal {want} pending/firing for {key}={value}; active: {seen}")


def check_alert_annotations(run: Run) -> set[str]:
    """Every label an annotation template names is on the alert; nothing renders as <no value> or an error."""
    problems, checked = [], set()
    for g in run.prom.rules():
        for r in g["rules"]:
            if r["type"] != "alerting" or not r["alerts"]:
                continue
            checked.add(r["name"])
            for alert in r["alerts"]:
                labels = alert["labels"]
                who = {k: v for k, v in labels.items() if k in ("model_name", "instance")}
                for key, template in r["annotations"].items():
                    for label in re.findall(r"\$labels\.(\w+)", template):
                        if not labels.get(label):
                            problems.append(
                                f"{r['name']}[{labels.get('severity')}] {who}: annotation {key} names $labels.{label}, "
                                f"which the alert does not carry (labels: {sorted(labels)}); renders as "
                                f"{alert['annotations'].get(key)!r}"
                            )
                    text = alert["annotations"].get(key, "")
                    if "<no value>" in text or "error expanding template" in text:
                        problems.append(f"{r['name']} {who}: annotation {key} renders as {text!r}")
    assert checked, "no active alert to check"
    assert not problems, "alert annotations that render wrong:\n" + "\n".join(sorted(set(problems)))
    return checked


def _rfc3339_seconds(text: str) -> float:
    """Prometheus' RFC 3339 timestamps (nanoseconds, Z) as Unix seconds."""
    from datetime import datetime

    head, _, frac = text.rstrip("Z").partition(".")
    whole = datetime.fromisoformat(head + "+00:00").timestamp()
    return whole + (float("0." + frac) if frac else 0.0)


def check_alert_values(run: Run) -> set[str]:
    """The $value a description prints is the series the plan (and the runbook) says is compared."""
    from genobs.compiler import build_plan
    from genobs.loader import load_spec

    plan = build_plan(load_spec(run.spec_path))
    compared = {(a.name, tuple(sorted(dict(a.labels).items()))): a.query for a in plan.alerts}
    problems, checked = [], set()
    for g in run.prom.rules():
        for r in g["rules"]:
            if r["type"] != "alerting" or not r["alerts"] or "$value" not in r["annotations"].get("description", ""):
                continue
            query = compared.get((r["name"], tuple(sorted(r["labels"].items()))))
            if not query:
                continue
            # the alert group may have read the recorded series one evaluation before the query does: look back 3s
            end = _rfc3339_seconds(r["lastEvaluation"])
            params = {"query": query, "start": end - 3, "end": end, "step": 0.25}
            result = run.prom.api("query_range", params)["result"]
            checked.add(r["name"])
            for alert in r["alerts"]:
                labels = alert["labels"]
                same = [s for s in result if all(labels.get(k) == v for k, v in s["metric"].items() if k != "__name__")]
                who = {k: v for k, v in labels.items() if k in ("model_name", "instance")}
                value = float(alert["value"])
                seen = sorted({float(v) for s in same for _, v in s["values"]})
                if not same:
                    problems.append(f"{r['name']} {who}: the compared series {query} has no series for the alert")
                elif not any(math.isclose(value, v, rel_tol=1e-6, abs_tol=1e-9) for v in seen):
                    problems.append(
                        f"{r['name']}[{labels.get('severity')}] {who}: $value is {value:g} but the compared series "
                        f"{query} is {', '.join(f'{v:g}' for v in seen)}; the description prints "
                        f"{alert['annotations'].get('description')!r}"
                    )
    assert checked, "no active alert with $value to check"
    assert not problems, "alerts whose $value is not the compared series:\n" + "\n".join(sorted(set(problems)))
    return checked


def run_doctor(run: Run, spec: Path, expect: int) -> tuple[int, str]:
    """doctor's report; asked again (for up to 15 s) while its exit code is not `expect` or it
    sees no fresh vLLM series at all: on a loaded machine a 1 s scrape can time out, which marks
    that target's series stale for a moment. A real defect persists; the last report is returned."""
    deadline = time.monotonic() + 15
    while True:
        result = CliRunner().invoke(main, ["doctor", "--prometheus", run.prom.url, str(spec)])
        assert "Traceback" not in result.output, result.output
        settled = result.exit_code == expect and "dialect: none: no vLLM series" not in result.output
        if settled or time.monotonic() > deadline:
            return result.exit_code, result.output
        time.sleep(1.0)


def write_variant(run: Run, tmp: Path, metric_names: str) -> Path:
    import yaml

    data = {**run.spec, "service": {**run.spec["service"], "metric_names": metric_names}}
    path = tmp / f"{metric_names}-{SPEC.name}"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


# --- run 1: underscore names, as Prometheus 2.x stores them from prometheus_client >= 0.23 ------------------


class TestUnderscoreDialect:
    """`metric_names: underscore`, no relabelling: the whole fleet with every fault."""

    @pytest.fixture(scope="class")
    @classmethod
    def run(cls, tmp_path_factory, prometheus_binary):
        tmp = tmp_path_factory.mktemp("e2e-underscore")
        sims = {
            "healthy": Simulator(models={HEALTHY: "healthy"}, seed=11, request_rate=HEALTHY_RATE),
            "faults": Simulator(models={f"m-{s}": s for s in MODEL_FAULTS}, seed=12),
            "rss_leak": Simulator(models={"m-rss_leak": "rss_leak"}, seed=13),
            # a few good scrapes before the exporter goes away (fault_after + 2 s)
            "exporter_down": Simulator(models={"m-exporter_down": "exporter_down"}, seed=14, fault_after=8.0),
            "http_5xx": Simulator(models={"m-http_5xx": "http_5xx"}, seed=15),
            "abort_surge": Simulator(models={"m-abort_surge": "abort_surge"}, seed=17),
            # hung from the start; its clients give up after 5 s (the API server then answers 2xx)
            "idle_hang": Simulator(models={"m-idle_hang": "idle_hang"}, seed=16, client_timeout=5.0),
        }
        with start_run(tmp, "underscore", sims, relabel=False) as run:
            yield run
            if run.notes:
                print("\n".join(run.notes))

    def test_rule_groups_load_and_evaluate(self, run: Run) -> None:
        with run.explained():
            check_rule_health(run)

    def test_recording_rules_have_data_for_healthy_model(self, run: Run) -> None:
        with run.explained():
            check_recording_rules(run)

    def test_dashboard_queries_have_data_for_healthy_model(self, run: Run) -> None:
        with run.explained():
            check_panels(run)

    @pytest.mark.parametrize("scenario", sorted(EXPECTED))
    def test_fault_raises_its_alert(self, run: Run, scenario: str) -> None:
        with run.explained():
            check_fault_alert(run, scenario)

    def test_alert_annotations_render_with_the_alerts_labels(self, run: Run) -> None:
        with run.explained():
            check_alert_annotations(run)

    def test_alert_value_is_the_compared_series(self, run: Run) -> None:
        with run.explained():
            check_alert_values(run)

    def test_doctor_finds_underscore_names_and_nothing_missing(self, run: Run) -> None:
        with run.explained():
            code, output = run_doctor(run, run.spec_path, expect=0)
            assert "dialect: underscore" in output, output
            assert code == 0, output

    def test_doctor_reports_missing_metrics_for_colon_spec(self, run: Run, tmp_path: Path) -> None:
        with run.explained():
            code, output = run_doctor(run, write_variant(run, tmp_path, "colon"), expect=1)
            assert code == 1, output
            assert "dialect: underscore" in output and "metric-name dialect mismatch" in output, output
            text = " ".join(output.split())  # hints are wrapped
            assert "metric_names: underscore" in text and "genobs scrape-config" in text, output
            missing = re.findall(r"^\s+(\S+)\s+Prometheus has (\S+)$", output, re.M)
            assert missing, output
            assert all(have == name.replace(":", "_") for name, have in missing), missing
            # up and the process series carry no colon: present in either dialect
            assert not re.search(r"^\s+(up|process_\w+|python_\w+)\s", output, re.M), output

    def test_no_warning_or_critical_alert_for_healthy_model(self, run: Run) -> None:
        with run.explained():
            time.sleep(max(0.0, run.first_scrape + WARMUP - time.monotonic()))
            alerts = [a for a in run.prom.alerts() if a["state"] in ACTIVE]
            loud = [a for a in alerts if a["labels"].get("severity") in ("critical", "warning")]
            healthy = [
                a
                for a in loud
                if a["labels"].get("model_name") == HEALTHY or a["labels"].get("instance") == run.instance("healthy")
            ]
            assert not healthy, f"alerts for the healthy model/target: {_describe(healthy)}"
            # alerts that name neither a model nor a target concern the whole fleet, the healthy model too
            fleet = [a for a in loud if "model_name" not in a["labels"] and "instance" not in a["labels"]]
            assert not fleet, f"fleet-wide alerts while the healthy target exports everything: {_describe(fleet)}"


# --- run 2: colon names restored by the relabel snippet of `genobs scrape-config` ------------------------------


class TestColonDialectWithRelabel:
    """`metric_names: colon` plus metric_relabel_configs: a subset (rules, recorded series, one fault)."""

    @pytest.fixture(scope="class")
    @classmethod
    def run(cls, tmp_path_factory, prometheus_binary):
        tmp = tmp_path_factory.mktemp("e2e-colon")
        sims = {
            "healthy": Simulator(models={HEALTHY: "healthy"}, seed=21, request_rate=HEALTHY_RATE),
            "faults": Simulator(models={"m-ttft_degradation": "ttft_degradation"}, seed=22),
        }
        with start_run(tmp, "colon", sims, relabel=True) as run:
            yield run

    def test_rule_groups_load_and_evaluate(self, run: Run) -> None:
        with run.explained():
            check_rule_health(run)

    def test_recording_rules_have_data_for_healthy_model(self, run: Run) -> None:
        with run.explained():
            check_recording_rules(run)

    def test_fault_raises_its_alert(self, run: Run) -> None:
        with run.explained():
            check_fault_alert(run, "ttft_degradation")

    def test_doctor_finds_colon_names_only(self, run: Run, tmp_path: Path) -> None:
        with run.explained():
            code, output = run_doctor(run, run.spec_path, expect=0)
            assert "dialect: colon" in output, output
            assert code == 0, output
            code, output = run_doctor(run, write_variant(run, tmp_path, "underscore"), expect=1)
            assert code == 1 and "metric_names: colon" in " ".join(output.split()), output


def test_doctor_unreachable_prometheus_is_a_clear_error() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    result = CliRunner().invoke(main, ["doctor", "--prometheus", url, str(SPEC)])
    assert result.exit_code == 2, result.output
    assert "cannot reach Prometheus" in result.output and "Traceback" not in result.output


def test_scrape_config_command_prints_relabel_snippet() -> None:
    import yaml

    result = CliRunner().invoke(main, ["scrape-config", "--job", "my-vllm", "--target", "10.0.0.1:8000"])
    assert result.exit_code == 0, result.output
    job = yaml.safe_load(result.output)["scrape_configs"][0]
    assert job["job_name"] == "my-vllm"
    assert job["static_configs"] == [{"targets": ["10.0.0.1:8000"]}]
    assert job["metric_relabel_configs"] == [
        {"source_labels": ["__name__"], "regex": "vllm_(.*)", "target_label": "__name__", "replacement": "vllm:$1"}
    ]
    from_spec = yaml.safe_load(CliRunner().invoke(main, ["scrape-config", str(SPEC)]).output)["scrape_configs"][0]
    assert from_spec["job_name"] == "vllm-dpd"
    assert from_spec["static_configs"][0]["labels"] == {"namespace": "llm-prod"}


def test_doctor_names_the_likely_cause_of_each_missing_metric() -> None:
    """Without a Prometheus: which hint each kind of absence gets."""
    from genobs.catalog import load_catalog
    from genobs.commands.doctor import classify

    cat = load_catalog()
    running, nixl, rss = (
        "vllm:num_requests_running",
        "vllm:nixl_xfer_time_seconds_bucket",
        "process_resident_memory_bytes",
    )
    needed = frozenset({"up", running, nixl, rss, "vllm:kv_cache_usage_perc"})
    present = {"up", "vllm:gpu_cache_usage_perc", "vllm_num_requests_running"}
    kinds = {m.metric: (m.kind, m.detail) for m in classify(needed, present, cat, frozenset({"disaggregated_prefill"}))}
    assert kinds[running] == ("dialect", "Prometheus has vllm_num_requests_running")
    assert kinds[nixl] == ("feature", "features.disaggregated_prefill")
    assert kinds[rss] == ("process", "")
    assert kinds["vllm:kv_cache_usage_perc"][0] == "version"
    assert "vllm:gpu_cache_usage_perc (vLLM 0.7.0 before 0.11.0)" in kinds["vllm:kv_cache_usage_perc"][1]
    nothing = classify(needed, set(), cat, frozenset())
    assert {m.kind for m in nothing} == {"no_target"}

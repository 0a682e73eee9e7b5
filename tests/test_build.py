"""Behaviour of `genobs build` on the example specs: every output exists, is
deterministic, matches the committed golden record and passes the real promtool."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import strategies as st

from genobs import yamlfast
from genobs.build import render_spec
from genobs.catalog import load_catalog, parse_version
from genobs.cli import main
from genobs.compiler import build_plan
from genobs.loader import load_spec
from genobs.promql import metric_names
from genobs.render.dashboard import flat_panels
from genobs.writer import dump_yaml, header
from tests.conftest import REPO, SPECS

SPEC_IDS = [p.stem for p in SPECS]


def test_every_use_case_example_exists():
    assert {p.stem for p in SPECS} >= {"chat", "rag", "agentic", "batch", "disaggregated"}


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_golden_record(spec: Path):
    """out/<name>/ is exactly what genobs generates now (refresh with `make golden`)."""
    out = render_spec(spec)
    committed = REPO / "out" / out.name
    on_disk = {str(p.relative_to(committed)) for p in committed.rglob("*") if p.is_file()}
    assert on_disk == set(out.files), "files differ from the golden record; run `make golden`"
    for rel, data in out.files.items():
        assert (committed / rel).read_bytes() == data, f"{rel} is stale; run `make golden`"


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_generated_yaml_has_no_anchors_or_aliases(spec: Path):
    """A reader of a generated file sees every value where it applies: PyYAML writes an object
    reached twice as `&id001` ... `*id001`, which promtool reads but people do not expect."""
    out = render_spec(spec)
    for rel, data in out.files.items():
        if rel.endswith((".yaml", ".yml")):
            events = yaml.parse(data.decode())
            shared = [e for e in events if isinstance(e, yaml.AliasEvent) or getattr(e, "anchor", None)]
            assert not shared, f"{rel}: YAML anchor or alias {shared[0]}"


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_build_is_deterministic(spec: Path):
    assert render_spec(spec).files == render_spec(spec).files


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, promtool: str) -> Path:
    """`genobs build --strict specs/`, checks included, once for every test below: one build of
    all the examples shares its promtool runs, eleven builds of one did not."""
    out = tmp_path_factory.mktemp("built")
    result = CliRunner().invoke(main, ["build", str(REPO / "specs"), "-o", str(out), "--strict"])
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_cli_build_writes_every_output_and_promtool_accepts_it(spec: Path, built: Path, promtool: str):
    name = yaml.safe_load(spec.read_text())["name"]
    target = built / name
    rules = sorted((target / "prometheus").glob("*.rules.yaml"))
    names = {r.name for r in rules}
    assert {"alerts.rules.yaml", "recording.rules.yaml"} <= names
    assert names <= {
        "alerts.rules.yaml",
        "recording.rules.yaml",
        "slo.rules.yaml",
        "capacity.rules.yaml",
        "gateway.rules.yaml",
        "gateway-slo.rules.yaml",
        "client.rules.yaml",
    }
    proc = subprocess.run(
        [promtool, "check", "rules", "--lint=all", "--lint-fatal", *map(str, rules)], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    dashboard = json.loads(next((target / "grafana").glob("*.json")).read_text())
    assert dashboard["uid"] == f"genobs-{name}"
    assert (target / "RUNBOOK.md").read_text().count("\n## ") >= 10


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_every_raw_metric_exists_for_the_engine_version(spec: Path):
    doc = load_spec(spec)
    plan = build_plan(doc)
    catalog = load_catalog(plan.engine)
    exported = catalog.names_for(parse_version(plan.engine_version)) | {"up"}
    # kube-state-metrics' documented HPA series, read by VllmAutoscalerAtMaxReplicas (not a vLLM metric)
    exported |= {
        "kube_horizontalpodautoscaler_status_current_replicas",
        "kube_horizontalpodautoscaler_spec_max_replicas",
    }
    # dcgm-exporter's default counters (features.gpu_metrics), from the fleet's hand copy, not genobs' data
    exported |= set(yaml.safe_load((REPO / "tests" / "fleet_metrics.yaml").read_text())["dcgm"].values())
    gw = doc.spec.gateway
    if gw is not None:  # the gateway's own series (tests/test_gateway.py checks them against its catalog rows)
        gw_catalog = load_catalog(gw.engine)
        exported |= gw_catalog.names_for(
            parse_version(gw.engine_version) if gw.engine_version else gw_catalog.max_version
        )
    cl = doc.spec.client
    if cl is not None:  # the application's OpenTelemetry GenAI series (tests/test_client.py)
        cl_catalog = load_catalog("otel-genai", cl.otel.translation)
        exported |= cl_catalog.names_for(parse_version(cl.conventions) if cl.conventions else cl_catalog.max_version)
    recorded = {r.record for r in plan.recording_rules}
    for rule in (*plan.recording_rules, *plan.alerts):
        for name in metric_names(rule.expr):
            assert name in exported or name in recorded, f"{name} not exported by {plan.engine} {plan.engine_version}"
    panel_exprs = [t.expr for row in plan.dashboard.rows for p in row.panels for t in p.targets]
    for expr in panel_exprs:
        # panels read recorded series only
        assert metric_names(expr.replace("$", "")) <= recorded, expr


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_every_alert_has_labels_annotations_and_a_runbook_section(spec: Path):
    out = render_spec(spec)
    runbook = out.files["RUNBOOK.md"].decode()
    anchors = {line[3:].strip().lower() for line in runbook.splitlines() if line.startswith("## ")}
    alerts = yaml.safe_load(out.files["prometheus/alerts.rules.yaml"])["groups"][0]["rules"]
    assert alerts
    for a in alerts:
        assert a["labels"]["severity"] in {"critical", "warning", "info"}
        assert a["labels"]["signal"]
        pages = {"protects"} if a["labels"]["severity"] == "critical" else set()
        assert set(a["annotations"]) == {"summary", "description", "runbook_url"} | pages
        assert "{{ $value" in a["annotations"]["description"] or a["alert"].endswith("MetricsAbsent")
        assert a["annotations"]["runbook_url"].split("#")[1] in anchors


def test_signal_vocabulary_present_where_it_applies():
    signals = {}
    unobservable = {}  # signals the spec's engine cannot observe (a printed capability line instead)
    for spec in SPECS:
        plan = build_plan(load_spec(spec))
        signals[plan.name] = {a.signal for a in plan.alerts}
        unobservable[plan.name] = {s for s, _ in load_catalog(plan.engine).not_observable}
    common = {
        "ttft",
        "itl",
        "e2e",
        "queue_time",
        "length_finish",
        "abort",
        "success",
        "kv_cache",
        "preemptions",
        "waiting_requests",
        "rss_growth",
        "metrics_absent",
    }
    for name, found in signals.items():
        assert common - unobservable[name] <= found, (name, common - found)
    assert {"nixl_transfer", "spec_decode_acceptance", "output_speed_per_user"} <= signals["disaggregated"]
    assert "output_speed_per_user" in signals["chat"]
    assert "output_speed_per_user" not in signals["rag"]  # disabled in that spec


def test_schema_file_is_current():
    from genobs.spec import json_schema

    committed = json.loads((REPO / "genobs.schema.json").read_text())
    assert committed == json_schema(), "regenerate with: genobs schema > genobs.schema.json"


def test_module_entry_point_runs():
    proc = subprocess.run([sys.executable, "-m", "genobs", "--version"], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0 and "genobs" in proc.stdout


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_dashboard_panels_have_units_descriptions_and_do_not_overlap(spec: Path):
    out = render_spec(spec)
    dashboard = json.loads(next(v for k, v in out.files.items() if k.startswith("grafana/")))
    assert len({p["id"] for p in flat_panels(dashboard)}) == len(flat_panels(dashboard))
    titles = []
    # on screen: the open rows' panels, and a collapsed row's panels once it alone is opened
    collapsed = [i for i, p in enumerate(dashboard["panels"]) if p.get("collapsed")]
    for opened in (None, *collapsed):
        cells: set[tuple[int, int]] = set()
        shift = 0
        for i, row_or_panel in enumerate(dashboard["panels"]):
            shown = [row_or_panel]
            if i == opened:
                shown += row_or_panel["panels"]
                shift = max(c["gridPos"]["y"] + c["gridPos"]["h"] for c in row_or_panel["panels"]) - (
                    row_or_panel["gridPos"]["y"] + 1
                )
            for p in shown:
                g = p["gridPos"]
                assert g["x"] + g["w"] <= 24
                top = g["y"] + (shift if p is row_or_panel and i != opened else 0)
                for x in range(g["x"], g["x"] + g["w"]):
                    for y in range(top, top + g["h"]):
                        assert (x, y) not in cells, f"{p['title']} overlaps another panel"
                        cells.add((x, y))
    for p in flat_panels(dashboard):
        if p["type"] == "row":
            titles.append(p["title"])
            continue
        assert p["description"], p["title"]
        # a heatmap keeps its unit on the y axis of its options
        unit = p.get("fieldConfig", {}).get("defaults", {}).get("unit") or p["options"].get("yAxis", {}).get("unit")
        assert unit, p["title"]
        for t in p["targets"]:
            assert t["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
    # per-user panels stand in their own row, apart from system throughput
    assert "Per-user experience (tok/s/user)" in titles and "System throughput (tok/s)" in titles
    variables = [v["name"] for v in dashboard["templating"]["list"]]
    assert variables[0] == "datasource"
    own = yaml.safe_load(spec.read_text())["service"].get("group_by", ["model_name"])
    service = yaml.safe_load(spec.read_text())["service"]
    rank = load_catalog(service.get("engine", "vllm")).rank_label  # SGLang: no rank label shared by its series
    # the drill-down's pool variable is the spec's role label (SGLang P/D: engine_type)
    drill = ([service["roles"]["label"]] if "roles" in service else []) + ["instance", *([rank] if rank else [])]
    assert variables[1:] == [*own, *(v for v in drill if v not in own)]


_TRICKY = list(
    "abz09 :#-'\"\\{}[]|>&*!%@`,?\t\n\r\x00\x1b\x7f\x85\x9f\xa0é中\u2028\u2029\u3000\ud7ff\ue000\ufeff\uffff😀"
)


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_libyaml_and_pure_python_emitters_write_the_same_rules_and_tests(spec: Path):
    from genobs.writer import dump_yaml

    plan = build_plan(load_spec(spec))
    from genobs.render.rules import render_rule_files

    for data in [*render_rule_files(plan).values(), *(doc for _, doc in plan.unit_tests)]:
        assert dump_yaml(data, plan.name) == dump_yaml(data, plan.name, pure=True)
        # written by genobs' own writer, not handed back to PyYAML
        assert (header(plan.name) + yamlfast.dump(data)).encode() == dump_yaml(data, plan.name, pure=True)


_PRINTABLE = list("abz09 :#-'\"\\{}[]|>&*!%@`,?.~=<\n\xa0é中\u3000\ud7ff\ue000\uffef\ud800")  # what the writer writes itself
_SCALARS = st.one_of(
    st.text(alphabet=st.sampled_from(_TRICKY), max_size=12),
    st.text(alphabet=st.sampled_from(_PRINTABLE), max_size=12),
    st.sampled_from(
        [
            "",
            "1",
            "0x1F",
            "1e3",
            "1_000",
            "yes",
            "No",
            "~",
            "null",
            "<<",
            "=",
            "2026-12-06",
            ".5",
            "-.inf",
            "a: b",
            "a:b",
            "a #b",
            "a#b",
            "- a",
            "-a",
            "? a",
            "[x]",
            "x]",
            "'q'",
            "q'q",
            "---x",
            "...",
            "a\nb",
            " a\nb",
            "a \nb",
            "a\n b",
            "a\n",
            "\na",
            "x" * 130,
            "é中",
        ]
    ),
    st.integers(min_value=-(10**20), max_value=10**20),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
)
_KEYS = st.one_of(
    st.text(alphabet=st.sampled_from([c for c in _PRINTABLE if c != "\n"]), min_size=1, max_size=8),
    st.sampled_from(["expr", "a b", "1", "yes", "x" * 99, "x" * 100, ""]),
)
_DOCUMENTS = st.recursive(
    _SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_KEYS, inner, max_size=4)),
    max_leaves=24,
)


def test_genobs_yaml_writer_writes_what_pyyaml_writes_or_hands_the_document_back():
    """genobs/yamlfast.py on random documents (nested mappings and lists of tricky text, numbers,
    booleans, None): it writes PyYAML's bytes or raises Unsupported, and the bytes dump_yaml
    returns never depend on which writer wrote them."""
    from hypothesis import given, settings

    written = []

    @settings(max_examples=1500, derandomize=True, database=None, deadline=None)
    @given(st.dictionaries(_KEYS, _DOCUMENTS, min_size=1, max_size=4))
    def check(data: dict) -> None:
        pure = dump_yaml(data, "s", pure=True)
        try:
            fast = (header("s") + yamlfast.dump(data)).encode("utf-8")
        except (yamlfast.Unsupported, UnicodeEncodeError):  # a lone surrogate: dump_yaml hands it back
            written.append(False)
        else:
            written.append(True)
            assert fast == pure, repr(data)
        assert dump_yaml(data, "s") == pure, repr(data)

    check()
    assert sum(written) > len(written) / 5, (sum(written), len(written))  # a good share went through genobs' writer


def test_libyaml_and_pure_python_emitters_agree_on_any_text():
    """Text libyaml writes differently (astral characters, controls, CR, NEL, trailing blank
    lines, odd keys) falls back to the pure-Python emitter: the bytes never depend on which
    emitter PyYAML was built with."""
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from genobs.writer import dump_yaml

    @settings(max_examples=400, derandomize=True, database=None, deadline=None)
    @given(st.text(alphabet=st.sampled_from(_TRICKY), max_size=12))
    def check(text: str) -> None:
        for data in (
            {"k": text, "z": 1},
            {"groups": [{"name": text, "rules": [{"expr": text, "labels": {"a": text, text or "x": 1.5}}]}]},
            {"l": [text, None, True, 1e300, -0.0, 0.1]},
            {text: {text: [text]}},
        ):
            assert dump_yaml(data, "s") == dump_yaml(data, "s", pure=True), repr(text)

    check()


def test_runbook_is_the_same_from_the_template_cache_and_past_a_broken_one(tmp_path: Path):
    """The compiled runbook template is kept in Jinja2's bytecode cache; a cache file that was
    cut short or overwritten is skipped, never a failed build or a different runbook."""
    from genobs.compiler import load_plan
    from genobs.render import runbook

    _, plan = load_plan(REPO / "specs" / "chat.yaml")
    uncached = runbook.environment().get_template("runbook.md.j2").render(plan=plan, spec_file="chat")
    assert runbook.render_runbook(plan, "chat") == uncached

    def render() -> str:
        env = runbook.environment(runbook._bytecode_cache(str(tmp_path)))
        return env.get_template("runbook.md.j2").render(plan=plan, spec_file="chat")

    assert render() == uncached
    (cached,) = tmp_path.iterdir()
    assert render() == uncached  # read from the cache file this time
    for broken in (b"", cached.read_bytes()[:40], b"j2\x00garbage" * 10):
        cached.write_bytes(broken)
        assert render() == uncached


def test_the_inlined_representer_writes_what_pyyaml_writes_aliases_and_subclasses_included():
    """writer._Dumper inlines PyYAML's representer for str, int, None, dict and list: shared
    dicts and lists still become anchors and aliases (the generated tests share input series),
    and bools and floats take PyYAML's own path."""
    from genobs.writer import _libyaml_safe, dump_yaml

    shared = {"series": 'up{job="x"}', "values": "0+0x38"}
    items = [1, 2]
    data = {
        "tests": [{"input_series": [shared, shared, {"s": items}], "again": items}, {"more": [shared]}],
        "flags": [True, False, None, 0, -1, 10**20, 1.5, 1e-05, float("inf")],
        "multi": "a\nb",
    }
    assert _libyaml_safe(data)  # written by libyaml, through the inlined representer
    fast = dump_yaml(data, "x")
    assert fast == dump_yaml(data, "x", pure=True)
    assert b"&id001" in fast and b"*id001" in fast
    assert yaml.safe_load(fast)["tests"][0]["input_series"][0] == shared


_JSON_SCALARS = st.one_of(
    st.text(alphabet=st.sampled_from(_TRICKY), max_size=12),
    st.integers(min_value=-(10**30), max_value=10**30),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
    st.none(),
)
_JSON_DOCUMENTS = st.recursive(
    _JSON_SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.lists(inner, max_size=3).map(tuple),
        st.dictionaries(st.text(alphabet=st.sampled_from(_TRICKY), max_size=6), inner, max_size=4),
        st.dictionaries(st.integers(0, 3), inner, min_size=1, max_size=2),  # keys json.dumps converts: its own path
    ),
    max_leaves=30,
)


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_dashboard_json_is_what_json_dumps_writes(spec: Path):
    from genobs.render.dashboard import render_dashboard
    from genobs.writer import dump_json

    dashboard = render_dashboard(build_plan(load_spec(spec)).dashboard)
    written = dump_json(dashboard)
    assert written == (json.dumps(dashboard, sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode()


def test_json_writer_writes_what_json_dumps_writes_on_any_document():
    from hypothesis import given, settings

    from genobs.writer import dump_json

    @settings(max_examples=1000, derandomize=True, database=None, deadline=None)
    @given(_JSON_DOCUMENTS)
    def check(data: object) -> None:
        assert dump_json(data) == (json.dumps(data, sort_keys=True, indent=2, ensure_ascii=False) + "\n").encode()

    check()


@pytest.mark.parametrize("spec", SPECS, ids=SPEC_IDS)
def test_dashboard_data_is_what_grafanalibs_json_encoder_gives(spec: Path):
    """render_dashboard reads grafanalib's objects through to_json_data() itself instead of
    writing JSON text with grafanalib's encoder and parsing it again: the same data."""
    from grafanalib._gen import DashboardEncoder

    from genobs.render.dashboard import grafanalib_dashboard, plain_json

    board = grafanalib_dashboard(build_plan(load_spec(spec)).dashboard)
    assert plain_json(board) == json.loads(json.dumps(board.to_json_data(), cls=DashboardEncoder))
    assert json.dumps(plain_json(board)) == json.dumps(json.loads(json.dumps(board, cls=DashboardEncoder)))

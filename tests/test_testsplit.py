"""The build's check runs each generated test group alone over the rules it reads
(genobs/testsplit.py): it must assert everything the whole test files assert, pass where
they pass and fail where they fail, with the real promtool."""

from __future__ import annotations

import datetime
import json
import shutil
import threading
import time
from pathlib import Path

import pytest
import yaml

from genobs import promtool, testsplit
from genobs.build import render_spec
from genobs.checks import Checks, Job, check_jobs

REPO = Path(__file__).resolve().parents[1]
SPECS = sorted((REPO / "specs").glob("*.yaml"))


def _write(out, root: Path) -> Path:
    target = root / out.name
    for rel, data in out.files.items():
        (target / rel).parent.mkdir(parents=True, exist_ok=True)
        (target / rel).write_bytes(data)
    return target


def _assertions(doc: dict) -> list[tuple]:
    return sorted(
        (g["name"], t.get("alertname") or t.get("expr"), t["eval_time"], repr(t.get("exp_alerts", t.get("exp_samples"))))
        for g in doc["tests"]
        for t in g.get("alert_rule_test", []) + g.get("promql_expr_test", [])
    )


# every example but chat is slow: the quick loop's checked build of specs/ (tests/test_build.py)
# runs the same split groups
@pytest.mark.parametrize(
    "spec", [pytest.param(p, marks=() if p.stem == "chat" else pytest.mark.slow) for p in SPECS], ids=[p.stem for p in SPECS]
)
def test_split_groups_assert_everything_over_fewer_rules_and_pass(spec: Path, tmp_path: Path, promtool: str):
    target = _write(render_spec(spec), tmp_path)
    prometheus = target / "prometheus"
    total_rules = sum(len(g["rules"]) for f in prometheus.glob("*.rules.yaml") for g in yaml.safe_load(f.read_text())["groups"])
    for test in sorted((prometheus / "tests").glob("*.yaml")):
        whole = yaml.safe_load(test.read_text())
        parts = testsplit.split_parts(prometheus, test.relative_to(prometheus), target.name)
        assert parts is not None and len(parts) == len(whole["tests"])
        found = []
        for part in (p.path for p in parts):
            doc = yaml.safe_load(part.read_text())
            found += _assertions(doc)
            home = part.parent.parent
            rules = [yaml.safe_load((home / "tests" / f).read_text())["groups"] for f in doc["rule_files"]]
            assert sum(len(g["rules"]) for groups in rules for g in groups) <= total_rules
        assert sorted(found) == _assertions(whole)
    jobs = check_jobs(target, target.name, split=True)
    results = [job() for job in jobs]
    assert all(r.ok for r in results), [r.output[-2000:] for r in results if not r.ok]


@pytest.mark.parametrize("breakage", ["annotation", "recorded value", "missing alert"])
def test_a_wrong_expectation_fails_the_split_check(breakage: str, tmp_path: Path, promtool: str):
    spec = next(p for p in SPECS if p.stem == "chat")
    target = _write(render_spec(spec), tmp_path)
    test = target / "prometheus" / "tests" / "alerts.test.yaml"
    doc = yaml.safe_load(test.read_text())
    group = next(g for g in doc["tests"] if g.get("promql_expr_test"))
    if breakage == "annotation":
        case = next(t for t in group["alert_rule_test"] if t["exp_alerts"])
        case["exp_alerts"][0]["exp_annotations"]["summary"] += "!"
    elif breakage == "recorded value":
        group["promql_expr_test"][0]["exp_samples"][0]["value"] *= 1.5
    else:
        case = next(t for t in group["alert_rule_test"] if t["exp_alerts"])
        case["exp_alerts"] = []
    test.write_text(yaml.safe_dump(doc, sort_keys=False))
    results = [job() for job in check_jobs(target, target.name, split=True)]
    failed = [r for r in results if not r.ok]
    assert len(failed) == 1 and "FAILED" in failed[0].output


def test_a_rule_reading_alerts_is_not_split(tmp_path: Path):
    prometheus = tmp_path / "x" / "prometheus"
    (prometheus / "tests").mkdir(parents=True)
    rules = {"groups": [{"name": "g", "rules": [{"alert": "A", "expr": "up == 0"}, {"alert": "B", "expr": "ALERTS > 0"}]}]}
    (prometheus / "a.rules.yaml").write_text(yaml.safe_dump(rules))
    test = {"rule_files": ["../a.rules.yaml"], "tests": [{"interval": "1m", "input_series": [], "alert_rule_test": []}]}
    (prometheus / "tests" / "t.yaml").write_text(yaml.safe_dump(test))
    assert testsplit.split_parts(prometheus, Path("tests/t.yaml"), "x") is None


def test_split_check_runs_on_the_private_copy_only(tmp_path: Path, promtool: str):
    """check_jobs(split=True) writes beside the files it checks: only the build's copy uses it."""
    target = _write(render_spec(next(p for p in SPECS if p.stem == "chat")), tmp_path)
    copy = tmp_path / "copy"
    shutil.copytree(target, copy)
    assert all(job().ok for job in check_jobs(copy, "chat", split=True))
    assert (copy / testsplit.SPLIT).is_dir()
    assert all(job().ok for job in check_jobs(target, "chat"))
    assert not (target / testsplit.SPLIT).exists()


@pytest.mark.parametrize("spec", SPECS, ids=[p.stem for p in SPECS])
def test_the_documents_the_split_starts_from_are_what_the_files_say(spec: Path):
    """The build splits the tests from Output.documents instead of parsing its own bytes back:
    that is only the same check if every rule and test file reads back as that data."""
    out = render_spec(spec)
    assert {rel for rel in out.files if rel.startswith("prometheus/") and rel.endswith(".yaml")} == set(out.documents)
    for rel, data in out.documents.items():
        assert yaml.safe_load(out.files[rel]) == data, rel


def test_split_files_from_documents_equal_split_files_from_the_bytes(tmp_path: Path):
    spec = next(p for p in SPECS if p.stem == "chat")
    out = render_spec(spec)
    from_bytes, from_docs = _write(out, tmp_path / "a"), _write(out, tmp_path / "b")
    cache = {(from_docs / rel).resolve(): data for rel, data in out.documents.items()}
    test = Path("tests/alerts.test.yaml")
    a = testsplit.split_parts(from_bytes / "prometheus", test, "chat")
    b = testsplit.split_parts(from_docs / "prometheus", test, "chat", cache)
    assert a and b and [p.cost for p in a] == [p.cost for p in b]
    for pa, pb in zip(a, b):
        for fa in sorted(pa.path.parent.parent.rglob("*.yaml")):
            fb = pb.path.parent.parent / fa.relative_to(pa.path.parent.parent)
            assert fa.read_bytes() == fb.read_bytes(), fa


def test_private_files_are_json_that_yaml_reads_as_the_same_data(tmp_path: Path):
    data: dict = {"a": [1, 2.5, 1e-05, True, None, "x: y", 'q"\\', "é\n\t\u2028 😀", "\x7f\x85 \u2029 \ufeffz"], "b": {"c": "0+0x38"}}
    testsplit._write(tmp_path / "t.yaml", data, "x")
    text = (tmp_path / "t.yaml").read_text(encoding="utf-8")
    assert text.startswith("{") and json.loads(text) == data
    # PyYAML reads JSON as YAML 1.1 (1e-05 without a dot is a string there); promtool's Go YAML reads floats
    reread = yaml.safe_load(text)
    assert reread["b"] == data["b"] and reread["a"][:2] == data["a"][:2] and reread["a"][3:] == data["a"][3:]


@pytest.mark.parametrize(
    "data",
    [
        {"v": float("nan")},
        {"v": float("inf")},
        {1: "int key"},
        {"x": [{True: "bool key"}]},
        {"d": datetime.date(2024, 1, 2)},
    ],
    ids=["nan", "inf", "int key", "nested bool key", "date"],
)
def test_data_json_cannot_hold_goes_through_the_yaml_emitter(data: dict, tmp_path: Path):
    testsplit._write(tmp_path / "t.yaml", data, "x")
    text = (tmp_path / "t.yaml").read_text(encoding="utf-8")
    assert text.startswith("# generated by genobs")
    loaded = yaml.safe_load(text)
    assert repr(loaded) == repr(data)  # repr: nan != nan


def _part(cost: float, i: int) -> testsplit.Part:
    return testsplit.Part(Path(f"g{i}"), cost)


def test_chunks_put_each_group_in_one_run_in_order_of_about_equal_cost():
    parts = [_part(c, i) for i, c in enumerate([1650, 1450, 320, 200, 40, 70, 50, 50, 70, 2570])]
    runs = testsplit.chunks(parts)
    assert len(runs) == round(sum(p.cost for p in parts) / testsplit.CHUNK) == 3
    assert sorted(p.path.name for run in runs for p in run) == sorted(p.path.name for p in parts)
    for run in runs:
        assert run == sorted(run, key=parts.index)
    loads = sorted(sum(p.cost for p in run) for run in runs)
    assert loads[-1] <= max(p.cost for p in parts) + 400  # the longest group alone bounds the longest run
    assert testsplit.chunks([_part(10, 0), _part(20, 1)]) == [[_part(10, 0), _part(20, 1)]]
    assert testsplit.chunks([]) == []


def test_a_group_with_a_later_eval_time_or_more_rules_costs_more():
    case = {"input_series": [], "alert_rule_test": [{"eval_time": "10m"}], "promql_expr_test": [{"eval_time": "38m"}]}
    assert testsplit._cost(case, 10, 120) > testsplit._cost({**case, "promql_expr_test": []}, 10, 120)
    assert testsplit._cost(case, 20, 120) > testsplit._cost(case, 10, 120)
    assert testsplit._cost({"alert_rule_test": [{"eval_time": "1000000000y"}]}, 5, 60) < float("inf")


def test_checks_start_the_most_expensive_queued_run_first():
    started: list[str] = []
    gate = threading.Event()

    def run(name: str, wait: bool = False):
        def job() -> promtool.Result:
            started.append(name)
            if wait:
                gate.wait(10)
            return promtool.Result(True, name)

        return job

    with Checks(workers=1) as checks:
        checks.enqueue([Job(run("first", wait=True), cost=1)])
        while not started:
            time.sleep(0.01)
        checks.enqueue([Job(run("small"), cost=5), Job(run("large"), cost=500), Job(run("medium"), cost=50)])
        gate.set()
        results = checks.results()
    assert started == ["first", "large", "medium", "small"]
    assert [r.output for r in results] == ["first", "small", "large", "medium"]  # in submission order


def test_a_broken_rule_no_test_reads_still_fails_the_check_naming_file_and_rule(tmp_path: Path, promtool: str):
    """The split runs only the rules the tests read; the check still lints and parses every rule
    (and a rule the split cannot parse sends the tests to promtool unsplit, which names it too)."""
    out = render_spec(next(p for p in SPECS if p.stem == "chat"))
    rel = "prometheus/recording.rules.yaml"
    doc = yaml.safe_load(out.files[rel])
    groups = doc["groups"]
    groups[0]["rules"].append({"record": "genobs:unread:broken", "expr": "sum(rate(vllm:num_requests_running[5m])"})
    files = {**out.files, rel: yaml.safe_dump(doc, sort_keys=False).encode()}
    broken = type(out)(out.name, out.spec_file, files, out.warnings, {**out.documents, rel: doc})
    with Checks() as checks:
        checks.submit(broken)
        failed = [r for r in checks.results() if not r.ok]
    assert failed and any(r.output.startswith("Checking ") for r in failed)  # promtool check rules
    for r in failed:
        assert "recording.rules.yaml" in r.output and '"genobs:unread:broken": could not parse' in r.output


@pytest.mark.usefixtures("promtool")
def test_outputs_share_promtool_runs_and_a_failure_names_only_what_failed(monkeypatch):
    """Several specs' test groups go into shared runs (a few groups each at least, some holding
    groups of two specs) and one check rules run; a wrong expectation in one spec still
    fails the check, and the output shows that group alone."""
    runs: list[list[str]] = []
    real = promtool._run

    def counted(args: list[str], cwd: Path | None = None) -> promtool.Result:
        runs.append(args)
        return real(args, cwd)

    monkeypatch.setattr(promtool, "_run", counted)
    outs = [render_spec(p) for p in SPECS if p.stem in ("chat", "rag", "batch")]
    rag = next(o for o in outs if o.name == "rag")
    rel = "prometheus/tests/alerts.test.yaml"
    doc = yaml.safe_load(rag.files[rel])
    case = next(t for g in doc["tests"] for t in g["alert_rule_test"] if t["exp_alerts"])
    case["exp_alerts"] = []
    files, documents = {**rag.files, rel: yaml.safe_dump(doc).encode()}, {**rag.documents, rel: doc}
    broken = type(rag)(rag.name, rag.spec_file, files, documents=documents)
    with Checks(workers=2) as checks:
        for out in outs:
            checks.submit(broken if out is rag else out)
        results = checks.results()
    test_runs = [a[2:] for a in runs if a[:2] == ["test", "rules"]]
    groups = sum(len(o.documents[r]["tests"]) for o in outs for r in o.documents if r.startswith("prometheus/tests/"))
    assert len([a for a in runs if a[:2] == ["check", "rules"]]) == 1
    assert sum(len(files) for files in test_runs) == groups and len(test_runs) <= groups / 4
    assert any(len({Path(f).parts[-6] for f in files}) > 1 for files in test_runs)  # .../<spec>/.split/...
    failed = [r for r in results if not r.ok]
    assert len(failed) == 1 and "FAILED" in failed[0].output and "SUCCESS" not in failed[0].output
    assert "/rag/.split/alerts.test-" in failed[0].output


def test_failures_keep_what_failed_and_drop_what_passed():
    output = (
        "Unit Testing:  a.yaml\n  SUCCESS\n\nUnit Testing:  b.yaml\n  FAILED:\n    alertname: A, time: 2m,\n"
        "        exp:[],\n\nUnit Testing:  c.yaml\n  WARNING: no file match pattern x.yaml\n  SUCCESS\n\n"
        "Checking r.yaml\n  SUCCESS: 3 rules found\n"
    )
    assert promtool.failures(output) == (
        "Unit Testing:  b.yaml\n  FAILED:\n    alertname: A, time: 2m,\n        exp:[],\n\n"
        "Unit Testing:  c.yaml\n  WARNING: no file match pattern x.yaml\n  SUCCESS"
    )
    assert promtool.failures("promtool: error: path 'x' does not exist") == "promtool: error: path 'x' does not exist"

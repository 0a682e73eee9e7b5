"""The build's check runs each generated test group alone over the rules it reads
(genobs/testsplit.py): it must assert everything the whole test files assert, pass where
they pass and fail where they fail, with the real promtool."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from genobs import testsplit
from genobs.build import check_jobs, render_spec

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


@pytest.mark.parametrize("spec", SPECS, ids=[p.stem for p in SPECS])
def test_split_groups_assert_everything_over_fewer_rules_and_pass(spec: Path, tmp_path: Path, promtool: str):
    target = _write(render_spec(spec), tmp_path)
    prometheus = target / "prometheus"
    total_rules = sum(len(g["rules"]) for f in prometheus.glob("*.rules.yaml") for g in yaml.safe_load(f.read_text())["groups"])
    for test in sorted((prometheus / "tests").glob("*.yaml")):
        whole = yaml.safe_load(test.read_text())
        parts = testsplit.split_tests(prometheus, test.relative_to(prometheus), target.name)
        assert parts is not None and len(parts) == len(whole["tests"])
        found = []
        for part in parts:
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
    assert testsplit.split_tests(prometheus, Path("tests/t.yaml"), "x") is None


def test_split_check_runs_on_the_private_copy_only(tmp_path: Path, promtool: str):
    """check_jobs(split=True) writes beside the files it checks: only the build's copy uses it."""
    target = _write(render_spec(next(p for p in SPECS if p.stem == "chat")), tmp_path)
    copy = tmp_path / "copy"
    shutil.copytree(target, copy)
    assert all(job().ok for job in check_jobs(copy, "chat", split=True))
    assert (copy / testsplit.SPLIT).is_dir()
    assert all(job().ok for job in check_jobs(target, "chat"))
    assert not (target / testsplit.SPLIT).exists()

"""Rule backends, tiers and the cluster label, checked on what a user gets: the Thanos, Mimir
and vmalert rule files (each validated by a real tool: promtool on the Prometheus groups they
carry, Debian's `vmalert -dryRun` on the vmalert files), the edge/global split of the rules
and its remote_write filter, and a cluster label that every grouping keeps."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from genobs import promql as q
from genobs.build import render_spec
from genobs.checks import check_backend_rules
from genobs.cli import main
from genobs.compiler import load_plan
from genobs.plan import tiers
from tests.conftest import REPO, SPECS

CHAT = REPO / "specs" / "chat.yaml"
# vLLM 0.33.0's own /metrics body (a copy of the reference exposition; see its header)
EXPOSITION = REPO / "bench" / "vllm_0.33_exposition.txt"


def spec_with(tmp: Path, base: Path = CHAT, name: str | None = None, service: dict | None = None, **output) -> Path:
    """A copy of `base` with an `output:` block (and service fields) of its own."""
    data = yaml.safe_load(base.read_text())
    if output:
        data["output"] = output
    if service:
        data["service"] = {**data.get("service", {}), **service}
    if name:
        data["name"] = name
    path = tmp / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def docs(out, folder: str) -> dict[str, dict]:
    return {n: yaml.safe_load(b) for n, b in out.files.items() if n.startswith(f"{folder}/") and n.endswith(".yaml")}


def prometheus_groups(out) -> list[dict]:
    return [g for d in docs(out, "prometheus").values() if "groups" in d for g in d["groups"]]


def has_alerts(group: dict) -> bool:
    return any("alert" in r for r in group["rules"])


# --- formats ------------------------------------------------------------------------------------


def test_prometheus_backend_writes_nothing_else(tmp_path: Path):
    out = render_spec(spec_with(tmp_path, backend="prometheus"))
    assert not any(n.split("/")[0] in ("thanos", "mimir", "vmalert") for n in out.files)
    assert out.files == render_spec(CHAT).files  # the default: byte for byte what the spec without output: gives


def test_thanos_alerting_groups_abort_on_partial_response(tmp_path: Path):
    out = render_spec(spec_with(tmp_path, backend="thanos"))
    files = docs(out, "thanos")
    assert sorted(files) == sorted(n.replace("prometheus/", "thanos/") for n in docs(out, "prometheus") if "/tests/" not in n)
    groups = [g for d in files.values() for g in d["groups"]]
    assert any(has_alerts(g) for g in groups) and any(not has_alerts(g) for g in groups)
    for g in groups:
        assert g.get("partial_response_strategy") == ("abort" if has_alerts(g) else None), g["name"]
        assert list(g)[:2] == ["name", "interval"] and list(g)[-1] == "rules"
    # the same groups as prometheus/, apart from the Thanos key
    assert [{k: v for k, v in g.items() if k != "partial_response_strategy"} for g in groups] == prometheus_groups(out)
    warn = render_spec(spec_with(tmp_path, name="chat-warn", backend="thanos", partial_response_strategy="warn"))
    strategies = {g.get("partial_response_strategy") for d in docs(warn, "thanos").values() for g in d["groups"]}
    assert strategies == {"warn", None}


def test_mimir_one_namespace_file_per_spec_with_source_tenants(tmp_path: Path):
    out = render_spec(spec_with(tmp_path, backend="mimir", tenants=["team-a", "team-b"]))
    files = docs(out, "mimir")
    assert list(files) == ["mimir/chat.rules.yaml"]
    doc = files["mimir/chat.rules.yaml"]
    assert list(doc) == ["namespace", "groups"] and doc["namespace"] == "genobs-chat"
    for g in doc["groups"]:
        assert list(g) == ["name", "interval", "source_tenants", "rules"]
        assert g["source_tenants"] == ["team-a", "team-b"]
    assert [{k: v for k, v in g.items() if k != "source_tenants"} for g in doc["groups"]] == prometheus_groups(out)
    # without tenants: the tenant the rules are loaded into, no source_tenants; a namespace of the spec's choosing
    plain = render_spec(spec_with(tmp_path, name="chat-plain", backend="mimir", namespace="llm-serving"))
    doc = docs(plain, "mimir")["mimir/chat-plain.rules.yaml"]
    assert doc["namespace"] == "llm-serving" and all("source_tenants" not in g for g in doc["groups"])


@pytest.fixture(scope="module")
def vmalert() -> str:
    exe = shutil.which("vmalert")
    if exe is None:
        pytest.fail("vmalert is required: install Debian's 'victoria-metrics' package (.ci/run does)")
    return exe


def dry_run(vmalert: str, path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([vmalert, "-dryRun", f"-rule={path}"], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
def test_vmalert_files_pass_vmalert_dry_run(spec: Path, tmp_path: Path, vmalert: str):
    out = render_spec(spec_with(tmp_path, base=spec, backend="victoriametrics"))
    files = docs(out, "vmalert")
    assert files and all(g["type"] == "prometheus" for d in files.values() for g in d["groups"])
    for name, data in out.files.items():
        if name.startswith("vmalert/"):
            path = tmp_path / name.replace("/", "_")
            path.write_bytes(data)
            result = dry_run(vmalert, path)
            assert result.returncode == 0, result.stdout + result.stderr


def test_vmalert_dry_run_rejects_what_vmalert_cannot_load(tmp_path: Path, vmalert: str):
    """The check above can fail: vmalert refuses a Thanos-only group key."""
    out = render_spec(spec_with(tmp_path, backend="thanos"))
    path = tmp_path / "alerts.yaml"
    # Debian's vmalert (1.79) also refuses keep_firing_for, which the Thanos ruler reads: drop it
    # so the group key is what fails
    text = out.files["thanos/alerts.rules.yaml"].decode()
    path.write_text(re.sub(r"\n *keep_firing_for: \S+", "", text))
    result = dry_run(vmalert, path)
    assert result.returncode != 0 and "partial_response_strategy" in result.stdout + result.stderr


def test_backend_files_pass_promtool_and_a_broken_one_fails(tmp_path: Path, promtool: str):
    for backend, extra in (("thanos", {}), ("mimir", {"tenants": ["t1"]}), ("victoriametrics", {})):
        out = render_spec(spec_with(tmp_path, name=f"chat-{backend}", backend=backend, **extra))
        for name, data in out.files.items():
            if name.split("/")[0] in ("thanos", "mimir", "vmalert"):
                path = tmp_path / name
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_bytes(data)
                result = check_backend_rules(path, out.name)
                assert result.ok, result.output
    broken = tmp_path / "mimir" / "broken.rules.yaml"
    broken.write_text("namespace: x\ngroups:\n- name: g\n  source_tenants: [a]\n  rules:\n  - record: a:b\n    expr: sum(\n")
    assert not check_backend_rules(broken, "broken").ok


def test_build_writes_and_checks_every_backend(tmp_path: Path, promtool: str):
    specs = [
        spec_with(tmp_path, name="chat-thanos", backend="thanos"),
        spec_with(tmp_path, name="chat-mimir", backend="mimir", tenants=["team-a"]),
        spec_with(tmp_path, name="chat-vm", backend="victoriametrics"),
    ]
    result = CliRunner().invoke(main, ["build", "--strict", "-o", str(tmp_path / "out"), *map(str, specs)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out/chat-thanos/thanos/alerts.rules.yaml").is_file()
    assert (tmp_path / "out/chat-mimir/mimir/chat-mimir.rules.yaml").is_file()
    assert (tmp_path / "out/chat-vm/vmalert/recording.rules.yaml").is_file()


# --- tiers ----------------------------------------------------------------------------------------


def _rules(groups) -> list[tuple[str, str]]:
    return [(g.name, getattr(r, "record", None) or r.name, r.expr) for g in groups for r in g.rules]


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
def test_tiers_partition_the_rules(spec: Path):
    _, plan = load_plan(spec)
    t = tiers.split(plan)
    edge, glob, every = _rules(t.edge), _rules(t.global_), _rules(plan.groups)
    assert sorted(edge + glob) == sorted(every) and not set(edge) & set(glob)
    assert edge and glob
    recorded = {r.record for r in plan.recording_rules}
    edge_recorded = {r.record for g in t.edge for r in g.rules if hasattr(r, "record")}
    for g in t.edge:
        for r in g.rules:
            assert not hasattr(r, "alert") and hasattr(r, "record")
            # an edge rule's recorded inputs are computed at the edge too
            assert q.metric_names(r.expr) & recorded <= edge_recorded, r.record
    shipped = {name for name, _ in t.shipped}
    for g in t.global_:
        for r in g.rules:
            # the global tier reads recorded genobs:* series and the shipped raw series, nothing else
            assert q.metric_names(r.expr) <= recorded | shipped, r.expr
            for name in q.metric_names(r.expr) - recorded:
                assert name in shipped


def _series(path: Path) -> list[tuple[str, dict[str, str]]]:
    out = []
    for line in path.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        m = re.match(r"([^{\s]+)(?:\{(.*)\})?\s", line)
        labels = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(2) or ""))
        out.append((m.group(1), labels))
    return out


def test_remote_write_filter_keeps_every_series_the_global_rules_read():
    """On vLLM 0.33's real exposition: whatever a global rule or the dashboard's annotations select
    by name and bucket bound passes the edge's write_relabel_configs (anchored, as Prometheus applies
    it); no other raw series does."""
    from genobs.plan.annotations import annotation_selectors

    exposition = _series(EXPOSITION)
    for spec in SPECS:
        _, plan = load_plan(spec)
        if plan.metric_names != "colon":
            continue
        (relabel,) = tiers.write_relabel_configs(plan)
        keep = re.compile(relabel["regex"])
        selectors = [
            sel for g in tiers.split(plan).global_ for r in g.rules for sel in q.vector_selectors(r.expr)
        ] + annotation_selectors(plan.dashboard.annotations)
        target = yaml.safe_load(spec.read_text())["service"]["selector"]  # the scrape's target labels
        for name, own in exposition:
            for labels in ({**own, **target}, {**own, **target, "job": "node-exporter"}):
                value = relabel["separator"].join({"__name__": name, **labels}.get(k, "") for k in relabel["source_labels"])
                kept = keep.fullmatch(value) is not None
                read = any(
                    sel.name == name
                    and all(  # the bucket bound it reads and its selector's fixed labels (a model list is not filtered)
                        re.fullmatch(v, labels.get(k, "")) if op == "=~" else labels.get(k, "") == v
                        for k, op, v in sel.matchers
                        if op == "=" or (k == "le" and op == "=~")
                    )
                    for sel in selectors
                )
                assert kept == read, (spec.stem, name, labels.get("le"), labels.get("job"))


def test_build_edge_and_global_tiers(tmp_path: Path, promtool: str):
    out = tmp_path / "out"
    edge = CliRunner().invoke(main, ["build", "--strict", "--tier", "edge", "-o", str(out / "edge"), str(CHAT)])
    assert edge.exit_code == 0, edge.output
    glob = CliRunner().invoke(main, ["build", "--strict", "--tier", "global", "-o", str(out / "global"), str(CHAT)])
    assert glob.exit_code == 0, glob.output
    edge_files = {p.relative_to(out / "edge/chat").as_posix() for p in (out / "edge/chat").rglob("*") if p.is_file()}
    assert edge_files == {".genobs", "remote-write.yaml", "prometheus/recording.rules.yaml", "prometheus/slo.rules.yaml"}
    relabel = yaml.safe_load((out / "edge/chat/remote-write.yaml").read_text())["write_relabel_configs"]
    assert relabel == tiers.write_relabel_configs(load_plan(CHAT)[1])
    global_files = {p.relative_to(out / "global/chat").as_posix() for p in (out / "global/chat").rglob("*") if p.is_file()}
    assert "grafana/genobs-chat.json" in global_files and "RUNBOOK.md" in global_files
    assert not any(f.startswith("prometheus/tests/") for f in global_files)
    bad = CliRunner().invoke(main, ["build", "--tier", "regional", "-o", str(out / "x"), str(CHAT)])
    assert bad.exit_code == 2 and not (out / "x").exists()


# --- the cluster label --------------------------------------------------------------------------


def test_cluster_label_is_kept_by_every_grouping(tmp_path: Path):
    plain = load_plan(CHAT)[1]
    _, plan = load_plan(spec_with(tmp_path, service={"cluster_label": "cluster"}))
    assert "cluster" in plan.group_by
    clauses = 0
    for g in plan.groups:
        for r in g.rules:
            for kind, labels in re.findall(r"\b(by|on) \(([^)]*)\)", r.expr):
                clauses += 1
                assert "cluster" in [x.strip() for x in labels.split(",")], (kind, labels, r.expr)
    assert clauses > 100
    # every inhibition holds within one cluster
    assert plan.inhibit_rules and all("cluster" in rule["equal"] for rule in plan.inhibit_rules)
    assert "cluster" in [v.name for v in plan.dashboard.variables]
    for entry in plan.runbook:
        for _, query in entry.confirm:
            for labels in re.findall(r"\b(?:by|on) \(([^)]*)\)", query):
                assert "cluster" in labels, query
    # the same rules otherwise: the cluster label adds itself and changes nothing else
    assert len(plan.recording_rules) == len(plain.recording_rules) and len(plan.alerts) == len(plain.alerts)


def test_cluster_label_rules_pass_their_generated_tests(tmp_path: Path, promtool: str):
    spec = spec_with(tmp_path, service={"cluster_label": "cluster"})
    result = CliRunner().invoke(main, ["build", "--strict", "-o", str(tmp_path / "out"), str(spec)])
    assert result.exit_code == 0, result.output


# --- scrape-config: the diet and the edge's remote_write --------------------------------------


def test_scrape_config_diet_and_remote_write_need_a_good_spec(tmp_path: Path):
    runner = CliRunner()
    for flags in (["--drop-unread"], ["--remote-write", "http://vm:8428/api/v1/write"]):
        result = runner.invoke(main, ["scrape-config", *flags])
        assert result.exit_code == 2 and "needs SPEC" in result.output
    bad = tmp_path / "bad.yaml"
    bad.write_text(CHAT.read_text() + "output: {backend: thanos, tenants: [a]}\n")
    result = runner.invoke(main, ["scrape-config", "--drop-unread", str(bad)])
    assert result.exit_code == 2 and result.stdout == ""
    assert f"{bad}:" in result.stderr and "output.tenants" in result.stderr
    result = runner.invoke(main, ["scrape-config", "--remote-write", "vm:8428", str(CHAT)])
    assert result.exit_code == 2 and "http(s) URL" in result.output
    for url in ("http://vm:8428/api\x1b[2K/write", "http://vm:8428/\x00", "http://vm:8428/\u202e", "http://vm\t:8428"):
        result = runner.invoke(main, ["scrape-config", "--remote-write", url, str(CHAT)])
        assert result.exit_code == 2 and "http(s) URL" in result.output, url
        assert not any(ord(c) < 32 and c != "\n" for c in result.output) and "\u202e" not in result.output


def test_scrape_config_diet_keeps_the_read_families_after_the_rename():
    from genobs.commands.scrape_config import read_families

    result = CliRunner().invoke(main, ["scrape-config", "--drop-unread", str(CHAT)])
    assert result.exit_code == 0, result.output
    (job,) = yaml.safe_load(result.stdout)["scrape_configs"]
    rename, keep = job["metric_relabel_configs"]
    assert rename["target_label"] == "__name__" and keep["action"] == "keep"
    pattern = re.compile(keep["regex"])
    families = read_families(load_plan(CHAT)[1])
    assert "vllm:time_to_first_token_seconds_sum" in families  # a histogram is kept whole
    for name in families:
        assert pattern.fullmatch(name) and pattern.fullmatch(name.replace("vllm:", "vllm_"))
    assert not pattern.fullmatch("vllm:time_to_first_token_seconds_created")
    assert not pattern.fullmatch("python_gc_objects_collected_total")


def test_remote_write_entry_is_the_edge_filter():
    result = CliRunner().invoke(main, ["scrape-config", "--remote-write", "http://vm:8428/api/v1/write", str(CHAT)])
    assert result.exit_code == 0, result.output
    (entry,) = yaml.safe_load(result.stdout)["remote_write"]
    assert entry == {
        "url": "http://vm:8428/api/v1/write",
        "write_relabel_configs": tiers.write_relabel_configs(load_plan(CHAT)[1]),
    }


def test_global_slo_sums_the_clusters_and_runs_on_the_global_tier(tmp_path: Path):
    data = yaml.safe_load(CHAT.read_text())
    data["service"]["cluster_label"] = "cluster"
    data["slos"][0]["scope"] = "global"  # first-token over every cluster; the others per cluster
    spec = tmp_path / "chat.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    _, plan = load_plan(spec)
    assert plan.global_slos == ("first-token",)
    t = tiers.split(plan)
    for g in t.edge:
        for r in g.rules:
            assert ("slo", "first-token") not in r.labels, r.record
    slo_rules = [r for g in plan.groups for r in g.rules if ("slo", "first-token") in r.labels]
    assert slo_rules
    for r in slo_rules:
        for labels in re.findall(r"\b(?:by|on) \(([^)]*)\)", r.expr):
            assert "cluster" not in labels, r.expr
    other = [r for g in plan.groups for r in g.rules if ("slo", "token-pace") in r.labels]
    assert other and all("cluster" in labels for r in other for labels in re.findall(r"\bby \(([^)]*)\)", r.expr))


def test_global_slo_with_clusters_builds_with_its_checks(tmp_path: Path, promtool: str):
    """The generated tests expect a global SLO's series and alerts without the cluster label,
    as its rules record them (they expected the cluster and `build` refused the spec)."""
    data = yaml.safe_load(CHAT.read_text())
    data["service"]["cluster_label"] = "cluster"
    data["slos"][0]["scope"] = "global"
    spec = tmp_path / "chat.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    result = CliRunner().invoke(main, ["build", "--strict", "-o", str(tmp_path / "out"), str(spec)])
    assert result.exit_code == 0, result.output
    tests = yaml.safe_load((tmp_path / "out" / "chat" / "prometheus" / "tests" / "alerts.test.yaml").read_text())
    fired = [(t["alertname"], a["exp_labels"]) for g in tests["tests"] for t in g["alert_rule_test"] for a in t["exp_alerts"]]
    burns = [labels for name, labels in fired if name.startswith("SloFirstToken")]
    others = [labels for name, labels in fired if not name.startswith("SloFirstToken")]
    assert burns and all("cluster" not in labels for labels in burns)
    assert others and all(labels["cluster"] == "cluster-a" for labels in others)


def test_thanos_prometheusrule_carries_the_strategy(tmp_path: Path, promtool: str):
    """prometheus-operator's PrometheusRule has partial_response_strategy for a ThanosRuler."""
    spec = spec_with(tmp_path, name="chat-thanos-k8s", backend="thanos")
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["build", "--strict", "--kubernetes", "-o", str(out), str(spec)])
    assert result.exit_code == 0, result.output
    groups = yaml.safe_load((out / "chat-thanos-k8s/kubernetes/prometheusrule.yaml").read_text())["spec"]["groups"]
    thanos = [g for p in sorted((out / "chat-thanos-k8s/thanos").glob("*.yaml")) for g in yaml.safe_load(p.read_text())["groups"]]
    assert sorted(groups, key=lambda g: g["name"]) == sorted(thanos, key=lambda g: g["name"])
    assert any(g.get("partial_response_strategy") == "abort" for g in groups)


# --- what the dashboard's annotations and the runbook read on a tiered or dieted fleet ----------


def _annotation_names(plan) -> set[str]:
    return {n for a in plan.dashboard.annotations for n in q.metric_names(re.sub(r"\$(\w+)", "x", a.expr))}


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.stem)
def test_scrape_diet_and_edge_filter_keep_what_the_annotations_read(spec: Path):
    """The "Engine restarts" and "Engine config" annotations read process_start_time_seconds and
    the cache-config info gauge: the scrape diet and the edge's remote_write must keep them."""
    from genobs.commands.scrape_config import read_families

    plan = load_plan(spec)[1]
    names = _annotation_names(plan)
    if not names:
        pytest.skip(f"{spec.stem}: the engine exports nothing the annotations read")
    assert names <= set(read_families(plan))
    (keep,) = tiers.write_relabel_configs(plan)
    for a in plan.dashboard.annotations:  # each series as the annotation selects it
        for sel in q.vector_selectors(re.sub(r"\$(\w+)", "x", a.expr)):
            fixed = {label: value for label, op, value in sel.matchers if op == "="}
            shipped = ";".join(fixed.get(label, "") for label in keep["source_labels"][1:])
            assert re.fullmatch(keep["regex"], f"{sel.name};{shipped}"), (sel.name, fixed)


def test_global_runbook_says_where_to_run_queries_of_raw_series(tmp_path: Path):
    """The global tier's runbook: a confirm query that reads raw series the edge does not ship
    says to run it on the cluster's Prometheus; one of recorded series does not."""
    spec = spec_with(tmp_path, service={"cluster_label": "cluster"}, tier="global")
    _, plan = load_plan(spec)
    shipped = {name for name, _ in tiers.split(plan).shipped}
    recorded = {r.record for r in plan.recording_rules}
    runbook = render_spec(spec).files["RUNBOOK.md"].decode()
    local = remote = 0
    for entry in plan.runbook:
        for caption, query in entry.confirm:
            raw = q.metric_names(query) - recorded - shipped
            at = runbook.index(f"```promql\n{query}\n```")
            said = "on the cluster's Prometheus" in runbook[runbook.rindex("\n\n", 0, at - 2) : at]
            assert said == bool(raw), (caption, query)
            local, remote = local + bool(raw), remote + (not raw)
    assert local and remote
    assert "on the cluster's Prometheus" not in render_spec(spec, tier="all").files["RUNBOOK.md"].decode()

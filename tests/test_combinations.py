"""Every combination a spec can express, checked for the same properties: the product of the
engine layouts (one example spec per engine, P/D pools and gateway in front: a new engine or
gateway profile with an example spec joins by itself, and one without fails here), the cluster
modes (one cluster; clusters with per-cluster SLOs; clusters with a global SLO; with a client
block, the first SLO read at the application), the rule
backends (prometheus and every folder genobs/render/backends.py writes) and the tiers (untiered;
edge + global).

For each combination: it renders, and every rule file passes the real promtool (the backends'
files as the Prometheus groups they carry; vmalert's also Debian's `vmalert -dryRun`); the
generated tests pass promtool; every alert has a generated case in which it fires; with clusters
every alert but a global SLO's names the cluster; each backend's files hold the same alerts as
prometheus/ (vmalert's without keep_firing_for, which Debian's vmalert refuses); the edge and
global tiers together are the untiered rules. One plan (and its test generation) per engine
layout and cluster mode, rendered for every backend and tier."""

from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from genobs import promtool as promtool_runs
from genobs import testsplit
from genobs.build import render_plan
from genobs.catalog import ENGINES, GATEWAYS
from genobs.compiler import load_plan
from genobs.render.backends import BACKEND_KEYS, FOLDERS
from genobs.writer import dump_yaml
from tests.conftest import SPECS

CLUSTERS = ("one-cluster", "per-cluster-slos", "global-slo")
BACKENDS = ("prometheus", *FOLDERS)
TIERS = {"untiered": ("all",), "edge+global": ("edge", "global")}
LABEL = "cluster"


def _layout(data: dict) -> str:
    """An engine layout: the pods' engine, P/D pools or not, the gateway in front (if any), the
    application's OpenTelemetry GenAI client metrics in front of both (if any)."""
    service = data["service"]
    pd = "-pd" if (data.get("features") or {}).get("disaggregated_prefill") else ""
    gateway = (data.get("gateway") or {}).get("engine")
    client = "+otel-genai" if data.get("client") else ""
    return f"{service.get('engine', 'vllm')}{pd}" + (f"+{gateway}" if gateway else "") + client


def _layouts() -> dict[str, Path]:
    """One example spec per layout: the one with the most SLOs (ties: the first by name), so the
    cluster modes have SLOs to scope."""
    found: dict[str, tuple[int, Path]] = {}
    for spec in SPECS:
        data = yaml.safe_load(spec.read_text())
        key, slos = _layout(data), len(data.get("slos") or [])
        if key not in found or slos > found[key][0]:
            found[key] = (slos, spec)
    return {key: spec for key, (_, spec) in sorted(found.items())}


LAYOUTS = _layouts()


def test_every_engine_and_gateway_profile_is_a_layout():
    """A profile without an example spec would be missing from the matrix."""
    engines = {key.split("+")[0].removesuffix("-pd") for key in LAYOUTS}
    gateways = {key.split("+")[1] for key in LAYOUTS if "+" in key}
    assert set(ENGINES) <= engines, sorted(set(ENGINES) - engines)
    assert set(GATEWAYS) <= gateways, sorted(set(GATEWAYS) - gateways)
    assert any(key.endswith("-pd") for key in LAYOUTS)


def _variant(spec: Path, clusters: str, tmp: Path) -> Path:
    data = yaml.safe_load(spec.read_text())
    if clusters != "one-cluster":
        data["service"]["cluster_label"] = LABEL
    if clusters == "global-slo":
        data["slos"][0]["scope"] = "global"  # the first SLO over every cluster, the others per cluster
    if data.get("client") and data["slos"][0]["sli"] == "ttft":
        # the first SLO read at the application (a bound of its buckets), the others where they were
        data["slos"][0].update(read_at="client", threshold="1.28s")
    data["name"] = f"{data['name']}-{clusters}"
    data.pop("dashboard", None)  # a uid of its own
    path = tmp / f"{data['name']}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _with_backend(doc, backend: str):
    output = doc.spec.output.model_copy(update={"backend": backend})
    return replace(doc, spec=doc.spec.model_copy(update={"output": output}))


def _groups(files: dict[str, bytes], folder: str) -> list[dict]:
    """The rule groups of one folder's rule files (mimir's one file with its namespace included)."""
    out = []
    for name in sorted(files):
        if name.startswith(f"{folder}/") and name.endswith(".yaml") and "/tests/" not in name:
            out += yaml.safe_load(files[name])["groups"]
    return out


# what vmalert's files write otherwise: no keep_firing_for (Debian's vmalert 1.79 refuses it), and
# each alert's expression reading in one hop (render/inline.py; the generated tests run on them)
VMALERT_OWN = ("keep_firing_for", "expr")


def _alert_rules(groups: list[dict], strip: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """(group, rule) of every alerting rule, the rule as YAML without the keys in `strip`."""
    return sorted(
        (g["name"], yaml.safe_dump({k: v for k, v in r.items() if k not in strip}, sort_keys=True))
        for g in groups
        for r in g["rules"]
        if "alert" in r
    )


def _every_rule(groups: list[dict], strip: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """(group, rule) of every rule; an alerting rule without the keys in `strip`."""
    return sorted(
        (g["name"], yaml.safe_dump({k: v for k, v in r.items() if "record" in r or k not in strip}, sort_keys=True))
        for g in groups
        for r in g["rules"]
    )


def _firing(unit_tests) -> list[tuple[str, dict]]:
    return [
        (t["alertname"], a["exp_labels"])
        for _, doc in unit_tests
        for group in doc["tests"]
        for t in group.get("alert_rule_test", [])
        for a in t["exp_alerts"]
    ]


def _run(args: list[str], cwd: Path | None = None) -> None:
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{' '.join(args[:3])}: {(proc.stdout + proc.stderr)[-4000:]}"


def _vmalert_tests(out: Path, promtool: str, name: str) -> None:
    prom = out / "vmalert-as-prometheus"
    (prom / "tests").mkdir(parents=True)
    for path in (out / "vmalert").glob("*.rules.yaml"):
        groups = [{k: v for k, v in g.items() if k not in BACKEND_KEYS} for g in yaml.safe_load(path.read_text())["groups"]]
        (prom / path.name).write_bytes(dump_yaml({"groups": groups}, name))
    tests = sorted(p for p in (out / "prometheus" / "tests").glob("*.yaml") if p.name != "baseline.test.yaml")
    for test in tests:
        shutil.copy(test, prom / "tests" / test.name)
    _test_rules(prom, [prom / "tests" / t.name for t in tests], name)


def _test_rules(prometheus: Path, tests: list[Path], name: str) -> None:
    """promtool test rules on the generated tests as `genobs build` checks them: each test group
    over only the rules it reads (genobs/testsplit.py, the verdict of the whole files: tests/
    test_testsplit.py), in runs of about equal cost; a file that cannot be split runs whole."""
    parts: list[testsplit.Part] = []
    runs: list[list[Path]] = []
    for test in tests:
        split = testsplit.split_parts(prometheus, test.relative_to(prometheus), name)
        if split is None:
            runs.append([test])
        else:
            parts += split
    runs += [[p.path for p in run] for run in testsplit.chunks(parts)]
    for run in runs:
        result = promtool_runs.test_rules(run, cwd=prometheus)
        assert result.ok, result.output[-4000:]


@pytest.mark.parametrize("clusters", CLUSTERS)
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_combination(layout: str, clusters: str, tmp_path: Path, promtool: str):
    vmalert = shutil.which("vmalert")
    if vmalert is None:
        pytest.fail("vmalert is required: install Debian's 'victoria-metrics' package")
    started = time.monotonic()
    spec = _variant(LAYOUTS[layout], clusters, tmp_path)
    doc, plan = load_plan(spec)
    alerts = {a.name for a in plan.alerts}

    # every alert has a generated case in which it fires
    fired = _firing(plan.unit_tests)
    assert alerts <= {name for name, _ in fired}, sorted(alerts - {name for name, _ in fired})
    # with clusters every alert names its cluster, but a global SLO's (one over every cluster)
    if clusters != "one-cluster":
        overall = {a.name for a in plan.alerts if dict(a.labels).get("slo") in plan.global_slos}
        assert bool(overall) == (clusters == "global-slo")
        for name, labels in fired:
            assert (LABEL in labels) == (name not in overall), (name, labels)
        assert all(LABEL in rule["equal"] for rule in plan.inhibit_rules)

    checked: dict[bytes, Path] = {}  # every distinct rule file once, as the Prometheus groups it carries
    vm_files: list[Path] = []
    for backend in BACKENDS:
        bdoc = _with_backend(doc, backend)
        for tiering, tiers in TIERS.items():
            files: dict[str, bytes] = {}
            for tier in tiers:
                out = render_plan(bdoc, plan, spec, tier=tier)
                for name, data in out.files.items():
                    if name.endswith(".rules.yaml"):
                        files[f"{tier}/{name}"] = data
                where = tmp_path / backend / tier
                for name, data in out.files.items():
                    (where / name).parent.mkdir(parents=True, exist_ok=True)
                    (where / name).write_bytes(data)
                    if name.endswith(".rules.yaml") and "/tests/" not in name:
                        groups = {"groups": [{k: v for k, v in g.items() if k not in BACKEND_KEYS}
                                             for g in yaml.safe_load(data)["groups"]]}
                        body = dump_yaml(groups, plan.name)
                        path = tmp_path / "check" / f"{len(checked)}.rules.yaml"
                        path.parent.mkdir(exist_ok=True)
                        if body not in checked:
                            path.write_bytes(body)
                            checked[body] = path
                        if name.startswith("vmalert/"):
                            vm_files.append(where / name)
            # each backend holds the same alerts as prometheus/ (vmalert's without keep_firing_for)
            folder = FOLDERS.get(backend)
            for tier in tiers:
                prom = _groups({n[len(tier) + 1 :]: b for n, b in files.items() if n.startswith(f"{tier}/")}, "prometheus")
                if folder is not None:
                    own = _groups({n[len(tier) + 1 :]: b for n, b in files.items() if n.startswith(f"{tier}/")}, folder)
                    strip = VMALERT_OWN if backend == "victoriametrics" else ()
                    assert _alert_rules(own, strip) == _alert_rules(prom, strip), (backend, tier)
                    assert _every_rule(own, strip) == _every_rule(prom, strip) and len(own) == len(prom), (backend, tier)
            if tiering == "edge+global":
                # the edge and global tiers together are the untiered rules, in every folder
                whole = render_plan(bdoc, plan, spec, tier="all").files
                for f in ("prometheus", *((folder,) if folder else ())):
                    parts = [_groups({n[len(t) + 1 :]: b for n, b in files.items() if n.startswith(f"{t}/")}, f) for t in tiers]
                    strip = VMALERT_OWN if f == "vmalert" else ()
                    assert _every_rule(parts[0] + parts[1], strip) == _every_rule(_groups(whole, f), strip), (backend, f)

    # every distinct rule file passes promtool; the generated tests pass; vmalert loads its files
    _run([promtool, "check", "rules", *map(str, checked.values())])
    prom = tmp_path / "prometheus" / "all" / "prometheus"
    _test_rules(prom, sorted((prom / "tests").glob("*.yaml")), plan.name)
    _run([vmalert, "-dryRun", *(f"-rule={p}" for p in vm_files)])
    # vmalert's alerts, each reading in one hop, fire exactly as the generated tests expect (but the
    # baseline alerts: their tests feed the recorded series, where vmalert's alerts read raw ones)
    _vmalert_tests(tmp_path / "victoriametrics" / "all", promtool, plan.name)
    print(f"\n{layout} x {clusters}: {len(BACKENDS) * len(TIERS)} combinations in {time.monotonic() - started:.1f}s")

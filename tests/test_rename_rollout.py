"""service.other_engine_version: a fleet in the middle of an upgrade across a metric rename is
read under both names, one series per target, and only for families a rename separates."""

from __future__ import annotations

import contextlib
import http.server
import json
import re
import threading
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from conftest import spec_text
from fleet_series import Fleet
from scenario_runner import REPO, build, promtool_expr_tests, rule_groups

from genobs.catalog import load_catalog
from genobs.cli import main
from genobs.compiler import load_plan
from genobs.errors import SpecError


def plan_of(engine: str, other: str | None):
    fields = {"engine_version": f'"{engine}"'}
    if other is not None:
        fields["other_engine_version"] = f'"{other}"'
    return load_plan(text=spec_text(**fields), file="r.yaml")[1]


def exprs(plan) -> str:
    return "\n".join(r.expr for g in plan.groups for r in g.rules)


def test_renamed_families_are_read_under_both_names_and_nothing_else_changes() -> None:
    alone, both = exprs(plan_of("0.9.1", None)), exprs(plan_of("0.9.1", "0.12.0"))
    assert "kv_cache_usage_perc" not in alone and "inter_token_latency_seconds" not in alone
    # this release's name first, the other's after `or`: a target that exports both counts once
    assert re.search(r"\(vllm:gpu_cache_usage_perc\{[^}]*\} or vllm:kv_cache_usage_perc\{", both)
    assert re.search(
        r"\(rate\(vllm:time_per_output_token_seconds_bucket\{[^}]*\}\[5m\]\) or "
        r"rate\(vllm:inter_token_latency_seconds_bucket\{",
        both,
    )
    assert "rate(vllm:prefix_cache_hits_total{" in both
    # families that were never renamed read exactly what they read before
    renamed = ("vllm:gpu_cache_usage_perc", "vllm:kv_cache_usage_perc", "vllm:time_per_output_token_seconds",
               "vllm:inter_token_latency_seconds", "vllm:gpu_prefix_cache_", "vllm:prefix_cache_")

    def others(text: str) -> set[str]:
        return {n for n in re.findall(r"vllm:\w+", text) if not n.startswith(renamed)}

    assert others(alone) == others(both) and others(alone)


def test_a_stand_in_is_not_a_rename() -> None:
    # before 0.11 the per-token histogram stood in for TPOT; in 0.10.1 that name is the ITL's: the
    # per-request TPOT of a 0.12 spec must not fall back on it
    both = exprs(plan_of("0.12.0", "0.10.1"))
    tpot_reads = re.findall(r"[\w:]+(?=_bucket\{)", both)
    assert "vllm:request_time_per_output_token_seconds" in tpot_reads
    assert re.search(r"rate\(vllm:inter_token_latency_seconds_bucket\{[^}]*\}\[5m\]\) or "
                     r"rate\(vllm:time_per_output_token_seconds_bucket\{", both)
    assert not re.search(r"request_time_per_output_token_seconds_bucket\{[^}]*\}\[5m\]\) or", both)


@pytest.mark.parametrize(
    ("other", "message"),
    [
        ("0.1.0", "service.other_engine_version: vLLM 0.1.0 is outside the versions genobs knows"),
        ("0.9.1", "service.other_engine_version: is engine_version itself (0.9.1); name the other release"),
    ],
)
def test_bad_other_versions_are_located_errors(other: str, message: str) -> None:
    with pytest.raises(SpecError) as err:
        plan_of("0.9.1", other)
    assert message in str(err.value)


def test_pods_exporting_both_names_count_once(tmp_path: Path, promtool: str) -> None:
    """vLLM 0.10.2 exports the ITL under both names and the KV gauge and prefix counters too: with
    a 0.9.1 spec reading both, the recorded ITL rate and KV maximum equal a single name's."""
    spec = yaml.safe_load((REPO / "specs" / "agentic.yaml").read_text())
    spec["service"]["other_engine_version"] = "0.10.2"
    fleet = Fleet({"engines": 2, "duration": "15m", "version": "0.10.2", "replicas": 3, "traffic": {"kv": 0.7}}, spec)
    series = fleet.series()
    assert {"vllm:time_per_output_token_seconds_bucket", "vllm:inter_token_latency_seconds_bucket"} <= {
        s["series"].split("{")[0] for s in series
    }
    files, groups, _, _ = rule_groups(build(spec, tmp_path))
    model = spec["service"]["models"][0]
    sel = f'namespace="{fleet.namespace}",job="{fleet.job}",model_name="{model}"'
    group = "model_name, namespace, job"
    tests = [
        {
            "expr": f'genobs:itl_seconds:bucket_rate5m{{{sel},le="+Inf"}} - on ({group}) '
            f'sum by ({group}) (rate(vllm:inter_token_latency_seconds_bucket{{{sel},le="+Inf"}}[5m]))',
            "eval_time": "15m",
            "exp_samples": [{"labels": f"{{{sel}}}", "value": 0}],
        },
        {
            "expr": f"genobs:kv_cache_usage:max{{{sel}}}",
            "eval_time": "15m",
            "exp_samples": [{"labels": f"genobs:kv_cache_usage:max{{{sel}}}", "value": 0.7}],
        },
    ]
    proc = promtool_expr_tests(promtool, files, groups, series, tests, tmp_path / "t.yaml")
    assert proc.returncode == 0, proc.stdout[-3000:]


# --- genobs doctor on a fleet mid-rollout -----------------------------------------------------


@contextlib.contextmanager
def _prometheus_with(names: set[str]):
    """A Prometheus API on loopback whose live series are `names`: `label/__name__/values` lists
    them, and `count by (__name__) ({__name__=~"..."})`, how doctor asks, counts those the
    regex matches."""
    from urllib.parse import parse_qs

    class Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self, query: dict) -> None:
            if self.path.startswith("/api/v1/label/__name__/values"):
                data: object = sorted(names)
            else:
                m = re.search(r'__name__=~"((?:[^"\\]|\\.)*)"', query.get("query", [""])[0])
                wanted = re.compile(m.group(1).encode().decode("unicode_escape")) if m else None
                hits = sorted(n for n in names if wanted is not None and wanted.fullmatch(n))
                data = {"resultType": "vector", "result": [{"metric": {"__name__": n}, "value": [0, "1"]} for n in hits]}
            body = json.dumps({"status": "success", "data": data}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            self._answer(parse_qs(self.path.partition("?")[2]))

        def do_POST(self) -> None:  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            self._answer(parse_qs(self.rfile.read(length).decode()))

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _doctor(tmp_path: Path, url: str, **fields: str) -> tuple[int, str]:
    spec = tmp_path / "r.yaml"
    spec.write_text(spec_text(**fields))
    result = CliRunner().invoke(main, ["doctor", "--prometheus", url, str(spec)])
    return result.exit_code, " ".join(result.output.split())


def test_doctor_says_when_pods_on_another_releases_names_are_not_read(tmp_path: Path) -> None:
    """A fleet half on vLLM 0.9.1, half on 0.12.0: every name a 0.9.1 spec reads is live (the old
    pods export them), so nothing is missing, yet the new pods' KV cache (vllm:kv_cache_usage_perc)
    and ITL are read by no rule. doctor sees their names and says to set other_engine_version."""
    cat = load_catalog()
    fleet = cat.names_for((0, 9, 1)) | cat.names_for((0, 12, 0)) | {"up"}
    with _prometheus_with(fleet) as url:
        code, out = _doctor(tmp_path, url, engine_version='"0.9.1"')
        assert code == 1, out
        assert "pods on another release's names, not read" in out, out
        assert "vllm:gpu_cache_usage_perc Prometheus also has vllm:kv_cache_usage_perc (vLLM 0.9.2 on)" in out, out
        assert "service.other_engine_version" in out
        # named, the rules read both names: nothing to say
        code, out = _doctor(tmp_path, url, engine_version='"0.9.1"', other_engine_version='"0.12.0"')
        assert "another release" not in out, out
        assert code == 0, out
    # a fleet on one release: no note, whatever names that release writes
    with _prometheus_with(cat.names_for((0, 12, 0)) | {"up"}) as url:
        code, out = _doctor(tmp_path, url, engine_version='"0.12.0"')
        assert code == 0 and "another release" not in out, out

"""The commands that talk to Prometheus follow the gateway of a spec's `gateway:` block:
`scrape-config` prints the gateway's job (checked by the real promtool), and a real Prometheus
scraping `genobs simulate --engine llm-d-epp` (llm-d-router 0.10, deprecated twins dual-emitted)
and `genobs simulate` (the vLLM pods) through that job receives every gateway name the rules read,
with and without `--drop-unread`; `doctor` finds them all, names them when the gateway job is
missing, and names a name-generation mismatch; `compare` reads TTFT, end-to-end latency and
success at the gateway."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from genobs.cli import main
from genobs.compiler import load_plan
from genobs.sim import Simulator
from tests.conftest import REPO
from tests.e2e_support import PROMETHEUS, Prometheus, poll, stopping
from tests.test_e2e_engines import Simulate

GATEWAY = REPO / "specs" / "gateway-vllm.yaml"
DYNAMO = REPO / "specs" / "dynamo.yaml"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"
# llm-d-router 0.10's names, as the endpoint picker's metrics.go and llm_d_router_metrics.go write them
EPP_0_10_READ = {
    "llm_d_epp_request_total",
    "llm_d_epp_request_error_total",
    "llm_d_epp_request_running",
    "llm_d_epp_ready_endpoints",
    "llm_d_epp_request_ttft_seconds_bucket",
    "llm_d_epp_request_duration_seconds_bucket",
}
DYNAMO_READ = {
    "dynamo_frontend_requests_total",
    "dynamo_frontend_active_requests",
    "dynamo_frontend_time_to_first_token_seconds_bucket",
    "dynamo_frontend_request_duration_seconds_bucket",
}


def invoke(*args: str | Path):
    return CliRunner().invoke(main, [*map(str, args)])


def printed_jobs(*args: str | Path) -> list[dict]:
    result = invoke("scrape-config", *args)
    assert result.exit_code == 0, result.output
    return yaml.safe_load(result.stdout)["scrape_configs"]


# --- scrape-config, no server ------------------------------------------------------------------


@pytest.mark.parametrize(("spec", "gateway_job", "port", "read"), [(GATEWAY, "llm-d-epp", 9090, EPP_0_10_READ), (DYNAMO, "dynamo-frontend", 8000, DYNAMO_READ)])
@pytest.mark.parametrize("diet", [False, True])
def test_scrape_config_prints_a_gateway_job_promtool_accepts(tmp_path: Path, spec, gateway_job, port, read, diet) -> None:
    token = tmp_path / "token"
    token.write_text("t0ken\n")
    flags = ["--drop-unread"] if diet else []
    jobs = printed_jobs(*flags, "--gateway-token-file", token, spec)
    pods, gateway = jobs
    assert gateway["job_name"] == gateway_job
    assert gateway["static_configs"] == [{"targets": [f"127.0.0.1:{port}"], "labels": {"namespace": pods["static_configs"][0]["labels"]["namespace"]}}]
    # the EPP's /metrics authenticates a bearer token by default; Dynamo's frontend does not
    assert ("authorization" in gateway) == (gateway_job == "llm-d-epp")
    relabel = gateway.get("metric_relabel_configs", [])
    assert not [r for r in relabel if r.get("target_label") == "__name__"]  # no ':' names to restore
    if diet:
        (keep,) = relabel
        kept = set(keep["regex"].split("|"))
        assert read <= kept and all(n.split("_")[0] in ("llm", "dynamo") for n in kept)
        assert not read & set(pods["metric_relabel_configs"][-1]["regex"].split("|"))
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump({"scrape_configs": jobs}))
    done = subprocess.run([PROMTOOL, "check", "config", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_scrape_config_engine_option_takes_the_gateways() -> None:
    (job,) = printed_jobs("--engine", "llm-d-epp", "--gateway-no-auth")
    assert job == {"job_name": "llm-d-epp", "static_configs": [{"targets": ["127.0.0.1:9090"]}]}
    (job,) = printed_jobs("--engine", "llm-d-epp")
    assert job["authorization"]["credentials_file"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    (job,) = printed_jobs("--engine", "dynamo", "--target", "10.0.0.5:8000")
    assert job == {"job_name": "dynamo", "static_configs": [{"targets": ["10.0.0.5:8000"]}]}


def test_remote_write_ships_what_the_global_gateway_rules_read() -> None:
    result = invoke("scrape-config", "--remote-write", "http://vm:8428/api/v1/write", GATEWAY)
    keep = yaml.safe_load(result.stdout)["remote_write"][0]["write_relabel_configs"][0]
    # the first-token SLO's 30-day ratio reads the gateway's TTFT bucket at its 1s bound, under the
    # gateway's own selector (job llm-d-epp), not the pods'
    labels = {"__name__": "llm_d_epp_request_ttft_seconds_bucket", "le": "1", "job": "llm-d-epp", "namespace": "llm-prod", "streaming": "true"}
    value = keep["separator"].join(labels.get(k, "") for k in keep["source_labels"])
    assert re.fullmatch(keep["regex"], value)
    assert not re.fullmatch(keep["regex"], value.replace("llm-d-epp", "vllm-pool"))


def test_doctor_knows_the_four_epp_name_generations() -> None:
    from genobs.catalog import load_catalog
    from genobs.commands.doctor_gateway import generations

    gens = generations(load_catalog("llm-d-epp"))
    assert [(g.since, g.until, g.example) for g in gens] == [
        ((0, 3, 0), (0, 4, 0), "inference_model_request_total"),
        ((0, 4, 0), (0, 8, 1), "inference_objective_request_total"),
        ((0, 8, 1), (0, 9, 0), "llm_d_router_epp_request_total"),
        ((0, 9, 0), None, "llm_d_epp_request_total"),
    ]


# --- a real Prometheus scraping the simulated gateway and pods ---------------------------------


@pytest.fixture(scope="module")
def live(tmp_path_factory):
    if not Path(PROMETHEUS).exists():
        pytest.fail("the prometheus server is required: install Debian's 'prometheus' package (make test does)")
    tmp = tmp_path_factory.mktemp("gateway-commands")
    token = tmp / "token"
    token.write_text("t0ken\n")
    data = yaml.safe_load(GATEWAY.read_text())
    data["service"]["models"] = []  # every model the simulators serve
    spec = tmp / "gateway-vllm.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    models = {"m-old": "healthy", "m-new": "ttft_degradation"}
    pods = Simulator(models=models, request_rate=20.0, seed=3)
    gateway = Simulate("--engine", "llm-d-epp", "--request-rate", "20", *(f"--model={m}={s}" for m, s in models.items()))
    proms = {}
    with stopping([pods]):
        try:
            pods.start(port=0)
            for name, flags in (("plain", []), ("diet", ["--drop-unread"])):
                args = ["--target", f"127.0.0.1:{pods.port}", "--gateway-target", gateway.instance, "--interval", "1s"]
                jobs = printed_jobs(*flags, *args, "--gateway-token-file", token, spec)
                config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"}, "scrape_configs": jobs}
                (tmp / name).mkdir()
                proms[name] = Prometheus(tmp / name, config, {})
                proms[name].start()
            for prom in proms.values():
                poll(lambda p=prom: len(p.query("up == 1")) == 2 or None, prom.started + 30, 0.5, "both jobs up")
                poll(lambda p=prom: p.query('llm_d_epp_request_ttft_seconds_bucket{job="llm-d-epp"}'), prom.started + 30, 0.5, "gateway TTFT")
            yield {**proms, "spec": spec}
        finally:
            for prom in proms.values():
                prom.stop()
            gateway.stop()


def _names(prom: Prometheus, job: str) -> set[str]:
    return {r["metric"]["__name__"] for r in prom.query(f'count by (__name__) ({{job="{job}"}})')}


@pytest.mark.slow
def test_every_gateway_name_the_rules_read_arrives(live) -> None:
    plan = load_plan(GATEWAY)[1]
    assert plan.gateway.raw_metrics == EPP_0_10_READ
    got = _names(live["plain"], "llm-d-epp")
    assert EPP_0_10_READ <= got
    assert "inference_objective_request_total" in got  # the deprecated twins, scraped as served


@pytest.mark.slow
def test_drop_unread_keeps_every_name_the_rules_read_on_both_jobs(live) -> None:
    from genobs.commands.scrape_config import layer_families

    pod_families, gateway_families = layer_families(load_plan(GATEWAY)[1])
    gateway = _names(live["diet"], "llm-d-epp")
    pods = _names(live["diet"], "vllm-pool")
    assert set(gateway_families) - {n for n in gateway_families if n.endswith(("_sum", "_count"))} <= gateway
    assert EPP_0_10_READ <= gateway
    assert "inference_objective_request_total" not in gateway  # what nothing reads is dropped
    # the pods' simulator serves every family the rules read except the optional ones
    plan = load_plan(GATEWAY)[1]
    assert (plan.raw_metrics - plan.gateway.raw_metrics) - {"up"} <= pods | {"process_resident_memory_bytes", "python_gc_collections_total"}


def _doctor(prom: Prometheus, spec: Path, expect: int) -> tuple[int, str]:
    deadline = time.monotonic() + 15
    while True:
        result = invoke("doctor", "--prometheus", prom.url, spec)
        if result.exit_code == expect or time.monotonic() > deadline:
            return result.exit_code, result.output
        time.sleep(1)


def _variant(spec: Path, tmp: Path, **gateway: str) -> Path:
    data = yaml.safe_load(spec.read_text())
    data["gateway"].update({k: v for k, v in gateway.items() if k != "job"})
    if "job" in gateway:
        data["gateway"]["selector"]["job"] = gateway["job"]
    path = tmp / "gateway.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.slow
def test_doctor_finds_the_gateways_names_and_its_generation(live) -> None:
    code, out = _doctor(live["plain"], live["spec"], 0)
    assert code == 0, out
    assert "gateway: llm-d EPP 0.10.0 under {namespace=\"llm-prod\",job=\"llm-d-epp\"}" in out
    assert "name generation live: 0.9.0 on (llm_d_epp_request_total …); also the deprecated twins of 0.4.0 before 0.8.1" in out
    assert "its rules read 6 raw metrics under the gateway's selector\n  all 6 are present" in out


@pytest.mark.slow
def test_doctor_names_the_missing_gateway_job(live, tmp_path: Path) -> None:
    code, out = _doctor(live["plain"], _variant(live["spec"], tmp_path, job="llm-d-epp-prod"), 1)
    assert code == 1, out
    section = out.split("gateway: ", 1)[1]
    assert "no gateway target under the selector (6):" in section
    assert all(name in section for name in EPP_0_10_READ)
    assert "genobs scrape-config SPEC" in section
    assert "all " in out.split("gateway: ", 1)[0]  # the pods are fine


@pytest.mark.slow
def test_doctor_names_a_gateway_version_mismatch(live, tmp_path: Path) -> None:
    # the spec says 0.8 (inference_objective_*); the diet dropped the deprecated twins
    code, out = _doctor(live["diet"], _variant(live["spec"], tmp_path, engine_version="0.8"), 1)
    assert code == 1, out
    assert "version mismatch: gateway.engine_version picks llm-d EPP 0.8.0, names 0.4.0 before 0.8.1" in out
    assert "gateway name generation mismatch" in out
    assert re.search(r"inference_objective_request_total +Prometheus has llm_d_epp_request_total \(llm-d EPP 0\.9\.0 on\)", out), out
    # with the twins there, nothing is missing, and the mismatch is still named
    code, out = _doctor(live["plain"], _variant(live["spec"], tmp_path, engine_version="0.8"), 0)
    assert "version mismatch" in out, out


@pytest.mark.slow
def test_compare_reads_user_facing_kpis_at_the_gateway(live) -> None:
    prom = live["plain"]
    time.sleep(max(0.0, prom.started + 25 - time.monotonic()))
    result = invoke(
        "compare", live["spec"], "--prometheus", prom.url, "--baseline", "model_name=m-old", "--candidate", "model_name=m-new",
        "--window", "20s", "--format", "json",
    )
    assert result.stdout.strip(), result.output
    doc = json.loads(result.stdout)
    layer = {k["key"]: k["layer"] for k in doc["kpis"]}
    assert {layer[k] for k in ("ttft_p50", "ttft_p99", "e2e_p50", "e2e_p99", "gateway_success")} == {"gateway"}
    assert layer["kv_usage"] == layer["requests"] == layer["goodput_token-pace"] == "pods"
    assert layer["goodput_first-token"] == "gateway"  # the SLO the gateway reads
    kpi = {k["key"]: k for k in doc["kpis"]}
    assert "llm_d_epp_request_ttft_seconds_bucket" in kpi["ttft_p99"]["expr"]["candidate"]
    assert 'streaming="true"' in kpi["ttft_p99"]["expr"]["candidate"]
    assert kpi["ttft_p99"]["verdict"] == "REGRESSION", kpi["ttft_p99"]
    assert kpi["ttft_p99"]["threshold"].endswith("(GatewayTtftP99High warning)")
    text = invoke(
        "compare", live["spec"], "--prometheus", prom.url, "--baseline", "model_name=m-old", "--candidate", "model_name=m-new", "--window", "20s"
    ).stdout
    assert "(use case chat, vLLM 0.33.0 behind llm-d EPP 0.10.0)" in text
    header = next(line for line in text.splitlines() if line.startswith("KPI"))
    assert header.split()[-1] == "layer", header
    ttft = next(line for line in text.splitlines() if line.startswith("TTFT p99"))
    assert ttft.split()[-1] == "gateway", ttft



@pytest.fixture(scope="module")
def live_dynamo(tmp_path_factory):
    """The same with Dynamo's simulated frontend (label `model`) in front of vLLM workers."""
    if not Path(PROMETHEUS).exists():
        pytest.fail("the prometheus server is required: install Debian's 'prometheus' package (make test does)")
    tmp = tmp_path_factory.mktemp("dynamo-commands")
    data = yaml.safe_load(DYNAMO.read_text())
    data["service"]["models"] = []
    spec = tmp / "dynamo.yaml"
    spec.write_text(yaml.safe_dump(data, sort_keys=False))
    models = {"m-old": "healthy", "m-new": "ttft_degradation"}
    workers = Simulator(models=models, request_rate=20.0, seed=4)
    frontend = Simulate("--engine", "dynamo", "--request-rate", "20", *(f"--model={m}={s}" for m, s in models.items()))
    prom = None
    with stopping([workers]):
        try:
            workers.start(port=0)
            args = ["--target", f"127.0.0.1:{workers.port}", "--gateway-target", frontend.instance, "--interval", "1s"]
            config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"}, "scrape_configs": printed_jobs(*args, spec)}
            prom = Prometheus(tmp, config, {})
            prom.start()
            poll(lambda: len(prom.query("up == 1")) == 2 or None, prom.started + 30, 0.5, "both jobs up")
            poll(lambda: prom.query("dynamo_frontend_time_to_first_token_seconds_bucket"), prom.started + 30, 0.5, "frontend TTFT")
            yield {"prom": prom, "spec": spec}
        finally:
            if prom is not None:
                prom.stop()
            frontend.stop()


@pytest.mark.slow
def test_doctor_and_compare_follow_the_dynamo_frontend(live_dynamo) -> None:
    prom, spec = live_dynamo["prom"], live_dynamo["spec"]
    code, out = _doctor(prom, spec, 0)
    assert code == 0, out
    assert "gateway: Dynamo frontend 1.6.0 under {namespace=\"dynamo-prod\",job=\"dynamo-frontend\"}" in out
    assert "name generation live: 1.5.0 on (dynamo_frontend_requests_total …)" in out
    assert "its rules read 4 raw metrics under the gateway's selector\n  all 4 are present" in out
    time.sleep(max(0.0, prom.started + 25 - time.monotonic()))
    result = invoke(
        "compare", spec, "--prometheus", prom.url, "--baseline", "model_name=m-old", "--candidate", "model_name=m-new",
        "--window", "20s", "--format", "json",
    )
    kpi = {k["key"]: k for k in json.loads(result.stdout)["kpis"]}
    # the frontend names the model `model`: the sides' model_name is read as it
    assert 'model="m-new"' in kpi["ttft_p99"]["expr"]["candidate"] and kpi["ttft_p99"]["layer"] == "gateway"
    assert kpi["ttft_p99"]["verdict"] == "REGRESSION", kpi["ttft_p99"]
    assert kpi["gateway_success"]["baseline"] > 0.99, kpi["gateway_success"]
    assert 'status="error"' in kpi["gateway_success"]["expr"]["candidate"]

# --- init --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("gateway", "flags", "job", "version"),
    [("llm-d-epp", [], "llm-d-epp", "0.10.0"), ("llm-d-epp", ["--gateway-version", "0.8"], "llm-d-epp", "0.8"), ("dynamo", [], "dynamo-frontend", "1.6.1")],
)
def test_init_scaffolds_a_gateway_spec_that_builds_and_checks(tmp_path: Path, gateway, flags, job, version) -> None:
    target = tmp_path / "front.yaml"
    result = invoke("init", "--use-case", "chat", "--model", "m1", "--gateway", gateway, *flags, "-o", target)
    assert result.exit_code == 0, result.output
    data = yaml.safe_load(target.read_text())
    assert data["gateway"] == {"engine": gateway, "engine_version": version, "selector": {"namespace": "llm-prod", "job": job}}
    assert data["service"]["selector"]["job"] == "vllm"
    text = target.read_text()
    if version == "0.8":  # no TTFT histogram at the gateway before 0.9: the build says so, and so does the spec
        assert "#   Time to first token at the gateway (ttft) is not observable on llm-d EPP 0.8.0" in text
    built = invoke("build", "--strict", "-o", tmp_path / "out", target)  # promtool check rules and test rules
    assert built.exit_code == 0, built.output
    rules = (tmp_path / "out" / "chat" / "prometheus" / "gateway.rules.yaml").read_text()
    assert f'job="{job}"' in rules and "GatewaySuccessRatioLow" in rules


def test_init_gateway_options_are_checked() -> None:
    result = invoke("init", "--use-case", "chat", "--model", "m1", "--gateway", "llm-d-epp", "--gateway-version", "0.2")
    assert result.exit_code == 2
    assert "error: --gateway-version: llm-d EPP 0.2 is outside the versions genobs knows (0.3.0 to 0.10.0)" in result.stderr
    result = invoke("init", "--use-case", "chat", "--model", "m1", "--gateway", "dynamo", "--gateway-job", "vllm")
    assert result.exit_code == 2 and "error: --gateway-job: is service.selector itself" in result.stderr
    result = invoke("init", "--use-case", "chat", "--model", "m1", "--gateway-job", "epp")
    assert result.exit_code == 2 and "--gateway-job needs --gateway" in result.stderr


@pytest.mark.slow
def test_doctor_speaks_of_the_specs_engine(live) -> None:
    # a Prometheus with vLLM pods only, asked about an SGLang spec: nothing in the report says vLLM
    code, out = _doctor(live["plain"], REPO / "specs" / "sglang.yaml", 1)
    assert code == 1, out
    assert "SGLang series under" in out and "spec sglang: SGLang 0.5.23" in out
    assert "no target under the selector" in out or "no SGLang series under the selector" in out
    assert "vLLM" not in out, out

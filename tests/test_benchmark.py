"""`genobs benchmark`: real and schema-written exports of AIPerf, GuideLLM and vllm bench
serve (tests/fixtures/benchmarks/, each naming its source) judged by the specs' KPIs."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from genobs.cli import main
from genobs.gates.formats import load_runs
from tests.conftest import REPO

FIX = REPO / "tests" / "fixtures" / "benchmarks"
AIPERF_REAL = FIX / "aiperf_0.8.0_schema1.0_nonstreaming.json"  # verbatim aiperf 0.8.0 export
AIPERF_LEGACY = FIX / "aiperf_0.1_records_streaming_run1.json"  # verbatim aiperf <= 0.1.x export
SWEEP = sorted(FIX.glob("aiperf_sweep_gemma_c*.json"))
GUIDELLM = FIX / "guidellm_sweep_llama_plateau.json"
VLLM = FIX / "vllm_bench_gpt_oss_120b_c1.json"
VLLM_DETAILED = FIX / "vllm_bench_rag_detailed.json"
SPECS = REPO / "specs"


def run(*args: str | Path):
    return CliRunner().invoke(main, ["benchmark", *map(str, args)])


def kpis(result) -> list[dict]:
    return json.loads(result.stdout)["kpis"]


def spec_file(tmp_path: Path, use_case: str, alerts: str = "") -> Path:
    p = tmp_path / f"{use_case}.yaml"
    p.write_text(
        f"version: genobs/v1\nname: gate-{use_case}\nuse_case: {use_case}\n"
        'service:\n  engine_version: "0.33"\n  selector: {job: vllm}\n' + alerts
    )
    return p


# --- parsing: detection, units, absent is not zero --------------------------------------------


def test_shipped_aiperf_export_is_read_in_base_units_and_streaming_metrics_stay_absent():
    (r,) = load_runs(AIPERF_REAL)
    assert r.tool == "AIPerf 0.8.0, schema 1.0"
    assert r.metrics["e2e"]["p99"].value == pytest.approx(15.14387014e-3)  # ms -> s
    assert r.metrics["output_tps"]["avg"].value == pytest.approx(1022443.0554692096)
    inp = r.metrics["input_tps"]["avg"]
    assert inp.value == pytest.approx(2042654.398625265 - 1022443.0554692096)
    assert inp.derived == "total - output tok/s"
    assert r.metrics["total_tps"]["avg"].derived == ""  # exported, and null percentiles are not read
    assert set(r.metrics["total_tps"]) == {"avg"}
    for absent in ("ttft", "tpot", "itl", "output_tps_per_user", "prefill_tps_per_user"):
        assert absent not in r.metrics
    w = r.workload
    assert (w.concurrency, w.requests, w.streaming, w.model) == (4, 64, False, "mock-model")
    assert w.duration_s == pytest.approx(0.034502655)


def test_legacy_records_layout_is_detected_and_converted():
    (r,) = load_runs(AIPERF_LEGACY)
    assert "records layout" in r.tool
    assert r.metrics["ttft"]["p99"].value == pytest.approx(3.8333894000399996)
    assert r.metrics["output_tps_per_user"]["avg"].value == pytest.approx(36.68434853220158)
    total = r.metrics["total_tps"]["avg"]
    assert total.value == pytest.approx((48950 + 21624) / 9.317788951)
    assert "benchmark_duration" in total.derived
    assert (r.workload.concurrency, r.workload.requests, r.workload.failed) == (100, 89, 11)


def test_guidellm_report_gives_one_run_per_benchmark_with_ms_converted():
    runs = load_runs(GUIDELLM)
    assert [r.workload.concurrency for r in runs] == [16, 32, 64, 128]
    last = runs[3]
    assert last.path.endswith("#benchmarks[3]")
    assert last.metrics["ttft"]["p99"].value == pytest.approx(6.4)
    assert last.metrics["e2e"]["avg"].value == pytest.approx(2.1 + 511 * 0.026)  # request_latency is in s
    per_user = last.metrics["output_tps_per_user"]["p50"]
    assert per_user.value == pytest.approx(1000 / 26.0) and "inter_token_latency_ms" in per_user.derived
    assert last.metrics["input_tps"]["avg"].derived == ""  # GuideLLM exports prompt tokens/s
    assert last.workload.duration_s == pytest.approx(300.0)


def test_vllm_bench_result_reproduces_the_published_single_request_reference():
    (r,) = load_runs(VLLM)
    per_user = r.metrics["output_tps_per_user"]["p50"]
    assert per_user.value == pytest.approx(713.0, rel=1e-3)  # 1 / median TPOT
    assert per_user.derived == "1 / p50 TPOT"
    assert r.metrics["ttft"]["p50"].value == pytest.approx(0.388)
    assert r.metrics["e2e"]["p50"].value == pytest.approx(1.789)
    assert r.metrics["input_tps"]["avg"].value == pytest.approx(10000 / 1.789, rel=1e-3)
    assert (r.workload.input_tokens, r.workload.output_tokens, r.workload.concurrency) == (10000, 1000, 1)


def test_vllm_bench_detailed_lists_give_per_request_speeds():
    (r,) = load_runs(VLLM_DETAILED)
    assert r.metrics["output_tps_per_user"]["avg"].value == pytest.approx(20 / (20 * 0.04))
    ttfts = [2.9, 3.1, 3.3, 2.8, 3.0, 3.6, 3.2, 3.4]
    assert r.metrics["prefill_tps_per_user"]["avg"].value == pytest.approx(sum(4096 / t for t in ttfts) / 8)


# --- verdicts ------------------------------------------------------------------------------------


def test_non_streaming_run_fails_the_chat_gate_as_no_data_never_as_zero():
    result = run(AIPERF_REAL, "--spec", SPECS / "chat.yaml", "--format", "json")
    assert result.exit_code == 1, result.output
    rows = {r["kpi"]: r for r in kpis(result)}
    for name in ("output tok/s/user (avg)", "TTFT (p99)"):
        assert rows[name]["verdict"] == "no data" and rows[name]["value"] is None
        assert "did not stream" in rows[name]["note"]
    doc = json.loads(result.stdout)
    assert any("too small to trust" in w for w in doc["runs"][0]["warnings"])


def test_chat_sweep_passes_until_per_user_speed_falls_below_the_preset_and_draws_the_chart(tmp_path: Path):
    png = tmp_path / "sweep.png"
    result = run(*SWEEP, "--spec", SPECS / "chat.yaml", "--plot", png, "--format", "json")
    assert result.exit_code == 1, result.output
    rows = kpis(result)
    speed = [(r["run"], r["verdict"]) for r in rows if r["kpi"] == "output tok/s/user (avg)"]
    assert speed == [
        ("run 1 (c=1)", "pass"),
        ("run 2 (c=8)", "pass"),
        ("run 3 (c=32)", "pass"),
        ("run 4 (c=100)", "FAIL"),
    ]
    c100 = next(r for r in rows if r["run"] == "run 4 (c=100)" and r["kpi"] == "output tok/s/user (avg)")
    assert c100["value"] == pytest.approx(13.4) and c100["threshold"].startswith("≥ 20 tok/s/user")
    ceiling = next(r for r in rows if r["kpi"].startswith("highest concurrency"))
    assert ceiling["value"] == 32
    head = png.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    assert struct.unpack(">II", head[16:24]) == (800, 480)


def test_thresholds_come_from_the_spec_not_from_a_copy(tmp_path: Path):
    relaxed = spec_file(
        tmp_path,
        "chat",
        "alerts:\n  output_speed_per_user: {warning: 10, critical: 5}\n  ttft: {warning: 5s, critical: 10s}\n",
    )
    result = run(SWEEP[-1], "--spec", relaxed, "--format", "json")
    assert result.exit_code == 0, result.output
    speed = next(r for r in kpis(result) if r["kpi"] == "output tok/s/user (avg)")
    assert speed["verdict"] == "pass" and speed["threshold"].startswith("≥ 10 tok/s/user")


def test_a_run_without_its_workload_is_judged_with_a_warning(tmp_path: Path):
    # vllm bench serve without token totals and duration: lengths and duration are unknown
    doc = json.loads(VLLM.read_text())
    for key in ("total_input_tokens", "total_output_tokens", "duration"):
        del doc[key]
    bare = tmp_path / "bare.json"
    bare.write_text(json.dumps(doc))
    result = run(bare, "--spec", SPECS / "agentic.yaml", "--format", "json")
    assert result.exit_code in (0, 1), result.output
    warnings = json.loads(result.stdout)["runs"][0]["warnings"]
    stated = [w for w in warnings if w.startswith("workload not stated")]
    assert stated and all(f in stated[0] for f in ("input length", "output length", "duration")), warnings
    assert "concurrency" not in stated[0] and "request count" not in stated[0]  # still in the result
    # the complete result warns about nothing of the kind
    full = run(VLLM, "--spec", SPECS / "agentic.yaml", "--format", "json")
    assert not [w for w in json.loads(full.stdout)["runs"][0]["warnings"] if w.startswith("workload not stated")]


def test_batch_gate_passes_while_output_rises_and_fails_where_it_plateaus():
    rising = run(*SWEEP, "--spec", SPECS / "batch.yaml", "--format", "json")
    assert rising.exit_code == 0, rising.output
    plateau = run(GUIDELLM, "--spec", SPECS / "batch.yaml", "--format", "json")
    assert plateau.exit_code == 1, plateau.output
    row = next(r for r in kpis(plateau) if r["kpi"].endswith("rises with concurrency"))
    assert row["verdict"] == "FAIL" and row["value"] == pytest.approx(4350 / 4300 - 1)
    assert "above concurrency 64" in row["note"]
    single = run(SWEEP[0], "--spec", SPECS / "batch.yaml")
    assert single.exit_code == 1 and "nothing could be judged" in single.stdout


def test_capacity_degradation_against_a_baseline_and_along_a_sweep(tmp_path: Path):
    spec = spec_file(tmp_path, "capacity")
    result = run(SWEEP[-1], "--baseline", SWEEP[0], "--spec", spec, "--format", "json")
    assert result.exit_code == 1, result.output
    row = next(r for r in kpis(result) if "vs baseline" in r["kpi"])
    assert row["verdict"] == "FAIL" and row["value"] == pytest.approx(3.9 / 0.18)
    total = next(r for r in kpis(result) if r["kpi"] == "total tok/s (system)")
    assert total["value"] == pytest.approx(5468) and total["baseline"] is not None
    near = run(SWEEP[1], "--baseline", SWEEP[0], "--spec", spec, "--format", "json")
    row = next(r for r in kpis(near) if "vs baseline" in r["kpi"])
    assert row["verdict"] == "pass" and row["value"] == pytest.approx(0.35 / 0.18)
    sweep = run(*SWEEP, "--spec", spec, "--format", "json")
    vs = [(r["run"], r["verdict"]) for r in kpis(sweep) if "vs concurrency 1" in r["kpi"]]
    assert vs == [("run 1 (c=1)", "n/a"), ("run 2 (c=8)", "pass"), ("run 3 (c=32)", "FAIL"), ("run 4 (c=100)", "FAIL")]


def test_rag_gate_derives_the_prefill_threshold_from_the_spec_ttft():
    result = run(VLLM_DETAILED, "--spec", SPECS / "rag.yaml", "--format", "json")
    assert result.exit_code == 0, result.output
    row = next(r for r in kpis(result) if r["kpi"].startswith("prefill tok/s/user"))
    assert row["threshold"].startswith("≥ 410 tok/s/user (4,096-token input within TTFT 10s")
    assert row["verdict"] == "pass" and row["derived"]


def test_agentic_gate_on_vllm_bench_and_markdown_output():
    result = run(VLLM, "--spec", SPECS / "agentic.yaml", "--format", "md")
    assert result.exit_code == 0, result.output
    assert "| run | KPI | value | threshold | verdict | note |" in result.stdout
    assert "| run 1 (c=1) | output tok/s/user (p50) | 713 tok/s/user |" in result.stdout
    assert "derived: 1 / p50 TPOT" in result.stdout
    assert "verdict: pass" in result.stdout


# --- unreadable input: exit 2, file:field, no traceback ------------------------------------------


def _bad(tmp_path: Path, name: str, edit) -> Path:
    doc = json.loads(AIPERF_LEGACY.read_text())
    edit(doc)
    p = tmp_path / name
    p.write_text(json.dumps(doc))
    return p


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["records"]["ttft"].update(unit="tokens"), ":records.ttft.unit: error: expected a time unit"),
        (lambda d: d["records"]["ttft"].update(p99="fast"), ":records.ttft.p99: error: expected a number, got 'fast'"),
        (
            lambda d: d["records"]["output_token_throughput_per_user"].update(unit="tokens/sec"),
            ":records.output_token_throughput_per_user.unit: error: expected unit 'tokens/sec/user'",
        ),
        (
            lambda d: d["input_config"]["loadgen"].update(concurrency="many"),
            ":input_config.loadgen.concurrency: error:",
        ),
    ],
)
def test_bad_fields_name_file_and_field(tmp_path: Path, edit, message: str):
    p = _bad(tmp_path, "bad.json", edit)
    result = run(p, "--spec", SPECS / "chat.yaml")
    assert result.exit_code == 2
    assert f"{p}{message}" in result.stderr
    assert "Traceback" not in result.output


def test_unreadable_files_exit_2(tmp_path: Path):
    broken = tmp_path / "broken.json"
    broken.write_text('{"records": {')
    other = tmp_path / "other.json"
    other.write_text('{"hello": 1}')
    nan = tmp_path / "nan.json"
    nan.write_text(VLLM.read_text().replace('"p99_ttft_ms": 452.7', '"p99_ttft_ms": NaN'))
    for path, message in (
        (broken, "error: not valid JSON (line 1, column 14)"),
        (other, "error: not a benchmark export genobs knows"),
        (tmp_path / "missing.json", "error: cannot read"),
        (nan, ":p99_ttft_ms: error: expected a finite number"),
    ):
        result = run(path, "--spec", SPECS / "chat.yaml")
        assert result.exit_code == 2, (path, result.output)
        assert message in result.stderr, result.stderr
    bad_spec = tmp_path / "bad.yaml"
    bad_spec.write_text("version: genobs/v1\nname: x\nuse_case: nope\n")
    result = run(VLLM, "--spec", bad_spec)
    assert result.exit_code == 2 and "use_case" in result.stderr


def test_plot_needs_a_sweep(tmp_path: Path):
    result = run(VLLM, "--spec", SPECS / "chat.yaml", "--plot", tmp_path / "x.png")
    assert result.exit_code == 2 and "needs a sweep" in result.stderr
    assert result.stdout.splitlines()[-1].startswith("verdict: ")  # the table is not lost
    assert not (tmp_path / "x.png").exists()


def test_genobs_help_does_not_import_the_gate_modules():
    code = (
        "import sys; from genobs.cli import main; sys.argv=['genobs','--help']\ntry: main()\nexcept SystemExit: pass\n"
    )
    code += "print(sorted(m for m in sys.modules if m.startswith(('matplotlib', 'genobs.gates', 'genobs.commands'))))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True).stdout
    assert "benchmark" in out and out.strip().splitlines()[-1] == "[]"


# --- hostile exports: regular files only, bounded cost, impossible figures refused ----------------


def _cli(*args: str | Path, timeout: float = 60) -> subprocess.CompletedProcess:
    """The real command in its own process: a hang fails the test instead of stalling it."""
    cmd = [sys.executable, "-m", "genobs", "benchmark", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=timeout)


def test_a_fifo_as_result_or_baseline_is_refused_at_once(tmp_path: Path):
    fifo = tmp_path / "export.json"
    os.mkfifo(fifo)
    for args in ((fifo, "--spec", SPECS / "chat.yaml"), (VLLM, "--spec", SPECS / "chat.yaml", "--baseline", fifo)):
        result = _cli(*args, timeout=20)
        assert result.returncode == 2, result.stderr
        assert f"{fifo}: error: not a regular file (a FIFO)" in result.stderr
        assert "Traceback" not in result.stderr
    folder = run(tmp_path, "--spec", SPECS / "chat.yaml")
    assert folder.exit_code == 2 and "not a regular file (a folder)" in folder.stderr


def _peak(*args: str | Path) -> tuple[int, str, int, float]:
    """(exit code, stderr, peak RSS in MiB, seconds) of `genobs benchmark ARGS` in a fresh process."""
    code = (
        "import resource, subprocess, sys\n"
        "r = subprocess.run([sys.executable, '-m', 'genobs', 'benchmark', *sys.argv[1:]], capture_output=True, text=True)\n"
        "print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss // 1024)\n"
        "print(r.stderr)"
    )
    start = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True, cwd=REPO, timeout=60
    ).stdout
    first, stderr = out.split("\n", 1)
    exit_code, peak = map(int, first.split())
    return exit_code, stderr, peak, time.monotonic() - start


def test_a_million_empty_objects_are_refused_before_they_are_built(tmp_path: Path):
    for name, item, count, needle in (
        ("objects.json", "{}", 1_000_000, "holds more than 1,000,000 objects and lists"),
        ("lists.json", "[]", 3_000_000, "holds more than 1,000,000 objects and lists"),
        ("strings.json", '"ab"', 5_000_000, "holds more than 4,000,000 strings"),
        ("numbers.json", "0.5", 20_000_000, "holds more than 16,000,000 values"),
    ):
        bomb = tmp_path / name
        bomb.write_text('{"benchmarks": [' + ",".join([item] * count) + "]}")
        code, stderr, peak, seconds = _peak(bomb, "--spec", SPECS / "chat.yaml")
        assert code == 2 and f"{bomb}: error: {needle}" in stderr, stderr
        assert seconds < 30 and peak < 500, (name, seconds, peak)
        bomb.unlink()
    braces = tmp_path / "braces.json"  # structure inside strings is text, not cost
    braces.write_text(json.dumps({**json.loads(VLLM.read_text()), "generated_texts": ["{[,"] * 400_000}))
    assert run(braces, "--spec", SPECS / "chat.yaml").exit_code == 0
    runs = tmp_path / "runs.json"
    runs.write_text(json.dumps({"benchmarks": [{}] * 300}))
    result = run(runs, "--spec", SPECS / "chat.yaml")
    assert result.exit_code == 2 and ":benchmarks: error: holds 300 benchmarks; at most 256" in result.stderr
    many = run(*[GUIDELLM] * 65, "--spec", SPECS / "chat.yaml")
    assert many.exit_code == 2 and "more than 256 runs in the inputs" in many.stderr


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"completed": 1, "completed": 200, "request_throughput": 1}', "duplicate key 'completed' in one object"),
        ('{"completed": 1' + "0" * 400 + ', "request_throughput": 1}', "has 401 digits; not a measured figure"),
        ('{"completed": 10, "request_throughput": 1, "mean_ttft_ms": 1e400}', ":mean_ttft_ms: error: expected a finite"),
        ('{"completed": 10, "request_throughput": 1, "p99_ttft_ms": -5}', "TTFT p99 is -0.005; it cannot be negative"),
        ('{"completed": 10, "request_throughput": 1, "duration": -3}', ":workload.duration: error: duration is -3"),
        ('{"completed": 0, "request_throughput": 1}', "requests is 0; a run of no requests measured nothing"),
        ('{"completed": 10, "request_throughput": 1, "max_concurrency": 0}', "concurrency is 0"),
        ('{"completed": 10, "request_throughput": -1}', "request throughput avg is -1.0"),
        ('{"completed": 10, "request_throughput": 1, "median_tpot_ms": 1e-320}', "output tok/s/user p50 is inf"),
        (
            '{"schema_version": "1.0", "input_config": {"endpoint": {"model_names": 5}}}',
            ":input_config.endpoint.model_names: error: expected a list of model names",
        ),
    ],
)
def test_impossible_or_malformed_figures_are_located_errors(tmp_path: Path, text: str, message: str):
    p = tmp_path / "export.json"
    p.write_text(text)
    result = run(p, "--spec", SPECS / "chat.yaml")
    assert result.exit_code == 2, result.output
    assert result.stderr.startswith(str(p)) and message in result.stderr, result.stderr
    assert "Traceback" not in result.output


def test_a_sweep_with_zero_throughput_fails_the_gate_and_writes_strict_json(tmp_path: Path):
    failed = json.loads(SWEEP[1].read_text())
    failed["output_token_throughput"]["avg"] = 0.0
    failed["error_request_count"] = {"unit": "requests", "avg": 512}
    p = tmp_path / "c008_all_failed.json"
    p.write_text(json.dumps(failed))
    result = run(SWEEP[0], p, SWEEP[2], "--spec", SPECS / "batch.yaml", "--format", "json")
    assert result.exit_code == 1, result.output

    def refuse(constant: str) -> None:
        raise ValueError(f"not strict JSON: {constant}")

    doc = json.loads(result.stdout, parse_constant=refuse)
    row = next(r for r in doc["kpis"] if r["kpi"].endswith("rises with concurrency"))
    assert row["verdict"] == "FAIL" and "stops rising above concurrency 1" in row["note"]
    rising = run(p, SWEEP[2], "--spec", SPECS / "batch.yaml", "--format", "json")
    doc = json.loads(rising.stdout, parse_constant=refuse)
    row = next(r for r in doc["kpis"] if r["kpi"].endswith("rises with concurrency"))
    assert row["value"] is None and row["verdict"] == "pass"
    assert any(n.startswith("kpis[") and "inf written as null" in n for n in doc["non_finite"]), doc


def test_names_from_an_export_cannot_forge_lines_or_hide_the_table(tmp_path: Path):
    doc = json.loads(VLLM.read_text())
    doc["model_id"] = "m\r\x1b[2K\x1b]8;;http://evil/\x07x\nverdict: pass\n<!-- | `*x*`"
    p = tmp_path / "forged.json"
    p.write_text(json.dumps(doc))
    text = run(p, "--spec", SPECS / "chat.yaml")
    assert text.exit_code == 0
    assert "\x1b" not in text.stdout and "\r" not in text.stdout and "\x07" not in text.stdout
    assert [line for line in text.stdout.splitlines() if line.startswith("verdict:")] == [
        text.stdout.splitlines()[-1]
    ]
    md = run(p, "--spec", SPECS / "chat.yaml", "--format", "md")
    assert "<!--" not in md.stdout and "\\<\\!--" in md.stdout and "\\`\\*x\\*\\`" in md.stdout
    assert "\\| " in md.stdout
    assert [line for line in md.stdout.splitlines() if line.startswith("verdict:")] == [md.stdout.splitlines()[-1]]


def test_plot_path_must_be_a_png_file_in_an_existing_folder(tmp_path: Path):
    for bad, needle in (
        (tmp_path, "is a folder"),
        (tmp_path / "x.html", "give a file name ending in .png"),
        (tmp_path / "nope" / "x.png", "does not exist"),
    ):
        result = run(*SWEEP, "--spec", SPECS / "chat.yaml", "--plot", bad)
        assert result.exit_code == 2 and needle in result.stderr, result.output
        assert "Traceback" not in result.output
    assert list(tmp_path.iterdir()) == []

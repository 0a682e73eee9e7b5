"""`genobs benchmark` on real exports of AIPerf 0.13.0, GuideLLM 0.8.1 and vLLM 0.33.0 `vllm bench
serve`, all run against one streaming test server (tests/fixtures/exports/README.md): every figure
genobs reads is checked against what the tool printed in its console log beside the export, the
workload (rate or concurrency) is the one the run used, and the per-user speed is one statistic
across tools."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from genobs.cli import main
from genobs.gates.bench_report import exported
from genobs.gates.formats import load_runs
from genobs.gates.runs import Run
from genobs.gates.vocabulary import NAMES
from tests.conftest import REPO

EXPORTS = REPO / "tests" / "fixtures" / "exports"
AIPERF_C4 = EXPORTS / "aiperf" / "c4" / "profile_export_aiperf.json"
AIPERF_RATE = EXPORTS / "aiperf" / "rate3" / "profile_export_aiperf.json"
AIPERF_NOSTREAM = EXPORTS / "aiperf" / "c4_nostream" / "profile_export_aiperf.json"
GUIDELLM_C4 = EXPORTS / "guidellm" / "c4" / "benchmarks.json"
GUIDELLM_RATE = EXPORTS / "guidellm" / "rate" / "benchmarks.json"
VLLM_C4 = EXPORTS / "vllm_bench" / "c4" / "c4.json"
SPECS = REPO / "specs"


def bench(*args: str | Path):
    return CliRunner().invoke(main, ["benchmark", *map(str, args)])


def one(path: Path) -> Run:
    (run,) = load_runs(path)
    return run


def ms(run: Run, metric: str, stat: str) -> float:
    return run.metrics[metric][stat].value * 1000.0


# --- what the tools printed --------------------------------------------------------------------


def aiperf_console(export: Path) -> dict[str, dict[str, float]]:
    """AIPerf's rich tables: metric name (with unit) -> {avg, min, max, p99, p90, p50}; a name
    wrapped onto a second line is joined."""
    columns = ("avg", "min", "max", "p99", "p90", "p50")
    table: dict[str, dict[str, float]] = {}
    last = ""
    for line in (export.parent / "console.log").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("│").split("│")]
        if not line.lstrip().startswith("│") or len(cells) < 7:
            continue
        name, values = cells[0], cells[1:7]
        if not any(values) and last:  # the wrapped unit of the row above
            table[f"{last} {name}"] = table.pop(last)
            last = f"{last} {name}"
            continue
        table[name] = {c: float(v.replace(",", "")) for c, v in zip(columns, values) if v not in ("", "N/A")}
        last = name
    return table


def guidellm_console(export: Path) -> dict[str, list[float]]:
    """The first benchmark row of GuideLLM's latency and throughput tables, CI and '*' dropped."""
    text = (export.parent / "console.log").read_text()
    rows = {}
    for title in ("Request Latency Statistics", "Server Throughput Statistics"):
        block = text[text.index(title) :].splitlines()
        row = next(line for line in block if re.match(r"\| (concurrent|constant)@", line))
        cells = [c.strip() for c in row.strip("|").split("|")][1:]
        rows[title] = [float(c.split("±")[0].rstrip("*")) for c in cells]
    return rows


def vllm_console(export: Path) -> dict[str, float]:
    out = {}
    for line in (export.parent / "console.log").read_text().splitlines():
        m = re.match(r"^([A-Za-z][^:]*):\s+([\d.]+)\s*$", line)
        if m:
            out[m.group(1)] = float(m.group(2))
    return out


# --- figures as the tools printed them ---------------------------------------------------------


@pytest.mark.parametrize("export", [AIPERF_C4, AIPERF_RATE])
def test_aiperf_figures_match_its_console(export: Path):
    run, console = one(export), aiperf_console(export)
    for name, metric in (
        ("Time to First Token (ms)", "ttft"),
        ("Inter Token Latency (ms)", "tpot"),  # genobs' TPOT is AIPerf's "Inter Token Latency"
        ("Request Latency (ms)", "e2e"),
    ):
        for stat in ("avg", "p50", "p90", "p99"):
            assert round(ms(run, metric, stat), 2) == console[name][stat], (name, stat)
    for name, metric in (
        ("Output Token Throughput Per User (tokens/sec/user)", "output_tps_per_user"),
        ("E2E Output Token Throughput (tokens/sec/user)", "e2e_output_tps_per_user"),
    ):
        for stat in ("avg", "p50", "p90", "p99"):
            assert round(run.metrics[metric][stat].value, 2) == console[name][stat], (name, stat)
    for name, metric in (
        ("Output Token Throughput (tokens/sec)", "output_tps"),
        ("Input Token Throughput (tokens/sec)", "input_tps"),
        ("Request Throughput (requests/sec)", "request_throughput"),
    ):
        assert round(run.metrics[metric]["avg"].value, 2) == console[name]["avg"], name
        assert run.metrics[metric]["avg"].derived == "", f"{metric} is exported by AIPerf, not derived"
    assert run.workload.requests == console["Request Count (requests)"]["avg"]


def test_aiperf_request_rate_run_keeps_its_workload():
    run, console = one(AIPERF_RATE), aiperf_console(AIPERF_RATE)
    w = run.workload
    assert (w.rate, w.request_rate) == (3.0, "3 req/s (poisson)")
    # no concurrency was set: the measured mean AIPerf prints as Effective Concurrency
    assert round(w.concurrency, 2) == console["Effective Concurrency (requests)"]["avg"] == 4.8
    assert w.concurrency_note == "measured mean"
    result = bench(AIPERF_RATE, "--spec", SPECS / "chat.yaml", "--format", "json")
    doc = json.loads(result.stdout)
    assert not any("not stated" in x for x in doc["runs"][0]["warnings"]), doc["runs"][0]["warnings"]
    assert {r["run"] for r in doc["kpis"]} == {"run 1 (3 req/s)"}
    text = bench(AIPERF_RATE, "--spec", SPECS / "chat.yaml").stdout
    assert "concurrency 4.8 (measured mean), request rate 3 req/s (poisson)" in text


def test_a_request_rate_sweep_is_recognised(tmp_path: Path):
    doc = json.loads(AIPERF_RATE.read_text())
    doc["input_config"]["phases"][0]["rate"] = 6.0
    doc["output_token_throughput"]["avg"] *= 1.9
    faster = tmp_path / "rate6.json"
    faster.write_text(json.dumps(doc))
    chart = tmp_path / "sweep.png"
    result = bench(faster, AIPERF_RATE, "--spec", SPECS / "batch.yaml", "--format", "json", "--plot", chart)
    assert chart.read_bytes().startswith(b"\x89PNG")
    rows = {r["kpi"]: r for r in json.loads(result.stdout)["kpis"]}
    rises = rows["output tok/s (system) rises with request rate"]
    assert rises["run"] == "sweep, request rate 3..6"
    assert rises["verdict"] == "pass" and rises["value"] == pytest.approx(0.9)
    assert result.exit_code == 0, result.output


def test_guidellm_figures_match_its_console():
    for export in (GUIDELLM_C4, GUIDELLM_RATE):
        run, console = one(export), guidellm_console(export)
        lat = console["Request Latency Statistics"]
        # Request Latency s (mean, mdn, p95), TTFT, TTFOT, ITL, TPOT ms (mean, mdn, p95)
        assert [round(run.metrics["e2e"][s].value, 1) for s in ("avg", "p50", "p95")] == lat[0:3]
        assert [round(ms(run, "ttft", s), 1) for s in ("avg", "p50", "p95")] == lat[3:6]
        # genobs' TPOT is GuideLLM's ITL; GuideLLM's own TPOT (TTFT included) is not read
        assert [round(ms(run, "tpot", s), 1) for s in ("avg", "p50", "p95")] == lat[9:12]
        guidellm_tpot = lat[12]
        for stats in run.metrics.values():
            for st in stats.values():
                assert round(st.value * 1000, 1) != guidellm_tpot
        thr = console["Server Throughput Statistics"]
        # concurrency mdn, mean; requests/s, input, output, total tok/s
        assert round(run.metrics["request_throughput"]["avg"].value, 1) == thr[2]
        assert round(run.metrics["input_tps"]["avg"].value, 1) == thr[3]
        assert round(run.metrics["output_tps"]["avg"].value, 1) == thr[4]
        assert round(run.metrics["total_tps"]["avg"].value, 1) == thr[5]
    rate = one(GUIDELLM_RATE)
    assert (rate.workload.rate, rate.workload.request_rate) == (3.0, "3 req/s (constant)")
    assert round(rate.workload.concurrency, 1) == guidellm_console(GUIDELLM_RATE)["Server Throughput Statistics"][1]
    assert one(GUIDELLM_C4).workload.concurrency == 4


def test_vllm_bench_figures_match_its_console():
    run, console = one(VLLM_C4), vllm_console(VLLM_C4)
    for metric, name in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL")):
        assert round(ms(run, metric, "avg"), 2) == console[f"Mean {name} (ms)"]
        assert round(ms(run, metric, "p50"), 2) == console[f"Median {name} (ms)"]
        assert round(ms(run, metric, "p99"), 2) == console[f"P99 {name} (ms)"]
    assert round(run.metrics["output_tps"]["avg"].value, 2) == console["Output token throughput (tok/s)"]
    assert round(run.metrics["total_tps"]["avg"].value, 2) == console["Total token throughput (tok/s)"]
    assert round(run.metrics["request_throughput"]["avg"].value, 2) == console["Request throughput (req/s)"]
    assert run.workload.concurrency == console["Maximum request concurrency"] == 4
    assert round(run.workload.duration_s, 2) == console["Benchmark duration (s)"]


# --- one per-user statistic ----------------------------------------------------------------------


def test_per_user_speed_is_one_statistic_across_tools_on_the_same_server():
    speeds = {}
    for export in (AIPERF_C4, AIPERF_RATE, GUIDELLM_C4, GUIDELLM_RATE):
        run = one(export)
        avg = run.metrics["output_tps_per_user"]["avg"]
        mean_tpot = run.metrics["tpot"]["avg"].value
        # the mean over requests of 1 / TPOT: at least 1 / mean TPOT (Jensen), and close to it here
        assert 1 / mean_tpot <= avg.value <= 1.01 / mean_tpot, export
        assert avg.caveat == ""
        speeds[export] = avg.value
    # computed from the records where the export has them, exported by AIPerf otherwise
    assert "profile_export.jsonl" in one(AIPERF_C4).metrics["output_tps_per_user"]["avg"].derived
    assert one(AIPERF_RATE).metrics["output_tps_per_user"]["avg"].derived == ""
    assert "48 requests" in one(GUIDELLM_C4).metrics["output_tps_per_user"]["avg"].derived
    # vllm bench without --save-detailed has only aggregates: a median, flagged as not the same statistic
    vllm = one(VLLM_C4).metrics["output_tps_per_user"]
    assert set(vllm) == {"p50"} and "not the mean over requests" in vllm["p50"].caveat
    assert vllm["p50"].value == pytest.approx(1000 / vllm_console(VLLM_C4)["Median TPOT (ms)"], rel=1e-3)
    speeds[VLLM_C4] = vllm["p50"].value
    # the same server with 20 ms between tokens: the tools agree within their own timing (< 5 %)
    assert max(speeds.values()) / min(speeds.values()) < 1.05, speeds
    result = bench(VLLM_C4, "--spec", SPECS / "chat.yaml")
    assert "not the mean over requests other exports give" in result.stdout


def test_aiperf_records_and_summary_give_the_same_per_user_mean(tmp_path: Path):
    summary_only = tmp_path / "profile_export_aiperf.json"
    shutil.copy(AIPERF_C4, summary_only)
    exported = one(summary_only).metrics["output_tps_per_user"]["avg"]
    computed = one(AIPERF_C4).metrics["output_tps_per_user"]["avg"]
    assert exported.derived == "" and computed.derived.startswith("mean over 48 requests")
    assert computed.value == pytest.approx(exported.value, rel=1e-9)


def test_a_broken_aiperf_record_file_names_its_line(tmp_path: Path):
    shutil.copy(AIPERF_C4, tmp_path / AIPERF_C4.name)
    lines = (AIPERF_C4.parent / "profile_export.jsonl").read_text().splitlines()
    lines[2] = lines[2][:40]
    (tmp_path / "profile_export.jsonl").write_text("\n".join(lines) + "\n")
    result = bench(tmp_path / AIPERF_C4.name, "--spec", SPECS / "chat.yaml")
    assert result.exit_code == 2
    assert result.stderr == f"{tmp_path / 'profile_export.jsonl'}:line 3: error: not valid JSON\n"


def test_non_streaming_aiperf_run_has_no_per_user_speed():
    run = one(AIPERF_NOSTREAM)
    assert run.workload.streaming is False
    assert "output_tps_per_user" not in run.metrics and "ttft" not in run.metrics


# --- names and cosmetics -----------------------------------------------------------------------


def test_each_tool_gets_a_footnote_mapping_its_names_to_genobs_terms():
    result = bench(GUIDELLM_C4, AIPERF_C4, VLLM_C4, "--spec", SPECS / "chat.yaml")
    out = result.stdout
    assert 'GuideLLM: TTFT = "TTFT" (time_to_first_token_ms); TPOT = "ITL" (inter_token_latency_ms)' in out
    assert 'its "TPOT" (time_per_output_token_ms) is request latency / output tokens, TTFT included' in out
    assert 'AIPerf: TTFT = "Time to First Token" (time_to_first_token); TPOT = "Inter Token Latency"' in out
    assert 'vllm bench serve: TTFT = "TTFT" (*_ttft_ms); TPOT = "TPOT" (*_tpot_ms); ITL = "ITL"' in out
    doc = json.loads(bench(GUIDELLM_C4, "--spec", SPECS / "chat.yaml", "--format", "json").stdout)
    assert doc["runs"][0]["names"]["tpot"] == '"ITL" (inter_token_latency_ms)'


def test_every_exported_figure_has_the_tools_name_and_every_derived_one_says_how():
    for export in (AIPERF_C4, AIPERF_RATE, GUIDELLM_C4, GUIDELLM_RATE, VLLM_C4):
        run = one(export)
        have = exported(run)
        assert have <= set(NAMES[run.family]), (export, have - set(NAMES[run.family]))
        for metric in set(run.metrics) - have:
            assert all(st.derived for st in run.metrics[metric].values()), (export, metric)
    names = json.loads(bench(VLLM_C4, "--spec", SPECS / "chat.yaml", "--format", "json").stdout)["runs"][0]["names"]
    assert "input_tps" not in names and "output_tps_per_user" not in names  # derived: total - output, 1 / p50 TPOT


def test_measured_concurrency_is_printed_rounded():
    out = bench(GUIDELLM_RATE, GUIDELLM_C4, "--spec", SPECS / "chat.yaml").stdout
    assert "concurrency 4.2 (measured mean)" in out
    assert "4.15767" not in out and "run 1 (3 req/s)" in out and "run 2 (c=4)" in out
    # a rate run beside a concurrency run is no sweep: the rate run's concurrency was measured, not set
    assert "sweep" not in out

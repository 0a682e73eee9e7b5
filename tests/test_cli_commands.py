"""The commands around `build`: init, explain, check, shell completion, --version,
a fast --help, and the pre-commit hook definition."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from genobs.build import render_spec
from genobs.cli import main
from genobs.commands.scaffold import use_cases
from tests.conftest import REPO, SPECS

HEAVY = ("grafanalib", "jinja2", "pydantic", "promql_parser")


def run(*args: str, **kwargs):
    return CliRunner().invoke(main, list(args), **kwargs)


# --- init -------------------------------------------------------------------------------------


def test_init_chat_prints_a_commented_spec_that_builds(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(REPO / "specs")
    result = run("init", "--use-case", "chat", "--model", "gpt-oss-120b")
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert text.startswith("# yaml-language-server: $schema=../genobs.schema.json\n")  # from the working folder
    assert text.count("#") > 20  # commented
    spec = tmp_path / "chat.yaml"
    spec.write_text(text)
    out = render_spec(spec)
    assert out.name == "chat"
    alerts = yaml.safe_load(out.files["prometheus/alerts.rules.yaml"])["groups"][0]["rules"]
    assert any('model_name=~"gpt-oss-120b"' in a["expr"] for a in alerts)


@pytest.mark.parametrize("use_case", use_cases())
def test_init_every_use_case_with_options_writes_a_file_that_builds(use_case: str, tmp_path: Path):
    target = tmp_path / "specs" / f"{use_case}.yaml"
    (tmp_path / "genobs.schema.json").write_text("{}")
    result = run(
        "init",
        "--use-case",
        use_case,
        "--model",
        "meta-llama/Llama-3.1-8B-Instruct",
        "--name",
        f"{use_case}-prod",
        "--engine-version",
        "0.9.1",
        "--namespace",
        "serving",
        "-o",
        str(target),
    )
    assert result.exit_code == 0, result.output
    text = target.read_text()
    assert text.splitlines()[0] == "# yaml-language-server: $schema=../genobs.schema.json"
    data = yaml.safe_load(text)
    assert data["name"] == f"{use_case}-prod" and data["service"]["engine_version"] == "0.9.1"
    assert data["service"]["selector"] == {"namespace": "serving", "job": "vllm"} and data["use_case"] == use_case
    assert render_spec(target).name == f"{use_case}-prod"


def _schema_target(text: str, spec_folder: Path) -> Path | None:
    first = text.splitlines()[0]
    if "$schema=" not in first:
        return None
    return spec_folder / first.split("$schema=", 1)[1]


def test_init_schema_line_points_at_a_file_that_exists(tmp_path: Path):
    (tmp_path / "repo" / "monitoring" / "specs").mkdir(parents=True)
    (tmp_path / "repo" / "genobs.schema.json").write_text("{}")
    target = tmp_path / "repo" / "monitoring" / "specs" / "chat.yaml"
    assert run("init", "--use-case", "chat", "--model", "m", "-o", str(target)).exit_code == 0
    found = _schema_target(target.read_text(), target.parent)
    assert found is not None and found.resolve() == (tmp_path / "repo" / "genobs.schema.json").resolve()
    assert target.read_text().startswith("# yaml-language-server: $schema=../../genobs.schema.json\n")


def test_init_without_a_schema_file_writes_no_dangling_schema_line(tmp_path: Path):
    target = tmp_path / "lonely" / "chat.yaml"
    assert run("init", "--use-case", "chat", "--model", "m", "-o", str(target)).exit_code == 0
    text = target.read_text()
    found = _schema_target(text, target.parent)
    # either a line pointing at a real file (one may exist above tmp_path) or a hint how to make one
    assert (found is not None and found.is_file()) or (
        "yaml-language-server:" not in text and "genobs schema > genobs.schema.json" in text.splitlines()[0]
    )


def test_init_prints_the_warnings_the_build_prints(tmp_path: Path):
    """agentic on vLLM 0.8.0: E2E buckets end at 60s, so the preset's e2e alert can never fire."""
    target = tmp_path / "agentic.yaml"
    result = run("init", "--use-case", "agentic", "--model", "m", "--engine-version", "0.8.0", "-o", str(target))
    assert result.exit_code == 0, result.output
    init_warnings = [
        line.removeprefix("warning: ") for line in result.stderr.splitlines() if line.startswith("warning: ")
    ]
    assert any("VllmE2eLatencyP99High" in w and "can never fire" in w for w in init_warnings), result.stderr
    assert list(render_spec(target).warnings) == init_warnings  # exactly what build will say
    text = target.read_text()
    assert all(f"#   {w}" in text for w in init_warnings)  # kept in the file for later readers
    quiet = run("init", "--use-case", "agentic", "--model", "m", "-o", str(tmp_path / "new.yaml"))
    assert "can never fire" not in quiet.stderr


def test_init_refuses_to_overwrite_and_bad_options_exit_2(tmp_path: Path):
    target = tmp_path / "x.yaml"
    target.write_text("keep")
    result = run("init", "--use-case", "chat", "--model", "m", "-o", str(target))
    assert result.exit_code == 2 and "--force" in result.output and target.read_text() == "keep"
    result = run("init", "--use-case", "chat", "--model", 'm"} or vector(1)', "--name", "Bad Name")
    assert result.exit_code == 2
    assert result.stdout == ""
    assert "error: --name: " in result.stderr and "error: --model: " in result.stderr
    assert "Traceback" not in result.output
    result = run("init", "--use-case", "chatt", "--model", "m")
    assert result.exit_code == 2 and "chat" in result.output


def test_init_feature_check_runs_through_the_plan():
    result = run("init", "--use-case", "chat", "--model", "m", "--engine-version", "0.2.0")
    assert result.exit_code == 2 and "--engine-version" in result.stderr


# --- explain ----------------------------------------------------------------------------------


def test_explain_alert_with_the_default_spec():
    result = run("explain", "VllmTtftP99High")
    assert result.exit_code == 0, result.output
    out = result.stdout
    assert out.startswith("VllmTtftP99High - Time to first token (signal ttft)")
    assert "built-in chat spec" in out
    assert "critical  TTFT p99 above 2.5s" in out and "warning   TTFT p99 above 1s" in out  # chat preset
    assert "[for 10m]" in out
    assert 'genobs:ttft_seconds:quantile_rate5m{job="vllm",quantile="0.99"} > 2.5' in out
    assert "First action\n  Now: if a deploy, config or prompt-template change preceded it, roll it back" in out
    assert "Recorded series it reads" in out and "histogram_quantile(0.99" in out


def test_explain_uses_the_given_spec_and_is_case_insensitive():
    chat = REPO / "specs" / "chat.yaml"
    result = run("explain", "vllmqueuetimep99high", "--spec", str(chat))
    assert result.exit_code == 0, result.output
    assert "warning  Queue time p99 above 2s" in result.stdout  # the spec's override (a cause: no critical)
    assert "pages for" not in result.stdout
    ttft = run("explain", "VllmTtftP99High", "--spec", str(chat))
    assert "  pages for: first-token latency: users wait for the answer to start" in ttft.stdout
    assert 'job="vllm-chat"' in result.stdout and str(chat) in result.stdout


def test_explain_signal_lists_every_alert_of_it():
    for signal, names in (
        ("metrics_absent", ("VllmMetricsAbsent",)),
        ("target_down", ("VllmTargetDown", "VllmServingCapacityLost")),
        ("engine_hung", ("VllmEngineHung", "VllmFleetNoProgress")),
    ):
        result = run("explain", signal)
        assert result.exit_code == 0
        for name in names:
            assert f"{name} - " in result.stdout


def test_explain_signal_or_alert_not_in_this_plan_says_why():
    result = run("explain", "nixl_transfer")
    assert result.exit_code == 0 and "needs features.disaggregated_prefill: true" in result.stdout
    result = run("explain", "VllmNixlTransfersFailing")
    assert result.exit_code == 0 and "Not generated for this spec" in result.stdout
    result = run("explain", "VllmNixlTransfersFailing", "--spec", str(REPO / "specs" / "disaggregated.yaml"))
    assert result.exit_code == 0 and "PromQL (warning)" in result.stdout


def test_explain_nixl_alerts_name_their_ratios_and_versions(tmp_path):
    spec = tmp_path / "pd.yaml"
    spec.write_text(
        "version: genobs/v1\nname: pd\nuse_case: chat\n"
        "service: {engine_version: '0.13.0', selector: {job: vllm}, roles: {label: role, prefill: p, decode: d}}\n"
        "features: {disaggregated_prefill: true}\n"
    )
    result = run("explain", "VllmNixlTransfersFailing", "--spec", str(spec))
    assert result.exit_code == 0, result.output
    # before 0.33 failed notifications are not in the failed-transfer counter: both are added
    assert "genobs:nixl_failed_notifications:rate5m" in result.stdout
    assert "nixl_xfer_time_seconds:bucket_rate5m" in result.stdout and "NIXL failure and expiry ratios" in result.stdout
    result = run("explain", "VllmNixlKvExpired", "--spec", str(spec))
    assert result.exit_code == 0 and "it exists from 0.15.0" in result.stdout
    result = run("explain", "VllmNixlKvExpired", "--spec", str(REPO / "specs" / "disaggregated.yaml"))
    assert result.exit_code == 0 and "PromQL (warning)" in result.stdout
    assert "genobs:nixl_kv_expired_requests:rate5m" in result.stdout
    assert "genobs:nixl_failed_notifications" not in run(
        "explain", "VllmNixlTransfersFailing", "--spec", str(REPO / "specs" / "disaggregated.yaml")
    ).stdout


def test_explain_unknown_name_did_you_mean_exit_2():
    result = run("explain", "VllmTtftP99Hihg")
    assert result.exit_code == 2
    assert "did you mean 'VllmTtftP99High'" in result.stderr
    result = run("explain", "qeue_time")
    assert result.exit_code == 2 and "'queue_time'" in result.stderr
    result = run("explain", "zzzzzz")
    assert result.exit_code == 2 and "no alert or signal named 'zzzzzz'" in result.stderr


def test_explain_without_name_lists_alerts_and_signals():
    result = run("explain")
    assert result.exit_code == 0 and "VllmTtftP99High" in result.stdout and "  ttft" in result.stdout


def test_explain_bad_spec_exit_2(tmp_path: Path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: genobs/v1\nname: b\nuse_case: chta\nservice: {selector: {job: b}}\n")
    result = run("explain", "ttft", "--spec", str(bad))
    assert result.exit_code == 2 and f"{bad}:3:11: error: use_case:" in result.stderr
    # explain never writes anything, so it must not claim "nothing was written"
    assert "nothing was written" not in result.stderr
    assert result.stderr.rstrip().endswith("1 problem found; nothing to explain until the spec is fixed")


# --- check ------------------------------------------------------------------------------------


@pytest.fixture()
def repo_copy(tmp_path: Path) -> Path:
    shutil.copytree(REPO / "specs", tmp_path / "specs")
    result = run("build", "--no-check", "-o", str(tmp_path / "out"), str(tmp_path / "specs"))
    assert result.exit_code == 0, result.output
    return tmp_path


def test_check_up_to_date_exit_0(repo_copy: Path, monkeypatch):
    monkeypatch.chdir(repo_copy)
    result = run("check")
    assert result.exit_code == 0, result.output
    assert "out/ is up to date" in result.stdout


def test_check_reports_stale_missing_extra_and_a_capped_diff(repo_copy: Path, monkeypatch):
    monkeypatch.chdir(repo_copy)
    alerts = Path("out/chat/prometheus/alerts.rules.yaml")
    alerts.write_text(alerts.read_text().replace("for: 10m", "for: 11m"))
    Path("out/rag/RUNBOOK.md").unlink()
    Path("out/batch/notes.md").write_text("hand-written\n")
    shutil.rmtree("out/agentic")
    Path("out/retired").mkdir()
    result = run("check", "--diff-lines", "8")
    assert result.exit_code == 1
    out = result.stdout
    assert "out/chat/ is stale (specs/chat.yaml):\n  changed  prometheus/alerts.rules.yaml" in out
    assert "--- out/chat/prometheus/alerts.rules.yaml (on disk)" in out
    assert "-    for: 11m" in out and "+    for: 10m" in out
    assert "... (diff cut after 8 lines)" in out
    assert "out/rag/ is stale (specs/rag.yaml):\n  missing  RUNBOOK.md" in out
    assert "  extra    notes.md" in out
    assert "out/agentic/ is missing" in out
    assert "out/retired/ is not generated by any spec" in out
    assert "regenerate with: genobs build specs -o out" in out
    # one spec: other folders are not its business
    result = run("check", "specs/disaggregated.yaml")
    assert result.exit_code == 0, result.output


def test_check_spec_error_exit_2_and_hand_edit_after_spec_change(repo_copy: Path, monkeypatch):
    monkeypatch.chdir(repo_copy)
    spec = Path("specs/chat.yaml")
    spec.write_text(spec.read_text().replace("queue_time: {warning: 2s}", "queue_time: {warning: 3s}"))
    result = run("check")
    assert result.exit_code == 1 and "changed  prometheus/alerts.rules.yaml" in result.stdout
    spec.write_text(spec.read_text().replace("use_case: chat ", "use_case: chta "))
    result = run("check")
    assert result.exit_code == 2 and "did you mean 'chat'" in result.stderr and "was not checked" in result.stderr


def test_check_kubernetes_flag_expects_the_manifests(repo_copy: Path, monkeypatch):
    monkeypatch.chdir(repo_copy)
    result = run("check", "--kubernetes", "specs/chat.yaml")
    assert result.exit_code == 1 and "missing  kubernetes/prometheusrule.yaml" in result.stdout
    assert run("build", "--no-check", "--kubernetes", "specs/chat.yaml").exit_code == 0
    assert run("check", "--kubernetes", "specs/chat.yaml").exit_code == 0
    result = run("check", "specs/chat.yaml")
    assert result.exit_code == 1 and "extra    kubernetes/prometheusrule.yaml" in result.stdout


def test_committed_out_folder_is_current(monkeypatch):
    monkeypatch.chdir(REPO)
    result = run("check")
    assert result.exit_code == 0, result.output


def test_pre_commit_hook_definition():
    hooks = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    hook = next(h for h in hooks if h["id"] == "genobs-check")
    assert hook["language"] == "python" and hook["entry"] == "genobs check"
    assert hook["files"] == r"^specs/.*\.ya?ml$" and hook["pass_filenames"] is False


# --- completion, version, help ----------------------------------------------------------------


def test_shell_completion_prints_a_script():
    for shell, marker in (("bash", "_genobs_completion"), ("zsh", "#compdef genobs"), ("fish", "complete")):
        result = run(prog_name="genobs", env={"_GENOBS_COMPLETE": f"{shell}_source"})
        assert result.exit_code == 0 and marker in result.stdout, (shell, result.output)


def test_completion_completes_commands_and_alert_names():
    env = {"_GENOBS_COMPLETE": "bash_complete", "COMP_WORDS": "genobs ex", "COMP_CWORD": "1"}
    result = run(prog_name="genobs", env=env)
    assert "plain,explain" in result.stdout
    env = {"_GENOBS_COMPLETE": "bash_complete", "COMP_WORDS": "genobs explain VllmTtft", "COMP_CWORD": "2"}
    assert "plain,VllmTtftP99High" in run(prog_name="genobs", env=env).stdout


def test_version():
    result = run("--version")
    assert result.exit_code == 0 and result.stdout.startswith("genobs, version ")


def test_help_imports_nothing_heavy_and_is_fast():
    code = (
        "import sys, genobs.cli\n"
        f"heavy = [m for m in sys.modules if m.split('.')[0] in {HEAVY!r}]\n"
        "print(','.join(heavy))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0 and proc.stdout.strip() == "", proc.stdout + proc.stderr
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "genobs", "--help"], capture_output=True, text=True, cwd=REPO
    )
    elapsed = time.perf_counter() - start
    assert proc.returncode == 0 and "Commands:" in proc.stdout
    imported = {line.split("|")[-1].strip().split(".")[0] for line in proc.stderr.splitlines() if "|" in line}
    assert not imported & set(HEAVY), imported & set(HEAVY)
    assert elapsed < 2.0, elapsed  # typically ~0.1 s; generous for loaded CI machines


@pytest.mark.parametrize("spec", SPECS[:1], ids=[p.stem for p in SPECS[:1]])
def test_build_output_lines_unchanged(spec: Path, tmp_path: Path):
    result = run("build", "--no-check", "-o", str(tmp_path), str(spec))
    assert result.exit_code == 0 and result.stdout.startswith(f"{spec} -> {tmp_path}/")


# --- options that cannot describe what they name are exit 2, naming the option --------------------


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["init", "--use-case", "chat", "--model", "m", "--job", ""], "--job: must not be empty"),
        (["init", "--use-case", "chat", "--model", " "], "--model: must not be empty"),
        (["scrape-config", "--interval", "banana"], "--interval: 'banana' is not a Prometheus duration"),
        (["scrape-config", "--interval", "0s"], "is not a Prometheus duration"),
        (["scrape-config", "--target", "http://10.0.0.5:8000/metrics"], "--target: 'http://10.0.0.5:8000/metrics' is not HOST:PORT"),
        (["scrape-config", "--target", "10.0.0.5"], "is not HOST:PORT"),
    ],
)
def test_options_that_cannot_work_are_refused(args: list[str], needle: str):
    result = run(*args)
    assert result.exit_code == 2, result.output
    assert needle in result.output and "--namespace" not in result.output


def test_scrape_config_accepts_host_port_targets_and_durations():
    result = run("scrape-config", "--target", "10.0.0.5:8000", "--target", "[::1]:9400", "--interval", "1m30s")
    assert result.exit_code == 0, result.output
    assert "10.0.0.5:8000" in result.output and "scrape_interval: 1m30s" in result.output


def test_build_into_a_file_is_a_clear_error(tmp_path: Path):
    target = tmp_path / "a-file"
    target.write_text("not a folder\n")
    for output in (target, target / "sub"):
        result = run("build", "--no-check", str(REPO / "specs" / "chat.yaml"), "-o", str(output))
        assert result.exit_code == 2, result.output
        assert f"{target}: error: -o needs a folder" in result.output and "Errno" not in result.output
    assert target.read_text() == "not a folder\n"

"""Files the commands write at a path the user gives (`--plot` of backtest, benchmark and
compare, `init -o`): checked before any work (exit 2 naming the option: a folder, a name
that is not .png, a missing folder), and written whole beside the path then renamed over
it, so a symbolic link there is replaced and the file it points to is never touched."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from backtest_fake import FakeSource, fleet, serving
from click.testing import CliRunner

from genobs.cli import main
from tests.test_benchmark import SPECS, SWEEP
from tests.test_compare import SPEC as COMPARE_SPEC
from tests.test_compare import _answering

LATENCY = Path(__file__).parent / "fixtures" / "backtest" / "latency.yaml"
PNG = b"\x89PNG\r\n\x1a\n"


def run(*args: str | Path):
    return CliRunner().invoke(main, [str(a) for a in args])


def planted(tmp: Path, name: str) -> tuple[Path, Path]:
    """A link at `name` pointing at a file someone else cares about."""
    victim = tmp / "victim.txt"
    victim.write_text("precious\n")
    link = tmp / name
    link.symlink_to(victim)
    return link, victim


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("timeline.exe", "ending in .png"),
        ("folder", "is a folder"),
        ("missing/timeline.png", "does not exist"),
    ],
)
def test_backtest_plot_is_checked_before_the_run(tmp_path: Path, name: str, message: str):
    (tmp_path / "folder").mkdir()
    fake = FakeSource(fleet(["up"], 1))
    with serving(fake) as url:
        result = run("backtest", LATENCY, "--prometheus", url, "--from", "now-2h", "--plot", tmp_path / name)
    assert result.exit_code == 2 and message in result.stderr and "--plot" in result.stderr, result.output
    assert "Traceback" not in result.output and "internal error" not in result.output
    assert fake.seen == []  # nothing was asked, so nothing was lost


def test_backtest_plot_replaces_a_link_never_its_target(tmp_path: Path):
    link, victim = planted(tmp_path, "timeline.png")
    with serving(FakeSource(fleet(["up"], 1))) as url:
        result = run("backtest", LATENCY, "--prometheus", url, "--from", "now-2h", "--to", "now-1h", "--plot", link)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("backtest: spec chat-latency")  # the report, before the chart
    assert not link.is_symlink() and link.read_bytes()[:8] == PNG
    assert victim.read_text() == "precious\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["timeline.png", "victim.txt"]  # no temporary file left


def test_benchmark_and_compare_plots_replace_a_link_never_its_target(tmp_path: Path):
    link, victim = planted(tmp_path, "sweep.png")
    result = run("benchmark", *SWEEP, "--spec", SPECS / "chat.yaml", "--plot", link)
    assert result.exit_code in (0, 1), result.output
    assert not link.is_symlink() and link.read_bytes()[:8] == PNG and victim.read_text() == "precious\n"
    (tmp_path / "compare").mkdir()
    link, victim = planted(tmp_path / "compare", "compare.png")
    sides = ["--baseline", "model_name=a", "--candidate", "model_name=b", "--window", "5m"]
    with _answering(lambda expr: "0.5" if "quantile" in expr else "5") as url:
        result = run("compare", COMPARE_SPEC, "--prometheus", url, *sides, "--plot", link)
    assert result.exit_code in (0, 1), result.output
    assert not link.is_symlink() and link.read_bytes()[:8] == PNG and victim.read_text() == "precious\n"


def test_init_output_replaces_a_link_and_refuses_folders(tmp_path: Path):
    link, victim = planted(tmp_path, "spec.yaml")
    result = run("init", "--use-case", "chat", "--model", "m", "-o", link)
    assert result.exit_code == 2 and "exists; pass --force" in result.output, result.output
    dangling = tmp_path / "dangling.yaml"
    dangling.symlink_to(tmp_path / "nowhere.yaml")
    result = run("init", "--use-case", "chat", "--model", "m", "-o", dangling)
    assert result.exit_code == 2 and "exists; pass --force" in result.output, result.output
    assert not (tmp_path / "nowhere.yaml").exists()
    result = run("init", "--use-case", "chat", "--model", "m", "-o", link, "--force")
    assert result.exit_code == 0, result.output
    assert not link.is_symlink() and "use_case: chat" in link.read_text() and victim.read_text() == "precious\n"
    result = run("init", "--use-case", "chat", "--model", "m", "-o", tmp_path)
    assert result.exit_code == 2 and "is a folder" in result.output, result.output
    assert oct(os.stat(link).st_mode & 0o777) == oct(0o666 & ~_umask())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask

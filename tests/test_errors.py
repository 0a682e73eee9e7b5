"""Bad input: file, line, field, exit code 2, nothing written."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from genobs.cli import main
from tests.conftest import REPO


def test_bad_spec_exit_2_with_location_and_nothing_written(tmp_path: Path):
    good = tmp_path / "specs" / "a.yaml"
    good.parent.mkdir()
    good.write_text((REPO / "specs" / "chat.yaml").read_text())
    out = tmp_path / "out"
    result = CliRunner().invoke(main, ["build", str(good.parent), "-o", str(out), "--no-check"])
    assert result.exit_code == 0, result.output
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    bad = good.parent / "b.yaml"
    bad.write_text("version: genobs/v1\nname: b\nuse_case: chta\nservice:\n  selektor: {a: b}\n")
    good.write_text(good.read_text().replace("use_case: chat", "use_case: rag"))
    result = CliRunner().invoke(main, ["build", str(good.parent), "-o", str(out), "--no-check"])
    assert result.exit_code == 2
    assert "b.yaml:3:11: error: use_case: 'chta' is not allowed" in result.output
    assert "did you mean 'chat'" in result.output
    assert (
        "b.yaml:5:" in result.output
        and "service.selektor: unknown key 'selektor'; did you mean 'selector'?" in result.output
    )
    assert "Traceback" not in result.output
    after = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before


def test_missing_file_exit_2(tmp_path: Path):
    result = CliRunner().invoke(main, ["build", str(tmp_path / "nope.yaml")])
    assert result.exit_code == 2
    assert "no such file" in result.output


def test_without_promtool_build_warns_and_strict_fails(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no promtool here
    spec = str(REPO / "specs" / "chat.yaml")
    result = CliRunner().invoke(main, ["build", spec, "-o", str(tmp_path / "a")])
    assert result.exit_code == 0
    assert "warning: promtool not found on PATH" in result.output
    result = CliRunner().invoke(main, ["build", spec, "-o", str(tmp_path / "b"), "--strict"])
    assert result.exit_code == 1
    assert "error: promtool not found on PATH" in result.output

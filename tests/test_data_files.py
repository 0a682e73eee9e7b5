"""genobs' data files read with libyaml give exactly what the pure-Python parser gives."""

from __future__ import annotations

from importlib import resources

import pytest
import yaml

from genobs import data

FILES = sorted(p.name for p in resources.files("genobs.data").iterdir() if p.name.endswith(".yaml"))


def test_every_data_file_is_listed():
    assert {"vllm.yaml", "signals.yaml", "presets.yaml", "burn_rates.yaml", "gates.yaml"} <= set(FILES)


@pytest.mark.parametrize("name", FILES)
def test_fast_parser_gives_the_same_data(name: str):
    assert hasattr(yaml, "CSafeLoader"), "PyYAML without libyaml: the data files load with the slower parser"
    text = resources.files("genobs.data").joinpath(name).read_bytes()
    assert data.load(name) == yaml.load(text, Loader=yaml.SafeLoader)  # noqa: S506
    assert data.load(name) is data.load(name)  # parsed once per process


def _fresh_load(name: str):
    """data.load as a new process runs it (its in-process cache emptied)."""
    data.load.cache_clear()
    return data.load(name)


def test_a_new_process_reads_the_cached_data(tmp_path, monkeypatch):
    monkeypatch.setattr(data, "_cache_file", lambda name: tmp_path / f"{name}.marshal")
    monkeypatch.setattr("sys.dont_write_bytecode", False)
    parsed = _fresh_load("signals.yaml")
    assert (tmp_path / "signals.yaml.marshal").is_file()
    monkeypatch.setattr("yaml.load", lambda *a, **k: pytest.fail("parsed again"))
    assert _fresh_load("signals.yaml") == parsed
    data.load.cache_clear()


def test_a_cache_of_other_data_is_not_read(tmp_path, monkeypatch):
    """A cache written for an older version of the file (or another file) is parsed anew and rewritten."""
    import marshal

    monkeypatch.setattr(data, "_cache_file", lambda name: tmp_path / f"{name}.marshal")
    monkeypatch.setattr("sys.dont_write_bytecode", False)
    cache = tmp_path / "presets.yaml.marshal"
    cache.write_bytes(marshal.dumps((b"an older file's digest", {"stale": True})))
    text = resources.files("genobs.data").joinpath("presets.yaml").read_bytes()
    assert _fresh_load("presets.yaml") == yaml.load(text, Loader=yaml.SafeLoader)  # noqa: S506
    cache.write_bytes(b"\x00 not marshal")
    assert _fresh_load("presets.yaml") == yaml.load(text, Loader=yaml.SafeLoader)  # noqa: S506
    data.load.cache_clear()


def test_a_folder_genobs_cannot_write_means_no_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(data, "_cache_file", lambda name: tmp_path / "missing" / "file" / f"{name}.marshal")
    monkeypatch.setattr("sys.dont_write_bytecode", False)
    (tmp_path / "missing").write_text("a file where the folder would go")
    assert _fresh_load("burn_rates.yaml")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["missing"]
    data.load.cache_clear()

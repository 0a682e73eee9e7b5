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

"""genobs' domain knowledge as data (metric catalog, signals, presets, burn rates, gates,
capacity and DCGM tables), read once per process."""

from __future__ import annotations

import functools
from importlib import resources
from typing import Any


@functools.cache
def load(name: str) -> Any:
    """The parsed contents of genobs/data/<name>; shared by every caller, so never modified.
    libyaml's parser when PyYAML has it (these files are trusted and plain: it gives the same
    data as the pure-Python one, tests/test_data_files.py), about 10x faster."""
    import yaml

    from genobs.writer import FAST_SAFE_LOADER

    return yaml.load(resources.files(__name__).joinpath(name).read_bytes(), Loader=FAST_SAFE_LOADER)  # noqa: S506

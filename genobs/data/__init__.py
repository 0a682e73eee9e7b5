"""genobs' domain knowledge as data (metric catalog, signals, presets, burn rates, gates,
capacity and DCGM tables), read once per process."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import marshal
import os
import sys
from importlib import resources
from pathlib import Path
from typing import Any


@functools.cache
def load(name: str) -> Any:
    """The parsed contents of genobs/data/<name>; shared by every caller, so never modified.
    libyaml's parser when PyYAML has it (these files are trusted and plain: it gives the same
    data as the pure-Python one, tests/test_data_files.py), about 10x faster; and, from the
    second process on, the data as marshal wrote it beside the file (see _cache_file)."""
    raw = resources.files(__name__).joinpath(name).read_bytes()
    digest = hashlib.blake2b(raw, digest_size=16).digest()
    cache = _cache_file(name)
    if cache is not None:
        found = _read_cache(cache, digest)
        if found is not None:
            return found[0]
    import yaml

    from genobs.writer import FAST_SAFE_LOADER

    data = yaml.load(raw, Loader=FAST_SAFE_LOADER)  # noqa: S506
    if cache is not None and not sys.dont_write_bytecode:
        _write_cache(cache, digest, data)
    return data


def _cache_file(name: str) -> Path | None:
    """Where the parsed data of `name` is kept between processes: __pycache__/<name>.<cache tag>.marshal
    beside the data files, like the bytecode of genobs' modules (PyYAML's constructor is pure
    Python: parsing vllm.yaml cost a vLLM build 3% of its time, the cache a tenth of that). None
    where the package is not a folder on disk or the interpreter keeps no bytecode."""
    tag = sys.implementation.cache_tag
    if tag is None or not __file__:
        return None
    return Path(__file__).parent / "__pycache__" / f"{name}.{tag}.marshal"


def _read_cache(path: Path, digest: bytes) -> tuple[Any] | None:
    """(data,) when the cache holds the data of a file with this digest; None otherwise (no cache,
    another file's data, a cache written by another Python: its marshal format may differ)."""
    try:
        found = marshal.loads(path.read_bytes())
    except (OSError, EOFError, ValueError, TypeError):
        return None
    if not (isinstance(found, tuple) and len(found) == 2 and found[0] == digest):
        return None
    return (found[1],)


def _write_cache(path: Path, digest: bytes, data: Any) -> None:
    """Write the cache whole or not at all (a reader never sees half a file); a folder genobs may
    not write to (a system install) just means no cache."""
    try:
        body = marshal.dumps((digest, data))
    except ValueError:  # a type marshal cannot write: no cache for this file
        return
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(exist_ok=True)
        tmp.write_bytes(body)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)

"""The one input discipline of every command that reads untrusted bytes (specs,
benchmark exports, Prometheus answers): regular files only, read up to a byte cap,
and JSON parsed strictly with its cost bounded before any object is built
(containers, values and strings counted first, duplicate keys refused, huge integers refused).
Callers turn `Unreadable` into their own located error."""

from __future__ import annotations

import errno
import gc
import json
import os
import re
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


class Unreadable(Exception):
    """Bytes that cannot be read or parsed; `message` says why, without the file name."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def file_kind(mode: int) -> str:
    """What a file that is not a regular file is, for messages."""
    kinds = [
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a folder"),
    ]
    return next((text for test, text in kinds if test(mode)), "not a regular file")


def read_regular(path: Path, limit: int, what: str = "file", expected: str = "a regular file") -> bytes:
    """Up to `limit` bytes of a regular file. Opening without blocking and checking
    the opened file (not the name) means a FIFO, device or socket is refused at once
    instead of hanging or reading forever."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except OSError as exc:
        if exc.errno == errno.ENOENT and path.is_symlink():
            raise Unreadable(f"symbolic link to a missing file ({os.readlink(path)})") from None
        if exc.errno == errno.ENXIO:  # what open() says for a socket
            raise Unreadable(f"not a regular file (a socket); {expected}") from None
        raise Unreadable(f"cannot read {what}: {exc.strerror}") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise Unreadable(f"not a regular file ({file_kind(mode)}); {expected}")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read(limit)
    except OSError as exc:
        raise Unreadable(f"cannot read {what}: {exc.strerror}") from None
    finally:
        os.close(fd)


# a JSON string, unrolled so long strings cost no backtracking; its contents never count as structure
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
MAX_INT_DIGITS = 30  # integers past this are no count or time anyone measured
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_DIGITS = b"0" * (MAX_INT_DIGITS + 1)


def json_cost(raw: bytes) -> tuple[int, int, int]:
    """(containers, values, strings) a JSON text would build, counted on its bytes without
    building anything. Upper bounds first (every brace, comma and quote); only when those
    are large are the ones inside strings taken off, from the strings' own bytes."""
    containers, commas, strings = raw.count(b"{") + raw.count(b"["), raw.count(b","), raw.count(b'"') // 2
    return containers, containers + commas + 1, strings


def _exact(raw: bytes) -> tuple[int, int]:
    """(containers, values) without the braces and commas inside strings."""
    inside = b"".join(_STRING.findall(raw))
    containers = raw.count(b"{") + raw.count(b"[") - inside.count(b"{") - inside.count(b"[")
    return containers, containers + raw.count(b",") - inside.count(b",") + 1


_parsing = 0  # parses under way, in any thread
_parsing_lock = threading.Lock()
_collector_was_on = False


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cycle collector off while JSON is parsed: a parse builds no cycles, but the
    collector, set off by every 700 new lists, would scan all of them again and again (a
    Prometheus answer of 150,000 samples is 150,000 lists: 4 times slower with it on).
    Threads parsing at once share one pause; the collector is back on after the last."""
    global _parsing, _collector_was_on
    with _parsing_lock:
        if _parsing == 0:
            _collector_was_on = gc.isenabled()
            gc.disable()
        _parsing += 1
    try:
        yield
    finally:
        with _parsing_lock:
            _parsing -= 1
            if _parsing == 0 and _collector_was_on:
                gc.enable()


def _pairs(pairs: list[tuple[str, object]]) -> dict:
    out: dict = {}
    for key, value in pairs:
        if key in out:
            raise Unreadable(f"duplicate key {key[:80]!r} in one object; keep one of them")
        out[key] = value
    return out


def _int(text: str) -> int | float:
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise Unreadable(f"the integer {text[:20]}... has {len(text)} digits; not a measured figure")
    return int(text)


def _constant(name: str) -> float:
    return float(name)  # NaN and Infinity pass through; number checks refuse them with their field


def load_json(raw: bytes, max_containers: int, max_values: int, max_strings: int) -> object:
    """The parsed document, or Unreadable when it is not strict JSON or would cost more than the caps."""
    containers, values, strings = json_cost(raw)
    if strings > max_strings:
        raise Unreadable(f"holds more than {max_strings:,} strings; too large to be what it claims")
    if containers > max_containers or values > max_values:
        containers, values = _exact(raw)
    if containers > max_containers:
        raise Unreadable(f"holds more than {max_containers:,} objects and lists; too large to be what it claims")
    if values > max_values:
        raise Unreadable(f"holds more than {max_values:,} values; too large to be what it claims")
    # an integer literal past MAX_INT_DIGITS needs a run of that many digits somewhere in the
    # bytes: without one, no integer needs checking (a Python call per integer, per sample)
    ints = _int if _LONG_DIGITS in raw.translate(_DIGITS_AS_ZERO) else None
    try:
        with _collector_paused():
            return json.loads(raw, object_pairs_hook=_pairs, parse_int=ints, parse_constant=_constant)
    except json.JSONDecodeError as exc:
        raise Unreadable(f"not valid JSON (line {exc.lineno}, column {exc.colno})") from None
    except (ValueError, RecursionError):  # bad UTF-8, or nested deeper than Python recurses
        raise Unreadable("not valid JSON") from None

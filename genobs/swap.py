"""`write` stage, file-system part: replace whole output folders so that a reader
never sees one missing, a crash leaves either the old or the new folder, and the
next build cleans (or restores) what a crash left behind.

How: each folder is staged next to its target as `.<name>.new-<token>` and then
exchanged with the target in one system call (`renameat2(RENAME_EXCHANGE)` on
Linux, `renamex_np(RENAME_SWAP)` on macOS), so the visible path is a real folder
before, during and after the swap; the old content ends up under the staging
name and is deleted. Where neither call exists or the file system refuses it, the
fallback is two renames (target -> `.<name>.old-<token>`, staging -> target) with a
window of microseconds in which the folder is missing; a crash inside it leaves
the old content under `.old-`, which the next build moves back before anything
else. Builds into the same output folder are serialised with a lock on that folder."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import re
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path

_TOKEN_BYTES = 6
# what new_folder and swap name their folders: exactly this shape, a token of 12 hex digits
_LEFTOVER = re.compile(rf"\.(?P<name>.+)\.(?P<kind>new|old)-[0-9a-f]{{{2 * _TOKEN_BYTES}}}")
_UNSUPPORTED = {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, getattr(errno, "ENOTSUP", errno.EOPNOTSUPP)}


@functools.cache
def _libc_exchange():
    """The platform's atomic exchange of two paths, or None."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None
    if hasattr(libc, "renameat2"):
        at_fdcwd, rename_exchange = -100, 2
        fn = libc.renameat2
        return lambda a, b: fn(at_fdcwd, a, at_fdcwd, b, rename_exchange)
    if hasattr(libc, "renamex_np"):
        rename_swap = 2
        fn = libc.renamex_np
        return lambda a, b: fn(a, b, rename_swap)
    return None


def exchange(a: Path, b: Path) -> bool:
    """Swap two existing paths atomically; False when the platform or file system cannot."""
    call = _libc_exchange()
    if call is None:
        return False
    if call(os.fsencode(a), os.fsencode(b)) == 0:
        return True
    err = ctypes.get_errno()
    if err in _UNSUPPORTED:
        return False
    raise OSError(err, os.strerror(err), str(b))


def remove(path: Path, last: str | None = None) -> bool:
    """Delete a file or folder, its file `last` after everything else (a marker: what cannot
    be deleted stays provably genobs', for the next build); False when some of it stays."""
    if path.is_dir() and not path.is_symlink():
        for child in path.iterdir() if last else ():
            if child.name != last:
                remove(child)
        if last and any(child.name != last for child in path.iterdir()):
            return False
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        with contextlib.suppress(OSError):
            path.unlink()
    return not (path.exists() or path.is_symlink())


def atomic_exchange_supported(directory: Path) -> bool:
    """Whether folders in `directory` can be swapped atomically (used by tests and docs)."""
    a, b = directory / f".probe.new-{secrets.token_hex(4)}", directory / f".probe.old-{secrets.token_hex(4)}"
    a.mkdir()
    b.mkdir()
    try:
        return exchange(a, b)
    finally:
        a.rmdir()
        b.rmdir()


def new_folder(parent: Path, name: str, kind: str) -> Path:
    """An empty `.<name>.<kind>-<token>` folder; mkdir applies the umask (mkdtemp's 0700 would not)."""
    for _ in range(100):
        path = parent / f".{name}.{kind}-{secrets.token_hex(_TOKEN_BYTES)}"
        try:
            path.mkdir(mode=0o777)
            return path
        except FileExistsError:
            continue
    raise FileExistsError(f"cannot create a staging folder in {parent}")


@contextlib.contextmanager
def locked(directory: Path) -> Iterator[None]:
    """Exclusive lock on a folder for the whole write (flock on the folder itself,
    so no lock file appears in the output)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock
        yield
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _own(path: Path, marker: str) -> bool:
    """A leftover genobs can prove it made: its name and token, and its marker file inside
    (a staging folder that died before its first file is empty: nothing to lose)."""
    if not _LEFTOVER.fullmatch(path.name) or path.is_symlink() or not path.is_dir():
        return False
    return (path / marker).is_file() or not any(path.iterdir())


def recover(parent: Path, marker: str, undeleted: list[Path] | None = None) -> list[str]:
    """Under the lock: move back an `.old-` folder whose target is missing (a crash
    between the fallback's two renames), delete every other leftover. Only folders
    `_own` proves are genobs' are touched; anything else shaped like one stays.
    Returns what was restored; leftovers that cannot be deleted go to `undeleted`."""
    restored = []
    leftovers = sorted(p for p in parent.iterdir() if _own(p, marker))
    for p in leftovers:
        m = _LEFTOVER.fullmatch(p.name)
        assert m is not None
        target = parent / m["name"]
        if m["kind"] == "old" and not target.exists() and not target.is_symlink():
            os.rename(p, target)
            restored.append(m["name"])
        elif not remove(p, marker) and undeleted is not None:
            undeleted.append(p)
    return restored


def swap(staged: Path, target: Path) -> None:
    """Make `staged` visible as `target`; the old content (if any) is left at `staged`."""
    if not target.exists() and not target.is_symlink():
        os.rename(staged, target)  # atomic: nothing was visible before
        return
    if exchange(staged, target):
        return
    old = target.parent / f".{target.name}.old-{secrets.token_hex(_TOKEN_BYTES)}"
    os.rename(target, old)  # the fallback's window: target is missing until the next rename
    os.rename(staged, target)
    os.rename(old, staged)


def unswap(staged: Path, target: Path, existed: bool) -> None:
    """Undo `swap`: the old content goes back to `target`, the new one to `staged`."""
    if not existed:
        os.rename(target, staged)
    elif not exchange(staged, target):
        # .old- so that a crash here restores a whole folder (the new one) as target
        tmp = target.parent / f".{target.name}.old-{secrets.token_hex(_TOKEN_BYTES)}"
        os.rename(target, tmp)
        os.rename(staged, target)
        os.rename(tmp, staged)

"""The backtest stage's child processes (promtool, the private Prometheus) never outlive it.
Each starts in its own session, so a terminal's Ctrl-C reaches genobs alone and genobs stops
them in order; on Linux each asks the kernel to kill it when genobs dies, however it dies
(PR_SET_PDEATHSIG, checked against a parent that died during the fork). SIGINT, SIGTERM and
SIGHUP (Ctrl-C, a CI cancel, `timeout`, Kubernetes) become a `Stopped` exception in genobs,
so every `finally` of the run stops its children and removes its folder; a folder left by a
genobs killed with -9 is removed by the next backtest (the scratch sweep)."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import signal
import subprocess
from collections.abc import Iterator

PR_SET_PDEATHSIG = 1


def _libc() -> ctypes.CDLL | None:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


# loaded before any fork: the child must not look up a library between fork and exec
_LIBC = _libc() if os.uname().sysname == "Linux" else None


class Stopped(BaseException):
    """genobs received SIGINT, SIGTERM or SIGHUP; a BaseException, so that no `except Exception` keeps going."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _die_with(parent: int):
    def prepare() -> None:  # runs in the child between fork and exec: no imports, no allocation to speak of
        if _LIBC is not None:
            _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # genobs died before the request took hold
            os._exit(1)

    return prepare


def start_child(args: list[str], **kwargs) -> subprocess.Popen:
    """Popen for a child that stops when genobs does: its own session, killed with genobs."""
    return subprocess.Popen(
        args, stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=_die_with(os.getpid()), **kwargs
    )


def stop_child(proc: subprocess.Popen, grace: float = 30.0) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds; waits for the child either way."""
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def stopped_by_signals() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP raise Stopped in the main thread while the block runs."""

    def handler(signum: int, frame: object) -> None:
        raise Stopped(signum)

    saved = {}
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        try:
            saved[signum] = signal.signal(signum, handler)
        except ValueError:  # not the main thread (an embedding program): its own handlers stay
            pass
    try:
        yield
    finally:
        for signum, previous in saved.items():
            signal.signal(signum, previous)

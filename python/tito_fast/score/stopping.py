"""Stopping cleanly: SIGTERM ends a run as Ctrl-C does, and worker processes end with their parent.

Slurm, Kubernetes and Ray stop a job with SIGTERM (then SIGKILL after a grace
period). Within `terminate_as_interrupt()`, SIGTERM raises `Terminated` in
the main thread: a `KeyboardInterrupt`, so every place that stops a run
cleanly on Ctrl-C (the results so far kept, the reports written and marked
INCOMPLETE, no temporary file left) does the same for it, and `exit_code`
gives what a shell reports for a process the signal ended: 128 + the signal,
130 for SIGINT, 143 for SIGTERM.

A worker process calls `become_worker(parent_pid)` first: Ctrl-C (sent to the
whole process group) is left to the parent, which stops the workers itself,
and the worker ends when its parent ends, however that ends (SIGKILL
included): on Linux by `prctl(PR_SET_PDEATHSIG)`, elsewhere (or when it was
not forked from its parent's main thread) by a thread watching the parent.

Example:
    >>> import signal
    >>> exit_code(KeyboardInterrupt()), exit_code(Terminated(signal.SIGTERM))
    (130, 143)
    >>> describe(KeyboardInterrupt()), describe(Terminated(signal.SIGTERM))
    ('interrupted', 'terminated (SIGTERM)')
    >>> worker_death([None, -9, -15])
    'signal 9 (SIGKILL)'
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from types import FrameType

from tito_fast.errors import Terminated

#: Seconds between two looks at the parent, where a thread watches it.
WATCH_SECONDS = 0.25

_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated(signum)


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Within: SIGTERM raises `Terminated` (a KeyboardInterrupt) in the main
    thread. Nothing changes where it is not the main thread, or where SIGTERM
    already has a handler or is ignored (theirs to keep); the previous
    handler is put back on leaving."""
    sigterm = getattr(signal, "SIGTERM", None)
    if sigterm is None or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(sigterm)
    if previous is not signal.SIG_DFL:
        yield
        return
    signal.signal(sigterm, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(sigterm, previous)


def signal_of(e: BaseException | int) -> int:
    """The signal a stop came from: `Terminated.signum`, else SIGINT (a plain
    KeyboardInterrupt); a number is taken as a signal."""
    if isinstance(e, int):
        return e
    return int(getattr(e, "signum", signal.SIGINT))


def exit_code(e: BaseException | int) -> int:
    """128 + the signal (of a stop, or a number), as a shell reports a process
    a signal ended: 130 for Ctrl-C, 143 for SIGTERM."""
    return 128 + signal_of(e)


def describe(e: BaseException | int) -> str:
    """"interrupted" (Ctrl-C), or "terminated (SIGTERM)" (of a stop, or a signal number)."""
    signum = signal_of(e)
    return "interrupted" if signum == signal.SIGINT else f"terminated ({_signal_name(signum)})"


def _signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def worker_death(exit_codes: list[int | None]) -> str:
    """What ended a worker, from the exit codes of a broken pool's workers
    (None: still running; -N: signal N). The pool terminates the others with
    SIGTERM once one has died, so another signal is the cause where there is one."""
    ended = [c for c in exit_codes if c]
    if not ended:
        return ""
    code = next((c for c in ended if c != -getattr(signal, "SIGTERM", 15)), ended[0])
    if code < 0:
        return f"signal {-code} ({_signal_name(-code)})"
    return f"exit code {code}"


# PR_SET_PDEATHSIG fires when the *thread* that forked a process ends, not its
# process: note, just before every fork, whether the main thread forks.
_forked_from_main_thread = False


def _before_fork() -> None:
    global _forked_from_main_thread
    _forked_from_main_thread = threading.current_thread() is threading.main_thread()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork)


def become_worker(parent_pid: int) -> str:
    """Set up a worker process of `parent_pid` (call it first in the worker):
    SIGINT ignored (the parent stops its workers), SIGTERM ends it at once,
    and it ends when its parent ends. Returns how it follows its parent:
    "pdeathsig" (Linux, forked from the parent's main thread) or "watcher" (a
    thread that looks every `WATCH_SECONDS`)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if hasattr(signal, "SIGTERM"):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
    how = "pdeathsig" if _forked_from_main_thread and _set_pdeathsig() else "watcher"
    if how == "watcher":
        threading.Thread(target=_watch_parent, args=(parent_pid,), name="tito-fast-parent", daemon=True).start()
    if os.getppid() != parent_pid:  # the parent ended before the above could notice
        _die()
    return how


def _set_pdeathsig() -> bool:
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(parent_pid: int) -> None:
    if os.name == "nt":  # the parent's pid stays this process's parent pid there: wait on its handle
        parent = multiprocessing.parent_process()
        if parent is None:
            return
        parent.join()
    else:
        while os.getppid() == parent_pid:
            time.sleep(WATCH_SECONDS)
    _die()


def _die() -> None:
    os.kill(os.getpid(), getattr(signal, "SIGKILL", signal.SIGTERM))  # Windows: SIGTERM terminates the process


__all__ = ["WATCH_SECONDS", "become_worker", "describe", "exit_code", "signal_of", "terminate_as_interrupt", "worker_death"]

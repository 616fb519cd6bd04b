"""Four threads calling the kernels and sharing one TokenBuffer at once."""

from __future__ import annotations

import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

import tito_fast


def test_kernels_from_four_threads() -> None:
    rng = np.random.default_rng(1)
    cases = []
    for i in range(16):
        a = rng.integers(0, 100_000, size=50_000 + i, dtype=np.int32)  # above DETACH_MIN: runs detached
        b = a.copy()
        pos = int(rng.integers(0, len(a)))
        b[pos] += 1
        cases.append((a, b, pos))
    barrier = threading.Barrier(4)

    def work(k: int) -> list[bool]:
        barrier.wait()
        ok = []
        for _ in range(20):
            for a, b, pos in cases[k::4]:
                ok.append(tito_fast.common_prefix_len(a, b) == pos)
                ok.append(tito_fast.common_prefix_len_batch([a, b], [b, b], threads=2).tolist() == [pos, len(b)])
                try:
                    tito_fast.check_prefix(a, b)
                    ok.append(False)
                except tito_fast.PrefixMismatchError as e:
                    ok.append(e.index == pos)
        return ok

    with ThreadPoolExecutor(4) as ex:
        results = list(ex.map(work, range(4)))
    assert all(all(r) for r in results)


def test_shared_token_buffer() -> None:
    buf = tito_fast.TokenBuffer()
    chunk = list(range(1000))
    barrier = threading.Barrier(4)

    def work(_: int) -> None:
        barrier.wait()
        for _ in range(200):
            buf.extend(chunk)
            buf.to_numpy()
            len(buf)

    with ThreadPoolExecutor(4) as ex:
        list(ex.map(work, range(4)))
    ids = buf.to_numpy()
    assert len(ids) == 4 * 200 * 1000
    # Appends are atomic: the buffer is whole chunks, never interleaved ids.
    assert (ids.reshape(-1, 1000) == np.arange(1000, dtype=np.uint32)).all()


def _ticks_during(fn) -> int:  # type: ignore[no-untyped-def]
    """How often another Python thread ran while `fn()` was executing.

    Forced GIL hand-offs are pushed out to 100 s, and the ticker sleeps
    (releasing the GIL) between ticks, so it can tick only while the main
    thread has released the GIL of its own accord.
    """
    ticks = 0
    stop = threading.Event()

    def ticker() -> None:
        nonlocal ticks
        while not stop.is_set():
            ticks += 1
            time.sleep(0.0002)

    old = sys.getswitchinterval()
    sys.setswitchinterval(100.0)
    t = threading.Thread(target=ticker)
    try:
        t.start()
        time.sleep(0.01)  # let it start ticking
        before = ticks
        fn()
        return ticks - before
    finally:
        stop.set()
        t.join()
        sys.setswitchinterval(old)


def test_gil_is_released_during_large_calls() -> None:
    a = np.zeros(64_000_000, dtype=np.int32)
    b = list(range(3_000_000, 0, -1))
    # Control: C code that holds the GIL for a long time shows no ticks, so
    # the probe can tell holding from releasing.
    assert _ticks_during(lambda: sorted(b)) == 0
    # The kernels on arrays run detached: the other thread keeps running.
    assert _ticks_during(lambda: [tito_fast.common_prefix_len(a, a) for _ in range(3)]) > 0
    csr_off = np.array([0, len(a) // 2, len(a)])
    assert _ticks_during(lambda: [tito_fast.common_prefix_len_csr(a, csr_off, a, csr_off) for _ in range(3)]) > 0

    def checks() -> None:
        for _ in range(3):
            tito_fast.check_prefix(a, a)

    assert _ticks_during(checks) > 0

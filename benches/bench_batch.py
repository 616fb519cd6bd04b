"""A batch of 10,000 sequence pairs of 8,000 ids: CSR on threads vs numpy vs Python."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

import tito_fast
from benches.data import ids
from tito_fast.testing import reference

ROWS, WIDTH = 10_000, 8_000


def _batch(full_size: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rows = ROWS if full_size else 200
    a = ids(rows * WIDTH).reshape(rows, WIDTH)
    b = a.copy()
    b[:, -1] += 1  # every row differs at its last id: a full scan
    return a, b, np.full(rows, WIDTH - 1)


@pytest.mark.parametrize(
    "impl", ["tito_fast_csr_1t", "tito_fast_csr_2t", "tito_fast_batch_2t", "numpy_2d", "numpy_rows", "python"]
)
def bench_batch(benchmark: Any, full_size: bool, impl: str) -> None:
    a, b, want = _batch(full_size)
    rows = len(a)
    benchmark.group = f"batch {ROWS}x{WIDTH}"
    benchmark.extra_info["cores"] = os.cpu_count()
    offsets = np.arange(rows + 1, dtype=np.int64) * WIDTH
    av, bv = a.ravel(), b.ravel()
    slow = dict(rounds=2, iterations=1, warmup_rounds=0)
    if impl.startswith("tito_fast_csr"):
        threads = int(impl[-2])
        got = benchmark(lambda: tito_fast.common_prefix_len_csr(av, offsets, bv, offsets, threads=threads))
    elif impl == "tito_fast_batch_2t":
        la, lb = list(a), list(b)  # a list of 1-D arrays (rows of any length)
        got = benchmark(lambda: tito_fast.common_prefix_len_batch(la, lb, threads=2))
    elif impl == "numpy_2d":
        # Best case for numpy: equal-length rows as one 2-D array.
        def np2d() -> np.ndarray:
            neq = a != b
            return np.where(neq.any(axis=1), neq.argmax(axis=1), WIDTH)

        got = benchmark(np2d)
    elif impl == "numpy_rows":
        def rows_loop() -> list[int]:
            out = []
            for x, y in zip(av.reshape(rows, WIDTH), bv.reshape(rows, WIDTH)):
                d = np.flatnonzero(x != y)
                out.append(int(d[0]) if d.size else WIDTH)
            return out

        got = benchmark.pedantic(rows_loop, **slow) if full_size else benchmark(rows_loop)
    else:
        la, lb = a.tolist(), b.tolist()

        def py_loop() -> list[int]:
            return [reference.common_prefix_len(x, y) for x, y in zip(la, lb)]

        got = benchmark.pedantic(py_loop, **slow) if full_size else benchmark(py_loop)
        del la, lb
    assert list(got) == want.tolist()

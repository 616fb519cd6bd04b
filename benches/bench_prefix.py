"""Longest common prefix and the prefix check: tito_fast vs numpy vs Python.

Sequences are equal up to their last id, so every method scans everything
(the worst case for tito_fast's early exit, and the usual case in practice:
TITO holds in most sessions).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import tito_fast
from benches.data import diverging_copy, ids, numpy_lcp
from tito_fast.testing import reference

SIZES = {"1k": 1_000, "32k": 32_000, "1M": 1_000_000, "16M": 16_000_000}
QUICK_MAX = 32_000


def _pair(size: str, full_size: bool) -> tuple[np.ndarray, np.ndarray, int]:
    n = SIZES[size] if full_size else min(SIZES[size], QUICK_MAX)
    a = ids(n)
    return a, diverging_copy(a, n - 1), n - 1


def _run(benchmark: Any, fn: Any, n: int, slow: bool = False) -> Any:
    # Slow variants at large sizes get a fixed, small number of rounds; the
    # fast ones are calibrated by pytest-benchmark (many rounds: this
    # machine is shared, and a median of five is noisy).
    if slow and n >= 1_000_000:
        return benchmark.pedantic(fn, rounds=5 if n < 10_000_000 else 3, iterations=1, warmup_rounds=1)
    return benchmark(fn)


@pytest.mark.parametrize("size", list(SIZES))
@pytest.mark.parametrize("impl", ["tito_fast", "numpy", "python", "tito_fast_list"])
def bench_common_prefix_len(benchmark: Any, full_size: bool, size: str, impl: str) -> None:
    a, b, want = _pair(size, full_size)
    benchmark.group = f"lcp int32 {size}"
    benchmark.extra_info["n"] = len(a)
    if impl == "tito_fast":
        got = _run(benchmark, lambda: tito_fast.common_prefix_len(a, b), len(a))
    elif impl == "numpy":
        got = _run(benchmark, lambda: numpy_lcp(a, b), len(a))
    else:
        la, lb = a.tolist(), b.tolist()
        if impl == "python":
            got = _run(benchmark, lambda: reference.common_prefix_len(la, lb), len(a), slow=True)
        else:
            got = _run(benchmark, lambda: tito_fast.common_prefix_len(la, lb), len(a), slow=True)
    assert got == want


@pytest.mark.parametrize("dtype", ["int64", "uint64", "int16", "uint16", "int8", "uint8"])
@pytest.mark.parametrize("impl", ["tito_fast", "numpy"])
def bench_common_prefix_len_widths(benchmark: Any, full_size: bool, impl: str, dtype: str) -> None:
    """Every numpy width (int64 is what `np.array(list_of_ids)` gives): each
    array checked and compared in its own width, without a converting copy,
    against numpy's own comparison of the same arrays."""
    a, b, want = _pair("1M", full_size)
    top = min(int(np.iinfo(dtype).max), 2**31)
    a, b = (a.astype(np.int64) % top).astype(dtype), (b.astype(np.int64) % top).astype(dtype)
    want = int(np.argmax(a != b)) if (a != b).any() else len(a)
    benchmark.group = f"lcp {dtype} 1M"
    benchmark.extra_info["n"] = len(a)
    fn = (lambda: tito_fast.common_prefix_len(a, b)) if impl == "tito_fast" else (lambda: numpy_lcp(a, b))
    assert _run(benchmark, fn, len(a)) == want


@pytest.mark.parametrize("size", ["32k", "1M"])
@pytest.mark.parametrize("impl", ["tito_fast", "tito_fast_list", "python"])
def bench_check_prefix(benchmark: Any, full_size: bool, size: str, impl: str) -> None:
    """A passing check: stored is the new ids less the last 300."""
    new, _, _ = _pair(size, full_size)
    stored = new[:-300].copy()
    benchmark.group = f"check_prefix {size}"
    if impl == "tito_fast":
        benchmark(lambda: tito_fast.check_prefix(stored, new, max_trim_tokens=1))
    else:
        # Separate int objects, as when the two lists come from different calls.
        ls, ln = stored.tolist(), new.tolist()
        if impl == "python":
            assert benchmark(lambda: reference.check_prefix(ls, ln, max_trim_tokens=1)) is None
        else:
            benchmark(lambda: tito_fast.check_prefix(ls, ln, max_trim_tokens=1))


@pytest.mark.parametrize("impl", ["tito_fast", "tito_fast_list", "python"])
def bench_merge_tokens(benchmark: Any, full_size: bool, impl: str) -> None:
    """The Qwen3 splice on a 32k-id prefix and 300 new ids."""
    im_end, nl = 151645, 198
    prefix = np.append(ids(32_000 if full_size else 2_000), im_end).astype(np.int32)
    inc = ids(300, seed=1)
    benchmark.group = "merge_tokens 32k+300"
    if impl == "tito_fast":
        got = benchmark(lambda: tito_fast.merge_tokens(prefix, inc, append_after=(im_end, nl)))
    else:
        lp, li = prefix.tolist(), inc.tolist()
        fn = tito_fast.merge_tokens if impl == "tito_fast_list" else reference.merge_tokens
        got = benchmark(lambda: fn(lp, li, append_after=(im_end, nl)))
    assert len(got) == len(prefix) + 1 + len(inc) and got[len(prefix)] == nl

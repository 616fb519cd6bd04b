"""Synthetic rollout ids for the benchmarks: Qwen-sized vocabulary, seeded."""

from __future__ import annotations

import numpy as np

VOCAB = 151_643


def ids(n: int, seed: int = 0) -> np.ndarray:
    """`n` random int32 ids."""
    return np.random.default_rng(seed).integers(0, VOCAB, size=n, dtype=np.int32)


def diverging_copy(a: np.ndarray, pos: int) -> np.ndarray:
    """A copy of `a` that differs from it at `pos` only."""
    b = a.copy()
    b[pos] = (b[pos] + 1) % VOCAB
    return b


def numpy_lcp(a: np.ndarray, b: np.ndarray) -> int:
    """The usual numpy way: positions where they differ, take the first."""
    n = min(len(a), len(b))
    d = np.flatnonzero(a[:n] != b[:n])
    return int(d[0]) if d.size else n

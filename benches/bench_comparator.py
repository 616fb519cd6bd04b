"""TokenSeqComparator vs the reference comparator on real Qwen3 sessions.

The reference decodes every segment of both sequences; tito_fast compares
ids first, bytes second, and decodes only what it reports. Both must give
the same `to_dict()` lists, which each benchmark checks.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from benches.sessions import session_ids, tokenizer, with_differences
from tito_fast.compare.comparator import TokenSeqComparator
from tito_fast.testing.reference import ReferenceComparator

START = "<|im_start|>assistant"


@pytest.mark.parametrize("turns", [50, 200])
@pytest.mark.parametrize("differing", [0, 1, 10, 100])
@pytest.mark.parametrize("impl", ["tito_fast", "tito_fast_arrays", "python"])
def bench_compare_sequences(benchmark: Any, full_size: bool, turns: int, differing: int, impl: str) -> None:
    tok = tokenizer()
    n_turns = turns if full_size else 5
    expected = list(session_ids(n_turns))
    fast = TokenSeqComparator(tok, START)
    actual = with_differences(session_ids(n_turns), differing, fast._special_ids)
    benchmark.group = f"compare {turns} turns, {differing} differing"
    benchmark.extra_info["ids"] = len(expected)
    ref = ReferenceComparator(tok, START)
    want = ref.compare(expected, actual)
    if impl == "tito_fast":  # lists, as the reference gets them
        got = [m.to_dict() for m in benchmark(lambda: fast.compare_sequences(expected, actual))]
    elif impl == "tito_fast_arrays":  # int32 arrays (a dump column, a TokenBuffer): read in place
        e_arr, a_arr = np.array(expected, dtype=np.int32), np.array(actual, dtype=np.int32)
        got = [m.to_dict() for m in benchmark(lambda: fast.compare_sequences(e_arr, a_arr))]
    else:
        got = benchmark(lambda: ref.compare(expected, actual))
    assert got == want
    if full_size:
        assert len(got) == differing


@pytest.mark.parametrize("impl", ["tito_fast_batch", "tito_fast_loop", "python"])
def bench_compare_many_sessions(benchmark: Any, full_size: bool, impl: str) -> None:
    """64 sessions of 50 turns, 10 differing segments each."""
    tok = tokenizer()
    n_turns = 50 if full_size else 3
    fast = TokenSeqComparator(tok, START)
    expected = [list(session_ids(n_turns, seed=s % 8)) for s in range(64)]
    actual = [with_differences(session_ids(n_turns, seed=s % 8), 10, fast._special_ids, seed=s) for s in range(64)]
    benchmark.group = "compare 64 sessions x 50 turns, 10 differing"
    if impl == "tito_fast_batch":
        got = benchmark(lambda: fast.compare_batch(expected, actual))
        out = [[m.to_dict() for m in ms] for ms in got]
    elif impl == "tito_fast_loop":
        got = benchmark(lambda: [fast.compare_sequences(e, a) for e, a in zip(expected, actual)])
        out = [[m.to_dict() for m in ms] for ms in got]
    else:
        ref = ReferenceComparator(tok, START)
        run = lambda: [ref.compare(e, a) for e, a in zip(expected, actual)]  # noqa: E731
        out = benchmark.pedantic(run, rounds=2, iterations=1) if full_size else benchmark(run)
    ref = ReferenceComparator(tok, START)
    assert out == [ref.compare(e, a) for e, a in zip(expected[:4], actual[:4])] + out[4:]

"""A 300-turn session of 300 new ids per turn: TokenBuffer vs a list copy per turn.

The reference keeps `prompt_ids + completion_ids` of every turn as its own
list; TokenBuffer stores the ids once and a checkpoint is a length. Time is
measured by pytest-benchmark; memory goes into `extra_info`: tracemalloc's
peak for the lists, the bytes the buffer owns for TokenBuffer (Rust memory,
which tracemalloc cannot see), and the final ids as uint32 for scale.
"""

from __future__ import annotations

import tracemalloc
from typing import Any

import pytest

import tito_fast
from benches.data import ids
from tito_fast.testing import reference

TURNS, PER_TURN = 300, 300


def _turns(full_size: bool) -> list[list[int]]:
    turns = TURNS if full_size else 30
    return [ids(PER_TURN, seed=t).tolist() for t in range(turns)]


def _tito_session(turns: list[list[int]]) -> tito_fast.TokenBuffer:
    buf = tito_fast.TokenBuffer()
    for new in turns:
        buf.extend(new)
        buf.checkpoint()
    return buf


def _list_session(turns: list[list[int]]) -> list[list[int]]:
    copies: list[list[int]] = []
    cur: list[int] = []
    for new in turns:
        cur = cur + new  # prompt_ids + completion_ids: a fresh full list
        copies.append(cur)
    return copies


@pytest.mark.parametrize("impl", ["tito_fast", "python"])
def bench_session(benchmark: Any, full_size: bool, impl: str) -> None:
    turns = _turns(full_size)
    final_ids = sum(len(t) for t in turns)
    benchmark.group = f"session {TURNS} turns x {PER_TURN} ids"
    benchmark.extra_info["final_uint32_bytes"] = final_ids * 4
    if impl == "tito_fast":
        buf = benchmark(lambda: _tito_session(turns))
        assert len(buf) == final_ids and len(buf.checkpoints) == len(turns)
        benchmark.extra_info["bytes"] = buf.nbytes
        assert buf.nbytes <= 1.5 * final_ids * 4
    else:
        copies = benchmark(lambda: _list_session(turns))
        assert len(copies[-1]) == final_ids
        tracemalloc.start()
        copies = _list_session(turns)
        benchmark.extra_info["bytes"] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        # The same turns replayed into the reference model with rollback support.
        model = reference.ListTrajectory()
        for new in turns[:3]:
            model.extend(new)
            model.checkpoint()
        assert model.checkpoints == [PER_TURN, 2 * PER_TURN, 3 * PER_TURN]

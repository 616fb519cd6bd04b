"""Assembling interleaved agents (a session as a forest): tito_fast vs the
plain-Python algorithm written from the spec.

Each session has 50 calls: a main agent and two sub-agents (each its own
system prompt) taking turns, the main agent resuming its chain after each
sub-agent, with a retry every 10 calls; each call adds about 150 ids to its
agent's history. `python`: `tito_fast.testing.assemble_reference` (every call
compared with every chain of its session, lists); `tito_fast_arrow`:
`assemble()` on an Arrow table of the calls (uint32 list columns). The same
chains are asserted. Sessions: `TITO_FAST_BENCH_FOREST_SESSIONS` (default
1,000 at full size); ids a call adds: `TITO_FAST_BENCH_CALL_IDS` (default
150; 15 makes 10,000 sessions fit this machine's memory as Python lists).
"""

from __future__ import annotations

import functools
import gc
import os
from typing import Any

import numpy as np
import pytest

from tito_fast.chains import assemble
from tito_fast.chains.core import _Family
from tito_fast.testing import assemble_reference as ref

B, END = 100, 9
#: Ids a call adds, scaled by `TITO_FAST_BENCH_CALL_IDS` (150 by default: a 60-id reply and an 88-id tool result).
_SCALE = int(os.environ.get("TITO_FAST_BENCH_CALL_IDS", "150")) / 150
_REPLY, _TOOL, _SYSTEM = max(4, round(60 * _SCALE)), max(4, round(88 * _SCALE)), max(4, round(40 * _SCALE))


def _session(seed: int, calls: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    agents = [np.concatenate([[B, 200 + a], rng.integers(10, 50_000, _SYSTEM), [B], rng.integers(10, 50_000, _REPLY)]).astype(np.uint32) for a in range(3)]
    out = []
    turn = [0, 0, 1, 1, 1, 0, 2, 2, 0, 0]  # who calls: the main agent, a sub-agent, back, the other one, back
    for k in range(calls):
        a = turn[k % len(turn)]
        prompt = np.append(agents[a], B).astype(np.uint32)
        completion = np.append(rng.integers(10, 50_000, _REPLY), END).astype(np.uint32)
        out.append((prompt, completion, (-rng.random(len(completion))).astype(np.float32)))
        if k % 10 == 5:  # a retry: the agent goes on from the second attempt
            completion = np.append(rng.integers(10, 50_000, _REPLY), END).astype(np.uint32)
            out.append((prompt, completion, (-rng.random(len(completion))).astype(np.float32)))
        agents[a] = np.concatenate([prompt, completion, [B], rng.integers(10, 50_000, _TOOL)]).astype(np.uint32)
    return out


@functools.cache
def _table(n: int, calls: int) -> Any:
    """The calls of `n` sessions as an Arrow table (uint32 list columns), as a capture file gives them."""
    import pyarrow as pa

    rows = [(s, k, p, c, lp) for s in range(n) for k, (p, c, lp) in enumerate(_session(s, calls))]

    def column(parts: list[np.ndarray], dtype: Any) -> Any:
        offsets = np.concatenate([[0], np.cumsum([len(x) for x in parts])]).astype(np.int64)
        return pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(np.concatenate(parts).astype(dtype)))

    return pa.table(
        {
            "session_id": [f"s{s}" for s, *_ in rows],
            "call_index": [k for _, k, *_ in rows],
            "prompt_ids": column([r[2] for r in rows], np.uint32),
            "completion_ids": column([r[3] for r in rows], np.uint32),
            "completion_logprobs": column([r[4] for r in rows], np.float32),
        }
    )


def _lists(n: int, calls: int) -> list[list[tuple[list[int], list[int], list[float]]]]:
    """The same sessions as Python lists, the plain algorithm's input. Made for
    each use and never cached: at 10,000 sessions they take gigabytes, and kept
    alive they would slow every other run of the process (its page faults)."""
    return [[(p.tolist(), c.tolist(), lp.tolist()) for p, c, lp in _session(s, calls)] for s in range(n)]


@pytest.mark.parametrize("impl", ["python", "tito_fast_arrow"])
def bench_forest(benchmark: Any, full_size: bool, impl: str, monkeypatch: pytest.MonkeyPatch) -> None:
    n = int(os.environ.get("TITO_FAST_BENCH_FOREST_SESSIONS", "1000")) if full_size else 4
    calls = 50 if full_size else 20
    table = _table(n, calls)
    monkeypatch.setattr("tito_fast.chains.core._family", lambda tok, fam: _Family([END], 1, [B], None, None))
    benchmark.group = f"assemble {n:,} interleaved-agent sessions of {calls} calls"
    benchmark.extra_info.update(sessions=n, calls=table.num_rows)
    rounds = {"rounds": 5 if impl != "python" else 1, "iterations": 1, "warmup_rounds": 1 if impl != "python" else 0}
    if impl == "python":
        lists = _lists(n, calls)
        gc.collect()  # the input's objects made and settled before the clock starts, as when loaded earlier
        out = benchmark.pedantic(lambda: [ref.assemble_session(s, trim={END}, max_trim=1, realign_window=8, boundary={B}) for s in lists], **rounds)
        benchmark.extra_info["chains"] = sum(len(o["chains"]) for o in out)
        return
    a = benchmark.pedantic(lambda: assemble(table), **rounds)
    benchmark.extra_info["chains"] = a.summary.chains
    for s, log in enumerate(_lists(min(n, 50), calls)):  # the same chains as the spec's algorithm
        want = ref.assemble_session(log, trim={END}, max_trim=1, realign_window=8, boundary={B})
        assert [c.ids.tolist() for c in a.sessions[f"s{s}"]] == [c["ids"] for c in want["chains"]]
        assert [(c.parent, c.shared) for c in a.sessions[f"s{s}"]] == [(c["parent"], c["shared"]) for c in want["chains"]]
    # each agent keeps its chain: main, two sub-agents, and the retries' branches
    assert a.summary.chains == n * (3 + calls // 10)
    # the packed form: each chain from where it parts from its parent, a shared prefix once
    packed = a.packed()
    full = sum(len(c) for c in a.chains())
    assert len(packed.ids) == sum(len(c) - c.shared for c in a.chains())
    benchmark.extra_info.update(ids=full, packed_ids=len(packed.ids))

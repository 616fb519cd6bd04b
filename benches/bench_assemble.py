"""Assembling captured calls into chains: tito_fast vs the plain-Python algorithm.

Sessions of 50 calls, each prompt the previous prompt and completion plus a
tool result (about 150 ids a call, so the last prompt holds about 7,500
ids), with a retry, a seam drift, a compaction and a sub-agent call planted
in every tenth session. `python`: `tito_fast.testing.assemble_reference`
(the same algorithm written from the spec with lists) on the calls as lists;
`tito_fast`: `assemble()` on the same calls as `Call` objects with uint32
arrays (everything: grouping, the Rust matching on all cores, the checks, the
chains); `tito_fast_arrow`: the same on an Arrow table of the calls (uint32
list columns, as a capture writer stores them; no Python object per call); `tito_fast_matching_1_thread`: the Rust matching alone on one thread
(`assemble_calls` on the prompts, completions and logprobs in one buffer
each, as Arrow list columns hold them: everything the Rust side
does, the invariant check and the output included), whose prompt ids per
second is the matching's speed per core; `numpy_read_1_thread`: numpy's `max` over
the same prompt ids laid out in one array, the speed at which one core reads
them from memory (the bound the matching is measured against). Identical
chains are asserted.
Sessions: `TITO_FAST_BENCH_SESSIONS` (default 1,000 at full size); ids a
call adds: `TITO_FAST_BENCH_CALL_IDS` (default 150).
"""

from __future__ import annotations

import functools
import math
import os
from typing import Any

import numpy as np
import pytest

from tito_fast._core import assemble_calls
from tito_fast.chains import Call, assemble
from tito_fast.chains.calls import group_sessions
from tito_fast.chains.core import DEFAULT_POLICY, _csr, _Family
from tito_fast.testing import assemble_reference as ref

B, END = 100, 9


#: Ids a call adds to the history: a completion of `_REPLY` + 1 and a tool result of
#: `_TOOL` ids (`TITO_FAST_BENCH_CALL_IDS` scales both: 150 by default).
_SCALE = int(os.environ.get("TITO_FAST_BENCH_CALL_IDS", "150")) / 150
_REPLY, _TOOL = max(4, round(60 * _SCALE)), max(4, round(88 * _SCALE))


def _session(seed: int, calls: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    planted = seed % 10 == 0
    history = np.concatenate([[B], rng.integers(10, 50_000, 40), [B], rng.integers(10, 50_000, 60)]).astype(np.uint32)
    out = []
    for k in range(calls):
        prompt = np.append(history, B).astype(np.uint32)
        completion = np.append(rng.integers(10, 50_000, _REPLY), END).astype(np.uint32)
        lps = (-rng.random(len(completion))).astype(np.float32)
        out.append((prompt, completion, lps))
        if planted and k == 10:  # a retry
            completion = np.append(rng.integers(10, 50_000, _REPLY), END).astype(np.uint32)
            out.append((prompt, completion, (-rng.random(len(completion))).astype(np.float32)))
        tail = completion
        if planted and k == 20:  # a seam drift
            tail = np.append(completion[:-2], [7, END]).astype(np.uint32)
        history = np.concatenate([prompt, tail, [B], rng.integers(10, 50_000, _TOOL)]).astype(np.uint32)
        if planted and k == 30:  # a compaction
            history = np.concatenate([history[:42], [B], rng.integers(10, 50_000, 30)]).astype(np.uint32)
        if planted and k == 40:  # a sub-agent
            sub = np.concatenate([[B, 5], rng.integers(10, 50_000, 30), [B]]).astype(np.uint32)
            done = np.append(rng.integers(10, 50_000, 20), END).astype(np.uint32)
            out.append((sub, done, (-rng.random(len(done))).astype(np.float32)))
    return out


@functools.cache
def _data(n: int, calls: int) -> tuple[list[Call], list[list[tuple[list[int], list[int], list[float]]]]]:
    sessions = [_session(s, calls) for s in range(n)]
    # the Arrow table's columns: every call's ids in three flat arrays
    flat = [np.concatenate([c[i] for sess in sessions for c in sess]) for i in range(3)]
    lengths = [[len(c[i]) for sess in sessions for c in sess] for i in range(3)]
    offsets = [np.concatenate([[0], np.cumsum(x)]).astype(np.int64) for x in lengths]
    objects: list[Call] = []
    g = 0
    for s, sess in enumerate(sessions):
        for k in range(len(sess)):
            p, c, lp = sess[k]  # arrays of their own, as parsed records hold them
            objects.append(Call(f"s{s}", p, c, call_index=k, completion_logprobs=lp))
            g += 1
    _FLAT[(n, calls)] = (flat, offsets)
    # as parsed records hold them: an int object per id (about 6.5 GB for 1,000 sessions)
    lists = [[(c.prompt_ids.tolist(), c.completion_ids.tolist(), c.completion_logprobs.tolist())  # type: ignore[union-attr]
              for c in objects[a:b]] for a, b in _bounds(objects)]  # fmt: skip
    return objects, lists


_FLAT: dict[tuple[int, int], Any] = {}


def _bounds(objects: list[Call]) -> list[tuple[int, int]]:
    """(first, end) call of each session in `objects`."""
    cuts = [k for k in range(1, len(objects)) if objects[k].session_id != objects[k - 1].session_id]
    return list(zip([0, *cuts], [*cuts, len(objects)]))


def _ids_only_family(tokenizer: Any, family: Any) -> _Family:
    """The trim id and block marker of these synthetic ids (no tokenizer)."""
    return _Family([END], 1, [B], None, None)


def _reference(lists: list[list[tuple[list[int], list[int], list[float]]]]) -> list[dict[str, Any]]:
    return [ref.assemble_session(s, trim={END}, max_trim=1, realign_window=8, boundary={B}) for s in lists]


@functools.cache
def _table(n: int, calls: int) -> Any:
    """The same calls as an Arrow table with uint32 list columns (as a capture
    writer stores them): `assemble` reads the ids in place."""
    import pyarrow as pa

    objects, _ = _data(n, calls)
    (prompts, completions, lps), (po, co, _) = _FLAT[(n, calls)]

    def column(values: np.ndarray, offsets: np.ndarray) -> Any:
        return pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(values))  # the flat arrays, not copied

    return pa.table(
        {
            "session_id": [c.session_id for c in objects],
            "call_index": [c.call_index for c in objects],
            "prompt_ids": column(prompts, po),
            "completion_ids": column(completions, co),
            "completion_logprobs": column(lps, co),
        }
    )


@pytest.mark.parametrize("impl", ["python", "tito_fast", "tito_fast_arrow", "tito_fast_matching_1_thread", "numpy_read_1_thread"])
def bench_assemble(benchmark: Any, full_size: bool, impl: str, monkeypatch: pytest.MonkeyPatch) -> None:
    n = int(os.environ.get("TITO_FAST_BENCH_SESSIONS", "1000")) if full_size else 4
    calls = 50 if full_size else 12
    objects, lists = _data(n, calls)
    monkeypatch.setattr("tito_fast.chains.core._family", _ids_only_family)
    benchmark.group = f"assemble {n:,} sessions of {calls} calls"
    prompt_ids = sum(len(c.prompt_ids) for c in objects)
    benchmark.extra_info.update(sessions=n, calls=len(objects), prompt_ids=prompt_ids)
    # warm-up rounds: the first passes over fresh memory cost this VM up to 4 s
    rounds = {"rounds": 5 if impl != "python" else 1, "iterations": 1, "warmup_rounds": 2 if impl != "python" else 0}
    if impl == "python":
        out = benchmark.pedantic(lambda: _reference(lists), **rounds)
        benchmark.extra_info["chains"] = sum(len(o["chains"]) for o in out)
        return
    if impl == "numpy_read_1_thread":
        flat = _FLAT[(n, calls)][0][0]
        assert len(flat) == prompt_ids
        benchmark.pedantic(flat.max, **rounds)
        if benchmark.stats is not None:
            benchmark.extra_info["prompt_ids_per_second"] = prompt_ids / benchmark.stats.stats.median
        return
    if impl == "tito_fast_matching_1_thread":
        sessions, _ = group_sessions(objects)
        arrays = _csr(sessions)
        (flat, done, lps), (offsets, done_offsets, _) = _FLAT[(n, calls)]
        # as a capture table holds them: one buffer a column (calls in the same order)
        arrays.update(prompts=(flat, offsets), completion=done, completion_offsets=done_offsets, logprobs=lps)
        policy = (DEFAULT_POLICY["seam_drift"], DEFAULT_POLICY["rollback"], DEFAULT_POLICY["rewrite"], DEFAULT_POLICY["new_root"])

        def match() -> dict[str, Any]:
            return assemble_calls(
                arrays["prompts"], arrays["completion"], arrays["completion_offsets"], arrays["logprobs"],
                arrays["session_offsets"], trim_ids=[END], max_trim=1, realign_window=8,
                policy=policy, boundary_ids=[B], threads=1,
            )  # fmt: skip

        out = benchmark.pedantic(match, **rounds)
        assert int(out["loss_mask"].sum()) > 0
        if benchmark.stats is not None:  # None when benchmarks run once as tests
            benchmark.extra_info["prompt_ids_per_second"] = prompt_ids / benchmark.stats.stats.median
        return
    if impl == "tito_fast_arrow":
        table = _table(n, calls)
        a = benchmark.pedantic(lambda: assemble(table), **rounds)
    else:
        a = benchmark.pedantic(lambda: assemble(objects), **rounds)
    want = _reference(lists)
    for s, w in enumerate(want):  # identical chains
        got = a.sessions[f"s{s}"]
        assert [c.ids.tolist() for c in got] == [c["ids"] for c in w["chains"]]
        assert [c.loss_mask.tolist() for c in got] == [c["loss"] for c in w["chains"]]
        assert all(
            all((math.isnan(x) and math.isnan(y)) or x == y for x, y in zip(c.logprobs.tolist(), wc["logprobs"]))
            for c, wc in zip(got, w["chains"])
        )
    ids = sum(len(c) for c in a.chains())
    benchmark.extra_info["chains"] = a.summary.chains
    benchmark.extra_info["bytes"] = a.nbytes
    benchmark.extra_info["ids_masks_logprobs_bytes"] = ids * (4 + 1 + 4)
    assert a.nbytes <= 1.3 * ids * 9


def test_planted_events_appear(monkeypatch: pytest.MonkeyPatch) -> None:
    objects, _ = _data(10, 50)
    monkeypatch.setattr("tito_fast.chains.core._family", _ids_only_family)
    assert {e.kind for e in assemble(objects).events} >= {"rollback", "seam_drift", "rewrite", "new_root"}

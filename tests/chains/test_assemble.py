"""`tito_fast.assemble` against the plain-Python reference written from the
spec (`tito_fast.testing.assemble_reference`), on call logs generated with
planted retries, seam drifts, trimmed seams, compactions, rewritten history
and sub-agents; the invariant on every emitted chain; clear errors."""

from __future__ import annotations

import math
import random
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tito_fast import assemble
from tito_fast.chains import CallsError, resolve_policy
from tito_fast.chains.core import _Family
from tito_fast.testing import assemble_reference as ref

B = 100  # a message block marker
END = 9  # a trailing id the family may trim
NAN = float("nan")


def _text(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(1, 99) for _ in range(n)]


def call_log(seed: int, n_calls: int = 12) -> list[dict[str, Any]]:
    """One session's calls: an agent loop with planted events (each call's prompt
    is its history plus an assistant opener; completions end with END)."""
    rng = random.Random(seed)
    calls: list[dict[str, Any]] = []
    main = [B, *_text(rng, 4), B, *_text(rng, 6)]  # system, user
    sub: list[int] | None = None
    for _ in range(n_calls):
        event = rng.choices(["plain", "retry", "drift", "trim", "compact", "rewrite", "sub", "nolp", "length"], [8, 1, 1, 1, 1, 1, 1, 1, 1])[0]
        if event == "sub":  # a sub-agent: its own system prompt, a few calls, then back
            sub = [B, 50, *_text(rng, 3), B, *_text(rng, 2)]
            for _ in range(rng.randrange(1, 3)):
                prompt = [*sub, B]
                completion = [*_text(rng, 3), END]
                calls.append(_call(rng, prompt, completion))
                sub = [*prompt, *completion, B, *_text(rng, 2)]
            continue
        if event == "compact":
            main = [*main[:6], B, *_text(rng, 3)]  # system kept, the rest summarised
        if event == "rewrite" and len(main) > 12:
            at = rng.randrange(7, len(main) - 2)
            main = [*main[:at], rng.randrange(1, 99), *main[at + 1 :]]
        prompt = [*main, B]
        completion = [*_text(rng, rng.randrange(0, 6)), END]
        calls.append(_call(rng, prompt, completion, logprobs=event != "nolp"))
        if event == "length":  # cut by the engine's limit: the next call cannot extend it
            calls[-1]["finish_reason"] = "length"
        if event == "retry":  # the same prompt again, another completion
            completion = [*_text(rng, 3), END]
            calls.append(_call(rng, prompt, completion))
        tail = completion
        if event == "drift":
            tail = [*completion[:-2], rng.randrange(1, 99), END] if len(completion) >= 2 else [7, END]
        if event == "trim":
            tail = completion[:-1]
        main = [*prompt, *tail, B, *_text(rng, rng.randrange(1, 5))]
    return calls


def _call(rng: random.Random, prompt: list[int], completion: list[int], logprobs: bool = True) -> dict[str, Any]:
    lps: list[float | None] | None = [round(-rng.random() * 5, 3) for _ in completion] if logprobs else None
    if lps and rng.random() < 0.2:
        lps[0] = None
    return {"prompt_ids": prompt, "completion_ids": completion, "completion_logprobs": lps, "finish_reason": "stop"}


def _records(logs: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    out = []
    for s, log in enumerate(logs):
        for k, c in enumerate(log):
            out.append({"session_id": f"s{s}", "call_index": k, **c})
    random.Random(len(out)).shuffle(out)  # any order in the file: call_index orders them
    return out


def _length(log: list[dict[str, Any]]) -> list[bool]:
    return [c.get("finish_reason") == "length" for c in log]


def _ref_calls(log: list[dict[str, Any]]) -> list[tuple[list[int], list[int], list[float]]]:
    return [
        (c["prompt_ids"], c["completion_ids"], [NAN if x is None else float(np.float32(x)) for x in (c["completion_logprobs"] or [None] * len(c["completion_ids"]))])
        for c in log
    ]


def _as_ref(a: Any, sid: str) -> dict[str, Any]:
    chains = a.sessions[sid]
    return {
        "chains": [
            {"ids": c.ids.tolist(), "loss": c.loss_mask.tolist(), "logprobs": c.logprobs.tolist(), "calls": c.call_index.tolist(), "open": c.open,
             "parent": c.parent, "shared": c.shared}  # fmt: skip
            for c in chains
        ],
        "events": [
            {
                "call": e.call_index, "kind": e.kind, "policy": e.policy, "chain": e.chain, "to_chain": e.to_chain,
                "position": e.position, "removed": e.removed, "masked": e.masked, "dropped": e.dropped,
            }  # fmt: skip
            for e in a.events
            if e.session_id == sid
        ],
    }


def _same(x: Any, y: Any) -> bool:
    if isinstance(x, float) and isinstance(y, float):
        return (math.isnan(x) and math.isnan(y)) or x == y
    if isinstance(x, list) and isinstance(y, list):
        return len(x) == len(y) and all(_same(a, b) for a, b in zip(x, y))
    if isinstance(x, dict) and isinstance(y, dict):
        return x.keys() == y.keys() and all(_same(x[k], y[k]) for k in x)
    return bool(x == y)


def _no_tokenizer_family(monkeypatch: pytest.MonkeyPatch, trim: tuple[int, ...] = (END,), max_trim: int = 1) -> None:
    """Trim ids and markers of the generated logs, without a tokenizer."""
    monkeypatch.setattr("tito_fast.chains.core._family", lambda tok, fam: _Family(list(trim), max_trim, [B], None, None))


POLICIES = [None, "fork", "drop", {"seam_drift": "fork", "rewrite": "drop"}, {"rollback": "drop", "new_root": "drop"}]


#: (trim ids, max_trim): one trailing id as most families, two ids of two kinds (the marker too), two of one.
TRIMS = [((END,), 1), ((END, B), 2), ((END,), 2)]


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10**6), sessions=st.integers(1, 4), policy=st.sampled_from(POLICIES), window=st.sampled_from([0, 2, 8]),
    leaves=st.sampled_from(["all", "drop_retries"]), trim=st.sampled_from(TRIMS),
)  # fmt: skip
def test_rust_equals_the_reference_and_keeps_the_invariant(
    seed: int, sessions: int, policy: Any, window: int, leaves: str, trim: tuple[tuple[int, ...], int]
) -> None:
    mp = pytest.MonkeyPatch()
    _no_tokenizer_family(mp, *trim)
    try:
        logs = [call_log(seed + s, 6 + (seed + s) % 10) for s in range(sessions)]
        records = _records(logs)
        a = assemble(records, policy=policy, realign_window=window, threads=2, leaves=leaves)
        # in chunks that are slices of one table's arrays, as a Parquet file of several row groups reads
        table = pa.Table.from_pylist(records)
        chunked = pa.Table.from_batches(table.to_batches(max_chunksize=1 + seed % len(records)))
        columnar = assemble(chunked, policy=policy, realign_window=window, threads=1, leaves=leaves)
    finally:
        mp.undo()
    assert chunked.column("prompt_ids").num_chunks == -(-len(records) // (1 + seed % len(records)))
    for s in range(sessions):  # the columnar path (ids read in place from list columns) gives the same
        assert _same(_as_ref(columnar, f"s{s}"), _as_ref(a, f"s{s}"))
    pol = resolve_policy(policy)
    for s, log in enumerate(logs):
        calls = _ref_calls(log)
        want = ref.assemble_session(
            calls, trim=set(trim[0]), max_trim=trim[1], realign_window=window, policy=pol, boundary={B}, length=_length(log), leaves=leaves
        )  # fmt: skip
        got = _as_ref(a, f"s{s}")
        assert _same(got["chains"], want["chains"])
        assert _same(got["events"], want["events"])
        ref.check_invariant(calls, got)
    packed = a.packed()  # each shared prefix once; unpacked, the same chains
    for r, ch in enumerate(a.chains()):
        whole = packed.unpack(r)
        assert whole["ids"].tolist() == ch.ids.tolist() and whole["loss_mask"].tolist() == ch.loss_mask.tolist()
        assert np.array_equal(whole["logprobs"], ch.logprobs, equal_nan=True)
        assert whole["call_index"].tolist() == ch.call_index.tolist()
    assert len(packed.ids) == sum(len(c) - c.shared for c in a.chains())
    total = sum(len(c["completion_ids"]) for log in logs for c in log)
    sm = a.summary
    assert sm.sampled_ids == total
    assert sm.delivered_ids + sum(sm.masked_by_cause.values()) + sum(sm.dropped_by_cause.values()) == total


def test_planted_events_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    _no_tokenizer_family(monkeypatch)
    sys_, user = [B, 1, 2], [B, 3, 4, 5]
    c1 = ([*sys_, *user, B], [10, 11, 12, END])
    tool = [B, 20, 21]
    c2 = ([*c1[0], *c1[1], *tool, B], [13, END])  # extends
    c3 = (c2[0], [14, 15, END])  # retry of c2
    c4 = ([*c2[0], 14, 7, END, B, 22, B], [16, END])  # seam drift: 15 re-rendered as 7 (realigned)
    c5 = ([B, 50, 51, B, 52, B], [53, END])  # a sub-agent
    c6 = ([*sys_, B, 60, 61, B], [17, END])  # compaction: rewrite
    log = [{"prompt_ids": p, "completion_ids": c, "completion_logprobs": None} for p, c in (c1, c2, c3, c4, c5, c6)]
    a = assemble([{"session_id": "x", **c} for c in log])
    kinds = [(e.call_index, e.kind, e.policy) for e in a.events]
    assert kinds == [(2, "rollback", "fork"), (3, "seam_drift", "realign"), (4, "new_root", "fork"), (5, "rewrite", "fork")]
    chains = a.sessions["x"]
    assert len(chains) == 4 and all(c.open for c in chains)  # a branch closes nothing
    assert [(c.parent, c.shared) for c in chains] == [(None, 0), (0, len(c2[0])), (None, 0), (1, 4)]
    assert a.events[1].masked == 2 and a.events[1].removed == 2  # the sampled 15, END replaced by the prompt's 7, END
    assert a.summary.masked_by_cause == {"seam_drift": 2}
    assert a.summary.forks_by_cause == {"rollback": 1, "new_root": 1, "rewrite": 1}
    assert a.summary.chains_per_session == {4: 1}


def test_python_objects_files_and_errors(tmp_path: Any) -> None:
    good = {"session_id": "s", "call_index": 0, "prompt_ids": [1, 2], "completion_ids": [3], "completion_logprobs": [-0.5]}
    a = assemble([good])
    assert a.sessions["s"][0].logprobs.tolist()[-1] == -0.5
    with pytest.raises(CallsError, match="prompt_ids"):
        assemble([{"session_id": "s", "completion_ids": [1]}])
    with pytest.raises(CallsError, match=r"completion_logprobs' has 2 values for 1"):
        assemble([{**good, "completion_logprobs": [0.1, 0.2]}])
    with pytest.raises(CallsError, match=r"prompt_ids\[1\] = -1"):
        assemble([{**good, "prompt_ids": [1, -1]}])
    with pytest.raises(CallsError, match="call_index 0 repeats"):
        assemble([good, good])
    path = tmp_path / "calls.jsonl"
    path.write_text('{"session_id": "s", "prompt_ids": [1], "completion_ids": [2]}\nnot json\n{"session_id": "t"}\n')
    with pytest.raises(CallsError, match="calls.jsonl:2: invalid JSON"):
        assemble(path)
    skipped = assemble(path, on_error="skip")
    assert [b.source for b in skipped.bad] == ["calls.jsonl:2", "calls.jsonl:3"] and skipped.summary.bad_records == 2
    assert skipped.summary.sessions == 1
    with pytest.raises(ValueError, match="realign' applies to seam drift only"):
        assemble([good], policy={"rewrite": "realign"})
    with pytest.raises(ValueError, match="unknown cause"):
        assemble([good], policy={"retry": "fork"})
    with pytest.raises(ValueError, match="realign_window"):
        assemble([good], realign_window=-1)


def test_calls_are_ordered_by_call_index_within_sessions() -> None:
    from tito_fast.chains.calls import Call, group_sessions

    def call(sid: str, idx: int | None, tag: int) -> Call:
        return Call(sid, np.array([tag], np.uint32), np.zeros(0, np.uint32), call_index=idx, source=f"r{tag}")

    calls = [call("a", 2, 0), call("b", None, 1), call("a", None, 2), call("a", 0, 3), call("b", 0, 4), call("a", 1, 5)]
    sessions, bad = group_sessions(calls)
    assert sessions.ids == ["a", "b"]
    assert [[c.source for c in cs] for cs in sessions.calls] == [["r3", "r2", "r0"], ["r1"]]
    # r5 repeats index 1 (r2's place); r4 repeats b's index 0 (r1's place)
    assert sorted(b.source for b in bad) == ["r4", "r5"]


def test_columnar_input_errors_name_the_row() -> None:
    good = {"session_id": "s", "call_index": 0, "prompt_ids": [1, 2], "completion_ids": [3], "completion_logprobs": [-0.5]}

    def table(**change: Any) -> Any:
        return pa.Table.from_pylist([good, {**good, "call_index": 1, **change}])

    assert assemble(table()).summary.calls == 2
    with pytest.raises(CallsError, match=r"row 1: prompt_ids\[1\] = -4 is out of range"):
        assemble(table(prompt_ids=[1, -4]))
    with pytest.raises(CallsError, match=r"row 1: 'prompt_ids' is empty"):
        assemble(table(prompt_ids=[]))
    with pytest.raises(CallsError, match=r"row 1: 'completion_logprobs' has 2 values for 1"):
        assemble(table(completion_logprobs=[0.1, 0.2]))
    with pytest.raises(CallsError, match=r"row 1: call_index 0 repeats"):
        assemble(table(call_index=0))
    with pytest.raises(CallsError, match="no column 'prompt_ids'"):
        assemble(pa.Table.from_pylist([{"session_id": "s"}]))
    skipped = assemble(table(call_index=0), on_error="skip")
    assert [b.source for b in skipped.bad] == ["row 1"] and skipped.summary.calls == 1
    # every bad row is skipped under skip, with the one reader's reason, whichever check found it
    cases: list[tuple[dict[str, Any], str]] = [
        ({"prompt_ids": [1, -4]}, "prompt_ids[1] = -4 is out of range"),
        ({"prompt_ids": []}, "'prompt_ids' is empty"),
        ({"session_id": None}, "missing field 'session_id'"),
        ({"completion_logprobs": [float("inf")]}, "completion_logprobs[0] is inf, not a finite number"),
        ({"completion_logprobs": [-1e39]}, "outside float32's range"),
        ({"messages": '[{"role": "user"}'}, "invalid JSON"),
        ({"messages": '{"role": "user"}'}, "'messages' must be a list of objects"),
        ({"call_index": -1}, "'call_index' must be a non-negative int"),
    ]
    for change, reason in cases:
        rows = [{**good, "messages": None}, {**good, "messages": None, "call_index": 1, **change}]
        got = assemble(pa.Table.from_pylist(rows), on_error="skip")
        assert [b.source for b in got.bad] == ["row 1"] and reason in got.bad[0].reason, (change, got.bad)
        assert got.summary.calls == 1
    # numeric strings and bools are not logprobs, in Parquet as in JSONL
    for value in (["-0.5"], [True]):
        got = assemble(pa.Table.from_pylist([{**good, "completion_logprobs": value}]), on_error="skip")
        assert [b.source for b in got.bad] == ["row 0"] and "not a number" in got.bad[0].reason
    nulls = assemble(table(completion_logprobs=None))
    assert np.isnan(nulls.sessions["s"][-1].logprobs[-1])  # call 1 (a retry: its own chain) has none


def test_prompts_that_are_views_of_one_array_give_the_same_chains() -> None:
    """Many calls whose ids are views of one array (sliced from a batch) are
    read in place, with the same result."""
    from tito_fast.chains import Call

    logs = [call_log(s, 8) for s in range(12)]
    records = _records(logs)
    flat = np.concatenate([np.asarray(r["prompt_ids"], dtype=np.uint32) for r in records])
    ends = np.cumsum([len(r["prompt_ids"]) for r in records])
    views = [
        Call(r["session_id"], flat[e - len(r["prompt_ids"]) : e], np.asarray(r["completion_ids"], np.uint32), call_index=r["call_index"], finish_reason=r["finish_reason"],
             completion_logprobs=np.asarray([np.nan if x is None else x for x in r["completion_logprobs"]], np.float32) if r["completion_logprobs"] else None)
        for r, e in zip(records, ends)
    ]  # fmt: skip
    assert len(views) > 64 and all(v.prompt_ids.base is flat for v in views)
    a, b = assemble(records), assemble(views)
    assert [c.ids.tolist() for c in a.chains()] == [c.ids.tolist() for c in b.chains()]


def test_matching_input_errors_name_the_argument_and_position() -> None:
    from tito_fast._core import assemble_calls
    from tito_fast.errors import TokenInputError

    comp, off, lp, so = np.array([3, 4], np.uint32), np.array([0, 1, 2], np.int64), np.zeros(2, np.float32), np.array([0, 2], np.int64)
    kw: dict[str, Any] = {"trim_ids": [], "max_trim": 0, "realign_window": 0, "policy": ("fork",) * 4, "boundary_ids": []}
    ok = assemble_calls([np.array([1, 2], np.uint32), [1, 2, 3]], comp, off, lp, so, **kw)  # a list of ints is taken too
    assert ok["ids"].tolist() == [1, 2, 3, 4]
    with pytest.raises(TokenInputError, match=r"argument 'prompts\[1\]'") as e:
        assemble_calls([np.array([1, 2], np.uint32), np.array([1, -2], np.int64)], comp, off, lp, so, **kw)
    assert e.value.argument == "prompts[1]" and e.value.position == 1
    with pytest.raises(TokenInputError, match=r"argument 'prompts\[0\]'.*str"):
        assemble_calls(["ab", [1]], comp, off, lp, so, **kw)
    chunks = ([np.array([1, 2], np.uint32), np.array([1, 2, 3], np.uint32)], [np.array([0, 2], np.int64), np.array([0, 3], np.int64)])
    assert assemble_calls(chunks, comp, off, lp, so, **kw)["ids"].tolist() == [1, 2, 3, 4]  # the second extends the first
    with pytest.raises(TokenInputError, match="2 chunks of values for 1 of offsets"):
        assemble_calls((chunks[0], chunks[1][:1]), comp, off, lp, so, **kw)
    with pytest.raises(TokenInputError, match="must end at the number of values"):
        assemble_calls((chunks[0], [chunks[1][0], np.array([0, 2], np.int64)]), comp, off, lp, so, **kw)
    with pytest.raises(TokenInputError, match="describes 2 calls, but there are 1 prompts"):
        assemble_calls((np.array([1, 2], np.uint32), np.array([0, 2], np.int64)), comp, off, lp, so, **kw)


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 5) | st.none()), max_size=30), presort=st.booleans())
def test_call_order_is_session_then_call_index(rows: list[tuple[int, int | None]], presort: bool) -> None:
    """Records in session order, then call_index (a record without one takes
    its place among its session's records), repeats flagged; input already in
    that order (as captures are written) takes a shortcut with the same result."""
    from tito_fast.chains.calls import call_order

    if presort:  # grouped by session, indexes increasing: the shortcut
        rows = sorted({(c, i if i is not None else 0) for c, i in rows})
    firsts: dict[int, int] = {}
    code = np.array([firsts.setdefault(c, len(firsts)) for c, _ in rows], dtype=np.int64)
    given_ = np.array([i is not None for _, i in rows], dtype=bool)
    index = np.array([-1 if i is None else i for _, i in rows], dtype=np.int64)
    order, repeat, used = call_order(code, index, given_)
    place = {}
    for r in range(len(rows)):  # a record without an index: its position among its session's records
        place[r] = sum(1 for q in range(r) if code[q] == code[r])
    key = [(int(code[r]), int(index[r]) if given_[r] else place[r], r) for r in range(len(rows))]
    want = sorted(range(len(rows)), key=lambda r: key[r])
    assert order.tolist() == want
    seen: set[tuple[int, int]] = set()
    for k, r in enumerate(want):
        assert bool(repeat[k]) == (bool(given_[r]) and key[r][:2] in seen)
        seen.add(key[r][:2])
    assert [int(used[r]) for r in range(len(rows))] == [key[r][1] for r in range(len(rows))]


def test_completions_per_call_are_read_in_place() -> None:
    """Completions and logprobs given per call (as `Call` objects hold them)
    give what the CSR layout gives; a call without logprobs has NaN; a
    wrong one is named."""
    from tito_fast._core import assemble_calls
    from tito_fast.chains import Call
    from tito_fast.errors import TokenInputError

    prompts = [np.array([1, 2], np.uint32), np.array([1, 2, 3, 4, 5], np.uint32)]
    so = np.array([0, 2], np.int64)
    kw: dict[str, Any] = {"trim_ids": [], "max_trim": 0, "realign_window": 0, "policy": ("fork",) * 4, "boundary_ids": []}
    flat = assemble_calls(prompts, np.array([3, 4, 6], np.uint32), np.array([0, 2, 3], np.int64), np.array([-0.5, -0.25, np.nan], np.float32), so, **kw)
    lps = [np.array([-0.5, -0.25], np.float32), None]
    per_call = assemble_calls(prompts, [np.array([3, 4], np.uint32), [6]], None, lps, so, **kw)
    for key in ("ids", "loss_mask", "span_start", "call_chain"):
        assert per_call[key].tolist() == flat[key].tolist()
    assert per_call["logprobs"].tobytes() == flat["logprobs"].tobytes()
    with pytest.raises(TokenInputError, match=r"argument 'logprobs\[0\]': has 1 values for 2 completion ids"):
        assemble_calls(prompts, [np.array([3, 4], np.uint32), [6]], None, [np.array([0.5], np.float32), None], so, **kw)
    with pytest.raises(TokenInputError, match=r"argument 'logprobs\[1\]': must be a 1-D float32 array or None"):
        assemble_calls(prompts, [np.array([3, 4], np.uint32), [6]], None, [None, np.array([0.5])], so, **kw)
    with pytest.raises(TokenInputError, match=r"argument 'completion\[1\]'"):
        assemble_calls(prompts, [np.array([3, 4], np.uint32), [-6]], None, [None, None], so, **kw)
    with pytest.raises(TokenInputError, match="has 1 entries for 2 calls"):
        assemble_calls(prompts, [np.array([3, 4], np.uint32), [6]], None, [None], so, **kw)
    # Call objects with logprobs as a list of floats, and as float64: converted
    a = assemble([Call("s", prompts[0], np.array([3, 4], np.uint32), completion_logprobs=[-0.5, -0.25]),  # type: ignore[arg-type]
                  Call("s", prompts[1], np.array([6], np.uint32), completion_logprobs=np.array([-1.0]))])  # fmt: skip
    assert np.array_equal(a.sessions["s"][0].logprobs[[2, 3, 5]], np.array([-0.5, -0.25, -1.0], np.float32))


def test_an_assembly_does_not_keep_the_input_alive() -> None:
    """Chains hold their own flat buffers (and the calls' messages), never the
    input's id arrays: dropping the calls frees them."""
    import gc
    import weakref

    from tito_fast.chains import Call

    calls = [Call("s", np.array([1, 2, 3 + k], np.uint32), np.array([7], np.uint32), messages=[{"role": "user", "content": "x"}]) for k in range(3)]
    refs = [weakref.ref(c.prompt_ids) for c in calls] + [weakref.ref(c.completion_ids) for c in calls]
    a = assemble(calls)
    del calls
    gc.collect()
    assert all(r() is None for r in refs)
    assert [c.ids.tolist() for c in a.chains()] == [[1, 2, 3, 7], [1, 2, 4, 7], [1, 2, 5, 7]]


def test_assemble_needs_no_template_the_family_renders(monkeypatch: pytest.MonkeyPatch) -> None:
    """The family's ids (trims, markers) come from `family_facts`: a template the
    family refuses to render never stops assembly; message indexes then come
    from the rendered blocks."""
    import tito_fast.chat.families as families
    from tito_fast.errors import TemplateNotAppendOnlyError
    from tito_fast.testing import fixtures

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise TemplateNotAppendOnlyError("not append-only", family="qwen3", source="a test", divergence=None, detail="")

    monkeypatch.setattr(families, "get_tito_tokenizer", refuse)
    tok = fixtures.load_tokenizer("qwen3")
    prompt = tok.encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
    reply = tok.encode("yo<|im_end|>", add_special_tokens=False)
    call = {"session_id": "s", "prompt_ids": prompt, "completion_ids": reply, "messages": [{"role": "user", "content": "hi"}]}
    a = assemble([call], tokenizer=tok, family="qwen3")
    chain = a.sessions["s"][0]
    assert chain.ids.tolist() == prompt + reply
    assert chain.role[1] == "user" and chain.role[-1] == "assistant"

"""A plain-Python implementation of call assembly, written from the spec of
`tito_fast.chains` (lists, no numpy, no Rust): the parity reference of the
tests and the baseline of `benches/bench_assemble.py`.

`assemble_session(calls, ...)` takes one session's calls in order as
`(prompt_ids, completion_ids, logprobs)` lists and returns its chains and
events as plain dicts. Every call is compared with every chain of its
session (no index): the spec, not a fast path.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

Policy = str  # "fork" | "realign" | "drop"


def _lcp(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _first_block_end(ids: list[int], boundary: set[int]) -> int:
    """Where the first message block ends: at the second boundary id (the
    first opens it); the whole sequence without two."""
    marks = [i for i, x in enumerate(ids) if x in boundary][:2]
    return marks[1] if len(marks) == 2 else len(ids)


class _Chain:
    def __init__(self, first_block_end: int, parent: int | None) -> None:
        self.ids: list[int] = []
        self.loss: list[int] = []
        self.logprobs: list[float] = []
        self.calls: list[int] = []  # per id: the call that added it
        self.prompt_ends: list[int] = []  # per call in the chain
        self.first_block_end = first_block_end
        self.open = True
        self.parent = parent
        self.stamp = 0
        self.spans: list[tuple[int, int]] = []  # (call, where its ids start), in order

    def cut(self, at: int) -> int:
        masked = sum(self.loss[at:])
        del self.ids[at:], self.loss[at:], self.logprobs[at:], self.calls[at:]
        self.prompt_ends = [min(p, at) for p in self.prompt_ends]
        self.spans = [(c, f) for c, f in self.spans if f < at]
        return masked

    def add(self, call: int, prompt: list[int], completion: list[int], lps: list[float], start: int) -> None:
        self.spans.append((call, start))
        new = prompt[start:]
        self.ids += new
        self.loss += [0] * len(new)
        self.logprobs += [math.nan] * len(new)
        self.calls += [call] * len(new)
        self.prompt_ends.append(len(self.ids))
        self.ids += completion
        self.loss += [1] * len(completion)
        self.logprobs += list(lps)
        self.calls += [call] * len(completion)


def assemble_session(
    calls: list[tuple[list[int], list[int], list[float]]],
    *,
    trim: set[int] | frozenset[int] = frozenset(),
    max_trim: int = 0,
    realign_window: int = 8,
    policy: Mapping[str, Policy] | None = None,
    boundary: set[int] | frozenset[int] = frozenset(),
    length: list[bool] | None = None,
    leaves: str = "all",
) -> dict[str, Any]:
    """One session's chains (`ids`, `loss`, `logprobs`, `calls`, `open`,
    `parent`, `shared`), its events and the chain of each call (-1: dropped).
    `length[c]`: call c's completion ended on finish_reason="length";
    `leaves="drop_retries"`: a chain a retry branched off (a rollback fork)
    that took no call after the retry is dropped from the branch point on
    (event "superseded"), the retry's chain taking over its ids before it."""
    pol = policy or {"seam_drift": "realign", "rollback": "fork", "rewrite": "fork", "new_root": "fork"}
    ended = length or [False] * len(calls)
    chains: list[_Chain] = []
    events: list[dict[str, Any]] = []
    call_chain: list[int] = []
    last: int | None = None
    clock = 0

    def touch(k: int) -> None:
        nonlocal clock
        clock += 1
        chains[k].stamp = clock

    def better(cand: tuple[int, int] | None, k: int, l: int) -> bool:  # furthest, ties to the latest
        return cand is None or cand[1] < l or (cand[1] == l and chains[k].stamp > chains[cand[0]].stamp)

    for c, (prompt, completion, lps) in enumerate(calls):
        # every chain: how far the prompt follows it
        candidates = [(k, _lcp(ch.ids, prompt)) for k, ch in enumerate(chains)]
        extends = None
        for k, l in candidates:
            ch = chains[k]
            n = len(ch.ids)
            whole = l == n
            trimmed = n - l <= max_trim and all(x in trim for x in ch.ids[l:]) and l < len(prompt)
            if (whole or trimmed) and better(extends, k, l):
                extends = (k, l)
        if extends is not None and chains[extends[0]].open:
            k, l = extends
            ch = chains[k]
            removed = len(ch.ids) - l
            masked = ch.cut(l)
            ch.add(c, prompt, completion, lps, l)
            ch.open = not ended[c]
            touch(k)
            if removed or last != k:
                events.append({"call": c, "kind": "extend", "policy": "extend", "chain": k, "to_chain": k,
                               "position": l, "removed": removed, "masked": masked, "dropped": 0})  # fmt: skip
            call_chain.append(k)
            last = k
            continue
        best = None
        for k, l in candidates:
            if better(best, k, l):
                best = (k, l)
        if best is None:  # the session's first call
            chains.append(_Chain(_first_block_end(prompt, set(boundary)), None))
            chains[-1].add(c, prompt, completion, lps, 0)
            chains[-1].open = not ended[c]
            touch(len(chains) - 1)
            call_chain.append(len(chains) - 1)
            last = len(chains) - 1
            continue
        if extends is not None and extends[1] < best[1]:  # cut by length, but another chain goes further
            extends = None
        k, l = extends if extends is not None else best
        ch = chains[k]
        n = len(ch.ids)
        if extends is not None:
            kind = "length"
        elif l == len(prompt):
            kind = "rollback"
        elif n - l <= realign_window and l >= (ch.prompt_ends[-1] if ch.prompt_ends else 0):
            kind = "seam_drift"
        elif l < ch.first_block_end:
            kind = "new_root"
        else:
            kind = "rewrite"
        p = "fork" if kind == "length" else pol[kind]
        ev = {"call": c, "kind": kind, "policy": p, "chain": k, "to_chain": None, "position": l, "removed": 0, "masked": 0, "dropped": 0}
        if p == "drop":
            ev["dropped"] = len(completion)
            call_chain.append(-1)
        elif p == "realign":
            ev["removed"] = n - l
            ev["masked"] = ch.cut(l)
            ch.add(c, prompt, completion, lps, l)
            ch.open = not ended[c]
            touch(k)
            ev["to_chain"] = k
            call_chain.append(k)
            last = k
        else:
            fresh = _Chain(_first_block_end(prompt, set(boundary)), None if kind == "new_root" else k)
            fresh.add(c, prompt, completion, lps, 0)
            fresh.open = not ended[c]
            chains.append(fresh)
            touch(len(chains) - 1)
            ev["to_chain"] = len(chains) - 1
            call_chain.append(len(chains) - 1)
            last = len(chains) - 1
        events.append(ev)

    if leaves == "drop_retries":
        chains, events, call_chain = _drop_retries(chains, events, call_chain)

    def shared(ch: _Chain) -> int:
        if ch.parent is None:
            return 0
        unsampled = ch.loss.index(1) if 1 in ch.loss else len(ch.loss)
        return min(_lcp(ch.ids, chains[ch.parent].ids), unsampled)

    return {
        "chains": [
            {"ids": ch.ids, "loss": ch.loss, "logprobs": ch.logprobs, "calls": ch.calls, "open": ch.open,
             "parent": ch.parent, "shared": shared(ch)}  # fmt: skip
            for ch in chains
        ],
        "events": events,
        "call_chain": call_chain,
    }


def _drop_retries(
    chains: list[_Chain], events: list[dict[str, Any]], call_chain: list[int]
) -> tuple[list[_Chain], list[dict[str, Any]], list[int]]:
    n = len(chains)
    to = list(range(n))

    def find(k: int) -> int:
        while to[k] != k:
            k = to[k]
        return k

    gone = [False] * n
    extra: list[dict[str, Any]] = []
    lost: set[int] = set()
    for ev in events:
        if ev["kind"] != "rollback" or ev["policy"] != "fork" or ev["chain"] is None or ev["to_chain"] is None:
            continue
        j, h = ev["to_chain"], find(ev["chain"])
        if h == j or gone[j]:
            continue
        H, J = chains[h], chains[j]
        if H.spans and H.spans[-1][0] > J.spans[0][0]:
            continue  # taken up again after the retry
        at = min(ev["position"], _lcp(H.ids, J.ids))
        removed = len(H.ids) - at
        lost |= {c for c in set(H.calls) if any(f for f, cc in zip(H.loss, H.calls) if cc == c)
                 and not any(f for f, cc in zip(H.loss[:at], H.calls[:at]) if cc == c)}  # fmt: skip
        dropped = sum(H.loss[at:])
        spans = [(c, f) for c, f in H.spans if f < at]
        J.ids, J.loss, J.logprobs, J.calls = H.ids[:at] + J.ids[at:], H.loss[:at] + J.loss[at:], H.logprobs[:at] + J.logprobs[at:], H.calls[:at] + J.calls[at:]
        J.spans = spans + [(J.spans[0][0], at)] + J.spans[1:]
        J.first_block_end, J.parent = H.first_block_end, H.parent
        gone[h], to[h] = True, j
        last = spans[-1][0] if spans else ev["call"]
        extra.append({"call": last, "kind": "superseded", "policy": "drop", "chain": h, "to_chain": j, "position": at,
                      "removed": removed, "masked": 0, "dropped": dropped})  # fmt: skip
    if not extra:
        return chains, events, call_chain
    new_index, k = [0] * n, 0
    for i in range(n):
        if not gone[i]:
            new_index[i], k = k, k + 1

    def renumber(x: int | None) -> int | None:
        return None if x is None else new_index[find(x)]

    for ev in events + extra:
        ev["chain"], ev["to_chain"] = renumber(ev["chain"]), renumber(ev["to_chain"])
    holder = [-1] * len(call_chain)
    for i, ch in enumerate(chains):
        if not gone[i]:
            for c, _ in ch.spans:
                holder[c] = new_index[i]
    for c in lost:
        holder[c] = -1
    call_chain = [holder[c] if k >= 0 else k for c, k in enumerate(call_chain)]
    for ch in chains:
        ch.parent = renumber(ch.parent)
    kept = [ch for i, ch in enumerate(chains) if not gone[i]]
    return kept, sorted(events + extra, key=lambda e: e["call"]), call_chain


def check_invariant(calls: list[tuple[list[int], list[int], list[float]]], out: dict[str, Any]) -> None:
    """Assert the spec's invariant on one assembled session: every id with
    loss 1 follows exactly its call's prompt and the completion ids before
    it, with the engine's logprob; each call's sampled ids are emitted in one
    chain at most; emitted + masked + dropped = sampled."""
    emitted = [0] * len(calls)
    for ch in out["chains"]:
        ids, loss, lps, who = ch["ids"], ch["loss"], ch["logprobs"], ch["calls"]
        for q, (flag, c) in enumerate(zip(loss, who)):
            if not flag:
                continue
            prompt, completion, elps = calls[c]
            j = q - len(prompt)
            assert 0 <= j < len(completion), (c, q)
            assert ids[:q] == prompt + completion[:j], f"call {c}: the ids before sampled id {q} are not its prompt + completion"
            assert ids[q] == completion[j]
            same = (math.isnan(lps[q]) and math.isnan(elps[j])) or lps[q] == elps[j]
            assert same, f"call {c}: logprob at {q}"
            emitted[c] += 1
    per_chain: dict[int, int] = {}
    for k, ch in enumerate(out["chains"]):
        for c, f in zip(ch["calls"], ch["loss"]):
            if f:
                per_chain.setdefault(c, k)
                assert per_chain[c] == k, f"call {c}: sampled ids in two chains"
    masked = sum(e["masked"] for e in out["events"])
    dropped = sum(e["dropped"] for e in out["events"])
    sampled = sum(len(c[1]) for c in calls)
    assert sum(emitted) + masked + dropped == sampled, (sum(emitted), masked, dropped, sampled)

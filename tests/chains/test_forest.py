"""Sessions as a forest: generated capture logs of a main agent with
sub-agents (nested too) taking turns, retries, length cuts, with the chains
known from the construction. Every agent's calls must form its own chain
(the main agent resumes its chain after a sub-agent), a retry or a call
after a length cut branches off the chain it came from, and the Rust
assembly equals the plain-Python reference written from the spec."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tito_fast import assemble
from tito_fast.chains import resolve_policy
from tito_fast.chains.core import _Family
from tito_fast.testing import assemble_reference as ref

B = 100  # a message block marker
END = 9  # a trailing id the family may trim
BOS = 7  # what some templates put before the first marker


class _Agent:
    def __init__(self, rng: random.Random, name: int, bos: bool) -> None:
        # its own system prompt (the first block), then a task
        self.history = [*([BOS] if bos else []), B, 200 + name, *_text(rng, 3), B, *_text(rng, 4)]
        self.chain: int | None = None  # the construction's chain this agent's next call extends
        self.ended = False  # its last call was cut by length


def _text(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(10, 99) for _ in range(n)]


def forest_log(seed: int, turns: int) -> tuple[list[dict[str, Any]], list[int], dict[int, int | None], list[tuple[int, str]]]:
    """(calls, the chain of each call, the parent of each chain, the events
    expected: (call, kind)) of one session built from the seed."""
    rng = random.Random(seed)
    bos = rng.random() < 0.5
    agents = [_Agent(rng, 0, bos)]
    stack = [0]  # who is running: the main agent, or the sub-agent it called, ...
    calls: list[dict[str, Any]] = []
    chain_of: list[int] = []
    parent: dict[int, int | None] = {}
    events: list[tuple[int, str]] = []
    n_chains = 0
    last_chain: int | None = None
    for _ in range(turns):
        move = rng.choices(["call", "spawn", "return", "retry", "length"], [6, 1, 1, 1, 1])[0]
        if move == "spawn" and len(agents) < 6:
            agents.append(_Agent(rng, len(agents), bos))
            stack.append(len(agents) - 1)
        elif move == "return" and len(stack) > 1:
            stack.pop()
        me = agents[stack[-1]]
        prompt = [*me.history, B]
        completion = [*_text(rng, rng.randrange(1, 5)), END]
        c = len(calls)
        calls.append({"prompt_ids": prompt, "completion_ids": completion, "finish_reason": "stop"})
        if me.chain is None:  # an agent's first call: a root
            me.chain, n_chains = n_chains, n_chains + 1
            parent[me.chain] = None
            if c > 0:
                events.append((c, "new_root"))
        elif me.ended:  # the chain it extends was cut by length: a branch
            old, me.chain, n_chains = me.chain, n_chains, n_chains + 1
            parent[me.chain] = old
            events.append((c, "length"))
        elif last_chain != me.chain:
            events.append((c, "extend"))  # back to its own chain
        chain_of.append(me.chain)
        last_chain = me.chain
        me.ended = move == "length"
        if me.ended:
            calls[-1]["finish_reason"] = "length"
        if move == "retry" and not me.ended:  # the same prompt again; the agent goes on from the retry
            # differs from the first try from its first id on (99: no text id is), so the first
            # try's chain, less its trailing END, is never a prefix of a later prompt of this agent
            completion = [99, *_text(rng, rng.randrange(0, 4)), END]
            calls.append({"prompt_ids": prompt, "completion_ids": completion, "finish_reason": "stop"})
            old, me.chain, n_chains = me.chain, n_chains, n_chains + 1
            parent[me.chain] = old
            events.append((c + 1, "rollback"))
            chain_of.append(me.chain)
            last_chain = me.chain
        me.history = [*prompt, *completion, B, *_text(rng, rng.randrange(1, 4))]
    return calls, chain_of, parent, events


def _family(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("tito_fast.chains.core._family", lambda tok, fam: _Family([END], 1, [B], None, None))


def _canonical(chain_of: list[int]) -> list[int]:
    """Chains numbered by first appearance."""
    seen: dict[int, int] = {}
    return [seen.setdefault(k, len(seen)) for k in chain_of]


@settings(max_examples=80, deadline=None)
@given(seed=st.integers(0, 10**6), turns=st.integers(2, 40))
def test_each_agent_keeps_its_chain_and_branches_are_known(seed: int, turns: int) -> None:
    calls, chain_of, parent, events = forest_log(seed, turns)
    mp = pytest.MonkeyPatch()
    _family(mp)
    try:
        a = assemble([{"session_id": "s", "call_index": k, **c} for k, c in enumerate(calls)])
    finally:
        mp.undo()
    chains = a.sessions["s"]
    got_of = [-1] * len(calls)
    for ch in chains:
        for k in set(ch.call_index[ch.loss_mask == 1].tolist()):
            got_of[k] = ch.index
    assert _canonical(got_of) == _canonical(chain_of)
    # which chain each chain branched off, in the construction's numbering
    ours = {g: t for g, t in zip(got_of, chain_of)}
    assert {ours[ch.index]: (None if ch.parent is None else ours[ch.parent]) for ch in chains} == parent
    assert [(e.call_index, e.kind) for e in a.events] == events
    assert a.summary.delivered_ids == a.summary.sampled_ids  # nothing masked or dropped: no drift was planted
    for ch in chains:  # a branch shares its parent's ids up to its own prompt, with loss 0
        if ch.parent is not None:
            p = chains[ch.parent]
            assert ch.shared > 0 and np.array_equal(ch.ids[: ch.shared], p.ids[: ch.shared])
            assert not ch.loss_mask[: ch.shared].any()
    # the reference written from the spec agrees
    lists = [(c["prompt_ids"], c["completion_ids"], [float("nan")] * len(c["completion_ids"])) for c in calls]
    want = ref.assemble_session(
        lists, trim={END}, max_trim=1, realign_window=8, policy=resolve_policy(None), boundary={B},
        length=[c["finish_reason"] == "length" for c in calls],
    )  # fmt: skip
    assert want["call_chain"] == got_of
    assert [(ch["parent"], ch["shared"]) for ch in want["chains"]] == [(ch.parent, ch.shared) for ch in chains]
    ref.check_invariant(lists, want)


def test_the_main_agent_resumes_after_a_sub_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    """The issue's case: [[0], [1, 2, 3, 4], [5]] was assembled where [[0, 5], [1, 2, 3, 4]] is right."""
    _family(monkeypatch)
    main = [BOS, B, 200, 11, B, 12]
    sub = [BOS, B, 201, 13, B, 14]
    log = [(main + [B], [20, END])]
    for k in range(4):
        p = sub + [B] if k == 0 else [*log[-1][0], *log[-1][1], B, 30 + k, B]
        log.append((p, [40 + k, END]))
    log.append(([*log[0][0], *log[0][1], B, 50, B], [60, END]))
    a = assemble([{"session_id": "s", "prompt_ids": p, "completion_ids": c} for p, c in log])
    groups = sorted(sorted(set(ch.call_index[ch.loss_mask == 1].tolist())) for ch in a.sessions["s"])
    assert groups == [[0, 5], [1, 2, 3, 4]]
    assert [(e.call_index, e.kind) for e in a.events] == [(1, "new_root"), (5, "extend")]
    # the resumed chain does not repeat the context: it is the main agent's, with its sampled ids trained
    main_chain = next(ch for ch in a.sessions["s"] if 0 in ch.call_index.tolist())
    assert int(main_chain.loss_mask.sum()) == 4

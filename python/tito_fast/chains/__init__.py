"""From captured LLM calls to trainable sequences: `assemble` builds exact
chains with loss masks and logprobs, and forks where history was rewritten.

Every LLM call of an agent session, as the engine saw it (prompt ids,
completion ids, logprobs), goes in; per session, chains come out in which
each call's prompt is exactly the ids before its completion, with loss 1 on
exactly the sampled ids and the engine's logprobs there. Where a call does
not extend a chain (a retry, a compacted or edited history, a sub-agent, a
re-rendered seam, a call after a length cut), an `Event` says what happened,
where, what kind of difference it is, and what the policy did; nothing
sampled is lost without being counted. A session is a forest: every chain
stays open to later calls (the main agent resumes its chain after a
sub-agent), each chain is one leaf's path with its parent and the ids it
shares with it, and `Assembly.packed()` stores each shared prefix once.

Example:
    >>> from tito_fast import assemble
    >>> a = assemble([{"session_id": "s", "prompt_ids": [1, 2], "completion_ids": [3]}])
    >>> a.summary.delivered_share
    1.0
"""

from tito_fast.chains.calls import BadCall, Call, CallsError, read_calls
from tito_fast.chains.core import (
    CAUSES,
    DEFAULT_POLICY,
    DEFAULT_REALIGN_WINDOW,
    KINDS,
    LEAVES,
    POLICIES,
    Assembly,
    AssemblySummary,
    Chain,
    ChainsBySession,
    Event,
    assemble,
    resolve_policy,
)
from tito_fast.chains.packed import PackedChains

__all__ = [
    "CAUSES",
    "DEFAULT_POLICY",
    "DEFAULT_REALIGN_WINDOW",
    "KINDS",
    "LEAVES",
    "POLICIES",
    "Assembly",
    "AssemblySummary",
    "BadCall",
    "Call",
    "CallsError",
    "Chain",
    "ChainsBySession",
    "Event",
    "PackedChains",
    "assemble",
    "read_calls",
    "resolve_policy",
]

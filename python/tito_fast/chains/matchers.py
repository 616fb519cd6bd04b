"""Message-level matching of calls that carry their request `messages`.

A harness replays a conversation to the engine on every call. When it
replays it verbatim, the next call's prompt ids extend the chain and the
ids alone place the call. Some harnesses re-serialise what they replay
(tool-call arguments parsed and dumped again, with other spacing or key
order), so the ids depart inside an earlier completion even though the
conversation is the same one. Miles' session server attaches such a
request by comparing messages under a *matcher*; these are the same three
policies, written for captured calls:

`strict`, `loose_tool_call` and `role_content_only`: the matchers and
their keys are `tito_fast.chat.messages`' (the one owner of what makes two
messages the same: `MATCHERS`, `MESSAGE_KEYS`); this module indexes
captured conversations with them.

A conversation (a list of messages) `new` extends a `stored` one when it is
at least as long and each stored message matches the message at its place
(`extends`). A call's stored conversation is its request messages followed
by its `response` as an assistant message (`response_message`), or its
messages alone when it has no response. `message_hints` gives, for each
call of a session, the earlier call whose stored conversation the call's
messages extend, longest first, ties to the latest: the *hint* that
`assemble(..., matcher=...)` hands to the matching, where a call whose ids
extend no chain is classified against its hinted call's chain.

The hints are computed in one pass: each message is reduced to its key
under the matcher (`chat.messages.MESSAGE_KEYS`: equal keys match), and the session's conversations are a trie of keys (the
messages a call shares with the previous call, at their places, and the
previous reply replayed as it was, take the previous call's trie nodes
without being keyed again; `parse_message_texts` reads a JSON text that
appends to the previous one from where it ended). One corner of `loose_tool_call` is not an
equivalence and the keys leave it out: arguments given as dicts (not JSON
text) whose values are equal only as Python values (`True == 1`) match
through the strict step in Miles, not by key here.

Example:
    >>> stored = [{"role": "user", "content": "q"},
    ...           {"role": "assistant", "tool_calls": [{"id": "a", "type": "function",
    ...            "function": {"name": "f", "arguments": '{"x":1,"y":2}'}}]}]
    >>> new = [stored[0], {"role": "assistant", "content": "", "tool_calls": [{"id": "a", "type": "function",
    ...        "function": {"name": "f", "arguments": '{"y": 2, "x": 1}'}}]}, {"role": "tool", "content": "ok"}]
    >>> strict(stored, new), loose_tool_call(stored, new)
    (False, True)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

from tito_fast._core import json_loads
from tito_fast.chat.messages import MATCHERS as BUILTIN_MATCHERS
from tito_fast.chat.messages import message_key

#: The matchers `assemble(matcher=...)` and `tito-fast assemble --matcher` take.
MATCHERS: tuple[str, ...] = tuple(BUILTIN_MATCHERS)  # chat.messages' built-in matchers, by name

Message = dict[str, Any]

_PAIRWISE: dict[str, Callable[[Message, Message], bool]] = dict(BUILTIN_MATCHERS)


def extends(stored_messages: Sequence[Message], new_messages: Sequence[Message], matcher: str = "strict") -> bool:
    """`new_messages` is `stored_messages` (each message matched by `matcher`) followed by any messages."""
    same = _PAIRWISE[check_matcher(matcher)]
    return len(new_messages) >= len(stored_messages) and all(map(same, stored_messages, new_messages))


def strict(stored_messages: Sequence[Message], new_messages: Sequence[Message]) -> bool:
    """`new_messages` extends `stored_messages` under the `strict` matcher."""
    return extends(stored_messages, new_messages, "strict")


def loose_tool_call(stored_messages: Sequence[Message], new_messages: Sequence[Message]) -> bool:
    """`new_messages` extends `stored_messages` under the `loose_tool_call` matcher."""
    return extends(stored_messages, new_messages, "loose_tool_call")


def role_content_only(stored_messages: Sequence[Message], new_messages: Sequence[Message]) -> bool:
    """`new_messages` extends `stored_messages` under the `role_content_only` matcher."""
    return extends(stored_messages, new_messages, "role_content_only")


def check_matcher(matcher: Any, name: str = "matcher") -> str:
    """`matcher` if it names a matcher, else a ValueError naming the argument."""
    if not isinstance(matcher, str) or matcher not in MATCHERS:
        raise ValueError(f"{name} must be one of {', '.join(MATCHERS)} (or None), got {matcher!r}")
    return matcher


# ---------------------------------------------------------------- calls


def response_message(response: Any) -> Message | None:
    """A call's `response` as the assistant message it added: a message
    (a dict with a `role`, or without one: taken as the assistant's), an
    OpenAI-style reply (`choices[0].message`, or `message`), the JSON text
    of one of these, or plain text (the assistant's content). None when
    there is none."""
    if response is None:
        return None
    if isinstance(response, (bytes, bytearray)):
        response = response.decode("utf-8", "replace")
    if isinstance(response, str):
        text = response.lstrip()
        if text.startswith("{"):
            try:
                parsed = json_loads(response)  # the one reader's JSON rules, as every record field
            except ValueError:
                parsed = None
            if isinstance(parsed, dict):
                found = _message_in(parsed)
                if found is not None:
                    return found
        return {"role": "assistant", "content": response}
    if isinstance(response, dict):
        return _message_in(response)
    return None


def _message_in(d: dict[str, Any]) -> Message | None:
    choices = d.get("choices")
    if isinstance(choices, list) and choices and isinstance(choices[0], dict):
        m = choices[0].get("message")
        return {"role": "assistant", **m} if isinstance(m, dict) else None
    if "role" not in d and isinstance(d.get("message"), dict):
        return {"role": "assistant", **d["message"]}
    if "role" in d or "content" in d or "tool_calls" in d:
        return d if "role" in d else {"role": "assistant", **d}
    return None


def message_hints(
    calls: Iterable[Any], matcher: str = "strict"
) -> list[int]:
    """For each call of one session, in order: the index of the latest
    earlier call whose stored conversation (its messages, then its
    response as an assistant message when it has one) the call's messages
    extend under `matcher`; of several, the longest conversation, ties to
    the latest call. -1 when none, or when the call has no messages.

    `calls`: `Call`s (or anything with `messages` and `response`), or
    `(messages, response)` pairs.

    Linear in the messages: the conversations are a trie of message keys
    (each message normalised by the matcher); the messages `==` to the
    previous call's at their places (and its reply, replayed) take its
    trie nodes, so only a call's new messages are keyed.
    """
    key_of = message_key(check_matcher(matcher))
    trie: dict[tuple[int, Any], int] = {}  # (node, message key) -> node; node 0 is the empty conversation
    ends: dict[int, int] = {}  # node -> the latest call whose stored conversation ends there
    hints: list[int] = []
    prev_msgs: Sequence[Message] = ()
    prev_path: list[int] = []  # the previous call's node after each of its messages
    prev_reply: Message | None = None  # the previous call's response message, and its node
    reply_node = 0
    for i, call in enumerate(calls):
        if isinstance(call, tuple):
            messages, response = call
        else:
            messages, response = call.messages, call.response
        if not messages:
            hints.append(-1)
            continue
        # the messages the previous call has at their places: its nodes, not keyed again
        shared, top = 0, min(len(messages), len(prev_msgs))
        while shared < top and (prev_msgs[shared] is messages[shared] or prev_msgs[shared] == messages[shared]):
            shared += 1
        path = prev_path[:shared]
        if shared == len(prev_msgs) and prev_reply is not None and len(messages) > shared and messages[shared] == prev_reply:
            path.append(reply_node)  # the previous call's reply, replayed as it was
            shared += 1
        node = path[-1] if path else 0
        for m in messages[shared:]:
            k = key_of(m)
            nxt = trie.get((node, k))
            if nxt is None:
                nxt = trie[(node, k)] = len(trie) + 1
            path.append(nxt)
            node = nxt
        best = ends.get(0, -1)
        for found in map(ends.get, path):
            if found is not None:
                best = found  # deeper wins; at one node, the latest call is kept
        hints.append(best)
        reply = response_message(response)
        if reply is not None:
            k = key_of(reply)
            nxt = trie.get((node, k))
            if nxt is None:
                nxt = trie[(node, k)] = len(trie) + 1
            node = reply_node = nxt
        ends[node] = i
        prev_msgs, prev_path, prev_reply = messages, path, reply
    return hints


def parse_message_texts(texts: Iterable[str | bytes | None]) -> list[Any]:
    """The messages of a session's calls from their JSON text (a capture's
    text column), in call order. A text that is the previous one with
    messages appended (a harness replaying its history as it sent it) is
    parsed from where the previous one ended: its earlier messages are the
    previous call's objects, so `message_hints` does not key them again."""
    out: list[Any] = []
    prev_body, prev = "", None
    for t in texts:
        if t is None:
            out.append(None)
            continue
        if isinstance(t, (bytes, bytearray)):
            t = t.decode("utf-8")
        msgs = None
        if prev is not None and prev_body and t.startswith(prev_body):
            rest = t[len(prev_body) :].lstrip()
            if rest == "]":
                msgs = prev
            elif rest.startswith(","):
                try:
                    tail = json_loads("[" + rest[1:])
                except ValueError:
                    tail = None
                if isinstance(tail, list):
                    msgs = [*prev, *tail]
        if msgs is None:
            msgs = json_loads(t)
        out.append(msgs)
        if isinstance(msgs, list) and msgs:
            body = t.rstrip()
            prev_body, prev = (body[:-1].rstrip(), msgs) if body.endswith("]") else ("", None)
        else:
            prev_body, prev = "", None
    return out

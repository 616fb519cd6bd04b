"""Message-level matching of calls that carry their request `messages`.

A harness replays a conversation to the engine on every call. When it
replays it verbatim, the next call's prompt ids extend the chain and the
ids alone place the call. Some harnesses re-serialise what they replay
(tool-call arguments parsed and dumped again, with other spacing or key
order), so the ids depart inside an earlier completion even though the
conversation is the same one. Miles' session server attaches such a
request by comparing messages under a *matcher*; these are the same three
policies, written for captured calls:

- `strict`: two messages match when the fields a chat template reads are
  equal: `role`, `content`, `reasoning_content` and `tool_calls` (each tool
  call without its wire-only `index`); None, "" and [] count as the same
  empty value; any other field (`name`, `tool_call_id`, a client's extra
  keys) is not compared.
- `loose_tool_call`: `strict`, or: `role`, `content` and
  `reasoning_content` equal as above and the tool calls equal one by one
  (same count and order, same `id`, `type`, `function.name` and any other
  key) with `function.arguments` compared as JSON objects: a JSON text and
  a dict, or two texts with other spacing or key order, match when they
  hold the same object (keys unordered, arrays ordered, numbers by exact
  value, true never equal to 1; None or "" is the empty object). Arguments
  that are not a JSON object (invalid text, a duplicate key, NaN) are
  compared as they are, type for type.
- `role_content_only`: only `role` and `content` (empty values as in
  `strict`); tool calls, reasoning and everything else are ignored.

A conversation (a list of messages) `new` extends a `stored` one when it is
at least as long and each stored message matches the message at its place
(`extends`). A call's stored conversation is its request messages followed
by its `response` as an assistant message (`response_message`), or its
messages alone when it has no response. `message_hints` gives, for each
call of a session, the earlier call whose stored conversation the call's
messages extend, longest first, ties to the latest: the *hint* that
`assemble(..., matcher=...)` hands to the matching, where a call whose ids
extend no chain is classified against its hinted call's chain.

The hints are computed in one pass: each message is reduced to a key under
the matcher's normalisation, so two messages match exactly when their keys
are equal, and the session's conversations are a trie of keys (the
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

import json
import math
from collections.abc import Callable, Iterable, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

from tito_fast._core import json_loads

#: The matchers `assemble(matcher=...)` and `tito-fast assemble --matcher` take.
MATCHERS = ("strict", "loose_tool_call", "role_content_only")

_TEMPLATE_KEYS = ("role", "content", "reasoning_content", "tool_calls")
_WIRE_ONLY = frozenset({"index"})  # a tool call's position on the wire: no template reads it

Message = dict[str, Any]


# ---------------------------------------------------------------- values


def _empty_as_none(value: Any) -> Any:
    """None, "" and [] render alike (all falsy in a template): one value."""
    if value is None or (type(value) is str and not value) or (type(value) is list and not value):
        return None
    return value


class _Tag:
    """A marker that no decoded JSON value equals (it keeps a dict's key apart from a list)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name}>"


_DICT, _RAW, _OBJECT = _Tag("dict"), _Tag("raw"), _Tag("json-object")


def _sorted_items(items: Iterable[tuple[Any, Any]]) -> tuple[tuple[Any, Any], ...]:
    pairs = list(items)
    try:
        pairs.sort(key=lambda kv: kv[0])
    except TypeError:  # keys of mixed types (not from JSON)
        pairs.sort(key=lambda kv: (type(kv[0]).__name__, repr(kv[0])))
    return tuple(pairs)


def _frozen(value: Any) -> Any:
    """A hashable value equal to another's exactly when the two are `==`
    (JSON-like data: dicts, lists, strings, numbers, bools, None)."""
    t = type(value)
    if t is str or value is None or t is int or t is float or t is bool:
        return value
    if t is list or t is tuple:
        return tuple(_frozen(v) for v in value)
    if t is dict:
        return (_DICT, _sorted_items((k, _frozen(v)) for k, v in value.items()))
    try:
        hash(value)
    except TypeError:
        return (_RAW, repr(value))
    return value


def _typed(value: Any) -> Any:
    """A hashable value equal to another's exactly when the two are equal
    type for type (1, 1.0 and True all differ)."""
    t = type(value)
    if t is list or t is tuple:
        return (t.__name__, tuple(_typed(v) for v in value))
    if t is dict:
        return ("dict", _sorted_items((k, _typed(v)) for k, v in value.items()))
    try:
        hash(value)
    except TypeError:
        return (t.__name__, repr(value))
    return (t.__name__, value)


class _NotJsonObject(ValueError):
    pass


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _NotJsonObject(f"duplicate key {k!r}")
        out[k] = v
    return out


def _finite_number(text: str) -> Decimal:
    try:
        d = Decimal(text)
    except InvalidOperation as e:
        raise _NotJsonObject(text) from e
    if not d.is_finite():
        raise _NotJsonObject(text)
    return d


def _no_constant(text: str) -> Any:
    raise _NotJsonObject(text)  # NaN, Infinity: not JSON


def _json_value(value: Any, from_text: bool) -> Any:
    """A JSON value in a comparable form: its type named, numbers as exact
    decimals, object keys sorted, arrays in order. Raises `_NotJsonObject`
    for what JSON cannot hold."""
    t = type(value)
    if value is None:
        return ("null",)
    if t is bool:
        return ("bool", value)
    if t is str:
        return ("str", value)
    if t is int:
        return ("num", Decimal(value))
    if t is float:
        if not math.isfinite(value):
            raise _NotJsonObject("not finite")
        return ("num", Decimal(repr(value)))
    if t is Decimal and from_text:  # parsed from JSON text: always finite
        return ("num", value)
    if t is list:
        return ("arr", tuple(_json_value(v, from_text) for v in value))
    if t is dict:
        if not all(type(k) is str for k in value):
            raise _NotJsonObject("a key that is not a string")
        return ("obj", tuple(sorted((k, _json_value(v, from_text)) for k, v in value.items())))
    raise _NotJsonObject(f"a {t.__name__}")


def _arguments_key(value: Any) -> Any:
    """Tool-call arguments as a JSON object (text or dict; None and "" are
    the empty object), or as they are, typed, when they are not one."""
    if value is None or value == "":
        return (_OBJECT, ())
    parsed, from_text = value, False
    if type(value) is str:
        try:
            parsed = json.loads(value, object_pairs_hook=_no_duplicate_keys, parse_int=Decimal,
                                parse_float=_finite_number, parse_constant=_no_constant)  # fmt: skip
            from_text = True
        except (ValueError, RecursionError, OverflowError):
            return (_RAW, _typed(value))
    if type(parsed) is not dict:
        return (_RAW, _typed(value))
    try:
        return (_OBJECT, _json_value(parsed, from_text)[1])
    except (_NotJsonObject, RecursionError, TypeError):
        return (_RAW, _typed(value))


# ---------------------------------------------------------------- message keys


def _strict_key(m: Message) -> Any:
    calls = _empty_as_none(m.get("tool_calls"))
    if type(calls) is list:
        calls = [({k: v for k, v in c.items() if k not in _WIRE_ONLY} if type(c) is dict else c) for c in calls]
    return (
        _frozen(_empty_as_none(m.get("role"))), _frozen(_empty_as_none(m.get("content"))),
        _frozen(_empty_as_none(m.get("reasoning_content"))), _frozen(calls),
    )  # fmt: skip


def _function_key(f: Any) -> Any:
    if type(f) is not dict:
        return (_RAW, _typed(f))
    return (_DICT, _sorted_items((k, _arguments_key(v) if k == "arguments" else _frozen(v)) for k, v in f.items()))


def _tool_call_key(c: Any) -> Any:
    if type(c) is not dict:
        return (_RAW, _typed(c))
    return (_DICT, _sorted_items((k, _function_key(v) if k == "function" else _frozen(v)) for k, v in c.items() if k not in _WIRE_ONLY))


def _loose_key(m: Message) -> Any:
    calls = _empty_as_none(m.get("tool_calls"))
    calls_key = tuple(map(_tool_call_key, calls)) if type(calls) is list else (_RAW, _typed(calls))
    return (
        _frozen(_empty_as_none(m.get("role"))), _frozen(_empty_as_none(m.get("content"))),
        _frozen(_empty_as_none(m.get("reasoning_content"))), calls_key,
    )  # fmt: skip


def _role_content_key(m: Message) -> Any:
    return (_frozen(_empty_as_none(m.get("role"))), _frozen(_empty_as_none(m.get("content"))))


_KEYS: dict[str, Callable[[Message], Any]] = {
    "strict": _strict_key,
    "loose_tool_call": _loose_key,
    "role_content_only": _role_content_key,
}


# ---------------------------------------------------------------- pairwise matchers


def strict_message(stored: Message, new: Message) -> bool:
    """`stored` and `new` are the same message to a chat template: role,
    content, reasoning_content and tool_calls (less `index`) equal, empty values alike."""
    return _strict_key(stored) == _strict_key(new)


def loose_tool_call_message(stored: Message, new: Message) -> bool:
    """`strict_message`, or the same with tool-call arguments compared as JSON objects."""
    return _strict_key(stored) == _strict_key(new) or _loose_key(stored) == _loose_key(new)


def role_content_only_message(stored: Message, new: Message) -> bool:
    """Only role and content equal (empty values alike)."""
    return _role_content_key(stored) == _role_content_key(new)


_PAIRWISE: dict[str, Callable[[Message, Message], bool]] = {
    "strict": strict_message,
    "loose_tool_call": loose_tool_call_message,
    "role_content_only": role_content_only_message,
}


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
    key_of = _KEYS[check_matcher(matcher)]
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
            k = key_of(m) if type(m) is dict else (_RAW, _typed(m))
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

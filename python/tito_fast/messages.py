"""Message matchers and the append-only check of a session's history.

A retried or continued request must repeat the stored messages and only
append new ones. Matchers decide whether a stored message and a replayed
one are "the same" for rendering:

- `strict`: role, content, reasoning_content and tool_calls are equal, with
  None, "" and [] all equal (they render alike) and the wire-only
  `tool_calls[].index` ignored;
- `loose_tool_call`: strict, or the same except that tool-call arguments
  are the same JSON object written differently (key order, spacing,
  JSON string vs dict); types stay apart (1 vs 1.0 vs "1" vs True);
- `role_content_only`: role and content only;
- any callable `(stored, replayed) -> bool`.

Example:
    >>> check_append_only([{"role": "user", "content": "hi"}],
    ...                   [{"role": "user", "content": "hi"}, {"role": "tool", "content": "42"}],
    ...                   allowed_roles={"tool"})
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from decimal import Decimal
from typing import Any

Matcher = Callable[[dict[str, Any], dict[str, Any]], bool]

TEMPLATE_KEYS = ("role", "content", "reasoning_content", "tool_calls")
_WIRE_ONLY = ("index",)


class AppendOnlyError(ValueError):
    """The new messages do not extend the stored ones as required.

    Attributes: `index` (the first offending message), `field` (the first
    differing field, or "role" for a role that may not be appended, or
    "length" when messages were removed), `stored`, `new`.
    """

    def __init__(self, message: str, *, index: int, field: str, stored: Any = None, new: Any = None) -> None:
        super().__init__(message)
        self.index, self.field, self.stored, self.new = index, field, stored, new


class MatcherError(RuntimeError):
    """A custom matcher raised or returned something other than a bool."""


def _norm(value: Any) -> Any:
    return None if value is None or value == "" or value == [] else value


def _calls(value: Any) -> Any:
    value = _norm(value)
    if not isinstance(value, list):
        return value
    return [{k: v for k, v in c.items() if k not in _WIRE_ONLY} if isinstance(c, dict) else c for c in value]


def _differing_field(stored: dict[str, Any], new: dict[str, Any], keys: Collection[str]) -> str | None:
    for key in keys:
        a, b = stored.get(key), new.get(key)
        if key == "tool_calls":
            if _calls(a) != _calls(b):
                return key
        elif _norm(a) != _norm(b):
            return key
    return None


def strict(stored: dict[str, Any], new: dict[str, Any]) -> bool:
    """Role, content, reasoning_content and tool_calls equal (None == "" == [])."""
    # Equal dicts match under every built-in matcher: one C-level comparison
    # settles the common case before any normalisation.
    return stored is new or stored == new or _differing_field(stored, new, TEMPLATE_KEYS) is None


class _BadJson(Exception):
    pass


def _tagged(value: Any) -> Any:
    """A form where equal JSON values compare equal and different JSON types never do."""
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
        if value != value or value in (float("inf"), float("-inf")):
            raise _BadJson
        return ("num", Decimal(str(value)))
    if t is Decimal:
        if not value.is_finite():
            raise _BadJson
        return ("num", value)
    if t is list:
        return ("list", tuple(_tagged(v) for v in value))
    if t is dict:
        if any(type(k) is not str for k in value):
            raise _BadJson
        return ("obj", tuple(sorted((k, _tagged(v)) for k, v in value.items())))
    raise _BadJson


def _json_object(value: Any) -> Any:
    """The tagged form of a JSON object given as a dict or a JSON string; raises _BadJson otherwise."""
    if isinstance(value, str):

        def no_dupes(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
            out: dict[str, Any] = {}
            for k, v in pairs:
                if k in out:
                    raise _BadJson
                out[k] = v
            return out

        def bad_constant(_: str) -> Any:
            raise _BadJson

        try:
            value = json.loads(value, object_pairs_hook=no_dupes, parse_float=Decimal, parse_int=Decimal, parse_constant=bad_constant)
        except (ValueError, _BadJson) as e:
            raise _BadJson from e
    if not isinstance(value, dict):
        raise _BadJson
    return _tagged(value)


def _arguments_match(a: Any, b: Any) -> bool:
    try:
        return bool(_json_object(a) == _json_object(b))
    except _BadJson:
        return bool(a == b)


def _call_matches(a: Any, b: Any) -> bool:
    if not isinstance(a, dict) or not isinstance(b, dict):
        return bool(a == b)
    a = {k: v for k, v in a.items() if k not in _WIRE_ONLY}
    b = {k: v for k, v in b.items() if k not in _WIRE_ONLY}
    if a.keys() != b.keys():
        return False
    for key in a:
        if key != "function":
            if a[key] != b[key]:
                return False
            continue
        fa, fb = a[key], b[key]
        if not isinstance(fa, dict) or not isinstance(fb, dict):
            if fa != fb:
                return False
            continue
        if fa.keys() != fb.keys():
            return False
        for k in fa:
            if not (_arguments_match(fa[k], fb[k]) if k == "arguments" else fa[k] == fb[k]):
                return False
    return True


def loose_tool_call(stored: dict[str, Any], new: dict[str, Any]) -> bool:
    """`strict`, or equal but for tool-call arguments that are the same JSON object."""
    if stored is new or stored == new:
        return True
    try:
        if strict(stored, new):
            return True
    except RecursionError:
        pass
    if _differing_field(stored, new, ("role", "content", "reasoning_content")) is not None:
        return False
    a, b = _norm(stored.get("tool_calls")), _norm(new.get("tool_calls"))
    if not isinstance(a, list) or not isinstance(b, list):
        return bool(a == b)
    return len(a) == len(b) and all(_call_matches(x, y) for x, y in zip(a, b))


def role_content_only(stored: dict[str, Any], new: dict[str, Any]) -> bool:
    """Role and content equal (None == "" == []); everything else ignored."""
    return stored is new or stored == new or _differing_field(stored, new, ("role", "content")) is None


MATCHERS: dict[str, Matcher] = {
    "strict": strict,
    "loose_tool_call": loose_tool_call,
    "role_content_only": role_content_only,
}


#: The built-in matchers: trusted to return a bool, and all of them accept equal messages.
BUILTIN: frozenset[Matcher] = frozenset(MATCHERS.values())


def resolve_matcher(matcher: str | Matcher) -> Matcher:
    """A built-in matcher by name, or a callable (checked to return a bool on use)."""
    if isinstance(matcher, str):
        try:
            return MATCHERS[matcher]
        except KeyError:
            raise ValueError(f"unknown matcher {matcher!r}; built-in: {sorted(MATCHERS)}") from None
    if not callable(matcher):
        raise TypeError(f"matcher must be a name or a callable, got {type(matcher).__name__}")
    return matcher


def _call(matcher: Matcher, stored: dict[str, Any], new: dict[str, Any]) -> bool:
    if matcher in BUILTIN:
        return matcher(stored, new)
    try:
        result = matcher(stored, new)
    except Exception as e:
        raise MatcherError(f"the message matcher raised {type(e).__name__}: {e}") from e
    if type(result) is not bool:
        raise MatcherError(f"the message matcher must return a bool, got {type(result).__name__}")
    return result


def check_roles(stored_len: int, new: list[dict[str, Any]], allowed_roles: Collection[str] | None) -> None:
    """`AppendOnlyError` unless every message of `new` after `stored_len` has an allowed role."""
    if allowed_roles is None:
        return
    for i in range(stored_len, len(new)):
        role = new[i].get("role")
        if role not in allowed_roles:
            raise AppendOnlyError(
                f"message {i} appends role {role!r}, which this family cannot render append-only "
                f"(allowed: {sorted(allowed_roles)})",
                index=i,
                field="role",
                new=new[i],
            )


def check_append_only(
    stored: list[dict[str, Any]],
    new: list[dict[str, Any]],
    allowed_roles: Collection[str] | None = None,
    matcher: str | Matcher = "strict",
) -> None:
    """Raise `AppendOnlyError` unless `new` repeats `stored` (under `matcher`)
    and every appended message has a role in `allowed_roles` (None: any).

    Example:
        >>> check_append_only([{"role": "user", "content": "a"}], [{"role": "user", "content": "b"}])
        Traceback (most recent call last):
        ...
        tito_fast.messages.AppendOnlyError: message 0 differs from the stored one in 'content': stored 'a', new 'b'
    """
    match = resolve_matcher(matcher)
    if len(new) < len(stored):
        raise AppendOnlyError(
            f"the new request has {len(new)} messages but {len(stored)} are stored: messages were removed",
            index=len(new),
            field="length",
        )
    for i, (s, n) in enumerate(zip(stored, new)):
        if not _call(match, s, n):
            keys = TEMPLATE_KEYS if match is not role_content_only else ("role", "content")
            field = _differing_field(s, n, keys) or "tool_calls"
            raise AppendOnlyError(
                f"message {i} differs from the stored one in {field!r}: "
                f"stored {_short(s.get(field))}, new {_short(n.get(field))}",
                index=i,
                field=field,
                stored=s,
                new=n,
            )
    check_roles(len(stored), new, allowed_roles)


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."

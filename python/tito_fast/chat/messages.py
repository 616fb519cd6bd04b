"""Message matchers and the append-only check of a session's history.

A retried or continued request must repeat the stored messages and only
append new ones. Matchers decide whether a stored message and a replayed
one are "the same" for rendering; the built-in ones decide exactly as the
reference's (Miles' session message matchers):

- `strict`: role, content, reasoning_content and tool_calls are equal, with
  None, "" and [] all equal (they render alike) and the wire-only
  `tool_calls[].index` ignored;
- `loose_tool_call`: strict, or the same except that tool-call arguments
  are the same JSON object written differently (key order, spacing, JSON
  string vs dict; None, "" and any spelling of `{}` are the empty object).
  JSON types stay apart (1 vs "1" vs true; 1 and 1.0 are the same number),
  array order counts, a `Decimal` is a number only when it was parsed from
  a JSON string, and arguments that are not a JSON object (invalid JSON,
  duplicate keys, NaN, a top-level array) are compared as given, with
  their types;
- `role_content_only`: role and content only;
- any callable `(stored, replayed) -> bool`, or a dotted import path
  (`package.module.matcher`) naming one.

No matcher raises on deep or hostile input: nesting past the interpreter's
recursion limit counts as "not the same" (the reference's strict matcher
raises RecursionError there).

Example:
    >>> check_append_only([{"role": "user", "content": "hi"}],
    ...                   [{"role": "user", "content": "hi"}, {"role": "tool", "content": "42"}],
    ...                   allowed_roles={"tool"})
"""

from __future__ import annotations

import functools
import importlib
import inspect
import json
import math
from collections.abc import Callable, Collection
from decimal import Decimal, InvalidOperation
from typing import Any

from tito_fast.errors import AppendOnlyError, MatcherError

Matcher = Callable[[dict[str, Any], dict[str, Any]], bool]

TEMPLATE_KEYS = ("role", "content", "reasoning_content", "tool_calls")
_WIRE_ONLY = ("index",)


def _norm(value: Any) -> Any:
    """None, "" and [] render alike: all of them become None."""
    return None if value is None or value == "" or value == [] else value


def _calls(value: Any) -> Any:
    """Tool calls without their wire-only keys (a projection for comparing, never a repair)."""
    if not isinstance(value, list):
        return value
    return [{k: v for k, v in c.items() if k not in _WIRE_ONLY} if isinstance(c, dict) else c for c in value]


def _field_differs(key: str, a: Any, b: Any) -> bool:
    a, b = _norm(a), _norm(b)
    if key == "tool_calls":
        a, b = _calls(a), _calls(b)
    return bool(a != b)


def _differing_field(stored: dict[str, Any], new: dict[str, Any], keys: Collection[str]) -> str | None:
    """The first of `keys` whose values differ (a field nested too deep to compare counts as differing)."""
    for key in keys:
        try:
            if _field_differs(key, stored.get(key), new.get(key)):
                return key
        except RecursionError:
            return key
    return None


def messages_equal(a: Any, b: Any) -> bool:
    """`a == b`, with nesting too deep to compare counting as not equal."""
    try:
        return a is b or bool(a == b)
    except RecursionError:
        return False


def strict(stored: dict[str, Any], new: dict[str, Any]) -> bool:
    """Role, content, reasoning_content and tool_calls equal (None == "" == [], `index` ignored)."""
    # Equal dicts match under every built-in matcher: one C-level comparison
    # settles the common case before any normalisation.
    return messages_equal(stored, new) or _differing_field(stored, new, TEMPLATE_KEYS) is None


# -- loose_tool_call: JSON-object arguments compared by value ------------------

_NOT_AN_OBJECT = object()


class _NotJson(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _NotJson(f"duplicate key {key!r}")
        out[key] = value
    return out


def _finite_number(text: str) -> Decimal:
    try:
        number = Decimal(text)
    except InvalidOperation as e:
        raise _NotJson(text) from e
    if not number.is_finite():
        raise _NotJson(text)
    return number


def _no_constants(text: str) -> Any:
    raise _NotJson(text)  # NaN, Infinity, -Infinity are not JSON


def _json_form(value: Any, decimals: bool) -> tuple[Any, ...]:
    """A form in which two JSON values are equal exactly when they are the same JSON
    value: types tagged (true is not 1, "1" is not 1), numbers exact (1 == 1.0),
    object keys sorted, array order kept. Raises _NotJson for anything else."""
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
            raise _NotJson("non-finite number")
        return ("num", Decimal(str(value)))
    if t is Decimal:
        if not decimals or not value.is_finite():
            raise _NotJson("a Decimal is a JSON number only when parsed from JSON text")
        return ("num", value)
    if t is list:
        return ("list", tuple(_json_form(v, decimals) for v in value))
    if t is dict:
        if any(type(k) is not str for k in value):
            raise _NotJson("object keys must be strings")
        return ("obj", tuple(sorted((k, _json_form(v, decimals)) for k, v in value.items())))
    raise _NotJson(f"{t.__name__} is not a JSON value")


def _arguments_form(value: Any) -> Any:
    """The JSON-object form of tool-call arguments, or _NOT_AN_OBJECT.

    None and "" are the empty object; a string must parse as one JSON object
    (no duplicate keys, no NaN or Infinity); a dict must hold JSON values.
    """
    if value is None or value == "":
        return ("obj", ())
    parsed = value
    if type(value) is str:
        try:
            parsed = json.loads(
                value, object_pairs_hook=_unique_keys, parse_int=Decimal, parse_float=_finite_number, parse_constant=_no_constants
            )
        except (ValueError, TypeError, OverflowError, RecursionError):
            return _NOT_AN_OBJECT
    if type(parsed) is not dict:
        return _NOT_AN_OBJECT
    try:
        return _json_form(parsed, decimals=type(value) is str)
    except (_NotJson, RecursionError):
        return _NOT_AN_OBJECT


def _same_as_given(a: Any, b: Any) -> bool:
    """Equality that also requires equal types at every level (1 is not 1.0 or True)."""
    try:
        if type(a) is not type(b):
            return False
        if isinstance(a, list):
            return len(a) == len(b) and all(_same_as_given(x, y) for x, y in zip(a, b))
        if isinstance(a, dict):
            return a.keys() == b.keys() and all(_same_as_given(a[k], b[k]) for k in a)
        return bool(a == b)
    except RecursionError:
        return False


def _arguments_match(a: Any, b: Any) -> bool:
    fa, fb = _arguments_form(a), _arguments_form(b)
    if fa is _NOT_AN_OBJECT or fb is _NOT_AN_OBJECT:
        return _same_as_given(a, b)
    return bool(fa == fb)


def _dicts_match(a: Any, b: Any, special: str, match_special: Callable[[Any, Any], bool], drop: tuple[str, ...] = ()) -> bool:
    """Two dicts with the same keys (less `drop`), `special` compared by `match_special`, the rest by `==`."""
    if not isinstance(a, dict) or not isinstance(b, dict):
        return _same_as_given(a, b)
    if drop:
        a = {k: v for k, v in a.items() if k not in drop}
        b = {k: v for k, v in b.items() if k not in drop}
    if a.keys() != b.keys():
        return False
    return all(match_special(a[k], b[k]) if k == special else a[k] == b[k] for k in a)


def _function_match(a: Any, b: Any) -> bool:
    return _dicts_match(a, b, "arguments", _arguments_match)


def _call_match(a: Any, b: Any) -> bool:
    return _dicts_match(a, b, "function", _function_match, drop=_WIRE_ONLY)


def loose_tool_call(stored: dict[str, Any], new: dict[str, Any]) -> bool:
    """`strict`, or equal but for tool-call arguments that are the same JSON object."""
    if strict(stored, new):
        return True
    try:
        if _differing_field(stored, new, ("role", "content", "reasoning_content")) is not None:
            return False
        a, b = _norm(stored.get("tool_calls")), _norm(new.get("tool_calls"))
        if not isinstance(a, list) or not isinstance(b, list):
            return _same_as_given(a, b)
        return len(a) == len(b) and all(_call_match(x, y) for x, y in zip(a, b))
    except RecursionError:
        return False


def role_content_only(stored: dict[str, Any], new: dict[str, Any]) -> bool:
    """Role and content equal (None == "" == []); everything else ignored."""
    return messages_equal(stored, new) or _differing_field(stored, new, ("role", "content")) is None


# -- keys: a message's class under a built-in matcher, for indexing ---------------


class _Tag:
    """A marker no decoded JSON value equals (it keeps a dict's items apart from a list)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name}>"


_DICT, _RAW, _OBJECT = _Tag("dict"), _Tag("raw"), _Tag("json-object")


def _sorted_items(items: Any) -> tuple[tuple[Any, Any], ...]:
    pairs = list(items)
    try:
        pairs.sort(key=lambda kv: kv[0])
    except TypeError:  # keys of mixed types (not from JSON)
        pairs.sort(key=lambda kv: (type(kv[0]).__name__, repr(kv[0])))
    return tuple(pairs)


def _frozen(value: Any) -> Any:
    """Hashable, and equal to another's exactly when the two values are `==`."""
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
    """Hashable, and equal to another's exactly when `_same_as_given` holds (types too)."""
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


def _strict_key(m: dict[str, Any]) -> Any:
    return tuple(_frozen(_calls(_norm(m.get(k))) if k == "tool_calls" else _norm(m.get(k))) for k in TEMPLATE_KEYS)


def _arguments_key(value: Any) -> Any:
    form = _arguments_form(value)
    return (_RAW, _typed(value)) if form is _NOT_AN_OBJECT else (_OBJECT, form)


def _special_key(value: Any, special: str, key: Callable[[Any], Any], drop: tuple[str, ...] = ()) -> Any:
    if not isinstance(value, dict):
        return (_RAW, _typed(value))
    return (_DICT, _sorted_items((k, key(v) if k == special else _frozen(v)) for k, v in value.items() if k not in drop))


def _call_key(c: Any) -> Any:
    return _special_key(c, "function", lambda f: _special_key(f, "arguments", _arguments_key), drop=_WIRE_ONLY)


def _loose_key(m: dict[str, Any]) -> Any:
    calls = _norm(m.get("tool_calls"))
    calls_key = tuple(map(_call_key, calls)) if isinstance(calls, list) else (_RAW, _typed(calls))
    return (*(_frozen(_norm(m.get(k))) for k in ("role", "content", "reasoning_content")), calls_key)


def _role_content_key(m: dict[str, Any]) -> Any:
    return (_frozen(_norm(m.get("role"))), _frozen(_norm(m.get("content"))))


#: Per built-in matcher, a message's key: two messages with equal keys match
#: (so keys can index stored conversations: `tito_fast.chains.matchers`). For
#: `strict` and `role_content_only` equal keys are exactly a match; for
#: `loose_tool_call` they are its JSON-object comparison of arguments, and
#: two messages it accepts only through `strict` (dict arguments equal as
#: Python values but not as JSON, such as true and 1) have different keys.
MESSAGE_KEYS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "strict": _strict_key,
    "loose_tool_call": _loose_key,
    "role_content_only": _role_content_key,
}


def message_key(matcher: str) -> Callable[[Any], Any]:
    """The key function of a built-in matcher (`MESSAGE_KEYS`), for any
    message (one that is not a dict is keyed as it is, type for type)."""
    key = MESSAGE_KEYS[matcher]
    return lambda m: key(m) if type(m) is dict else (_RAW, _typed(m))


MATCHERS: dict[str, Matcher] = {
    "strict": strict,
    "loose_tool_call": loose_tool_call,
    "role_content_only": role_content_only,
}


#: The built-in matchers: trusted to return a bool, and all of them accept equal messages.
BUILTIN: frozenset[Matcher] = frozenset(MATCHERS.values())


def resolve_matcher(matcher: str | Matcher) -> Matcher:
    """A built-in matcher by its exact name, a callable (checked to return a bool on
    use), or a dotted import path naming a synchronous callable."""
    if isinstance(matcher, str):
        if matcher in MATCHERS:
            return MATCHERS[matcher]
        names = ", ".join(MATCHERS)
        if "." not in matcher:
            raise ValueError(f"unknown matcher {matcher!r}; use one of {names}, or a dotted import path such as package.module.matcher")
        module_name, _, attr = matcher.rpartition(".")
        try:
            found = getattr(importlib.import_module(module_name), attr)
        except (ImportError, AttributeError) as e:
            raise ValueError(
                f"failed to resolve --session-message-matcher {matcher!r} (the matcher); use one of {names}, or a dotted import path: {e}"
            ) from e
        if not callable(found) or inspect.iscoroutinefunction(found):
            raise ValueError(f"failed to resolve --session-message-matcher {matcher!r} (the matcher): it is not a synchronous callable")
        return found  # type: ignore[no-any-return]
    if not callable(matcher):
        raise TypeError(f"matcher must be a name or a callable, got {type(matcher).__name__}")
    return matcher


def call_matcher(matcher: Matcher, stored: dict[str, Any], new: dict[str, Any]) -> bool:
    """`matcher(stored, new)`; a custom matcher that raises or returns a non-bool raises `MatcherError`."""
    if matcher in BUILTIN:
        return matcher(stored, new)
    return _checked(matcher, stored, new)


def validated_matcher(matcher: Matcher) -> Matcher:
    """`matcher` wrapped so that it raises `MatcherError` when it raises or returns
    something other than a bool (the matcher itself stays reachable as `__wrapped__`).

    Example:
        >>> validated_matcher(lambda s, n: 1)({}, {})
        Traceback (most recent call last):
        ...
        tito_fast.errors.MatcherError: the message matcher must return bool, got int (a matcher must return a bool)
    """

    @functools.wraps(matcher)
    def validated(stored: dict[str, Any], new: dict[str, Any]) -> bool:
        return _checked(matcher, stored, new)

    return validated


def _checked(matcher: Matcher, stored: dict[str, Any], new: dict[str, Any]) -> bool:
    try:
        result = matcher(stored, new)
    except Exception as e:
        raise MatcherError(f"the message matcher raised an exception: it raised {type(e).__name__}: {e}") from e
    if type(result) is not bool:
        raise MatcherError(f"the message matcher must return bool, got {type(result).__name__} (a matcher must return a bool)")
    return result


def check_roles(stored_len: int, new: list[dict[str, Any]], allowed_roles: Collection[str] | None) -> None:
    """`AppendOnlyError` unless every message of `new` after `stored_len` has an allowed role."""
    if allowed_roles is None:
        return
    for i in range(stored_len, len(new)):
        role = new[i].get("role")
        if role not in allowed_roles:
            raise AppendOnlyError(
                f"appended message at index {i} has role={role!r}, allowed={sorted(allowed_roles)}: message {i} "
                f"appends role {role!r}, which this family cannot render append-only",
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
    With nothing stored there is nothing to check (as in the reference).

    Example:
        >>> check_append_only([{"role": "user", "content": "a"}], [{"role": "user", "content": "b"}])
        Traceback (most recent call last):
        ...
        tito_fast.errors.AppendOnlyError: message mismatch at index 0 (role: stored=user, new=user): message 0 differs from the stored one in 'content': stored 'a', new 'b'
    """
    match = resolve_matcher(matcher)
    if not stored:
        return
    if len(new) < len(stored):
        raise AppendOnlyError(
            f"new messages ({len(new)}) are fewer than stored messages ({len(stored)}): "
            f"the new request has {len(new)} messages but {len(stored)} are stored, so messages were removed",
            index=len(new),
            field="length",
        )
    for i, (s, n) in enumerate(zip(stored, new)):
        if not call_matcher(match, s, n):
            keys = TEMPLATE_KEYS if match is not role_content_only else ("role", "content")
            field = _differing_field(s, n, keys) or "tool_calls"
            raise AppendOnlyError(
                f"message mismatch at index {i} (role: stored={_get(s, 'role')}, new={_get(n, 'role')}): "
                f"message {i} differs from the stored one in {field!r}: "
                f"stored {_short(_get(s, field))}, new {_short(_get(n, field))}",
                index=i,
                field=field,
                stored=s,
                new=n,
            )
    check_roles(len(stored), new, allowed_roles)


def _get(message: Any, key: str) -> Any:
    return message.get(key) if isinstance(message, dict) else None


def _short(value: Any, limit: int = 80) -> str:
    try:
        text = repr(value)
    except RecursionError:
        return "<nested too deep to show>"
    return text if len(text) <= limit else text[: limit - 3] + "..."

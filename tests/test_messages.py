"""Message matchers and the append-only check, as reference-semantics.md states them."""

from __future__ import annotations

import pytest

from tito_fast.messages import AppendOnlyError, MatcherError, check_append_only, loose_tool_call, role_content_only, strict


def _call(args: object, index: int | None = None) -> dict[str, object]:
    call: dict[str, object] = {"id": "c0", "type": "function", "function": {"name": "f", "arguments": args}}
    if index is not None:
        call["index"] = index
    return call


def test_strict() -> None:
    a = {"role": "assistant", "content": "x", "reasoning_content": None, "tool_calls": [_call('{"a": 1}', 0)]}
    assert strict(a, {**a, "reasoning_content": "", "tool_calls": [_call('{"a": 1}')], "extra": 1})
    assert strict({"role": "assistant", "content": None}, {"role": "assistant", "content": "", "tool_calls": []})
    assert not strict(a, {**a, "content": "x "})
    assert not strict(a, {**a, "tool_calls": [_call('{"a":1}')]})  # other spelling: strict says no


def test_loose_tool_call() -> None:
    a = {"role": "assistant", "content": "", "tool_calls": [_call('{"a": 1, "b": [true, "x"]}')]}
    assert loose_tool_call(a, {**a, "tool_calls": [_call('{"b":[true,"x"],"a":1}')]})
    assert loose_tool_call(a, {**a, "tool_calls": [_call({"a": 1, "b": [True, "x"]})]})
    assert loose_tool_call(a, {**a, "tool_calls": [_call({"a": 1.0, "b": [True, "x"]})]})  # same JSON number
    assert not loose_tool_call(a, {**a, "tool_calls": [_call({"a": "1", "b": [True, "x"]})]})
    assert not loose_tool_call(a, {**a, "tool_calls": [_call({"a": True, "b": [True, "x"]})]})
    assert not loose_tool_call(a, {**a, "tool_calls": [_call('{"a": 1, "a": 1, "b": [true, "x"]}')]})  # duplicate key
    assert not loose_tool_call(a, {**a, "content": "y", "tool_calls": [_call({"a": 1, "b": [True, "x"]})]})
    assert loose_tool_call({"role": "user", "content": "a"}, {"role": "user", "content": "a"})


def test_role_content_only() -> None:
    assert role_content_only({"role": "assistant", "content": "x", "tool_calls": [1]}, {"role": "assistant", "content": "x"})
    assert not role_content_only({"role": "assistant", "content": "x"}, {"role": "user", "content": "x"})


def test_check_append_only() -> None:
    old = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo", "reasoning_content": "r"}]
    check_append_only(old, old + [{"role": "tool", "content": "1"}], {"tool"})
    with pytest.raises(AppendOnlyError, match="message 1 differs from the stored one in 'reasoning_content'") as e:
        check_append_only(old, [old[0], {"role": "assistant", "content": "yo"}])
    assert (e.value.index, e.value.field) == (1, "reasoning_content")
    check_append_only(old, [old[0], {"role": "assistant", "content": "yo"}], matcher="role_content_only")
    with pytest.raises(AppendOnlyError, match="appends role 'user'"):
        check_append_only(old, old + [{"role": "user", "content": "x"}], {"tool"})
    with pytest.raises(AppendOnlyError, match="removed"):
        check_append_only(old, old[:1])
    check_append_only(old, old, matcher=lambda s, n: s["role"] == n["role"])
    with pytest.raises(MatcherError, match="must return a bool"):
        check_append_only(old, old, matcher=lambda s, n: 1)  # type: ignore[arg-type, return-value]
    with pytest.raises(MatcherError, match="raised KeyError"):
        check_append_only(old, old, matcher=lambda s, n: s["nope"] == 1)
    with pytest.raises(ValueError, match="unknown matcher"):
        check_append_only(old, old, matcher="fuzzy")

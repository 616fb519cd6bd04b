"""Message matchers and the append-only check, as reference-semantics.md states them."""

from __future__ import annotations

from typing import Any

import pytest

from tito_fast.chat.messages import check_append_only, loose_tool_call, role_content_only, strict
from tito_fast.errors import AppendOnlyError, MatcherError


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


# -- The reference's matcher semantics, case by case (Miles' matcher hub tests, as behaviours) --

_ABSENT = object()


def _asst(arguments: object = _ABSENT, *, calls: list[Any] | None = None, **extra: object) -> dict[str, Any]:
    function: dict[str, object] = {"name": "lookup"}
    if arguments is not _ABSENT:
        function["arguments"] = arguments
    msg: dict[str, Any] = {"role": "assistant", "content": "", "tool_calls": calls if calls is not None else [{"id": "A", "type": "function", "function": function}]}
    msg.update(extra)
    return msg


@pytest.mark.parametrize(("a", "b"), [(None, ""), ("", {}), ({}, "{}"), ("{}", "{ }")])
def test_loose_empty_argument_spellings_are_one_object(a: object, b: object) -> None:
    assert not strict(_asst(a), _asst(b))
    assert loose_tool_call(_asst(a), _asst(b))


@pytest.mark.parametrize("empty", [None, "", {}, "{}"])
def test_loose_missing_arguments_are_not_the_empty_object(empty: object) -> None:
    assert not loose_tool_call(_asst(), _asst(empty))


def test_loose_nested_objects_numbers_and_escapes() -> None:
    stored = _asst('{"outer":{"b":2,"a":[1,{"text":"\\u00e9"}]},"number":1e0}')
    assert loose_tool_call(stored, _asst({"number": 1.0, "outer": {"a": [1.0, {"text": "é"}], "b": 2}}))
    assert loose_tool_call(_asst('{"v":1e999}'), _asst('{"v":10e998}'))  # large finite numbers stay exact


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ('{"v":true}', '{"v":1}'),
        ('{"v":null}', '{"v":"null"}'),
        ('{"v":[1,2]}', '{"v":[2,1]}'),
        ('{"v":{"x":1}}', '{"v":[["x",1]]}'),
        ('{"v":1}', '{"v":2}'),
    ],
)
def test_loose_keeps_types_values_and_array_order(a: str, b: str) -> None:
    assert not loose_tool_call(_asst(a), _asst(b))
    assert role_content_only(_asst(a), _asst(b))


@pytest.mark.parametrize(
    ("a", "b"),
    [
        (" ", "{}"),
        ("{invalid}", "{ invalid }"),
        ('{"x":1,"x":2}', '{"x":1, "x":2}'),
        ('{"x":NaN}', '{"x": NaN}'),
        ('{"x":Infinity}', '{"x": Infinity}'),
        ('{"x":-Infinity}', '{"x": -Infinity}'),
        ("[]", "[ ]"),
        ("1", "1.0"),
        ({"bad": {1, 2}}, {"bad": {2, 3}}),
        ({1: "v"}, {"1": "v"}),
    ],
)
def test_loose_non_object_arguments_compare_as_given(a: object, b: object) -> None:
    assert not loose_tool_call(_asst(a), _asst(b))


def test_loose_as_given_comparison_keeps_types() -> None:
    assert loose_tool_call(_asst({"s": {1, 2}}), _asst({"s": {2, 1}}))  # not JSON, but the same value and type
    assert not loose_tool_call(_asst([1, 2]), _asst((1, 2)))  # a list is not a tuple


def test_loose_decimal_is_a_number_only_when_parsed() -> None:
    from decimal import Decimal

    assert not loose_tool_call(_asst('{"v":1}'), _asst({"v": Decimal("1")}))
    assert loose_tool_call(_asst('{"v":1}'), _asst({"v": 1}))


def test_loose_still_compares_call_identity_extra_fields_count_and_order() -> None:
    base = _asst('{"x":1}')
    call = base["tool_calls"][0]
    for path, value in [(("id",), "B"), (("type",), "other"), (("function", "name"), "other"), (("provider",), "p")]:
        other = _asst({"x": 1})
        target = other["tool_calls"][0]
        if len(path) == 1:
            target[path[0]] = value
        else:
            target[path[0]][path[1]] = value
        assert not loose_tool_call(base, other), path
    assert call["id"] == "A"
    first = {"id": "A", "type": "function", "function": {"name": "f", "arguments": '{"x":1}'}}
    second = {"id": "B", "type": "function", "function": {"name": "g", "arguments": '{"x":2}'}}
    assert not loose_tool_call(_asst(calls=[first, second]), _asst(calls=[second, first]))
    assert not loose_tool_call(_asst(calls=[first, second]), _asst(calls=[first]))
    assert not loose_tool_call(_asst('{"x":1}', reasoning_content="kept"), _asst({"x": 1}))


def test_role_content_only_ignores_everything_else() -> None:
    empties: tuple[object, ...] = (None, "", [])
    for empty_a in empties:
        for empty_b in empties:
            assert role_content_only({"role": "user", "content": empty_a}, {"role": "user", "content": empty_b})
    assert not role_content_only({"role": "user", "content": "é"}, {"role": "user", "content": "e\u0301"})
    assert role_content_only(_asst('{"x":1}', reasoning_content="r", name="n"), {"role": "assistant", "content": None, "tool_calls": "junk"})


def test_deep_arguments_never_raise() -> None:
    import sys

    deep_a = '{"x":' + "[" * 2000 + "0" + "]" * 2000 + "}"
    deep_b = '{"x": ' + "[" * 2000 + "0" + "]" * 2000 + "}"
    nested: object = 0
    for _ in range(5000):
        nested = [nested]
    old = sys.getrecursionlimit()
    try:
        sys.setrecursionlimit(500)
        assert loose_tool_call(_asst(deep_a), _asst(deep_b)) is False
        assert loose_tool_call(_asst({"x": nested}), _asst({"x": [nested]})) is False
        assert strict(_asst({"x": nested}), _asst({"x": [nested]})) is False
        with pytest.raises(AppendOnlyError, match="message mismatch at index 0"):
            check_append_only([_asst({"x": nested})], [_asst({"x": [nested]})], matcher="loose_tool_call")
    finally:
        sys.setrecursionlimit(old)


def test_reference_error_phrases() -> None:
    stored = [_asst('{"city":"Paris"}')]
    replayed = [_asst({"city": "Paris"}), {"role": "tool", "content": "ok"}]
    with pytest.raises(AppendOnlyError, match="message mismatch at index 0"):
        check_append_only(stored, replayed, {"tool"})
    check_append_only(stored, replayed, {"tool"}, matcher="loose_tool_call")
    with pytest.raises(AppendOnlyError, match=r"appended message at index 1 has role='system', allowed=\['tool'\]"):
        check_append_only(stored, [replayed[0], {"role": "system", "content": "x"}], {"tool"}, matcher="loose_tool_call")
    with pytest.raises(AppendOnlyError, match="fewer"):
        check_append_only(stored + stored, stored)
    with pytest.raises(MatcherError, match="raised an exception"):
        check_append_only(stored, stored, matcher=lambda s, n: 1 / 0 > 0)
    with pytest.raises(MatcherError, match="must return bool, got int"):
        check_append_only(stored, stored, matcher=lambda s, n: 1)  # type: ignore[arg-type, return-value]
    check_append_only([], [{"role": "system", "content": "x"}], {"tool"})  # nothing stored: nothing to check


@pytest.mark.parametrize("name", ["Strict", "LOOSE_TOOL_CALL", "role-content-only"])
def test_matcher_names_are_exact(name: str) -> None:
    with pytest.raises(ValueError, match="strict.*loose_tool_call.*role_content_only"):
        check_append_only([], [], matcher=name)


def test_matcher_by_dotted_path() -> None:
    import operator

    msgs = [{"role": "user", "content": "a"}]
    check_append_only(msgs, list(msgs), matcher="operator.eq")
    assert operator.eq(msgs[0], msgs[0])
    for bad in ("missing_package.matcher", "operator.missing_matcher", "json.decoder.WHITESPACE", "asyncio.sleep"):
        with pytest.raises(ValueError, match="failed to resolve --session-message-matcher"):  # Miles' words
            check_append_only(msgs, msgs, matcher=bad)


def test_matchers_nest_and_do_not_mutate() -> None:
    import copy

    samples: list[dict[str, Any]] = [
        {"role": "user", "content": "same"},
        {"role": "user", "content": "different"},
        _asst('{"x":1}', reasoning_content=None),
        _asst({"x": 1}),
        _asst('{"x":2}', reasoning_content="changed"),
        {"role": "assistant", "content": "", "tool_calls": "malformed"},
    ]
    before = copy.deepcopy(samples)
    for a in samples:
        for b in samples:
            s, lo, rc = strict(a, b), loose_tool_call(a, b), role_content_only(a, b)
            assert (not s or lo) and (not lo or rc)
    assert samples == before

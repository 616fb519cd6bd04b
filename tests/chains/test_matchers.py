"""Message-level matching (`tito_fast.chains.matchers`): Miles' session
matchers on message shapes, the hints a session's calls get, and
`assemble(matcher=...)` classifying a call whose harness re-serialised tool
arguments against its own conversation's chain, the ids still the ground truth."""

from __future__ import annotations

import json
import random
import time
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tito_fast import assemble
from tito_fast.chains import Call
from tito_fast.chains.matchers import (
    MATCHERS,
    extends,
    loose_tool_call,
    message_hints,
    parse_message_texts,
    response_message,
    role_content_only,
    strict,
)
from tito_fast.chat.messages import MESSAGE_KEYS
from tito_fast.chat.messages import loose_tool_call as loose_tool_call_message
from tito_fast.chat.messages import role_content_only as role_content_only_message
from tito_fast.chat.messages import strict as strict_message
from tito_fast.testing import assemble_reference as ref

USER = {"role": "user", "content": "q"}


def _assistant(args: Any, *, content: Any = "", reasoning: Any = None, call_id: str = "call-A", **extra: Any) -> dict[str, Any]:
    msg: dict[str, Any] = {
        "role": "assistant",
        "content": content,
        "tool_calls": [{"id": call_id, "type": "function", "function": {"name": "lookup", "arguments": args}, **extra}],
    }
    if reasoning is not None:
        msg["reasoning_content"] = reasoning
    return msg


STORED = _assistant('{"city":"Paris","units":"metric"}')
RESERIALISED = _assistant('{"units": "metric", "city": "Paris"}')  # same object, other key order and spacing
AS_DICT = _assistant({"units": "metric", "city": "Paris"})
TOOL = {"role": "tool", "content": "ok", "tool_call_id": "call-A"}


# ---------------------------------------------------------------- single messages


def test_identical_messages_match_under_every_matcher() -> None:
    for m in (USER, STORED, TOOL, {"role": "assistant", "content": "x", "reasoning_content": "r"}):
        assert strict_message(m, dict(m)) and loose_tool_call_message(m, dict(m)) and role_content_only_message(m, dict(m))


def test_reserialised_arguments_match_loose_not_strict() -> None:
    for replay in (RESERIALISED, AS_DICT, _assistant('{ "city" : "Paris" ,\n "units":"metric" }')):
        assert not strict_message(STORED, replay)
        assert loose_tool_call_message(STORED, replay)
        assert role_content_only_message(STORED, replay)


def test_loose_compares_the_json_object_not_just_its_spelling() -> None:
    assert not loose_tool_call_message(STORED, _assistant('{"city":"Lyon","units":"metric"}'))  # another value
    assert not loose_tool_call_message(STORED, _assistant('{"city":"Paris"}'))  # a key missing
    assert not loose_tool_call_message(_assistant('{"n": 1}'), _assistant('{"n": true}'))  # true is not 1
    assert not loose_tool_call_message(_assistant('{"n": 1}'), _assistant('{"n": "1"}'))
    assert loose_tool_call_message(_assistant('{"n": 1}'), _assistant('{"n": 1.0}'))  # the same number
    assert loose_tool_call_message(_assistant('{"a": [1, 2]}'), _assistant({"a": [1, 2]}))
    assert not loose_tool_call_message(_assistant('{"a": [1, 2]}'), _assistant('{"a": [2, 1]}'))  # arrays keep order
    assert not loose_tool_call_message(_assistant('{"a": 1, "a": 1}'), _assistant('{"a": 1}'))  # a duplicate key is no object
    assert loose_tool_call_message(_assistant(None), _assistant("{}"))  # None, "" and {} are the empty object
    assert loose_tool_call_message(_assistant(""), _assistant({}))
    assert not loose_tool_call_message(_assistant("[1]"), _assistant("[ 1 ]"))  # not an object: compared as text
    assert loose_tool_call_message(_assistant("not json"), _assistant("not json"))
    assert not loose_tool_call_message(_assistant('{"x": NaN}'), _assistant('{"x":NaN}'))


def test_loose_still_compares_everything_else_of_a_tool_call() -> None:
    assert not loose_tool_call_message(STORED, _assistant('{"units": "metric", "city": "Paris"}', call_id="call-B"))
    other_name = json.loads(json.dumps(RESERIALISED))
    other_name["tool_calls"][0]["function"]["name"] = "search"
    assert not loose_tool_call_message(STORED, other_name)
    extra_key = _assistant('{"units": "metric", "city": "Paris"}', provider="x")
    assert not loose_tool_call_message(STORED, extra_key)  # an unknown key of the call is compared
    assert loose_tool_call_message(STORED, _assistant('{"units": "metric", "city": "Paris"}', index=3))  # `index` is wire-only
    assert strict_message(STORED, _assistant('{"city":"Paris","units":"metric"}', index=0))


def test_content_and_reasoning() -> None:
    assert not strict_message(STORED, _assistant('{"city":"Paris","units":"metric"}', content="hi"))
    assert not loose_tool_call_message(RESERIALISED, _assistant('{"city":"Paris","units":"metric"}', content="hi"))
    # empty values alike: None, "" and [] (content null vs "" for a tool-call-only reply, tool_calls null vs [])
    assert strict_message({"role": "assistant", "content": None}, {"role": "assistant", "content": "", "tool_calls": []})
    assert not strict_message({"role": "user", "content": "a\n"}, {"role": "user", "content": "a"})  # whitespace counts
    with_reasoning = _assistant('{"city":"Paris","units":"metric"}', reasoning="think")
    assert not strict_message(STORED, with_reasoning)
    assert not loose_tool_call_message(RESERIALISED, with_reasoning)  # reasoning is compared
    assert role_content_only_message(STORED, with_reasoning)  # ... and ignored here
    assert role_content_only_message(STORED, {"role": "assistant", "content": None, "reasoning_content": None})  # calls dropped
    assert not role_content_only_message(STORED, {"role": "user", "content": ""})


def test_fields_no_template_reads_are_ignored() -> None:
    assert strict_message(TOOL, {"role": "tool", "content": "ok", "tool_call_id": "other", "provider_specific_fields": {}})
    assert strict_message({"role": "user", "content": "q"}, {"role": "user", "content": "q", "name": "bob"})


def test_several_tool_calls_match_one_by_one_in_order() -> None:
    a = {"id": "1", "type": "function", "function": {"name": "f", "arguments": '{"x":1}'}}
    b = {"id": "2", "type": "function", "function": {"name": "g", "arguments": '{"y":2,"z":3}'}}
    stored = {"role": "assistant", "content": None, "tool_calls": [a, b]}
    b2 = {**b, "function": {"name": "g", "arguments": '{"z": 3, "y": 2}'}}
    assert loose_tool_call_message(stored, {"role": "assistant", "content": "", "tool_calls": [a, b2]})
    assert not strict_message(stored, {"role": "assistant", "tool_calls": [a, b2]})
    assert not loose_tool_call_message(stored, {"role": "assistant", "tool_calls": [b2, a]})  # order counts
    assert not loose_tool_call_message(stored, {"role": "assistant", "tool_calls": [a]})


def test_conversations() -> None:
    stored = [USER, STORED]
    assert not strict(stored, [USER, RESERIALISED, TOOL])
    assert loose_tool_call(stored, [USER, RESERIALISED, TOOL])
    assert role_content_only(stored, [USER, RESERIALISED, TOOL])
    assert strict(stored, stored) and strict([], [USER])
    assert not loose_tool_call(stored, [USER])  # shorter: it does not extend
    assert not loose_tool_call(stored, [{"role": "user", "content": "other"}, RESERIALISED])
    with pytest.raises(ValueError, match="matcher must be one of"):
        extends(stored, stored, "exact")


def test_response_message_shapes() -> None:
    msg = {"role": "assistant", "content": "hi"}
    assert response_message(msg) == msg
    assert response_message({"choices": [{"message": {"content": "hi"}}]}) == msg
    assert response_message(json.dumps(msg)) == msg  # JSON text, as in a Parquet text column
    assert response_message("hi") == msg  # plain text: the assistant's content
    assert response_message(None) is None and response_message(3) is None


# ---------------------------------------------------------------- hints


def test_hints_longest_then_latest() -> None:
    sys = {"role": "system", "content": "s"}
    calls = [
        ([sys, USER], STORED),  # 0
        ([sys, USER], _assistant('{"city":"Rome"}')),  # 1: a retry of 0, another reply
        ([sys, USER, RESERIALISED, TOOL], {"role": "assistant", "content": "done"}),  # 2: extends 0, re-serialised
        (None, None),  # 3: no messages
        ([sys, USER, RESERIALISED, TOOL, {"role": "assistant", "content": "done"}, USER], None),  # 4: extends 2
        ([sys, USER], None),  # 5: extends none (no conversation ends at [sys, USER])
        ([sys, USER], None),  # 6: 5's conversation (no response): the latest
        ([{"role": "system", "content": "sub-agent"}], None),  # 7
    ]
    assert message_hints(calls, "loose_tool_call") == [-1, -1, 0, -1, 2, -1, 5, -1]
    assert message_hints(calls, "strict") == [-1, -1, -1, -1, 2, -1, 5, -1]
    # role and content only: 2's reply content "" matches 0's and 1's: the latest of the two
    assert message_hints(calls, "role_content_only") == [-1, -1, 1, -1, 2, -1, 5, -1]
    as_calls = [Call("s", np.zeros(1, np.uint32), np.zeros(0, np.uint32), messages=m, response=r) for m, r in calls]
    assert message_hints(as_calls, "loose_tool_call") == message_hints(calls, "loose_tool_call")
    with pytest.raises(ValueError, match="matcher"):
        message_hints(calls, "nope")


def _variants(rng: random.Random) -> dict[str, Any]:
    args = rng.choice(['{"a":1,"b":[1,2]}', '{"b": [1, 2], "a": 1}', {"a": 1, "b": [1, 2]}, '{"a": 1.0, "b": [1,2]}', '{"a": true}', "", None, "{}", "bad"])
    msg: dict[str, Any] = {"role": rng.choice(["assistant", "user"]), "content": rng.choice(["", None, "x", "y"])}
    if rng.random() < 0.4:
        msg["reasoning_content"] = rng.choice([None, "", "r"])
    if rng.random() < 0.7:
        call: dict[str, Any] = {"id": rng.choice(["1", "2"]), "type": "function", "function": {"name": "f", "arguments": args}}
        if rng.random() < 0.3:
            call["index"] = rng.randrange(2)
        msg["tool_calls"] = rng.choice([[call], [call, call], [], None])
    return msg


def test_hints_agree_with_the_pairwise_matchers() -> None:
    """The one-pass hints equal a plain search with the pairwise matchers."""
    rng = random.Random(5)
    for _ in range(60):
        pool = [_variants(rng) for _ in range(4)]
        calls: list[tuple[list[dict[str, Any]], dict[str, Any] | None]] = []
        for _ in range(8):
            msgs = [rng.choice(pool) for _ in range(rng.randrange(1, 4))]
            calls.append((msgs, rng.choice([None, rng.choice(pool)])))
        for matcher in MATCHERS:
            want = []
            for i, (msgs, _) in enumerate(calls):
                best, depth = -1, -1
                for j in range(i):
                    stored, reply = calls[j]
                    conv = stored + ([reply] if reply is not None else [])
                    if extends(conv, msgs, matcher) and len(conv) >= depth:
                        best, depth = j, len(conv)
                want.append(best)
            assert message_hints(calls, matcher) == want, (matcher, calls)


# ---------------------------------------------------------------- assemble


def _ids(text: str) -> list[int]:
    return [ord(ch) for ch in text]


def _render(m: dict[str, Any]) -> str:
    calls = "".join(
        f"[{c['function']['name']}:{c['function']['arguments'] if isinstance(c['function']['arguments'], str) else json.dumps(c['function']['arguments'])}]"
        for c in m.get("tool_calls") or []
    )
    return f"<{m['role']}>{calls}{m.get('content') or ''}</>"


def _prompt(messages: list[dict[str, Any]]) -> list[int]:
    return _ids("".join(map(_render, messages)) + "<assistant>")


def _completion(reply: dict[str, Any]) -> list[int]:
    return _ids(_render(reply)[len("<assistant>") :])


def _reserialising_session() -> list[dict[str, Any]]:
    """Call 0 asks for a tool; call 1 retries it and gets another call of the
    tool; the harness goes on from call 0's reply, re-serialising its
    arguments (call 2): the ids depart inside call 0's completion, and share
    more with call 1's chain than with call 0's."""
    history = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "Run it."}]
    a = _assistant('{"cmd":"ls","t":1}', content="running the listing now")
    b = _assistant('{"t": 1, "cmd": "pwd"}', content="running the listing now")
    replay = _assistant('{"t": 1, "cmd": "ls"}', content="running the listing now")  # a, re-serialised
    after = [*history, replay, {"role": "tool", "content": "file.txt", "tool_call_id": "call-A"}]
    final = {"role": "assistant", "content": "There is one file."}
    rows = []
    for k, (msgs, reply) in enumerate([(history, a), (history, b), (after, final), ([*after, final, USER], final)]):
        completion = _completion(reply)
        rows.append({
            "session_id": "s", "call_index": k, "prompt_ids": _prompt(msgs), "completion_ids": completion,
            "completion_logprobs": [-0.5] * len(completion), "messages": msgs, "response": reply,
        })  # fmt: skip
    return rows


def _check(a: Any, rows: list[dict[str, Any]]) -> None:
    chains = a.sessions["s"]
    out = {
        "chains": [{"ids": c.ids.tolist(), "loss": c.loss_mask.tolist(), "logprobs": c.logprobs.tolist(), "calls": c.call_index.tolist()} for c in chains],
        "events": [e.to_dict() for e in a.events],
    }
    ref.check_invariant([(r["prompt_ids"], r["completion_ids"], r["completion_logprobs"]) for r in rows], out)
    s = a.summary
    assert s.delivered_ids + sum(s.masked_by_cause.values()) + sum(s.dropped_by_cause.values()) == s.sampled_ids


def _events(a: Any) -> list[tuple[int, str, int | None, int]]:
    return [(e.call_index, e.kind, e.chain, e.position) for e in a.events if e.kind != "extend"]


def test_a_reserialised_replay_is_classified_against_its_own_conversation() -> None:
    rows = _reserialising_session()
    chain0 = rows[0]["prompt_ids"] + rows[0]["completion_ids"]
    chain1 = rows[1]["prompt_ids"] + rows[1]["completion_ids"]
    p2 = rows[2]["prompt_ids"]
    lcp0 = next(i for i, (x, y) in enumerate(zip(chain0, p2)) if x != y)
    lcp1 = next(i for i, (x, y) in enumerate(zip(chain1, p2)) if x != y)
    assert len(rows[0]["prompt_ids"]) < lcp0 < lcp1  # departs inside call 0's completion; call 1's chain shares more

    plain = assemble(rows)
    assert _events(plain) == [(1, "rollback", 0, len(rows[1]["prompt_ids"])), (2, "rewrite", 1, lcp1)]
    assert _events(assemble(rows, matcher="strict")) == _events(plain)  # strict: the re-serialised message differs
    # role and content only: calls 0 and 1 replied with the same content, so the hint is the latest (call 1)
    assert _events(assemble(rows, matcher="role_content_only")) == _events(plain)
    a = assemble(rows, matcher="loose_tool_call")
    assert _events(a) == [(1, "rollback", 0, len(rows[1]["prompt_ids"])), (2, "rewrite", 0, lcp0)]
    chains = a.sessions["s"]
    forked = next(c for c in chains if 2 in c.call_index.tolist())
    assert forked.parent == 0 and forked.shared == lcp0  # branches off its own conversation's chain
    assert 3 in forked.call_index.tolist()  # call 3 extends it, by its ids
    _check(a, rows)
    _check(plain, rows)
    # the ids stay the ground truth: every id the same, with or without hints
    a = assemble(rows, matcher="loose_tool_call")
    assert sorted(c.ids.tolist() for c in a.chains()) == sorted(c.ids.tolist() for c in plain.chains())
    assert a.summary.delivered_ids == plain.summary.delivered_ids


def test_matcher_on_arrow_and_parquet_input(tmp_path: Any) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = _reserialising_session()
    text_rows = [{**r, "messages": json.dumps(r["messages"]), "response": json.dumps(r["response"])} for r in rows]
    table = pa.Table.from_pylist(text_rows[::-1])  # rows out of order: the hints name rows, not places
    path = tmp_path / "calls.parquet"
    pq.write_table(table, path)
    want = _events(assemble(rows, matcher="loose_tool_call"))
    for source in (table, path):
        assert _events(assemble(source, matcher="loose_tool_call")) == want
        assert _events(assemble(source)) == _events(assemble(rows))


def test_matcher_is_checked() -> None:
    with pytest.raises(ValueError, match="matcher must be one of strict, loose_tool_call, role_content_only"):
        assemble(_reserialising_session(), matcher="loose")


def test_cli_matcher(tmp_path: Any, capsys: Any) -> None:
    from tito_fast.cli.main import cli

    path = tmp_path / "calls.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in _reserialising_session()))
    out = tmp_path / "summary.json"
    assert cli("assemble", str(path), "--matcher", "loose_tool_call", "--json", str(out), "--quiet") == 0
    events = [e for e in json.loads(out.read_text())["events"] if e["kind"] == "rewrite"]
    assert [(e["call_index"], e["chain"]) for e in events] == [(2, 0)]


def test_hints_cost() -> None:
    """Hints for sessions of 50 calls, each replaying its history as JSON text, stay linear: well under a second here."""
    rng = random.Random(0)
    sessions = []
    for _ in range(40):
        msgs: list[dict[str, Any]] = [{"role": "system", "content": "s"}, {"role": "user", "content": "task " + str(rng.random())}]
        texts, replies = [], []
        for k in range(50):
            reply = _assistant(json.dumps({"cmd": f"step {k}", "t": k}), content=f"step {k}", call_id=f"c{k}")
            texts.append(json.dumps(msgs))
            replies.append(json.dumps(reply))
            msgs = [*msgs, reply, {"role": "tool", "content": "out " * 20, "tool_call_id": f"c{k}"}]
        sessions.append((texts, replies))
    start = time.perf_counter()
    for texts, replies in sessions:
        hints = message_hints(list(zip(parse_message_texts(texts), replies)), "loose_tool_call")
        assert hints == [-1, *range(49)]
    assert time.perf_counter() - start < 2.0


def test_parse_message_texts_reads_appended_history_once() -> None:
    h1 = [{"role": "user", "content": "a"}]
    h2 = [*h1, {"role": "assistant", "content": "b"}, {"role": "tool", "content": "[1, 2]"}]
    texts = [json.dumps(h1), json.dumps(h2), json.dumps(h2), None, json.dumps(h2, indent=1), json.dumps([]), json.dumps(h1).encode()]
    got = parse_message_texts(texts)
    assert got == [h1, h2, h2, None, h2, [], h1]
    assert got[1][0] is got[0][0] and got[2] is got[1]  # appended: the earlier messages are the same objects
    assert parse_message_texts(['[{"a": 1}]', '[{"a": 12}]', '[{"a": 1}, 2]']) == [[{"a": 1}], [{"a": 12}], [{"a": 1}, 2]]


_PREDICATES = {"strict": strict_message, "loose_tool_call": loose_tool_call_message, "role_content_only": role_content_only_message}
_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 3) | st.sampled_from([0.0, 1.0, 2.5]) | st.sampled_from(["", "a", "1", '{"x": 1}', '{ "x":1 }']),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from(["x", "y"]), inner, max_size=2),
    max_leaves=6,
)
_MESSAGES = st.fixed_dictionaries(
    {"role": st.sampled_from(["assistant", "user", ""])},
    optional={
        "content": _VALUES,
        "reasoning_content": _VALUES,
        "tool_calls": st.none() | st.lists(
            st.fixed_dictionaries({"id": st.sampled_from(["a", "b"]), "function": st.fixed_dictionaries(
                {"name": st.sampled_from(["f", "g"])}, optional={"arguments": _VALUES})}, optional={"index": st.integers(0, 2)}),
            max_size=2,
        ),
    },
)  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(a=_MESSAGES, b=_MESSAGES, matcher=st.sampled_from(sorted(MESSAGE_KEYS)))
def test_equal_keys_are_a_match_of_the_one_matcher(a: dict[str, Any], b: dict[str, Any], matcher: str) -> None:
    """The keys the hints index by are `chat.messages`' and agree with its
    matchers: equal keys always match; for strict and role_content_only a
    match always has equal keys."""
    key = MESSAGE_KEYS[matcher]
    same = _PREDICATES[matcher](a, b)
    if key(a) == key(b):
        assert same
    elif matcher != "loose_tool_call":
        assert not same

"""diagnose(): role, message index and kind of each difference, on real tokenizers."""

from __future__ import annotations

import copy
import difflib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.compare.test_comparator_parity import ASSISTANT_START, _tokenizer
from tito_fast import TokenSeqComparator
from tito_fast.compare.diagnosis import RoleScheme, classify, sequence_opcodes

MESSAGES = [
    {"role": "system", "content": "You are a careful agent."},
    {"role": "user", "content": "List the files, then read main.rs."},
    {"role": "assistant", "content": "I will list the files first.  Then read."},
    {"role": "user", "content": "Go on."},
]
FAMILIES = ["qwen3", "glm47", "minimax_m27", "deepseek_v3", "llama31"]


def _ids(family: str, messages: list[dict[str, Any]]) -> list[int]:
    tok = _tokenizer(family)
    return list(tok.encode(tok.apply_chat_template(messages, tokenize=False), add_special_tokens=False))


def _cmp(family: str, **kwargs: Any) -> TokenSeqComparator:
    return TokenSeqComparator(_tokenizer(family), ASSISTANT_START[family], **kwargs)


@pytest.mark.parametrize("family", FAMILIES)
def test_whitespace_in_an_assistant_body(family: str) -> None:
    changed = copy.deepcopy(MESSAGES)
    changed[2]["content"] = "I will list the files first. Then read."
    d = _cmp(family).diagnose(_ids(family, MESSAGES), _ids(family, changed))
    assert [(i.role, i.message_index, i.kind) for i in d.items] == [("assistant", 2, "whitespace_only")]
    assert len(d.reference) == 1 and d.reference[0].type.value in ("assistant_text", "non_assistant_text")


@pytest.mark.parametrize("family", FAMILIES)
def test_changed_user_content(family: str) -> None:
    changed = copy.deepcopy(MESSAGES)
    changed[1]["content"] = "List the files, then read lib.rs."
    d = _cmp(family).diagnose(_ids(family, MESSAGES), _ids(family, changed))
    assert [(i.role, i.message_index, i.kind) for i in d.items] == [("user", 1, "content")]
    assert d.items[0].type == "non_assistant_text"


@pytest.mark.parametrize("family", FAMILIES)
def test_retokenization_is_found_though_the_reference_misses_it(family: str) -> None:
    tok = _tokenizer(family)
    ids = _ids(family, MESSAGES)
    word = tok.encode(" careful", add_special_tokens=False)
    pos = next(i for i in range(len(ids)) if ids[i : i + len(word)] == word)
    split = [i for ch in " careful" for i in tok.encode(ch, add_special_tokens=False)]
    actual = ids[:pos] + split + ids[pos + len(word) :]
    d = _cmp(family).diagnose(ids, actual)
    assert d.reference == []
    assert [(i.type, i.kind, i.role) for i in d.items] == [(None, "retokenization", "system")]


def test_special_token_swap_is_a_seam() -> None:
    tok = _tokenizer("glm47")
    ids = _ids("glm47", MESSAGES)
    user, obs = tok.convert_tokens_to_ids(["<|user|>", "<|observation|>"])
    pos = len(ids) - 1 - ids[::-1].index(user)
    actual = ids[:pos] + [obs] + ids[pos + 1 :]
    d = _cmp("glm47").diagnose(ids, actual)
    assert [(i.type, i.kind) for i in d.items] == [("special_token_type", "splice_seam")]
    # Roles come from the fresh render: the message whose marker was swapped is the user's.
    assert d.items[0].role == "user" and d.items[0].message_index == 3


@pytest.mark.parametrize("family", ["qwen3", "glm47", "minimax_m27"])
def test_a_removed_message_is_named(family: str) -> None:
    removed = MESSAGES[:2] + MESSAGES[3:]
    d = _cmp(family).diagnose(_ids(family, MESSAGES), _ids(family, removed))
    assert d.reference[0].type.value == "special_token_count"
    assert len(d.items) == 1 and d.items[0].type == "special_token_count"
    assert d.items[0].role == "assistant" and d.items[0].message_index == 2
    assert "actual lacks expected segments" in d.items[0].detail
    assert d.to_dict()["by_role"] == {"assistant": 1}


def test_think_tags_as_special_tokens_field_report() -> None:
    """A ChatML-like format whose think tags are boundaries (field-report.md).

    The reference looks back one segment: the body after `</think>` follows a
    special token that is not the assistant marker, so a trimmed assistant
    body is reported as `non_assistant_text`. The diagnosis says assistant,
    whitespace only.
    """
    tok = _tokenizer("qwen3")
    boundary = TokenSeqComparator.collect_special_ids(tok) | set(tok.convert_tokens_to_ids(["<think>", "</think>"]))
    cmp = TokenSeqComparator(tok, ASSISTANT_START["qwen3"], special_token_ids=boundary)
    msgs = copy.deepcopy(MESSAGES[:3])  # the last turn keeps its think block in Qwen3's template
    msgs[2]["content"] = "<think>\nlist first\n</think>\n\nI will list the files.  "
    trimmed = copy.deepcopy(msgs)
    trimmed[2]["content"] = "<think>\nlist first\n</think>\n\nI will list the files."
    expected, actual = _ids("qwen3", msgs), _ids("qwen3", trimmed)
    assert [m.type.value for m in cmp.compare_sequences(expected, actual)] == ["non_assistant_text"]
    d = cmp.diagnose(expected, actual)
    assert [(i.role, i.message_index, i.kind, i.type) for i in d.items] == [
        ("assistant", 2, "whitespace_only", "non_assistant_text")
    ]


def test_declared_scheme_for_a_format_nobody_ships() -> None:
    """k2v3-style messages: `<|ifm|im_start|>role\\n...<|ifm|im_end|>`, no newline between."""
    from tokenizers import AddedToken

    tok = copy.deepcopy(_tokenizer("qwen3"))
    tok.add_tokens([AddedToken("<|ifm|im_start|>", special=True), AddedToken("<|ifm|im_end|>", special=True)])

    def render(body: str) -> list[int]:
        text = "".join(
            f"<|ifm|im_start|>{role}\n{content}<|ifm|im_end|>"
            for role, content in [("system", "Be brief."), ("user", "Hi"), ("assistant", body), ("tool", "ok")]
        )
        return list(tok.encode(text, add_special_tokens=False))

    scheme = RoleScheme("k2v3", named={"<|ifm|im_start|>": "\n"})
    cmp = TokenSeqComparator(tok, None, role_scheme=scheme)
    d = cmp.diagnose(render("Hello there"), render("Hello  there"))
    assert d.scheme == "k2v3"
    assert [(i.role, i.message_index, i.kind) for i in d.items] == [("assistant", 2, "whitespace_only")]
    # With assistant_start_str None (family "default"), the reference calls it non-assistant.
    assert [m.type.value for m in d.reference] == ["non_assistant_text"]


def test_classify_rules() -> None:
    assert classify([1, 2], [3], "ab", "ab") == "retokenization"
    assert classify([1], [2], "a b", "ab") == "whitespace_only"
    assert classify([5, 1, 2, 3, 4, 6], [5, 1, 2, 3, 4, 7], "x1234y", "x1234z") == "splice_seam"
    long_e, long_a = list(range(20)), list(range(20))
    long_a[10] = 99
    assert classify(long_e, long_a, "a" * 20, "b" * 20) == "content"


def test_kimi_tool_results_are_tool_messages() -> None:
    """Kimi marks a tool result as <|im_system|>tool<|im_middle|>; the Miles kimi
    families drop <|im_middle|> from the boundaries."""
    tok = _tokenizer("kimi_k2")
    call = {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": '{"p": 1}'}}
    msgs = [
        {"role": "system", "content": "S"},
        {"role": "user", "content": "U"},
        {"role": "assistant", "content": "A", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": "out  put"},
        {"role": "user", "content": "U2"},
    ]
    text = tok.apply_chat_template(msgs, tokenize=False)
    expected = list(tok.encode(text, add_special_tokens=False))
    actual = list(tok.encode(text.replace("out  put", "out put"), add_special_tokens=False))
    boundary = TokenSeqComparator.collect_special_ids(tok) - {tok.convert_tokens_to_ids("<|im_middle|>")}
    d = TokenSeqComparator(tok, "<|im_assistant|>", special_token_ids=boundary).diagnose(expected, actual)
    assert d.scheme == "kimi"
    assert [(i.role, i.message_index, i.kind) for i in d.items] == [("tool", 3, "whitespace_only")]


def test_a_qwen3_tool_result_is_a_tool_message() -> None:
    """Qwen3 renders tool results as `<tool_response>` blocks inside a user
    block: with ids only, each is a tool message, numbered as the messages are."""
    msgs: list[dict[str, Any]] = [
        {"role": "user", "content": "Read both files."},
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "read", "arguments": {"path": "a"}}},
            {"type": "function", "function": {"name": "read", "arguments": {"path": "b"}}},
        ]},
        {"role": "tool", "content": "alpha contents"},
        {"role": "tool", "content": "beta contents"},
        {"role": "user", "content": "Thanks."},
    ]  # fmt: skip
    changed = copy.deepcopy(msgs)
    changed[3]["content"] = "beta contents, changed"
    d = _cmp("qwen3").diagnose(_ids("qwen3", msgs), _ids("qwen3", changed))
    assert [(i.role, i.message_index, i.kind) for i in d.items] == [("tool", 3, "content")]
    changed = copy.deepcopy(msgs)
    changed[4]["content"] = "Thanks!"
    d = _cmp("qwen3").diagnose(_ids("qwen3", msgs), _ids("qwen3", changed))
    assert [(i.role, i.message_index) for i in d.items] == [("user", 4)]


@given(
    a=st.lists(st.sampled_from("abcdeAB"), max_size=40),
    b=st.lists(st.sampled_from("abcdeAB"), max_size=40),
    big=st.booleans(),
)
def test_sequence_opcodes_are_a_valid_edit_script(a: list[str], b: list[str], big: bool) -> None:
    import tito_fast.compare.diagnosis as diagnosis

    old = diagnosis.DIFFLIB_PAIRS
    diagnosis.DIFFLIB_PAIRS = 0 if big else old  # big: the anchored path on small inputs
    try:
        ops = sequence_opcodes(a, b)
    finally:
        diagnosis.DIFFLIB_PAIRS = old
    i = j = 0
    for tag, i1, i2, j1, j2 in ops:
        assert (i1, j1) == (i, j)  # contiguous, in order
        assert tag in ("equal", "replace", "insert", "delete")
        if tag == "equal":
            assert a[i1:i2] == b[j1:j2] and i2 > i1
        if tag == "insert":
            assert i1 == i2 and j2 > j1
        if tag == "delete":
            assert j1 == j2 and i2 > i1
        i, j = i2, j2
    assert (i, j) == (len(a), len(b))
    if not big:
        assert ops == [tuple(o) for o in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()]


class _Counted:
    """An element that counts its equality tests."""

    calls = 0

    def __init__(self, v: int) -> None:
        self.v = v

    def __eq__(self, other: object) -> bool:
        _Counted.calls += 1
        return isinstance(other, _Counted) and self.v == other.v

    def __hash__(self) -> int:
        return hash(self.v)


@pytest.mark.parametrize("n", [5_000, 20_000])
def test_sequence_opcodes_grow_near_linearly(n: int) -> None:
    """Segment lists of a long session whose structure differs at both ends
    (difflib compares about n**2 pairs here); counted, not timed."""
    a = [_Counted(0 if k % 2 else k) for k in range(n)]  # a boundary id between unique contents
    b = a[:3] + a[4 : n - 5] + a[n - 4 :]
    _Counted.calls = 0
    ops = sequence_opcodes(a, b)
    assert [op[0] for op in ops] == ["equal", "delete", "equal", "delete", "equal"]
    assert _Counted.calls < 40 * n, _Counted.calls


def test_diagnose_a_long_session_with_structure_differences_at_both_ends() -> None:
    tok = _tokenizer("qwen3")
    ids: list[int] = []
    k = 0
    while len(ids) < 60_000:
        ids += _ids("qwen3", [{"role": "user", "content": f"run test {k}"}, {"role": "assistant", "content": f"sure {k}"}])
        k += 1
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    ends = [p for p, t in enumerate(ids) if t == im_end]
    actual = [t for p, t in enumerate(ids) if p not in (ends[2], ends[-3])]
    d = _cmp("qwen3").diagnose(ids, actual)
    assert [i.type for i in d.items] == ["special_token_count", "special_token_count"]
    assert d.items[0].expected_span[0] < 100 and d.items[1].expected_span[0] > 59_000

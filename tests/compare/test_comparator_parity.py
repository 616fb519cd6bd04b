"""TokenSeqComparator against the plain reference comparator, on real tokenizers.

Sessions are rendered with each family's real chat template and tokenizer
(see tito_fast.testing.fixtures), then perturbed by hypothesis: other content ids,
other special ids, deletions, insertions, pure retokenizations (same text,
other ids) and whitespace edits. The `to_dict()` lists must be identical.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tito_fast.compare.comparator import MismatchType, TokenSeqComparator
from tito_fast.testing import fixtures
from tito_fast.testing.reference import ReferenceComparator

ASSISTANT_START = {
    "qwen3": "<|im_start|>assistant",
    "qwen35": "<|im_start|>assistant",
    "glm47": "<|assistant|>",
    "minimax_m27": "]~b]ai",
    "deepseek_v3": "<｜Assistant｜>",
    "deepseek_v31": "<｜Assistant｜>",
    "llama31": "<|start_header_id|>assistant",
    "kimi_k2": "<|im_assistant|>",
}
FAMILIES = sorted(ASSISTANT_START)

MESSAGES = [
    {"role": "system", "content": "You are a careful assistant. Use tools when needed."},
    {"role": "user", "content": "What is 1+7? Answer in \\boxed{}."},
    {"role": "assistant", "content": "It is \\boxed{8}.  Anything else?"},
    {"role": "user", "content": "Ünïcödé: 你好, and emoji 🙂 then  two spaces.\n\nNew paragraph."},
    {"role": "assistant", "content": "好的 🙂 — done.\n"},
    {"role": "user", "content": "Bye"},
]


@functools.cache
def _tokenizer(family: str) -> Any:
    return fixtures.load_tokenizer(family)


@functools.cache
def _session(family: str) -> list[int]:
    tok = _tokenizer(family)
    text = tok.apply_chat_template(MESSAGES, tokenize=False)
    return list(tok.encode(text, add_special_tokens=False))


def _comparators(family: str, trim: set[int] | None = None) -> tuple[TokenSeqComparator, ReferenceComparator]:
    tok = _tokenizer(family)
    start = ASSISTANT_START[family]
    return TokenSeqComparator(tok, start, trim_trailing_ids=trim), ReferenceComparator(tok, start, trim_trailing_ids=trim)


@st.composite
def perturbed(draw: st.DrawFn, family: str) -> list[int]:
    tok = _tokenizer(family)
    ids = list(_session(family))
    specials = sorted(TokenSeqComparator.collect_special_ids(tok))
    for _ in range(draw(st.integers(0, 4))):
        if not ids:
            break
        pos = draw(st.integers(0, len(ids) - 1))
        op = draw(st.sampled_from(["content", "special", "delete", "insert", "retokenize", "space"]))
        if op == "content":
            ids[pos] = draw(st.integers(0, 150_000))
        elif op == "special":
            ids[pos] = draw(st.sampled_from(specials))
        elif op == "delete":
            del ids[pos]
        elif op == "insert":
            ids.insert(pos, draw(st.integers(0, 150_000) | st.sampled_from(specials)))
        elif op == "retokenize":
            # The same text as other ids: encode each character on its own.
            text = tok.decode(ids[pos : pos + 3], skip_special_tokens=False)
            pieces = [i for ch in text for i in tok.encode(ch, add_special_tokens=False)]
            ids[pos : pos + 3] = pieces
        else:
            ids.insert(pos, tok.encode(draw(st.sampled_from([" ", "\n", "  ", "\n\n"])), add_special_tokens=False)[0])
    return ids


@pytest.mark.parametrize("family", FAMILIES)
def test_identical_sessions_have_no_mismatch(family: str) -> None:
    fast, ref = _comparators(family)
    ids = _session(family)
    assert fast.compare_sequences(ids, list(ids)) == [] == ref.compare(ids, list(ids))
    assert fast.compare_sequences(np.array(ids, dtype=np.int32), ids) == []


@pytest.mark.parametrize("family", FAMILIES)
@given(data=st.data())
def test_parity_with_the_reference(family: str, data: st.DataObject) -> None:
    actual = data.draw(perturbed(family))
    expected = _session(family)
    tok = _tokenizer(family)
    trim = data.draw(st.sampled_from([None, set(), {tok.encode("\n", add_special_tokens=False)[0]}]))
    fast, ref = _comparators(family, trim)
    call_trim = data.draw(st.sampled_from([None, set(TokenSeqComparator.collect_special_ids(tok))]))
    got = [m.to_dict() for m in fast.compare_sequences(expected, actual, trim_trailing_ids=call_trim)]
    assert got == ref.compare(expected, actual, trim_trailing_ids=call_trim)
    swapped = [m.to_dict() for m in fast.compare_sequences(actual, expected)]
    assert swapped == ref.compare(actual, expected)


@pytest.mark.parametrize("family", FAMILIES)
def test_segments_match_the_reference(family: str) -> None:
    fast, ref = _comparators(family)
    ids = _session(family)
    got = [(s.token_ids, s.is_special) for s in fast.segment_by_special_tokens(ids)]
    assert got == ref.segments(ids)
    assert fast.segment_by_special_tokens([]) == []
    assert [(s.token_ids, s.is_special) for s in fast.segment_by_special_tokens(iter(ids))] == got


def test_pure_retokenization_is_invisible_to_the_reference() -> None:
    # Same text, other ids: not reported by the reference, nor by the drop-in.
    tok = _tokenizer("qwen3")
    fast, ref = _comparators("qwen3")
    ids = _session("qwen3")
    body = tok.encode("thanks", add_special_tokens=False)
    split = [i for ch in "thanks" for i in tok.encode(ch, add_special_tokens=False)]
    assert body != split
    start = next(i for i in range(len(ids)) if ids[i : i + len(body)] == body) if body[0] in ids else None
    actual = list(ids)
    if start is None:  # "Bye" session: splice the split form into the last user message instead
        actual = ids[:-3] + split + ids[-3:]
        expected = ids[:-3] + body + ids[-3:]
    else:
        actual[start : start + len(body)] = split
        expected = ids
    assert fast.compare_sequences(expected, actual) == [] and ref.compare(expected, actual) == []


def test_known_ids_and_mismatch_types() -> None:
    tok = _tokenizer("qwen3")
    assert tok.encode("What is 1+7?", add_special_tokens=False) == [3838, 374, 220, 16, 10, 22, 30]
    assert tok.encode("\\boxed{8}", add_special_tokens=False) == [59, 79075, 90, 23, 92]
    assert tok.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>", "<think>", "</think>"]) == [151644, 151645, 151667, 151668]
    ids = TokenSeqComparator.collect_special_ids(tok)
    assert 151644 in ids and 151645 in ids and 151667 not in ids
    assert {m.value for m in MismatchType} == {"special_token_count", "special_token_type", "non_assistant_text", "assistant_text"}


@pytest.mark.parametrize("family", ["qwen3", "glm47"])
@given(data=st.data())
def test_batch_equals_one_by_one(family: str, data: st.DataObject) -> None:
    fast, ref = _comparators(family)
    expected = [_session(family)] * 4
    actual = [data.draw(perturbed(family)) for _ in range(4)]
    threads = data.draw(st.sampled_from([None, 1, 2]))
    got = [[m.to_dict() for m in ms] for ms in fast.compare_batch(expected, actual, threads=threads)]
    assert got == [ref.compare(e, a) for e, a in zip(expected, actual)]


def test_segmenter_pickles_with_its_byte_table() -> None:
    import pickle

    fast, _ = _comparators("qwen3")
    seg = pickle.loads(pickle.dumps(fast._segmenter))
    assert seg.has_byte_table and seg.boundary_ids == fast._segmenter.boundary_ids
    ids = _session("qwen3")
    assert seg.text_bytes(ids[1:5]) == fast._segmenter.text_bytes(ids[1:5])


# Families where the reference never says assistant_text for a changed body:
# DeepSeek's marker is not a boundary id, and in Llama 3 the body follows
# <|end_header_id|>, not the marker (the field report's puzzle); the only
# "assistant" segment is the role name itself, which this test changes.
NO_ASSISTANT_LABEL = {"deepseek_v3", "deepseek_v31", "llama31"}


@pytest.mark.parametrize("family", FAMILIES)
def test_every_content_segment_changed_gets_the_reference_label(family: str) -> None:
    # One id changed in every content segment: the Rust verdicts (from the byte
    # table) label assistant and other text exactly as the reference does.
    fast, ref = _comparators(family)
    ids = _session(family)
    special = fast._special_ids
    actual = list(ids)
    for seg_start in range(len(ids)):
        if ids[seg_start] not in special and (seg_start == 0 or ids[seg_start - 1] in special):
            end = seg_start
            while end < len(ids) and ids[end] not in special:
                end += 1
            j = min(seg_start + 2, end - 1)  # past the role name when there is room
            actual[j] = (actual[j] + 13) % 100_000
    got = [m.to_dict() for m in fast.compare_sequences(ids, actual)]
    assert got == ref.compare(ids, actual)
    types = {m["type"] for m in got}
    assert types == ({"non_assistant_text"} if family in NO_ASSISTANT_LABEL else {"assistant_text", "non_assistant_text"})


@pytest.mark.parametrize("family", ["qwen3", "llama31", "glm47"])
@given(data=st.data())
def test_rust_verdicts_equal_the_decoding_fallback(family: str, data: st.DataObject) -> None:
    # Without a byte table every text verdict is "unknown" and Python decodes:
    # both paths must give the same list.
    from tito_fast._core import Segmenter

    fast, _ = _comparators(family)
    slow, _ = _comparators(family)
    slow._segmenter = Segmenter(fast._special_ids)
    expected, actual = _session(family), data.draw(perturbed(family))
    assert fast.compare_sequences(expected, actual) == slow.compare_sequences(expected, actual)

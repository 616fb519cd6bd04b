"""Messages in a render and in ids: `MessageBounds.message_at`'s search
(any hint gives the answer of a plain scan) and the role table
(`_core.RoleMarkers`, the rule's one owner), read from the byte table or
from the tokenizer's decode alike."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tito_fast import _core
from tito_fast.compare.messages import MessageBounds
from tito_fast.compare.roles import RoleTracker
from tito_fast.testing import fixtures


@st.composite
def bounds_and_byte(draw: st.DrawFn) -> tuple[list[int], int, int | None]:
    """Each message's rendered length (some empty), a byte of the render, a hint (any int or None)."""
    sizes = draw(st.lists(st.integers(0, 5), min_size=1, max_size=60))
    total = sum(sizes)
    byte = draw(st.integers(0, total + 2))
    hint = draw(st.none() | st.integers(-3, len(sizes) + 3))
    return sizes, byte, hint


@settings(max_examples=400, deadline=None)
@given(bounds_and_byte())
def test_message_at_is_a_scan_whatever_the_hint(case: tuple[list[int], int, int | None]) -> None:
    sizes, byte, hint = case
    text = "".join(chr(ord("a") + i % 26) * n for i, n in enumerate(sizes)).encode()
    rendered: list[int] = []

    def render(k: int) -> bytes:
        rendered.append(k)
        return text[: sum(sizes[:k])]

    b = MessageBounds(render, len(sizes), text)
    ends = np.cumsum(sizes).tolist()
    want = next((k for k, end in enumerate(ends) if end > byte), len(sizes) - 1)  # the message holding the byte
    assert b.message_at(byte, hint=hint) == want
    assert len(rendered) == len(set(rendered))  # each prefix rendered once
    if hint is not None and hint == want and 0 <= want < len(sizes) - 1:
        assert len(rendered) <= 2  # a right guess costs two renders at most


def test_a_near_miss_costs_few_renders() -> None:
    """A hint two messages short, or one past, is found in three renders, not a search of 100 messages."""
    sizes = [3] * 100
    text = b"x" * 300
    for hint, want in ((40, 42), (40, 39)):
        rendered: list[int] = []

        def render(k: int) -> bytes:
            rendered.append(k)
            return text[: 3 * k]

        assert MessageBounds(render, 100, text).message_at(3 * want + 1, hint=hint) == want
        assert len(rendered) == 3, rendered


ROLE_FIXTURES = ["qwen3", "glm47", "llama31", "minimax_m27", "kimi_k2", "deepseek_v3"]


@pytest.fixture(scope="module", params=ROLE_FIXTURES)
def trackers(request: pytest.FixtureRequest) -> tuple[RoleTracker, RoleTracker, list[int]]:
    """The comparator's tracker (byte table), one reading names by decode only, and ids to draw from."""
    from tito_fast import TokenSeqComparator

    tok = fixtures.load_tokenizer(request.param)
    cmp = TokenSeqComparator(tok, None)
    fast = cmp.role_tracker
    assert fast.scheme is not None
    slow = RoleTracker(tok, fast.scheme, decode=lambda ids: str(tok.decode(ids, skip_special_tokens=False)))
    words = [i for t in ("user", "assistant", "system", "tool", "model", "Ċ", "\n", "ĠUser", " user") for i in tok.encode(t, add_special_tokens=False)]
    return fast, slow, [*fast.markers.tolist(), *words, 100, 2000, 30000]


@settings(max_examples=150, deadline=None)
@given(picks=st.lists(st.integers(0, 10**6), max_size=40))
def test_role_names_read_alike_from_the_byte_table_and_decode(trackers: tuple[RoleTracker, RoleTracker, list[int]], picks: list[int]) -> None:
    fast, slow, pool = trackers
    ids = [pool[p % len(pool)] for p in picks]
    a, b = fast.table(np.asarray(ids, dtype=np.uint32)), slow.table(ids)
    assert a.starts.tolist() == b.starts.tolist() and a.roles == b.roles
    assert a.starts.dtype == np.int64 and all(r in (*_core.ROLES, "unknown") for r in a.roles)


def test_role_names_aliases_and_inner_blocks() -> None:
    """ids: 1 opens a block whose name ends at "\\n", 2 a tool response inside one."""
    words = {10: "user", 11: " Model ", 12: "\n", 13: "observation", 14: "hello", 15: "developer"}
    m = _core.RoleMarkers({}, {1: "\n"}, {2: "tool"})

    def decode(ids: list[int]) -> str:
        return "".join(words.get(i, "<t>") for i in ids)

    starts, roles = m.table([1, 10, 12, 2, 14, 1, 11, 12, 14, 1, 13, 12, 1, 15, 12, 1, 10, 12, 14, 2, 14], decode)
    assert starts.tolist() == [0, 5, 9, 12, 15, 19]
    assert roles == ["tool", "assistant", "tool", "unknown", "user", "tool"]
    with pytest.raises(ValueError, match="ids"):
        m.table([-1], decode)
    with pytest.raises(TypeError):
        m.table([1, 10], lambda ids: None)


def test_id_offsets_follow_the_byte_table() -> None:
    """Each id's start in the decoded bytes, from the comparator's byte table;
    None past the table, without one, or for another text length."""
    from tito_fast import TokenSeqComparator
    from tito_fast.compare.messages import id_offsets

    tok = fixtures.load_tokenizer("qwen3")
    cmp = TokenSeqComparator(tok, None)
    ids = np.asarray(tok.encode("hello wörld 🙂 <|im_start|>user\nhi", add_special_tokens=False), dtype=np.uint32)
    text = tok.decode(ids.tolist(), skip_special_tokens=False).encode("utf-8")
    assert cmp.vocab is not None
    want = np.concatenate([[0], np.cumsum(cmp.vocab.lengths[ids])])
    got = id_offsets(cmp.segmenter, ids, len(text))
    assert got is not None and got.tolist() == want.tolist() and got.dtype == np.int64
    assert id_offsets(cmp.segmenter, ids, len(text) + 1) is None
    assert id_offsets(cmp.segmenter, np.asarray([*ids, cmp.vocab.size], dtype=np.uint32), len(text)) is None
    assert id_offsets(_core.Segmenter([1]), ids, len(text)) is None
    assert id_offsets(cmp.segmenter, ids[:0], 0) is None

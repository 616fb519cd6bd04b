"""Every kernel against its plain-Python definition, for every input kind."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tito_fast
from tests.kernels.kinds import KINDS
from tito_fast.testing import reference

KIND_NAMES = sorted(KINDS)


@st.composite
def related_pair(draw: st.DrawFn, max_id: int = 2**32 - 1) -> tuple[list[int], list[int]]:
    """Two id lists that share a prefix of random length, then may diverge."""
    # A small alphabet makes accidental equality after the divergence likely.
    small = draw(st.booleans())
    ids = st.integers(0, 3) if small else st.integers(0, max_id)
    common = draw(st.lists(ids, max_size=300))
    a = common + draw(st.lists(ids, max_size=20))
    b = common + draw(st.lists(ids, max_size=20))
    return a, b


@pytest.mark.parametrize("kind_b", ["list", "numpy_int32", "numpy_uint32"])
@pytest.mark.parametrize("kind_a", KIND_NAMES)
@given(data=st.data())
def test_common_prefix_len(kind_a: str, kind_b: str, data: st.DataObject) -> None:
    conv_a, max_a = KINDS[kind_a]
    conv_b, max_b = KINDS[kind_b]
    a, b = data.draw(related_pair(max_id=min(max_a, max_b)))
    assert tito_fast.common_prefix_len(conv_a(a), conv_b(b)) == reference.common_prefix_len(a, b)


@pytest.mark.parametrize("kind", KIND_NAMES)
@given(data=st.data(), trim=st.integers(0, 4))
def test_check_prefix(kind: str, data: st.DataObject, trim: int) -> None:
    conv, max_id = KINDS[kind]
    stored, new = data.draw(related_pair(max_id=max_id))
    if data.draw(st.booleans()):
        new = stored[: data.draw(st.integers(0, len(stored)))]
    want = reference.check_prefix(stored, new, max_trim_tokens=trim)
    if want is None:
        tito_fast.check_prefix(conv(stored), conv(new), max_trim_tokens=trim)  # must not raise
        return
    with pytest.raises(tito_fast.PrefixMismatchError) as info:
        tito_fast.check_prefix(conv(stored), conv(new), max_trim_tokens=trim)
    e = info.value
    got = reference.PrefixFacts(e.index, e.matched, e.checked_len, e.stored_len, e.new_len, e.max_trim_tokens)
    assert got == want
    msg = str(e)
    assert f"first mismatch at index {want.index}" in msg
    assert f"matched {want.matched}/{want.checked_len} prefix tokens" in msg
    assert f"stored {want.stored_len} tokens" in msg and f"({want.new_len} tokens)" not in msg


@pytest.mark.parametrize("kind", KIND_NAMES)
@given(ids=st.lists(st.integers(0, 5), max_size=40), trim=st.sets(st.integers(0, 5), max_size=3))
def test_trim_trailing(kind: str, ids: list[int], trim: set[int]) -> None:
    conv, _ = KINDS[kind]
    got = tito_fast.trim_trailing(conv(ids), trim)
    want = reference.trim_trailing(ids, trim)
    assert list(got) == want
    if kind in ("list", "tuple"):
        assert type(got) is type(conv(ids))
    if kind.startswith("numpy"):
        assert isinstance(got, np.ndarray)


@pytest.mark.parametrize("kind", KIND_NAMES)
@given(
    prefix=st.lists(st.integers(0, 6), max_size=20),
    inc=st.lists(st.integers(0, 6), max_size=20),
    after=st.none() | st.tuples(st.integers(0, 6), st.integers(0, 6) | st.lists(st.integers(0, 6), max_size=3)),
    drop=st.none() | st.frozensets(st.integers(0, 6), max_size=3),
)
def test_merge_tokens(kind: str, prefix: list[int], inc: list[int], after, drop) -> None:  # type: ignore[no-untyped-def]
    conv, _ = KINDS[kind]
    got = tito_fast.merge_tokens(conv(prefix), conv(inc), append_after=after, drop_last_if_in=drop)
    want = reference.merge_tokens(prefix, inc, append_after=after, drop_last_if_in=drop)
    assert list(got) == want
    if kind.startswith("numpy"):
        dtype = conv(prefix).dtype
        same = dtype.isnative and dtype in (np.int32, np.int64, np.uint32, np.uint64)
        assert isinstance(got, np.ndarray) and got.dtype == (dtype if same else np.uint32)
    else:
        assert type(got) is list


def test_merge_family_rules_on_known_ids() -> None:
    im_end, nl, im_start = 151645, 198, 151644
    assert tito_fast.merge_tokens([9, im_end], [im_start], append_after=(im_end, nl)) == [9, im_end, nl, im_start]
    assert tito_fast.merge_tokens([9, 8], [im_start], append_after=(im_end, nl)) == [9, 8, im_start]
    observation, user = 151338, 151336
    glm = {observation, user}
    assert tito_fast.merge_tokens([5, observation], [observation, 1], drop_last_if_in=glm) == [5, observation, 1]


@given(
    pairs=st.lists(related_pair(), max_size=30),
    threads=st.sampled_from([None, 1, 2, 3]),
)
def test_batch_and_csr(pairs: list[tuple[list[int], list[int]]], threads: int | None) -> None:
    want = [reference.common_prefix_len(a, b) for a, b in pairs]
    a_seqs = [np.array(a, dtype=np.uint32) for a, _ in pairs]
    b_seqs = [b for _, b in pairs]
    got = tito_fast.common_prefix_len_batch(a_seqs, b_seqs, threads=threads)
    assert got.dtype == np.int64 and got.tolist() == want

    def csr(seqs: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
        values = np.array([x for s in seqs for x in s], dtype=np.int64)
        offsets = np.cumsum([0] + [len(s) for s in seqs], dtype=np.int64)
        return values, offsets

    av, ao = csr([a for a, _ in pairs])
    bv, bo = csr([b for _, b in pairs])
    got = tito_fast.common_prefix_len_csr(av, ao, bv, bo.astype(np.int32), threads=threads)
    assert got.tolist() == want


def test_csr_accepts_sliced_arrow_style_offsets() -> None:
    # An Arrow slice keeps the parent's values; offsets need not start at 0.
    values = np.array([0, 0, 1, 2, 3, 1, 2, 4], dtype=np.int32)
    offsets = np.array([2, 5, 8])
    assert tito_fast.common_prefix_len_csr(values, offsets, values, offsets).tolist() == [3, 3]
    other = np.array([1, 2, 3, 1, 2, 3], dtype=np.int32)
    assert tito_fast.common_prefix_len_csr(values, offsets, other, [0, 3, 6]).tolist() == [3, 2]


def test_two_dimensional_batch_rows() -> None:
    a = np.arange(12, dtype=np.int32).reshape(3, 4)
    b = a.copy()
    b[1, 2] = 99
    assert tito_fast.common_prefix_len_batch(a, b).tolist() == [4, 2, 4]


def test_large_arrays_every_dtype() -> None:
    rng = np.random.default_rng(0)
    base = rng.integers(0, 150_000, size=1_000_003)
    for dtype in ("int32", "int64", "uint32", "uint64"):
        a = base.astype(dtype)
        b = a.copy()
        assert tito_fast.common_prefix_len(a, b) == len(a)
        for pos in (0, 63, 64, 4095, 4096, 999_999, 1_000_002):
            b[pos] += 1
            assert tito_fast.common_prefix_len(a, b) == pos
            b[pos] -= 1


def test_numpy_views_are_not_copied_or_modified() -> None:
    a = np.arange(10_000, dtype=np.int32)
    a.setflags(write=False)  # read-only input is fine
    assert tito_fast.common_prefix_len(a, a) == 10_000
    got = tito_fast.trim_trailing(a, {9999})
    assert isinstance(got, np.ndarray) and got.base is not None and len(got) == 9999


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"])
def test_common_prefix_len_of_long_arrays_of_every_width(dtype: str) -> None:
    """Each width is compared as it is, block by block (no copy): the
    divergence is found in any block and at either end, and a negative id
    anywhere in either array (after the divergence too) is an error."""
    from tito_fast import TokenInputError

    rng = np.random.default_rng(7)
    top = min(int(np.iinfo(dtype).max), 2**32 - 1)
    a = rng.integers(0, top, 9_000, endpoint=True).astype(dtype)
    for at in (0, 1, 2047, 2048, 4097, 8_999):
        b = a.copy()
        b[at] = a[at] + 1 if a[at] < top else 0
        assert tito_fast.common_prefix_len(a, b) == at == int(np.argmax(a != b))
    assert tito_fast.common_prefix_len(a, a) == 9_000
    assert tito_fast.common_prefix_len(a, a[:5000]) == 5000
    if np.issubdtype(np.dtype(dtype), np.signedinteger):
        for side in (0, 1):
            b = a.copy()
            b[0] += 1
            bad = [a.copy(), b]
            bad[side][8_000] = -1  # after the divergence
            with pytest.raises(TokenInputError, match="negative"):
                tito_fast.common_prefix_len(*bad)

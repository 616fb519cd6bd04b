"""Bad input raises a clear ValueError subclass naming argument and position."""

from __future__ import annotations

import array
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tito_fast
from tito_fast import TokenInputError

BAD_ITEMS = [
    (-1, "negative"),
    (2**32, "too large"),
    (2**80, "out of range"),
    (-(2**80), "out of range"),
    (1.0, "float"),
    (float("nan"), "float"),
    (None, "NoneType"),
    (True, "bool"),
    ("7", "str"),
    (np.float32(3), "float"),
]


@pytest.mark.parametrize(("item", "words"), BAD_ITEMS)
@pytest.mark.parametrize("pos", [0, 1, 5000])
def test_bad_item_in_list_names_argument_and_position(item: Any, words: str, pos: int) -> None:
    ids = [7] * (pos + 3)
    ids[pos] = item
    with pytest.raises(TokenInputError, match=words) as info:
        tito_fast.common_prefix_len([7, 7], ids)
    assert isinstance(info.value, ValueError)
    assert info.value.argument == "b"
    assert info.value.position == pos
    assert f"position {pos}" in str(info.value) and "argument 'b'" in str(info.value)


@pytest.mark.parametrize(
    ("arr", "pos"),
    [
        (np.array([1, 2, -3], dtype=np.int32), 2),
        (np.array([-1], dtype=np.int64), 0),
        (np.array([0, 2**32], dtype=np.int64), 1),
        (np.array([0, 1, 2**63], dtype=np.uint64), 2),
        (np.array([5, -128], dtype=np.int8), 1),
        (array.array("i", [1, -1]), 1),
        (np.array([1, -9], dtype=">i8"), 1),
    ],
)
def test_bad_array_values(arr: Any, pos: int) -> None:
    with pytest.raises(TokenInputError) as info:
        tito_fast.check_prefix(arr, [1, 2, 3])
    assert (info.value.argument, info.value.position) == ("stored", pos)


@given(n=st.integers(1, 20_000), data=st.data())
def test_negative_found_anywhere_in_large_int32(n: int, data: st.DataObject) -> None:
    pos = data.draw(st.integers(0, n - 1))
    a = np.ones(n, dtype=np.int32)
    a[pos] = -(2**31)
    with pytest.raises(TokenInputError) as info:
        tito_fast.common_prefix_len(a, a[:1])
    assert info.value.position == pos


@pytest.mark.parametrize(
    ("obj", "words"),
    [
        (np.zeros((2, 2), dtype=np.int32), "2-D"),
        (np.array([1.0]), "dtype float64"),
        (np.array([True]), "dtype bool"),
        (np.array(["a"]), "dtype <U1"),
        ("hello", "str"),
        (None, "None"),
        ({1, 2}, "set"),
        ({1: 2}, "dict"),
        (3, "int"),
        (array.array("d", [1.0]), 'format "d"'),
        (memoryview(np.zeros((2, 2), dtype=np.int32)), "2-D"),  # type: ignore[arg-type]
    ],
)
def test_bad_containers(obj: Any, words: str) -> None:
    with pytest.raises(TokenInputError, match=words) as info:
        tito_fast.common_prefix_len(obj, [1])
    assert info.value.argument == "a" and info.value.position is None


def test_batch_errors_name_the_row() -> None:
    with pytest.raises(TokenInputError) as info:
        tito_fast.common_prefix_len_batch([[1], [2]], [[1], [2, -1]])
    assert (info.value.argument, info.value.position) == ("b_seqs[1]", 1)
    with pytest.raises(TokenInputError, match="holds 1 sequences but a_seqs holds 2"):
        tito_fast.common_prefix_len_batch([[1], [2]], [[1]])
    with pytest.raises(TokenInputError) as info:
        tito_fast.common_prefix_len_batch([np.array([1, -5], dtype=np.int32)] * 3, [[1]] * 3)
    assert (info.value.argument, info.value.position) == ("a_seqs[0]", 1)
    with pytest.raises(ValueError, match="threads must be >= 1"):
        tito_fast.common_prefix_len_batch([], [], threads=0)


def test_csr_errors() -> None:
    v = np.arange(6, dtype=np.int32)
    with pytest.raises(TokenInputError, match="decrease at position 2") as info:
        tito_fast.common_prefix_len_csr(v, [0, 3, 2], v, [0, 3, 6])
    assert (info.value.argument, info.value.position) == ("a_offsets", 2)
    with pytest.raises(TokenInputError, match="past the 6 values") as info:
        tito_fast.common_prefix_len_csr(v, [0, 3, 6], v, [0, 3, 7])
    assert info.value.argument == "b_offsets"
    with pytest.raises(TokenInputError, match="rows"):
        tito_fast.common_prefix_len_csr(v, [0, 6], v, [0, 3, 6])
    with pytest.raises(TokenInputError, match="negative") as info:
        tito_fast.common_prefix_len_csr(np.array([1, -1], dtype=np.int32), [0, 2], v, [0, 2])
    assert (info.value.argument, info.value.position) == ("a_values", 1)
    with pytest.raises(TokenInputError):
        tito_fast.common_prefix_len_csr(v, [], v, [])
    with pytest.raises(TokenInputError):
        tito_fast.common_prefix_len_csr(v, np.array([0.0, 1.0]), v, [0, 1])


def test_other_arguments() -> None:
    with pytest.raises(ValueError, match="max_trim_tokens must be >= 0"):
        tito_fast.check_prefix([1], [1], max_trim_tokens=-1)
    with pytest.raises(TokenInputError) as info:
        tito_fast.trim_trailing([1, 2], {-1})
    assert info.value.argument == "trim_ids"
    with pytest.raises(TokenInputError, match="pair"):
        tito_fast.merge_tokens([1], [2], append_after=(1, 2, 3))  # type: ignore[arg-type]
    with pytest.raises(TokenInputError) as info:
        tito_fast.merge_tokens([1], [2], drop_last_if_in=[1.5])  # type: ignore[list-item]
    assert info.value.argument == "drop_last_if_in"
    with pytest.raises(TokenInputError) as info:
        tito_fast.merge_tokens(np.array([1], dtype=np.int32), [5, 2**31])
    assert (info.value.argument, info.value.position) == ("incremental", 1)


def test_prefix_mismatch_error_facts() -> None:
    with pytest.raises(tito_fast.PrefixMismatchError) as info:
        tito_fast.check_prefix(list(range(10)), list(range(4)), max_trim_tokens=2)
    e = info.value
    assert isinstance(e, ValueError)
    assert (e.index, e.matched, e.checked_len, e.stored_len, e.new_len, e.max_trim_tokens) == (4, 4, 8, 10, 4, 2)
    assert str(e) == (
        "pretokenized prefix mismatch: stored 10 tokens (checking first 8, allowing 2 trailing) "
        "are not a prefix of the new 4 tokens, first mismatch at index 4, matched 4/8 prefix tokens"
    )


class Weird:
    """A sequence whose items raise on conversion."""

    def __len__(self) -> int:
        return 2

    def __iter__(self):  # type: ignore[no-untyped-def]
        yield 1
        raise RuntimeError("boom")


def test_exceptions_from_user_iterables_propagate() -> None:
    with pytest.raises(RuntimeError, match="boom"):
        tito_fast.common_prefix_len(Weird(), [1])

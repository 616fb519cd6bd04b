"""TokenBuffer against the reference's model: a full copy of the ids per checkpoint."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

import tito_fast
from tito_fast.testing import reference

ids_st = st.lists(st.integers(0, 2**32 - 1) | st.integers(0, 9), max_size=8)


class BufferMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.buf = tito_fast.TokenBuffer()
        self.model = reference.ListTrajectory()
        self.views: list[tuple[np.ndarray, list[int]]] = []

    @rule(ids=ids_st, as_numpy=st.booleans())
    def extend(self, ids: list[int], as_numpy: bool) -> None:
        self.buf.extend(np.array(ids, dtype=np.uint32) if as_numpy else ids)
        self.model.extend(ids)

    @rule()
    def checkpoint(self) -> None:
        assert self.buf.checkpoint() == self.model.checkpoint()

    @rule(n=st.integers(0, 4))
    def rollback(self, n: int) -> None:
        if n > len(self.model.copies):
            with pytest.raises(tito_fast.TokenBufferError):
                self.buf.rollback(n)
            return
        assert self.buf.rollback(n) == self.model.rollback(n)

    @rule(n=st.integers(0, 5), ids=ids_st)
    def replace_last(self, n: int, ids: list[int]) -> None:
        if n > len(self.model.ids):
            with pytest.raises(tito_fast.TokenBufferError):
                self.buf.replace_last(n, ids)
            return
        self.buf.replace_last(n, ids)
        self.model.replace_last(n, ids)

    @rule()
    def take_view(self) -> None:
        self.views.append((self.buf.to_numpy(), list(self.model.ids)))

    @rule()
    def pickle_roundtrip(self) -> None:
        clone = pickle.loads(pickle.dumps(self.buf))
        assert clone == self.buf
        self.buf = clone

    @invariant()
    def same_state(self) -> None:
        assert self.buf.to_list() == self.model.ids
        assert len(self.buf) == len(self.model.ids)
        assert self.buf.checkpoints == self.model.checkpoints
        for view, want in self.views:
            assert view.tolist() == want


TestBufferMachine = BufferMachine.TestCase


def test_indexing_and_slicing() -> None:
    buf = tito_fast.TokenBuffer(range(10))
    ref = list(range(10))
    for s in [slice(None), slice(2, 5), slice(-3, None), slice(None, None, -2), slice(8, 2, -3), slice(20, 30)]:
        assert buf[s] == ref[s]
    assert buf[0] == 0 and buf[-1] == 9
    with pytest.raises(IndexError):
        buf[10]
    with pytest.raises(IndexError):
        buf[-11]
    assert list(buf) == ref
    assert repr(buf) == "TokenBuffer(len=10, checkpoints=0)"


def test_to_numpy_is_a_read_only_zero_copy_view() -> None:
    buf = tito_fast.TokenBuffer(np.arange(1000, dtype=np.int64))
    a = buf.to_numpy()
    b = buf.to_numpy()
    assert a.dtype == np.uint32 and not a.flags.writeable
    assert np.shares_memory(a, b)  # both view the buffer's ids, no copy
    with pytest.raises(ValueError):
        a[0] = 5
    buf.replace_last(1000, [7])  # the buffer moves on; the views do not
    assert a.tolist() == list(range(1000)) and buf.to_list() == [7]


def test_copy_and_deepcopy_are_independent() -> None:
    buf = tito_fast.TokenBuffer([1, 2])
    buf.checkpoint()
    other = copy.deepcopy(buf)
    other.extend([3])
    assert buf.to_list() == [1, 2] and other.to_list() == [1, 2, 3]
    assert other.checkpoints == [2]


def test_corrupt_pickle_state_is_rejected() -> None:
    buf = tito_fast.TokenBuffer()
    with pytest.raises(tito_fast.TokenBufferError):
        buf.__setstate__((b"\x01\x00\x00\x00", [1], [(5, 0, b"")]))
    with pytest.raises(ValueError):
        buf.__setstate__((b"\x01\x00\x00", [], []))


def test_bad_arguments() -> None:
    buf = tito_fast.TokenBuffer([1])
    with pytest.raises(tito_fast.TokenInputError) as info:
        buf.extend([1, -1])
    assert (info.value.argument, info.value.position) == ("ids", 1)
    assert buf.to_list() == [1]  # nothing was appended
    with pytest.raises(ValueError, match="n_checkpoints must be >= 0"):
        buf.rollback(-1)
    with pytest.raises(ValueError, match="n must be >= 0"):
        buf.replace_last(-1, [])


def test_300_turn_session_memory_is_linear() -> None:
    buf = tito_fast.TokenBuffer()
    turn = np.arange(300, dtype=np.int32)
    for _ in range(300):
        buf.extend(turn)
        buf.checkpoint()
    final_bytes = len(buf) * 4
    assert len(buf) == 90_000
    assert buf.nbytes <= 1.5 * final_bytes, (buf.nbytes, final_bytes)

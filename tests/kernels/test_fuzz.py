"""Arbitrary Python objects thrown at every entry point: an answer or a clear
ValueError, never a crash or a Rust panic (PanicException is a BaseException,
so it would escape the `except` below and fail the test)."""

from __future__ import annotations

import array
from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tito_fast

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.integers(0, 2**32 - 1)
    | st.floats(allow_nan=True)
    | st.text(max_size=3)
    | st.binary(max_size=9)
)
containers = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=6) | st.tuples(inner, inner) | st.dictionaries(st.text(max_size=2), inner, max_size=2),
    max_leaves=12,
)
arrays = hnp.arrays(
    dtype=hnp.integer_dtypes(endianness="=") | hnp.unsigned_integer_dtypes(endianness="?") | hnp.floating_dtypes() | hnp.boolean_dtypes(),
    shape=hnp.array_shapes(min_dims=0, max_dims=2, max_side=5),
)
buffers = st.builds(
    lambda code, vals: array.array(code, [v % 100 for v in vals]),
    st.sampled_from("bBhHiIlLqQ"),
    st.lists(st.integers(0, 99), max_size=5),
) | st.builds(lambda b: memoryview(b), st.binary(max_size=8))
anything = containers | arrays | buffers | st.builds(tito_fast.TokenBuffer, st.lists(st.integers(0, 5), max_size=4))


def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    try:
        return fn(*args, **kwargs)
    except tito_fast.TokenInputError as e:
        assert isinstance(e, ValueError) and e.argument
        return e
    except tito_fast.PrefixMismatchError as e:
        return e


@given(obj=anything)
def test_token_arguments_never_crash(obj: Any) -> None:
    ok = [1, 2, 3]
    for result in (
        _call(tito_fast.common_prefix_len, obj, ok),
        _call(tito_fast.common_prefix_len, ok, obj),
        _call(tito_fast.check_prefix, obj, ok, max_trim_tokens=1),
        _call(tito_fast.check_prefix, ok, obj),
        _call(tito_fast.trim_trailing, obj, {3}),
        _call(tito_fast.trim_trailing, ok, obj),
        _call(tito_fast.merge_tokens, obj, ok, append_after=(3, 4)),
        _call(tito_fast.merge_tokens, ok, obj, drop_last_if_in={3}),
        _call(tito_fast.merge_tokens, ok, ok, drop_last_if_in=obj),
        _call(tito_fast.common_prefix_len_batch, [obj, ok], [ok, obj]),
        _call(tito_fast.common_prefix_len_csr, obj, [0, 1], ok, [0, 1]),
        _call(tito_fast.common_prefix_len_csr, ok, obj, ok, [0, 1]),
        _call(tito_fast.TokenBuffer, obj),
    ):
        assert result is None or isinstance(result, (int, list, tuple, np.ndarray, Exception, tito_fast.TokenBuffer)) or hasattr(result, "__len__")


@given(obj=anything)
def test_append_after_never_crashes(obj: Any) -> None:
    _call(tito_fast.merge_tokens, [1, 2], [3], append_after=obj)
    _call(tito_fast.merge_tokens, [1, 2], [3], append_after=(2, obj))

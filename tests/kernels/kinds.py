"""Every kind of token input the public API accepts, as converters from a list."""

from __future__ import annotations

import array
from collections.abc import Callable
from typing import Any

import numpy as np

import tito_fast

MAX_ID = 2**32 - 1


def _np(dtype: str) -> Callable[[list[int]], Any]:
    def conv(ids: list[int]) -> Any:
        return np.array(ids, dtype=dtype)

    conv.__name__ = f"numpy_{dtype}"
    return conv


def _strided(ids: list[int]) -> Any:
    # Every other element of a twice-as-long array: not contiguous.
    arr = np.zeros(2 * len(ids), dtype=np.int64)
    arr[::2] = ids
    return arr[::2]


def _big_endian(ids: list[int]) -> Any:
    return np.array(ids, dtype=">u4")


def _unaligned(ids: list[int]) -> Any:
    # int32 data starting one byte into its buffer: not aligned.
    raw = b"\x00" + np.array(ids, dtype=np.int32).tobytes()
    return np.frombuffer(raw, dtype=np.int32, offset=1)


def _unaligned_memoryview(ids: list[int]) -> Any:
    raw = b"\x00" + np.array(ids, dtype=np.uint32).tobytes()
    return memoryview(raw)[1:].cast("B").cast("I")


def _array_q(ids: list[int]) -> Any:
    return array.array("q", ids)


def _memoryview(ids: list[int]) -> Any:
    return memoryview(array.array("I", ids))


def _range_like(ids: list[int]) -> Any:
    return iter(ids)


# name -> (converter, largest id it can hold)
KINDS: dict[str, tuple[Callable[[list[int]], Any], int]] = {
    "list": (list, MAX_ID),
    "tuple": (tuple, MAX_ID),
    "numpy_int32": (_np("int32"), 2**31 - 1),
    "numpy_int64": (_np("int64"), MAX_ID),
    "numpy_uint32": (_np("uint32"), MAX_ID),
    "numpy_uint64": (_np("uint64"), MAX_ID),
    "numpy_uint16": (_np("uint16"), 2**16 - 1),
    "numpy_int8": (_np("int8"), 127),
    "numpy_int16": (_np("int16"), 2**15 - 1),
    "numpy_uint8": (_np("uint8"), 255),
    "numpy_strided": (_strided, MAX_ID),
    "numpy_big_endian": (_big_endian, MAX_ID),
    "numpy_unaligned": (_unaligned, 2**31 - 1),
    "memoryview_unaligned": (_unaligned_memoryview, MAX_ID),
    "array_q": (_array_q, MAX_ID),
    "memoryview_I": (_memoryview, MAX_ID),
    "iterator": (_range_like, MAX_ID),
    "token_buffer": (tito_fast.TokenBuffer, MAX_ID),
}

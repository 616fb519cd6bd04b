"""What the comparator works with: segments, the reference's mismatch types, and
the alignment of two id sequences that the Rust core computes.

`Alignment` is `tito_fast._core.Alignment` (see `Segmenter.align`); `Verdict`
names its per-pair codes, which the core defines once (`VERDICT_*`).

Example:
    >>> Verdict(_core.VERDICT_SAME_TEXT).name
    'SAME_TEXT'
    >>> Mismatch(MismatchType.ASSISTANT_TEXT, 3, "a", "b").to_dict()["type"]
    'assistant_text'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum, IntEnum
from typing import Any

import numpy as np

from tito_fast import _core
from tito_fast._core import Alignment, TokenBuffer

#: Ids decoded to describe an assistant segment's start (the reference's choice).
ASSISTANT_PROBE_IDS = 20


class Verdict(IntEnum):
    """The core's decision for an aligned pair of segments whose ids differ."""

    #: The byte table cannot tell (no table, an unknown id, a split character): decode.
    UNKNOWN = _core.VERDICT_UNKNOWN
    #: Same text from other ids: the reference does not report it.
    SAME_TEXT = _core.VERDICT_SAME_TEXT
    #: A pair of different special ids.
    SPECIAL_TYPE = _core.VERDICT_SPECIAL_TYPE
    #: Texts differ and both segments open an assistant message.
    ASSISTANT_TEXT = _core.VERDICT_ASSISTANT_TEXT
    #: Texts differ, anywhere else.
    NON_ASSISTANT_TEXT = _core.VERDICT_NON_ASSISTANT_TEXT


@dataclass
class Segment:
    """A run of ids: one boundary (special) id, or a maximal run of other ids."""

    token_ids: list[int] = field(default_factory=list)
    is_special: bool = False


class MismatchType(Enum):
    """The reference's four kinds of difference."""

    SPECIAL_TOKEN_COUNT = "special_token_count"
    SPECIAL_TOKEN_TYPE = "special_token_type"
    NON_ASSISTANT_TEXT = "non_assistant_text"
    ASSISTANT_TEXT = "assistant_text"


@dataclass
class Mismatch:
    """One difference between an expected and an actual id sequence."""

    type: MismatchType
    segment_index: int
    expected_text: str
    actual_text: str
    detail: str = ""

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Mismatch:
        """The inverse of `to_dict`."""
        return cls(MismatchType(d["type"]), d["segment_index"], d["expected_text"], d["actual_text"], d.get("detail", ""))

    def to_dict(self) -> dict[str, Any]:
        """The reference's dict form: type, segment_index, expected_text, actual_text, detail."""
        return {
            "type": self.type.value,
            "segment_index": self.segment_index,
            "expected_text": self.expected_text,
            "actual_text": self.actual_text,
            "detail": self.detail,
        }


def as_sliceable(ids: Any) -> Any:
    """Ids in a form that can be sliced more than once (iterators are consumed)."""
    if isinstance(ids, (list, tuple, np.ndarray, TokenBuffer)):
        return ids
    return list(ids)


def as_list(ids: Any) -> list[int]:
    if isinstance(ids, list):
        return ids
    if isinstance(ids, np.ndarray):
        return ids.tolist()  # type: ignore[no-any-return]
    return [int(x) for x in ids]


__all__ = ["ASSISTANT_PROBE_IDS", "Alignment", "Mismatch", "MismatchType", "Segment", "Verdict", "as_list", "as_sliceable"]

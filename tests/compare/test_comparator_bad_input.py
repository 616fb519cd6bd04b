"""Bad or unusual input to the comparator: a documented, tested result, never a crash."""

from __future__ import annotations

import numpy as np
import pytest

from tests.compare.test_comparator_parity import _session, _tokenizer
from tito_fast import TokenInputError, TokenSeqComparator
from tito_fast.testing.reference import ReferenceComparator

START = "<|im_start|>assistant"


def _pair() -> tuple[TokenSeqComparator, ReferenceComparator]:
    tok = _tokenizer("qwen3")
    return TokenSeqComparator(tok, START), ReferenceComparator(tok, START)


def test_ids_outside_the_vocabulary_decode_as_the_tokenizer_does() -> None:
    fast, ref = _pair()
    ids = _session("qwen3")
    actual = list(ids)
    actual[5] = 10_000_000  # no such id: HF decode skips it, like the reference
    got = [m.to_dict() for m in fast.compare_sequences(ids, actual)]
    assert got == ref.compare(ids, actual) and len(got) == 1
    d = fast.diagnose(ids, actual)
    assert len(d.warnings) == 1 and "outside the tokenizer's 151669" in d.warnings[0]
    assert "position 5" in d.warnings[0]
    assert fast.diagnose(ids, ids).warnings == []


def test_trim_sets_that_empty_a_sequence() -> None:
    fast, ref = _pair()
    ids = _session("qwen3")
    everything = set(ids)
    assert fast.compare_sequences(ids, ids, trim_trailing_ids=everything) == []
    got = [m.to_dict() for m in fast.compare_sequences(ids, ids[:3] + [7], trim_trailing_ids={7})]
    assert got == ref.compare(ids, ids[:3] + [7], trim_trailing_ids={7})
    # One side trimmed to nothing: a structural difference, as in the reference.
    got = [m.to_dict() for m in fast.compare_sequences([7, 7], ids, trim_trailing_ids={7})]
    assert got == ref.compare([7, 7], ids, trim_trailing_ids={7})
    assert got[0]["type"] == "special_token_count" and got[0]["expected_text"] == ""


def test_empty_sequences() -> None:
    fast, ref = _pair()
    assert fast.compare_sequences([], []) == [] == ref.compare([], [])
    got = [m.to_dict() for m in fast.compare_sequences([], _session("qwen3"))]
    assert got == ref.compare([], _session("qwen3"))
    assert fast.segment_by_special_tokens(np.array([], dtype=np.int32)) == []


@pytest.mark.parametrize("bad", [[1, -1], [1.5], [None], "text", np.zeros((2, 2), dtype=np.int32)])
def test_invalid_ids_raise_token_input_error(bad: object) -> None:
    fast, _ = _pair()
    with pytest.raises(TokenInputError) as info:
        fast.compare_sequences(bad, [1, 2])
    assert info.value.argument == "expected_ids"
    with pytest.raises(TokenInputError) as info:
        fast.compare_sequences([1, 2], bad)
    assert info.value.argument == "actual_ids"
    with pytest.raises(TokenInputError):
        fast.compare_batch([[1]], [bad])


def test_every_input_kind() -> None:
    fast, ref = _pair()
    ids = _session("qwen3")
    actual = list(ids)
    actual[10] += 1
    want = ref.compare(ids, actual)
    from tito_fast import TokenBuffer

    for conv in (list, tuple, lambda x: np.array(x, dtype=np.int32), lambda x: np.array(x, dtype=np.uint32), TokenBuffer, iter):
        got = [m.to_dict() for m in fast.compare_sequences(conv(ids), conv(actual))]
        assert got == want


def test_batch_errors_name_the_row_and_side() -> None:
    from tito_fast import TokenInputError
    from tito_fast._core import Segmenter

    seg = Segmenter({9})
    with pytest.raises(TokenInputError, match=r"expected_seqs\[1\]") as e:
        seg.align_batch([[1, 2], [1, -1]], [[1, 2], [1, 2]])
    assert e.value.argument == "expected_seqs[1]" and e.value.position == 1
    with pytest.raises(TokenInputError, match=r"actual_seqs\[0\]"):
        seg.align_batch([[1, 2]], [[1, 2**32]])
    with pytest.raises(TokenInputError, match="actual_ids"):
        seg.align([1, 2], [1, -3])

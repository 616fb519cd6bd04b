"""The per-id byte table on real tokenizers, and its self-check."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from tests.compare.test_comparator_parity import FAMILIES, _session, _tokenizer
from tito_fast.compare.comparator import TokenSeqComparator
from tito_fast.testing import fixtures
from tito_fast.testing.reference import ReferenceComparator
from tito_fast.tokenizer.vocab import Vocab


@pytest.mark.parametrize("family", FAMILIES)
def test_real_tokenizers_are_byte_exact(family: str) -> None:
    tok = _tokenizer(family)
    v = Vocab.from_tokenizer(tok)
    assert v.byte_exact, v.reason
    assert Vocab.from_tokenizer(tok) is v  # built once, cached
    ids = _session(family)
    text = tok.decode(ids, skip_special_tokens=False)
    assert b"".join(v.id_bytes(i) for i in ids).decode("utf-8") == text
    assert v.boundary_ids == frozenset(TokenSeqComparator.collect_special_ids(tok))


def test_known_bytes_and_errors() -> None:
    v = Vocab.from_tokenizer(_tokenizer("qwen3"))
    assert v.id_bytes(3838) == b"What" and v.id_bytes(151645) == b"<|im_end|>"
    assert v.id_bytes(151667) == b"<think>"  # an added token that is not special
    with pytest.raises(IndexError, match="outside the vocabulary"):
        v.id_bytes(v.size)
    clone = pickle.loads(pickle.dumps(v))
    assert clone.blob == v.blob and clone.byte_exact and clone.boundary_ids == v.boundary_ids


def test_from_directory() -> None:
    v = Vocab.from_tokenizer(fixtures.tokenizer_dir("glm47"))
    assert v.byte_exact and v.id_bytes(3838) == b"What"


class SpaceCleaningTokenizer:
    """A tokenizer whose decode cleans up spaces: its bytes no longer match decode()."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def decode(self, ids: Any, **kwargs: Any) -> str:
        return str(self.inner.decode(ids, **kwargs)).replace(" .", ".").replace(" ,", ",")


def test_self_check_catches_a_decoder_that_is_not_byte_exact() -> None:
    tok = SpaceCleaningTokenizer(_tokenizer("qwen3"))
    v = Vocab.from_tokenizer(tok)
    assert not v.byte_exact and "decode(" in v.reason
    # The comparator then decodes and still agrees with the reference.
    fast = TokenSeqComparator(tok, "<|im_start|>assistant")
    ref = ReferenceComparator(tok, "<|im_start|>assistant")
    base = tok.encode("a , b", add_special_tokens=False)
    other = tok.encode("a, b", add_special_tokens=False)
    assert base != other
    assert [m.to_dict() for m in fast.compare_sequences(base, other)] == ref.compare(base, other) == []


def test_tokenizer_that_is_not_byte_level() -> None:
    from tokenizers import Tokenizer, models

    raw = Tokenizer(models.WordLevel({"a": 0, "b": 1, "[UNK]": 2}, unk_token="[UNK]"))
    v = Vocab.from_tokenizer(raw)
    assert not v.byte_exact and "not byte-level BPE" in v.reason
    fast = TokenSeqComparator(raw, None, special_token_ids={2})
    ref = ReferenceComparator(raw, None, special_token_ids={2})
    assert [m.to_dict() for m in fast.compare_sequences([0, 2, 1], [1, 2, 1])] == ref.compare([0, 2, 1], [1, 2, 1])

"""The per-id byte table of a tokenizer: what each id decodes to, as bytes.

With it, two runs of ids can be compared as text without decoding them
(see the Rust `ByteTable`). It is built once per tokenizer and checked: the
table is marked `byte_exact` only when, on a sample of id sequences and on
probes for known decoder quirks, concatenating the table's bytes gives
exactly what `tokenizer.decode(..., skip_special_tokens=False)` gives.
Tokenizers it cannot read (not byte-level BPE) get a table marked not
byte-exact with the reason; comparisons then decode, which is always right.

Example:
    >>> from tito_fast import fixtures
    >>> from tito_fast.tokenizer.vocab import Vocab
    >>> v = Vocab.from_tokenizer(fixtures.load_tokenizer("qwen3"))  # doctest: +SKIP
    >>> v.byte_exact, v.id_bytes(3838)  # doctest: +SKIP
    (True, b'What')
"""

from __future__ import annotations

import functools

import json
import random
import weakref
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from tito_fast import _deps
from tito_fast._core import Segmenter
from tito_fast.tokenizer import cache as table_cache
from tito_fast.tokenizer.backend import decode_settings, kind, require_backend, special_ids

#: Strings that expose decoder quirks (space clean-up, prefix spaces, unicode).
PROBES = ["a . b , c ! d ? e", "don't I'm it's we've they're", " leading", "x  y\n\n z\t", "你好🙂é", "<think>\nok\n</think>"]


@cache
def byte_decoder() -> dict[str, int]:
    """Inverse of the GPT-2 byte-to-unicode map used by byte-level BPE."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars = list(keep)
    extra = 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(keep, chars)}


def _is_byte_level(decoder: dict[str, Any] | None) -> bool:
    if decoder is None:
        return False
    if decoder.get("type") == "Sequence":
        return [d.get("type") for d in decoder.get("decoders", [])] == ["ByteLevel"]
    return decoder.get("type") == "ByteLevel"


@dataclass(frozen=True, eq=False)
class Vocab:
    """Bytes of every id, the boundary ids, and whether bytes provably match `decode()`."""

    offsets: np.ndarray
    blob: bytes
    added_ids: frozenset[int]
    boundary_ids: frozenset[int]
    byte_exact: bool
    reason: str = ""
    _segmenter: Any = field(default=None, repr=False, compare=False)

    @property
    def size(self) -> int:
        """Number of ids in the table (ids at or above it are unknown)."""
        return len(self.offsets) - 1

    @functools.cached_property
    def lengths(self) -> np.ndarray:
        """The number of bytes of each id (int64)."""
        return np.diff(self.offsets.astype(np.int64))

    def id_bytes(self, token_id: int) -> bytes:
        """The bytes id `token_id` decodes to."""
        if not 0 <= token_id < self.size:
            raise IndexError(f"token id {token_id} is outside the vocabulary of {self.size} ids")
        return self.blob[self.offsets[token_id] : self.offsets[token_id + 1]]

    def segmenter(self, boundary_ids: frozenset[int] | None = None) -> Segmenter:
        """A Rust segmenter over `boundary_ids` (default: the detected ones) with this byte table when byte-exact."""
        ids = self.boundary_ids if boundary_ids is None else boundary_ids
        if not self.byte_exact:
            return Segmenter(ids)
        return Segmenter(ids, self.offsets, self.blob, self.added_ids)

    def __reduce__(self) -> tuple[Any, ...]:
        return (Vocab, (self.offsets, self.blob, self.added_ids, self.boundary_ids, self.byte_exact, self.reason))

    @classmethod
    def from_tokenizer(cls, tokenizer: Any, *, samples: int = 300, seed: int = 0) -> Vocab:
        """Build (or fetch from the cache) the table of `tokenizer`.

        Args:
            tokenizer: a transformers fast tokenizer, a `tokenizers.Tokenizer`,
                or a directory holding tokenizer files.
            samples: random id sequences used to check byte-exactness.
            seed: seed of those samples.
        """
        if isinstance(tokenizer, (str, Path)):
            tokenizer = _deps.transformers().AutoTokenizer.from_pretrained(str(tokenizer))
        try:
            cached = _CACHE.get(tokenizer)
        except TypeError:  # not weak-referenceable
            cached = None
        if cached is not None:
            return cached
        vocab = _build(tokenizer, samples, seed)
        vocab.remember(tokenizer)
        return vocab

    def remember(self, tokenizer: Any) -> None:
        """Make this the table `from_tokenizer(tokenizer)` returns (e.g. a table built
        elsewhere and sent to a worker process with its tokenizer)."""
        try:
            _CACHE[tokenizer] = self
        except TypeError:  # not weak-referenceable: nothing to remember it by
            pass


_CACHE: weakref.WeakKeyDictionary[Any, Vocab] = weakref.WeakKeyDictionary()


def _boundary_ids(tokenizer: Any, added: list[dict[str, Any]]) -> frozenset[int]:
    if hasattr(tokenizer, "all_special_ids"):
        return frozenset(special_ids(tokenizer))
    return frozenset(int(t["id"]) for t in added if t.get("special"))


def _encode(tokenizer: Any, text: str) -> list[int]:
    """The ids of `text` without special tokens: a transformers tokenizer gives
    a list, a `tokenizers.Tokenizer` an `Encoding`."""
    out = tokenizer.encode(text, add_special_tokens=False)
    return list(getattr(out, "ids", out))


def _decode(tokenizer: Any, ids: list[int]) -> str:
    return str(tokenizer.decode(ids, skip_special_tokens=False))


def _build(tokenizer: Any, samples: int, seed: int) -> Vocab:
    """The table: kept on disk by the tokenizer's JSON and what else it is
    built from (`tokenizer.cache`), else built and kept."""
    backend = require_backend(tokenizer)
    specials = sorted(special_ids(tokenizer)) if hasattr(tokenizer, "all_special_ids") else None
    settings = decode_settings(tokenizer)  # what changes decode() besides the JSON
    name = table_cache.key("vocab", table_cache.digest(backend), kind(tokenizer), specials, settings, samples, seed)
    got = table_cache.load(name)
    if got is not None:
        try:
            return Vocab(
                got["offsets"], got["blob"].tobytes(), frozenset(got["added_ids"].tolist()),
                frozenset(got["boundary_ids"].tolist()), byte_exact=bool(got["byte_exact"]), reason=table_cache.array_text(got["reason"]),
            )  # fmt: skip
        except (KeyError, ValueError, UnicodeDecodeError):  # a file of another layout: build it again
            pass
    vocab = _build_table(tokenizer, json.loads(backend.to_str()), samples, seed)
    table_cache.store(name, {
        "offsets": vocab.offsets, "blob": np.frombuffer(vocab.blob, dtype=np.uint8),
        "added_ids": np.array(sorted(vocab.added_ids), dtype=np.int64),
        "boundary_ids": np.array(sorted(vocab.boundary_ids), dtype=np.int64),
        "byte_exact": np.array(vocab.byte_exact), "reason": table_cache.text_array(vocab.reason),
    })  # fmt: skip
    return vocab


def _build_table(tokenizer: Any, spec: dict[str, Any], samples: int, seed: int) -> Vocab:
    model = spec.get("model", {})
    added = spec.get("added_tokens", [])
    pieces: dict[int, bytes] = {}
    reason = ""
    added_ids = frozenset(int(t["id"]) for t in added)
    if model.get("type") != "BPE" or not _is_byte_level(spec.get("decoder")):
        reason = f"not byte-level BPE (model {model.get('type')}, decoder {(spec.get('decoder') or {}).get('type')})"
    else:
        table = byte_decoder()
        for token, i in model["vocab"].items():
            if int(i) in added_ids:
                continue  # decoded from its added-token content below
            try:
                pieces[int(i)] = bytes(table[c] for c in token)
            except KeyError:
                reason = f"vocabulary entry {token!r} is not in byte-level form"
                break
    for t in added:
        pieces[int(t["id"])] = t["content"].encode("utf-8")
    size = max(pieces, default=-1) + 1
    lengths = np.zeros(size, dtype=np.int64)
    for i, b in pieces.items():
        lengths[i] = len(b)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.uint32)
    blob = b"".join(pieces.get(i, b"") for i in range(size))
    boundary = _boundary_ids(tokenizer, added)
    vocab = Vocab(offsets, blob, added_ids, boundary, byte_exact=not reason, reason=reason)
    if not reason:
        reason = _self_check(tokenizer, vocab, samples, seed)
        if reason:
            vocab = Vocab(offsets, blob, added_ids, boundary, byte_exact=False, reason=reason)
    return vocab


def _self_check(tokenizer: Any, vocab: Vocab, samples: int, seed: int) -> str:
    """Empty when the table's bytes match `decode()` on every check; else why not."""
    seg = Segmenter([], vocab.offsets, vocab.blob, vocab.added_ids)
    rng = random.Random(seed)
    added = sorted(vocab.added_ids)
    sequences = [_encode(tokenizer, p) for p in PROBES]
    for _ in range(samples):
        seq = [rng.randrange(vocab.size) for _ in range(rng.randrange(1, 12))]
        if added and rng.random() < 0.5:
            seq.insert(rng.randrange(len(seq) + 1), rng.choice(added))
        sequences.append(seq)
    for seq in sequences:
        raw = seg.text_bytes(seq)
        if raw is None:
            continue  # undecidable sequences are decoded anyway
        want = _decode(tokenizer, seq)
        if raw.decode("utf-8") != want:
            return f"decode({seq}) is {want!r}, the byte table gives {raw.decode('utf-8')!r}"
    return ""

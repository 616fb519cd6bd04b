"""A tokenizer folder without transformers on the path: what tito_fast asks
of a tokenizer, kept on disk the first time the folder is loaded.

Importing transformers and loading a tokenizer through it takes about a
second, more than scoring a small dump. What scoring asks of the tokenizer
is small: its chat template, special and added tokens, a few settings, the
SHA-256 of its JSON (the key of the byte table and the Rust encoder's
tables, `tokenizer.cache`) and a few answers (`encode` of the encoder's
probes, `decode` of a stop id, `convert_tokens_to_ids` of a family's
tokens). `SnapshotTokenizer` holds those, read from a small JSON file kept
with the tables, and answers as the tokenizer does. Anything else (an
attribute it does not hold, a call it has not seen) loads the tokenizer
with transformers then, answers from it and keeps the new answer, so every
answer is the tokenizer's own and a later run has it at hand.

The file's key is the folder's files (name, size, modification time), the
installed versions of transformers and tokenizers, and tito_fast's: a
changed folder or upgraded package gets a new file, never a stale answer.
`TITO_FAST_TABLES=off` turns it off with the tables (`tokenizer.cache`).

Example:
    >>> from tito_fast.tokenizer.load import load_tokenizer
    >>> tok = load_tokenizer("fixture:qwen3", snapshot=True)  # doctest: +SKIP
    >>> tok.convert_tokens_to_ids("<|im_end|>")  # doctest: +SKIP
    151645
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tito_fast import _deps
from tito_fast.tokenizer import cache

#: Bumped when what a snapshot holds changes.
FORMAT = 1
#: Answers kept per snapshot (calls past it are answered, not kept).
MEMO_LIMIT = 4096
#: Texts and id lists longer than this are answered, not kept.
MEMO_ITEM_LIMIT = 512

#: Plain attributes kept as the tokenizer has them (when it has them).
SCALARS = (
    "split_special_tokens", "eos_token", "eos_token_id", "bos_token", "bos_token_id", "pad_token",
    "pad_token_id", "unk_token", "unk_token_id", "padding_side", "truncation_side", "model_max_length",
)  # fmt: skip
_MISSING = object()


@dataclass(frozen=True)
class AddedTokenFacts:
    """An added token as `added_tokens_decoder` describes it (the fields tito_fast reads)."""

    content: str
    special: bool
    lstrip: bool
    rstrip: bool
    single_word: bool
    normalized: bool

    @classmethod
    def of(cls, t: Any) -> AddedTokenFacts:
        return cls(str(t.content), bool(t.special), bool(t.lstrip), bool(t.rstrip), bool(t.single_word), bool(t.normalized))

    def row(self) -> list[Any]:
        return [self.content, self.special, self.lstrip, self.rstrip, self.single_word, self.normalized]


def _added(rows: dict[str, list[Any]]) -> dict[int, AddedTokenFacts]:
    return {int(k): AddedTokenFacts(*v) for k, v in rows.items()}


def _jsonable(v: Any) -> bool:
    try:
        return bool(json.loads(json.dumps(v)) == v)
    except (TypeError, ValueError):
        return False


def folder_key(path: Path) -> str | None:
    """The key of a tokenizer folder's snapshot: its files (name, size,
    modification time), the installed transformers and tokenizers, and
    tito_fast's code; None when the folder cannot be read."""
    try:
        real = path.resolve()
        files = sorted((e.name, e.stat().st_size, e.stat().st_mtime_ns) for e in os.scandir(real) if e.is_file())
    except OSError:
        return None
    versions = cache.versions(("transformers", "tokenizers"))
    h = hashlib.sha256(repr((FORMAT, cache.code_stamp(), str(real), files, versions)).encode("utf-8")).hexdigest()
    return f"tokenizer-{h[:40]}.json"


class _Memo:
    """Answers the tokenizer gave, by kind and key, kept in the snapshot file."""

    def __init__(self, data: dict[str, dict[str, Any]]) -> None:
        self.data = data
        self.count = sum(len(v) for v in data.values())
        self.dirty = False
        self.lock = threading.Lock()

    def get(self, kind: str, key: str, answer: Callable[[], Any]) -> Any:
        with self.lock:
            got = self.data.get(kind, {}).get(key, _MISSING)
        if got is not _MISSING:
            return got
        value = answer()
        if len(key) <= MEMO_ITEM_LIMIT and _jsonable(value):
            with self.lock:
                if self.count < MEMO_LIMIT and key not in self.data.get(kind, {}):
                    self.data.setdefault(kind, {})[key] = value
                    self.count += 1
                    self.dirty = True
        return value

    def dump(self) -> str:
        """The answers as JSON text (made under the lock: other threads may be adding)."""
        with self.lock:
            self.dirty = False
            return json.dumps(self.data, ensure_ascii=False)


class _Shared:
    """What a `SnapshotTokenizer` and its backend share: the folder, the
    facts, the kept answers, where they are kept, and the tokenizer itself
    (loaded by `load` when first needed)."""

    def __init__(self, path: Path, facts: dict[str, Any], memo: _Memo, name: str | None, load: Callable[[], Any], real: Any) -> None:
        self.path, self.facts, self.memo, self.name, self.load, self.real = path, facts, memo, name, load, real
        self.lock = threading.Lock()
        self.where = cache.directory()  # where it was read: saved there, whatever the environment says at exit

    def tokenizer(self) -> Any:
        """The tokenizer itself (loaded with transformers on first use)."""
        with self.lock:
            if self.real is None:
                self.real = self.load()
            return self.real

    def backend(self) -> Any:
        """The tokenizer's own `tokenizers.Tokenizer`."""
        from tito_fast.tokenizer.backend import require_backend

        return require_backend(self.tokenizer())

    def save(self) -> None:
        if self.name is None or self.where is None or not self.memo.dirty:
            return
        facts = json.dumps(self.facts, ensure_ascii=False)
        text = f'{{"format": {FORMAT}, "facts": {facts}, "memo": {self.memo.dump()}}}'
        cache.store_text(self.name, text, where=self.where)


class _Encoding:
    """What `tokenizers` returns for one text, as far as tito_fast reads it."""

    __slots__ = ("ids",)

    def __init__(self, ids: list[int]) -> None:
        self.ids = ids


class SnapshotBackend:
    """The `tokenizers.Tokenizer` behind a `SnapshotTokenizer`: its digest,
    sizes, flags, added tokens and normalizer from the snapshot, `encode`
    answers kept, anything else from the real backend (loaded then)."""

    def __init__(self, shared: _Shared) -> None:
        self._s = shared
        self._normalizer: Any = _MISSING

    @property
    def known_digest(self) -> str:
        """The SHA-256 of the tokenizer's JSON (`cache.digest` takes it from here)."""
        return str(self._s.facts["backend"]["digest"])

    def get_vocab_size(self, with_added_tokens: bool = True) -> int:
        b = self._s.facts["backend"]
        return int(b["vocab_size_added"] if with_added_tokens else b["vocab_size"])

    @property
    def truncation(self) -> None:
        return None  # snapshots are made only of tokenizers that neither truncate nor pad

    @property
    def padding(self) -> None:
        return None

    @property
    def encode_special_tokens(self) -> bool:
        return bool(self._s.facts["backend"]["encode_special_tokens"])

    def get_added_tokens_decoder(self) -> dict[int, AddedTokenFacts]:
        return _added(self._s.facts["backend"]["added"])

    @property
    def normalizer(self) -> Any:
        """The normalizer, built from its JSON alone (no vocabulary to read)."""
        if self._normalizer is _MISSING:
            spec = self._s.facts["backend"]["normalizer"]
            if spec is None:
                self._normalizer = None
            else:
                minimal = {
                    "version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": spec,
                    "pre_tokenizer": None, "post_processor": None, "decoder": None,
                    "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                              "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": {}, "merges": []},
                }  # fmt: skip
                try:
                    self._normalizer = _deps.tokenizers().Tokenizer.from_str(json.dumps(minimal)).normalizer
                except Exception:  # a normalizer this tokenizers cannot build alone: the tokenizer's own
                    self._normalizer = self._s.backend().normalizer
        return self._normalizer

    def encode(self, text: str, add_special_tokens: bool = True) -> _Encoding:
        return self.encode_batch([text], add_special_tokens=add_special_tokens)[0]

    def encode_batch(self, texts: list[str], add_special_tokens: bool = True) -> list[_Encoding]:
        out = []
        for text in texts:
            key = json.dumps([text, bool(add_special_tokens)], ensure_ascii=False)

            def answer(t: str = text) -> list[int]:
                return [int(i) for i in self._s.backend().encode(t, add_special_tokens=add_special_tokens).ids]

            out.append(_Encoding(list(self._s.memo.get("backend_encode", key, answer))))
        return out

    encode_batch_fast = encode_batch

    def to_str(self, pretty: bool = False) -> str:
        """The tokenizer's JSON (from the tokenizer itself: the snapshot keeps only its digest)."""
        return str(self._s.backend().to_str(pretty))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_s":
            raise AttributeError(name)
        return getattr(self._s.backend(), name)


class SnapshotTokenizer:
    """A tokenizer folder's tokenizer, answering from its snapshot (see the
    module doc) and from the tokenizer itself, loaded with transformers,
    for anything the snapshot does not hold."""

    def __init__(self, path: Path, facts: dict[str, Any], memo: dict[str, dict[str, Any]], name: str | None,
                 load: Callable[[], Any], real: Any = None) -> None:  # fmt: skip
        self._s = _Shared(path, facts, _Memo(memo), name, load, real)
        self._backend = SnapshotBackend(self._s)
        _LIVE.add(self)

    # -- facts -------------------------------------------------------------

    @property
    def snapshot_type(self) -> str:
        """The class of the tokenizer it stands for (`backend.kind`)."""
        return str(self._s.facts["type"])

    @property
    def decode_settings(self) -> list[tuple[str, str]]:
        """The settings that change `decode()`, as `backend.decode_settings` reads them."""
        return [(str(k), str(v)) for k, v in self._s.facts["settings"]]

    @property
    def backend_tokenizer(self) -> SnapshotBackend:
        return self._backend

    _tokenizer = backend_tokenizer

    @property
    def chat_template(self) -> Any:
        return self._s.facts["chat_template"]

    @property
    def special_tokens_map(self) -> dict[str, Any]:
        return dict(self._s.facts["special_tokens_map"])

    @property
    def all_special_ids(self) -> list[int]:
        return list(self._s.facts["all_special_ids"])

    @property
    def all_special_tokens(self) -> list[str]:
        return list(self._s.facts["all_special_tokens"])

    @property
    def added_tokens_decoder(self) -> dict[int, AddedTokenFacts]:
        return _added(self._s.facts["added_tokens_decoder"])

    def get_added_vocab(self) -> dict[str, int]:
        return dict(self._s.facts["added_vocab"])

    def __len__(self) -> int:
        return int(self._s.facts["len"])

    # -- answers -------------------------------------------------------------

    def encode(self, text: str, add_special_tokens: bool = True, **kwargs: Any) -> list[int]:
        real = self._s.tokenizer
        if kwargs or not isinstance(text, str):
            return real().encode(text, add_special_tokens=add_special_tokens, **kwargs)  # type: ignore[no-any-return]
        key = json.dumps([text, bool(add_special_tokens)], ensure_ascii=False)
        return list(self._s.memo.get("encode", key, lambda: list(real().encode(text, add_special_tokens=add_special_tokens))))

    def decode(self, ids: Any, skip_special_tokens: bool = False, **kwargs: Any) -> str:
        real = self._s.tokenizer
        try:
            as_list = [int(ids)] if isinstance(ids, int) else [int(i) for i in ids]
        except (TypeError, ValueError):  # not ids as the snapshot keeps them: the tokenizer says what it makes of them
            as_list = None
        if kwargs or as_list is None or len(as_list) > MEMO_ITEM_LIMIT:
            return str(real().decode(ids, skip_special_tokens=skip_special_tokens, **kwargs))
        key = json.dumps([as_list, bool(skip_special_tokens), isinstance(ids, int)])
        return str(self._s.memo.get("decode", key, lambda: str(real().decode(ids, skip_special_tokens=skip_special_tokens))))

    def convert_tokens_to_ids(self, tokens: Any) -> Any:
        real = self._s.tokenizer
        if isinstance(tokens, str):
            return self._s.memo.get("tokens_to_ids", tokens, lambda: real().convert_tokens_to_ids(tokens))
        if isinstance(tokens, (list, tuple)) and all(isinstance(t, str) for t in tokens):
            return self._s.memo.get("tokens_to_ids_list", json.dumps(list(tokens), ensure_ascii=False), lambda: real().convert_tokens_to_ids(tokens))
        return real().convert_tokens_to_ids(tokens)

    def convert_ids_to_tokens(self, ids: Any, skip_special_tokens: bool = False) -> Any:
        real = self._s.tokenizer
        if isinstance(ids, int):
            key = json.dumps([ids, bool(skip_special_tokens)])
            return self._s.memo.get("ids_to_tokens", key, lambda: real().convert_ids_to_tokens(ids, skip_special_tokens))
        try:
            key = json.dumps([[int(i) for i in ids], bool(skip_special_tokens)])
        except (TypeError, ValueError):
            return real().convert_ids_to_tokens(ids, skip_special_tokens)
        return self._s.memo.get("ids_to_tokens_list", key, lambda: real().convert_ids_to_tokens(ids, skip_special_tokens))

    @property
    def name_or_path(self) -> str:
        """The folder as this run named it (what transformers reports for a folder it loaded)."""
        return str(self._s.path)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_s", "_backend"):
            raise AttributeError(name)
        scalars = self._s.facts.get("scalars", {})
        if name in scalars:
            return scalars[name]
        return getattr(self._s.tokenizer(), name)

    # -- the tokenizer itself, when needed -----------------------------------

    @property
    def loaded(self) -> bool:
        """Whether the tokenizer itself was loaded (something the snapshot did not hold was asked)."""
        return self._s.real is not None

    def save(self) -> None:
        """Keep the answers learnt since it was read (nothing when none are new or the cache is off)."""
        self._s.save()

    def __reduce__(self) -> tuple[Any, ...]:
        s = self._s
        return (SnapshotTokenizer, (s.path, s.facts, s.memo.data, s.name, s.load))

    def __repr__(self) -> str:
        return f"SnapshotTokenizer({str(self._s.path)!r}, {self.snapshot_type}, loaded={self.loaded})"


_LIVE: weakref.WeakSet[SnapshotTokenizer] = weakref.WeakSet()


@atexit.register
def _save_all() -> None:
    for tok in list(_LIVE):
        try:
            tok.save()
        except Exception:  # a cache that cannot be written: the next run learns the answers again
            pass


def facts_of(tokenizer: Any) -> dict[str, Any] | None:
    """What a snapshot holds of a transformers tokenizer, or None when it
    cannot stand for it (not a fast tokenizer, one that truncates or pads,
    or a fact that is not plain data)."""
    from tito_fast.tokenizer.backend import backend_of, decode_settings, kind

    backend = backend_of(tokenizer)
    if backend is None or not hasattr(backend, "to_str") or backend.truncation is not None or backend.padding is not None:
        return None
    text = backend.to_str()
    spec = json.loads(text)
    try:
        facts: dict[str, Any] = {
            "type": kind(tokenizer),
            "settings": [list(x) for x in decode_settings(tokenizer)],
            "chat_template": getattr(tokenizer, "chat_template", None),
            "special_tokens_map": dict(getattr(tokenizer, "special_tokens_map", {}) or {}),
            "all_special_ids": [int(i) for i in tokenizer.all_special_ids],
            "all_special_tokens": [str(t) for t in tokenizer.all_special_tokens],
            "added_tokens_decoder": {str(int(i)): AddedTokenFacts.of(t).row() for i, t in tokenizer.added_tokens_decoder.items()},
            "added_vocab": {str(k): int(v) for k, v in tokenizer.get_added_vocab().items()},
            "len": len(tokenizer),
            "scalars": {k: v for k in SCALARS if (v := getattr(tokenizer, k, _MISSING)) is not _MISSING and _jsonable(v)},
            "backend": {
                "digest": cache.digest(backend, text=text),  # the JSON read once
                "vocab_size": int(backend.get_vocab_size(with_added_tokens=False)),
                "vocab_size_added": int(backend.get_vocab_size(with_added_tokens=True)),
                "encode_special_tokens": bool(getattr(backend, "encode_special_tokens", False)),
                "added": {str(int(i)): AddedTokenFacts.of(t).row() for i, t in backend.get_added_tokens_decoder().items()},
                "normalizer": spec.get("normalizer"),
            },
        }
        return dict(json.loads(json.dumps(facts, ensure_ascii=False)))  # as a later run reads it
    except Exception:  # a fact missing or not plain data: no snapshot, the tokenizer itself answers
        return None


def load(path: Path, loader: Callable[[], Any]) -> Any:
    """The tokenizer in folder `path`: a `SnapshotTokenizer` from its kept
    snapshot, else the tokenizer `loader()` loads (with transformers),
    behind a new snapshot that is kept for the next run (the tokenizer
    itself when no snapshot can stand for it, or the cache is off).
    `loader` is pickled with the snapshot (a worker loads the tokenizer
    with it when it must): a module-level function or a `partial` of one."""
    name = folder_key(path) if cache.directory() is not None else None
    if name is not None:
        data = cache.load_json(name)
        try:
            if isinstance(data, dict) and data.get("format") == FORMAT:
                return SnapshotTokenizer(path, dict(data["facts"]), dict(data["memo"]), name, loader)
        except (KeyError, TypeError, ValueError):  # another layout: record it again
            pass
    real = loader()
    if name is None:
        return real
    facts = facts_of(real)
    if facts is None:
        return real
    tok = SnapshotTokenizer(path, facts, {}, name, loader, real=real)
    cache.store_json(name, {"format": FORMAT, "facts": facts, "memo": {}})
    return tok


__all__ = ["AddedTokenFacts", "SnapshotBackend", "SnapshotTokenizer", "facts_of", "folder_key", "load"]

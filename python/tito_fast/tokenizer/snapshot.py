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
import tempfile
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
    "name_or_path", "split_special_tokens", "eos_token", "eos_token_id", "bos_token", "bos_token_id", "pad_token",
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
        self.dirty = False
        self.lock = threading.Lock()

    def size(self) -> int:
        return sum(len(v) for v in self.data.values())

    def get(self, kind: str, key: str, answer: Callable[[], Any]) -> Any:
        with self.lock:
            got = self.data.get(kind, {}).get(key, _MISSING)
        if got is not _MISSING:
            return got
        value = answer()
        if len(key) <= MEMO_ITEM_LIMIT * 8 and self.size() < MEMO_LIMIT and _jsonable(value):
            with self.lock:
                self.data.setdefault(kind, {})[key] = value
                self.dirty = True
        return value


class _Encoding:
    """What `tokenizers` returns for one text, as far as tito_fast reads it."""

    __slots__ = ("ids",)

    def __init__(self, ids: list[int]) -> None:
        self.ids = ids


class SnapshotBackend:
    """The `tokenizers.Tokenizer` behind a `SnapshotTokenizer`: its digest,
    sizes, flags, added tokens and normalizer from the snapshot, `encode`
    answers kept, anything else from the real backend (loaded then)."""

    def __init__(self, owner: SnapshotTokenizer) -> None:
        self._owner = owner
        self._normalizer: Any = _MISSING

    @property
    def known_digest(self) -> str:
        """The SHA-256 of the tokenizer's JSON (`cache.digest` takes it from here)."""
        return str(self._owner._facts["backend"]["digest"])

    def get_vocab_size(self, with_added_tokens: bool = True) -> int:
        b = self._owner._facts["backend"]
        return int(b["vocab_size_added"] if with_added_tokens else b["vocab_size"])

    @property
    def truncation(self) -> None:
        return None  # snapshots are made only of tokenizers that neither truncate nor pad

    @property
    def padding(self) -> None:
        return None

    @property
    def encode_special_tokens(self) -> bool:
        return bool(self._owner._facts["backend"]["encode_special_tokens"])

    def get_added_tokens_decoder(self) -> dict[int, AddedTokenFacts]:
        return _added(self._owner._facts["backend"]["added"])

    @property
    def normalizer(self) -> Any:
        """The normalizer, built from its JSON alone (no vocabulary to read)."""
        if self._normalizer is _MISSING:
            spec = self._owner._facts["backend"]["normalizer"]
            if spec is None:
                self._normalizer = None
            else:
                minimal = {
                    "version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": spec,
                    "pre_tokenizer": None, "post_processor": None, "decoder": None,
                    "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                              "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": {}, "merges": []},
                }  # fmt: skip
                self._normalizer = _deps.tokenizers().Tokenizer.from_str(json.dumps(minimal)).normalizer
        return self._normalizer

    def encode(self, text: str, add_special_tokens: bool = True) -> _Encoding:
        return self.encode_batch([text], add_special_tokens=add_special_tokens)[0]

    def encode_batch(self, texts: list[str], add_special_tokens: bool = True) -> list[_Encoding]:
        out = []
        for text in texts:
            key = json.dumps([text, bool(add_special_tokens)], ensure_ascii=False)

            def answer(t: str = text) -> list[int]:
                return [int(i) for i in self._owner._real_backend().encode(t, add_special_tokens=add_special_tokens).ids]

            out.append(_Encoding(list(self._owner._memo.get("backend_encode", key, answer))))
        return out

    encode_batch_fast = encode_batch

    def to_str(self, pretty: bool = False) -> str:
        """The tokenizer's JSON (from the tokenizer itself: the snapshot keeps only its digest)."""
        return str(self._owner._real_backend().to_str(pretty))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._owner._real_backend(), name)


class SnapshotTokenizer:
    """A tokenizer folder's tokenizer, answering from its snapshot (see the
    module doc) and from the tokenizer itself, loaded with transformers,
    for anything the snapshot does not hold."""

    def __init__(self, path: Path, facts: dict[str, Any], memo: dict[str, dict[str, Any]], file: Path | None,
                 load: Callable[[], Any], real: Any = None) -> None:  # fmt: skip
        self._path = path
        self._facts = facts
        self._memo = _Memo(memo)
        self._file = file
        self._load = load
        self._real = real
        self._lock = threading.Lock()
        self._backend = SnapshotBackend(self)
        _LIVE.add(self)

    # -- facts -------------------------------------------------------------

    @property
    def snapshot_type(self) -> str:
        """The class of the tokenizer it stands for (`backend.kind`)."""
        return str(self._facts["type"])

    @property
    def decode_settings(self) -> list[tuple[str, str]]:
        """The settings that change `decode()`, as `backend.decode_settings` reads them."""
        return [(str(k), str(v)) for k, v in self._facts["settings"]]

    @property
    def backend_tokenizer(self) -> SnapshotBackend:
        return self._backend

    _tokenizer = backend_tokenizer

    @property
    def chat_template(self) -> Any:
        return self._facts["chat_template"]

    @property
    def special_tokens_map(self) -> dict[str, Any]:
        return dict(self._facts["special_tokens_map"])

    @property
    def all_special_ids(self) -> list[int]:
        return list(self._facts["all_special_ids"])

    @property
    def all_special_tokens(self) -> list[str]:
        return list(self._facts["all_special_tokens"])

    @property
    def added_tokens_decoder(self) -> dict[int, AddedTokenFacts]:
        return _added(self._facts["added_tokens_decoder"])

    def get_added_vocab(self) -> dict[str, int]:
        return dict(self._facts["added_vocab"])

    def __len__(self) -> int:
        return int(self._facts["len"])

    # -- answers -------------------------------------------------------------

    def encode(self, text: str, add_special_tokens: bool = True, **kwargs: Any) -> list[int]:
        if kwargs or not isinstance(text, str):
            return self._real_tokenizer().encode(text, add_special_tokens=add_special_tokens, **kwargs)  # type: ignore[no-any-return]
        key = json.dumps([text, bool(add_special_tokens)], ensure_ascii=False)
        ids = self._memo.get("encode", key, lambda: list(self._real_tokenizer().encode(text, add_special_tokens=add_special_tokens)))
        return list(ids)

    def decode(self, ids: Any, skip_special_tokens: bool = False, **kwargs: Any) -> str:
        as_list = [int(i) for i in ids] if not isinstance(ids, int) else [int(ids)]
        if kwargs or len(as_list) > MEMO_ITEM_LIMIT:
            return str(self._real_tokenizer().decode(ids, skip_special_tokens=skip_special_tokens, **kwargs))
        key = json.dumps([as_list, bool(skip_special_tokens), isinstance(ids, int)])
        return str(self._memo.get("decode", key, lambda: str(self._real_tokenizer().decode(ids, skip_special_tokens=skip_special_tokens))))

    def convert_tokens_to_ids(self, tokens: Any) -> Any:
        if isinstance(tokens, str):
            return self._memo.get("tokens_to_ids", tokens, lambda: self._real_tokenizer().convert_tokens_to_ids(tokens))
        return [self.convert_tokens_to_ids(t) for t in tokens]

    def convert_ids_to_tokens(self, ids: Any, skip_special_tokens: bool = False) -> Any:
        if isinstance(ids, int):
            key = json.dumps([ids, bool(skip_special_tokens)])
            return self._memo.get("ids_to_tokens", key, lambda: self._real_tokenizer().convert_ids_to_tokens(ids, skip_special_tokens))
        return [t for t in (self.convert_ids_to_tokens(int(i), skip_special_tokens) for i in ids) if t is not None]

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        scalars = self.__dict__.get("_facts", {}).get("scalars", {})
        if name in scalars:
            return scalars[name]
        return getattr(self._real_tokenizer(), name)

    # -- the tokenizer itself, when needed -----------------------------------

    @property
    def loaded(self) -> bool:
        """Whether the tokenizer itself was loaded (something the snapshot did not hold was asked)."""
        return self._real is not None

    def _real_tokenizer(self) -> Any:
        with self._lock:
            if self._real is None:
                self._real = self._load()
            return self._real

    def _real_backend(self) -> Any:
        from tito_fast.tokenizer.backend import require_backend

        return require_backend(self._real_tokenizer())

    def save(self) -> None:
        """Keep the answers learnt since it was read (nothing when none are new or the cache is off)."""
        if self._file is None or not self._memo.dirty:
            return
        with self._memo.lock:
            data = {"format": FORMAT, "facts": self._facts, "memo": self._memo.data}
            self._memo.dirty = False
        _write(self._file, data)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild, (str(self._path), self._facts, self._memo.data, None if self._file is None else str(self._file)))

    def __repr__(self) -> str:
        return f"SnapshotTokenizer({str(self._path)!r}, {self.snapshot_type}, loaded={self.loaded})"


_LIVE: weakref.WeakSet[SnapshotTokenizer] = weakref.WeakSet()


@atexit.register
def _save_all() -> None:
    for tok in list(_LIVE):
        try:
            tok.save()
        except Exception:  # a cache that cannot be written: the next run learns the answers again
            pass


def _rebuild(path: str, facts: dict[str, Any], memo: dict[str, dict[str, Any]], file: str | None) -> SnapshotTokenizer:
    from tito_fast.tokenizer.load import load_with_transformers

    return SnapshotTokenizer(Path(path), facts, memo, None if file is None else Path(file), lambda: load_with_transformers(path))


def _write(file: Path, data: dict[str, Any]) -> None:
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=file.parent, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(data, f, ensure_ascii=False)
            os.replace(tmp, file)
        except BaseException:
            os.unlink(tmp)
            raise
    except Exception:  # a read-only or full disk: the next run records again
        return


def facts_of(tokenizer: Any) -> dict[str, Any] | None:
    """What a snapshot holds of a transformers tokenizer, or None when it
    cannot stand for it (not a fast tokenizer, one that truncates or pads,
    or a fact that is not plain data)."""
    from tito_fast.tokenizer.backend import backend_of, decode_settings

    backend = backend_of(tokenizer)
    if backend is None or not hasattr(backend, "to_str") or backend.truncation is not None or backend.padding is not None:
        return None
    text = backend.to_str()
    spec = json.loads(text)
    try:
        facts: dict[str, Any] = {
            "type": type(tokenizer).__qualname__,
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
                "digest": cache.digest(backend),
                "vocab_size": int(backend.get_vocab_size(with_added_tokens=False)),
                "vocab_size_added": int(backend.get_vocab_size(with_added_tokens=True)),
                "encode_special_tokens": bool(getattr(backend, "encode_special_tokens", False)),
                "added": {str(int(i)): AddedTokenFacts.of(t).row() for i, t in backend.get_added_tokens_decoder().items()},
                "normalizer": spec.get("normalizer"),
            },
        }
        return dict(json.loads(json.dumps(facts, ensure_ascii=False)))  # as a later run reads it
    except (AttributeError, TypeError, ValueError):  # a fact that is not plain data
        return None


def load(path: Path, loader: Callable[[], Any]) -> Any:
    """The tokenizer in folder `path`: a `SnapshotTokenizer` from its kept
    snapshot, else the tokenizer `loader()` loads (with transformers),
    behind a new snapshot that is kept for the next run (the tokenizer
    itself when no snapshot can stand for it, or the cache is off)."""
    name = folder_key(path)
    where = cache.directory()
    file = None if name is None or where is None else where / name
    if file is not None:
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
            if data.get("format") == FORMAT:
                return SnapshotTokenizer(path, data["facts"], data["memo"], file, loader)
        except (OSError, ValueError, KeyError, TypeError, AttributeError):  # missing or damaged: record it again
            pass
    real = loader()
    if file is None:
        return real
    facts = facts_of(real)
    if facts is None:
        return real
    tok = SnapshotTokenizer(path, facts, {}, file, loader, real=real)
    tok._memo.dirty = True
    tok.save()
    return tok


__all__ = ["AddedTokenFacts", "SnapshotBackend", "SnapshotTokenizer", "facts_of", "folder_key", "load"]

"""Tables derived from a tokenizer, kept on disk by the tokenizer's state.

Building the byte table (`tokenizer.vocab.Vocab`) and the Rust encoder's
tables (`tokenizer.encoder.FastEncoder`) reads the tokenizer's whole JSON
and loops over its vocabulary and merges: about a second of every
`tito-fast score` run before it scores anything. Both are the same for the
same tokenizer, so they are stored here as arrays (`.npz`, no pickles) under
a key that hashes everything they are built from: the tokenizer's JSON
(`backend_tokenizer.to_str()`, which holds its vocabulary, merges, added
tokens, normalizer and pre-tokenizer), what the caller adds (the special
ids, the settings that change `decode()`), the versions of tito_fast,
tokenizers, transformers and jinja2, and the size and time of the files
that build the tables (an edited checkout gets new keys). A changed
tokenizer gets another key, never a stale table.

Where: `$TITO_FAST_TABLES`, else `tables/` in tito_fast's cache folder
(`root()`: `$TITO_FAST_CACHE`, else `~/.cache/tito_fast`, where the test
fixtures are kept too). `TITO_FAST_TABLES=off` (or `0`, or empty) turns it
off. A cache that cannot be read or written (read-only home, a damaged
file) is passed over: the tables are built as without it, and never an
error.

Example:
    >>> from tito_fast.tokenizer import cache
    >>> cache.key("vocab", "0" * 64, "extra").startswith("vocab-")
    True
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import sys
import tempfile
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from tito_fast._core import __version__

#: Bumped when what a kind stores changes.
FORMAT = 1

_OFF = {"", "0", "off", "false", "no"}


def root() -> Path:
    """tito_fast's cache folder: `$TITO_FAST_CACHE`, else `~/.cache/tito_fast`."""
    env = os.environ.get("TITO_FAST_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "tito_fast"


def directory() -> Path | None:
    """The tables' folder (not created here), or None when it is turned off."""
    env = os.environ.get("TITO_FAST_TABLES")
    if env is not None:
        return None if env.strip().lower() in _OFF else Path(env).expanduser()
    return root() / "tables"


_DIGESTS: weakref.WeakKeyDictionary[Any, tuple[tuple[Any, ...], str]] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def _state(backend: Any) -> tuple[Any, ...]:
    """What can change on a live tokenizer and change its JSON: its added
    tokens (content, flags and id), truncation and padding."""
    added = backend.get_added_tokens_decoder()
    return (repr(sorted((i, repr(t)) for i, t in added.items())), repr(backend.truncation), repr(backend.padding))


def digest(backend: Any, *, text: str | None = None) -> str:
    """The SHA-256 of the tokenizer's JSON (`backend.to_str()`, or `text` when
    the caller has it already), made once per backend object while its added
    tokens, truncation and padding stay as they were (the byte table and the
    encoder both key on it); a snapshot's backend (`tokenizer.snapshot`)
    holds the one made when it was recorded."""
    got = known_digest(backend)
    if got is not None:
        return got
    state = _state(backend)
    h = hashlib.sha256((text if text is not None else backend.to_str()).encode("utf-8")).hexdigest()
    with _LOCK:
        try:
            _DIGESTS[backend] = (state, h)
        except TypeError:  # not weak-referenceable
            pass
    return h


def known_digest(backend: Any) -> str | None:
    """`digest(backend)` when it costs nothing (a snapshot's, or one made
    already for this backend in its present state), else None."""
    known = getattr(backend, "known_digest", None)
    if isinstance(known, str):
        return known
    with _LOCK:
        try:
            got = _DIGESTS.get(backend)
        except TypeError:  # not weak-referenceable
            return None
    return got[1] if got is not None and got[0] == _state(backend) else None


def _code() -> tuple[Any, ...]:
    """The versions of what builds and checks the tables (tito_fast, its
    extension and the modules that build them, as installed: an edited
    checkout gets new keys), and of tokenizers, transformers and jinja2,
    whose encode, decode and render the tables are checked against (as
    installed, whether imported yet or not)."""
    return (FORMAT, code_stamp(), versions(("tokenizers", "transformers", "jinja2")))


def code_stamp() -> tuple[Any, ...]:
    """tito_fast's version and the size and time of the files that build tables."""
    return (__version__, _files())


@functools.cache
def versions(packages: tuple[str, ...]) -> tuple[str | None, ...]:
    """The installed versions of `packages` (None: not installed), read
    without importing them: from the name of the `.dist-info` folder next to
    the package (importing `importlib.metadata` costs ~25 ms of a run's
    start), else by `importlib.metadata`."""
    return tuple(_version(p) for p in packages)


def _version(package: str) -> str | None:
    imported = getattr(sys.modules.get(package), "__version__", None)
    if isinstance(imported, str):
        return imported  # the one in use (a PYTHONPATH copy may shadow the installed one)
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if spec.origin:
        site = Path(spec.origin).parent.parent
        prefix = package.replace("-", "_").lower() + "-"
        try:
            found = [n for n in os.listdir(site) if n.lower().startswith(prefix) and n.endswith(".dist-info")]
        except OSError:
            found = []
        if len(found) == 1:
            return found[0][len(prefix) : -len(".dist-info")]
    from importlib import metadata

    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


@functools.cache
def _files() -> tuple[Any, ...]:
    here = Path(__file__).resolve().parent.parent
    files = [here / "tokenizer" / "vocab.py", here / "tokenizer" / "encoder.py", here / "chat" / "render.py", here / "chat" / "canned.py",
             here / "tokenizer" / "snapshot.py", here / "chat" / "families.py",
             here / "chat" / "messages.py", here / "chat" / "tools.py"]
    files += sorted(here.glob("_core*.so")) + sorted(here.glob("_core*.pyd"))
    stamps: list[tuple[str, int | None, int | None]] = []
    for f in files:
        try:
            st = f.stat()
            stamps.append((f.name, st.st_size, st.st_mtime_ns))
        except OSError:
            stamps.append((f.name, None, None))
    return tuple(stamps)


def key(kind: str, digest: str, *extra: Any) -> str:
    """The file name of a `kind` of table for a tokenizer whose JSON hashes to
    `digest`, built with `extra` (reprs of what else it depends on)."""
    h = hashlib.sha256(repr((_code(), kind, digest, extra)).encode("utf-8")).hexdigest()
    return f"{kind}-{h[:40]}.npz"


def load(name: str) -> dict[str, np.ndarray] | None:
    """The arrays stored as `name`, or None (not there, turned off, unreadable)."""
    try:
        d = directory()
        if d is None:
            return None
        with np.load(d / name, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except Exception:  # missing, damaged or unreadable: build the table instead
        return None


def store(name: str, arrays: dict[str, np.ndarray]) -> None:
    """Keep `arrays` as `name` (written whole: a reader never sees half a file);
    nothing happens when the cache is off or cannot be written."""
    _store_whole(name, lambda f: np.savez(f, **arrays))  # type: ignore[arg-type]


def _store_whole(name: str, write: Callable[[Any], None], *, where: Path | None = None) -> None:
    """Write the file `name` of the tables' folder (or of `where`) with
    `write(binary file)`: whole or not at all (a temporary file renamed);
    nothing happens when the cache is off or cannot be written (the next run
    builds it again)."""
    try:
        d = where if where is not None else directory()
        if d is None:
            return
        d.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp-", suffix=Path(name).suffix)
        try:
            with os.fdopen(fd, "wb") as f:
                write(f)
            os.replace(tmp, d / name)
        except BaseException:
            os.unlink(tmp)
            raise
    except Exception:  # a read-only or full disk
        return


def load_json(name: str) -> Any:
    """The JSON document stored as `name`, or None (not there, turned off, unreadable)."""
    try:
        d = directory()
        if d is None:
            return None
        return json.loads((d / name).read_text(encoding="utf-8"))
    except Exception:  # missing, damaged or unreadable: the caller records it again
        return None


def store_json(name: str, data: Any) -> None:
    """Keep `data` as the JSON document `name` (written whole, as `store`)."""
    store_text(name, json.dumps(data, ensure_ascii=False))


def store_text(name: str, text: str, *, where: Path | None = None) -> None:
    """Keep `text` (UTF-8) as the file `name` of the tables' folder, or of `where` (written whole, as `store`)."""
    _store_whole(name, lambda f: f.write(text.encode("utf-8")), where=where)


def text_array(text: str) -> np.ndarray:
    """A string as a uint8 array (what `store` keeps)."""
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8)


def array_text(a: np.ndarray) -> str:
    """The inverse of `text_array`."""
    return a.tobytes().decode("utf-8")

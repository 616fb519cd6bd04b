"""Loading a tokenizer: from a folder, from `fixture:NAME` (a pinned fixture,
materialised by `tito_fast.testing.fixtures`), or a tokenizer object given as is.

Every door that takes a tokenizer spec (`tito-fast score|diff|assemble|
verify-template`, `iter_score`, `assemble`, the Ray classes) loads it here,
so a bad spec gets the same one-line `TokenizerLoadError` everywhere.

Example:
    >>> load_tokenizer("no/such/folder")
    Traceback (most recent call last):
    ...
    tito_fast.errors.TokenizerLoadError: tokenizer folder 'no/such/folder' does not exist (give a local folder with tokenizer.json / tokenizer_config.json, or fixture:NAME)
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from tito_fast import _deps
from tito_fast.errors import FixtureError, TokenizerLoadError
from tito_fast.tokenizer.snapshot import load as snapshot_load

#: Files one of which a tokenizer folder holds.
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model", "tiktoken.model")
#: The prefix of a fixture spec, `fixture:qwen3`.
FIXTURE_PREFIX = "fixture:"


def load_tokenizer(spec: str | os.PathLike[str] | Any, *, snapshot: bool = False) -> Any:
    """A tokenizer from a directory, or `fixture:NAME` for a pinned test
    fixture; any other object (a loaded tokenizer) is returned as it is.
    With `snapshot=True` a folder's tokenizer is a
    `tokenizer.snapshot.SnapshotTokenizer` once a run has recorded it: the
    facts and answers tito_fast needs without importing transformers (it
    loads the tokenizer only for what the snapshot does not hold).

    Raises:
        TokenizerLoadError: no such fixture or folder, a folder without
            tokenizer files, or one transformers cannot load (the message
            says which, in one line).
    """
    if not isinstance(spec, (str, os.PathLike)):
        return spec
    spec = os.fspath(spec)
    if spec.startswith(FIXTURE_PREFIX):
        name = spec[len(FIXTURE_PREFIX) :]
        if not snapshot:
            return _fixture(name)
        folder = _fixture_dir(name)
        return snapshot_load(folder, partial(_fixture, name))
    path = Path(spec).expanduser()
    if not path.exists():
        raise TokenizerLoadError(
            f"tokenizer folder {spec!r} does not exist (give a local folder with tokenizer.json / tokenizer_config.json, "
            "or fixture:NAME)"
        )
    if not path.is_dir():
        raise TokenizerLoadError(f"tokenizer {spec!r} is a file; give the folder that holds it")
    if not any((path / f).is_file() for f in TOKENIZER_FILES):
        raise TokenizerLoadError(f"{spec!r} holds no tokenizer files (looked for {', '.join(TOKENIZER_FILES)})")
    if snapshot:
        return snapshot_load(path, partial(load_with_transformers, spec))
    return load_with_transformers(spec)


def load_with_transformers(spec: str) -> Any:
    """The tokenizer in folder `spec`, loaded by transformers' `AutoTokenizer` (local files only)."""
    auto_tokenizer = _deps.transformers().AutoTokenizer
    try:
        return auto_tokenizer.from_pretrained(str(Path(spec).expanduser()), local_files_only=True)
    except Exception as e:  # transformers raises many types; one line says which
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        raise TokenizerLoadError(f"could not load the tokenizer in {spec!r}: {type(e).__name__}: {first}") from e


def _fixture_dir(name: str) -> Path:
    from tito_fast.testing.fixtures import tokenizer_dir

    return Path(_from_fixture(name, tokenizer_dir))


def _fixture(name: str) -> Any:
    # the pinned files, materialised on first use (a module of this layer: see tests/test_layers.py)
    from tito_fast.testing.fixtures import load_tokenizer as load_fixture

    return _from_fixture(name, load_fixture)


def _from_fixture(name: str, get: Callable[[str], Any]) -> Any:
    """`get(name)` for a known fixture, its errors as `TokenizerLoadError`."""
    from tito_fast.testing.fixtures import FAMILIES

    if name not in FAMILIES:
        raise TokenizerLoadError(f"no tokenizer fixture {name!r}; fixtures: {', '.join(sorted(FAMILIES))}")
    try:
        return get(name)
    except FixtureError as e:
        raise TokenizerLoadError(f"fixture {name!r}: {e}") from e


__all__ = ["FIXTURE_PREFIX", "TOKENIZER_FILES", "load_tokenizer", "load_with_transformers"]

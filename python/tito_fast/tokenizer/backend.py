"""Small facts about a tokenizer that several layers need, found one way.

- `backend_of`: the `tokenizers.Tokenizer` behind a transformers tokenizer;
- `special_ids`: the boundary ids the reference detects (`all_special_ids`
  plus every added token flagged `special=True`);
- `token_id`: the id of one token string, or None;
- `single_id`: the id of a token string or of a short text that encodes to
  exactly one id (family declarations use both);
- `kind` and `decode_settings`: the tokenizer's class and the settings that
  change `decode()`, which key the byte table (a `SnapshotTokenizer` holds
  those of the tokenizer it stands for).

Example:
    >>> class Tok:
    ...     all_special_ids = [1]
    ...     added_tokens_decoder = {}
    >>> special_ids(Tok())
    {1}
"""

from __future__ import annotations

from typing import Any


def backend_of(tokenizer: Any) -> Any:
    """The `tokenizers.Tokenizer` behind a transformers tokenizer, the object itself
    when it is one, or None (a slow or minimal tokenizer)."""
    for name in ("backend_tokenizer", "_tokenizer"):
        inner = getattr(tokenizer, name, None)
        if inner is not None and hasattr(inner, "to_str"):
            return inner
    return tokenizer if hasattr(tokenizer, "to_str") else None


def require_backend(tokenizer: Any) -> Any:
    """`backend_of(tokenizer)`; TypeError when there is none (a slow tokenizer)."""
    backend = backend_of(tokenizer)
    if backend is None:
        raise TypeError(f"cannot find a `tokenizers` backend in {type(tokenizer).__name__}; pass a fast tokenizer")
    return backend


def special_ids(tokenizer: Any) -> set[int]:
    """`all_special_ids` plus every added token flagged `special=True` (tokens such as
    `<think>` are usually not special, so they are not boundaries)."""
    ids = {int(i) for i in tokenizer.all_special_ids}
    decoder = getattr(tokenizer, "added_tokens_decoder", None)
    if decoder:
        ids |= {int(k) for k, v in decoder.items() if v.special}
    return ids


def token_id(tokenizer: Any, token: str) -> int | None:
    """The id of `token` when it is a single token of the vocabulary (not unknown), else None."""
    added = tokenizer.get_added_vocab() if hasattr(tokenizer, "get_added_vocab") else {}
    if isinstance(added, dict) and token in added:
        return int(added[token])
    tid = tokenizer.convert_tokens_to_ids(token)
    if not isinstance(tid, int) or tid == getattr(tokenizer, "unk_token_id", None):
        return None
    back = getattr(tokenizer, "convert_ids_to_tokens", None)
    name = back(tid) if callable(back) else None
    if isinstance(name, str) and name != token:  # mapped to another token: not in the vocabulary
        return None
    return tid


def single_id(tokenizer: Any, name: str) -> int | None:
    """The id of a token string, or of a short text that encodes to exactly one id; None otherwise."""
    tid = token_id(tokenizer, name)
    if tid is not None:
        return tid
    ids = tokenizer.encode(name, add_special_tokens=False)
    return int(ids[0]) if isinstance(ids, list) and len(ids) == 1 else None


def kind(tokenizer: Any) -> str:
    """The tokenizer's class name (for a `tokenizer.snapshot.SnapshotTokenizer`: the class it stands for)."""
    name = getattr(tokenizer, "snapshot_type", None) if hasattr(type(tokenizer), "snapshot_type") else None
    return name if isinstance(name, str) else type(tokenizer).__qualname__


def decode_settings(tokenizer: Any) -> list[tuple[str, str]]:
    """The settings that change `decode()` besides the JSON (`clean_up_*`,
    `split_special_*`), as reprs, read where transformers keeps them."""
    if hasattr(type(tokenizer), "decode_settings"):
        return list(tokenizer.decode_settings)
    init = getattr(tokenizer, "init_kwargs", None) or {}
    own = {**init, **getattr(tokenizer, "__dict__", {})}
    return sorted((k, repr(v)) for k, v in own.items() if k.startswith(("clean_up", "split_special")))

"""The tokenizer tables' cache (`tito_fast.tokenizer.cache`): a warm start
gives the same tables as a cold one, a damaged or unwritable cache is passed
over, and the cache can be turned off."""

from __future__ import annotations

import copy
import importlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tito_fast.chat.render import _native
from tito_fast.testing import fixtures
from tito_fast.tokenizer import cache
from tito_fast.tokenizer.encoder import FastEncoder
from tito_fast.tokenizer.vocab import Vocab
from tito_fast.tokenizer.vocab import _build as build_vocab

TEXTS = ["hello world", "<|im_start|>user\n你好 🙂<|im_end|>", "def f(x):\n    return x  # 12345\n\n\n", "  ", ""]


def _tables(tok: Any) -> tuple[Vocab, list[list[int]]]:
    vocab = build_vocab(tok, 50, 0)
    enc = FastEncoder(tok)
    assert enc.reason is None and enc.core is not None
    return vocab, [enc.encode(t) for t in TEXTS]


def test_a_warm_start_gives_the_cold_tables(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TITO_FAST_TABLES", str(tmp_path))
    tok = fixtures.load_tokenizer("qwen3")
    cold_vocab, cold_ids = _tables(tok)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert [n.split("-")[0] for n in names] == ["encoder", "vocab"]
    warm_vocab, warm_ids = _tables(tok)
    assert warm_ids == cold_ids == [tok.encode(t, add_special_tokens=False) for t in TEXTS]
    for field in ("blob", "added_ids", "boundary_ids", "byte_exact", "reason"):
        assert getattr(warm_vocab, field) == getattr(cold_vocab, field)
    assert np.array_equal(warm_vocab.offsets, cold_vocab.offsets)
    assert sorted(p.name for p in tmp_path.iterdir()) == names  # read, not written again


def test_another_tokenizer_state_gets_another_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TITO_FAST_TABLES", str(tmp_path))
    tok = copy.deepcopy(fixtures.load_tokenizer("qwen3"))
    _tables(tok)
    tok.add_tokens(["<my_new_token>"])
    vocab, ids = _tables(tok)
    assert len([p for p in tmp_path.iterdir() if p.name.startswith("encoder-")]) == 2
    new = tok.convert_tokens_to_ids("<my_new_token>")
    assert new in vocab.added_ids and FastEncoder(tok).encode("a<my_new_token>b") == tok.encode("a<my_new_token>b", add_special_tokens=False)


def test_a_damaged_cache_is_passed_over(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TITO_FAST_TABLES", str(tmp_path))
    tok = fixtures.load_tokenizer("qwen3")
    _, want = _tables(tok)
    for p in tmp_path.iterdir():
        p.write_bytes(b"not an npz file")
    _, got = _tables(tok)
    assert got == want


def test_an_unwritable_or_disabled_cache_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tok = fixtures.load_tokenizer("qwen3")
    blocked = tmp_path / "file"
    blocked.write_text("a file where the cache folder would be")
    monkeypatch.setenv("TITO_FAST_TABLES", str(blocked / "cache"))
    _, a = _tables(tok)
    for off in ("off", "0", ""):
        monkeypatch.setenv("TITO_FAST_TABLES", off)
        assert cache.directory() is None
        _, b = _tables(tok)
        assert a == b
    assert blocked.read_text().startswith("a file")


def test_the_render_probe_verdict_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TITO_FAST_TABLES", str(tmp_path))
    calls: list[int] = []
    render = importlib.import_module("tito_fast.chat.render")
    real = render._probe

    def counted(*args: Any) -> str | None:
        calls.append(1)
        return real(*args)  # type: ignore[no-any-return]

    monkeypatch.setattr(render, "_probe", counted)
    template = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
    first = _native.__wrapped__(template, "{}", "drop")
    second = _native.__wrapped__(template, "{}", "drop")
    assert first.reason is None and second.reason is None and calls == [1]
    assert [p.name.split("-")[0] for p in tmp_path.iterdir()] == ["probe"]


def test_a_bare_tokenizers_tokenizer_gets_the_same_table(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`Vocab.from_tokenizer` takes a `tokenizers.Tokenizer` too (its `encode` gives an `Encoding`)."""
    monkeypatch.setenv("TITO_FAST_TABLES", str(tmp_path))
    tok = fixtures.load_tokenizer("qwen3")
    bare = build_vocab(tok.backend_tokenizer, 50, 0)
    full = build_vocab(tok, 50, 0)
    assert bare.byte_exact and bare.blob == full.blob and np.array_equal(bare.offsets, full.offsets)

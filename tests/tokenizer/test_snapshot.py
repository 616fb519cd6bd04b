"""A tokenizer folder's snapshot (`tito_fast.tokenizer.snapshot`): it answers
as the tokenizer does, scoring with it gives the results scoring with the
tokenizer gives, a warm `tito-fast score` does not import transformers, and
a changed folder, an unseen call or a turned-off cache falls back to the
tokenizer itself."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tito_fast.score.run import run_score
from tito_fast.score.scorer import Scorer
from tito_fast.testing import fixtures
from tito_fast.tokenizer import snapshot
from tito_fast.tokenizer.backend import backend_of, decode_settings, kind, special_ids
from tito_fast.tokenizer.load import load_tokenizer
from tito_fast.tokenizer.snapshot import SnapshotTokenizer

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
TEXTS = ["hello world", "<|im_start|>user\n你好 🙂<|im_end|>", "def f(x):\n    return x  # 12345\n\n\n", "  ", ""]
#: Families of every kind of template and tokenizer the fixtures hold.
FAMILIES = ["qwen3", "glm47", "llama31", "minimax_m27", "kimi_k2", "nemotron3", "devstral", "qwen35"]


def _warm(folder: Path) -> SnapshotTokenizer:
    """The folder's snapshot as a later run reads it (recorded first if needed)."""
    load_tokenizer(str(folder), snapshot=True)
    tok = load_tokenizer(str(folder), snapshot=True)
    assert isinstance(tok, SnapshotTokenizer)
    return tok


@pytest.mark.parametrize("family", FAMILIES)
def test_a_snapshot_answers_as_the_tokenizer(family: str) -> None:
    real = fixtures.load_tokenizer(family)
    tok = _warm(fixtures.tokenizer_dir(family))
    assert not tok.loaded  # read from the file, not loaded
    assert tok.chat_template == real.chat_template and len(tok) == len(real)
    assert special_ids(tok) == special_ids(real) and tok.get_added_vocab() == real.get_added_vocab()
    assert tok.special_tokens_map == real.special_tokens_map and tok.all_special_tokens == real.all_special_tokens
    assert kind(tok) == kind(real) and decode_settings(tok) == decode_settings(real)
    for i, t in real.added_tokens_decoder.items():
        mine = tok.added_tokens_decoder[i]
        assert (mine.content, mine.special, mine.lstrip, mine.rstrip, mine.normalized) == (t.content, t.special, t.lstrip, t.rstrip, t.normalized)
    mine_b, real_b = backend_of(tok), backend_of(real)
    assert mine_b.get_vocab_size(with_added_tokens=True) == real_b.get_vocab_size(with_added_tokens=True)
    assert repr(mine_b.normalizer) == repr(real_b.normalizer)
    for name in ("eos_token", "eos_token_id", "pad_token_id", "unk_token_id", "name_or_path"):
        assert getattr(tok, name) == getattr(real, name)
    # calls: the tokenizer's answer, kept for the next run
    for text in TEXTS:
        assert tok.encode(text, add_special_tokens=False) == real.encode(text, add_special_tokens=False)
        ids = real.encode(text, add_special_tokens=False)
        assert tok.decode(ids) == real.decode(ids)
        assert [e.ids for e in mine_b.encode_batch([text], add_special_tokens=False)] == [real_b.encode(text, add_special_tokens=False).ids]
    tok.save()
    again = load_tokenizer(str(fixtures.tokenizer_dir(family)), snapshot=True)
    assert [again.encode(t, add_special_tokens=False) for t in TEXTS] == [real.encode(t, add_special_tokens=False) for t in TEXTS]
    assert not again.loaded  # every answer was kept


@pytest.mark.parametrize("dump,family", [("qwen3_dump.jsonl", "qwen3"), ("glm47_dump.jsonl", "glm47")])
@pytest.mark.parametrize("mode", ["full", "fast"])
def test_scoring_with_a_snapshot_gives_the_tokenizers_results(dump: str, family: str, mode: Any) -> None:
    real = Scorer(fixtures.load_tokenizer(family), family, mode=mode)
    snap = Scorer(_warm(fixtures.tokenizer_dir(family)), family, mode=mode)
    want = run_score(EXAMPLES / dump, scorer=real)
    got = run_score(EXAMPLES / dump, scorer=snap)
    assert [r.to_dict() for r in got.results] == [r.to_dict() for r in want.results]
    assert got.summary == want.summary and snap.renderer == real.renderer and snap.text_encoder == real.text_encoder
    assert snap.fast_path == real.fast_path


@pytest.mark.parametrize("family", ["'--family', 'qwen3', ", ""], ids=["family given", "family from the template"])
def test_a_warm_score_run_does_not_import_transformers(tmp_path: Path, family: str) -> None:
    """Nor one that finds the family itself: it reads the template from the snapshot."""
    folder = fixtures.tokenizer_dir("qwen3")
    dump = tmp_path / "five.jsonl"
    lines = (EXAMPLES / "qwen3_dump.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)[:5]
    dump.write_text("".join(json.dumps({k: v for k, v in json.loads(ln).items() if k != "family"}) + "\n" for ln in lines), encoding="utf-8")
    code = (
        f"import sys, runpy; sys.argv = ['tito-fast', 'score', sys.argv[1], '--tokenizer', sys.argv[2], {family}"
        "'--json', sys.argv[3], '--quiet']\n"
        "try:\n    runpy.run_module('tito_fast', run_name='__main__')\nexcept SystemExit as e:\n    code = e.code\n"
        "print(json.dumps({'code': code, 'transformers': 'transformers' in sys.modules}))"
    ).replace("import sys,", "import json, sys,")
    runs = []
    for i in range(2):
        out = subprocess.run([sys.executable, "-c", code, str(dump), str(folder), str(tmp_path / f"r{i}.json")],
                             capture_output=True, text=True, env=os.environ.copy(), timeout=300)  # fmt: skip
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    assert runs[0]["code"] == runs[1]["code"] == 0
    assert runs[1]["transformers"] is False  # the second run reads the snapshot
    first, second = (json.loads((tmp_path / f"r{i}.json").read_text()) for i in range(2))
    assert first["sessions"] == second["sessions"] and first["summary"] == second["summary"]


def test_a_changed_folder_is_recorded_again(tmp_path: Path) -> None:
    folder = tmp_path / "tok"
    shutil.copytree(fixtures.tokenizer_dir("qwen3"), folder)
    key = snapshot.folder_key(folder)
    _warm(folder)
    config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    config["chat_template"] = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    (folder / "chat_template.jinja").unlink(missing_ok=True)
    assert snapshot.folder_key(folder) != key
    tok = _warm(folder)
    assert tok.chat_template == config["chat_template"]


def test_an_unseen_call_loads_the_tokenizer_and_is_kept(tmp_path: Path) -> None:
    folder = fixtures.tokenizer_dir("llama31")
    tok = _warm(folder)
    text = "a text no run has asked for: 42 ✓"
    want = fixtures.load_tokenizer("llama31").encode(text, add_special_tokens=False)
    assert tok.encode(text, add_special_tokens=False) == want and tok.loaded
    assert tok.vocab_size == fixtures.load_tokenizer("llama31").vocab_size  # not kept: from the tokenizer itself
    tok.save()
    again = load_tokenizer(str(folder), snapshot=True)
    assert again.encode(text, add_special_tokens=False) == want and not again.loaded


def test_a_snapshot_pickles_without_loading_the_tokenizer() -> None:
    tok = _warm(fixtures.tokenizer_dir("qwen3"))
    back = pickle.loads(pickle.dumps(tok))
    assert isinstance(back, SnapshotTokenizer) and not back.loaded
    assert back.chat_template == tok.chat_template and back.convert_tokens_to_ids("<|im_end|>") == 151645


def test_with_the_cache_off_the_tokenizer_itself_is_loaded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TITO_FAST_TABLES", "off")
    tok = load_tokenizer("fixture:qwen3", snapshot=True)
    assert not isinstance(tok, SnapshotTokenizer) and type(tok).__module__.startswith("transformers.")


def test_a_damaged_snapshot_is_recorded_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TITO_FAST_TABLES", str(tmp_path / "tables"))
    folder = fixtures.tokenizer_dir("qwen3")
    first = load_tokenizer(str(folder), snapshot=True)
    assert isinstance(first, SnapshotTokenizer) and first.loaded  # recorded from the tokenizer itself
    name = snapshot.folder_key(folder)
    assert name is not None
    for damage in ("{not json", json.dumps({"format": snapshot.FORMAT + 1}), json.dumps({"format": snapshot.FORMAT, "facts": 3})):
        (tmp_path / "tables" / name).write_text(damage, encoding="utf-8")
        tok = load_tokenizer(str(folder), snapshot=True)
        assert isinstance(tok, SnapshotTokenizer) and tok.chat_template == first.chat_template
    assert json.loads((tmp_path / "tables" / name).read_text(encoding="utf-8"))["format"] == snapshot.FORMAT


def test_an_unwritable_cache_still_loads_the_tokenizer(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("", encoding="utf-8")
    monkeypatch.setenv("TITO_FAST_TABLES", str(blocked / "tables"))  # a folder under a file: never writable
    tok = load_tokenizer("fixture:qwen3", snapshot=True)
    assert tok.convert_tokens_to_ids("<|im_end|>") == 151645 and len(tok) == len(fixtures.load_tokenizer("qwen3"))

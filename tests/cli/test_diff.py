"""`tito-fast diff` shows the ids of every difference, retokenizations
included, and exits 1 on any difference (0 only when the ids are equal
after the comparator's trailing trims)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.score.test_report import DUMP, retokenized_row, write_retokenized_dump
from tito_fast.cli.main import EXIT_CODES, cli
from tito_fast.testing import fixtures


def _diff(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = cli("diff", *args, "--tokenizer", "fixture:qwen3", "--family", "qwen3", "--color", "never", "--width", "120")
    return code, capsys.readouterr().out


def _ids_line(out: str, label: str) -> str:
    return next(line for line in out.splitlines() if line.strip().startswith(label) and "  ids  " in line)


def test_a_retokenization_is_a_difference_with_its_ids(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dump = write_retokenized_dump(tmp_path / "d.jsonl")
    code, out = _diff(capsys, str(dump), "--session", "retok-only")
    assert code == EXIT_CODES["findings"] == 1
    assert "no difference" not in out
    meta = retokenized_row()["metadata"]
    tok = fixtures.load_tokenizer("qwen3")
    (original,), (head, tail) = [meta["original"]], meta["split"]
    word = tok.decode([original])
    # the side-by-side view marks the segment, though its text is the same
    assert "(content)  ≠  same text, other ids" in out
    assert "difference at segment" in out and "not reported (same text, other ids), kind retokenization, role assistant" in out
    assert f"  at id {meta['at']} of fresh render (1 id) and id {meta['at']} of session ids (2 ids): same text, other ids" in out
    expected, actual = _ids_line(out, "fresh render"), _ids_line(out, "session ids")
    assert f"[{original} {json.dumps(word)}]" in expected
    assert f"[{head} {json.dumps(tok.decode([head]))} {tail} {json.dumps(tok.decode([tail]))}]" in actual
    assert expected.startswith("    fresh render  ids   … ") and expected.endswith(" …")  # ids of context on each side
    texts = [line for line in out.splitlines() if line.strip().startswith("text  ")]
    assert len(texts) == 2 and texts[0].split("text", 1)[1] == texts[1].split("text", 1)[1]  # the same decoded text
    assert f"[{json.dumps(word)}]" in texts[0]
    assert out.splitlines()[-1] == "1 difference(s): 0 reported by the reference, 1 not (same text, other ids)"


def test_two_id_files_that_differ_only_in_ids(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tok = fixtures.load_tokenizer("qwen3")
    start, end = tok.convert_tokens_to_ids("<|im_start|>"), tok.convert_tokens_to_ids("<|im_end|>")
    body = tok.encode("user\nHello there", add_special_tokens=False)
    split = body[:-1] + tok.encode(" th", add_special_tokens=False) + tok.encode("ere", add_special_tokens=False)
    assert tok.decode(split) == tok.decode(body) and split != body
    a, b = tmp_path / "expected.json", tmp_path / "actual.json"
    a.write_text(json.dumps([start, *body, end]))
    b.write_text(json.dumps([start, *split, end]))
    code, out = _diff(capsys, str(a), str(b))
    assert code == 1 and "no difference" not in out
    assert f"[{body[-1]} \" there\"]" in _ids_line(out, "expected.json")
    assert "\" th\"" in _ids_line(out, "actual.json") and "\"ere\"" in _ids_line(out, "actual.json")
    b.write_text(json.dumps([start, *body, end]))
    code, out = _diff(capsys, str(a), str(b))
    assert code == EXIT_CODES["ok"] == 0 and out.splitlines()[-1] == "no difference"


def test_a_content_difference_shows_both_sides_ids(capsys: pytest.CaptureFixture[str]) -> None:
    code, out = _diff(capsys, str(DUMP), "--session", "qwen3-0029")
    assert code == 1
    assert "difference at segment 21: non_assistant_text, kind content, role tool, message 5" in out
    assert '[924 "ca" 58858 "fé"]' in _ids_line(out, "fresh render") and '[3682 "ERROR"]' in _ids_line(out, "session ids")
    assert '"\\n<tool_response>\\n" ["café"] " — 4"' in out and '"\\n<tool_response>\\n" ["ERROR"] " — 4"' in out
    assert "reference: non_assistant_text at segment 21" in out
    assert out.splitlines()[-1] == "1 difference(s): 1 reported by the reference, 0 not (same text, other ids)"

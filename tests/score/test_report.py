"""The HTML report renders in a real browser (headless Chromium), and its pieces."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tito_fast.cli.main import cli
from tito_fast.score.report import (
    bar_chart,
    column_chart,
    html_report,
    markdown_report,
    md_code,
    terminal_diff,
    text_table,
)
from tito_fast.score.run import run_score
from tito_fast.score.scorer import Scorer
from tito_fast.score.summary import MAX_NAMED, summarize, worst
from tito_fast.testing import fixtures

DUMP = Path(__file__).resolve().parents[2] / "examples" / "qwen3_dump.jsonl"
BROWSER = next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)


def outside_code_spans(md: str) -> str:
    """Markdown with its code spans cut out (CommonMark: a run of n backticks
    up to the next run of exactly n; a backslash escapes the next character)."""
    out, i = [], 0
    while i < len(md):
        if md[i] == "\\":
            out.append(md[i : i + 2])
            i += 2
            continue
        if md[i] == "`":
            fence = re.match("`+", md[i:]).group(0)  # type: ignore[union-attr]
            close = re.compile(f"(?<!`){fence}(?!`)").search(md, i + len(fence))
            if close is not None:
                out.append("<code>")  # a marker, not the text
                i = close.end()
                continue
            out.append(fence)
            i += len(fence)
            continue
        out.append(md[i])
        i += 1
    return "".join(out).replace("<code>", "")


@functools.cache
def retokenized_row() -> dict[str, Any]:
    """A clean session of the example dump with one word of its last assistant
    message encoded as two ids (same text, other ids): the reference reports
    nothing for it, the diagnosis one retokenization."""
    tok = fixtures.load_tokenizer("qwen3")
    row = json.loads(DUMP.read_text(encoding="utf-8").splitlines()[1])  # qwen3-0001, planted "none"
    ids: list[int] = row["token_ids"]
    start, assistant = tok.convert_tokens_to_ids("<|im_start|>"), tok.encode("assistant", add_special_tokens=False)
    last = max(i for i in range(len(ids) - 1) if ids[i] == start and ids[i + 1 : i + 1 + len(assistant)] == assistant)
    for at in range(last + 3, len(ids)):
        word = tok.decode([ids[at]])
        if not (word.strip().isalpha() and len(word.strip()) >= 4):
            continue
        for cut in range(1, len(word)):
            head, tail = tok.encode(word[:cut], add_special_tokens=False), tok.encode(word[cut:], add_special_tokens=False)
            if len(head) == len(tail) == 1:
                row = {**row, "session_id": "retok-only", "token_ids": ids[:at] + head + tail + ids[at + 1 :]}
                row["metadata"] = {"planted": "retokenized", "original": ids[at], "split": head + tail, "at": at}
                return row
    raise AssertionError("no word to split")


def write_retokenized_dump(path: Path, copies: int = 1) -> Path:
    """The retokenized session (`copies` of it, as retok-only, retok-only-1, ...) and two other sessions of the example dump."""
    lines = DUMP.read_text(encoding="utf-8").splitlines()
    rows = [{**retokenized_row(), "session_id": "retok-only" + (f"-{k}" if k else "")} for k in range(copies)]
    path.write_text("\n".join([lines[2], *map(json.dumps, rows), lines[29]]) + "\n", encoding="utf-8")  # clean, retok, qwen3-0029
    return path


def _report(tmp_path: Path) -> Path:
    run = run_score(DUMP, "fixture:qwen3", "qwen3", scorer=Scorer(fixtures.load_tokenizer("qwen3"), "qwen3"))
    page = tmp_path / "report.html"
    page.write_text(html_report(run.summary, worst(run.results, 5), title="example", source=str(DUMP)), encoding="utf-8")
    assert "INCOMPLETE" not in text_table(run.summary) and "| turn |" in markdown_report(run.summary, [])
    return page


def test_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    """CI installs Chromium (Debian) and sets TITO_FAST_REQUIRE_BROWSER=1, so this cannot be skipped there."""
    if BROWSER is None:
        if os.environ.get("TITO_FAST_REQUIRE_BROWSER"):
            pytest.fail("Chromium is required (TITO_FAST_REQUIRE_BROWSER=1) but not installed")
        pytest.skip("no Chromium on this machine")
    page = _report(tmp_path)
    shot = tmp_path / "report.png"
    cmd = [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1280,2200",
           f"--screenshot={shot}", page.as_uri()]
    subprocess.run(cmd, check=True, timeout=120, capture_output=True, env={**os.environ, "HOME": str(tmp_path)})
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", data[16:24])
    assert (width, height) == (1280, 2200)
    assert len(data) > 60_000  # text, five plots and the diff panes; a blank page is a few KB


def test_plots_and_terminal_diff() -> None:
    svg = column_chart("h", ["0", "10"], [3.0, 1.0], percent=False, xlabel="id")
    assert svg.count("<rect") == 2 and "id" in svg
    assert "(nothing to show)" in bar_chart("empty", [], [])
    out = terminal_diff([("a", "same", "same"), ("b", "hello world", "hello World"), ("c", "x", "x"), ("d", "y", "y")], colour=False, width=60)
    assert "[w]" in out and "[W]" in out and "1 equal segment(s)" in out


def test_a_retokenized_session_is_named_in_both_reports(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    dump = write_retokenized_dump(tmp_path / "d.jsonl")
    page, md = tmp_path / "r.html", tmp_path / "r.md"
    assert cli("score", str(dump), "--tokenizer", "fixture:qwen3", "--family", "qwen3", "--report", str(page),
               "--markdown", str(md), "--quiet") == 0  # fmt: skip
    html, text = page.read_text(encoding="utf-8"), md.read_text(encoding="utf-8")
    # The reference sees one differing session (qwen3-0029); the verdict counts the retokenized one too, and names it.
    for report in (html, text):
        assert "1 of 3 sessions (33.33%) differ" in report and "1 more session(s) (33.33%) differ only by retokenization" in report
        assert "retokenization: 1 difference(s) in 1 session(s), none reported by the reference" in report
    assert "<h3>retokenization only <span class='meta'>1 session(s)</span></h3>" in html
    at = retokenized_row()["metadata"]["at"]  # where the split word starts
    assert f"<li><b>retok-only</b> <span class='meta'>d.jsonl:2 · message 10 (assistant), turn 4, id {at}</span></li>" in html
    section = text.split("### retokenization only (1 session(s))", 1)[1].split("###", 1)[0]
    assert f"- `retok-only` (`d.jsonl:2`): message 10 (assistant), turn 4, id {at}\n" in section
    assert "qwen3-0029" not in section and "qwen3-0002" not in text  # a clean session is in no category
    kind = text.split("### kind retokenization (1 session(s))", 1)[1].split("###", 1)[0]
    assert "`retok-only`" in kind and "the reference reports none of them" in kind


def test_every_count_of_the_verdict_names_its_sessions() -> None:
    run = run_score(DUMP, "fixture:qwen3", "qwen3", scorer=Scorer(fixtures.load_tokenizer("qwen3"), "qwen3"))
    (retok,) = [r for r in run.results if r.session_id == "qwen3-0000"]
    copies = [dataclasses.replace(retok, session_id=f"copy-{k}") for k in range(MAX_NAMED)]
    s = summarize([*run.results, *copies], [], family="qwen3", mode="full", fast_path="off")
    prefix = "tito_session_mismatch_rate/v1"
    expected = {"mismatch", "retokenization_only"}
    expected |= {f"type:{t}" for t in s.by_type if s.metrics[f"{prefix}/{t}"]}
    expected |= {f"kind:{k}" for k in s.by_kind} | {f"role:{r}" for r in s.by_role}
    assert set(s.named_sessions) == expected
    assert s.named_sessions["mismatch"]["sessions"] == round(s.metrics[prefix] * s.sessions) == 17
    only = s.named_sessions["retokenization_only"]
    assert only["sessions"] == 6 + MAX_NAMED and len(only["named"]) == MAX_NAMED
    assert [x["session_id"] for x in only["named"][:2]] == ["qwen3-0000", "qwen3-0006"]
    html, md = html_report(s, worst(run.results, 5)), markdown_report(s, worst(run.results, 5))
    for category, entry in s.named_sessions.items():
        for x in entry["named"]:
            assert f"<b>{x['session_id']}</b>" in html and f"`{x['session_id']}` (`{x['source']}`)" in md, (category, x)
    assert "<li class='meta'>… and 6 more</li>" in html and "- … and 6 more" in md  # 26 sessions, 20 named
    assert "What to do" in md and "a session may hold several" in md and "the share is tito_session_mismatch_rate/v1/assistant_text" in md


def test_markdown_reads_as_text_and_html_stays_escaped(tmp_path: Path) -> None:
    run = run_score(DUMP, "fixture:qwen3", "qwen3", scorer=Scorer(fixtures.load_tokenizer("qwen3"), "qwen3"))
    hostile = dataclasses.replace(run.results[29], session_id="<b>x</b> & `y` | z", metadata={"note": "a|b <i>"})
    results = [*run.results, hostile]
    s = summarize(results, [], family="qwen3", mode="full", fast_path="off")
    md = markdown_report(s, worst(results, 40), title="tito-fast score: a_b|<c>.jsonl")
    for entity in ("&lt;", "&gt;", "&amp;", "&quot;", "&#"):
        assert entity not in md, entity
    assert "`<|im_end|>`" in md or "<|im_end|>`" in md  # special tokens as they are, in code
    assert "``<b>x</b> & `y` | z``" in md  # a longer fence around a backtick
    assert "metadata: `{\"note\": \"a|b <i>\"}`" in md
    assert md.startswith("# tito-fast score: a_b|\\<c>.jsonl\n")
    prose = outside_code_spans(md)
    assert "<" not in prose.replace("\\<", "") and "&" not in prose.replace("\\&", "")
    assert re.search(r"^\| chat template \| .* \|$", md, re.M)
    html = html_report(s, worst(results, 40))
    assert "<b>x</b>" not in html and "&lt;b&gt;x&lt;/b&gt; &amp; `y` | z" in html and "&lt;|im_end|&gt;" in html
    assert md_code("a`b") == "``a`b``" and md_code("`x") == "`` `x ``" and md_code(" x ") == "`  x  `" and md_code("") == "∅"
    assert md_code("a|b", cell=True) == "`a\\|b`"
    markdown_it = pytest.importorskip("markdown_it")
    page = markdown_it.MarkdownIt("commonmark").enable("table").render(md)
    assert "<b>x</b>" not in page and "<i>" not in page and "<code>&lt;b&gt;x&lt;/b&gt; &amp; `y` | z</code>" in page
    assert "<code>&lt;|im_end|&gt;" in page or "&lt;|im_end|&gt;</code>" in page
    assert "<strong>[<code>" in page  # a differing run: bold brackets around code

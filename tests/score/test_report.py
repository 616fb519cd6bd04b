"""The HTML report renders in a real browser (headless Chromium), and its pieces."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

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
from tito_fast.score.summary import summarize, worst
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

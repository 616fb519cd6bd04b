"""The HTML report renders in a real browser (headless Chromium), and its pieces."""

from __future__ import annotations

import os
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
    terminal_diff,
    text_table,
)
from tito_fast.score.run import run_score
from tito_fast.score.scorer import Scorer
from tito_fast.score.summary import worst
from tito_fast.testing import fixtures

DUMP = Path(__file__).resolve().parents[2] / "examples" / "qwen3_dump.jsonl"
BROWSER = next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)


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

"""The manual's Python examples run (each page's blocks in order, in one namespace)
and its links point at pages that exist. A block whose first line is a
`# not run` comment says why it cannot run here (a Ray cluster, say)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest

from tito_fast.cli.main import EXIT_CODES
from tito_fast.errors import BAD_RECORD_CODES, CATALOGUE

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = sorted(DOCS.glob("*.md"))
RUNNABLE = [*PAGES, ROOT / "README.md"]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def test_readme_is_short_and_links_into_the_manual() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 160
    for target in re.findall(r"\]\((docs/[a-z_]+\.md)\)", readme):
        assert (ROOT / target).is_file(), target


def test_pages_are_in_the_nav_and_links_resolve() -> None:
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    for page in PAGES:
        assert page.name in nav, page.name
        for target in re.findall(r"\]\(([a-z_]+\.md)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            assert (DOCS / target).is_file(), (page.name, target)


@pytest.mark.parametrize("page", RUNNABLE, ids=[p.stem for p in RUNNABLE])
def test_python_examples_run(page: Path, capsys: pytest.CaptureFixture[str]) -> None:
    blocks = [b for b in BLOCK.findall(page.read_text(encoding="utf-8")) if not b.startswith("# not run")]
    namespace: dict[str, Any] = {"__name__": f"docs_{page.stem}"}
    cwd = os.getcwd()
    os.chdir(ROOT)  # examples name files of the repository (examples/...)
    try:
        for k, code in enumerate(blocks):
            exec(compile(code, f"{page.name} block {k + 1}", "exec"), namespace)
    finally:
        os.chdir(cwd)
    capsys.readouterr()


def test_the_error_catalogue_is_documented() -> None:
    """docs/scoring.md's "Error codes" table is `tito_fast.errors.CATALOGUE`, row for row."""
    page = (DOCS / "scoring.md").read_text(encoding="utf-8")
    section = page.split("### Error codes", 1)[1].split("\n#", 1)[0]
    rows = re.findall(r"^\| `([a-z_]+)` \| `(\w+)` \| (\d+) \| (.+?) \|$", section, re.M)
    documented = {code: (cls, int(exit_code), meaning) for code, cls, exit_code, meaning in rows}
    missing = sorted(set(CATALOGUE) - set(documented))
    assert not missing, f"codes missing from docs/scoring.md's Error codes table: {missing}"
    assert documented == CATALOGUE, "the Error codes table differs from tito_fast.errors.CATALOGUE"
    assert {exit_code for _, exit_code, _ in CATALOGUE.values()} <= set(EXIT_CODES.values())
    for code in CATALOGUE:
        assert code.isidentifier() and code == code.lower(), code


def test_the_bad_record_codes_are_documented() -> None:
    """docs/scoring.md's "Bad-record codes" table is `tito_fast.errors.BAD_RECORD_CODES`, row for row."""
    page = (DOCS / "scoring.md").read_text(encoding="utf-8")
    section = page.split("### Bad-record codes", 1)[1].split("\n#", 1)[0]
    documented = dict(re.findall(r"^\| `([a-z_0-9]+)` \| (.+?) \|$", section, re.M))
    assert documented == BAD_RECORD_CODES

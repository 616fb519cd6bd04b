"""Miles' fixed chat templates: where they are, and how to recognise one.

Miles (the reference) installs its own append-only chat template on the
tokenizer for the families that register one (its `load_tokenizer` for
`--tito-model`), and every render, merge and session check then uses it.
tito_fast uses the same files, so its renders equal Miles' by construction.
It ships no copy: the files come from an installed package, looked up in
this order without importing it:

1. `miles` (the framework itself: `miles/utils/chat_template_utils/templates/`);
2. `miles-tito-tokenizers` (PyPI, Miles' standalone extraction:
   `miles_tito_tokenizers/templates/`), installed by `pip install 'tito_fast[miles]'`
   and by the `score` and `test` extras.

A template is recognised as one of them by its sha256 (the files as
published, whichever package is installed), or by being byte-equal to an
installed file.

Example:
    >>> FIXED_TEMPLATES["qwen3"]
    'qwen3_fixed.jinja'
    >>> identify("{{ not a fixed template }}") is None
    True
"""

from __future__ import annotations

import hashlib
import importlib.util
from dataclasses import dataclass
from pathlib import Path

from tito_fast.tokenizer import cache as table_cache

#: Each family that registers a fixed template in Miles, and its file name.
FIXED_TEMPLATES: dict[str, str] = {
    "qwen3": "qwen3_fixed.jinja",
    "qwen35": "qwen3.5_fixed.jinja",
    "qwennext": "qwen3_thinking_2507_and_next_fixed.jinja",
    "kimi25": "kimi_k25_fixed.jinja",
    "minimax_m25": "minimax_m25_fixed.jinja",
    "minimax_m27": "minimax_m27_fixed.jinja",
    "inkling": "inkling_fixed.jinja",
}

#: sha256 of the published fixed templates (Miles at 2026-08, miles-tito-tokenizers 0.1.1) -> file name.
KNOWN_SHA256: dict[str, str] = {
    "c0f795b809f8b461e072a03c88eb7de42fc3a72e4a68f2fef804491986acd0dc": "qwen3_fixed.jinja",
    "51a8a66ead97dd7b761f074f6f23f9168367f41a24b80386d97502885843c1d5": "qwen3.5_fixed.jinja",
    "456c8025860fb3bc14a37ae01e563399e6f468f48e306c5b0ad83ff28eb0b7d7": "qwen3_thinking_2507_and_next_fixed.jinja",
    "b4b2cd69d0c6611deede457b6792d8ca81125461ad6d13f0153c695db885209b": "kimi_k25_fixed.jinja",
    "1a0918f9feafbe50b0ebf8aa938d4ca4dbaa42ab58962c3db0be30b4d71ef150": "minimax_m25_fixed.jinja",
    "423a4e4c8b56910f2a7c86174eab9c488a610a7a6170af56fe918b3046c6d2b8": "minimax_m27_fixed.jinja",
    "3d8f5cf7ccedf9c98a15b496d0dbfbad12dd60f6752845f5aff1b7f7572c6945": "inkling_fixed.jinja",
}

# (package, folder inside it), in the order they are preferred.
_SOURCES = (
    ("miles", "utils/chat_template_utils/templates", "Miles"),
    ("miles_tito_tokenizers", "templates", "miles-tito-tokenizers"),
)


@dataclass(frozen=True)
class FixedTemplate:
    """One fixed template file: its name, text and where it was read."""

    name: str
    text: str
    origin: str


def _folders() -> list[tuple[Path, str]]:
    out = []
    for package, inner, label in _SOURCES:
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            continue
        for root in (spec.submodule_search_locations or []) if spec else []:
            folder = Path(root) / inner
            if folder.is_dir():
                out.append((folder, label + _version(package)))
    return out


def _version(package: str) -> str:
    version = table_cache.versions((package,))[0]
    return "" if version is None else " " + version


def find_fixed_template(family: str) -> FixedTemplate | None:
    """The family's fixed template from the first installed package that has it, or None
    (the family registers none, or no package is installed)."""
    name = FIXED_TEMPLATES.get(family)
    if name is None:
        return None
    for folder, label in _folders():
        path = folder / name
        if path.is_file():
            return FixedTemplate(name, path.read_text(encoding="utf-8"), f"{label}: {name}")
    return None


def find_by_name(name: str) -> FixedTemplate | None:
    """The fixed template with file name `name` (e.g. "qwen3_fixed.jinja") from the first
    installed package that has it, or None (not a fixed template's name, or not installed)."""
    family = next((f for f, n in FIXED_TEMPLATES.items() if n == name), None)
    return None if family is None else find_fixed_template(family)


def identify(template: str) -> str | None:
    """The file name of a fixed template equal to `template`, or None."""
    digest = hashlib.sha256(template.encode("utf-8")).hexdigest()
    if digest in KNOWN_SHA256:
        return KNOWN_SHA256[digest]
    for folder, _ in _folders():
        for name in FIXED_TEMPLATES.values():
            path = folder / name
            if path.is_file() and path.read_text(encoding="utf-8") == template:
                return name
    return None


def package_available() -> bool:
    """Whether a package holding the fixed templates is installed."""
    return bool(_folders())

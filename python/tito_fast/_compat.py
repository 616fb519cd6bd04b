"""Old module paths (`tito_fast.comparator`, `tito_fast.job`, ...) kept working for one release.

Each old path is an alias of the module that now holds its code: importing it
returns that very module (same objects, no copy, no warning), loaded only
when first imported.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
from types import ModuleType
from typing import Any, cast

#: old path -> the module that holds its code now
ALIASES: dict[str, str] = {
    "tito_fast.vocab": "tito_fast.tokenizer.vocab",
    "tito_fast.encoder": "tito_fast.tokenizer.encoder",
    "tito_fast.comparator": "tito_fast.compare.comparator",
    "tito_fast.diagnosis": "tito_fast.compare.diagnosis",
    "tito_fast.render": "tito_fast.chat.render",
    "tito_fast.deepseek": "tito_fast.chat.deepseek",
    "tito_fast.messages": "tito_fast.chat.messages",
    "tito_fast.templates": "tito_fast.chat.templates",
    "tito_fast.families": "tito_fast.chat.families",
    "tito_fast.trajectory": "tito_fast.session.trajectory",
    "tito_fast.verify": "tito_fast.session.verify",
    "tito_fast.dump": "tito_fast.score.dump",
    "tito_fast.job": "tito_fast.score.run",
    "tito_fast.report": "tito_fast.score.report",
    "tito_fast.ray": "tito_fast.score.ray",
    "tito_fast.fixtures": "tito_fast.testing.fixtures",
    "tito_fast.reference": "tito_fast.testing.reference",
}


class _AliasFinder:
    """A meta path finder and loader of the aliases (duck-typed: `importlib.abc` costs ~17 ms to import)."""

    def find_spec(self, fullname: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        if fullname in ALIASES:
            return importlib.util.spec_from_loader(fullname, cast(Any, self))
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        return importlib.import_module(ALIASES[spec.name])

    def exec_module(self, module: ModuleType) -> None:
        pass  # the module ran when it was imported under its own name

    def get_code(self, fullname: str) -> object:
        """The code of the module the alias names (`python -m tito_fast.fixtures` runs it)."""
        spec = importlib.util.find_spec(ALIASES[fullname])
        if spec is None or spec.loader is None or not hasattr(spec.loader, "get_code"):
            raise ImportError(f"cannot run {fullname}")
        return spec.loader.get_code(ALIASES[fullname])


def install() -> None:
    """Register the aliases (once)."""
    if not any(isinstance(f, _AliasFinder) for f in sys.meta_path):
        sys.meta_path.append(_AliasFinder())

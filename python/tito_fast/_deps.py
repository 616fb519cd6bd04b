"""The optional packages, imported here and nowhere else, each on first use.

tito_fast itself needs only numpy. Loading a tokenizer from a folder
(transformers), building one (tokenizers), rendering a chat template with
jinja2, Parquet and Arrow files (pyarrow), fast JSON (orjson), Ray Data and
miles-tito-tokenizers' DeepSeek encoders come with extras of the package
(`EXTRAS`, as in pyproject.toml). Each accessor imports its package when it
is called, never when tito_fast is imported, and returns the module, or
raises `MissingDependency` (a `ValueError` and a `ModuleNotFoundError`)
naming the package and the extra that installs it.

Example:
    >>> from tito_fast import _deps
    >>> from tito_fast.errors import MissingDependency
    >>> _deps.EXTRAS["pyarrow"]
    ('parquet', 'score', 'ray')
    >>> try:
    ...     _deps.require("orjson.no_such_module", "parse JSON fast")
    ... except MissingDependency as e:
    ...     print(e)
    tito_fast needs orjson to parse JSON fast: pip install 'tito_fast[score]'
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
from types import ModuleType

from tito_fast.errors import MissingDependency

#: Each optional package (its import name) -> the extras of tito_fast that
#: install it, the smallest first (`[project.optional-dependencies]`).
EXTRAS: dict[str, tuple[str, ...]] = {
    "transformers": ("score",),
    "tokenizers": ("score",),
    "jinja2": ("score",),
    "pyarrow": ("parquet", "score", "ray"),
    "orjson": ("score",),
    "ray": ("ray",),
    "miles_tito_tokenizers": ("miles", "score"),
}


def require(module: str, purpose: str = "") -> ModuleType:
    """Import `module` (an optional package or one of its submodules), or raise
    `MissingDependency` saying what it is needed for (`purpose`) and which
    extra installs it. A package that is installed but cannot be imported
    (one of its own dependencies is missing) is a `MissingDependency` too,
    with the import error as its `detail`."""
    package = module.split(".")[0]
    extras = EXTRAS[package]
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        absent = e.name in (package, module)
        raise MissingDependency(package, extras, purpose, "" if absent else " ".join(str(e).split())) from e


def installed(package: str) -> bool:
    """Whether `package` can be found, without importing it."""
    try:
        return importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):
        return False


def loaded(package: str) -> ModuleType | None:
    """`package` when something imported it already, else None (never imports it)."""
    return sys.modules.get(package)


def transformers() -> ModuleType:
    """`transformers` (`AutoTokenizer`): tokenizers from folders."""
    return require("transformers", "load a tokenizer")


def tokenizers() -> ModuleType:
    """`tokenizers`: building tokenizer files (the test fixtures)."""
    return require("tokenizers", "build a tokenizer")


def jinja2() -> ModuleType:
    """`jinja2`, with the submodules the chat-template environment uses
    (`ext`, `nodes`, `runtime`, `utils`, `sandbox`) and `meta` (a template's
    variables, `tito_fast.session.derive`) imported."""
    for sub in ("ext", "nodes", "runtime", "utils", "sandbox", "meta"):
        require(f"jinja2.{sub}", "render a chat template")
    return require("jinja2", "render a chat template")


def pyarrow() -> ModuleType:
    """`pyarrow`: Arrow tables."""
    return require("pyarrow", "read and write Arrow tables")


def parquet() -> ModuleType:
    """`pyarrow.parquet`: Parquet files."""
    return require("pyarrow.parquet", "read and write Parquet files")


def pyarrow_compute() -> ModuleType:
    """`pyarrow.compute`: kernels over Arrow arrays."""
    return require("pyarrow.compute", "read Arrow tables")


def orjson() -> ModuleType:
    """`orjson`: fast JSON parsing."""
    return require("orjson", "parse JSON fast")


@functools.cache
def orjson_or_none() -> ModuleType | None:
    """`orjson` when it is installed, else None (the caller falls back to `json`)."""
    try:
        return orjson()
    except MissingDependency:
        return None


def ray() -> ModuleType:
    """`ray`: Ray Data."""
    return require("ray", "run on Ray Data")


def miles_tito_tokenizers() -> ModuleType:
    """`miles_tito_tokenizers`: Miles' fixed chat templates and DeepSeek encoders."""
    return require("miles_tito_tokenizers", "use Miles' fixed templates and DeepSeek encoders")


__all__ = [
    "EXTRAS",
    "installed",
    "jinja2",
    "loaded",
    "miles_tito_tokenizers",
    "orjson",
    "orjson_or_none",
    "parquet",
    "pyarrow",
    "pyarrow_compute",
    "ray",
    "require",
    "tokenizers",
    "transformers",
]

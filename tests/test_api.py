"""The public surface: stubs match the extension, examples run, imports stay light."""

from __future__ import annotations

import ast
import doctest
import importlib
import importlib.resources
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import tito_fast
from tito_fast import _core


def _stub_text() -> str:
    return (importlib.resources.files("tito_fast") / "_core.pyi").read_text()


def test_py_typed_and_stub_are_installed() -> None:
    assert (importlib.resources.files("tito_fast") / "py.typed").is_file()
    assert "def common_prefix_len" in _stub_text()


def test_every_public_name_is_exported_and_documented() -> None:
    for name in _core.__all__:
        assert f"{name}" in _stub_text(), name
    for name in tito_fast.__all__:
        obj = getattr(tito_fast, name)
        if callable(obj):
            assert obj.__doc__, name
    assert tito_fast.build_profile in ("release", "debug")
    assert issubclass(tito_fast.TokenInputError, ValueError)
    assert issubclass(tito_fast.PrefixMismatchError, ValueError)
    assert issubclass(tito_fast.TokenBufferError, ValueError)
    assert tito_fast.TokenInputError.__module__ == "tito_fast"


def test_stub_examples_run() -> None:
    """Every `>>>` example in the stub's docstrings gives the output shown."""
    parser = doctest.DocTestParser()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    n_examples = 0
    for node in ast.walk(ast.parse(_stub_text())):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and (doc := ast.get_docstring(node)):
            test = parser.get_doctest(doc, {"tito_fast": tito_fast}, node.name, "_core.pyi", node.lineno)
            n_examples += len(test.examples)
            runner.run(test)
    assert n_examples >= 15
    assert runner.summarize(verbose=False).failed == 0


_MODULES = sorted(m.name for m in pkgutil.walk_packages(tito_fast.__path__, "tito_fast.") if not m.name.endswith("__main__"))


@pytest.mark.parametrize("name", _MODULES)
def test_module_examples_run(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0, name


def test_examples_are_everywhere() -> None:
    attempted = sum(doctest.testmod(importlib.import_module(n), optionflags=doctest.ELLIPSIS).attempted for n in _MODULES)
    assert attempted >= 50


def test_stubtest_agrees_with_the_extension() -> None:
    pytest.importorskip("mypy")
    out = subprocess.run(
        [sys.executable, "-m", "mypy.stubtest", "tito_fast._core"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def test_package_and_tests_type_check() -> None:
    pytest.importorskip("mypy")
    root = Path(__file__).resolve().parent.parent
    for args in (["-p", "tito_fast"], ["--explicit-package-bases", "tests", "benches"]):
        out = subprocess.run(
            [sys.executable, "-m", "mypy", "--strict", *args],
            capture_output=True,
            text=True,
            timeout=600,
            cwd=root,
        )
        assert out.returncode == 0, out.stdout + out.stderr


def test_import_is_light() -> None:
    code = "import sys, tito_fast; print(sorted(m for m in ('transformers', 'tokenizers', 'torch', 'pyarrow', 'ray') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_extension_is_abi3_and_unwinds() -> None:
    assert Path(_core.__file__).name.endswith(".abi3.so") or sys.platform != "linux"

"""A missing optional package is an input error: exit code 2 and one line naming
the package and the extra that installs it (`pip install 'tito_fast[score]'`),
never the internal-error line. The packages are hidden from a subprocess by a
folder, first on PYTHONPATH, whose `transformers.py` / `pyarrow.py` raise
ModuleNotFoundError on import (as an absent package does)."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tito_fast import _deps
from tito_fast.cli.main import EXIT_CODES
from tito_fast.errors import CATALOGUE, MissingDependency, exit_code_of

ROOT = Path(__file__).resolve().parents[2]
DUMP = ROOT / "examples" / "qwen3_dump.jsonl"
CALLS = ROOT / "examples" / "qwen3_calls.jsonl"


def _run_without(hidden: list[str], *args: str, tmp: Path) -> tuple[int, str, str]:
    """`python -m tito_fast ARGS` with the `hidden` packages made impossible to import."""
    folder = tmp / "hide"
    folder.mkdir(exist_ok=True)
    for name in hidden:
        (folder / f"{name}.py").write_text(f"raise ModuleNotFoundError(\"No module named '{name}'\", name={name!r})\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRANSFORMERS_")}
    env["PYTHONPATH"] = os.pathsep.join([str(folder), *filter(None, [os.environ.get("PYTHONPATH")])])
    # a cold cache: a warm one holds the tokenizer's snapshot, and scoring with it needs no transformers
    env["TITO_FAST_TABLES"] = str(tmp / "tables")
    out = subprocess.run(
        [sys.executable, "-m", "tito_fast", *args], cwd=tmp, capture_output=True, text=True, timeout=300, env=env
    )
    return out.returncode, out.stdout, out.stderr


def _one_error(err: str) -> str:
    assert "Traceback" not in err and "internal error" not in err, err
    errors = [x for x in err.splitlines() if x.startswith("tito-fast: error: ")]
    assert len(errors) == 1, err
    return errors[0]


@pytest.fixture(scope="module")
def parquet_dump(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from tito_fast.score.dump import write_parquet

    path = tmp_path_factory.mktemp("deps") / "dump.parquet"
    write_parquet(path, [json.loads(x) for x in DUMP.read_text(encoding="utf-8").splitlines()[:2]])
    return path


@pytest.mark.parametrize(
    ("hidden", "args", "package"),
    [
        (["transformers"], ["score", str(DUMP), "--tokenizer", "fixture:qwen3", "--family", "qwen3"], "transformers"),
        (["transformers"], ["diff", str(DUMP), "--tokenizer", "fixture:qwen3", "--family", "qwen3"], "transformers"),
        (["transformers"], ["assemble", str(CALLS), "--tokenizer", "fixture:qwen3", "--quiet"], "transformers"),
        (["pyarrow"], ["score", "PARQUET", "--tokenizer", "fixture:qwen3", "--family", "qwen3"], "pyarrow"),
        (["pyarrow"], ["assemble", str(CALLS), "--out", "chains.parquet", "--quiet"], "pyarrow"),
    ],
    ids=["score", "diff", "assemble", "score-parquet", "assemble-out-parquet"],
)
def test_a_missing_package_is_exit_2_naming_the_extra(
    tmp_path: Path, parquet_dump: Path, hidden: list[str], args: list[str], package: str
) -> None:
    args = [str(parquet_dump) if a == "PARQUET" else a for a in args]
    code, _, err = _run_without(hidden, *args, tmp=tmp_path)
    line = _one_error(err)
    assert code == EXIT_CODES["input"] == 2, err
    assert f"tito-fast {args[0]} needs {package}" in line and "pip install 'tito_fast[score]'" in line, line


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    code, _, err = _run_without(["transformers"], "score", str(DUMP), "--tokenizer", "fixture:qwen3", "--debug", tmp=tmp_path)
    assert code == 2 and "Traceback" in err and "MissingDependency" in err


def test_the_library_names_the_smallest_extra(tmp_path: Path) -> None:
    code = "from tito_fast.score.dump import count_records; count_records('x.parquet')"
    (tmp_path / "x.parquet").write_bytes(b"PAR1")
    folder = tmp_path / "hide"
    folder.mkdir()
    (folder / "pyarrow.py").write_text("raise ModuleNotFoundError(\"No module named 'pyarrow'\", name='pyarrow')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), *filter(None, [os.environ.get("PYTHONPATH")])])}
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    last = out.stderr.strip().splitlines()[-1]
    assert last == (
        "tito_fast.errors.MissingDependency: tito_fast needs pyarrow to read and write Parquet files: "
        "pip install 'tito_fast[parquet]'"
    ), out.stderr


def test_missing_dependency_is_an_input_error_and_an_import_error() -> None:
    e = MissingDependency("transformers", ("score",), "load a tokenizer")
    assert isinstance(e, ValueError) and isinstance(e, ModuleNotFoundError) and e.name == "transformers"
    assert str(e) == "tito_fast needs transformers to load a tokenizer: pip install 'tito_fast[score]'"
    assert e.message("tito-fast score") == "tito-fast score needs transformers to load a tokenizer: pip install 'tito_fast[score]'"
    assert exit_code_of(e) == CATALOGUE["missing_dependency"][1] == 2
    back = pickle.loads(pickle.dumps(e))  # workers send it back to the parent
    assert type(back) is MissingDependency and str(back) == str(e) and back.extras == ("score",)
    broken = MissingDependency("pyarrow", ("parquet", "score"), "read Parquet", "No module named 'numpy.core'")
    assert broken.message(prefer="score") == (
        "tito_fast needs pyarrow to read Parquet, which is installed but cannot be imported "
        "(No module named 'numpy.core'): pip install 'tito_fast[score]'"
    )


def test_require_tells_an_absent_package_from_a_broken_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "orjson", None)  # `import orjson` raises ModuleNotFoundError(name="orjson")
    with pytest.raises(MissingDependency, match=r"needs orjson to parse JSON fast: pip install 'tito_fast\[score\]'$") as info:
        _deps.orjson()
    assert info.value.detail == ""
    assert _deps.installed("tito_fast") and not _deps.installed("tito_fast_no_such_package")


def test_extras_agree_with_pyproject() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["optional-dependencies"]

    def module(requirement: str) -> str:
        name = requirement.split("[")[0].split(">")[0].split("=")[0].split("<")[0].strip()
        return name.replace("-", "_").lower()

    for package, named in _deps.EXTRAS.items():
        installing = tuple(extra for extra, reqs in extras.items() if extra != "test" and package in map(module, reqs))
        assert set(named) == set(installing), (package, named, installing)


def test_every_error_class_is_catalogued_under_its_own_code() -> None:
    from tito_fast import errors

    classes = [obj for name in errors.__all__ if isinstance(obj := getattr(errors, name), type) and issubclass(obj, BaseException)]
    assert sorted(c.__name__ for c in classes) == sorted(name for name, _, _ in CATALOGUE.values())
    for cls in classes:
        assert "code" in vars(cls) and "exit_code" in vars(cls), f"{cls.__name__} inherits its code: give it its own"
        assert CATALOGUE[vars(cls)["code"]][:2] == (cls.__name__, vars(cls)["exit_code"])
        assert exit_code_of(cls.__new__(cls)) == vars(cls)["exit_code"]
    assert exit_code_of(RuntimeError("a bug")) is None and exit_code_of(ModuleNotFoundError("x")) is None

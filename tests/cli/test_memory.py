"""The command keeps freed memory for reuse in its own process (`cli.main.keep_freed_memory`)."""

from __future__ import annotations

import importlib
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

cli_main = importlib.import_module("tito_fast.cli.main")  # the module (the package exports its `main` function)


@pytest.mark.parametrize(
    "env",
    [{"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=131072"}, {"MALLOC_TRIM_THRESHOLD_": "131072"}, {"MALLOC_MMAP_THRESHOLD_": "1"}],
)
def test_a_users_allocator_settings_are_kept(env: dict[str, str]) -> None:
    assert cli_main.keep_freed_memory(env) is False


def test_the_score_command_sets_it_and_the_library_does_not(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(cli_main, "_AS_COMMAND", False)  # restored to False after `main` sets it
    calls: list[tuple[int, int]] = []

    def record(trim: int, mmap: int) -> bool:
        calls.append((trim, mmap))
        return True

    monkeypatch.setattr(cli_main, "_core_keep_freed_memory", record)
    monkeypatch.delenv("GLIBC_TUNABLES", raising=False)
    for k in [k for k in os.environ if k.startswith("MALLOC_") and k.endswith("_")]:
        monkeypatch.delenv(k)
    dump = tmp_path / "empty.jsonl"
    dump.write_text("")
    score = ["score", str(dump), "--tokenizer", "fixture:qwen3", "--family", "qwen3", "--quiet"]
    cli_main.cli(*score)  # what a library user or a test calls
    assert calls == []
    for argv, want in [(["--version"], []), (score, [cli_main.KEEP_FREED])]:  # the command: only `score` asks
        monkeypatch.setattr(sys, "argv", ["tito-fast", *argv])
        with pytest.raises(SystemExit):
            cli_main.main()
        assert calls == want


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_glibc_takes_the_settings() -> None:
    code = "from tito_fast.cli.main import keep_freed_memory; print(keep_freed_memory({}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=dict(os.environ))
    assert out.stdout.strip() == "True"



def test_the_command_asks_openblas_for_one_thread_before_numpy_is_imported() -> None:
    """`tito_fast.__main__.main` (the script) sets OPENBLAS_NUM_THREADS before
    anything imports numpy, unless the user set a thread count; importing the
    package or its command line sets nothing."""
    code = (
        "import os, sys\n"
        "import tito_fast.__main__ as m\n"
        "print('numpy' in sys.modules)\n"
        "import tito_fast.cli\n"
        "print(os.environ.get('OPENBLAS_NUM_THREADS'))\n"
        "c = sys.modules['tito_fast.cli.main']\n"
        "c.main = lambda: print(os.environ.get('OPENBLAS_NUM_THREADS'))\n"
        "m.main()\n"
    )
    base = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")}
    cases = [({}, "1"), ({"OPENBLAS_NUM_THREADS": "4"}, "4"), ({"OMP_NUM_THREADS": "3"}, "None"), ({"OPENBLAS_NUM_THREADS": ""}, "1")]
    for extra, want in cases:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env={**base, **extra})
        assert out.stdout.splitlines() == ["False", str(extra.get("OPENBLAS_NUM_THREADS")), want]

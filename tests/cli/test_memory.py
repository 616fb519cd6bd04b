"""The command keeps freed memory for reuse in its own process (`cli.main.keep_freed_memory`)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from tito_fast.cli.main import keep_freed_memory


@pytest.mark.parametrize(
    "env",
    [{"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=131072"}, {"MALLOC_TRIM_THRESHOLD_": "131072"}, {"MALLOC_MMAP_THRESHOLD_": "1"}],
)
def test_a_users_allocator_settings_are_kept(env: dict[str, str]) -> None:
    assert keep_freed_memory(env) is False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_the_command_sets_the_allocator_in_its_own_process() -> None:
    code = "from tito_fast.cli.main import keep_freed_memory; print(keep_freed_memory({}))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env={"PATH": ""})
    assert out.stdout.strip() in ("True", "False")  # False: a libc other than glibc (musl)
    if platform.libc_ver()[0] == "glibc":
        assert out.stdout.strip() == "True"

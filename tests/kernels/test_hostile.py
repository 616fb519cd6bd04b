"""Hostile input to the kernels: lying lengths, released buffers, corrupt
state, absurd counts. Each ends in a Python exception or a right answer,
never an abort of the process."""

from __future__ import annotations

import array
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

import tito_fast
from tito_fast._core import Segmenter


class LyingLength:
    """Claims 10**15 items, yields three."""

    def __len__(self) -> int:
        return 10**15

    def __iter__(self) -> Any:
        return iter([1, 2, 3])


class LyingSeqs:
    """A batch that claims 10**15 sequences and yields one."""

    def __len__(self) -> int:
        return 10**15

    def __iter__(self) -> Any:
        return iter([LyingLength()])


def test_a_lying_length_reserves_nothing_in_a_child_process() -> None:
    # Before the fix this aborted the interpreter inside a Rust allocation;
    # run it in a child so an abort fails this test rather than the session.
    code = textwrap.dedent(
        """
        import tito_fast
        from tito_fast._core import Segmenter
        from tests.kernels.test_hostile import LyingLength, LyingSeqs
        assert tito_fast.common_prefix_len(LyingLength(), [1, 2, 3]) == 3
        assert tito_fast.common_prefix_len_batch([LyingLength()], [[1, 2, 9]]) == [2]
        assert tito_fast.common_prefix_len_batch(LyingSeqs(), [[1, 2, 3]]) == [3]
        tito_fast.check_prefix(LyingLength(), [1, 2, 3, 4])
        assert tito_fast.merge_tokens(LyingLength(), LyingLength()) == [1, 2, 3, 1, 2, 3]
        buf = tito_fast.TokenBuffer(LyingLength())
        buf.extend(LyingLength())
        assert len(buf) == 6
        assert len(Segmenter({9}).align_batch(LyingSeqs(), [[1, 2, 3]])) == 1
        print("ok")
        """
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "ok"


def test_a_released_memoryview_is_an_error_not_empty() -> None:
    view = memoryview(array.array("I", [9, 9, 9]))
    view.release()
    with pytest.raises(tito_fast.TokenInputError, match="released") as info:
        tito_fast.check_prefix(view, [9, 9, 9])
    assert info.value.argument == "stored"
    with pytest.raises(tito_fast.TokenInputError, match="released"):
        tito_fast.common_prefix_len([9], view)


def test_a_corrupt_pickle_state_is_refused() -> None:
    buf = tito_fast.TokenBuffer()
    # One id, a checkpoint at 100: rollback(1) would "restore" 100 ids.
    with pytest.raises(tito_fast.TokenBufferError, match="checkpoint 0 is at 100"):
        buf.__setstate__((b"\x01\x00\x00\x00", [100], []))
    # An undo record pointing past the ids it restores.
    with pytest.raises(tito_fast.TokenBufferError, match="undo record"):
        buf.__setstate__((b"\x01\x00\x00\x00\x02\x00\x00\x00", [2], [(1, 5, b"\x01\x00\x00\x00")]))
    assert len(buf) == 0  # left as it was


@pytest.mark.parametrize("probe", [2**63, 2**64 - 1, 2**70])
def test_huge_probe_counts_read_the_whole_segment(probe: int) -> None:
    seg = Segmenter({9})
    a = seg.align([1, 9, 2, 3], [1, 9, 2, 4], assistant_start=b"x", probe_ids=probe)
    b = seg.align([1, 9, 2, 3], [1, 9, 2, 4], assistant_start=b"x", probe_ids=4)
    assert a.verdicts.tolist() == b.verdicts.tolist()


@pytest.mark.parametrize(("probe", "words"), [(-1, ">= 0"), (1.5, "float"), (True, "bool"), ("3", "str")])
def test_bad_probe_counts_are_value_errors(probe: Any, words: str) -> None:
    with pytest.raises(ValueError, match=f"probe_ids.*{words}"):
        Segmenter({9}).align([1], [1], probe_ids=probe)
    with pytest.raises(ValueError, match="probe_ids"):
        Segmenter({9}).align_batch([[1]], [[1]], probe_ids=probe)


def _threads() -> int:
    return len(os.listdir("/proc/self/task"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads through /proc")
def test_many_thread_counts_keep_few_pools_alive() -> None:
    before = _threads()
    for n in [*range(1, 41), 255, 256, 300, 10**6]:
        tito_fast.common_prefix_len_batch([[1, 2]] * 4, [[1, 2]] * 4, threads=n)
    # Four pools at most, of at most 256 threads each (300 and 10**6 share
    # the 256 pool); a pool dropped from the cache ends its threads once no
    # call holds it. Before the fix, 1..300 left 32,433 threads.
    deadline = time.monotonic() + 10
    while _threads() - before > 4 * 256 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _threads() - before <= 4 * 256, _threads()


def test_an_id_near_2_32_does_not_make_a_huge_bitmap() -> None:
    # A bitmap from 0 to 2**32-1 is 512 MiB; the set must be sized by the ids.
    code = textwrap.dedent(
        """
        import resource
        import tito_fast
        from tito_fast._core import Segmenter
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        segs = [Segmenter({0, 9, 2**32 - 1}) for _ in range(4)]
        a = segs[0].align([1, 9, 2], [1, 9, 3], trim_ids=[2**32 - 1, 5])
        trimmed = tito_fast.trim_trailing([1, 2, 2**32 - 1], [0, 2**32 - 1])
        grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
        assert trimmed == [1, 2], trimmed
        print(grown)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout) < 64 * 1024, f"peak RSS grew by {int(out.stdout)} KiB"

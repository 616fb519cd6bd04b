"""Any size: scoring 100,000 sessions keeps memory flat after warm-up.

The dump is generated on the fly (short Qwen3 sessions, one in ten with a
changed reply), scored by `tito-fast score` in a child process with results
streamed to `--out` and `--json`, and the child's resident memory is
sampled while it runs. Before streaming, every result stayed in memory
(0.43 MB per long session)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from tito_fast.score.dump import Record
from tito_fast.score.scorer import Scorer
from tito_fast.testing import fixtures
from tito_fast.testing.memory import rss_kib

SESSIONS = int(os.environ.get("TITO_FAST_SCALE_SESSIONS", "100000"))


def _write_dump(path: Path, n: int) -> None:
    scorer = Scorer(fixtures.load_tokenizer("qwen3"), "qwen3")
    lines = []
    for k in range(10):
        msgs = [
            {"role": "user", "content": f"What is {k} + {k}?"},
            {"role": "assistant", "content": f"{2 * k}", "reasoning_content": f"Add {k} and {k}."},
        ]
        engine = [dict(m) for m in msgs]
        if k == 0:
            engine[1]["content"] = "a different reply"
        ids = scorer.expected_ids(Record("x", "x", engine, np.zeros(0, dtype=np.uint32)))
        lines.append((json.dumps(msgs), json.dumps(ids.tolist())))
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n):
            msgs_json, ids_json = lines[i % 10]
            f.write(f'{{"session_id": "s{i}", "messages": {msgs_json}, "token_ids": {ids_json}, "metadata": {{"i": {i}}}}}\n')


def test_memory_is_flat_over_many_sessions(tmp_path: Path) -> None:
    dump = tmp_path / "many.jsonl"
    _write_dump(dump, SESSIONS)
    out, summary = tmp_path / "results.parquet", tmp_path / "summary.json"
    cmd = [sys.executable, "-m", "tito_fast", "score", str(dump), "--tokenizer", "fixture:qwen3", "--family", "qwen3",
           "--out", str(out), "--json", str(summary), "--quiet"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    samples: list[int] = []
    while proc.poll() is None:
        rss = rss_kib(proc.pid)
        if rss is not None:
            samples.append(rss)
        time.sleep(0.2)
    _, err = proc.communicate()
    assert proc.returncode == 0, err[-3000:]
    data = json.loads(summary.read_text())
    assert data["summary"]["sessions"] == SESSIONS and len(data["sessions"]) == SESSIONS
    assert abs(data["summary"]["metrics"]["tito_session_mismatch_rate/v1"] - 0.1) < 1e-9
    assert pq.ParquetFile(out).metadata.num_rows == SESSIONS
    # Warm-up: the tokenizer, the byte table, the thread pools, the piece
    # caches and allocator arenas of the threads, the first chunks: about a
    # second and 200 MiB, whatever the dump's size. It is measured out in time,
    # and since the native check made scoring several times faster, a quarter
    # of the run no longer covers it: the second half of the run is compared
    # with its start. There the resident size may wobble but must not grow
    # with the sessions scored (a leak of 1 KiB a session would add 49 MiB).
    assert len(samples) >= 20, samples
    warm = samples[len(samples) // 2]
    growth_mib = (max(samples[len(samples) // 2 :]) - warm) / 1024
    print(f"RSS: warm {warm / 1024:.0f} MiB, peak {max(samples) / 1024:.0f} MiB, growth after warm-up {growth_mib:.1f} MiB")
    print("RSS MiB over the run:", [s // 1024 for s in samples[:: max(1, len(samples) // 30)]])
    assert growth_mib < 32, (warm, max(samples), samples[:: max(1, len(samples) // 40)])

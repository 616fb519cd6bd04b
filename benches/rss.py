"""Resident memory of `tito-fast score` on long sessions (run by hand; figures in docs/benchmarks.md).

    python -m benches.rss 500 5000

For each size, writes a dump of Qwen3 agent sessions of 50 turns (the score
benchmark's sessions, 30% with a planted fault), scores it in a child
process with results streamed to `--out`, samples the child's VmRSS every
0.2 s and prints the peak and the RSS at a quarter, half and the end of the
run.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benches.bench_score import _dump
from tito_fast.testing.memory import rss_kib


def measure(n: int, turns: int = 50, workers: int = 1, out: bool = True) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as d:
        dump = _dump(Path(d) / "dump.jsonl", n, turns)
        cmd = [sys.executable, "-m", "tito_fast", "score", str(dump), "--tokenizer", "fixture:qwen3", "--family", "qwen3",
               "--quiet", "--workers", str(workers)]  # fmt: skip
        if out:  # (`--out` is absent before streaming: pass --no-out to measure such a version)
            cmd += ["--out", str(Path(d) / "results.parquet")]
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        samples = []
        while proc.poll() is None:
            if (rss := rss_kib(proc.pid)) is not None:
                samples.append(rss / 1024)
            time.sleep(0.2)
        err = proc.stderr.read() if proc.stderr else ""
        if proc.returncode != 0:
            raise SystemExit(err)
        seconds = time.perf_counter() - start
    k = len(samples)
    return {
        "sessions": n,
        "seconds": seconds,
        "peak_mib": max(samples),
        "quarter_mib": samples[k // 4],
        "half_mib": samples[k // 2],
        "end_mib": samples[-1],
    }


def main() -> None:
    args = [a for a in sys.argv[1:] if a != "--no-out"]
    for arg in args or ["500", "5000"]:
        r = measure(int(arg), out="--no-out" not in sys.argv)
        print(
            f"{r['sessions']:>6} sessions of 50 turns: {r['seconds']:.0f} s, RSS peak {r['peak_mib']:.0f} MiB "
            f"(at 1/4 {r['quarter_mib']:.0f}, 1/2 {r['half_mib']:.0f}, end {r['end_mib']:.0f})",
            flush=True,
        )


if __name__ == "__main__":
    main()

"""Scale of `assemble` (issue: linear assembly): time and peak memory of
shapes that were quadratic in calls per session, each in a fresh process.

    python benches/scale_assemble.py [CASE ...]

Cases (ids are synthetic; B = 100 marks a block, 9 ends a completion):
(`retries_250k`, `roots_100k`: the same shapes at other sizes.)
- `retries_1m`: one session of 1,000,000 calls, each a retry of a shared
  200-id context with its own 20-id question: every call branches off.
- `roots_1m`: one session of 1,000,000 calls with their own system prompts
  (sub-agents): every call is a new root.
- `agent_loop_100k`: one session of 100,000 calls of a compacting agent loop
  (the prompt keeps the system block and the last 30 turns): every call a
  rewrite.
- `sessions_10k_x_100`: 10,000 sessions of 100 calls of an agent loop (each
  call adds 8 ids; 450M prompt ids in all).

Prints one line per case: calls, chains, seconds (assemble on an Arrow
table, after the table is built), the RSS once the table is built and the
process's peak RSS (building the input costs part of that peak).
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import time
from typing import Any

import numpy as np

B, END = 100, 9


def _table(session: np.ndarray, prompts: list[np.ndarray], completions: list[np.ndarray]) -> Any:
    import pyarrow as pa

    def column(parts: list[np.ndarray]) -> Any:
        offsets = np.zeros(len(parts) + 1, dtype=np.int64)
        np.cumsum([len(p) for p in parts], out=offsets[1:])
        return pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(np.concatenate(parts).astype(np.uint32)))

    return pa.table({"session_id": pa.array(session), "prompt_ids": column(prompts), "completion_ids": column(completions)})


def _size(case: str) -> int:
    """`retries_250k` -> 250,000."""
    n = case.rsplit("_", 1)[1]
    return int(float(n[:-1]) * {"k": 1e3, "m": 1e6}[n[-1]])


def build(case: str) -> Any:
    rng = np.random.default_rng(0)
    if case.startswith("retries_"):
        n = _size(case)
        context = np.concatenate([[B], rng.integers(10, 50_000, 120), [B], rng.integers(10, 50_000, 78)]).astype(np.uint32)
        questions = rng.integers(10, 50_000, (n, 20)).astype(np.uint32)
        prompts = [np.concatenate([context, q, [B]]) for q in questions]
        completions = list(np.concatenate([rng.integers(10, 50_000, (n, 3)), np.full((n, 1), END)], axis=1).astype(np.uint32))
        return _table(np.zeros(n, dtype=np.int64), prompts, completions)
    if case.startswith("roots_"):
        n = _size(case)
        systems = rng.integers(10, 50_000, (n, 30)).astype(np.uint32)
        prompts = [np.concatenate([[B], s, [B, 11, 12, B]]) for s in systems]
        completions = list(np.concatenate([rng.integers(10, 50_000, (n, 3)), np.full((n, 1), END)], axis=1).astype(np.uint32))
        return _table(np.zeros(n, dtype=np.int64), prompts, completions)
    if case == "agent_loop_100k":
        n = 100_000
        system = np.concatenate([[B], rng.integers(10, 50_000, 60)]).astype(np.uint32)
        turns = [np.concatenate([[B], rng.integers(10, 50_000, 8), [END, B], rng.integers(10, 50_000, 6)]).astype(np.uint32) for _ in range(n)]
        prompts = [np.concatenate([system, *turns[max(0, k - 30) : k], [B]]) for k in range(n)]
        completions = [t[1:10] for t in turns]
        return _table(np.zeros(n, dtype=np.int64), prompts, completions)
    if case == "sessions_10k_x_100":
        s, calls, start, step = 10_000, 100, 100, 8
        prompts, completions = [], []
        for _ in range(s):
            m = rng.integers(10, 50_000, start + step * calls + 4).astype(np.uint32)
            m[0] = B
            for k in range(calls):
                end = start + step * k
                m[end - 1] = B
                prompts.append(m[:end])
                m[end + 3] = END
                completions.append(m[end : end + 4])
        return _table(np.repeat(np.arange(s), calls), prompts, completions)
    raise SystemExit(f"unknown case {case!r}")


def run(case: str) -> dict[str, object]:
    from tito_fast import assemble
    from tito_fast.chains import core

    # the synthetic ids' family: END may be trimmed, B opens a block (as the tests' and benches')
    setattr(core, "_family", lambda tokenizer, family: core._Family([END], 1, [B], None, None))
    table = build(case)
    import gc

    gc.collect()
    before = _rss_now()
    start = time.perf_counter()
    a = assemble(table)
    seconds = time.perf_counter() - start
    s = a.summary
    assert s.delivered_ids + sum(s.masked_by_cause.values()) + sum(s.dropped_by_cause.values()) == s.sampled_ids
    return {
        "case": case, "calls": s.calls, "sessions": s.sessions, "chains": s.chains, "seconds": round(seconds, 2),
        "rss_before_gib": round(before, 2),
        "peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
        "prompt_ids": int(sum(len(c.values) for c in table.column("prompt_ids").chunks)),
        "events": dict(sorted(s.events_by_kind.items())),
    }  # fmt: skip


def _rss_now() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**30


CASES = ["retries_1m", "roots_1m", "agent_loop_100k", "sessions_10k_x_100"]

if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--one":
        print(json.dumps(run(sys.argv[2])))
        raise SystemExit(0)
    for case in sys.argv[1:] or CASES:
        out = subprocess.run([sys.executable, __file__, "--one", case], capture_output=True, text=True)
        print(out.stdout.strip() or out.stderr.strip()[-2000:], flush=True)

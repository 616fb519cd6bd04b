"""Whole commands, start-up included: `tito-fast score` against the
reference pipeline run as a command (`benches/reference_score.py`), each a
fresh Python process, on a small dump (5 sessions: start-up dominates) and a
larger one (100 sessions at full size).

The sessions are the score group's Qwen3 agent sessions (50 turns, about
14k ids, 30% with a planted fault). `tito_fast`: `python -m tito_fast score
DUMP --tokenizer fixture:qwen3 --family qwen3 --json OUT` with the tables'
cache warm (`tito_fast.tokenizer.cache`, a folder of the run warmed by one
run first); `tito_fast_cold_cache`: the same with the cache off
(`TITO_FAST_TABLES=off`); `python`: the reference pipeline. All must give
the same mismatch lists.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benches.bench_score import _cached_dump, _scorer


def _family_file(d: Path) -> Path:
    """The family's constants as a user of the reference has them (computed here, not in the timed command)."""
    tito = _scorer().tito
    p = d / "family.json"
    p.write_text(
        json.dumps(
            {
                "tokenizer": "qwen3",
                "chat_template": tito.chat_template,
                "template_kwargs": dict(tito.chat_template_kwargs),
                "assistant_start_str": tito.assistant_start_str,
                "special_token_ids": None if tito.special_token_ids is None else sorted(tito.special_token_ids),
                "trailing_token_ids": sorted(tito.trailing_token_ids),
            }
        ),
        encoding="utf-8",
    )
    return p


def _run(cmd: list[str], env: dict[str, str]) -> None:
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    assert done.returncode in (0, 1), done.stderr[-2000:]  # 1: tito-fast found differences


@pytest.mark.parametrize("size", ["small", "large"])
@pytest.mark.parametrize("impl", ["python", "tito_fast", "tito_fast_cold_cache"])
def bench_command(benchmark: Any, full_size: bool, impl: str, size: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    n = (5 if size == "small" else 100) if full_size else (2 if size == "small" else 4)
    turns = 50 if full_size else 3
    dump = _cached_dump(tmp_path_factory, n, turns)
    d = tmp_path_factory.mktemp("command")
    out = d / "out.json"
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    if impl == "python":
        cmd = [sys.executable, "-m", "benches.reference_score", str(dump), str(_family_file(d)), str(out)]
    else:
        cmd = [sys.executable, "-m", "tito_fast", "score", str(dump), "--tokenizer", "fixture:qwen3", "--family", "qwen3", "--json", str(out)]
        env["TITO_FAST_TABLES"] = str(d / "tables") if impl == "tito_fast" else "off"
        if impl == "tito_fast":
            _run(cmd, env)  # warms the cache
    benchmark.group = f"whole command, start-up included: score {n} Qwen3 sessions of {turns} turns"
    benchmark.extra_info["sessions"] = n
    benchmark.pedantic(lambda: _run(cmd, env), rounds=3 if full_size else 1, iterations=1)
    data = json.loads(out.read_text(encoding="utf-8"))
    lists = data if impl == "python" else [r["mismatches"] for r in data["sessions"]]
    _LISTS.setdefault((n, turns), lists)
    assert lists == _LISTS[(n, turns)]  # the same mismatch lists, whichever command made them


_LISTS: dict[tuple[int, int], Any] = {}

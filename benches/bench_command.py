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

`bench_command_families`: the same commands on dumps shaped like agent
rollouts (`benches.agent_dumps`: 3-150 turns, long and varied tool
outputs, unicode, one to three tool calls a turn, 75% of sessions
differing) for Qwen3, GLM-4.7, Llama 3.1 and MiniMax-M2.7 (full size: 120
Qwen3 sessions, 60 of each other family), with the pipeline a Miles user
runs with miles-tito-tokenizers (`benches/mtt_score.py`) in the same run
(it renders tool definitions as given, not in SGLang's canonical form as
the engine and the reference do, so its lists differ in the system block:
it is timed, and its agreement recorded).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benches import agent_dumps
from benches.bench_score import _cached_dump, _scorer
from tito_fast.chat.families import TitoTokenizer


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


_LISTS: dict[tuple[Any, int], Any] = {}


def _constants(d: Path, fixture: str, tito: TitoTokenizer, miles_type: str) -> Path:
    """A family's constants as a user of the reference (and of miles-tito-tokenizers) has them."""
    p = d / "family.json"
    p.write_text(
        json.dumps(
            {
                "tokenizer": fixture,
                "chat_template": tito.chat_template,
                "template_kwargs": dict(tito.chat_template_kwargs),
                "assistant_start_str": tito.assistant_start_str,
                "special_token_ids": None if tito.special_token_ids is None else sorted(tito.special_token_ids),
                "trailing_token_ids": sorted(tito.trailing_token_ids),
                "miles_type": miles_type,
            }
        ),
        encoding="utf-8",
    )
    return p


#: The package's tokenizer type for each fixture (Llama 3 is not one of Miles' families).
_MILES_TYPE = {"qwen3": "qwen3", "glm47": "glm47", "llama31": "default", "minimax_m27": "minimax_m27"}


@pytest.mark.parametrize("fixture", list(agent_dumps.FAMILIES))
@pytest.mark.parametrize("impl", ["python", "miles_tito_tokenizers", "tito_fast"])
def bench_command_families(benchmark: Any, full_size: bool, impl: str, fixture: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    n = (120 if fixture == "qwen3" else 60) if full_size else 3
    dump = _agent_dump(tmp_path_factory, fixture, n, 150 if full_size else 6)
    d = tmp_path_factory.mktemp("command")
    out = d / "out.json"
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    family = agent_dumps.FAMILIES[fixture]
    if impl in ("python", "miles_tito_tokenizers"):
        module = "benches.reference_score" if impl == "python" else "benches.mtt_score"
        cmd = [sys.executable, "-m", module, str(dump), str(_constants(d, fixture, agent_dumps.tito_for(fixture), _MILES_TYPE[fixture])), str(out)]
    else:
        cmd = [sys.executable, "-m", "tito_fast", "score", str(dump), "--tokenizer", f"fixture:{fixture}", "--family", family, "--json", str(out)]
        env["TITO_FAST_TABLES"] = str(tmp_path_factory.getbasetemp() / f"tables-{fixture}")
        _run(cmd, env)  # warms the cache, as any later run of a user finds it
    benchmark.group = f"whole command, start-up included: score {n} agent sessions ({fixture}, 3-150 turns, 75% differing)"
    benchmark.extra_info.update(sessions=n, family=family)
    benchmark.pedantic(lambda: _run(cmd, env), rounds=3 if full_size else 1, iterations=1)
    data = json.loads(out.read_text(encoding="utf-8"))
    lists = data if impl != "tito_fast" else [r["mismatches"] for r in data["sessions"]]
    benchmark.extra_info["differing"] = sum(1 for x in lists if x)
    if impl == "miles_tito_tokenizers":
        # The package renders tool definitions as given, where the engine (and the reference) render
        # SGLang's canonical form ("strict": false, its key order): its lists differ in the system
        # block, so it is timed for its cost, and its agreement is recorded.
        want = _LISTS.get((fixture, n))
        if want is not None:
            benchmark.extra_info["same_lists_as_reference"] = sum(a == b for a, b in zip(lists, want))
        return
    _LISTS.setdefault((fixture, n), lists)
    assert lists == _LISTS[(fixture, n)]  # the same mismatch lists, whichever command made them


def _agent_dump(factory: pytest.TempPathFactory, fixture: str, n: int, max_turns: int) -> Path:
    path = factory.getbasetemp() / f"agent-{fixture}-{n}-{max_turns}.jsonl"
    if not path.exists():
        agent_dumps.write_dump(path, fixture, n, max_turns=max_turns)
    return path

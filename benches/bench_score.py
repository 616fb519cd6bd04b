"""Scoring a dump of Qwen3 agent sessions: the reference pipeline vs `tito-fast score`.

The reference pipeline, per session: render the messages with the
tokenizer's `apply_chat_template`, encode the whole text, compare with the
plain reference comparator (`tito_fast.testing.reference.ReferenceComparator`).
tito_fast: `run_score` on the JSONL dump (it also parses the file), fast
path, one process and two worker processes (their start-up, a tokenizer
load per worker, included), and `tito_fast_full`: one process encoding
every whole render (with tito_fast's Rust encoder) instead of the fast
path. All must give identical mismatch lists.

Sessions: 50 assistant turns with reasoning and a tool call each (about 14k
ids), 30% with a planted fault (a changed tool output or a re-spaced tool
call). Full size: 1,000 sessions (`TITO_FAST_BENCH_SESSIONS` to change).
"""

from __future__ import annotations

import functools
import json
import os
import random
import re
from pathlib import Path
from typing import Any

import pytest

from benches.bench_trajectory import TOOLS, agent_session
from benches.sessions import tokenizer
from tito_fast.score.dump import Record, read_dump, write_jsonl
from tito_fast.score.run import run_score
from tito_fast.score.scorer import Scorer
from tito_fast.testing import reference


@functools.cache
def _scorer() -> Scorer:
    return Scorer(tokenizer(), "qwen3", mode="fast")


def _dump(path: Path, n: int, turns: int) -> Path:
    sc = _scorer()
    rng = random.Random(0)
    rows = []
    for i in range(n):
        msgs = agent_session(turns, seed=i)
        text = sc.tito.apply_chat_template(msgs, add_generation_prompt=False, tools=TOOLS)
        fault = rng.random()
        if fault < 0.15:
            text = re.sub(r"(<tool_response>\n)(\S+)", r"\1CHANGED", text, count=1)
        elif fault < 0.3:
            text = text.replace('{"cmd": "', '{"cmd":"', 1)
        ids = sc.tito.encode(text)
        while ids and ids[-1] in sc.tito.trailing_token_ids:
            ids.pop()
        rows.append({"session_id": f"s{i}", "messages": msgs, "tools": TOOLS, "token_ids": ids})
    write_jsonl(path, rows)
    return path


def _reference(path: Path) -> list[list[dict[str, Any]]]:
    sc = _scorer()
    tito = sc.tito
    tok = tito.tokenizer
    ref = reference.ReferenceComparator(
        tok, tito.assistant_start_str, special_token_ids=tito.special_token_ids, trim_trailing_ids=tito.trailing_token_ids or None
    )
    render = reference.ReferenceTito(tok, template_kwargs=tito.chat_template_kwargs, chat_template=tito.chat_template)
    out = []
    for rec in read_dump(path):
        assert isinstance(rec, Record), rec
        text = render.render(rec.messages, rec.tools, False)
        expected = tok.encode(text, add_special_tokens=False)
        out.append(ref.compare(expected, rec.token_ids.tolist()))
    return out


@functools.cache
def _full_scorer() -> Scorer:
    return Scorer(tito=_scorer().tito, mode="full")


@pytest.mark.parametrize("impl", ["python", "tito_fast", "tito_fast_2_workers", "tito_fast_full"])
def bench_score(benchmark: Any, full_size: bool, impl: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    n = int(os.environ.get("TITO_FAST_BENCH_SESSIONS", "1000")) if full_size else 4
    turns = 50 if full_size else 3
    path = _cached_dump(tmp_path_factory, n, turns)
    benchmark.group = f"score {n} Qwen3 sessions of {turns} turns"
    benchmark.extra_info["sessions"] = n
    rounds = {"rounds": 1, "iterations": 1}
    if impl == "python":
        lists = benchmark.pedantic(lambda: _reference(path), **rounds)
        _LISTS.setdefault(path, lists)
    elif impl == "tito_fast_full":  # every session's render encoded whole (by tito_fast's encoder), one process
        run = benchmark.pedantic(
            lambda: run_score(path, "fixture:qwen3", "qwen3", mode="full", scorer=_full_scorer()), **rounds
        )
        lists = [[m.to_dict() for m in r.mismatches] for r in run.results]
    else:
        workers = 2 if impl == "tito_fast_2_workers" else 1
        run = benchmark.pedantic(lambda: run_score(path, "fixture:qwen3", "qwen3", workers=workers, scorer=_scorer()), **rounds)
        lists = [[m.to_dict() for m in r.mismatches] for r in run.results]
    assert lists == _expected_lists(path)  # identical reference mismatch lists (hence metrics)
    assert any(lists) and not all(lists)


_DUMPS: dict[tuple[int, int], Path] = {}
_LISTS: dict[Path, list[list[dict[str, Any]]]] = {}


def _cached_dump(factory: pytest.TempPathFactory, n: int, turns: int) -> Path:
    if (n, turns) not in _DUMPS:
        _DUMPS[(n, turns)] = _dump(factory.mktemp("score") / "dump.jsonl", n, turns)
    return _DUMPS[(n, turns)]


def _expected_lists(path: Path) -> list[list[dict[str, Any]]]:
    if path not in _LISTS:
        _LISTS[path] = _reference(path)
    return _LISTS[path]


def test_dump_is_valid_json(tmp_path: Path) -> None:
    path = _dump(tmp_path / "d.jsonl", 2, 2)
    assert all(json.loads(line)["token_ids"] for line in path.read_text().splitlines())

"""Scoring a dump of Qwen3 agent sessions: the reference pipeline vs `tito-fast score`.

The reference pipeline, per session: render the messages with the
tokenizer's `apply_chat_template`, encode the whole text, compare with the
plain reference comparator (`tito_fast.testing.reference.ReferenceComparator`).
miles_tito_tokenizers: the same pipeline with the PyPI package a user
would pick instead (its render and comparator). tito_fast: `run_score` on
the JSONL dump (it also parses the file) with the native session check
(JSON lines parsed, rendered, encoded and compared in Rust) on one thread,
on two threads, and in two worker processes (their start-up included);
`tito_fast_python_path`: the Python path (jinja2 render, fast mode), what
`tito-fast score` did before the native check. All must give identical
mismatch lists.

Sessions: 50 assistant turns with reasoning and a tool call each (about 14k
ids), 30% with a planted fault (a changed tool output or a re-spaced tool
call). Full size: 1,000 sessions (`TITO_FAST_BENCH_SESSIONS` to change).
"""

from __future__ import annotations

import copy
import functools
import json
import os
import random
import re
from pathlib import Path
from typing import Any

import pytest

from benches import agent_dumps
from benches.bench_trajectory import TOOLS, agent_session
from benches.sessions import tokenizer
from tito_fast.chat.families import get_tito_tokenizer
from tito_fast.score.dump import Record, read_dump, write_jsonl
from tito_fast.score.run import run_score
from tito_fast.score.scorer import Scorer
from tito_fast.testing import reference


@functools.cache
def _scorer() -> Scorer:
    return Scorer(tokenizer(), "qwen3", mode="fast")


def _dump(path: Path, n: int, turns: int, faults: float = 0.3) -> Path:
    """`n` sessions of `turns` turns, a share `faults` of them with a planted
    fault (half a changed tool output, half a re-spaced tool call)."""
    sc = _scorer()
    rng = random.Random(0)
    rows = []
    for i in range(n):
        msgs = agent_session(turns, seed=i)
        text = sc.tito.apply_chat_template(msgs, add_generation_prompt=False, tools=TOOLS)
        fault = rng.random() * 0.3 / faults if faults else 1.0
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


def _miles_tito_tokenizers(path: Path) -> list[list[dict[str, Any]]]:
    """The same pipeline with the package a user would pick instead
    (miles-tito-tokenizers: its SGLang-style render, its comparator), the
    tokenizer carrying the family's fixed template as Miles installs it."""
    from miles_tito_tokenizers.tokenizer import Qwen3TITOTokenizer

    tito = _scorer().tito
    tok = copy.copy(tito.tokenizer)
    tok.chat_template = tito.chat_template
    mtt = Qwen3TITOTokenizer(tok, chat_template_kwargs=dict(tito.chat_template_kwargs))
    cmp = mtt.create_comparator()
    out = []
    for rec in read_dump(path):
        assert isinstance(rec, Record), rec
        text = mtt.render_messages(rec.messages, add_generation_prompt=False, tools=rec.tools)
        assert isinstance(text, str)
        expected = tok.encode(text, add_special_tokens=False)
        out.append([m.to_dict() for m in cmp.compare_sequences(expected, rec.token_ids.tolist())])
    return out


def _reference(path: Path, tito: Any = None) -> list[list[dict[str, Any]]]:
    """The reference pipeline over a dump with a family's constants (default: Qwen3's)."""
    tito = tito if tito is not None else _scorer().tito
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


@functools.cache
def _python_path_scorer() -> Scorer:
    scorer = Scorer(tito=_scorer().tito, mode="fast")
    scorer.native = None
    return scorer


@pytest.mark.parametrize(
    "impl",
    ["python", "miles_tito_tokenizers", "tito_fast_1_thread", "tito_fast_2_threads", "tito_fast_2_workers", "tito_fast_python_path"],
)
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
    elif impl == "miles_tito_tokenizers":
        lists = benchmark.pedantic(lambda: _miles_tito_tokenizers(path), **rounds)
        # its render gives tool definitions its own pydantic shape, not the engine's (SGLang adds `strict`
        # and `defer_loading`), so it flags the tools block of every session: the same lists as tito_fast
        # with that tool shape (`tool_policy="none"` on these tools)
        # (its comparator writes `detail: None` where Miles writes "")
        shaped = Scorer(tito=get_tito_tokenizer(_scorer().tito.tokenizer, "qwen3", tool_policy="none"))
        ours = [[m.to_dict() for m in r.mismatches] for r in run_score(path, scorer=shaped).results]
        assert [[{**m, "detail": m["detail"] or ""} for m in ms] for ms in lists] == ours
        return
    elif impl == "tito_fast_python_path":  # the Python path (jinja2 render, fast mode), one process: what came before
        scorer = _python_path_scorer()
        run = benchmark.pedantic(lambda: run_score(path, scorer=scorer), **rounds)
        lists = [[m.to_dict() for m in r.mismatches] for r in run.results]
    else:  # the native session check (default full mode) on threads, or in 2 worker processes
        scorer = _full_scorer()
        assert scorer.native is not None, scorer.native_reason
        workers = 2 if impl == "tito_fast_2_workers" else 1
        threads = 2 if impl == "tito_fast_2_threads" else 1
        run = benchmark.pedantic(lambda: run_score(path, workers=workers, threads=threads, scorer=scorer), **rounds)
        lists = [[m.to_dict() for m in r.mismatches] for r in run.results]
    assert lists == _expected_lists(path)  # identical reference mismatch lists (hence metrics)
    assert any(lists) and not all(lists)


@pytest.mark.parametrize("impl", ["tito_fast_clean", "tito_fast_differing"])
def bench_score_differing(benchmark: Any, full_size: bool, impl: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """What a differing session costs against a clean one: the same sessions,
    none or every one with a planted fault, scored on one thread (the native
    check, then the diagnosis of each differing session in the record's terms:
    kind, message, role, turn); `× tito_fast` of the differing row is the ratio."""
    n = int(os.environ.get("TITO_FAST_BENCH_SESSIONS", "1000")) // 2 if full_size else 4
    turns = 50 if full_size else 3
    faults = 1.0 if impl == "tito_fast_differing" else 0.0
    path = _cached_dump(tmp_path_factory, n, turns, faults)
    benchmark.group = f"score per session, clean vs differing ({n} Qwen3 sessions of {turns} turns, 1 thread)"
    benchmark.extra_info["sessions"] = n
    scorer = _full_scorer()
    run = benchmark.pedantic(lambda: run_score(path, threads=1, scorer=scorer), rounds=3, iterations=1)
    differing = sum(1 for r in run.results if r.mismatches or r.items)
    assert differing == (n if faults else 0)
    assert all(i.message_index >= 0 for r in run.results for i in r.items)  # every difference placed in a message


@pytest.mark.parametrize("share", ["clean", "differing"])
@pytest.mark.parametrize("fixture", list(agent_dumps.FAMILIES))
@pytest.mark.parametrize("impl", ["python", "tito_fast_1_thread", "tito_fast_2_threads"])
def bench_score_agents(benchmark: Any, full_size: bool, impl: str, fixture: str, share: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Per session after start-up on dumps shaped like agent rollouts
    (`benches.agent_dumps`: 3-150 turns, long varied tool outputs, unicode),
    every session clean or every one differing: the reference pipeline in
    this process (tokenizer loaded) against `run_score` on one thread and on
    two (the native check's threads, which also place each differing
    session's first difference; the rest of its diagnosis stays on the main
    thread), the scorer built. The same mismatch lists."""
    n = (120 if fixture == "qwen3" else 60) if full_size else 3
    path = tmp_path_factory.getbasetemp() / f"agents-{fixture}-{n}-{share}.jsonl"
    if not path.exists():
        agent_dumps.write_dump(path, fixture, n, differing=1.0 if share == "differing" else 0.0, max_turns=150 if full_size else 6)
    tito = agent_dumps.tito_for(fixture)
    benchmark.group = f"score per session after start-up: {n} agent sessions ({fixture}, {share})"
    benchmark.extra_info.update(sessions=n, family=tito.family)
    rounds = {"rounds": 1 if impl == "python" else 5, "iterations": 1}  # 5: this VM's noise moves a 3-round median by up to 40%
    if impl == "python":
        lists = benchmark.pedantic(lambda: _reference(path, tito), **rounds)
    else:
        scorer = Scorer(tito=tito)
        assert scorer.native is not None, scorer.native_reason
        threads = 2 if impl == "tito_fast_2_threads" else 1
        run = benchmark.pedantic(lambda: run_score(path, threads=threads, scorer=scorer), **rounds)
        lists = [[m.to_dict() for m in r.mismatches] for r in run.results]
    _AGENT_LISTS.setdefault(path, lists)
    assert lists == _AGENT_LISTS[path]
    if share == "clean":
        assert not any(lists)


_AGENT_LISTS: dict[Path, list[list[dict[str, Any]]]] = {}
_DUMPS: dict[tuple[int, int, float], Path] = {}
_LISTS: dict[Path, list[list[dict[str, Any]]]] = {}


def _cached_dump(factory: pytest.TempPathFactory, n: int, turns: int, faults: float = 0.3) -> Path:
    if (n, turns, faults) not in _DUMPS:
        _DUMPS[(n, turns, faults)] = _dump(factory.mktemp("score") / "dump.jsonl", n, turns, faults)
    return _DUMPS[(n, turns, faults)]


def _expected_lists(path: Path) -> list[list[dict[str, Any]]]:
    if path not in _LISTS:
        _LISTS[path] = _reference(path)
    return _LISTS[path]


def test_dump_is_valid_json(tmp_path: Path) -> None:
    path = _dump(tmp_path / "d.jsonl", 2, 2)
    assert all(json.loads(line)["token_ids"] for line in path.read_text().splitlines())

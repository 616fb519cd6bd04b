"""The native session check (`Scorer.native`: parse, render, encode and compare
in Rust) gives the results of the Python path, on every example dump and
every Miles-produced dump, in both modes, with one thread and with several;
and lines it does not take on go to the Python path."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, Literal

import pytest

from tito_fast.score.dump import read_dump_lines
from tito_fast.score.run import run_score
from tito_fast.score.scorer import Scorer
from tito_fast.testing import fixtures

ROOT = Path(__file__).resolve().parents[2]
MILES = ROOT / "tests" / "data" / "miles"
DUMPS = [
    (ROOT / "examples" / "qwen3_dump.jsonl", "qwen3", "qwen3"),
    (ROOT / "examples" / "glm47_dump.jsonl", "glm47", "glm47"),
    (MILES / "qwen3.jsonl", "qwen3", "qwen3"),
    (MILES / "qwen35.jsonl", "qwen35", "qwen35"),
    (MILES / "minimax_m27.jsonl", "minimax_m27", "minimax_m27"),
    (MILES / "glm47.jsonl", "glm47", "glm47"),
]


@functools.cache
def _scorer(fixture: str, family: str, mode: str) -> Scorer:
    return Scorer(fixtures.load_tokenizer(fixture), family, mode=mode)  # type: ignore[arg-type]


def _plain(results: list[Any]) -> list[dict[str, Any]]:
    # how a session was scored (segment counts) is not part of the result's meaning
    return [{k: v for k, v in r.to_dict().items() if k not in ("encoded_segments", "segments")} for r in results]


@pytest.mark.parametrize("mode", ["full", "fast"])
@pytest.mark.parametrize(("dump", "fixture", "family"), DUMPS, ids=lambda x: x.name if isinstance(x, Path) else x)
def test_native_results_equal_python_path(dump: Path, fixture: str, family: str, mode: Literal["full", "fast"], monkeypatch: pytest.MonkeyPatch) -> None:
    scorer = _scorer(fixture, family, mode)
    assert scorer.native is not None, scorer.native_reason
    lines = [ln.data for ln in read_dump_lines(dump)]  # type: ignore[union-attr]
    outcomes = scorer.native.check_lines(lines, threads=2)
    assert sum(o is not None for o in outcomes) == len(lines)  # every line taken on natively
    assert any(o is not None and o[0] == "clean" for o in outcomes) and any(o is not None and o[0] == "differs" for o in outcomes)
    native = run_score(dump, scorer=scorer, threads=2)
    one_thread = run_score(dump, scorer=scorer, threads=1)
    monkeypatch.setattr(scorer, "native", None)
    python = run_score(dump, scorer=scorer)
    assert _plain(native.results) == _plain(python.results) == _plain(one_thread.results)
    assert native.summary.metrics == python.summary.metrics
    assert native.summary.renderer.startswith("native") and python.summary.renderer.startswith("Python")


def test_unusual_lines_go_to_the_python_path(tmp_path: Path) -> None:
    scorer = _scorer("qwen3", "qwen3", "full")
    assert scorer.native is not None
    row = json.loads((ROOT / "examples" / "qwen3_dump.jsonl").read_text(encoding="utf-8").splitlines()[0])
    variants = {
        "int session id": dict(row, session_id=7),
        "float id": dict(row, token_ids=[*row["token_ids"][:-1], 1.0]),
        "id outside the vocabulary": dict(row, token_ids=[*row["token_ids"], 10**7]),
        "other family": dict(row, family="glm47"),
        "tools not a list": dict(row, tools={"a": 1}),
        "no messages": dict(row, messages=[]),
        "message without role": dict(row, messages=[{"content": "x"}]),
        "bad tool-call arguments": dict(
            row, messages=[*row["messages"], {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": "{"}}]}]
        ),
    }
    rows = list(variants.values())
    lines = [json.dumps(r).encode() for r in rows] + [b'{"session_id": "x", "messages": NaN}', b"\xff\xfe"]
    explained = [scorer.native.explain(ln) for ln in lines]
    assert all(e is not None for e in explained), dict(zip([*variants, "nan", "utf8"], explained))
    dump = tmp_path / "odd.jsonl"
    dump.write_bytes(b"\n".join(lines) + b"\n\n")
    native = run_score(dump, scorer=scorer, on_error="skip")
    python_scorer = Scorer(tito=scorer.tito)
    python_scorer.native = None
    python = run_score(dump, scorer=python_scorer, on_error="skip")
    assert [b.to_dict() for b in native.bad] == [b.to_dict() for b in python.bad]
    assert _plain(native.results) == _plain(python.results)
    assert len(native.bad) == 9 and [r.session_id for r in native.results] == ["7"]

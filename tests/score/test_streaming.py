"""Streamed results: `--out` files, `iter_score`, bounded summary and worst
sessions equal to what holding every result gives; what the reports and
`diff` say."""

from __future__ import annotations

import copy
import json
import random
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tito_fast.cli.main import cli
from tito_fast.compare.alignment import Mismatch, MismatchType
from tito_fast.score.dump import BadRecord
from tito_fast.score.results import read_results
from tito_fast.score.run import iter_score, run_score
from tito_fast.score.scorer import ScoredItem, SessionResult
from tito_fast.score.summary import SummaryBuilder, WorstKeeper, summarize, worst

DUMP = Path(__file__).resolve().parents[2] / "examples" / "qwen3_dump.jsonl"


@pytest.fixture(scope="module")
def held() -> Any:
    return run_score(DUMP, "fixture:qwen3", "qwen3")


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_out_files_hold_every_result(tmp_path: Path, suffix: str, held: Any) -> None:
    out = tmp_path / f"results{suffix}"
    js = tmp_path / "all.json"
    assert cli("score", str(DUMP), "--tokenizer", "fixture:qwen3", "--out", str(out), "--json", str(js), "--quiet") == 0
    rows = read_results(out)
    assert [r.to_dict() for r in rows if isinstance(r, SessionResult)] == [r.to_dict() for r in held.results]
    data = json.loads(js.read_text())
    assert data["sessions"] == [r.to_dict() for r in held.results]
    assert data["summary"] == held.summary.to_dict()
    assert not (tmp_path / f"results{suffix}.tmp").exists()


def test_bad_records_are_rows_too(tmp_path: Path) -> None:
    lines = DUMP.read_text(encoding="utf-8").splitlines()[:3]
    lines[1] = "{not json"
    dump = tmp_path / "d.jsonl"
    dump.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = tmp_path / "r.parquet"
    assert cli("score", str(dump), "--tokenizer", "fixture:qwen3", "--on-error", "skip", "--out", str(out), "--quiet") == 0
    rows = read_results(out)
    assert [type(r).__name__ for r in rows] == ["SessionResult", "BadRecord", "SessionResult"]
    assert isinstance(rows[1], BadRecord) and rows[1].source == "d.jsonl:2"


def test_iter_score_streams_what_run_score_holds(held: Any) -> None:
    stream = iter_score(DUMP, "fixture:qwen3", "qwen3")
    got = [r.to_dict() for r in stream if isinstance(r, SessionResult)]
    assert got == [r.to_dict() for r in held.results]
    assert stream.summary == held.summary and stream.finished
    assert [r.session_id for r in stream.worst()] == [r.session_id for r in worst(held.results, 5)]
    with pytest.raises(RuntimeError, match="iterated once"):
        list(stream)
    lean = run_score(DUMP, "fixture:qwen3", "qwen3", keep_results=False)
    assert lean.results == [] and lean.summary == held.summary
    assert [r.session_id for r in lean.worst] == [r.session_id for r in stream.worst()]


def _result(i: int, types: list[str], kinds: list[str], first: int | None) -> SessionResult:
    mismatches = [Mismatch(MismatchType(t), i, "", "", "") for t in types]
    items = [
        ScoredItem(t, k, random.choice(["user", "assistant", "tool"]), 0, 0, (0, 1), (0, 1), "a", "b")
        for t, k in zip(types, kinds)
    ]
    return SessionResult(f"s{i}", f"d:{i}", 3, 100, mismatches, items, first if types else None, "full")


@settings(max_examples=60, deadline=None)
@given(
    sessions=st.lists(
        st.tuples(
            st.lists(st.sampled_from([t.value for t in MismatchType]), max_size=3),
            st.lists(st.sampled_from(["content", "splice_seam", "whitespace_only"]), min_size=3, max_size=3),
            st.integers(0, 50),
        ),
        max_size=40,
    ),
    k=st.integers(0, 7),
)
def test_bounded_worst_and_summary_equal_the_held_ones(sessions: list[Any], k: int) -> None:
    random.seed(0)
    results = [_result(i, types, kinds, first) for i, (types, kinds, first) in enumerate(sessions)]
    keeper, builder = WorstKeeper(k), SummaryBuilder()
    for r in results:
        keeper.add(r)
        builder.add(r)
    assert [r.session_id for r in keeper.worst()] == [r.session_id for r in worst(results, k)]
    bounded = builder.summary(family="f", mode="full", fast_path="off")
    assert bounded == summarize(results, [], family="f", mode="full", fast_path="off")
    assert len(keeper.top) <= k and len(keeper.best) <= 4 * 3 * 3 + 1


def test_fast_mode_is_labelled_in_every_report(tmp_path: Path, capsys: Any) -> None:
    md, page = tmp_path / "r.md", tmp_path / "r.html"
    assert cli("score", str(DUMP), "--tokenizer", "fixture:qwen3", "--mode", "fast", "--markdown", str(md), "--report", str(page)) == 0
    out = capsys.readouterr().out
    for text in (out, md.read_text(), page.read_text()):
        assert "retokenization not checked" in text


def test_reports_show_metadata_and_visible_whitespace(tmp_path: Path) -> None:
    page, md = tmp_path / "r.html", tmp_path / "r.md"
    assert cli("score", str(DUMP), "--tokenizer", "fixture:qwen3", "--report", str(page), "--markdown", str(md), "--worst", "40", "--quiet") == 0
    html, text = page.read_text(), md.read_text()
    assert "metadata: {&quot;expect&quot;" in html and "metadata: `{\"expect\"" in text  # Markdown: in a code span, not escaped
    # trimmed whitespace (a planted fault) shows as marks in the differing text
    assert '<span class="del">·' in html or '<span class="ins">·' in html or "↵" in html
    assert "**[" in text


def test_diff_names_kinds_and_trims(tmp_path: Path, capsys: Any) -> None:
    assert cli("diff", str(DUMP), "--tokenizer", "fixture:qwen3", "--session", "qwen3-0029", "--color", "never") == 1
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[1] == "trailing ids trimmed before comparing (as the reference does): 1 from fresh render, 0 from session ids"
    assert lines[2].startswith("fresh render") and "│ session ids" in lines[2]
    # a changed tool result: named as the record's tool message
    assert "difference at segment 21: non_assistant_text, kind content, role tool, message 5" in out
    a, b = tmp_path / "expected.json", tmp_path / "actual.json"
    a.write_text(json.dumps([151644, 872, 198, 9707, 151645, 198]))
    b.write_text(json.dumps([151644, 872, 198, 9707, 151645]))
    assert cli("diff", str(a), str(b), "--tokenizer", "fixture:qwen3", "--family", "qwen3", "--color", "never") == 0
    out = capsys.readouterr().out
    assert "trailing ids trimmed before comparing (as the reference does): 1 from expected.json, 0 from actual.json" in out
    assert "expected.json" in out.splitlines()[2] and "actual.json" in out.splitlines()[2]


def test_results_keep_their_metadata_types() -> None:
    r = _result(1, ["assistant_text"], ["content", "content", "content"], 3)
    r.metadata = {"reward": 1.5, "tags": ["a"]}
    d = copy.deepcopy(r.to_dict())
    assert json.loads(json.dumps(d)) == d

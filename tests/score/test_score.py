"""`tito-fast score`: fast path = full path = the reference's session check, on every
fixture family; planted faults found and labelled; bad records; Parquet; workers."""

from __future__ import annotations

import functools
import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tito_fast.cli.main import cli
from tito_fast.compare.alignment import Mismatch, MismatchType
from tito_fast.errors import DumpError, RenderError
from tito_fast.score.dump import BadRecord, Record, read_dump, write_jsonl, write_parquet
from tito_fast.score.run import run_score, score_one
from tito_fast.score.scorer import ScoredItem, Scorer, SessionResult
from tito_fast.score.summary import summarize
from tito_fast.session.verify import ROLE_SETS, TOOLS, conversations, replay
from tito_fast.testing import fixtures, reference

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
QWEN_DUMP = EXAMPLES / "qwen3_dump.jsonl"
GLM_DUMP = EXAMPLES / "glm47_dump.jsonl"

# fixture tokenizer -> family (one per fixture)
PAIRS = [
    ("qwen3", "qwen3"),
    ("qwen35", "qwen35"),
    ("glm47", "glm47"),
    ("minimax_m27", "minimax_m27"),
    ("llama31", "llama3"),
    ("kimi_k2", "kimi25"),
    ("nemotron3", "nemotron3"),
    ("deepseek_v4", "deepseekv4"),
    ("deepseek_v3", "default"),
    ("deepseek_v31", "dsv31_json"),
]
# Families declared as configs (hashable names for the cache): DeepSeek V3.1's
# template concatenates tool-call arguments, so they stay JSON strings.
CONFIGS: dict[str, dict[str, Any]] = {"dsv31_json": {"name": "dsv31_json", "arguments": "json"}}
# The fast path applies to every byte-level fixture that renders with a template.
FAST = {"qwen3", "qwen35", "glm47", "minimax_m27", "llama31", "kimi_k2", "nemotron3", "deepseek_v3", "deepseek_v31"}


@functools.cache
def _scorers(tok_name: str, family: str) -> tuple[Scorer, Scorer]:
    fast = Scorer(fixtures.load_tokenizer(tok_name), CONFIGS.get(family, family), mode="fast")
    return fast, Scorer(tito=fast.tito, mode="full")


def _sessions(tok_name: str, family: str) -> list[tuple[str, list[dict[str, Any]], list[int]]]:
    fast, _ = _scorers(tok_name, family)
    out = []
    for roles in ROLE_SETS:
        for parallel in (True, False):
            for name, msgs in conversations(roles, parallel_calls=parallel):
                try:
                    ids, _ = replay(fast.tito, msgs, TOOLS)
                except (ValueError, RenderError):
                    continue  # a role set or call shape the family cannot render (verify-template reports it)
                out.append((f"{sorted(roles)}/{name}/{parallel}", msgs, ids))
    return out


def _variants(tito: Any, ids: list[int], seed: int) -> list[tuple[str, list[int]]]:
    """The clean ids and edits of every kind: a changed id, a deleted id, a split
    token (same text), an inserted boundary id, a swapped boundary id."""
    rng = random.Random(seed)
    boundary = sorted(tito.create_comparator()._special_ids)
    k = rng.randrange(1, len(ids) - 1)
    out = [("clean", ids), ("changed", ids[:k] + [(ids[k] + 17) % 50_000] + ids[k + 1 :]), ("deleted", ids[:k] + ids[k + 1 :])]
    for _ in range(100):
        j = rng.randrange(len(ids))
        piece = tito.tokenizer.decode([ids[j]])
        if len(piece) >= 3 and piece.isascii() and ids[j] not in boundary:
            split = tito.encode(piece[:1]) + tito.encode(piece[1:])
            if split != [ids[j]]:
                out.append(("split", ids[:j] + split + ids[j + 1 :]))
                break
    out.append(("inserted_boundary", ids[:k] + [boundary[0]] + ids[k:]))
    specials = [j for j, t in enumerate(ids) if t in boundary]
    if specials and len(boundary) > 1:
        j = rng.choice(specials)
        other = next(b for b in boundary if b != ids[j])
        out.append(("swapped_boundary", ids[:j] + [other] + ids[j + 1 :]))
    return out


@pytest.mark.parametrize("tok_name,family", PAIRS)
def test_fast_path_equals_full_path(tok_name: str, family: str) -> None:
    fast, full = _scorers(tok_name, family)
    assert fast.fast_path == (tok_name in FAST), fast.splitter.reason
    sessions = _sessions(tok_name, family)
    assert sessions
    seen_kinds: set[str] = set()
    for i, (name, msgs, ids) in enumerate(sessions):
        for label, variant in _variants(fast.tito, ids, seed=i):
            rec = Record("t:1", name, msgs, np.asarray(variant, dtype=np.uint32), tools=TOOLS)
            a, b = fast.score(rec), full.score(rec)
            assert a.mismatches == b.mismatches, (name, label)
            assert a.first_divergence == b.first_divergence, (name, label)
            reported = [(x.type, x.kind, x.role, x.message_index, x.turn) for x in a.items if x.type]
            assert reported == [(x.type, x.kind, x.role, x.message_index, x.turn) for x in b.items if x.type]
            if label == "clean" and tok_name != "deepseek_v3":  # its own template is not append-only
                assert a.mismatches == [] and [x for x in b.items if x.type] == [], (name, b.items)
            else:
                seen_kinds.add(label)
            if fast.fast_path and label == "clean":
                assert a.path == "fast" and a.encoded_segments < a.segments
    assert {"changed", "deleted", "inserted_boundary"} <= seen_kinds


@pytest.mark.parametrize("tok_name,family", [("qwen3", "qwen3"), ("llama31", "llama3")])
def test_full_path_is_the_reference_session_check(tok_name: str, family: str) -> None:
    """`compute_session_mismatch` with the plain reference comparator, on the same ids."""
    fast, _ = _scorers(tok_name, family)
    tito = fast.tito
    ref = reference.ReferenceComparator(
        tito.tokenizer, tito.assistant_start_str, special_token_ids=tito.special_token_ids, trim_trailing_ids=tito.trailing_token_ids or None
    )
    for i, (name, msgs, ids) in enumerate(_sessions(tok_name, family)[:4]):
        for label, variant in _variants(tito, ids, seed=100 + i):
            expected = tito.encode(tito.apply_chat_template(msgs, add_generation_prompt=False, tools=TOOLS))
            want = ref.compare(expected, variant)
            got = fast.score(Record("t:1", name, msgs, np.asarray(variant, dtype=np.uint32), tools=TOOLS)).mismatches
            assert [m.to_dict() for m in got] == want, (name, label)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_fast_path_parity_random_text_edits(data: Any) -> None:
    """Random unicode inserted into the session's text (so segments differ in text,
    normalisation and tokenization): fast and full paths agree."""
    fast, full = _scorers("qwen3", "qwen3")
    sessions = _sessions("qwen3", "qwen3")
    name, msgs, ids = sessions[data.draw(st.integers(0, len(sessions) - 1))]
    text = fast.tito.tokenizer.decode(ids)
    at = data.draw(st.integers(0, len(text)))
    insert = data.draw(st.text(alphabet=st.sampled_from(list("ab \n\t{}\":é\u0301e你🙂<>|")), min_size=1, max_size=6))
    edited = fast.tito.encode(text[:at] + insert + text[at:])
    rec = Record("t:1", name, msgs, np.asarray(edited, dtype=np.uint32), tools=TOOLS)
    assert fast.score(rec).mismatches == full.score(rec).mismatches


def _expect_found(results: list[Any], mode: str) -> None:
    for r in results:
        planted, expect = r.metadata["planted"], r.metadata["expect"]
        assert sorted({m.type.value for m in r.mismatches}) == sorted(set(expect["types"])), (r.session_id, planted, r.mismatches)
        kinds = {i.kind for i in r.items}
        if planted == "none":
            assert r.items == []
        elif planted == "retokenize_drift":
            if mode == "full":
                assert kinds == {"retokenization"}, (r.session_id, r.items)
        elif expect["kind"] is not None:
            assert expect["kind"] in kinds, (r.session_id, planted, r.items)


@pytest.mark.parametrize("dump,tok_name,family", [(QWEN_DUMP, "qwen3", "qwen3"), (GLM_DUMP, "glm47", "glm47")])
def test_example_dump_planted_faults(dump: Path, tok_name: str, family: str) -> None:
    fast, full = _scorers(tok_name, family)
    runs = {mode: run_score(dump, f"fixture:{tok_name}", family, scorer=s) for mode, s in (("fast", fast), ("full", full))}
    for mode, run in runs.items():
        assert run.summary.complete and not run.bad
        _expect_found(run.results, mode)
    assert [r.mismatches for r in runs["fast"].results] == [r.mismatches for r in runs["full"].results]
    planted = {r.metadata["planted"] for r in runs["full"].results}
    assert "none" in planted and len(planted) >= 4
    s = runs["fast"].summary
    n = len(runs["fast"].results)
    assert s.metrics["tito_session_mismatch_rate/v1"] == sum(bool(r.metadata["expect"]["types"]) for r in runs["fast"].results) / n


def test_summary_metrics_follow_the_reference_definition() -> None:
    def res(types: list[str], turns: int, turn_of: list[int]) -> Any:
        items = [ScoredItem(t, "content", "assistant", 0, 0, (0, 1), (0, 1), "a", "b", turn=k) for t, k in zip(types, turn_of)]
        mismatches = [Mismatch(MismatchType(t), 0, "a", "b") for t in types]
        return SessionResult("s", "f:1", turns, 10, mismatches, items, 3 if types else None, "fast")

    results = [res([], 4, []), res(["assistant_text", "assistant_text"], 4, [1, 1]), res(["special_token_type"], 2, [0]), res([], 2, [])]
    s = summarize(results, [BadRecord("f:9", "bad")], family="qwen3", mode="fast", fast_path="on", metric_version="v2")
    assert s.metrics == {
        "tito_session_mismatch_rate/v2": 0.5,
        "tito_session_mismatch_rate/v2/special_token_count": 0.0,
        "tito_session_mismatch_rate/v2/special_token_type": 0.25,
        "tito_session_mismatch_rate/v2/non_assistant_text": 0.0,
        "tito_session_mismatch_rate/v2/assistant_text": 0.25,
    }
    assert s.turns == 12 and s.turns_with_mismatch == 2 and s.per_turn_rate == 2 / 12
    assert s.by_turn[0] == {"turn": 0, "sessions": 4, "with_mismatch": 1, "rate": 0.25}
    assert s.by_turn[1] == {"turn": 1, "sessions": 4, "with_mismatch": 1, "rate": 0.25}
    assert s.by_turn[3] == {"turn": 3, "sessions": 2, "with_mismatch": 0, "rate": 0.0}
    assert s.bad_records == 1 and s.errors[0]["source"] == "f:9"
    assert s.ci_failures == ["tito_session_mismatch_rate/v2/special_token_type=0.2500 must be 0"]


def _bad_dump(tmp_path: Path) -> Path:
    good = QWEN_DUMP.read_text(encoding="utf-8").splitlines()[:3]
    rec = json.loads(good[0])
    call = {"type": "function", "function": {"name": "run", "arguments": "{not json"}}
    no_user = dict(rec, messages=[{"role": "user", "content": "x"}, {"role": "assistant", "content": "", "tool_calls": [call]}])
    lines = [
        good[0],
        "{not json",
        json.dumps({k: v for k, v in rec.items() if k != "token_ids"}),
        json.dumps(dict(rec, token_ids=[1, -5, 3])),
        json.dumps(dict(rec, token_ids=[1, 2, 10_000_000])),  # outside the vocabulary
        json.dumps(no_user),  # tool-call arguments that are not JSON: the render fails
        json.dumps(dict(rec, family="glm47")),
        good[1],
        good[2],
    ]
    p = tmp_path / "bad.jsonl"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return p


def test_bad_records_skip_and_fail(tmp_path: Path) -> None:
    fast, _ = _scorers("qwen3", "qwen3")
    p = _bad_dump(tmp_path)
    run = run_score(p, "fixture:qwen3", "qwen3", on_error="skip", scorer=fast)
    assert run.summary.complete and len(run.results) == 3
    reasons = {b.source: b.reason for b in run.bad}
    assert reasons["bad.jsonl:2"].startswith("invalid JSON")
    assert reasons["bad.jsonl:3"] == "missing field 'token_ids'"
    assert reasons["bad.jsonl:4"] == "token_ids[1] = -5 is out of range"
    assert "outside the vocabulary" in reasons["bad.jsonl:5"] and "token_ids[2]" in reasons["bad.jsonl:5"]
    assert "chat template failed" in reasons["bad.jsonl:6"] and "arguments is not valid JSON" in reasons["bad.jsonl:6"]
    assert "family 'glm47'" in reasons["bad.jsonl:7"]
    assert run.summary.bad_records == 6
    stopped = run_score(p, "fixture:qwen3", "qwen3", on_error="fail", scorer=fast)
    assert stopped.stopped_at == "bad.jsonl:2" and not stopped.summary.complete and len(stopped.results) == 1


def test_a_template_that_raises_is_a_bad_record() -> None:
    fast, _ = _scorers("qwen3", "qwen3")
    raising = Scorer(fast.tito.tokenizer, "default", chat_template="{% if messages[0].role != 'system' %}{{ raise_exception('system first') }}{% endif %}x")
    rec = Record("d.jsonl:7", "s", [{"role": "user", "content": "hi"}], np.array([1, 2], dtype=np.uint32))
    out = score_one(raising, rec)
    assert isinstance(out, BadRecord) and out.source == "d.jsonl:7" and "system first" in out.reason


def test_cli_fail_marks_reports_incomplete(tmp_path: Path, capsys: Any) -> None:
    p = _bad_dump(tmp_path)
    out_json, out_html, out_md = tmp_path / "r.json", tmp_path / "r.html", tmp_path / "r.md"
    code = cli("score", str(p), "--tokenizer", "fixture:qwen3", "--family", "qwen3", "--json", str(out_json),
               "--report", str(out_html), "--markdown", str(out_md), "--quiet")
    assert code == 2
    err = capsys.readouterr().err
    assert "tito-fast: error: bad record bad.jsonl:2: invalid JSON" in err and "Traceback" not in err
    assert json.loads(out_json.read_text())["summary"]["complete"] is False
    assert "INCOMPLETE" in out_html.read_text() and "INCOMPLETE" in out_md.read_text()
    code = cli("score", str(p), "--tokenizer", "fixture:qwen3", "--family", "qwen3", "--on-error", "skip", "--json", str(out_json), "--quiet")
    assert code == 0 and json.loads(out_json.read_text())["summary"]["complete"] is True


def test_cli_score_outputs_and_ci_flag(tmp_path: Path, capsys: Any) -> None:
    out_json, out_html, out_md = tmp_path / "r.json", tmp_path / "r.html", tmp_path / "r.md"
    code = cli("score", str(QWEN_DUMP), "--tokenizer", "fixture:qwen3", "--family", "qwen3", "--json", str(out_json),
               "--report", str(out_html), "--markdown", str(out_md), "--worst", "3")
    assert code == 0
    captured = capsys.readouterr()
    assert "tito_session_mismatch_rate/v1/assistant_text" in captured.out and "sessions scored" in captured.out
    assert "read 40/40 records" in captured.err  # progress (not a terminal: one line per tenth)
    assert "records read" in captured.out and "40 of 40" in captured.out
    assert "17 of 40 sessions (42.50%) differ" in captured.out  # the verdict first, in plain words
    assert "With --ci this run would fail" in captured.out
    assert "tito_fast (Rust)" in captured.out  # the encoder row
    data = json.loads(out_json.read_text())
    assert len(data["sessions"]) == 40 and data["summary"]["sessions"] == 40
    assert data["summary"]["encoder"] == "tito_fast (Rust)"
    page = out_html.read_text()
    assert page.count("<svg") == 5 and "Worst sessions (3)" in page and "<script" not in page
    assert "--ci fails" not in page and "With --ci this run would fail" in page  # the strict banner only under --ci
    assert "<div>fresh render</div><div>session ids</div>" in page and "n=40" in page
    assert "| tito_session_mismatch_rate/v1 |" in out_md.read_text()
    assert cli("score", str(QWEN_DUMP), "--tokenizer", "fixture:qwen3", "--family", "qwen3", "--ci", "--quiet") == 1
    assert "special_token_count" in capsys.readouterr().err


def test_parquet_equals_jsonl(tmp_path: Path) -> None:
    fast, _ = _scorers("qwen3", "qwen3")
    rows = [json.loads(line) for line in QWEN_DUMP.read_text(encoding="utf-8").splitlines()]
    pq_path = tmp_path / "dump.parquet"
    write_parquet(pq_path, rows)
    a = run_score(QWEN_DUMP, "fixture:qwen3", "qwen3", scorer=fast)
    b = run_score(pq_path, "fixture:qwen3", "qwen3", scorer=fast)
    assert [(r.session_id, r.mismatches, r.items) for r in a.results] == [(r.session_id, r.mismatches, r.items) for r in b.results]
    assert b.results[3].source == "dump.parquet:row 3"
    # a Parquet file without the required columns is one error about the file, not a bad row each
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"session_id": ["a", "b"]}), tmp_path / "cols.parquet")
    with pytest.raises(DumpError, match=r"no column\(s\) \['messages', 'token_ids'\]"):
        list(read_dump(tmp_path / "cols.parquet"))


def test_workers_give_the_same_results(tmp_path: Path) -> None:
    rows = [json.loads(line) for line in QWEN_DUMP.read_text(encoding="utf-8").splitlines()][:16]
    p = tmp_path / "small.jsonl"
    write_jsonl(p, rows)
    fast, _ = _scorers("qwen3", "qwen3")
    one = run_score(p, "fixture:qwen3", "qwen3", scorer=fast)
    two = run_score(p, "fixture:qwen3", "qwen3", workers=2, scorer=fast)
    assert [r.to_dict() for r in one.results] == [r.to_dict() for r in two.results]
    assert one.summary.to_dict() == two.summary.to_dict()


def test_spawned_workers_give_the_same_results(tmp_path: Path, monkeypatch: Any) -> None:
    """The start method used where fork is not safe (macOS, Windows): each worker builds its scorer."""
    from tito_fast.score import run as job

    monkeypatch.setattr(job, "_FORK", False)
    rows = [json.loads(line) for line in QWEN_DUMP.read_text(encoding="utf-8").splitlines()][:10]
    p = tmp_path / "small.jsonl"
    write_jsonl(p, rows)
    fast, _ = _scorers("qwen3", "qwen3")
    one = run_score(p, "fixture:qwen3", "qwen3", scorer=fast)
    from_spec = run_score(p, "fixture:qwen3", "qwen3", workers=2, mode="fast")  # workers load the tokenizer themselves
    from_scorer = run_score(p, "fixture:qwen3", "qwen3", workers=2, scorer=fast)  # workers get it pickled
    assert [r.to_dict() for r in one.results] == [r.to_dict() for r in from_spec.results] == [r.to_dict() for r in from_scorer.results]


def test_cli_diff(tmp_path: Path, capsys: Any) -> None:
    code = cli("diff", str(QWEN_DUMP), "--tokenizer", "fixture:qwen3", "--family", "qwen3", "--session", "qwen3-0029",
               "--color", "always", "--width", "100")
    out = capsys.readouterr().out
    assert code == 1
    assert "\x1b[31;1m" in out and "\x1b[32;1m" in out and "│" in out and "equal segment(s)" in out
    assert "reference: non_assistant_text" in out
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps([151644, 872, 198, 9707, 151645]))
    b.write_text(json.dumps({"token_ids": [151644, 872, 198, 9707, 151645]}))
    assert cli("diff", str(a), str(b), "--tokenizer", "fixture:qwen3", "--family", "qwen3", "--color", "never") == 0
    assert "no difference" in capsys.readouterr().out
    assert cli("diff", str(QWEN_DUMP), "--tokenizer", "fixture:qwen3", "--session", "nope") == 2


def test_jsonl_ranges_cover_every_line_once(tmp_path: Path) -> None:
    from tito_fast.score.dump import jsonl_ranges, read_jsonl_range

    lines = QWEN_DUMP.read_bytes().split(b"\n")[:7]
    raw = lines[0] + b"\n\n" + b"\n".join(lines[1:5]) + b"\n{bad\n" + lines[5] + b"\n" + lines[6]  # blank line, bad line, no final newline
    p = tmp_path / "r.jsonl"
    p.write_bytes(raw)
    whole = [(r.source, getattr(r, "session_id", None)) for r in read_dump(p)]
    for per in (1, 2, 3, 100):
        ranges = jsonl_ranges(p, per)
        assert sum(n for *_, n in ranges) == len(whole) == 8
        got = [(r.source, getattr(r, "session_id", None)) for a, b, first, _ in ranges for r in read_jsonl_range(p, a, b, first)]
        assert got == whole
    assert whole[5][0] == "r.jsonl:7"  # line numbers count the blank line


def test_interrupted_run_is_marked_incomplete(monkeypatch: Any) -> None:
    from tito_fast.score import run as job

    fast, _ = _scorers("qwen3", "qwen3")
    calls = {"n": 0}
    real = job.score_one

    def interrupting(scorer: Any, rec: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 12:
            raise KeyboardInterrupt
        return real(scorer, rec)

    monkeypatch.setattr(job, "score_one", interrupting)
    monkeypatch.setattr(fast, "native", None)  # every record through score_one, in chunks of 8
    run = run_score(QWEN_DUMP, "fixture:qwen3", "qwen3", scorer=fast, interruptible=True)
    assert run.stopped_at == "interrupted" and not run.summary.complete and len(run.results) == 8  # whole chunks only
    from tito_fast.score.report import html_report

    assert "INCOMPLETE: the run stopped on an interrupt" in html_report(run.summary, [])
    with pytest.raises(KeyboardInterrupt):
        calls["n"] = 0
        run_score(QWEN_DUMP, "fixture:qwen3", "qwen3", scorer=fast)

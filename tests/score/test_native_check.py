"""The native session check (`Scorer.native`: parse, render, encode and compare
in Rust) gives the results of the Python path, on every example dump and
every Miles-produced dump, in both modes, with one thread and with several;
and lines it does not take on go to the Python path."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tito_fast._core import CheckedSession, SessionChecker, TemplateRenderError, common_prefix_len
from tito_fast.compare.messages import SENTINEL, MessageBounds
from tito_fast.score.dump import RawRow, batch_dicts, parquet_rows, read_dump_lines, to_arrow, write_parquet
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


def test_unusual_lines_get_the_python_paths_verdict(tmp_path: Path) -> None:
    """Odd and bad lines: the native check reads them with the one reader (a bad
    record there is the Python path's bad record, word for word) or hands them
    to the Python path (what it cannot render or encode); either way the
    verdicts are the Python path's."""
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
    base = json.dumps(row)
    raw = {  # what only a JSON text can hold
        "nan": b'{"session_id": "x", "messages": NaN}',
        "not utf-8": b"\xff\xfe",
        "not utf-8 in another field": base[:-1].encode() + b', "extra": "\xff"}',
        "repeated field": (base[:-1] + ', "session_id": "again"}').encode(),
        "escaped key": base.replace('"token_ids"', '"token\\u005fids"').encode(),
        "null ids": (base[:-1] + ', "token_ids": null}').replace('"token_ids": [', '"other": [', 1).encode(),
    }
    lines = [json.dumps(r).encode() for r in rows] + list(raw.values())
    explained = dict(zip([*variants, *raw], [scorer.native.explain(ln) for ln in lines]))
    # only what the native renderer and encoder do not cover goes to Python; bad records are read natively
    assert {k for k, e in explained.items() if e is not None} == {"id outside the vocabulary", "bad tool-call arguments", "other family"}, explained
    spaced = base.replace(json.dumps(row["token_ids"]), "[ " + " ,\t".join(map(str, row["token_ids"])) + "\r]").encode()
    assert scorer.native.explain(spaced) is None  # any JSON spacing of the ids is read natively
    lines.append(spaced)
    dump = tmp_path / "odd.jsonl"
    dump.write_bytes(b"\n".join(lines) + b"\n\n")
    native = run_score(dump, scorer=scorer, on_error="skip")
    python_scorer = Scorer(tito=scorer.tito)
    python_scorer.native = None
    python = run_score(dump, scorer=python_scorer, on_error="skip")
    assert [b.to_dict() for b in native.bad] == [b.to_dict() for b in python.bad]
    assert _plain(native.results) == _plain(python.results)
    sid = row["session_id"]
    assert len(native.bad) == 11 and [r.session_id for r in native.results] == ["7", "again", sid, sid]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_differing_sessions_diagnosed_as_python_does(data: st.DataObject, tmp_path_factory: pytest.TempPathFactory) -> None:
    """Sessions that differ from their render, in every message shape: the
    diagnosis on what the native check read of the line (roles, where each
    message's text is) equals the Python path's on the parsed record."""
    scorer = _scorer("qwen3", "qwen3", "full")
    assert scorer.native is not None
    rows = [json.loads(ln) for ln in (ROOT / "examples" / "qwen3_dump.jsonl").read_text(encoding="utf-8").splitlines()]
    row = data.draw(st.sampled_from(rows))
    messages = [dict(m) for m in row["messages"]]
    text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
    for m in messages:
        shape = data.draw(st.sampled_from(["as is", "parts", "unicode", "empty", "none", "spaces"]))
        if shape == "parts":
            m["content"] = [{"type": "text", "text": data.draw(text)}, {"type": "image"}, "loose"]
        elif shape == "unicode":
            m["content"] = data.draw(text) + "é🙂" + str(m.get("content") or "")
        elif shape == "empty":
            m["content"] = ""
        elif shape == "none" and m["role"] == "assistant":
            m["content"] = None
        elif shape == "spaces":
            m["content"] = "  \n" + str(m.get("content") or "") + " \t"
    ids = list(row["token_ids"])
    at = data.draw(st.integers(0, len(ids) - 1))
    ids[at : at + data.draw(st.integers(0, 3))] = data.draw(st.lists(st.integers(0, 151_000), max_size=3))
    line = json.dumps(dict(row, messages=messages, token_ids=ids or [0]), ensure_ascii=data.draw(st.booleans()))
    dump = tmp_path_factory.mktemp("differs") / "d.jsonl"
    dump.write_text(line + "\n", encoding="utf-8")
    python_scorer = Scorer(tito=scorer.tito)
    python_scorer.native = None
    native = run_score(dump, scorer=scorer, threads=1)
    python = run_score(dump, scorer=python_scorer)
    assert _plain(native.results) == _plain(python.results)
    assert [b.to_dict() for b in native.bad] == [b.to_dict() for b in python.bad]


@pytest.mark.parametrize(("dump", "fixture", "family"), DUMPS[:3], ids=lambda x: x.name if isinstance(x, Path) else x)
def test_native_rows_equal_python_path(dump: Path, fixture: str, family: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Parquet dump's rows take the native check too (`check_rows`: ids read
    in place from the Arrow buffers), with the Python path's results and the
    JSONL door's mismatch lists."""
    scorer = _scorer(fixture, family, "full")
    assert scorer.native is not None
    records = [json.loads(ln) for ln in dump.read_text(encoding="utf-8").splitlines() if ln.strip()]
    pq_path = tmp_path / "dump.parquet"
    write_parquet(pq_path, records)
    rows = [r for r in parquet_rows(pq_path, 7) if isinstance(r, RawRow)]
    assert len(rows) == len(records) and all(type(r.data["token_ids"]).__name__ == "ndarray" for r in rows)
    outcomes = scorer.native.check_rows([r.data for r in rows], threads=2)
    assert all(o is not None for o in outcomes)  # every row taken on natively
    assert {o[0] for o in outcomes if o is not None} == {"clean", "differs"}
    native = run_score(pq_path, scorer=scorer, threads=2)
    jsonl = run_score(dump, scorer=scorer, threads=1)
    monkeypatch.setattr(scorer, "native", None)
    python = run_score(pq_path, scorer=scorer)
    assert _plain(native.results) == _plain(python.results)
    assert [[m.to_dict() for m in r.mismatches] for r in native.results] == [[m.to_dict() for m in r.mismatches] for r in jsonl.results]
    assert native.summary.metrics == python.summary.metrics == jsonl.summary.metrics


def test_unusual_rows_get_the_python_paths_verdict(tmp_path: Path) -> None:
    """Odd and bad Parquet rows (ids negative, past 32 bits, floats, null ids, a
    null list; texts that are not JSON; another family; an id outside the
    vocabulary): the native check, the Python path and the Ray door give the
    same verdicts and results, word for word."""
    pa = pytest.importorskip("pyarrow")
    from tito_fast.score import ray as score_ray

    scorer = _scorer("qwen3", "qwen3", "full")
    row = json.loads((ROOT / "examples" / "qwen3_dump.jsonl").read_text(encoding="utf-8").splitlines()[0])
    ids = row["token_ids"]
    variants: list[tuple[list[Any] | None, str, str | None]] = [  # (ids, messages JSON, family)
        (ids, json.dumps(row["messages"]), None),
        ([*ids[:-1], -3], json.dumps(row["messages"]), None),
        ([*ids[:-1], 2**33], json.dumps(row["messages"]), None),
        ([*ids[:-1], None], json.dumps(row["messages"]), None),
        (None, json.dumps(row["messages"]), None),
        ([*ids, 10**7], json.dumps(row["messages"]), None),
        (ids, "[{", None),
        (ids, json.dumps({"role": "user"}), None),
        (ids, json.dumps(row["messages"]), "glm47"),
        ([], json.dumps(row["messages"]), None),
    ]
    table = pa.table(
        {
            "session_id": pa.array([f"s{i}" for i in range(len(variants))], pa.string()),
            "family": pa.array([f for _, _, f in variants], pa.string()),
            "messages": pa.array([m for _, m, _ in variants], pa.string()),
            "tools": pa.array([json.dumps(row.get("tools")) if row.get("tools") else None] * len(variants), pa.string()),
            "token_ids": pa.array([i for i, _, _ in variants], pa.list_(pa.int64())),
        }
    )
    floats = table.set_column(4, "token_ids", pa.array([[float(x) for x in ids]] * len(variants), pa.list_(pa.float64())))
    for t, name in ((table, "odd.parquet"), (floats, "floats.parquet")):
        path = tmp_path / name
        pytest.importorskip("pyarrow.parquet").write_table(t, path)
        python_scorer = Scorer(tito=scorer.tito)
        python_scorer.native = None
        native = run_score(path, scorer=scorer, on_error="skip", threads=1)
        python = run_score(path, scorer=python_scorer, on_error="skip")
        assert [b.to_dict() for b in native.bad] == [b.to_dict() for b in python.bad]
        assert _plain(native.results) == _plain(python.results)
        ray_native = score_ray.score_batch(t, scorer).to_pylist()
        ray_python = score_ray.score_batch(t, python_scorer).to_pylist()
        assert ray_native == ray_python
    assert len(native.bad) == len(variants)  # float ids: every row is bad


@pytest.mark.parametrize("ids_type", ["list<int32>", "large_list<int64>", "list<uint16>", "list<int8>"])
def test_rows_read_their_ids_in_place_as_lists_would(ids_type: str) -> None:
    """`batch_dicts` gives each row's ids as a numpy view of the Arrow buffer
    (chunked, sliced, with null rows) holding the ids `to_pylist` gives; a
    column with a null id, or of floats, stays Python values (the reader says
    what is wrong with them)."""
    pa = pytest.importorskip("pyarrow")
    value = {"list<int32>": pa.int32(), "large_list<int64>": pa.int64(), "list<uint16>": pa.uint16(), "list<int8>": pa.int8()}[ids_type]
    typ = pa.large_list(value) if ids_type.startswith("large") else pa.list_(value)
    lists = [[1, 2, 3], None, [], [4, 5], [6], [7, 8, 9, 10]]
    part = pa.table({"session_id": [f"s{i}" for i in range(3)], "token_ids": pa.array(lists[:3], typ)})
    rest = pa.table({"session_id": [f"s{i}" for i in range(3, 6)], "token_ids": pa.array(lists[3:], typ)})
    table = pa.concat_tables([part, rest])
    for t in (table, table.slice(1, 4), table.combine_chunks().slice(2, 3), table.to_batches()[1]):
        rows = batch_dicts(t)
        want = t.column("token_ids").to_pylist()
        assert [None if r["token_ids"] is None else r["token_ids"].tolist() for r in rows] == want
        assert all(r["token_ids"] is None or type(r["token_ids"]).__name__ == "ndarray" for r in rows)
        assert [r["session_id"] for r in rows] == t.column("session_id").to_pylist()
    with_null = pa.table({"token_ids": pa.array([[1, None]], typ)})
    floats = pa.table({"token_ids": pa.array([[1.0]], pa.list_(pa.float64()))})
    assert batch_dicts(with_null) == [{"token_ids": [1, None]}] and batch_dicts(floats) == [{"token_ids": [1.0]}]


def test_a_records_ids_do_not_raise_the_renderers_limits(tmp_path: Path) -> None:
    """The renderer's limits grow with what it renders (messages, tools), on
    every path: a template that runs out of fuel on a record is a
    `template_limit` bad record whether the record comes as a JSONL line, a
    Parquet row or a Ray batch, however many ids it holds."""
    tmpl = (
        "{% set L = (messages[-1].content|length) %}{% if L > 500 %}{% for a in range(L) %}"
        "{% for b in range(L) %}{% endfor %}{% endfor %}{% endif %}"
        "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    )
    tok = fixtures.load_tokenizer("qwen3")
    native = Scorer(tok, "qwen3", chat_template=tmpl)
    assert native.native is not None, native.native_reason
    python = Scorer(tito=native.tito)
    python.native = None
    rows = [{"session_id": "s", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "y" * 2000}],
             "token_ids": [100] * 300_000}]  # fmt: skip
    write_parquet(tmp_path / "d.parquet", rows)
    (tmp_path / "d.jsonl").write_text(json.dumps(rows[0]) + "\n", encoding="utf-8")
    for name in ("d.parquet", "d.jsonl"):
        for scorer in (native, python):
            run = run_score(tmp_path / name, scorer=scorer, on_error="skip", threads=1)
            assert [b.code for b in run.bad] == ["template_limit"] and not run.results, (name, scorer.renderer)
    from tito_fast.score import ray as score_ray

    out = score_ray.score_batch(to_arrow(rows), native).to_pylist()
    assert not out[0]["ok"] and "limit of the renderer" in out[0]["error"]


@pytest.mark.parametrize("threads", [1, 2, None])
def test_a_batch_is_checked_a_chunk_at_a_time_with_the_same_results(threads: int | None, monkeypatch: pytest.MonkeyPatch) -> None:
    # `score_batch` checks `native_chunk(threads)` lines at a time (a differing
    # session's render and ids live until its diagnosis): the chunks change nothing
    from tito_fast import _core
    from tito_fast.score import run

    monkeypatch.setattr(run, "NATIVE_PER_THREAD", 2)  # a few lines a chunk, whatever the machine's cores
    scorer = _scorer("qwen3", "qwen3", "full")
    size = run.native_chunk(threads)
    assert size == 2 * _core.pool_size(threads)
    lines = list(read_dump_lines(DUMPS[0][0]))
    items = (lines * (size // len(lines) + 2))[: 2 * size + 3]  # more than one chunk, the last one short
    checked: list[int] = []
    outcomes = run.native_outcomes

    def recorded(sc: Scorer, its: list[Any], th: int | None) -> list[Any]:
        checked.append(len(its))
        return outcomes(sc, its, th)

    monkeypatch.setattr(run, "native_outcomes", recorded)
    whole = run.score_batch(scorer, items, threads)
    n = len(items)
    assert checked == [size] * (n // size) + [n % size] and n % size  # every chunk full but the last
    one_by_one = [r for it in items for r in run.score_batch(scorer, [it], threads)]
    assert _plain(whole) == _plain(one_by_one) and len(whole) == len(items)


@pytest.mark.parametrize(("dump", "fixture", "family"), DUMPS, ids=lambda x: x.name if isinstance(x, Path) else x)
def test_the_checks_own_attribution_is_the_rules(dump: Path, fixture: str, family: str) -> None:
    """The prefix lengths a differing session's check finds on its thread (the
    first difference's message) are the ones `MessageBounds` finds from
    scratch over the same renders, and jinja2 is asked only for a prefix the
    native renderer does not render."""
    scorer = _scorer(fixture, family, "fast")
    assert scorer.native is not None
    tracker = scorer.cmp.role_tracker
    outcomes = scorer.native.check_lines([ln.data for ln in read_dump_lines(dump)])  # type: ignore[union-attr]
    differing = [(o[1], o[2], o[3], o[-1]) for o in outcomes if o is not None and o[0] == "differs"]
    assert differing
    found = 0
    seg = scorer.cmp.segmenter
    for text, expected, actual, session in differing:
        assert isinstance(text, bytes) and isinstance(session, CheckedSession)
        assert isinstance(expected, np.ndarray) and isinstance(actual, np.ndarray)
        asked: list[int] = []

        def jinja(k: int) -> str:
            asked.append(k)
            raise ValueError("as jinja2 refuses it")  # (k = 0: the template reads messages[0])

        bounds = session.message_bounds(render_prefix=jinja, render_history=jinja)
        known = dict(bounds.known())
        found += len(known) > 1
        n = len(session.roles)
        fresh = MessageBounds(
            lambda k: session.render_prefix(k), n, text, openers=tracker.openers, first_role=session.roles[0],
            render_history=lambda k: session.render_prefix(k, then_user=SENTINEL),
        )  # fmt: skip
        assert {k: fresh.prefix_len(k) for k in known} == known
        # the first difference: its id, where it starts, and its message from what the check found
        assert session.first_difference is not None
        i, byte = session.first_difference
        def trimmed(ids: np.ndarray) -> int:
            n = len(ids)
            while n and int(ids[n - 1]) in scorer._trim:
                n -= 1
            return n

        ne, na = trimmed(expected), trimmed(actual)
        assert i == min(common_prefix_len(expected[:ne], actual[:na]), len(expected) - 1)
        assert byte == seg.byte_len(expected[:i]) and seg.byte_len(expected) == len(text)
        # the message the search over every prefix finds (the smallest k whose render covers more than byte, less one)
        searched = next((k for k in range(n + 1) if fresh.prefix_len(k) > byte), n) - 1
        assert bounds.known_message_at(byte) == searched
        assert [bounds.prefix_len(k) for k in range(n + 1)] == [fresh.prefix_len(k) for k in range(n + 1)]
        for k in asked:  # jinja2 is asked only for what the native renderer hands over
            with pytest.raises(TemplateRenderError):
                session.render_prefix(k)
    assert found == len(differing)  # every differing session's first difference was placed on its thread


def test_message_bounds_over_python_callables_take_only_exceptions_as_refusals() -> None:
    def render(k: int) -> str:
        if k == 1:
            raise ValueError("the template refuses one message")
        if k == 3:
            raise KeyboardInterrupt
        return "ab"[:k]

    b = MessageBounds(render, 2, b"ab")
    assert (b.prefix_len(0), b.prefix_len(1), b.prefix_len(2)) == (0, 0, 2)  # refused: what the shorter prefix covers
    assert b.message_at(-3) == -1 and b.message_at(5) == 1
    with pytest.raises(KeyboardInterrupt):
        b.prefix_len(3)
    with pytest.raises(ValueError, match="argument 'k': must be an int >= 0"):
        b.prefix_len(-1)
    assert b.known() == [(0, 0), (1, 0), (2, 2)]
    assert b.message_at(1, hint=2**80) == b.message_at(1, hint=-(2**80)) == b.message_at(10**30) == 1  # any guess, any byte


def test_a_render_callable_may_not_call_its_own_bounds() -> None:
    """Such a call raises, and the search raises it (never read as a refusal)."""
    bounds: list[MessageBounds] = []

    def render(k: int) -> str:
        if k == 1:
            bounds[0].prefix_len(0)
        return "ab"[:k]

    bounds.append(MessageBounds(render, 2, b"ab"))
    with pytest.raises(RuntimeError, match="in use"):
        bounds[0].prefix_len(1)
    assert bounds[0].prefix_len(0) == 0  # usable again


@pytest.mark.parametrize(("dump", "fixture", "family"), DUMPS, ids=lambda x: x.name if isinstance(x, Path) else x)
def test_the_checks_alignment_and_role_table_are_the_comparators(dump: Path, fixture: str, family: str) -> None:
    """In full mode the check aligns a differing session and reads its render's
    role table on its threads; both are what the comparator and the role
    tracker make of the same ids (in fast mode it makes neither)."""
    scorer = _scorer(fixture, family, "full")
    assert scorer.native is not None
    cmp, tracker = scorer.cmp, scorer.cmp.role_tracker
    outcomes = scorer.native.check_lines([ln.data for ln in read_dump_lines(dump)])  # type: ignore[union-attr]
    differing = [(o[2], o[3], o[-1]) for o in outcomes if o is not None and o[0] == "differs"]
    assert differing
    fields = ["kind", "differing", "verdicts", "expected_starts", "expected_special", "actual_starts", "actual_special", "texts"]
    for expected, actual, session in differing:
        assert isinstance(session, CheckedSession) and isinstance(expected, np.ndarray) and isinstance(actual, np.ndarray)
        got, want = session.alignment, cmp.align(expected, actual, cmp.trim_ids())
        assert got is not None
        for f in fields:
            a, b = getattr(got, f), getattr(want, f)
            assert (a.tolist() if hasattr(a, "tolist") else a) == (b.tolist() if hasattr(b, "tolist") else b), f
        table = session.expected_table
        assert table is not None
        want_table = tracker.table(expected[: int(want.expected_starts[-1])])
        assert table[0].tolist() == want_table.starts.tolist() and table[1] == want_table.roles
    fast = _scorer(fixture, family, "fast")
    assert fast.native is not None
    sessions = [o[-1] for o in fast.native.check_lines([ln.data for ln in read_dump_lines(dump)]) if o is not None and o[0] == "differs"]  # type: ignore[union-attr]
    assert sessions and all(isinstance(s, CheckedSession) and s.alignment is None for s in sessions)


def test_a_checker_that_would_align_needs_a_segmenter() -> None:
    scorer = _scorer("qwen3", "qwen3", "full")
    t = scorer.tito
    renderer, enc = t.native_renderer(), t.fast_encoder
    assert renderer is not None and renderer.template is not None and enc is not None and enc.core is not None
    kw: dict[str, Any] = dict(variables=t.template_variables, tool_policy=t.tool_policy, trim_ids=[], vocab_size=scorer.vocab_size, family="qwen3")
    with pytest.raises(ValueError, match="argument 'roles'"):
        SessionChecker(renderer.template, enc.core, roles=scorer.cmp.role_tracker.core, **kw)
    with pytest.raises(ValueError, match="probe_ids"):
        SessionChecker(renderer.template, enc.core, probe_ids=True, **kw)  # a bool is no count


def test_a_render_encoded_outside_the_vocabulary_goes_to_the_python_path() -> None:
    """Every id of a session the check takes is in the vocabulary (the diagnosis
    then has nothing to warn of): a record whose own ids are inside it but whose
    render encodes to one outside goes to the Python path."""
    scorer = _scorer("qwen3", "qwen3", "full")
    t = scorer.tito
    renderer, enc = t.native_renderer(), t.fast_encoder
    assert renderer is not None and renderer.template is not None and enc is not None and enc.core is not None
    row = json.loads((ROOT / "examples" / "qwen3_dump.jsonl").read_text(encoding="utf-8").splitlines()[0])
    ids = sorted(row["token_ids"])[:5]  # a differing session with the five smallest ids
    line = json.dumps(dict(row, token_ids=ids)).encode()
    kw: dict[str, Any] = dict(variables=t.template_variables, tool_policy=t.tool_policy, trim_ids=[], family="qwen3")
    small = SessionChecker(renderer.template, enc.core, vocab_size=max(ids) + 1, **kw)
    assert small.explain(line) == "the render encodes to an id outside the vocabulary"
    assert small.check_lines([line]) == [None]
    whole = SessionChecker(renderer.template, enc.core, vocab_size=scorer.vocab_size, **kw)
    assert whole.explain(line) is None and whole.check_lines([line])[0][0] == "differs"  # type: ignore[index]

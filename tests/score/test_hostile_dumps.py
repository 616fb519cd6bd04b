"""One hostile record never ends the job: each becomes a bad record with its
line or row and reason, counted under `--on-error skip`."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tito_fast.score import dump
from tito_fast.errors import BAD_RECORD_CODES
from tito_fast.score.dump import BadRecord, Record, read_dump
from tito_fast.score.run import run_score

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "qwen3_dump.jsonl"
BIG = "1" * 5000  # an integer of 5,000 digits, past Python's int-from-text limit
DEEP = "[" * 10_000 + "]" * 10_000  # JSON nested 10,000 levels deep


def _good() -> dict[str, Any]:
    row: dict[str, Any] = json.loads(EXAMPLE.read_text(encoding="utf-8").splitlines()[0])
    return row


def _line(row: dict[str, Any], **raw: str) -> str:
    """`row` as a JSON line with some fields replaced by raw JSON text."""
    fields = {k: json.dumps(v, ensure_ascii=True) for k, v in row.items() if k not in raw}
    fields.update(raw)
    return "{" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in fields.items()) + "}"


def _hostile_lines() -> dict[str, str]:
    good = _good()
    msgs = json.dumps(good["messages"])
    ids = json.dumps(good["token_ids"])
    call = next(m for m in good["messages"] if m.get("tool_calls"))
    k = good["messages"].index(call)
    with_args = json.loads(msgs)
    with_args[k]["tool_calls"][0]["function"]["arguments"] = "ARGS"
    args_msgs = json.dumps(with_args)
    return {
        "big int in ids": _line(good, token_ids=ids[:-1] + f", {BIG}]"),
        "big int in messages": _line(good, messages=msgs.replace('"content": ', f'"n": {BIG}, "content": ', 1)),
        "big int in metadata": _line(good, metadata=f'{{"reward": {BIG}}}'),
        "deep messages": _line(good, messages=msgs.replace('"content": ', f'"deep": {DEEP}, "content": ', 1)),
        "deep metadata": _line(good, metadata=f'{{"x": {DEEP}}}'),
        "surrogate in content": _line(good, messages=msgs.replace('"content": "', '"content": "\\ud800', 1)),
        "surrogate in arguments": _line(good, messages=args_msgs.replace('"ARGS"', '"{\\"a\\": \\"\\ud800\\"}"')),
        "surrogate in metadata": _line(good, metadata='{"note": "\\udfff"}'),
        "surrogate in session id": _line(good, session_id='"s\\ud800"'),
    }


def test_each_hostile_record_is_a_bad_record(tmp_path: Path) -> None:
    lines = _hostile_lines()
    good = json.dumps(_good())
    p = tmp_path / "hostile.jsonl"
    p.write_text("\n".join([good, *lines.values(), good]) + "\n", encoding="utf-8")
    out = list(read_dump(p))
    assert isinstance(out[0], Record) and isinstance(out[-1], Record)
    for (what, _), rec in zip(lines.items(), out[1:-1]):
        assert isinstance(rec, BadRecord), what
    reasons = {what: rec.reason for what, rec in zip(lines, out[1:-1]) if isinstance(rec, BadRecord)}
    assert "digits" in reasons["big int in ids"]
    assert "nested deeper than 256 levels" in reasons["deep messages"]
    assert "not valid Unicode" in reasons["surrogate in content"]
    assert "not valid Unicode" in reasons["surrogate in arguments"]
    assert "metadata" in reasons["surrogate in metadata"]
    assert "session_id" in reasons["surrogate in session id"]
    codes = {what: rec.code for what, rec in zip(lines, out[1:-1]) if isinstance(rec, BadRecord)}
    assert set(codes.values()) <= set(BAD_RECORD_CODES)
    assert codes["big int in ids"] == codes["big int in metadata"] == "int_too_long"
    assert codes["deep messages"] == codes["deep metadata"] == "too_deep"
    assert {codes[k] for k in lines if k.startswith("surrogate")} == {"lone_surrogate"}
    # the whole job goes on and counts them
    run = run_score(p, "fixture:qwen3", "qwen3", on_error="skip")
    assert run.summary.complete and len(run.results) == 2 and run.summary.bad_records == len(lines)
    assert [b.source for b in run.bad] == [f"hostile.jsonl:{i}" for i in range(2, 2 + len(lines))]
    # and writes out: every result serialises as strict JSON
    json.dumps([r.to_dict() for r in run.results], allow_nan=False).encode("utf-8")


def test_non_finite_metadata_is_written_as_valid_json(tmp_path: Path) -> None:
    p = tmp_path / "nan.jsonl"
    p.write_text(_line(_good(), metadata='{"reward": NaN, "best": Infinity, "worst": -Infinity}') + "\n", encoding="utf-8")
    (rec,) = list(read_dump(p))
    assert isinstance(rec, Record)
    assert rec.metadata == {"reward": "NaN", "best": "Infinity", "worst": "-Infinity"}
    run = run_score(p, "fixture:qwen3", "qwen3")
    json.dumps([r.to_dict() for r in run.results], allow_nan=False)  # raises on NaN


def test_an_oversized_line_is_a_bad_record_read_no_further(tmp_path: Path, monkeypatch: Any) -> None:
    small = _good()
    small_line = json.dumps(small)
    limit = len(small_line.encode()) + 1
    monkeypatch.setattr(dump, "MAX_RECORD_BYTES", limit)
    row = _good()
    row["messages"][1]["content"] = "x" * (3 * limit)
    p = tmp_path / "big.jsonl"
    p.write_text("\n".join([small_line, json.dumps(row), small_line]) + "\n", encoding="utf-8")
    out = list(read_dump(p))
    assert [type(r).__name__ for r in out] == ["Record", "BadRecord", "Record"]
    bad = out[1]
    assert isinstance(bad, BadRecord) and bad.source == "big.jsonl:2" and f"over the limit of {limit:,}" in bad.reason
    assert out[2].source == "big.jsonl:3"
    # the workers' byte ranges read the same way
    assert [type(r).__name__ for r in dump.read_jsonl_range(p, 0, None, 1)] == ["Record", "BadRecord", "Record"]


def test_invalid_utf8_in_a_parquet_binary_column_is_a_bad_row(tmp_path: Path) -> None:
    good = _good()
    msgs = json.dumps(good["messages"]).encode()
    table = pa.table(
        {
            "session_id": ["a", "b"],
            "messages": pa.array([msgs, b'[{"role": "user", "content": "\xff\xfe"}]'], type=pa.binary()),
            "token_ids": [good["token_ids"], good["token_ids"]],
        }
    )
    p = tmp_path / "bin.parquet"
    pq.write_table(table, p)
    out = list(read_dump(p))
    assert isinstance(out[0], Record)
    assert isinstance(out[1], BadRecord) and out[1].source == "bin.parquet:row 1" and "UTF-8" in out[1].reason


@pytest.mark.parametrize("column", ["messages", "metadata"])
def test_deep_json_in_a_parquet_string_column_is_a_bad_row(tmp_path: Path, column: str) -> None:
    good = _good()
    cols: dict[str, Any] = {
        "session_id": ["a"],
        "messages": [json.dumps(good["messages"])],
        "token_ids": [good["token_ids"]],
        "metadata": ["{}"],
    }
    cols[column] = [DEEP]
    p = tmp_path / "deep.parquet"
    pq.write_table(pa.table(cols), p)
    (out,) = list(read_dump(p))
    assert isinstance(out, BadRecord) and "nested deeper than 256 levels" in out.reason


@given(
    parts=st.lists(st.sampled_from([b"", b" ", b"\t", b"x", b"ab", b" a ", b"\r"]), max_size=8),
    tail=st.booleans(),
    block=st.integers(1, 4),
)
def test_line_scan_reads_lines_as_python_does(parts: list[bytes], tail: bool, block: int) -> None:
    data = b"\n".join(parts) + (b"\n" if tail else b"")

    class Small(io.BytesIO):
        def read(self, n: int | None = -1) -> bytes:
            return super().read(block)

    expected = [(len(line), bool(line.strip())) for line in io.BytesIO(data)]
    assert list(dump._scan_lines(Small(data))) == expected


def test_an_unexpected_error_in_one_record_is_a_bad_record(monkeypatch: pytest.MonkeyPatch) -> None:
    from tito_fast.score.run import score_one
    from tito_fast.score.scorer import Scorer
    from tito_fast.testing import fixtures

    scorer = Scorer(fixtures.load_tokenizer("qwen3"), "qwen3")
    (rec,) = [r for r in read_dump(EXAMPLE) if isinstance(r, Record)][:1]

    def broken(record: Record) -> Any:
        raise IndexError("list index out of range")

    monkeypatch.setattr(scorer, "score", broken)
    out = score_one(scorer, rec)
    assert isinstance(out, BadRecord) and "unexpected error scoring this record (IndexError" in out.reason


def test_a_truncated_gzip_dump_ends_with_a_counted_bad_record(tmp_path: Path) -> None:
    import gzip

    from tito_fast.chains import assemble

    good = _good()
    rows = (dict(good, session_id=f"s{i}", metadata={"noise": os.urandom(3000).hex()}) for i in range(60))
    whole = gzip.compress(("\n".join(map(json.dumps, rows)) + "\n").encode())
    p = tmp_path / "cut.jsonl.gz"
    p.write_bytes(whole[: len(whole) * 2 // 3])
    run = run_score(p, "fixture:qwen3", "qwen3", on_error="skip")
    assert run.results and [b.code for b in run.bad] == ["truncated"] and run.summary.bad_records == 1
    ids = good["token_ids"]
    calls = gzip.compress(
        "\n".join(
            json.dumps({"session_id": "s", "call_index": i, "prompt_ids": ids[: 10 + i], "completion_ids": [ids[10 + i]], "metadata": os.urandom(2000).hex()})
            for i in range(300)
        ).encode()
    )
    c = tmp_path / "cut_calls.jsonl.gz"
    c.write_bytes(calls[: len(calls) // 2])
    a = assemble(c, on_error="skip")
    assert a.summary.calls > 0 and [b.code for b in a.bad] == ["truncated"]

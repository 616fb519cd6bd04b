"""Hostile input, end to end through the command line: one record never ends a
run under `--on-error skip` (it is a bad record naming its file and line or
row), a file that cannot be used is one line with exit code 2 naming it,
memory stays bounded whatever a record declares, the threads stay bounded
whatever `threads=` asks for, and no run changes its input or leaves a
temporary file."""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import resource
import stat
import subprocess
import sys
import threading
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tito_fast.chains import assemble
from tito_fast.chains.calls import Call
from tito_fast.chains.output import write_chains
from tito_fast.cli.main import EXIT_CODES
from tito_fast.errors import BAD_RECORD_CODES, CATALOGUE
from tito_fast.score.dump import MAX_RECORD_BYTES

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="FIFOs, /proc and RLIMIT_AS as on Linux")

ROOT = Path(__file__).resolve().parents[2]
DUMP = ROOT / "examples" / "qwen3_dump.jsonl"
CALLS = ROOT / "examples" / "qwen3_calls.jsonl"
MODEL = ["--tokenizer", "fixture:qwen3", "--family", "qwen3"]
INPUT = EXIT_CODES["input"]
assert CATALOGUE["dump_error"][1] == CATALOGUE["output_path"][1] == INPUT == 2


def _run(*args: str, cwd: Path, limit_bytes: int | None = None) -> tuple[int, str]:
    """`tito-fast ARGS` in a subprocess (under an address-space limit when given): (exit code, stderr)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRANSFORMERS_")}

    def limit() -> None:
        if limit_bytes is not None:
            resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))

    out = subprocess.run(
        [sys.executable, "-m", "tito_fast", *args], cwd=cwd, capture_output=True, text=True, timeout=600, env=env,
        preexec_fn=limit,
    )  # fmt: skip
    assert "Traceback" not in out.stderr, out.stderr
    return out.returncode, out.stderr


def _error(err: str) -> str:
    """The one `tito-fast: error:` line of a failed run."""
    (line,) = [x for x in err.splitlines() if x.startswith("tito-fast: error: ")]
    return line


def _digest(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _calls() -> list[dict[str, Any]]:
    return [json.loads(x) for x in CALLS.read_text(encoding="utf-8").splitlines() if x.strip()]


def _raw(row: dict[str, Any], **raw: str) -> str:
    """`row` as a JSON line with some fields replaced by raw JSON text."""
    fields = {k: json.dumps(v) for k, v in row.items() if k not in raw}
    fields.update(raw)
    return "{" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in fields.items()) + "}"


def _parquet_rows() -> list[dict[str, Any]]:
    """The example capture as Parquet rows: its JSON fields as text."""
    rows = _calls()
    for r in rows:
        for k in ("messages", "tools", "response", "metadata"):
            r[k] = json.dumps(r.get(k))
    return rows


# -- one record never ends an assemble run ------------------------------------

_N = len(_calls()[0]["completion_ids"])
HOSTILE_CALLS: dict[str, tuple[dict[str, str], str, str]] = {  # raw fields, code, words of the reason
    "JSON nested 10,000 deep": ({"metadata": "[" * 10_000 + "]" * 10_000}, "too_deep", "nested deeper than 256 levels"),
    "call_index 2**70": ({"call_index": str(2**70)}, "bad_field", "'call_index' must be a non-negative int below 2**63"),
    "a logprob of -1e400": ({"completion_logprobs": "[" + ", ".join(["-1e400"] * _N) + "]"}, "bad_logprobs", "not a finite number"),
    "a logprob of -1e39": ({"completion_logprobs": "[" + ", ".join(["-1e39"] * _N) + "]"}, "bad_logprobs", "outside float32's range"),
    "a logprob of NaN": ({"completion_logprobs": "[" + ", ".join(["NaN"] * _N) + "]"}, "bad_logprobs", "not a finite number"),
    "a lone surrogate in session_id": ({"session_id": '"s\\ud800"'}, "lone_surrogate", "a lone surrogate) in session_id"),
    "a 5,000-digit integer": ({"metadata": "1" * 5000}, "int_too_long", "an integer of 5000 digits"),
}


@pytest.mark.parametrize("what", list(HOSTILE_CALLS))
def test_one_hostile_capture_record_is_one_bad_record(tmp_path: Path, what: str) -> None:
    fields, code, words = HOSTILE_CALLS[what]
    lines = CALLS.read_text(encoding="utf-8").splitlines()
    row = {**_calls()[0], "session_id": "hostile"}
    src = tmp_path / "calls.jsonl"
    src.write_text("\n".join([*lines[:3], _raw(row, **fields), *lines[3:]]) + "\n", encoding="utf-8")
    before = _digest(src)
    out = tmp_path / "out"
    out.mkdir()
    args = ["--out", str(out / "c.jsonl"), "--json", str(out / "c.json"), "--report", str(out / "c.html")]
    code_, err = _run("assemble", str(src), *MODEL, "--on-error", "skip", *args, cwd=tmp_path)
    assert code_ == EXIT_CODES["ok"], err
    assert "skipped 1 bad record(s), the first calls.jsonl:4: " in err and words in err
    data = json.loads((out / "c.json").read_text(encoding="utf-8"))
    (bad,) = data["bad_records"]
    assert bad["source"] == "calls.jsonl:4" and bad["code"] == code and code in BAD_RECORD_CODES and words in bad["reason"]
    assert data["summary"]["calls"] == len(lines)
    for line in (out / "c.jsonl").read_text(encoding="utf-8").splitlines():  # strict JSON: no NaN, no Infinity
        json.loads(line, parse_constant=lambda c: pytest.fail(f"{c} in the chains"))
    assert sorted(p.name for p in out.iterdir()) == ["c.html", "c.json", "c.jsonl"]  # no temporary file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["calls.jsonl", "out"]
    assert _digest(src) == before
    # and under --on-error fail, the same record stops the run, named
    code_, err = _run("assemble", str(src), *MODEL, cwd=tmp_path)
    assert code_ == INPUT and _error(err).startswith("tito-fast: error: calls.jsonl:4: ") and words in err


def test_a_truncated_gzip_capture_ends_with_one_bad_record(tmp_path: Path) -> None:
    rows = [{**r, "session_id": f"{k}-{r['session_id']}"} for k in range(20) for r in _calls()]
    whole = gzip.compress(("\n".join(map(json.dumps, rows)) + "\n").encode())
    src = tmp_path / "cut.jsonl.gz"
    src.write_bytes(whole[: len(whole) // 2])
    code, err = _run("assemble", str(src), *MODEL, "--on-error", "skip", "--json", str(tmp_path / "a.json"), cwd=tmp_path)
    assert code == 0, err
    (bad,) = json.loads((tmp_path / "a.json").read_text(encoding="utf-8"))["bad_records"]
    assert bad["code"] == "truncated" and bad["source"] == "cut.jsonl.gz" and "ends early or is corrupt" in bad["reason"]


# -- Parquet: bad rows are skipped, named by file and row, as JSONL rejects them


def _bad_parquet(kind: str) -> tuple[list[dict[str, Any]], list[int]]:
    """The example capture as Parquet rows, made bad in `kind`'s way; the rows made bad."""
    rows = _parquet_rows()
    if kind == "list session_id":
        for r in rows:
            r["session_id"] = [r["session_id"]]
        return rows, list(range(len(rows)))
    if kind == "struct session_id":
        for r in rows:
            r["session_id"] = {"id": r["session_id"]}
        return rows, list(range(len(rows)))
    if kind == "bad messages":
        rows[3]["messages"] = '{"not": "a list"}'
        rows[5]["messages"] = "not JSON"
        return rows, [3, 5]
    if kind == "numeric-string logprobs":
        for r in rows:
            r["completion_logprobs"] = [str(x) for x in r["completion_logprobs"]]
        return rows, list(range(len(rows)))
    if kind == "bool logprobs":
        for r in rows:
            r["completion_logprobs"] = [True] * len(r["completion_ids"])
        return rows, list(range(len(rows)))
    assert kind == "float64 logprob -1e39"
    rows[2]["completion_logprobs"] = [-1e39] * len(rows[2]["completion_ids"])
    return rows, [2]


@pytest.mark.parametrize(
    "kind",
    ["list session_id", "struct session_id", "bad messages", "numeric-string logprobs", "bool logprobs", "float64 logprob -1e39"],
)
def test_bad_parquet_rows_are_skipped_as_jsonl_rejects_them(tmp_path: Path, kind: str) -> None:
    rows, bad_rows = _bad_parquet(kind)
    src = tmp_path / "calls.parquet"
    pq.write_table(pa.Table.from_pylist(rows), src)
    before = _digest(src)
    code, err = _run("assemble", str(src), *MODEL, "--on-error", "skip", "--json", str(tmp_path / "a.json"), cwd=tmp_path)
    assert code == EXIT_CODES["ok"] and "RuntimeWarning" not in err, err
    bad = json.loads((tmp_path / "a.json").read_text(encoding="utf-8"))["bad_records"]
    assert [b["source"] for b in bad] == [f"calls.parquet:row {r}" for r in bad_rows]
    assert all(b["code"] in BAD_RECORD_CODES for b in bad)
    assert _digest(src) == before and sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "calls.parquet"]
    if "logprob" in kind:  # the same logprobs in JSONL lines: the same code and reason
        as_json = tmp_path / "calls.jsonl"
        lines = [{**c, "completion_logprobs": r["completion_logprobs"]} for c, r in zip(_calls(), rows)]
        as_json.write_text("\n".join(json.dumps(r) for r in lines) + "\n", encoding="utf-8")
        a = assemble(as_json, on_error="skip")
        assert [b.source for b in a.bad] == [f"calls.jsonl:{r + 1}" for r in bad_rows]
        assert [(b["code"], b["reason"]) for b in bad] == [(b.code, b.reason) for b in a.bad]


# -- files that cannot be used: one line, exit 2, naming the file -------------


@pytest.mark.parametrize("command", ["score", "assemble"])
@pytest.mark.parametrize("name", ["folder", "folder.jsonl", "folder.parquet", "folder.jsonl.gz"])
def test_a_folder_as_input_says_so(tmp_path: Path, command: str, name: str) -> None:
    (tmp_path / name).mkdir()
    code, err = _run(command, name, *MODEL, "--on-error", "skip", cwd=tmp_path)
    assert code == INPUT
    assert _error(err) == f"tito-fast: error: {name}: is a folder, not a file; give a .jsonl, .jsonl.gz or .parquet file"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["diff", "folder"], "input folder"),
        (["diff", str(DUMP), "--template", "folder"], "--template folder"),
        (["score", str(DUMP), "--encoder", "folder"], "--encoder folder"),
    ],
)
def test_a_folder_as_an_input_file_argument_says_so(tmp_path: Path, args: list[str], said: str) -> None:
    (tmp_path / "folder").mkdir()
    code, err = _run(*args, *MODEL, cwd=tmp_path)
    assert code == INPUT and _error(err) == f"tito-fast: error: {said}: is a folder, not a file"


@pytest.mark.parametrize("command", ["score", "assemble"])
def test_a_parquet_file_named_jsonl_is_an_error_naming_it(tmp_path: Path, command: str) -> None:
    src = tmp_path / "rows.jsonl"
    pq.write_table(pa.Table.from_pylist(_parquet_rows()), src)
    code, err = _run(command, src.name, *MODEL, "--on-error", "skip", cwd=tmp_path)
    assert code == INPUT and _error(err) == "tito-fast: error: rows.jsonl: a Parquet file named .jsonl; name it .parquet"


@pytest.mark.parametrize("command", ["score", "assemble"])
def test_a_gz_that_is_not_gzip_is_an_error_naming_it(tmp_path: Path, command: str) -> None:
    src = tmp_path / "rows.jsonl.gz"
    src.write_bytes((DUMP if command == "score" else CALLS).read_bytes())
    code, err = _run(command, src.name, *MODEL, "--on-error", "skip", cwd=tmp_path)
    assert code == INPUT and _error(err) == "tito-fast: error: rows.jsonl.gz: named .gz but not gzip-compressed"


# -- outputs: a FIFO is written in place, never replaced ----------------------


@pytest.mark.parametrize(
    ("command", "flag", "name"),
    [
        ("score", "--markdown", "r.md"),
        ("score", "--out", "rows.jsonl"),
        ("assemble", "--out", "chains.jsonl"),
        ("assemble", "--json", "a.json"),
        ("assemble", "--report", "a.html"),
    ],
)
def test_an_output_fifo_is_written_in_place(tmp_path: Path, command: str, flag: str, name: str) -> None:
    fifo = tmp_path / name
    os.mkfifo(fifo)
    got: list[bytes] = []

    def read() -> None:
        with open(fifo, "rb") as f:
            got.append(f.read())

    t = threading.Thread(target=read, daemon=True)
    t.start()
    src = DUMP if command == "score" else CALLS
    code, err = _run(command, str(src), *MODEL, flag, str(fifo), "--quiet", cwd=tmp_path)
    t.join(60)
    if t.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail(f"nothing was written to {fifo}: {err}")
    assert code == 0, err
    assert got and got[0]
    assert stat.S_ISFIFO(fifo.stat().st_mode) and [p.name for p in tmp_path.iterdir()] == [name]


# -- size: bounded memory whatever a record declares ---------------------------

LIMIT_AS = 2 * 2**30  # address space for the whole process (interpreter, tokenizer, pyarrow, threads)


@pytest.fixture(scope="module")
def huge(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A 200 MB line in a capture, a 1 GiB line in a 1 MB gzip, and tiny Parquet files declaring 50M ids in a row."""
    d = tmp_path_factory.mktemp("huge")
    lines = CALLS.read_text(encoding="utf-8").splitlines()
    first = json.loads(lines[0])
    out = {"line": d / "line.jsonl", "gz": d / "gz.jsonl.gz", "calls_pq": d / "calls.parquet", "dump_pq": d / "dump.parquet"}
    with open(out["line"], "w", encoding="utf-8") as f:
        f.write(lines[0] + "\n" + json.dumps({**first, "session_id": "huge", "metadata": "x" * 200_000_000}) + "\n")
        f.write("\n".join(lines[1:]) + "\n")
    co = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = b"x" * (1 << 24)
    with open(out["gz"], "wb") as g:
        g.write(co.compress((lines[0] + '\n{"session_id": "huge", "metadata": "').encode()))
        for _ in range(64):
            g.write(co.compress(chunk))
        g.write(co.compress(('"}\n' + "\n".join(lines[1:]) + "\n").encode()) + co.flush())
    n = 50_000_000
    ids = pa.LargeListArray.from_arrays(pa.array([0, n], pa.int64()), pa.array(np.zeros(n, dtype=np.int32)))
    one = pa.array([[1]], pa.large_list(pa.int32()))
    pq.write_table(pa.table({"session_id": ["s"], "prompt_ids": ids, "completion_ids": one}), out["calls_pq"], compression="zstd")
    pq.write_table(pa.table({"session_id": ["s"], "messages": ["[]"], "token_ids": ids}), out["dump_pq"], compression="zstd")
    return out


@pytest.mark.parametrize(
    ("command", "file", "source", "bad"),
    [
        ("assemble", "line", "line.jsonl:2", 1),
        ("assemble", "gz", "gz.jsonl.gz:2", 1),
        ("assemble", "calls_pq", "calls.parquet:row 0", 1),
        ("score", "dump_pq", "dump.parquet:row 0", 1),
    ],
)
def test_a_huge_record_is_a_bad_record_in_bounded_memory(
    huge: dict[str, Path], tmp_path: Path, command: str, file: str, source: str, bad: int
) -> None:
    src = huge[file]
    assert src.stat().st_size < 250_000_000 and (file == "line" or src.stat().st_size < 2_000_000)
    code, err = _run(command, str(src), *MODEL, "--on-error", "skip", "--json", str(tmp_path / "x.json"), cwd=tmp_path,
                     limit_bytes=LIMIT_AS)  # fmt: skip
    assert code == EXIT_CODES["ok"], err
    data = json.loads((tmp_path / "x.json").read_text(encoding="utf-8"))
    (rec,) = data["bad_records"] if command == "assemble" else data["summary"]["errors"]
    assert rec["source"] == source and rec["code"] == "too_large"
    assert f"over the limit of {MAX_RECORD_BYTES:,} (MAX_RECORD_BYTES)" in rec["reason"]
    assert [p.name for p in tmp_path.iterdir()] == ["x.json"]


def test_a_huge_parquet_row_among_small_ones_is_bounded(tmp_path: Path) -> None:
    """Its row group's metadata cannot tell it from its neighbours, so pyarrow decodes
    it before it is refused: a bad record where memory allows, else one error naming
    the file (exit 2), never a crash."""
    n = 50_000_000
    offsets = np.concatenate([[0], np.cumsum([n] + [10] * 9)]).astype(np.int64)
    ids = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(np.zeros(int(offsets[-1]), dtype=np.int32)))
    one = pa.array([[1]] * 10, pa.large_list(pa.int32()))
    src = tmp_path / "mixed.parquet"
    pq.write_table(pa.table({"session_id": [f"s{i}" for i in range(10)], "prompt_ids": ids, "completion_ids": one}), src, compression="zstd")
    code, err = _run("assemble", src.name, *MODEL, "--on-error", "skip", "--json", "a.json", cwd=tmp_path, limit_bytes=LIMIT_AS)
    if code == EXIT_CODES["ok"]:
        (rec,) = json.loads((tmp_path / "a.json").read_text(encoding="utf-8"))["bad_records"]
        assert rec["source"] == "mixed.parquet:row 0" and rec["code"] == "too_large"
    else:
        assert code == INPUT and _error(err).startswith("tito-fast: error: mixed.parquet: cannot be read in the memory available")
    assert sorted(p.name for p in tmp_path.iterdir()) == (["a.json"] if code == 0 else []) + ["mixed.parquet"]


def test_a_huge_parquet_row_among_others_is_a_bad_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tito_fast.chains import core
    from tito_fast.score import dump

    rows = _parquet_rows()
    rows[4]["prompt_ids"] = rows[4]["prompt_ids"] * 50
    src = tmp_path / "calls.parquet"
    pq.write_table(pa.Table.from_pylist(rows), src)
    sizes = dump.row_sizes(pq.read_table(src))
    limit = int(sizes[4]) - 1
    assert int(np.delete(sizes, 4).max()) <= limit
    for module in (dump, core):
        monkeypatch.setattr(module, "MAX_RECORD_BYTES", limit)
    from tito_fast.chains.calls import iter_calls

    for bad in (assemble(src, on_error="skip").bad, [c for c in iter_calls(src) if not isinstance(c, Call)]):
        assert [(b.source, b.code) for b in bad] == [("calls.parquet:row 4", "too_large")]
    # a row group whose rows are over the limit on average by its metadata: reported unread
    monkeypatch.setattr(dump, "MAX_RECORD_BYTES", 10)
    bad = assemble(src, on_error="skip").bad
    assert [b.source for b in bad] == [f"calls.parquet:row {r}" for r in range(len(rows))]
    assert {b.code for b in bad} == {"too_large"} and bad[0].session_id == rows[0]["session_id"]


# -- non-finite logprobs never reach a chains file ----------------------------


def test_chains_jsonl_refuses_a_non_finite_logprob(tmp_path: Path) -> None:
    call = Call("s", np.array([1, 2], np.uint32), np.array([3], np.uint32), 0, np.array([-np.inf], np.float32))
    out = tmp_path / "c.jsonl"
    with pytest.raises(ValueError, match=r"session 's' chain 0: logprob -inf at id 2 is not finite"):
        write_chains(assemble([call]), out)
    assert list(tmp_path.iterdir()) == []


# -- threads: bounded by the cores, whatever threads= asks for -----------------

_THREADS = """
import os, tito_fast
from tito_fast.chains import assemble
def n(): return len(os.listdir("/proc/self/task"))
a, b = [[1, 2, 3]] * 64, [[1, 2, 4]] * 64
peak = 0
for t in range(1, 1025):
    tito_fast.common_prefix_len_batch(a, b, threads=t)
    peak = max(peak, n())
for t in (1, 3, 64, 1000, 2**40):
    assemble([{"session_id": "s", "prompt_ids": [1, 2], "completion_ids": [3]}], threads=t)
    peak = max(peak, n())
print(peak, os.cpu_count(), len(os.sched_getaffinity(0)))
"""


def test_a_thousand_thread_counts_stay_within_the_cores() -> None:
    out = subprocess.run([sys.executable, "-c", _THREADS], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    peak, _, cores = map(int, out.stdout.split())
    assert peak <= 6 * cores + 8, (peak, cores)  # 4 pools kept, each at most one thread per core (+ pools ending, Python)

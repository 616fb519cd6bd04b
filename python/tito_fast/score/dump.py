"""Rollout dumps: one session per JSONL line or Parquet row (`tito-fast score`).

Schema (JSONL: one JSON object per line; Parquet: one row per session):

- `messages` (required): the session's OpenAI-style chat messages, with
  `reasoning_content` and `tool_calls` where present. Parquet: a JSON string.
- `token_ids` (required): the session's accumulated ids (prompt+completion
  of the last turn). Parquet: `list<int32>` (any integer list type).
- `tools` (optional): tool definitions. Parquet: a JSON string or null.
- `session_id` (optional): a string or an int; defaults to the line/row number.
- `family` (optional): a string; must match the scorer's family when given.
- `metadata` (optional): anything JSON; carried into the results.

Every record, from a JSONL line, a Parquet row or a Python dict, is read by
the one reader in the Rust core (`_core.read_dump_lines` /
`_core.read_dump_row`, rust/src/record), which also serves the native
session check, the workers, Ray and `assemble`: the same input gets the
same record or the same reason whichever door it enters. Its JSON follows
Python's `json` module (a repeated key: the last wins; integers exact, never
floats; `NaN`/`Infinity` read as floats) with three bounds Python lacks or
ends a job on: nesting deeper than 256 levels, integers of more than 4,300
digits and lone surrogates (`\\ud800`) are bad records; invalid UTF-8 is
named at its byte.

A record that cannot be used is yielded as a `BadRecord` naming the file,
the line (JSONL, 1-based) or row (Parquet, 0-based) and the reason; the
caller decides whether to skip it or stop. Hostile records are bad records
too, never an exception that ends the job: a line over `MAX_RECORD_BYTES`
(read no further than that) is one, and so is a Parquet row over it, its
numbers counted at `ID_BYTES` each (`row_sizes`: a tiny file declaring
millions of ids a row is never read into Python objects). A problem with the whole file (a
missing required Parquet column, an empty dump) is one `DumpError`.

Example:
    >>> from tito_fast.score.dump import read_dump
    >>> [r.session_id for r in read_dump("examples/qwen3_dump.jsonl")][:2]  # doctest: +SKIP
    ['ex-0000', 'ex-0001']
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from tito_fast import _deps
from tito_fast._core import read_dump_lines as _core_read_lines
from tito_fast._core import ID_FIELDS, read_dump_row
from tito_fast.errors import DumpError
from tito_fast.score.outputs import Output

MAX_ID = 2**32 - 1
#: The largest record (one JSONL line) read; a longer line is a bad record, read no further.
#: 64 MiB holds about 9M ids; scoring a record costs about 20x its size in memory at peak
#: (a 58 MB record of 8M ids: 1.3 GB).
MAX_RECORD_BYTES = 64 * 2**20
#: What a number (an id, a logprob) of a Parquet row counts towards `MAX_RECORD_BYTES`
#: (about its JSON text, "151644, "): a row holds at most 8M ids, as a line does about 9M.
ID_BYTES = 8
_READ_BUFFER = 4 * 2**20


@dataclass
class Record:
    """One session of a dump."""

    source: str  # "FILE:LINE" (JSONL) or "FILE:row N" (Parquet)
    session_id: str
    messages: list[dict[str, Any]]
    token_ids: npt.NDArray[np.uint32]
    tools: list[dict[str, Any]] | None = None
    family: str | None = None
    metadata: Any = None


@dataclass(frozen=True)
class RawLine:
    """One unparsed JSONL record (for the native session check, which parses it
    in Rust; `record()` parses it as `read_dump` would)."""

    name: str
    lineno: int
    data: bytes

    @property
    def source(self) -> str:
        return f"{self.name}:{self.lineno}"

    @property
    def default_id(self) -> str:
        """The session id of a record that has none: its line number."""
        return str(self.lineno)

    def record(self) -> Record | BadRecord | None:
        """The record of this line as `read_dump` gives it (None: a blank line)."""
        return _jsonl_record(self.name, self.lineno, self.data)


@dataclass(frozen=True)
class RawRow:
    """One Parquet row not read yet (for the native session check, which reads
    it in Rust: `SessionChecker.check_rows`; `record()` reads it as
    `read_dump` would): `data` holds its columns (`batch_dicts`), `size` its
    bytes as the record bound counts them (`row_sizes`), `default_id` its
    session id when it has none."""

    source: str
    default_id: str
    data: dict[str, Any]
    size: int

    def record(self) -> Record | BadRecord:
        """The record of this row as `read_dump` gives it."""
        return record_from_row(self.source, self.default_id, self.data, json_strings=True)


@dataclass
class BadRecord:
    """A record that cannot be scored, and why: `code` is one of
    `tito_fast.errors.BAD_RECORD_CODES` (stable), `reason` says it in words."""

    source: str
    reason: str
    session_id: str | None = None
    code: str = "unscorable"

    def to_dict(self) -> dict[str, Any]:
        return {"source": self.source, "session_id": self.session_id, "code": self.code, "reason": self.reason}


def dump_format(path: str | Path) -> str:
    """"jsonl" or "parquet", from the file name, checked against the file's first bytes.

    Raises:
        DumpError: a folder, no such file, an unknown suffix, or content that
            is not what the name says (a JSONL file named .parquet).
    """
    p = Path(path)
    if p.is_dir():
        raise DumpError(f"{path}: is a folder, not a file; give a .jsonl, .jsonl.gz or .parquet file")
    name = p.name.lower()
    if name.endswith((".jsonl", ".jsonl.gz", ".ndjson", ".json")):
        fmt = "jsonl"
    elif name.endswith((".parquet", ".pq")):
        fmt = "parquet"
    else:
        raise DumpError(f"{path}: unknown dump format (name it .jsonl, .jsonl.gz or .parquet)")
    if not p.exists():
        raise DumpError(f"{path}: no such file")
    if not p.is_file():
        raise DumpError(f"{path}: not a file")
    try:
        with open(p, "rb") as f:
            head = f.read(4)
    except OSError as e:
        raise DumpError(f"{path}: cannot be read ({e.strerror})") from e
    if fmt == "parquet" and head and head != b"PAR1":
        hint = "; it looks like JSON lines: name it .jsonl" if head[:1] in b"{[ \n" else ""
        raise DumpError(f"{path}: named .parquet but not a Parquet file{hint}")
    if fmt == "jsonl" and head == b"PAR1":
        raise DumpError(f"{path}: a Parquet file named {p.suffix}; name it .parquet")
    if name.endswith(".gz") and head and head[:2] != b"\x1f\x8b":
        raise DumpError(f"{path}: named .gz but not gzip-compressed")
    return fmt


def count_records(path: str | Path) -> int:
    """Records in the dump (non-blank lines, or Parquet rows), for progress."""
    p = Path(path)
    if dump_format(p) == "parquet":
        return int(_deps.parquet().ParquetFile(p).metadata.num_rows)
    n = 0
    with _open_binary(p) as f:
        try:
            for _, content in _scan_lines(f):
                n += content
        except (EOFError, OSError, ValueError):  # a cut gzip stream: reading says so, as a bad record
            pass
    return n


def _scan_lines(f: Any) -> Iterator[tuple[int, bool]]:
    """`(bytes, holds something)` for each line of the binary file `f`, read a
    mebibyte at a time (a huge line is never held whole)."""
    length, content = 0, False
    read = getattr(f, "read1", f.read)  # gzip: what is decompressed comes before a cut stream's error
    while block := read(1 << 20):
        start = 0
        while (i := block.find(b"\n", start)) != -1:
            yield length + i + 1 - start, content or not block[start:i].isspace() and i > start
            length, content, start = 0, False, i + 1
        length += len(block) - start
        content = content or (len(block) > start and not block[start:].isspace())
    if length:
        yield length, content


def read_dump(path: str | Path, *, batch_size: int = 256) -> Iterator[Record | BadRecord]:
    """Every record of a JSONL or Parquet dump, in order (see the module doc)."""
    p = Path(path)
    if not p.exists():
        raise DumpError(f"{path}: no such file")
    if dump_format(p) == "parquet":
        yield from _read_parquet(p, batch_size)
    else:
        yield from _read_jsonl(p)


def _open_binary(p: Path) -> Any:
    if str(p).endswith(".gz"):
        import gzip

        return gzip.open(p, "rb")
    return open(p, "rb")


def _read_jsonl(p: Path, raw: bool = False) -> Iterator[Any]:
    if str(p).endswith(".gz"):
        import gzip
        import zlib

        with gzip.open(p, "rb") as f:
            try:
                yield from _lines(f, p.name, 1, MAX_RECORD_BYTES, raw=raw)
            except (EOFError, OSError, zlib.error) as e:  # a cut or corrupt stream: the records before it stand
                what = f"{type(e).__name__}: {e}"
                yield BadRecord(p.name, f"the file ends early or is corrupt ({what}); the records before it are kept", code="truncated")
        return
    yield from read_jsonl_range(p, 0, None, 1, raw=raw)


def read_dump_lines(path: str | Path) -> Iterator[RawLine | BadRecord]:
    """The non-blank lines of a JSONL dump, unparsed (a line over `MAX_RECORD_BYTES`
    is a `BadRecord`, as in `read_dump`)."""
    p = Path(path)
    if not p.exists():
        raise DumpError(f"{path}: no such file")
    yield from _read_jsonl(p, raw=True)


def read_lines(path: str | Path) -> Iterator[RawLine | BadRecord]:
    """The non-blank lines of any JSONL file (plain or .gz: dumps and capture
    files), unparsed, each at most `MAX_RECORD_BYTES` (a longer line is a
    `BadRecord`, read no further). A truncated or corrupt gzip file ends
    with a `BadRecord` (code `truncated`) after the lines before the cut."""
    yield from _read_jsonl(Path(path), raw=True)


def read_jsonl_range(
    path: str | Path, start: int, end: int | None, first_lineno: int, *, max_bytes: int | None = None, raw: bool = False
) -> Iterator[Any]:
    """The records of an uncompressed JSONL file between byte offsets `start` and
    `end` (line boundaries; None: to the end), the first on line `first_lineno`,
    read one line at a time; a line over `max_bytes` (default `MAX_RECORD_BYTES`)
    is a bad record and is skipped without being held. With `raw`, `RawLine`s
    instead of records."""
    p = Path(path)
    limit = MAX_RECORD_BYTES if max_bytes is None else max_bytes
    with open(p, "rb", buffering=_READ_BUFFER) as f:  # lines of 100s of KB come out of the buffer whole
        f.seek(start)
        yield from _lines(f, p.name, first_lineno, limit, end, raw=raw)


def _lines(f: Any, name: str, lineno: int, limit: int, end: int | None = None, raw: bool = False) -> Iterator[Any]:
    """Records (or `RawLine`s) of the lines of the binary file `f` (up to byte
    `end`), each read with at most `limit` + 1 bytes held at once."""
    pos = f.tell() if end is not None else 0
    while end is None or pos < end:
        line = f.readline(limit + 1)
        if not line:
            return
        pos += len(line)
        if len(line) > limit and not line.endswith(b"\n"):
            size = len(line)
            while chunk := f.readline(1 << 20):  # skip the rest of the line, a chunk at a time
                size += len(chunk)
                pos += len(chunk)
                if chunk.endswith(b"\n"):
                    break
            yield too_large(f"{name}:{lineno}", size, limit)
        elif raw:
            if not line.isspace():  # (no copy of the line, as strip() makes)
                yield RawLine(name, lineno, line)
        elif (rec := _jsonl_record(name, lineno, line)) is not None:
            yield rec
        lineno += 1


def too_large(source: str, size: int, limit: int | None = None, session_id: str | None = None) -> BadRecord:
    """The bad record (code `too_large`) of a record of `size` bytes over `limit`
    (default `MAX_RECORD_BYTES`): a JSONL line, or a Parquet row (`row_sizes`)."""
    limit = MAX_RECORD_BYTES if limit is None else limit
    return BadRecord(source, f"the record is {size:,} bytes, over the limit of {limit:,} (MAX_RECORD_BYTES)", session_id, "too_large")


def row_sizes(table: Any) -> npt.NDArray[np.int64]:
    """Each row's size as `MAX_RECORD_BYTES` counts it, for a pyarrow Table or
    RecordBatch (a Parquet dump or capture file): its texts' bytes plus
    `ID_BYTES` for each number, about the JSONL line that would hold it. A
    tiny Parquet file can declare millions of ids a row; this bounds a row as
    the line limit bounds a line, without a Python object per value."""
    sizes = np.zeros(table.num_rows, dtype=np.int64)
    for col in table.columns:
        chunks = getattr(col, "chunks", [col])
        if chunks:
            sizes += np.concatenate([_value_sizes(c) for c in chunks]) if len(chunks) > 1 else _value_sizes(chunks[0])
    return sizes


def _value_sizes(arr: Any) -> npt.NDArray[np.int64]:
    pa, pc = _deps.pyarrow(), _deps.pyarrow_compute()
    t = arr.type
    n = len(arr)
    if pa.types.is_null(t):
        return np.zeros(n, dtype=np.int64)
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return np.asarray(pc.fill_null(pc.binary_length(arr), 0), dtype=np.int64)
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_map(t):
        lengths = np.asarray(pc.fill_null(pc.list_value_length(arr), 0), dtype=np.int64)
        vt = t.key_type if pa.types.is_map(t) else t.value_type
        if pa.types.is_integer(vt) or pa.types.is_floating(vt) or pa.types.is_boolean(vt):
            return lengths * ID_BYTES  # ids, logprobs: no per-value work
        total = np.zeros(len(arr.values) + 1, dtype=np.int64)
        np.cumsum(_value_sizes(arr.values), out=total[1:])
        off = np.asarray(arr.offsets, dtype=np.int64)
        return np.where(lengths > 0, total[off[1:]] - total[off[:-1]], 0)
    if pa.types.is_struct(t):
        out = np.zeros(n, dtype=np.int64)
        for field in arr.flatten():
            out += _value_sizes(field)
        return out
    return np.full(n, ID_BYTES, dtype=np.int64)


def jsonl_ranges(path: str | Path, records_per_range: int) -> list[tuple[int, int, int, int]]:
    """`(start, end, first_lineno, records)` byte ranges of a JSONL file, each holding
    about `records_per_range` records, for readers in other processes."""
    out = []
    start = pos = n = 0
    first = lineno = 1
    with open(path, "rb") as f:
        for size, content in _scan_lines(f):
            pos += size
            lineno += 1
            n += content
            if n >= records_per_range:
                out.append((start, pos, first, n))
                start, first, n = pos, lineno, 0
    if pos > start:
        out.append((start, pos, first, n))
    return out


def json_error(e: json.JSONDecodeError) -> str:
    """The parser's message with where it happened, read as one phrase
    ("Unterminated string starting at column 9", "Expecting value at column 3")."""
    msg = e.msg.removesuffix(" at")
    return f"{msg} at column {e.colno}" if e.lineno == 1 else f"{msg} at line {e.lineno} column {e.colno}"


def _jsonl_record(name: str, lineno: int, raw: bytes) -> Record | BadRecord | None:
    if not raw or raw.isspace():
        return None
    return _record(f"{name}:{lineno}", str(lineno), _core_read_lines([raw])[0])


def _record(source: str, default_id: str, read: tuple[Any, ...]) -> Record | BadRecord:
    """A `Record` or `BadRecord` from the reader's tuple (`_core.read_dump_lines`)."""
    if read[0] == "bad":
        return BadRecord(source, read[1], read[2], read[3])
    _, sid, family, messages, token_ids, tools, metadata = read
    return Record(source, default_id if sid is None else sid, messages, token_ids, tools=tools, family=family, metadata=metadata)


def parquet_rows(p: Path, batch_size: int, required: tuple[str, ...] = ()) -> Iterator[RawRow | BadRecord]:
    """The rows of a Parquet file (dumps and capture files), unread
    (`RawRow`: its columns as `batch_dicts` gives them), a batch at a time;
    a row over `MAX_RECORD_BYTES` (`row_sizes`) is a `BadRecord` (code
    `too_large`), never read into Python. Raises `DumpError` for a file
    pyarrow cannot read or one without the `required` columns."""
    pq = _deps.parquet()

    try:
        pf = pq.ParquetFile(p)
    except Exception as e:  # pyarrow's own error types: not a Parquet file
        raise DumpError(f"{p}: not a readable Parquet file ({type(e).__name__}: {e})") from e
    names = set(pf.schema_arrow.names)
    missing = set(required) - names
    if missing:
        raise DumpError(f"{p}: the dump has no column(s) {sorted(missing)}; its columns are {sorted(names)}")
    row = 0
    oversized = oversized_row_groups(pf.metadata)
    for group in range(pf.metadata.num_row_groups):
        declared = _declared_size(pf.metadata.row_group(group))
        rows = pf.metadata.row_group(group).num_rows
        if group in oversized:  # its rows are over the limit on average: not decoded
            sids = pf.read_row_group(group, columns=["session_id"]).column(0) if "session_id" in names else None
            for i in range(rows):
                sid = _session_id(sids, i)
                yield too_large(f"{p.name}:row {row + i}", -(-declared // rows), session_id=sid)
            row += rows
            continue
        for batch in _batches(pf, p, group, batch_size, row):
            yield from batch_rows(batch, lambda i: f"{p.name}:row {row + i}", row)  # consumed before `row` moves on
            row += batch.num_rows


def oversized_row_groups(metadata: Any) -> list[int]:
    """The row groups of a Parquet file (its `FileMetaData`) whose rows are over
    `MAX_RECORD_BYTES` on average by what the metadata declares, before any
    value is decoded: `parquet_rows` reports their rows as bad records
    unread (a tiny file can declare 50M ids in one row)."""
    out = []
    for group in range(metadata.num_row_groups):
        g = metadata.row_group(group)
        if g.num_rows and _declared_size(g) > g.num_rows * MAX_RECORD_BYTES:
            out.append(group)
    return out


def _declared_size(group: Any) -> int:
    """What a Parquet row group's metadata says its rows hold, as `row_sizes`
    counts it (numbers at `ID_BYTES`; texts at their uncompressed bytes),
    known before any value is decoded."""
    size = 0
    for j in range(group.num_columns):
        c = group.column(j)
        size += c.num_values * ID_BYTES + (c.total_uncompressed_size if c.physical_type == "BYTE_ARRAY" else 0)
    return size


def _session_id(sids: Any, i: int) -> str | None:
    """Row `i`'s session id from a session_id column, when it is a string or an int."""
    pa = _deps.pyarrow()
    if sids is None or not (pa.types.is_string(sids.type) or pa.types.is_large_string(sids.type) or pa.types.is_integer(sids.type)):
        return None
    sid = sids[i].as_py()
    return None if sid is None else str(sid)


def _batches(pf: Any, p: Path, group: int, batch_size: int, row: int) -> Iterator[Any]:
    batches = pf.iter_batches(batch_size=batch_size, row_groups=[group])
    while True:
        try:
            batch = next(batches, None)
        except Exception as e:  # pyarrow's own error types: a corrupt page, a column too large to decode
            why = "in the memory available; a row among them may be over MAX_RECORD_BYTES " if isinstance(e, MemoryError) else ""
            raise DumpError(f"{p}: the rows from row {row} cannot be read {why}({type(e).__name__}: {e})") from e
        if batch is None:
            return
        yield batch
        row += batch.num_rows


def batch_rows(batch: Any, source: Callable[[int], str], first: int = 0) -> Iterator[RawRow | BadRecord]:
    """The rows of a pyarrow Table or RecordBatch in a dump's or capture's
    layout, unread (`RawRow`; row i's source is `source(i)`, its default
    session id `first + i`); a row over `MAX_RECORD_BYTES` is a `BadRecord`
    (code `too_large`), never read into Python.

    Example:
        >>> [r.source for r in batch_rows(table, lambda i: f"row {i}")]  # doctest: +SKIP
        ['row 0', 'row 1']
    """
    sizes = row_sizes(batch)
    big = sizes > MAX_RECORD_BYTES
    if big.any():
        sids = batch.column("session_id") if "session_id" in batch.schema.names else None
        rows = iter(batch_dicts(batch.filter(_deps.pyarrow().array(~big))))
        for i in range(batch.num_rows):
            if big[i]:
                yield too_large(source(i), int(sizes[i]), session_id=_session_id(sids, i))
            else:
                yield RawRow(source(i), str(first + i), next(rows), int(sizes[i]))
    else:
        for i, d in enumerate(batch_dicts(batch)):
            yield RawRow(source(i), str(first + i), d, int(sizes[i]))


#: The columns that hold token ids: read in place (`batch_dicts`); the one reader's id fields.
ID_COLUMNS: tuple[str, ...] = ID_FIELDS


def batch_dicts(batch: Any) -> list[dict[str, Any]]:
    """The rows of a pyarrow Table or RecordBatch as dicts of Python values,
    except the id columns (`ID_COLUMNS`) of integer lists without null ids:
    each row's ids are a numpy view of the Arrow buffer (None for a null
    list), never a Python int per id. The one reader reads either form alike.

    Example:
        >>> import pyarrow as pa  # doctest: +SKIP
        >>> batch_dicts(pa.table({"session_id": ["a"], "token_ids": [[1, 2]]}))  # doctest: +SKIP
        [{'session_id': 'a', 'token_ids': array([1, 2])}]
    """
    names = batch.schema.names
    views = {n: _id_views(batch.column(n)) for n in names if n in ID_COLUMNS}
    cols: dict[str, Any] = {n: v for n, v in views.items() if v is not None}
    plain = [n for n in names if n not in cols]
    if plain:
        cols.update(batch.select(plain).to_pydict())
    return [{n: cols[n][i] for n in names} for i in range(batch.num_rows)]


def _id_views(col: Any) -> list[Any] | None:
    """Each row's ids of an Arrow column of integer lists, as numpy views (None
    for a null row); None for a column of another type or with null ids."""
    pa = _deps.pyarrow()
    out: list[Any] = []
    for chunk in col.chunks if hasattr(col, "chunks") else [col]:
        t = chunk.type
        if not (pa.types.is_list(t) or pa.types.is_large_list(t)) or not pa.types.is_integer(t.value_type) or chunk.values.null_count:
            return None
        offsets = chunk.offsets.to_numpy().tolist()
        values = chunk.values.to_numpy()
        valid = chunk.is_valid().to_numpy(zero_copy_only=False).tolist() if chunk.null_count else None
        out.extend(values[offsets[i] : offsets[i + 1]] if valid is None or valid[i] else None for i in range(len(chunk)))
    return out


def _read_parquet(p: Path, batch_size: int) -> Iterator[Record | BadRecord]:
    for obj in parquet_rows(p, batch_size, ("messages", "token_ids")):
        yield obj if isinstance(obj, BadRecord) else obj.record()


def read_dump_raw(path: str | Path) -> Iterator[RawLine | RawRow | BadRecord]:
    """The records of a dump unread, for the native session check: a JSONL
    dump's non-blank lines (`read_dump_lines`), a Parquet dump's rows
    (`parquet_rows`).

    Example:
        >>> next(read_dump_raw("examples/qwen3_dump.jsonl")).source  # doctest: +SKIP
        'qwen3_dump.jsonl:1'
    """
    p = Path(path)
    if dump_format(p) == "parquet":
        yield from parquet_rows(p, 256, ("messages", "token_ids"))
    else:
        yield from read_dump_lines(p)


def record_from_row(source: str, default_id: str, obj: dict[str, Any], *, json_strings: bool) -> Record | BadRecord:
    """A record from one row (a Parquet row or a record given as a dict), or why
    it is bad, by the one reader's rules (`_core.read_dump_row`). `source`
    names the row for messages; `default_id` is its session id when it has
    none; with `json_strings` the messages, tools and metadata may be JSON text."""
    return _record(source, default_id, read_dump_row(obj, json_text=json_strings))


def write_jsonl(path: str | Path, rows: list[dict[str, Any]]) -> None:
    """Write records (dicts with the schema's fields) as JSONL (whole or not at all: `Output`)."""
    with Output(path) as out:
        f = out.open("w", encoding="utf-8")
        for r in rows:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")


def write_parquet(path: str | Path, rows: list[dict[str, Any]]) -> None:
    """Write records as Parquet: `token_ids` list<int32>, `messages`/`tools`/`metadata` JSON strings
    (whole or not at all: `Output`)."""
    table = to_arrow(rows)
    with Output(path) as out:
        _deps.parquet().write_table(table, out.sink())


def to_arrow(rows: list[dict[str, Any]]) -> Any:
    """Records as a pyarrow Table in the dump's Parquet layout."""
    pa = _deps.pyarrow()

    def js(x: Any) -> str | None:
        return None if x is None else json.dumps(x, ensure_ascii=False)

    return pa.table(
        {
            "session_id": pa.array([None if r.get("session_id") is None else str(r["session_id"]) for r in rows], pa.string()),
            "family": pa.array([r.get("family") for r in rows], pa.string()),
            "messages": pa.array([js(r["messages"]) for r in rows], pa.string()),
            "tools": pa.array([js(r.get("tools")) for r in rows], pa.string()),
            "token_ids": pa.array([list(r["token_ids"]) for r in rows], pa.list_(pa.int32())),
            "metadata": pa.array([js(r.get("metadata")) for r in rows], pa.string()),
        }
    )

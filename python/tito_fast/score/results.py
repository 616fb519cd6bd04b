"""Per-session results as rows, written as they are produced.

One row per record: a scored session (`ok` true) or a bad record (`ok`
false, the reason in `error`). The same columns serve `--out` files and
the Ray Data output (`tito_fast.score.ray`): `session_id`, `source`, `ok`,
`error`, `turns`, `num_ids`, `num_mismatches`, `mismatch_types`,
`first_divergence`, `path`, `encoded_segments`, `segments`, and the full
`mismatches` / `items` lists and the record's `metadata` as JSON text.

`ResultWriter` streams rows to `.jsonl` (one JSON object per line, the lists
as JSON, not strings) or `.parquet` (batches of `BATCH_ROWS` rows); memory
does not grow with the number of sessions.

Example:
    >>> import tempfile, os
    >>> from tito_fast.score.dump import BadRecord
    >>> path = os.path.join(tempfile.mkdtemp(), "out.jsonl")
    >>> with ResultWriter(path) as w:
    ...     w.write(BadRecord("d.jsonl:3", "missing field 'token_ids'", "s3"))
    >>> read_results(path)[0].reason
    "missing field 'token_ids'"
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from tito_fast import _deps
from tito_fast.compare.alignment import Mismatch
from tito_fast.errors import OutputPathError
from tito_fast.score.dump import BadRecord
from tito_fast.score.outputs import Output
from tito_fast.score.scorer import ScoredItem, SessionResult

#: Rows per Parquet row group.
BATCH_ROWS = 2048
#: The suffixes `ResultWriter` writes.
SUFFIXES = (".jsonl", ".parquet")


def schema() -> Any:
    """The rows' Arrow schema."""
    pa = _deps.pyarrow()

    return pa.schema(
        [
            ("session_id", pa.string()),
            ("source", pa.string()),
            ("ok", pa.bool_()),
            ("error", pa.string()),
            ("turns", pa.int32()),
            ("num_ids", pa.int64()),
            ("num_mismatches", pa.int32()),
            ("mismatch_types", pa.list_(pa.string())),
            ("first_divergence", pa.int64()),
            ("path", pa.string()),
            ("encoded_segments", pa.int32()),
            ("segments", pa.int32()),
            ("mismatches", pa.string()),
            ("items", pa.string()),
            ("metadata", pa.string()),
        ]
    )


COLUMNS = (
    "session_id", "source", "ok", "error", "turns", "num_ids", "num_mismatches", "mismatch_types",
    "first_divergence", "path", "encoded_segments", "segments", "mismatches", "items", "metadata",
)  # fmt: skip


def row(res: SessionResult | BadRecord, *, json_text: bool = True) -> dict[str, Any]:
    """One result as a row; with `json_text` the lists and metadata are JSON strings (Arrow), else values (JSONL)."""
    if isinstance(res, BadRecord):
        out: dict[str, Any] = dict.fromkeys(COLUMNS)
        out.update(session_id=res.session_id, source=res.source, ok=False, error=res.reason, mismatch_types=[])
        return out

    def enc(value: Any) -> Any:
        return json.dumps(value, ensure_ascii=False) if json_text and value is not None else value

    return {
        "session_id": res.session_id,
        "source": res.source,
        "ok": True,
        "error": None,
        "turns": res.turns,
        "num_ids": res.num_ids,
        "num_mismatches": len(res.mismatches),
        "mismatch_types": sorted({m.type.value for m in res.mismatches}),
        "first_divergence": res.first_divergence,
        "path": res.path,
        "encoded_segments": res.encoded_segments,
        "segments": res.segments,
        "mismatches": enc([m.to_dict() for m in res.mismatches]),
        "items": enc([i.to_dict() for i in res.items]),
        "metadata": enc(res.metadata),
    }


def from_row(r: dict[str, Any]) -> SessionResult | BadRecord:
    """The inverse of `row` (either form)."""
    if not r["ok"]:
        return BadRecord(r["source"], r["error"], r["session_id"])

    def dec(value: Any) -> Any:
        return json.loads(value) if isinstance(value, str) else value

    return SessionResult(
        session_id=r["session_id"],
        source=r["source"],
        turns=r["turns"],
        num_ids=r["num_ids"],
        mismatches=[Mismatch.from_dict(m) for m in dec(r["mismatches"])],
        items=[ScoredItem.from_dict(i) for i in dec(r["items"])],
        first_divergence=r["first_divergence"],
        path=r["path"],
        encoded_segments=r["encoded_segments"] or 0,
        segments=r["segments"] or 0,
        metadata=dec(r["metadata"]),
    )


def read_results(path: str | Path) -> list[SessionResult | BadRecord]:
    """Every row of a `ResultWriter` file, as results."""
    p = Path(path)
    if p.suffix == ".parquet":
        return [from_row(r) for r in _deps.parquet().read_table(p).to_pylist()]
    with open(p, encoding="utf-8") as f:
        return [from_row(json.loads(line)) for line in f if line.strip()]


#: The Parquet key-value metadata of a file whose run stopped early (a JSONL
#: file has only whole rows; the run's JSON and reports say it stopped).
INCOMPLETE_METADATA = {"tito_fast.complete": "false"}


class ResultWriter:
    """Writes results to `path` (.jsonl or .parquet) as they come, into a
    temporary file moved into place on `close()` (`tito_fast.score.outputs`:
    no half file under the final name, a device or FIFO written in place)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if self.path.suffix not in SUFFIXES:
            raise OutputPathError(f"--out {path}: name it .jsonl or .parquet")
        self.rows = 0
        self._pending: list[dict[str, Any]] = []
        self._text: IO[str] | None = None
        self._parquet: Any = None
        self._out = Output(self.path, "--out")
        try:
            if self.path.suffix == ".jsonl":
                self._text = self._out.open("w", encoding="utf-8")
            else:
                self._parquet = _deps.parquet().ParquetWriter(self._out.sink(), schema())
        except BaseException:
            self._out.discard()
            raise

    def write(self, res: SessionResult | BadRecord) -> None:
        self.rows += 1
        if self._text is not None:
            self._text.write(json.dumps(row(res, json_text=False), ensure_ascii=False, allow_nan=False) + "\n")
            return
        self._pending.append(row(res))
        if len(self._pending) >= BATCH_ROWS:
            self._flush()

    def _flush(self) -> None:
        pa = _deps.pyarrow()

        if self._pending:
            self._parquet.write_table(pa.Table.from_pylist(self._pending, schema=schema()))
            self._pending = []

    def close(self, *, keep: bool = True, complete: bool = True) -> None:
        """Finish the file and move it into place (`keep=False`: delete it;
        `complete=False`: a Parquet file carries `INCOMPLETE_METADATA`)."""
        try:
            if self._text is not None:
                self._text.close()
                self._text = None
            if self._parquet is not None:
                self._flush()
                if not complete and hasattr(self._parquet, "add_key_value_metadata"):  # not in older pyarrow
                    self._parquet.add_key_value_metadata(INCOMPLETE_METADATA)
                self._parquet.close()
                self._parquet = None
        except BaseException:
            self._out.discard()
            raise
        if keep:
            self._out.commit()
        else:
            self._out.discard()

    def __enter__(self) -> ResultWriter:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        self.close(keep=et is None or issubclass(et, KeyboardInterrupt), complete=et is None)


class JsonResults:
    """`{"sessions": [...], "summary": ..., "seconds": ...}` (`tito-fast score
    --json`) written as the results come: into a temporary file moved into
    place by `finish` (an `Output`), or to stdout for "-"."""

    def __init__(self, path: str) -> None:
        self.out = None if path == "-" else Output(path, "--json")
        self.path = path
        self.f: IO[str] = sys.stdout if self.out is None else self.out.open("w", encoding="utf-8")
        self.sessions = 0
        self.f.write('{"sessions": [\n')

    def write(self, result: SessionResult) -> None:
        self.f.write((",\n" if self.sessions else "") + json.dumps(result.to_dict(), ensure_ascii=False, allow_nan=False))
        self.sessions += 1

    def finish(self, tail: dict[str, Any]) -> None:
        """Close the list with `tail`'s members (the summary) and move the file into place."""
        self.f.write("\n],\n" + json.dumps(tail, indent=2, ensure_ascii=False, allow_nan=False)[1:] + "\n")
        self.close(keep=True)

    def close(self, *, keep: bool = False) -> None:
        """Move the file into place (`keep`), or remove it: no half JSON file under the final name."""
        if self.out is None:
            return
        if keep:
            self.out.commit()
        else:
            self.out.discard()


__all__ = [
    "BATCH_ROWS", "COLUMNS", "INCOMPLETE_METADATA", "JsonResults", "ResultWriter", "SUFFIXES", "from_row", "read_results", "row", "schema",
]  # fmt: skip

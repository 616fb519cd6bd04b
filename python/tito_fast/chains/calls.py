"""Captured LLM calls: one record per call, as the engine saw it.

A record (a JSONL line, a Parquet row, or a dict / `Call`) holds:

- `session_id` (required) and `call_index` (order within the session;
  default: the order of the records);
- `prompt_ids` (required, non-empty) and `completion_ids` (required, may be
  empty): the ids the engine was given and sampled;
- `completion_logprobs` (optional): one float per completion id;
- `finish_reason`, `messages`, `tools`, `response`, `metadata` (optional):
  the request, the parsed reply and anything else, kept as given.

A record that breaks these rules is a `BadCall` naming its file and line
(or row) and what is wrong; `read_calls(..., on_error="fail")` raises
`CallsError` for the first one instead.

Example:
    >>> call = Call.from_dict({"session_id": "s", "prompt_ids": [1, 2], "completion_ids": [3]})
    >>> call.prompt_ids.tolist(), call.completion_logprobs
    ([1, 2], None)
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np

from tito_fast import _deps
from tito_fast.errors import DumpError
from tito_fast.score.dump import BadRecord, ids_array

MAX_ID = 2**32 - 1
OnError = Literal["fail", "skip"]


class CallsError(DumpError):
    """A capture file or record that cannot be read (the message names the file, line and field)."""


@dataclass
class Call:
    """One captured LLM call."""

    session_id: str
    prompt_ids: np.ndarray  # uint32
    completion_ids: np.ndarray  # uint32
    call_index: int | None = None
    completion_logprobs: np.ndarray | None = None  # float32, one per completion id
    finish_reason: str | None = None
    messages: list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    response: Any = None
    metadata: Any = None
    source: str = ""

    @classmethod
    def from_dict(cls, row: dict[str, Any], source: str = "") -> Call:
        """A call from a record (raises `CallsError` naming the field)."""
        return _call(row, source)


#: A record that cannot be assembled, and why (`source`, `reason`, `session_id`): the score job's bad record.
BadCall = BadRecord


def _ids(value: Any, name: str, *, empty_ok: bool) -> np.ndarray:
    if isinstance(value, np.ndarray):
        if value.ndim != 1 or value.dtype.kind not in "iu":
            raise CallsError(f"{name!r} must be a 1-D array of ints, got {value.dtype} with {value.ndim} dimensions")
        if len(value) and (int(value.min()) < 0 or int(value.max()) > MAX_ID):
            at = int(np.argmax((value < 0) | (value > MAX_ID)))
            raise CallsError(f"{name}[{at}] = {int(value[at])} is not an id (0 .. 2**32-1)")
        arr = value.astype(np.uint32, copy=False)
    else:  # a list: checked as the score job checks token_ids
        checked = ids_array(value, name, empty_ok=empty_ok)
        if isinstance(checked, str):
            raise CallsError(checked)
        arr = checked
    if not empty_ok and not len(arr):
        raise CallsError(f"{name!r} is empty")
    return arr


def _logprobs(value: Any, n: int) -> np.ndarray | None:
    if value is None:
        return None
    if not isinstance(value, (list, tuple, np.ndarray)):
        raise CallsError(f"'completion_logprobs' must be a list of floats, got {type(value).__name__}")
    if len(value) != n:
        raise CallsError(f"'completion_logprobs' has {len(value)} values for {n} completion ids")
    out = np.empty(n, dtype=np.float32)
    for k, v in enumerate(value):
        if v is None:
            out[k] = math.nan
        elif type(v) in (int, float) or isinstance(v, (np.floating, np.integer)):
            out[k] = v
        else:
            raise CallsError(f"completion_logprobs[{k}] is not a number: {v!r}")
    return out


def parse_messages(value: Any) -> list[dict[str, Any]] | None:
    """A record's `messages`: a list of objects, or its JSON text (a Parquet
    text column); None stays None. Raises `CallsError` for anything else."""
    if isinstance(value, (str, bytes)):
        try:
            value = json.loads(value)
        except ValueError as e:
            raise CallsError(f"'messages' is not valid JSON: {e}") from e
    if value is not None and not (isinstance(value, list) and all(isinstance(m, dict) for m in value)):
        raise CallsError("'messages' must be a list of objects")
    return value


def _call(row: dict[str, Any], source: str) -> Call:
    if not isinstance(row, dict):
        raise CallsError(f"a call must be an object, got {type(row).__name__}")
    sid = row.get("session_id")
    if sid is None:
        raise CallsError("missing field 'session_id'")
    if not isinstance(sid, (str, int)) or isinstance(sid, bool):
        raise CallsError(f"'session_id' must be a string, got {type(sid).__name__}")
    idx = row.get("call_index")
    if idx is not None and (type(idx) is not int or idx < 0):
        raise CallsError(f"'call_index' must be a non-negative int, got {idx!r}")
    for key in ("prompt_ids", "completion_ids"):
        if row.get(key) is None:
            raise CallsError(f"missing field {key!r}")
    prompt = _ids(row["prompt_ids"], "prompt_ids", empty_ok=False)
    completion = _ids(row["completion_ids"], "completion_ids", empty_ok=True)
    messages, tools = parse_messages(row.get("messages")), row.get("tools")
    if isinstance(tools, (str, bytes)):
        tools = json.loads(tools)
    if tools is not None and not isinstance(tools, list):
        raise CallsError(f"'tools' must be a list or null, got {type(tools).__name__}")
    finish = row.get("finish_reason")
    return Call(
        session_id=str(sid),
        prompt_ids=prompt,
        completion_ids=completion,
        call_index=idx,
        completion_logprobs=_logprobs(row.get("completion_logprobs"), len(completion)),
        finish_reason=None if finish is None else str(finish),
        messages=messages,
        tools=tools,
        response=row.get("response"),
        metadata=row.get("metadata"),
        source=source,
    )


def parse_call(row: dict[str, Any], source: str) -> Call | BadCall:
    """A call, or why the record is bad."""
    try:
        return _call(row, source)
    except CallsError as e:
        sid = row.get("session_id") if isinstance(row, dict) else None
        return BadCall(source, str(e), None if sid is None else str(sid))
    except (ValueError, TypeError, RecursionError) as e:
        sid = row.get("session_id") if isinstance(row, dict) else None
        return BadCall(source, f"unreadable record: {type(e).__name__}: {e}", None if sid is None else str(sid))


def iter_calls(path: str | Path) -> Iterator[Call | BadCall]:
    """The calls of a JSONL (optionally .gz) or Parquet capture file, in file order."""
    p = Path(path)
    if not p.is_file():
        raise CallsError(f"{path}: no such file")
    name = p.name
    if name.endswith(".parquet"):
        pq = _deps.parquet()

        try:
            pf = pq.ParquetFile(p)
        except Exception as e:  # pyarrow's own error types
            raise CallsError(f"{path}: not a readable Parquet file ({type(e).__name__}: {e})") from e
        row = 0
        for batch in pf.iter_batches(batch_size=1024):
            cols = batch.to_pydict()
            for i in range(batch.num_rows):
                yield parse_call({k: v[i] for k, v in cols.items()}, f"{name}:row {row}")
                row += 1
        return
    if not (name.endswith(".jsonl") or name.endswith(".jsonl.gz") or name.endswith(".json")):
        raise CallsError(f"{path}: a capture file is .jsonl, .jsonl.gz or .parquet")
    if name.endswith(".gz"):
        import gzip

        f: Any = gzip.open(p, "rb")
    else:
        f = open(p, "rb", buffering=4 * 2**20)  # noqa: SIM115 (closed below)
    with f:
        for lineno, line in enumerate(f, 1):
            if line.isspace() or not line:
                continue
            source = f"{name}:{lineno}"
            try:
                obj = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                yield BadCall(source, f"invalid JSON: {e}")
                continue
            yield parse_call(obj, source)


def read_calls(
    calls: str | Path | Iterable[Call | dict[str, Any]], *, on_error: OnError = "fail"
) -> tuple[list[Call], list[BadCall]]:
    """Calls from a capture file or from Python objects (dicts or `Call`s), and the bad records.

    Raises:
        CallsError: with `on_error="fail"`, the first bad record (file, line, why).
    """
    if on_error not in ("fail", "skip"):
        raise ValueError(f"on_error must be 'fail' or 'skip', got {on_error!r}")
    if isinstance(calls, (str, Path)):
        items: Iterable[Call | BadCall] = iter_calls(calls)
    else:
        calls = calls if isinstance(calls, list) else list(calls)
        if all(type(c) is Call for c in calls):  # noqa: E721 (exactly Call objects: nothing to parse)
            return cast("list[Call]", calls), []
        items = (c if isinstance(c, Call) else parse_call(c, f"calls[{i}]") for i, c in enumerate(calls))
    good: list[Call] = []
    bad: list[BadCall] = []
    for c in items:
        if isinstance(c, BadCall):
            if on_error == "fail":
                raise CallsError(f"{c.source}: {c.reason}")
            bad.append(c)
        else:
            good.append(c)
    return good, bad


@dataclass
class Sessions:
    """Calls grouped by session, each session in call order."""

    ids: list[str] = field(default_factory=list)
    calls: list[list[Call]] = field(default_factory=list)


def call_order(code: np.ndarray, index: np.ndarray, given: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The records in session and call order: `code` is each record's session
    (numbered by first appearance), `index` its call_index where `given`; a
    record without one takes its place among its session's records. Returns
    (order of the records, which of them in that order repeat an earlier
    index, the indexes used)."""
    n = len(code)
    if given.all():
        same = code[1:] == code[:-1]
        if (code[1:] >= code[:-1]).all() and (index[1:][same] > index[:-1][same]).all():
            return np.arange(n), np.zeros(n, dtype=bool), index  # already in order (as captures are written)
    else:
        by_session = np.argsort(code, kind="stable")
        first = np.searchsorted(code[by_session], code[by_session], side="left")
        place = np.empty(n, dtype=np.int64)
        place[by_session] = np.arange(n) - first
        index = np.where(given, index, place)
    order = np.lexsort((np.arange(n), index, code))
    c_sorted, i_sorted = code[order], index[order]
    repeat = np.zeros(n, dtype=bool)
    repeat[1:] = (c_sorted[1:] == c_sorted[:-1]) & (i_sorted[1:] == i_sorted[:-1])
    return order, repeat & given[order], index


def group_sessions(calls: list[Call]) -> tuple[Sessions, list[BadCall]]:
    """Calls by session in order of first appearance, sorted by `call_index`
    (a record without one takes its place among the session's records); a
    repeated index is a bad record."""
    n = len(calls)
    out = Sessions()
    if not n:
        return out, []
    sids = list(map(attrgetter("session_id"), calls))
    codes = {sid: k for k, sid in enumerate(dict.fromkeys(sids))}  # numbered by first appearance
    code = np.fromiter(map(codes.__getitem__, sids), dtype=np.int64, count=n)
    given_index = list(map(attrgetter("call_index"), calls))
    if None in given_index:
        given = np.fromiter((i is not None for i in given_index), dtype=bool, count=n)
        index = np.fromiter((-1 if i is None else i for i in given_index), dtype=np.int64, count=n)
    else:
        given, index = np.ones(n, dtype=bool), np.asarray(given_index, dtype=np.int64)
    order, bad_at, index = call_order(code, index, given)
    ids = list(codes)
    bad = [
        BadCall(calls[k].source, f"call_index {int(index[k])} repeats an earlier call of session {calls[k].session_id!r}", calls[k].session_id)
        for k in order[bad_at].tolist()
    ]
    keep = order[~bad_at]
    bounds = np.searchsorted(code[keep], np.arange(len(ids) + 1), side="left").tolist()
    kept = calls if len(keep) == n and bool((keep[1:] > keep[:-1]).all()) else [calls[k] for k in keep.tolist()]
    out.ids = ids
    out.calls = [kept[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    return out, bad

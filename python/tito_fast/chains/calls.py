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

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import Any, Literal, cast

import numpy as np

from tito_fast._core import read_call_lines, read_call_row
from tito_fast.errors import DumpError
from tito_fast.score.dump import BadRecord, dump_format, parquet_rows, read_lines

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


def _call_of(read: tuple[Any, ...], source: str) -> Call | BadCall:
    """A `Call` or `BadCall` from the one reader's tuple (`_core.read_call_lines`)."""
    if read[0] == "bad":
        return BadCall(source, read[1], read[2], read[3])
    _, sid, idx, prompt, completion, logprobs, finish, messages, tools, response, metadata = read
    return Call(sid, prompt, completion, idx, logprobs, finish, messages, tools, response, metadata, source)


def _call(row: dict[str, Any], source: str) -> Call:
    c = parse_call(row, source)
    if isinstance(c, BadCall):
        raise CallsError(c.reason)
    return c


def parse_messages(value: Any) -> list[dict[str, Any]] | None:
    """A record's `messages`: a list of objects, or its JSON text (a Parquet
    text column); None stays None. Raises `CallsError` for anything else
    (the one reader's rules)."""
    read = read_call_row({"session_id": "", "prompt_ids": [0], "completion_ids": [], "messages": value}, json_text=True)
    if read[0] == "bad":
        raise CallsError(read[1])
    return cast("list[dict[str, Any]] | None", read[7])  # type: ignore[misc]


def parse_tools(value: Any) -> list[dict[str, Any]] | None:
    """A record's `tools`: a list, or its JSON text; None stays None. Raises
    `CallsError` for anything else (the one reader's rules)."""
    read = read_call_row({"session_id": "", "prompt_ids": [0], "completion_ids": [], "tools": value}, json_text=True)
    if read[0] == "bad":
        raise CallsError(read[1])
    return cast("list[dict[str, Any]] | None", read[8])  # type: ignore[misc]


def parse_call(row: Any, source: str, *, json_text: bool = False) -> Call | BadCall:
    """A call from a record (a dict; id lists may be numpy arrays, read in
    place), or why it is bad, by the one reader's rules (`_core.read_call_row`)."""
    return _call_of(read_call_row(row, json_text=json_text), source)


_LINES_PER_READ = 256


def iter_calls(path: str | Path) -> Iterator[Call | BadCall]:
    """The calls of a JSONL (optionally .gz) or Parquet capture file, in file order.
    A line or row over `MAX_RECORD_BYTES` is a bad record, read no further; a
    truncated gzip file ends with one bad record naming where."""
    p = Path(path)
    try:
        fmt = dump_format(p)  # the dump's rule for names and contents, one owner
        if fmt == "parquet":
            for obj in parquet_rows(p, 1024):  # a row over MAX_RECORD_BYTES: a BadRecord
                yield obj if isinstance(obj, BadRecord) else parse_call(obj.data, obj.source, json_text=True)
            return
    except CallsError:
        raise
    except DumpError as e:
        raise CallsError(str(e)) from None
    pending: list[tuple[str, bytes]] = []

    def flush() -> Iterator[Call | BadCall]:
        for (source, _), read in zip(pending, read_call_lines([line for _, line in pending])):
            yield _call_of(read, source)
        pending.clear()

    for item in read_lines(p):
        if isinstance(item, BadRecord):
            yield from flush()
            yield item
            continue
        pending.append((item.source, item.data))
        if len(pending) >= _LINES_PER_READ:
            yield from flush()
    yield from flush()


def read_calls(
    calls: str | Path | Iterable[Call | BadCall | dict[str, Any]], *, on_error: OnError = "fail"
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
        items = (c if isinstance(c, (Call, BadRecord)) else parse_call(c, f"calls[{i}]") for i, c in enumerate(calls))
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
        BadCall(calls[k].source, f"call_index {int(index[k])} repeats an earlier call of session {calls[k].session_id!r}", calls[k].session_id, "repeated_call")
        for k in order[bad_at].tolist()
    ]
    keep = order[~bad_at]
    bounds = np.searchsorted(code[keep], np.arange(len(ids) + 1), side="left").tolist()
    kept = calls if len(keep) == n and bool((keep[1:] > keep[:-1]).all()) else [calls[k] for k in keep.tolist()]
    out.ids = ids
    out.calls = [kept[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    return out, bad

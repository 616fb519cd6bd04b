"""The `tito-fast score` job: read a dump, score every session (in N processes), summarise.

Example:
    >>> run = run_score("examples/qwen3_dump.jsonl", "fixture:qwen3", "qwen3")  # doctest: +SKIP
    >>> run.summary.metrics["tito_session_mismatch_rate/v1"]  # doctest: +SKIP
    0.4
"""

from __future__ import annotations

import collections
import itertools
import multiprocessing
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tito_fast.dump import BadRecord, Record, count_records, read_dump
from tito_fast.score import Mode, Scorer, ScoreError, SessionResult, Summary, summarize

OnError = Literal["fail", "skip"]


class RecordFailure(ValueError):
    """`--on-error=fail` met a bad record: names its file, line/row and reason."""

    def __init__(self, bad: BadRecord) -> None:
        super().__init__(f"{bad.source}: {bad.reason}")
        self.bad = bad


@dataclass
class ScoreRun:
    """The outcome of a scoring job; `summary.complete` is False when it stopped early."""

    results: list[SessionResult]
    bad: list[BadRecord]
    summary: Summary
    stopped_at: str | None = None


def load_tokenizer(spec: str) -> Any:
    """A tokenizer from a directory, or `fixture:NAME` for a pinned test fixture."""
    if spec.startswith("fixture:"):
        from tito_fast import fixtures

        return fixtures.load_tokenizer(spec.split(":", 1)[1])
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(spec)


def build_scorer(tokenizer: str, family: Any, template: str | None = None, mode: Mode = "fast") -> Scorer:
    """A `Scorer` from a tokenizer spec (directory or fixture:NAME), family and optional template text."""
    return Scorer(load_tokenizer(tokenizer), family, chat_template=template, mode=mode)


def score_one(scorer: Scorer, rec: Record | BadRecord) -> SessionResult | BadRecord:
    """A result, or the record's problem as a `BadRecord` (never raises for bad data)."""
    if isinstance(rec, BadRecord):
        return rec
    try:
        return scorer.score(rec)
    except ScoreError as e:
        return BadRecord(rec.source, str(e), rec.session_id)


_WORKER: Scorer | None = None


def _init_worker(tokenizer: str, family: Any, template: str | None, mode: Mode) -> None:
    global _WORKER
    _WORKER = build_scorer(tokenizer, family, template, mode)


def _score_chunk(chunk: list[Record | BadRecord]) -> list[SessionResult | BadRecord]:
    assert _WORKER is not None
    return [score_one(_WORKER, r) for r in chunk]


def _chunks(it: Iterator[Any], size: int) -> Iterator[list[Any]]:
    while chunk := list(itertools.islice(it, size)):
        yield chunk


def _bounded_map(pool: ProcessPoolExecutor, chunks: Iterator[list[Any]], ahead: int) -> Iterator[Any]:
    """`pool.map` in order, with at most `ahead` chunks in flight (a dump is never read whole)."""
    pending: collections.deque[Any] = collections.deque()
    for chunk in chunks:
        pending.append(pool.submit(_score_chunk, chunk))
        if len(pending) >= ahead:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


def run_score(
    dump: str | Path,
    tokenizer: str,
    family: Any,
    *,
    template: str | None = None,
    mode: Mode = "fast",
    workers: int = 1,
    on_error: OnError = "fail",
    metric_version: str = "v1",
    progress: Callable[[int, int], None] | None = None,
    scorer: Scorer | None = None,
) -> ScoreRun:
    """Score every session of `dump` (JSONL or Parquet).

    Args:
        tokenizer: a tokenizer directory, or `fixture:NAME`.
        family: a family name, or a `FamilyConfig` dict.
        template: a chat template text replacing the tokenizer's.
        mode: "fast" (no re-encode of equal segments) or "full".
        workers: processes; 1 scores in this process.
        on_error: "fail" stops at the first bad record (the run is then
            marked incomplete, `stopped_at` names the record); "skip" counts
            and lists bad records and goes on.
        progress: called with (done, total) after each chunk.
        scorer: a ready `Scorer` for the in-process path.
    """
    if on_error not in ("fail", "skip"):
        raise ValueError(f"on_error must be 'fail' or 'skip', got {on_error!r}")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    total = count_records(dump)
    records = read_dump(dump)
    results: list[SessionResult] = []
    bad: list[BadRecord] = []
    stopped_at: str | None = None
    done = 0
    chunk_size = 8
    pool: ProcessPoolExecutor | None = None
    if workers == 1:
        local = scorer if scorer is not None else build_scorer(tokenizer, family, template, mode)
        info = local
        outputs: Iterator[list[SessionResult | BadRecord]] = ([score_one(local, r) for r in c] for c in _chunks(records, chunk_size))
    else:
        info = scorer if scorer is not None else build_scorer(tokenizer, family, template, mode)
        pool = ProcessPoolExecutor(
            max_workers=workers,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_init_worker,
            initargs=(tokenizer, family, template, mode),
        )
        outputs = _bounded_map(pool, _chunks(records, chunk_size), 4 * workers)
    try:
        for chunk_out in outputs:
            for out in chunk_out:
                done += 1
                if isinstance(out, BadRecord):
                    bad.append(out)
                    if on_error == "fail":
                        stopped_at = out.source
                        break
                else:
                    results.append(out)
            if progress is not None:
                progress(done, total)
            if stopped_at is not None:
                break
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    fast = "on" if info.fast_path else f"off ({'mode full' if mode == 'full' else info.splitter.reason})"
    summary = summarize(
        results,
        bad,
        family=info.family,
        mode=mode,
        fast_path=fast,
        metric_version=metric_version,
        complete=stopped_at is None,
    )
    return ScoreRun(results, bad, summary, stopped_at)

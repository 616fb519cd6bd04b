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
import os
import pickle
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tito_fast.errors import ScoreError
from tito_fast.score.dump import (
    BadRecord,
    Record,
    count_records,
    dump_format,
    jsonl_ranges,
    read_dump,
    read_jsonl_range,
)
from tito_fast.score.scorer import Mode, Scorer, SessionResult
from tito_fast.score.summary import Summary, summarize
from tito_fast.testing import fixtures

OnError = Literal["fail", "skip"]


@dataclass
class ScoreRun:
    """The outcome of a scoring job; `summary.complete` is False when it stopped early."""

    results: list[SessionResult]
    bad: list[BadRecord]
    summary: Summary
    stopped_at: str | None = None
    setup_seconds: float = 0.0  # loading the tokenizer, building the byte table (and starting workers)


def load_tokenizer(spec: str) -> Any:
    """A tokenizer from a directory, or `fixture:NAME` for a pinned test fixture."""
    if spec.startswith("fixture:"):
        return fixtures.load_tokenizer(spec.split(":", 1)[1])
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(spec)


def build_scorer(
    tokenizer: str, family: Any, template: str | None = None, mode: Mode = "fast", encoder_path: str | None = None
) -> Scorer:
    """A `Scorer` from a tokenizer spec (directory or fixture:NAME), family, optional template text
    and optional DeepSeek encoder file."""
    return Scorer(load_tokenizer(tokenizer), family, chat_template=template, mode=mode, encoder_path=encoder_path)


def score_one(scorer: Scorer, rec: Record | BadRecord) -> SessionResult | BadRecord:
    """A result, or the record's problem as a `BadRecord` (never raises for bad data)."""
    if isinstance(rec, BadRecord):
        return rec
    try:
        return scorer.score(rec)
    except ScoreError as e:
        return BadRecord(rec.source, str(e), rec.session_id)


_WORKER: Scorer | None = None
# Linux: fork the workers from a parent that holds a ready scorer; elsewhere
# spawn them and build one each (macOS and Windows do not fork safely).
_FORK = sys.platform == "linux" and "fork" in multiprocessing.get_all_start_methods()


def _init_worker(tokenizer: str | bytes, family: Any, template: str | None, mode: Mode, encoder_path: str | None) -> None:
    """Build this process's scorer: from a tokenizer spec, or from a pickled
    `(tokenizer, vocab)` of a scorer the caller built (no byte-table rebuild)."""
    global _WORKER
    if isinstance(tokenizer, bytes):
        tok, vocab = pickle.loads(tokenizer)
        if vocab is not None:
            vocab.remember(tok)
        _WORKER = Scorer(tok, family, chat_template=template, mode=mode, encoder_path=encoder_path)
    else:
        _WORKER = build_scorer(tokenizer, family, template, mode, encoder_path)


@dataclass(frozen=True)
class ScorerFacts:
    """What a run reports about its scorer (the same in every worker)."""

    family: str
    fast_path: bool
    fast_path_reason: str | None
    text_encoder: str
    template: str

    @classmethod
    def of(cls, scorer: Scorer) -> ScorerFacts:
        return cls(scorer.family, scorer.fast_path, scorer.splitter.reason, scorer.text_encoder, scorer.tito.template_source)


def _describe_worker() -> ScorerFacts:
    assert _WORKER is not None
    return ScorerFacts.of(_WORKER)


def _score_task(task: tuple[Any, ...]) -> list[SessionResult | BadRecord]:
    """Score a byte range of a JSONL file (read here, not in the parent) or a list of records."""
    assert _WORKER is not None
    records = read_jsonl_range(*task[1:]) if task[0] == "range" else task[1]
    return [score_one(_WORKER, r) for r in records]


def _chunks(it: Iterator[Any], size: int) -> Iterator[list[Any]]:
    while chunk := list(itertools.islice(it, size)):
        yield chunk


def _bounded_map(pool: ProcessPoolExecutor, chunks: Iterator[tuple[Any, ...]], ahead: int) -> Iterator[Any]:
    """`pool.map` in order, with at most `ahead` chunks in flight (a dump is never read whole)."""
    pending: collections.deque[Any] = collections.deque()
    for chunk in chunks:
        pending.append(pool.submit(_score_task, chunk))
        if len(pending) >= ahead:
            yield pending.popleft().result()
    while pending:
        yield pending.popleft().result()


@dataclass
class _Plan:
    """Where a run's chunks of results come from, and how to stop their producers."""

    total: int
    outputs: Iterator[list[SessionResult | BadRecord]]
    facts: ScorerFacts
    close: Callable[[], None] = lambda: None


_CHUNK = 8  # records per task


def _local_plan(dump: str | Path, scorer: Scorer) -> _Plan:
    """Score in this process."""
    outputs = ([score_one(scorer, r) for r in c] for c in _chunks(read_dump(dump), _CHUNK))
    return _Plan(count_records(dump), outputs, ScorerFacts.of(scorer))


def _tasks(dump: str | Path) -> tuple[int, Iterator[tuple[Any, ...]]]:
    """(records, tasks): byte ranges of a JSONL file (the workers read their own
    lines), else chunks of records read here."""
    path = Path(dump)
    if dump_format(path) == "jsonl" and not path.name.endswith(".gz"):
        ranges = jsonl_ranges(path, _CHUNK)
        return sum(r[3] for r in ranges), (("range", str(path), a, b, first) for a, b, first, _ in ranges)
    return count_records(dump), (("records", c) for c in _chunks(read_dump(dump), _CHUNK))


def _forked_plan(dump: str | Path, scorer: Scorer, workers: int) -> _Plan:
    """Workers forked from this process, inheriting its scorer: no tokenizer load
    and no byte-table build per worker. Only this thread runs while they fork."""
    global _WORKER
    total, tasks = _tasks(dump)
    _WORKER = scorer
    restore_env = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # the Rust tokenizer's threads do not survive a fork
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork"))

    def close() -> None:
        global _WORKER
        pool.shutdown(wait=True, cancel_futures=True)
        _WORKER = None
        if restore_env is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = restore_env

    return _Plan(total, _bounded_map(pool, tasks, 4 * workers), ScorerFacts.of(scorer), close)


def _spawned_plan(dump: str | Path, init: tuple[Any, ...], workers: int) -> _Plan:
    """Workers spawned afresh (where forking is not safe); each builds its scorer from `init`."""
    total, tasks = _tasks(dump)
    pool = ProcessPoolExecutor(
        max_workers=workers, mp_context=multiprocessing.get_context("spawn"), initializer=_init_worker, initargs=init
    )
    try:
        facts = pool.submit(_describe_worker).result()
    except BrokenProcessPool as e:
        pool.shutdown(cancel_futures=True)
        raise RuntimeError("a scoring worker failed to start (its error is printed above)") from e
    return _Plan(total, _bounded_map(pool, tasks, 4 * workers), facts, lambda: pool.shutdown(wait=True, cancel_futures=True))


def _collect(
    plan: _Plan, on_error: OnError, progress: Callable[[int, int], None] | None, interruptible: bool
) -> tuple[list[SessionResult], list[BadRecord], str | None]:
    """The results and bad records of a plan, and where it stopped (None: it ran to the end)."""
    results: list[SessionResult] = []
    bad: list[BadRecord] = []
    stopped_at: str | None = None
    done = 0
    try:
        for chunk_out in plan.outputs:
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
                progress(done, plan.total)
            if stopped_at is not None:
                break
    except KeyboardInterrupt:
        if not interruptible:
            raise
        stopped_at = "interrupted"  # what was scored so far, marked incomplete
    return results, bad, stopped_at


def run_score(
    dump: str | Path,
    tokenizer: str,
    family: Any,
    *,
    template: str | None = None,
    encoder_path: str | None = None,
    mode: Mode = "fast",
    workers: int = 1,
    on_error: OnError = "fail",
    metric_version: str = "v1",
    progress: Callable[[int, int], None] | None = None,
    scorer: Scorer | None = None,
    interruptible: bool = False,
) -> ScoreRun:
    """Score every session of `dump` (JSONL or Parquet).

    Args:
        tokenizer: a tokenizer directory, or `fixture:NAME`.
        family: a family name, or a `FamilyConfig` dict.
        template: a chat template text replacing the tokenizer's.
        encoder_path: DeepSeek V3.2/V4's encoder module file (else found
            where users have it).
        mode: "fast" (no re-encode of equal segments) or "full".
        workers: processes; 1 scores in this process.
        on_error: "fail" stops at the first bad record (the run is then
            marked incomplete, `stopped_at` names the record); "skip" counts
            and lists bad records and goes on.
        progress: called with (done, total) after each chunk.
        interruptible: on Ctrl-C return what was scored so far as an
            incomplete run (`stopped_at="interrupted"`) instead of raising.
        scorer: a ready `Scorer` (then `tokenizer`, `family` and `mode` are
            taken from it; with workers, its tokenizer and byte table are
            sent to them instead of being loaded again).
    """
    if on_error not in ("fail", "skip"):
        raise ValueError(f"on_error must be 'fail' or 'skip', got {on_error!r}")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    start = time.perf_counter()
    if workers > 1 and not _FORK:
        spec: str | bytes = tokenizer
        if scorer is not None:  # reuse the caller's tokenizer, family and byte table
            spec = pickle.dumps((scorer.tito.tokenizer, scorer.cmp.vocab))
            family, mode = scorer.tito.config, scorer.mode
        plan = _spawned_plan(dump, (spec, family, template, mode, encoder_path), workers)
    else:
        local = scorer if scorer is not None else build_scorer(tokenizer, family, template, mode, encoder_path)
        mode = local.mode
        plan = _local_plan(dump, local) if workers == 1 else _forked_plan(dump, local, workers)
    setup = time.perf_counter() - start
    try:
        results, bad, stopped_at = _collect(plan, on_error, progress, interruptible)
    finally:
        plan.close()
    facts = plan.facts
    fast = "on" if facts.fast_path else f"off ({'mode full' if mode == 'full' else facts.fast_path_reason})"
    summary = summarize(
        results,
        bad,
        family=facts.family,
        mode=mode,
        fast_path=fast,
        metric_version=metric_version,
        complete=stopped_at is None,
        stopped_at=stopped_at,
        encoder=facts.text_encoder,
        template=facts.template,
    )
    return ScoreRun(results, bad, summary, stopped_at, setup)

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

from tito_fast.dump import (
    BadRecord,
    Record,
    count_records,
    dump_format,
    jsonl_ranges,
    read_dump,
    read_jsonl_range,
)
from tito_fast.score import Mode, ScoreError, Scorer, SessionResult, Summary, summarize

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
    setup_seconds: float = 0.0  # loading the tokenizer, building the byte table (and starting workers)


def load_tokenizer(spec: str) -> Any:
    """A tokenizer from a directory, or `fixture:NAME` for a pinned test fixture."""
    if spec.startswith("fixture:"):
        from tito_fast import fixtures

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
        from tito_fast import vocab as vocab_module

        tok, vocab = pickle.loads(tokenizer)
        if vocab is not None:
            vocab_module._CACHE[tok] = vocab
        _WORKER = Scorer(tok, family, chat_template=template, mode=mode, encoder_path=encoder_path)
    else:
        _WORKER = build_scorer(tokenizer, family, template, mode, encoder_path)


def _describe_worker() -> tuple[str, bool, str | None, str, str]:
    assert _WORKER is not None
    return _WORKER.family, _WORKER.fast_path, _WORKER.splitter.reason, _WORKER.encoder, _WORKER.tito.template_source


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
    results: list[SessionResult] = []
    bad: list[BadRecord] = []
    stopped_at: str | None = None
    done = 0
    chunk_size = 8
    pool: ProcessPoolExecutor | None = None
    restore_env: str | None = None
    start = time.perf_counter()
    if workers == 1:
        total = count_records(dump)
        local = scorer if scorer is not None else build_scorer(tokenizer, family, template, mode, encoder_path)
        family_name, fast_on, reason, encoder = local.family, local.fast_path, local.splitter.reason, local.encoder
        template_source = local.tito.template_source
        outputs: Iterator[list[SessionResult | BadRecord]] = (
            [score_one(local, r) for r in c] for c in _chunks(read_dump(dump), chunk_size)
        )
    else:
        path = Path(dump)
        if dump_format(path) == "jsonl" and not path.name.endswith(".gz"):
            ranges = jsonl_ranges(path, chunk_size)  # workers read their own lines
            total = sum(r[3] for r in ranges)
            tasks: Iterator[tuple[Any, ...]] = (("range", str(path), a, b, first) for a, b, first, _ in ranges)
        else:
            total = count_records(dump)
            tasks = (("records", c) for c in _chunks(read_dump(dump), chunk_size))
        global _WORKER
        if _FORK:
            # Forked workers inherit the parent's scorer: no tokenizer load, no
            # byte-table build per worker. Only this thread runs while they fork.
            _WORKER = scorer if scorer is not None else build_scorer(tokenizer, family, template, mode, encoder_path)
            restore_env = os.environ.get("TOKENIZERS_PARALLELISM")
            os.environ["TOKENIZERS_PARALLELISM"] = "false"  # the Rust tokenizer's threads do not survive a fork
            pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork"))
        else:
            spec: str | bytes = tokenizer
            if scorer is not None:  # reuse the caller's tokenizer, family and byte table
                spec = pickle.dumps((scorer.tito.tokenizer, scorer.cmp.vocab))
                family, mode = scorer.tito.config, scorer.mode
            pool = ProcessPoolExecutor(
                max_workers=workers,
                mp_context=multiprocessing.get_context("spawn"),
                initializer=_init_worker,
                initargs=(spec, family, template, mode, encoder_path),
            )
        try:
            # Forked workers hold the parent's scorer; spawned ones report theirs.
            family_name, fast_on, reason, encoder, template_source = (
                _describe_worker() if _FORK else pool.submit(_describe_worker).result()
            )
        except BrokenProcessPool as e:
            pool.shutdown(cancel_futures=True)
            raise RuntimeError("a scoring worker failed to start (its error is printed above)") from e
        outputs = _bounded_map(pool, tasks, 4 * workers)
    setup = time.perf_counter() - start
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
    except KeyboardInterrupt:
        if not interruptible:
            raise
        stopped_at = "interrupted"  # what was scored so far, marked incomplete
    finally:
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
            if _FORK:
                _WORKER = None
                if restore_env is None:
                    os.environ.pop("TOKENIZERS_PARALLELISM", None)
                else:
                    os.environ["TOKENIZERS_PARALLELISM"] = restore_env
    fast = "on" if fast_on else f"off ({'mode full' if mode == 'full' else reason})"
    summary = summarize(
        results,
        bad,
        family=family_name,
        mode=mode,
        fast_path=fast,
        metric_version=metric_version,
        complete=stopped_at is None,
        stopped_at=stopped_at,
        encoder=encoder,
        template=template_source,
    )
    return ScoreRun(results, bad, summary, stopped_at, setup)

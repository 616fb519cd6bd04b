"""The `tito-fast score` job: read a dump, score every session (in N processes), summarise.

Example:
    >>> run = run_score("examples/qwen3_dump.jsonl", "fixture:qwen3", "qwen3")  # doctest: +SKIP
    >>> run.summary.metrics["tito_session_mismatch_rate/v1"]  # doctest: +SKIP
    0.4
"""

from __future__ import annotations

import collections
import functools
import itertools
import multiprocessing
import os
import pickle
import sys
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from tito_fast._core import CheckedSession, json_loads, pool_size
from tito_fast.chat.identify import family_of_tokenizer
from tito_fast.chat.presets import FAMILIES
from tito_fast.errors import (
    DumpError,
    FamilyError,
    MissingDependency,
    ScoreError,
    TemplateLimitError,
    WorkerDiedError,
)
from tito_fast.score.dump import (
    BadRecord,
    RawLine,
    RawRow,
    Record,
    count_records,
    dump_format,
    jsonl_ranges,
    read_dump,
    read_dump_raw,
    read_jsonl_range,
)
from tito_fast.score.scorer import Mode, Scorer, SessionResult
from tito_fast.score.stopping import become_worker, signal_of, worker_death
from tito_fast.score.summary import Summary, SummaryBuilder, WorstKeeper
from tito_fast.tokenizer.load import TOKENIZER_FILES, load_tokenizer  # noqa: F401  (here too: `tito_fast.job`'s names)

OnError = Literal["fail", "skip"]


@dataclass
class ScoreRun:
    """The outcome of a scoring job; `summary.complete` is False when it stopped early."""

    results: list[SessionResult]  # every result (empty with keep_results=False)
    bad: list[BadRecord]  # the first MAX_ERRORS bad records (all are counted in summary.bad_records)
    summary: Summary
    stopped_at: str | None = None
    setup_seconds: float = 0.0  # loading the tokenizer, building the byte table (and starting workers)
    worst: list[SessionResult] = field(default_factory=list)  # the worst sessions (`summary.worst`)
    family_note: str = ""  # how the family was chosen when none was given
    records: int = 0  # records in the dump


def build_scorer(
    tokenizer: str,
    family: Any,
    template: str | None = None,
    mode: Mode = "full",
    encoder_path: str | None = None,
    trust_encoder: bool = False,
) -> Scorer:
    """A `Scorer` from a tokenizer spec (directory or fixture:NAME), family, optional template text
    and optional DeepSeek encoder file."""
    return Scorer(
        load_tokenizer(tokenizer, snapshot=True), family, chat_template=template, mode=mode, encoder_path=encoder_path,
        trust_encoder=trust_encoder,
    )  # fmt: skip


def score_one(scorer: Scorer, rec: Record | BadRecord) -> SessionResult | BadRecord:
    """A result, or the record's problem as a `BadRecord` (never raises for bad data)."""
    if isinstance(rec, BadRecord):
        return rec
    return _guarded(rec.source, rec.session_id, lambda: scorer.score(rec))


def _guarded(source: str, session_id: str, score: Callable[[], SessionResult]) -> SessionResult | BadRecord:
    """`score()`, or the record's problem as a `BadRecord`."""
    try:
        return score()
    except ScoreError as e:
        return BadRecord(source, str(e), session_id, "unscorable")
    except TemplateLimitError as e:  # this record drives the template past a limit of the renderer
        return BadRecord(source, f"the chat template passed a limit of the renderer on this record: {e.reason}", session_id, "template_limit")
    except (KeyboardInterrupt, MemoryError, MissingDependency):  # not the record's fault
        raise
    except Exception as e:  # one record must never end the job; say it looks like a bug
        what = " ".join(f"{type(e).__name__}: {e}".split())[:500]
        return BadRecord(source, f"unexpected error scoring this record ({what}); please report it", session_id, "internal")


def score_batch(
    scorer: Scorer, items: Sequence[Record | BadRecord | RawLine | RawRow], threads: int | None = None, checked: list[Any] | None = None
) -> list[SessionResult | BadRecord]:
    """Score records and unread JSONL lines and Parquet rows in order. Lines
    and rows go through the scorer's native session check (`Scorer.native`:
    read, render, encode and compare in Rust on `threads` threads, None: all
    cores; `checked`: its outcomes for them, when already computed); a
    session found equal to its render is done there, one that differs is
    diagnosed in Python on the native render, and any the check does not take
    is read and scored on the Python path. Blank lines give nothing. Many
    items are checked `native_chunk(threads)` at a time."""
    if checked is None:
        size = native_chunk(threads)
        if len(items) > size:
            return [r for k in range(0, len(items), size) for r in score_batch(scorer, items[k : k + size], threads)]
        checked = native_outcomes(scorer, items, threads)
    outcomes = iter(checked)
    out: list[SessionResult | BadRecord] = []
    for it in items:
        if not isinstance(it, (RawLine, RawRow)):
            out.append(score_one(scorer, it))
            continue
        outcome = next(outcomes, None)
        if outcome is not None and outcome[0] == "bad":  # the one reader's verdict
            out.append(BadRecord(it.source, outcome[1], outcome[2], outcome[3]))
            continue
        if outcome is not None and outcome[0] == "clean":
            _, sid, turns, num_ids, meta = outcome
            metadata = json_loads(meta) if meta is not None else None
            out.append(scorer.clean_result(it.source, it.default_id if sid is None else sid, turns, num_ids, metadata))
            continue
        if outcome is not None:  # ("differs", text, expected, actual, session): diagnosed on the check's render
            _, text, expected, actual, session = outcome
            assert isinstance(session, CheckedSession)
            sid = it.default_id if session.session_id is None else session.session_id

            def reread(raw: RawLine | RawRow = it) -> Record | None:
                rec = raw.record()
                return rec if isinstance(rec, Record) else None

            out.append(
                _guarded(it.source, sid, lambda: scorer.score_checked(it.source, sid, text, expected, actual, session, reread))
            )
            continue
        rec = it.record()
        if rec is not None:
            out.append(score_one(scorer, rec))
    return out


def native_outcomes(scorer: Scorer, items: Sequence[Any], threads: int | None) -> list[Any]:
    """The native check's outcome for each `RawLine` and `RawRow` of `items`, in order (None: the Python path)."""
    raw = [it for it in items if isinstance(it, (RawLine, RawRow))]
    if not raw or scorer.native is None:
        return [None] * len(raw)
    lines = [it.data for it in raw if isinstance(it, RawLine)]
    rows = [it for it in raw if isinstance(it, RawRow)]
    by_line = iter(scorer.native.check_lines(lines, threads=threads) if lines else [])
    by_row = iter(scorer.native.check_rows([r.data for r in rows], threads=threads) if rows else [])
    return [next(by_line) if isinstance(it, RawLine) else next(by_row) for it in raw]


def _pipelined(scorer: Scorer, batches: Iterator[list[Any]], threads: int | None) -> Iterator[list[SessionResult | BadRecord]]:
    """`score_batch` over `batches`, the native check of the next batch running
    (GIL released, on its threads) while this thread finishes the current one."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="tito-fast-check") as ex:
        pending: tuple[list[Any], Any] | None = None
        for batch in batches:
            future = ex.submit(native_outcomes, scorer, batch, threads)
            if pending is not None:
                yield score_batch(scorer, pending[0], threads, pending[1].result())
            pending = (batch, future)
        if pending is not None:
            yield score_batch(scorer, pending[0], threads, pending[1].result())


_WORKER: Scorer | None = None
# Linux: fork the workers from a parent that holds a ready scorer; elsewhere
# spawn them and build one each (macOS and Windows do not fork safely).
_FORK = sys.platform == "linux" and "fork" in multiprocessing.get_all_start_methods()


def _init_worker(
    parent_pid: int, tokenizer: str | bytes, family: Any, template: str | None, mode: Mode, encoder_path: str | None,
    trust_encoder: bool,
) -> None:  # fmt: skip
    """Build this process's scorer: from a tokenizer spec, or from a pickled
    `(tokenizer, vocab)` of a scorer the caller built (no byte-table rebuild);
    the process ends with its parent (`stopping.become_worker`)."""
    global _WORKER
    become_worker(parent_pid)
    if isinstance(tokenizer, bytes):
        tok, vocab = pickle.loads(tokenizer)
        if vocab is not None:
            vocab.remember(tok)
        _WORKER = Scorer(
            tok, family, chat_template=template, mode=mode, encoder_path=encoder_path, trust_encoder=trust_encoder
        )
    else:
        _WORKER = build_scorer(tokenizer, family, template, mode, encoder_path, trust_encoder)


@dataclass(frozen=True)
class ScorerFacts:
    """What a run reports about its scorer (the same in every worker)."""

    family: str
    fast_path: bool
    fast_path_reason: str | None
    text_encoder: str
    template: str
    renderer: str = "not recorded"

    @classmethod
    def of(cls, scorer: Scorer) -> ScorerFacts:
        return cls(
            scorer.family, scorer.fast_path, scorer.splitter.reason, scorer.text_encoder, scorer.tito.template_source,
            scorer.renderer,
        )  # fmt: skip


def _describe_worker() -> ScorerFacts:
    assert _WORKER is not None
    return ScorerFacts.of(_WORKER)


def _score_task(task: tuple[Any, ...]) -> list[SessionResult | BadRecord]:
    """Score a byte range of a JSONL file (read here, not in the parent) or a list of records."""
    assert _WORKER is not None
    if task[0] == "range":
        return score_batch(_WORKER, list(read_jsonl_range(*task[1:], raw=_WORKER.native is not None)), threads=1)
    return score_batch(_WORKER, task[1], threads=1)


def _chunks(it: Iterator[Any], size: int) -> Iterator[list[Any]]:
    while chunk := list(itertools.islice(it, size)):
        yield chunk


class _Pool(ProcessPoolExecutor):
    """A process pool that can say what ended a worker that died."""

    def death(self) -> str:
        """What ended the worker that broke the pool ("signal 9 (SIGKILL)"; "" when unknown)."""
        workers = list((getattr(self, "_processes", None) or {}).values())
        deadline = time.monotonic() + 2.0  # a worker's pipe closes just before it can be reaped
        while not any(p.exitcode for p in workers) and time.monotonic() < deadline:
            time.sleep(0.01)
        return worker_death([p.exitcode for p in workers])


def _bounded_map(pool: _Pool, chunks: Iterator[tuple[Any, ...]], ahead: int) -> Iterator[Any]:
    """`pool.map` in order, with at most `ahead` chunks in flight (a dump is never read whole).

    Raises:
        WorkerDiedError: a worker process died (killed, out of memory).
    """
    pending: collections.deque[Any] = collections.deque()
    try:
        for chunk in chunks:
            pending.append(pool.submit(_score_task, chunk))
            if len(pending) >= ahead:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
    except BrokenProcessPool as e:
        if e.__cause__ is not None:  # the pool broke on a result it could not read: not a death
            raise
        raise WorkerDiedError(pool.death()) from None


@dataclass
class _Plan:
    """Where a run's chunks of results come from, and how to stop their producers."""

    total: int
    outputs: Iterator[list[SessionResult | BadRecord]]
    facts: ScorerFacts
    close: Callable[[], None] = lambda: None


_CHUNK = 8  # records per task


#: JSONL lines or Parquet rows the native check takes at once, per thread. A
#: differing session's render and ids live until its diagnosis, so a small
#: batch keeps reusing the same memory instead of faulting in fresh pages:
#: 64 lines a batch cost a differing session 0.5 ms more than 8 did
#: (`tito-fast score --threads 1`, 120 Qwen3 agent sessions, a 2-core VM).
NATIVE_PER_THREAD = 8


def native_chunk(threads: int | None) -> int:
    """Lines or rows the native check takes at once on `threads` threads (None:
    every core), by the threads the check really gets (`_core.pool_size`)."""
    return NATIVE_PER_THREAD * pool_size(threads)


def _local_plan(dump: str | Path, total: int, scorer: Scorer, threads: int | None) -> _Plan:
    """Score in this process (JSONL lines on the native check's threads when it is available)."""
    if scorer.native is not None:
        batches = _chunks(read_dump_raw(dump), native_chunk(threads))
        outputs: Iterator[list[SessionResult | BadRecord]]
        if threads == 1:  # one thread in all: check, then finish, batch after batch
            outputs = (score_batch(scorer, c, 1) for c in batches)
        else:
            outputs = _pipelined(scorer, batches, threads)
    else:
        outputs = ([score_one(scorer, r) for r in c] for c in _chunks(read_dump(dump), _CHUNK))
    return _Plan(total, outputs, ScorerFacts.of(scorer))


def _survey(dump: str | Path, workers: int) -> tuple[int, list[tuple[int, int, int, int]] | None]:
    """(records, byte ranges): one pass over the dump, which also checks its
    format. With workers, an uncompressed JSONL file is cut into byte ranges
    that the workers read themselves; otherwise the records are just counted."""
    path = Path(dump)
    if workers > 1 and dump_format(path) == "jsonl" and not path.name.endswith(".gz"):
        ranges = jsonl_ranges(path, _CHUNK)
        return sum(r[3] for r in ranges), ranges
    return count_records(path), None


def _tasks(dump: str | Path, ranges: list[tuple[int, int, int, int]] | None) -> Iterator[tuple[Any, ...]]:
    """Byte ranges of a JSONL file (the workers read their own lines), else chunks of records read here."""
    if ranges is not None:
        return (("range", str(dump), a, b, first) for a, b, first, _ in ranges)
    return (("records", c) for c in _chunks(read_dump_raw(dump), _CHUNK))


def _forked_plan(
    dump: str | Path, total: int, ranges: list[tuple[int, int, int, int]] | None, scorer: Scorer, workers: int
) -> _Plan:
    """Workers forked from this process, inheriting its scorer: no tokenizer load
    and no byte-table build per worker. Only this thread runs while they fork."""
    global _WORKER
    tasks = _tasks(dump, ranges)
    _WORKER = scorer
    restore_env = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"  # the Rust tokenizer's threads do not survive a fork
    pool = _Pool(
        max_workers=workers, mp_context=multiprocessing.get_context("fork"), initializer=become_worker,
        initargs=(os.getpid(),),
    )  # fmt: skip

    def close() -> None:
        global _WORKER
        pool.shutdown(wait=True, cancel_futures=True)
        _WORKER = None
        if restore_env is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = restore_env

    return _Plan(total, _bounded_map(pool, tasks, 4 * workers), ScorerFacts.of(scorer), close)


def _spawned_plan(
    dump: str | Path, total: int, ranges: list[tuple[int, int, int, int]] | None, init: tuple[Any, ...], workers: int
) -> _Plan:
    """Workers spawned afresh (where forking is not safe); each builds its scorer from `init`."""
    tasks = _tasks(dump, ranges)
    pool = _Pool(
        max_workers=workers, mp_context=multiprocessing.get_context("spawn"), initializer=_init_worker,
        initargs=(os.getpid(), *init),
    )  # fmt: skip
    try:
        facts = pool.submit(_describe_worker).result()
    except BrokenProcessPool as e:
        pool.shutdown(cancel_futures=True)
        raise RuntimeError("a scoring worker failed to start (its error is printed above)") from e
    return _Plan(total, _bounded_map(pool, tasks, 4 * workers), facts, lambda: pool.shutdown(wait=True, cancel_futures=True))


class ScoreStream:
    """The results of a scoring job, in dump order, as they are produced.

    Iterate it once: each item is a `SessionResult` or a `BadRecord`. Nothing
    is kept but the running summary and the worst sessions, so memory stays
    flat however large the dump. With `on_error="fail"` the stream ends at the
    first bad record (yielded last); with `interruptible`, Ctrl-C (SIGTERM
    too, within `stopping.terminate_as_interrupt`) ends it (`stopped_at`
    "interrupted", `stopped_by` the signal), and so does a worker's death
    (`worker_died` says what ended it) instead of raising `WorkerDiedError`.
    `summary`, `worst()` and `stopped_at` describe what was yielded so far.

    Example:
        >>> stream = iter_score("examples/qwen3_dump.jsonl", "fixture:qwen3", "qwen3")  # doctest: +SKIP
        >>> sum(1 for r in stream if r.mismatches), stream.summary.sessions  # doctest: +SKIP
        (18, 40)
    """

    def __init__(
        self, plan: _Plan, *, on_error: OnError, progress: Callable[[int, int], None] | None, interruptible: bool,
        worst: int, metric_version: str, mode: Mode, setup_seconds: float, family_note: str,
    ) -> None:  # fmt: skip
        self._plan = plan
        self._on_error = on_error
        self._progress = progress
        self._interruptible = interruptible
        self._metric_version = metric_version
        self._mode: Mode = mode
        self._builder = SummaryBuilder()
        self._worst = WorstKeeper(worst)
        self._started = False
        self.total = plan.total
        self.done = 0
        self.stopped_at: str | None = None
        self.stopped_by: int | None = None  # the signal of an interrupt
        self.worker_died: str | None = None  # "a worker died: signal 9 (SIGKILL)"
        self.finished = False
        self._results: Generator[SessionResult | BadRecord, None, None] | None = None
        self.setup_seconds = setup_seconds
        self.family_note = family_note
        self.facts = plan.facts

    def __iter__(self) -> Iterator[SessionResult | BadRecord]:
        if self._started:
            raise RuntimeError("a ScoreStream is iterated once")
        self._started = True
        self._results = self._run()
        return self._results

    def _run(self) -> Generator[SessionResult | BadRecord, None, None]:
        try:
            for chunk_out in self._plan.outputs:
                for out in chunk_out:
                    self.done += 1
                    self._builder.add(out)
                    if isinstance(out, BadRecord):
                        if self._on_error == "fail":
                            self.stopped_at = out.source
                    else:
                        self._worst.add(out)
                    yield out
                    if self.stopped_at is not None:
                        break
                if self._progress is not None:
                    self._progress(self.done, self.total)
                if self.stopped_at is not None:
                    break
        except KeyboardInterrupt as e:
            if not self._interruptible:
                raise
            self._interrupted(e)  # what was scored so far, marked incomplete
        except WorkerDiedError as e:
            if not self._interruptible:
                raise
            self.worker_died = str(e)
            self.stopped_at = f"a worker's death: {e.detail or 'unknown cause'}"
        finally:
            self._plan.close()
            self.finished = True

    def _interrupted(self, e: KeyboardInterrupt) -> None:
        self.stopped_at = "interrupted"
        self.stopped_by = signal_of(e)

    def stop(self, e: KeyboardInterrupt) -> None:
        """End the stream on an interrupt that reached its consumer (in the
        loop body) rather than the stream: the workers stop and the stream is
        marked as an interrupt inside it marks it (where it had stopped
        already, at a bad record, that stays `stopped_at`)."""
        if self._results is not None:
            self._results.close()
        self.stopped_at = self.stopped_at or "interrupted"
        self.stopped_by = signal_of(e)
        self.finished = True

    @property
    def sessions(self) -> int:
        return self._builder.sessions

    @property
    def bad_records(self) -> int:
        return self._builder.bad_records

    @property
    def bad(self) -> list[BadRecord]:
        """The first bad records (all are counted in `summary.bad_records`), and the one a run stopped at."""
        out = [BadRecord(e["source"], e["reason"], e.get("session_id"), e.get("code", "unscorable")) for e in self._builder.errors]
        last = self._builder.last_bad
        if last is not None and (not out or out[-1].source != last.source):
            out.append(last)
        return out

    @property
    def summary(self) -> Summary:
        f = self.facts
        fast = "on" if f.fast_path else f"off ({'mode full' if self._mode == 'full' else f.fast_path_reason})"
        if self._mode == "fast":
            fast += "; retokenization not checked"
        return self._builder.summary(
            family=f.family,
            mode=self._mode,
            fast_path=fast,
            metric_version=self._metric_version,
            complete=self.finished and self.stopped_at is None,
            stopped_at=self.stopped_at,
            encoder=f.text_encoder,
            template=f.template,
            renderer=f.renderer,
        )

    def worst(self) -> list[SessionResult]:
        """The worst sessions so far (`tito_fast.score.summary.worst`)."""
        return self._worst.worst()

    def close(self) -> None:
        """Stop the workers (when the stream is left before its end)."""
        self._plan.close()


METRIC_VERSIONS = ("v1", "v2")


def resolve_family(dump: str | Path | None, tokenizer: Any, *, look_at: int = 100) -> tuple[str, str]:
    """`(family, how it was chosen)` for a run given no family: the `family`
    field of the dump's first records (when there is a dump), else the family
    the tokenizer's chat template identifies (`tito_fast.chat.identify`).

    Raises:
        FamilyError: neither names one; the message lists the families.
    """
    if dump is not None:
        for rec in itertools.islice(read_dump(dump), look_at):
            if isinstance(rec, Record):
                if rec.family:
                    return rec.family, f"family {rec.family!r}: named by the records ({rec.source})"
                break
    found = family_of_tokenizer(tokenizer)
    if found is not None:
        return found[0], f"family {found[0]!r}: {found[1]}"
    records = "the records name no family and " if dump is not None else ""
    raise FamilyError(
        f"give --family: {records}the tokenizer's chat template is not one tito_fast recognises; "
        f"families: {', '.join(sorted(FAMILIES))} (or a JSON file declaring a FamilyConfig)"
    )


def iter_score(
    dump: str | Path,
    tokenizer: str | None = None,
    family: Any = None,
    *,
    template: str | None = None,
    encoder_path: str | None = None,
    mode: Mode = "full",
    workers: int = 1,
    on_error: OnError = "fail",
    metric_version: str = "v1",
    progress: Callable[[int, int], None] | None = None,
    scorer: Scorer | None = None,
    interruptible: bool = False,
    worst: int = 5,
    trust_encoder: bool = False,
    threads: int | None = None,
) -> ScoreStream:
    """Score every session of `dump` (JSONL or Parquet) as a stream (see
    `ScoreStream`); the arguments are `run_score`'s.

    Raises:
        DumpError: the dump cannot be read, or holds no records.
        TokenizerLoadError, FamilyError: before any record is scored.
    """
    if on_error not in ("fail", "skip"):
        raise ValueError(f"on_error must be 'fail' or 'skip', got {on_error!r}")
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be >= 1 or None, got {threads}")
    if metric_version not in METRIC_VERSIONS:
        raise ValueError(f"metric_version must be one of {METRIC_VERSIONS}, got {metric_version!r}")
    if mode not in ("fast", "full"):
        raise ValueError(f"mode must be 'fast' or 'full', got {mode!r}")
    if scorer is None and tokenizer is None:
        raise ValueError("give a tokenizer (a folder or fixture:NAME) or a scorer")
    start = time.perf_counter()
    total, ranges = _survey(dump, workers)  # checks the file and its format first
    if total == 0:
        raise DumpError(f"{dump}: the dump holds no records")
    note = ""
    if scorer is None and family is None:
        assert tokenizer is not None
        tok = load_tokenizer(tokenizer, snapshot=True)  # as build_scorer loads it: no transformers once recorded
        family, note = resolve_family(dump, tok)
        scorer = Scorer(
            tok, family, chat_template=template, mode=mode, encoder_path=encoder_path, trust_encoder=trust_encoder
        )
    if workers > 1 and not _FORK:
        spec: str | bytes = tokenizer or ""
        if scorer is not None:  # reuse the caller's tokenizer, family and byte table
            spec = pickle.dumps((scorer.tito.tokenizer, scorer.cmp.vocab))
            family, mode = scorer.tito.config, scorer.mode
        plan = _spawned_plan(dump, total, ranges, (spec, family, template, mode, encoder_path, trust_encoder), workers)
    else:
        if scorer is None:
            assert tokenizer is not None
            scorer = build_scorer(tokenizer, family, template, mode, encoder_path, trust_encoder)
        mode = scorer.mode
        plan = _local_plan(dump, total, scorer, threads) if workers == 1 else _forked_plan(dump, total, ranges, scorer, workers)
    return ScoreStream(
        plan, on_error=on_error, progress=progress, interruptible=interruptible, worst=worst,
        metric_version=metric_version, mode=mode, setup_seconds=time.perf_counter() - start, family_note=note,
    )  # fmt: skip


def run_score(
    dump: str | Path,
    tokenizer: str | None = None,
    family: Any = None,
    *,
    template: str | None = None,
    encoder_path: str | None = None,
    mode: Mode = "full",
    workers: int = 1,
    on_error: OnError = "fail",
    metric_version: str = "v1",
    progress: Callable[[int, int], None] | None = None,
    scorer: Scorer | None = None,
    interruptible: bool = False,
    worst: int = 5,
    keep_results: bool = True,
    on_result: Callable[[SessionResult | BadRecord], None] | None = None,
    trust_encoder: bool = False,
    threads: int | None = None,
) -> ScoreRun:
    """Score every session of `dump` (JSONL or Parquet).

    Args:
        tokenizer: a tokenizer directory, or `fixture:NAME`.
        family: a family name, or a `FamilyConfig` dict; None: the records'
            `family` field, else the family the tokenizer's template
            identifies (`ScoreRun.family_note` says which), else FamilyError.
        template: a chat template text replacing the tokenizer's.
        encoder_path: DeepSeek V3.2/V4's encoder module file (else found
            where users have it).
        trust_encoder: also load an encoder file found in the tokenizer's
            folder (that runs its code; default False).
        mode: "full" (default: every render encoded whole, so retokenization
            drift shows) or "fast" (equal segments not re-encoded;
            retokenization not checked).
        workers: processes; 1 scores in this process.
        threads: threads of the native session check in this process (None:
            one per core; each worker process uses one). Except with 1, the
            check of the next lines runs while this thread diagnoses and
            collects the current ones.
        on_error: "fail" stops at the first bad record (the run is then
            marked incomplete, `stopped_at` names the record); "skip" counts
            and lists bad records and goes on.
        metric_version: "v1" or "v2", the session-server version in the metric names.
        progress: called with (done, total) after each chunk.
        interruptible: on Ctrl-C (SIGTERM too, within
            `tito_fast.score.stopping.terminate_as_interrupt`), or a worker's
            death, return what was scored so far as an incomplete run
            (`stopped_at` "interrupted" or "a worker's death: ...") instead
            of raising.
        scorer: a ready `Scorer` (then `tokenizer`, `family` and `mode` are
            taken from it; with workers, its tokenizer and byte table are
            sent to them instead of being loaded again).
        worst: how many worst sessions `ScoreRun.worst` keeps.
        keep_results: keep every result in `ScoreRun.results` (False: keep
            none; memory stays flat, use `on_result` or `iter_score`).
        on_result: called with every result and bad record as it comes (to
            stream them out, e.g. `tito_fast.score.results.ResultWriter.write`).
    """
    stream = iter_score(
        dump, tokenizer, family, template=template, encoder_path=encoder_path, mode=mode, workers=workers,
        on_error=on_error, metric_version=metric_version, progress=progress, scorer=scorer,
        interruptible=interruptible, worst=worst, trust_encoder=trust_encoder, threads=threads,
    )  # fmt: skip
    results: list[SessionResult] = []
    try:
        for out in stream:
            if on_result is not None:
                on_result(out)
            if keep_results and not isinstance(out, BadRecord):
                results.append(out)
    except KeyboardInterrupt as e:
        if not interruptible:
            raise
        stream.stop(e)
    return ScoreRun(
        results, stream.bad, stream.summary, stream.stopped_at, stream.setup_seconds, stream.worst(), stream.family_note,
        stream.total,
    )

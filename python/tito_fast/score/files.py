"""`tito-fast score` as one library call: options in, outputs written, a result to print.

`score_files(options)` scores a dump file (`iter_score`), streams every
session's result to `--out` (`ResultWriter`) and `--json` (`JsonResults`)
as they come, and returns a `ScoreOutcome`: the summary, the lines to
print (a stop, skipped records, the table) and the reports (HTML, Markdown)
to write after the table. The command line only parses its arguments into
`ScoreOptions`, calls it and prints.

Example:
    >>> options = ScoreOptions("examples/qwen3_dump.jsonl", "fixture:qwen3", "qwen3")
    >>> score_files(options).summary.sessions  # doctest: +SKIP
    40
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tito_fast.score import report, stopping
from tito_fast.score.dump import BadRecord
from tito_fast.score.results import JsonResults, ResultWriter
from tito_fast.score.run import OnError, ScoreStream, iter_score
from tito_fast.score.scorer import Mode
from tito_fast.score.summary import Summary


@dataclass(frozen=True)
class ScoreOptions:
    """What a `tito-fast score` run does (the options of `iter_score`, and its outputs)."""

    dump: str
    tokenizer: str  # a folder, or fixture:NAME
    family: Any = None  # a name, a FamilyConfig dict, or None (the records', else the template's)
    template: str | None = None  # a chat template text replacing the tokenizer's
    encoder: str | None = None  # DeepSeek's encoder file
    trust_encoder: bool = False
    mode: Mode = "full"
    workers: int = 1
    threads: int | None = None
    on_error: OnError = "fail"
    metric_version: str = "v1"
    worst: int = 5
    ci: bool = False  # the table and reports mark the strict mismatch types
    out: str | None = None  # every session's result (.jsonl or .parquet)
    json: str | None = None  # the summary and every session's results ("-": stdout)
    report: str | None = None  # HTML
    markdown: str | None = None


@dataclass
class ScoreOutcome:
    """What a `score_files` run found, and what is left to print and write."""

    stream: ScoreStream  # done: its counts, `bad`, `stopped_at`, `stopped_by`, `worker_died`
    summary: Summary
    seconds: float
    problem: str  # a stop (interrupt, a worker's death, a bad record under fail), its line(s) for stderr; "" when none
    skipped: str  # the bad records skipped, in words ("" when none, or when the run stopped)
    table: str  # the summary table
    reports: list[tuple[str, str, str]]  # (option, path, text): the reports to write after the table

    @property
    def ci_failures(self) -> list[str]:
        return self.summary.ci_failures


def score_files(
    options: ScoreOptions,
    *,
    progress: Callable[[int, int], None] | None = None,
    say: Callable[[str], None] | None = None,
) -> ScoreOutcome:
    """Score `options.dump`, streaming results to `--out` and `--json` (whole
    or not at all: on an interrupt or a stop they hold what was scored, marked
    incomplete). `progress(done, total)` after each chunk; `say(note)` with how
    the family was chosen, before the first record.

    Raises:
        DumpError, TokenizerLoadError, FamilyError: before any record is scored.
    """
    o = options
    start = time.perf_counter()
    stream = iter_score(
        o.dump, o.tokenizer, o.family, template=o.template, encoder_path=o.encoder, mode=o.mode, workers=o.workers,
        on_error=o.on_error, metric_version=o.metric_version, progress=progress, interruptible=True, worst=o.worst,
        trust_encoder=o.trust_encoder, threads=o.threads,
    )  # fmt: skip
    if stream.family_note and say is not None:
        say(stream.family_note)
    writer: ResultWriter | None = None
    js: JsonResults | None = None
    try:
        writer = ResultWriter(o.out) if o.out else None
        js = JsonResults(o.json) if o.json else None
        try:
            for out in stream:
                if writer is not None:
                    writer.write(out)
                if js is not None and not isinstance(out, BadRecord):
                    js.write(out)
        except KeyboardInterrupt as e:  # it reached this loop rather than the stream: the same stop
            stream.stop(e)
        seconds = time.perf_counter() - start
        s = stream.summary
        if js is not None:
            js.finish({"summary": s.to_dict(), "seconds": seconds})
            js = None
    finally:
        stream.close()
        if writer is not None:  # the rows so far, each whole (Parquet: marked incomplete)
            writer.close(complete=stream.finished and stream.stopped_at is None)
        if js is not None:  # an error ended the run: no half JSON file under the final name
            js.close()
    problem, skipped = _stop_lines(stream, s)
    title = f"tito-fast score: {Path(o.dump).name}"
    worst = stream.worst()
    reports = []
    if o.report:
        reports.append(("--report", o.report, report.html_report(s, worst, title=title, source=str(o.dump), ci=o.ci)))
    if o.markdown:
        reports.append(("--markdown", o.markdown, report.markdown_report(s, worst, title=title, ci=o.ci)))
    return ScoreOutcome(stream, s, seconds, problem, skipped, _table(o, stream, s, seconds), reports)


def _stop_lines(stream: ScoreStream, s: Summary) -> tuple[str, str]:
    """(what stopped the run, for stderr as it is; the bad records skipped, a note)."""
    bad = stream.bad
    if stream.stopped_by is not None:
        what = stopping.describe(stream.stopped_by)
        return f"\ntito-fast: {what}; the reports written below are marked INCOMPLETE\n", ""
    if stream.worker_died is not None:
        return f"tito-fast: error: {stream.worker_died}; the reports written below are marked INCOMPLETE\n", ""
    if stream.stopped_at is not None:
        last = bad[-1]
        return (
            f"tito-fast: error: bad record {last.source}: {last.reason}; stopped (--on-error fail): rerun with "
            "--on-error skip to skip bad records; the reports written below are marked INCOMPLETE\n"
        ), ""
    if bad:
        return "", f"skipped {s.bad_records} bad record(s), the first {bad[0].source}: {bad[0].reason}"
    return "", ""


def _table(o: ScoreOptions, stream: ScoreStream, s: Summary, seconds: float) -> str:
    rows = [("records read", f"{stream.done:,} of {stream.total:,}")]
    if s.sessions:
        scoring = seconds - stream.setup_seconds
        workers = f"{o.workers} worker{'s' if o.workers > 1 else ''}"
        rows.append(
            ("time", f"{seconds:.2f} s: setup {stream.setup_seconds:.2f} s, then {scoring / stream.done * 1e3:.1f} ms a record ({workers})")
        )
    else:
        rows.append(("time", f"{seconds:.2f} s (no session scored)"))
    return report.text_table(s, rows, ci=o.ci)


__all__ = ["ScoreOptions", "ScoreOutcome", "score_files"]

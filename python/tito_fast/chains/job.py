"""`tito-fast assemble` as one library call: options in, outputs written, a result to print.

`assemble_files(options)` assembles a capture file (`assemble`), writes the
chains (`--out`, `write_chains`), the summary JSON (`--json`, "-": stdout) and
the HTML report (`--report`), each whole or not at all
(`tito_fast.score.outputs`), and returns an `AssembleOutcome` with the text
the command line prints.

Example:
    >>> outcome = assemble_files(AssembleOptions("examples/calls.jsonl"))  # doctest: +SKIP
    >>> print(outcome.table)  # doctest: +SKIP
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tito_fast.chains.calls import OnError
from tito_fast.chains.core import DEFAULT_REALIGN_WINDOW, NO_TOKENIZER_NOTE, Assembly, assemble
from tito_fast.chains.output import html_report, summary_json, write_chains
from tito_fast.errors import MissingDependency, UsageError
from tito_fast.score.outputs import write_output


@dataclass(frozen=True)
class AssembleOptions:
    """What a `tito-fast assemble` run does (the arguments of `assemble`, and its outputs)."""

    calls: str  # a .jsonl, .jsonl.gz or .parquet capture file
    tokenizer: str | None = None  # a folder, or fixture:NAME
    family: Any = None
    policy: str | dict[str, str] | None = None
    realign_window: int = DEFAULT_REALIGN_WINDOW
    on_error: OnError = "fail"
    threads: int | None = None
    leaves: str = "all"
    matcher: str | None = None
    out: str | None = None  # the chains (.parquet or .jsonl)
    packed: bool = False  # --out in packed form (Parquet)
    json: str | None = None  # the summary, events and bad records ("-": stdout)
    report: str | None = None  # HTML


@dataclass
class AssembleOutcome:
    """An assembly, written out, and what is left to print."""

    assembly: Assembly
    seconds: float
    skipped: str  # the bad records skipped, in words ("" when none)
    table: str  # the verdict, the no-tokenizer note, the summary table and the time


def assemble_files(options: AssembleOptions, *, progress: Callable[[int, int], None] | None = None) -> AssembleOutcome:
    """Assemble `options.calls` and write the outputs asked for; `progress(done, total)` after each batch.

    Raises:
        UsageError: an argument `assemble` refuses (its ValueError, in one line).
        CallsError: a bad record under on_error="fail".
    """
    o = options
    start = time.perf_counter()
    try:
        a = assemble(
            o.calls, family=o.family, tokenizer=o.tokenizer, policy=o.policy, realign_window=o.realign_window,
            on_error=o.on_error, threads=o.threads, progress=progress, leaves=o.leaves, matcher=o.matcher,
        )  # fmt: skip
    except MissingDependency:
        raise
    except ValueError as e:
        raise UsageError(str(e)) from e
    seconds = time.perf_counter() - start
    if o.out:
        write_chains(a, o.out, "--out", packed=o.packed)
    if o.json:
        write_output(o.json, json.dumps({**summary_json(a), "seconds": seconds}, indent=2, ensure_ascii=False), "--json")
    if o.report:
        page = html_report(a, title=f"tito-fast assemble: {Path(o.calls).name}", source=str(o.calls), tokenizer=o.tokenizer is not None)
        write_output(o.report, page, "--report")
    skipped = f"skipped {len(a.bad)} bad record(s), the first {a.bad[0].source}: {a.bad[0].reason}" if a.bad else ""
    table = a.summary.verdict() + "\n"
    if o.tokenizer is None:
        table += f"note: {NO_TOKENIZER_NOTE}\n"
    table += a.summary.table() + f"\ntime                   {seconds:.2f} s\n"
    return AssembleOutcome(a, seconds, skipped, table)


__all__ = ["AssembleOptions", "AssembleOutcome", "assemble_files"]

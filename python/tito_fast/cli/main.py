"""The `tito-fast` command line.

`tito-fast score DUMP` scores a rollout dump (the reference's session
mismatch metrics, diagnosed; see `tito_fast.score`), `tito-fast diff` shows
two id sequences side by side by segment, `tito-fast verify-template`
checks a family's merge against the full render, and `tito-fast demo`
finds planted faults in synthetic sessions with the batch kernels
(`tito_fast.cli.demo`).

Example:
    >>> from tito_fast.cli.main import cli
    >>> cli("demo", "--sessions", "20", "--turns", "4", "--quiet")
    0
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from tito_fast._core import __version__
from tito_fast.chat.families import get_tito_tokenizer
from tito_fast.cli.demo import print_summary, run_demo
from tito_fast.cli.progress import Progress
from tito_fast.errors import DumpError, FamilyError, RenderError, TemplateNotAppendOnlyError
from tito_fast.score import report
from tito_fast.score.dump import BadRecord, read_dump
from tito_fast.score.run import load_tokenizer, run_score
from tito_fast.score.scorer import Scorer
from tito_fast.score.summary import worst
from tito_fast.session.verify import verify_family


def cli(*args: str) -> int:
    """Run the command line with `args`; returns the exit code."""
    parser = argparse.ArgumentParser(prog="tito-fast", description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--version", action="version", version=f"tito_fast {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="find planted TITO faults in generated sessions")
    demo.add_argument("--sessions", type=int, default=2000)
    demo.add_argument("--turns", type=int, default=20)
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--threads", type=int, default=None, help="threads for the batch check (default: all cores)")
    demo.add_argument("--json", metavar="OUT", help="also write the summary as JSON to OUT ('-' for stdout)")
    demo.add_argument("--quiet", action="store_true", help="no progress bar and no table")
    verify = sub.add_parser(
        "verify-template",
        help="check that a family's turn-by-turn merge reproduces the full chat-template render",
        description="For each role set ({tool}, {tool,user}, {tool,user,system}) replay multi-turn conversations "
        "turn by turn with the family's merge and compare the accumulated ids with the full render.",
    )
    _model_args(verify)
    verify.add_argument(
        "--thinking",
        choices=["on", "off", "both", "as-given"],
        default="both",
        help="replay with enable_thinking on (conversations with reasoning), off (without), both (default), "
        "or the family's kwargs as given",
    )
    verify.add_argument(
        "--chat-template-kwargs", metavar="JSON", type=_json_object, default=None,
        help="template kwargs as a JSON object, e.g. '{\"enable_thinking\": false}'",
    )
    verify.add_argument("--json", metavar="OUT", help="also write the results as JSON to OUT ('-' for stdout)")
    verify.add_argument("--quiet", action="store_true", help="no progress and no table")
    score = sub.add_parser(
        "score",
        help="score a rollout dump: the reference's session mismatch metrics, diagnosed",
        description="Compare every session's accumulated ids with a fresh chat-template render (the reference's "
        "compute_session_mismatch), diagnose each difference (role, message, turn, kind) and aggregate.",
    )
    score.add_argument("dump", help="a .jsonl or .parquet dump (schema in the README)")
    _model_args(score)
    score.add_argument("--mode", choices=["fast", "full"], default="fast", help="fast: encode only differing segments (default)")
    score.add_argument("--workers", type=int, default=1, help="processes (default 1)")
    score.add_argument("--on-error", choices=["fail", "skip"], default="fail", help="stop at a bad record (default) or skip it")
    score.add_argument("--metric-version", default="v1", help="the session-server version in the metric names (v1 or v2)")
    score.add_argument("--json", metavar="OUT", help="write the summary and every session's results as JSON ('-' for stdout)")
    score.add_argument("--report", metavar="OUT.html", help="write a self-contained HTML report with plots")
    score.add_argument("--markdown", metavar="OUT.md", help="write the summary as Markdown")
    score.add_argument("--worst", type=int, default=5, help="worst sessions shown in the reports (default 5)")
    score.add_argument("--ci", action="store_true", help="exit 1 when a strict mismatch type has a non-zero rate")
    score.add_argument("--quiet", action="store_true", help="no progress bar and no table")
    diff = sub.add_parser(
        "diff",
        help="two id sequences, or a dump session against its render, side by side by segment",
        description="With one file: a dump session (--session, default the first) against a fresh render of its "
        "messages. With two: two JSON files holding id lists (expected, actual).",
    )
    diff.add_argument("inputs", nargs="+", metavar="FILE", help="DUMP, or EXPECTED.json ACTUAL.json")
    _model_args(diff)
    diff.add_argument("--session", help="session_id (or line/row number) in the dump")
    diff.add_argument("--width", type=int, default=None, help="terminal width (default: detected)")
    diff.add_argument("--context", type=int, default=1, help="equal segments kept around each difference")
    diff.add_argument("--color", choices=["auto", "always", "never"], default="auto")
    ns = parser.parse_args(args)
    if ns.command == "verify-template":
        return _verify_template(ns)
    if ns.command == "score":
        return _score(ns)
    if ns.command == "diff":
        return _diff(ns)
    if ns.sessions < 1 or ns.turns < 2:
        parser.error("--sessions must be >= 1 and --turns >= 2")
    summary = run_demo(ns.sessions, ns.turns, ns.seed, ns.threads, sys.stderr, ns.quiet)
    if not ns.quiet:
        print_summary(summary, sys.stdout)
    if ns.json:
        _write(ns.json, json.dumps({**asdict(summary), "ids_per_second": summary.ids_per_second}, indent=2))
    return 1 if summary.missed or summary.false_alarms else 0


def _load_tokenizer(spec: str) -> Any:
    return load_tokenizer(spec)


def _model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tokenizer", required=True, help="tokenizer directory (or fixture:NAME for a test fixture)")
    p.add_argument("--family", default="default", help="family name, or a JSON file declaring a FamilyConfig")
    p.add_argument("--template", metavar="FILE", help="chat template file replacing the tokenizer's")
    p.add_argument(
        "--encoder", metavar="FILE",
        help="DeepSeek V3.2/V4's encoding_dsv32.py / encoding_dsv4.py (default: found with Miles, SGLang, next to "
        "the tokenizer, in its encoding/ folder, or in miles-tito-tokenizers)",
    )


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not valid JSON: {e}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def _family_arg(value: str) -> Any:
    return json.loads(Path(value).read_text(encoding="utf-8")) if value.endswith(".json") else value


def _write(path: str, text: str) -> None:
    """`text` to the file `path` (written whole, then moved into place), or to stdout for "-"."""
    if path == "-":
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return
    tmp = Path(path + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def _score(ns: argparse.Namespace) -> int:

    if ns.workers < 1:
        sys.stderr.write("tito-fast score: --workers must be >= 1\n")
        return 2
    template = Path(ns.template).read_text(encoding="utf-8") if ns.template else None
    bar = Progress(0, sys.stderr, ns.quiet, verb="scored")

    def progress(done: int, total: int) -> None:
        bar.total = total
        bar.update(done)

    start = time.perf_counter()
    try:
        run = run_score(
            ns.dump,
            ns.tokenizer,
            _family_arg(ns.family),
            template=template,
            encoder_path=ns.encoder,
            mode=ns.mode,
            workers=ns.workers,
            on_error=ns.on_error,
            metric_version=ns.metric_version,
            progress=progress,
            interruptible=True,
        )
    except (DumpError, FamilyError, RenderError) as e:
        sys.stderr.write(f"tito-fast score: {e}\n")
        return 2
    seconds = time.perf_counter() - start
    s = run.summary
    if run.stopped_at == "interrupted":
        sys.stderr.write("\ntito-fast score: interrupted; any report written below is marked INCOMPLETE.\n")
    elif run.stopped_at is not None:
        bad = run.bad[-1]
        bar.out.write("\n" if bar.tty else "")
        sys.stderr.write(
            f"tito-fast score: bad record at {bad.source}: {bad.reason}\n"
            "  stopped (--on-error=fail); rerun with --on-error=skip to skip bad records. "
            "Any report written below is marked INCOMPLETE.\n"
        )
    elif run.bad:
        sys.stderr.write(f"tito-fast score: skipped {len(run.bad)} bad record(s), first {run.bad[0].source}: {run.bad[0].reason}\n")
    worst_k = worst(run.results, ns.worst)
    if not ns.quiet:
        scoring = seconds - run.setup_seconds
        timing = (
            f"{seconds:.2f} s: setup {run.setup_seconds:.2f} s, then {scoring / max(s.sessions + s.bad_records, 1) * 1e3:.1f} ms "
            f"a session ({ns.workers} worker{'s' if ns.workers > 1 else ''})"
        )
        table_out = sys.stderr if ns.json == "-" else sys.stdout  # stdout carries the JSON then
        table_out.write(report.text_table(s, [("time", timing)]))
    title = f"tito-fast score: {Path(ns.dump).name}"
    if ns.json:
        payload = {"summary": s.to_dict(), "sessions": [r.to_dict() for r in run.results], "seconds": seconds}
        _write(ns.json, json.dumps(payload, indent=2, ensure_ascii=False))
    if ns.report:
        _write(ns.report, report.html_report(s, worst_k, title=title, source=str(ns.dump)))
    if ns.markdown:
        _write(ns.markdown, report.markdown_report(s, worst_k, title=title))
    if not s.complete:
        return 2
    if ns.ci and s.ci_failures:
        sys.stderr.write("tito-fast score --ci: " + "; ".join(s.ci_failures) + "\n")
        return 1
    return 0


def _read_ids(path: str) -> Any:
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    if isinstance(data, dict):
        data = data.get("token_ids", data.get("ids"))
    if not isinstance(data, list):
        raise ValueError(f"{path}: expected a JSON list of ids (or an object with 'token_ids')")
    return np.asarray(data, dtype=np.int64)


def _diff(ns: argparse.Namespace) -> int:
    import os
    import shutil


    if len(ns.inputs) > 2:
        sys.stderr.write("tito-fast diff: give a dump, or two id files\n")
        return 2
    template = Path(ns.template).read_text(encoding="utf-8") if ns.template else None
    try:
        scorer = Scorer(_load_tokenizer(ns.tokenizer), _family_arg(ns.family), chat_template=template, mode="full", encoder_path=ns.encoder)
    except (FamilyError, RenderError) as e:
        sys.stderr.write(f"tito-fast diff: {e}\n")
        return 2
    if len(ns.inputs) == 2:
        expected, actual = _read_ids(ns.inputs[0]), _read_ids(ns.inputs[1])
        title = f"{ns.inputs[0]} vs {ns.inputs[1]}"
    else:
        record = None
        for r in read_dump(ns.inputs[0]):
            if isinstance(r, BadRecord):
                if ns.session is not None and r.session_id == ns.session:
                    sys.stderr.write(f"tito-fast diff: {r.source}: {r.reason}\n")
                    return 2
                continue
            if ns.session is None or r.session_id == ns.session:
                record = r
                break
        if record is None:
            sys.stderr.write(f"tito-fast diff: no session {ns.session!r} in {ns.inputs[0]}\n")
            return 2
        actual = record.token_ids
        expected = scorer.expected_ids(record)
        title = f"session {record.session_id} ({record.source}): fresh render vs session ids"
    colour = ns.color == "always" or (ns.color == "auto" and sys.stdout.isatty() and not os.environ.get("NO_COLOR"))
    width = ns.width or shutil.get_terminal_size((120, 24)).columns
    pairs = report.segment_pairs(scorer.cmp, expected, actual)
    sys.stdout.write(title + "\n")
    sys.stdout.write(report.terminal_diff(pairs, colour=colour, width=width, context=ns.context))
    mismatches = scorer.cmp.compare_sequences(expected, actual)
    for m in mismatches:
        sys.stdout.write(f"reference: {m.type.value} at segment {m.segment_index}\n")
    return 1 if mismatches else 0


def _verify_template(ns: argparse.Namespace) -> int:

    tok = _load_tokenizer(ns.tokenizer)
    family = _family_arg(ns.family)
    template = Path(ns.template).read_text(encoding="utf-8") if ns.template else None
    options = dict(chat_template=template, encoder_path=ns.encoder)
    refused = ""
    try:
        try:
            tito = get_tito_tokenizer(tok, family, ns.chat_template_kwargs, **options)
        except TemplateNotAppendOnlyError as e:
            refused = str(e)  # the family would refuse this template: replay it anyway to show where it breaks
            tito = get_tito_tokenizer(tok, family, ns.chat_template_kwargs, check_template=False, **options)
    except (FamilyError, RenderError) as e:
        sys.stderr.write(f"tito-fast verify-template: {e}\n")
        return 2
    if not ns.quiet:
        sys.stderr.write(f"verify-template: family {tito.family}, template: {tito.template_source}\n")
        for note in tito.notes:
            sys.stderr.write(f"  note: {note}\n")
        if refused:
            sys.stderr.write(f"  refused when the family is built: {refused}\n")
    results = verify_family(tito, thinking=ns.thinking)
    failed = [r for r in results if not r.ok and not r.skipped]
    if not ns.quiet:
        rows = [("roles", "thinking", "conversation", "turns", "result", "first divergence (expected | merged)")]
        for r in results:
            result = "pass" if r.ok else ("skip" if r.skipped else "FAIL")
            detail = r.skipped or r.error or r.note
            if r.divergence is not None and not r.ok:
                detail = f"id {r.divergence}: {r.expected_text!r} | {r.actual_text!r}"
            mode = {True: "on", False: "off", None: "as given"}[r.thinking]
            rows.append(("{" + ",".join(sorted(r.roles)) + "}", mode, r.name, str(r.turns), result, detail))
        widths = [max(len(row[i]) for row in rows) for i in range(5)]
        for row in rows:
            sys.stdout.write("  ".join(c.ljust(w) for c, w in zip(row[:5], widths)) + "  " + row[5] + "\n")
        passed = sum(r.ok for r in results)
        skipped = sum(bool(r.skipped) for r in results)
        sys.stdout.write(f"\n{tito.family}: {passed} passed, {len(failed)} failed, {skipped} skipped\n")
    if ns.json:
        payload = {"family": tito.family, "template": tito.template_source, "refused": refused, "results": [r.to_dict() for r in results]}
        _write(ns.json, json.dumps(payload, indent=2, ensure_ascii=False))
    return 1 if failed or refused or not any(r.ok for r in results) else 0


def main() -> None:
    """Entry point of the `tito-fast` script."""
    raise SystemExit(cli(*sys.argv[1:]))

"""The `tito-fast` command line.

`tito-fast score DUMP` scores a rollout dump (the reference's session
mismatch metrics, diagnosed; see `tito_fast.score`), `tito-fast diff` shows
two id sequences side by side by segment, `tito-fast verify-template`
checks a family's merge against the full render, and `tito-fast demo`
finds planted faults in synthetic sessions with the batch kernels
(`tito_fast.cli.demo`).

A problem is one line on stderr, `tito-fast: error: <what, where, what to
do>`; `--debug` adds the traceback. Exit codes (`EXIT_CODES`; which error
gives which is `tito_fast.errors.CATALOGUE`, a missing optional package
included):

| code | meaning |
|---|---|
| 0 | done; nothing to report (or differences not asked to fail on) |
| 1 | findings: `score --ci` strict mismatches, `diff` differences (any differing id, retokenizations included), `verify-template` failures, `demo` misses |
| 2 | usage or input error: a bad argument, a file that cannot be read, a bad record under `--on-error fail`, an empty dump, a missing optional package |
| 3 | internal error: a bug in tito_fast (rerun with `--debug` and report the traceback); or a worker process died (`a worker died: signal 9 (SIGKILL)`, reports marked INCOMPLETE) |
| 130 | interrupted (Ctrl-C, SIGINT); reports written so far are marked INCOMPLETE |
| 143 | terminated (SIGTERM, as Slurm, Kubernetes and Ray stop a job): as 130 |

Outputs are written whole or not at all (a temporary file in the same folder,
renamed into place; none is left behind); a device (`/dev/null`) or a FIFO is
written in place, never replaced, and a folder is refused.

Example:
    >>> from tito_fast.cli.main import cli
    >>> cli("demo", "--sessions", "20", "--turns", "4", "--quiet")
    0
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import traceback
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any, NoReturn

from tito_fast._core import __version__
from tito_fast._core import keep_freed_memory as _core_keep_freed_memory
from tito_fast.chat.messages import MATCHERS as MESSAGE_MATCHERS
from tito_fast.chat.presets import FAMILIES
from tito_fast.chat.templates import FIXED_TEMPLATES, find_by_name
from tito_fast.cli.demo import print_summary, run_demo
from tito_fast.cli.progress import Progress
from tito_fast.errors import (
    MissingDependency,
    UsageError,
    exit_code_of,
    WorkerDiedError,
)
from tito_fast.score import stopping
from tito_fast.score.dump import json_error
from tito_fast.score.outputs import check_outputs as _check_outputs
from tito_fast.score.outputs import discard_pending
from tito_fast.score.outputs import write_output as _write
from tito_fast.score.results import SUFFIXES
from tito_fast.score.run import METRIC_VERSIONS, resolve_family
from tito_fast.session.verify import for_template, verify_family
from tito_fast.tokenizer.load import load_tokenizer

#: The exit codes of `tito-fast` (see the module doc).
EXIT_CODES = {"ok": 0, "findings": 1, "input": 2, "bug": 3, "interrupted": 130, "terminated": 143}


class _Parser(argparse.ArgumentParser):
    """argparse with its errors as one line (`tito-fast: error: ...`), not usage + message."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{message} (see {self.prog} --help)")


def _parser() -> argparse.ArgumentParser:
    common = _Parser(add_help=False)
    common.add_argument("--debug", action="store_true", help="show the traceback of an error")
    parser = _Parser(prog="tito-fast", description=__doc__.split("\n\n")[0] if __doc__ else None, parents=[common])
    parser.add_argument("--version", action="version", version=f"tito_fast {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    demo = sub.add_parser("demo", help="find planted TITO faults in generated sessions", parents=[common])
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
        parents=[common],
    )
    _model_args(verify)
    verify.add_argument(
        "--backend", choices=["native", "jinja", "hf"], default="native",
        help="what renders the template: native (Rust, the default; jinja2 where it cannot render exactly), "
        "jinja (our jinja2 environment) or hf (the tokenizer's apply_chat_template)",
    )  # fmt: skip
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
    )  # fmt: skip
    verify.add_argument("--json", metavar="OUT", help="also write the results as JSON to OUT ('-' for stdout)")
    verify.add_argument(
        "--derive", metavar="OUT.json",
        help="derive a family declaration from the tokenizer's template (or --template) alone, verify it and write it to "
        "OUT.json (usable as --family OUT.json; a --template given is part of it): exit 0 when TITO holds with it, 1 "
        "when it cannot (the shapes that break and what would fix them are printed); it renders with the tokenizer's "
        "apply_chat_template and replays thinking on and off when the template reads enable_thinking (--backend and "
        "--thinking are not used)",
    )  # fmt: skip
    verify.add_argument("--quiet", action="store_true", help="no progress and no table")
    score = sub.add_parser(
        "score",
        help="score a rollout dump: the reference's session mismatch metrics, diagnosed",
        description="Compare every session's accumulated ids with a fresh chat-template render (the reference's "
        "compute_session_mismatch), diagnose each difference (role, message, turn, kind) and aggregate.",
        parents=[common],
    )
    score.add_argument("dump", help="a .jsonl, .jsonl.gz or .parquet dump (schema in docs/scoring.md)")
    _model_args(score)
    score.add_argument(
        "--mode", choices=["full", "fast"], default="full",
        help="full: encode every render whole, so retokenization drift shows (default); "
        "fast: encode only differing segments (retokenization not checked)",
    )  # fmt: skip
    score.add_argument("--workers", type=_positive, default=1, help="processes (default 1)")
    score.add_argument(
        "--threads", type=_positive, default=None,
        help="threads of the native session check in this process (default: one per core; workers use one each)",
    )  # fmt: skip
    score.add_argument("--on-error", choices=["fail", "skip"], default="fail", help="stop at a bad record (default) or skip it")
    score.add_argument(
        "--metric-version", choices=METRIC_VERSIONS, default="v1", help="the session-server version in the metric names"
    )
    score.add_argument("--out", metavar="RESULTS", help="stream every session's result to RESULTS (.jsonl or .parquet)")
    score.add_argument(
        "--json", metavar="OUT", help="write the summary and every session's results as JSON ('-' for stdout)"
    )
    score.add_argument("--report", metavar="OUT.html", help="write a self-contained HTML report with plots")
    score.add_argument("--markdown", metavar="OUT.md", help="write the summary as Markdown")
    score.add_argument("--worst", type=_non_negative, default=5, help="worst sessions shown in the reports (default 5)")
    score.add_argument("--ci", action="store_true", help="exit 1 when a strict mismatch type has a non-zero rate")
    score.add_argument("--quiet", action="store_true", help="no progress bar and no table")
    diff = sub.add_parser(
        "diff",
        help="two id sequences, or a dump session against its render, side by side by segment",
        description="With one file: a dump session (--session, default the first) against a fresh render of its "
        "messages. With two: two JSON files holding id lists (expected, actual). Every difference is shown with "
        "the differing ids of each side and their text, retokenizations (same text, other ids) included; exits 1 "
        "on any difference, 0 when the ids are equal (after the trailing ids the reference trims).",
        parents=[common],
    )
    diff.add_argument("inputs", nargs="+", metavar="FILE", help="DUMP, or EXPECTED.json ACTUAL.json")
    _model_args(diff)
    diff.add_argument("--session", help="session_id (or line/row number) in the dump")
    diff.add_argument("--width", type=_positive, default=None, help="terminal width (default: detected)")
    diff.add_argument("--context", type=_non_negative, default=1, help="equal segments kept around each difference")
    diff.add_argument("--color", choices=["auto", "always", "never"], default="auto")
    asm = sub.add_parser(
        "assemble",
        help="captured LLM calls to trainable chains: loss masks, logprobs, forks where history was rewritten",
        description="Match every call's prompt against its session's chains (longest common prefix in Rust), extend "
        "them, and fork, realign or drop where a call does not extend one (retry, seam drift, rewritten history, "
        "sub-agent); every sampled id is delivered with loss 1 once, or counted as masked or dropped.",
        parents=[common],
    )
    asm.add_argument("calls", help="a .jsonl, .jsonl.gz or .parquet capture file (schema in docs/assemble.md)")
    asm.add_argument("--tokenizer", help="tokenizer directory or fixture:NAME (trim tolerance, roles, diagnosis)")
    asm.add_argument("--family", default=None, help="family name (default: the one the tokenizer's template identifies)")
    asm.add_argument(
        "--policy", action="append", metavar="POLICY|CAUSE=POLICY", default=None,
        help="fork, realign or drop for every cause, or CAUSE=POLICY (causes: seam_drift, rollback, rewrite, "
        "new_root; repeatable); default: seam_drift=realign, the rest fork",
    )  # fmt: skip
    asm.add_argument("--realign-window", type=_non_negative, default=8, help="seam drift: within this many ids of a chain's end")
    asm.add_argument("--out", metavar="CHAINS", help="write the chains to CHAINS (.parquet or .jsonl)")
    asm.add_argument(
        "--leaves", choices=["all", "drop_retries"], default="all",
        help="one chain per leaf of each session's forest (all, the default), or drop the attempts a retry superseded",
    )  # fmt: skip
    asm.add_argument(
        "--matcher", choices=list(MESSAGE_MATCHERS), default=None,
        help="classify a call whose ids extend no chain against the call whose messages it extends, by this message matcher",
    )
    asm.add_argument("--packed", action="store_true", help="write --out (.parquet) in packed form: each shared prefix once")
    asm.add_argument("--json", metavar="OUT", help="write the summary, events and bad records as JSON ('-' for stdout)")
    asm.add_argument("--report", metavar="OUT.html", help="write a self-contained HTML report with plots")
    asm.add_argument("--on-error", choices=["fail", "skip"], default="fail", help="stop at a bad record (default) or skip it")
    asm.add_argument("--threads", type=_positive, default=None, help="threads for the matching (default: one per core)")
    asm.add_argument("--quiet", action="store_true", help="no progress and no table")
    return parser


def cli(*args: str) -> int:
    """Run the command line with `args`; returns the exit code (see `EXIT_CODES`).

    SIGTERM stops it as Ctrl-C does (`tito_fast.score.stopping`), with 143
    for 130; no temporary output file outlives it."""
    try:
        with stopping.terminate_as_interrupt():
            return _run(args)
    finally:
        discard_pending()


def _run(args: tuple[str, ...]) -> int:
    debug = "--debug" in args
    try:
        try:
            ns = _parser().parse_args(args)
        except SystemExit as e:  # --help, --version
            return int(e.code or 0)
        if ns.command == "verify-template":
            return _verify_template(ns)
        if ns.command == "score":
            return _score(ns)
        if ns.command == "diff":
            return _diff(ns)
        if ns.command == "assemble":
            return _assemble(ns)
        return _demo(ns)
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM (`stopping.Terminated`)
        if debug:
            traceback.print_exc()
        sys.stderr.write(f"\ntito-fast: {stopping.describe(e)}\n")
        return stopping.exit_code(e)
    except WorkerDiedError as e:  # killed (out of memory?), not a bug of tito_fast
        if debug:
            traceback.print_exc()
        sys.stderr.write(f"tito-fast: error: {e}\n")
        return EXIT_CODES["bug"]
    except Exception as e:
        if debug:
            traceback.print_exc()
        code = exit_code_of(e)  # the catalogue's errors: the input's, not tito_fast's
        if code is None and isinstance(e, OSError):
            code = EXIT_CODES["input"]  # a file that cannot be read or written
        if code is not None:
            sys.stderr.write(f"tito-fast: error: {_error_line(e, args)}\n")
            return code
        # a bug: say so, in one line, and how to report it
        sys.stderr.write(
            f"tito-fast: internal error: {type(e).__name__}: {_one_line(e)}; this is a bug in tito_fast "
            "(rerun with --debug for the traceback and report it)\n"
        )
        return EXIT_CODES["bug"]


def _error_line(e: BaseException, args: tuple[str, ...]) -> str:
    """The one line of an input error; a missing package is named with the
    command that needs it and the `score` extra, which installs them all."""
    if isinstance(e, MissingDependency):
        command = next((a for a in args if not a.startswith("-")), "")
        return e.message(f"tito-fast {command}".strip(), prefer="score")
    return _one_line(e)


def _one_line(e: BaseException) -> str:
    if isinstance(e, OSError) and e.filename is not None:
        return f"{e.filename}: {e.strerror or e}"
    text = " ".join(str(e).split())
    return text or type(e).__name__


def _positive(text: str) -> int:
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _non_negative(text: str) -> int:
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


def _model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tokenizer", required=True, help="tokenizer directory (or fixture:NAME for a test fixture)")
    p.add_argument(
        "--family", default=None,
        help="family name, or a JSON file declaring a FamilyConfig (default: the records' family field, else the "
        f"family the tokenizer's chat template identifies); families: {', '.join(sorted(FAMILIES))}",
    )  # fmt: skip
    p.add_argument("--template", metavar="FILE", help="chat template file replacing the tokenizer's")
    p.add_argument(
        "--encoder", metavar="FILE",
        help="DeepSeek V3.2/V4's encoding_dsv32.py / encoding_dsv4.py (default: found with Miles, SGLang, "
        "miles-tito-tokenizers, or with --trust-encoder next to the tokenizer or in its encoding/ folder)",
    )  # fmt: skip
    p.add_argument(
        "--trust-encoder", action="store_true",
        help="load a DeepSeek encoder file found in the tokenizer's folder (this runs its code)",
    )  # fmt: skip


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"not valid JSON: {json_error(e)}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("must be a JSON object")
    return value


def _input_file(path: str, what: str) -> Path:
    p = Path(path)
    if not p.exists():
        raise UsageError(f"{what} {path}: no such file")
    if p.is_dir():
        raise UsageError(f"{what} {path}: is a folder, not a file")
    if not p.is_file():
        raise UsageError(f"{what} {path}: not a file")
    return p


def _family_arg(value: str | None) -> Any:
    if value is None or not value.endswith(".json"):
        if value is not None and value not in FAMILIES:
            raise UsageError(
                f"--family {value!r}: unknown family; families: {', '.join(sorted(FAMILIES))} "
                "(or a JSON file declaring a FamilyConfig)"
            )
        return value
    p = _input_file(value, "--family")
    try:
        return json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise UsageError(f"--family {value}: invalid JSON: {json_error(e)}") from None


def _template_arg(path: str | None) -> str | None:
    return None if path is None else _input_file(path, "--template").read_text(encoding="utf-8")


def _encoder_arg(path: str | None) -> str | None:
    return None if path is None else str(_input_file(path, "--encoder"))


def _demo(ns: argparse.Namespace) -> int:
    if ns.sessions < 1 or ns.turns < 2:
        raise UsageError("--sessions must be >= 1 and --turns >= 2")
    _check_outputs({"--json": ns.json}, [])
    summary = run_demo(ns.sessions, ns.turns, ns.seed, ns.threads, sys.stderr, ns.quiet)
    if not ns.quiet:
        print_summary(summary, sys.stdout)
    if ns.json:
        _write(ns.json, json.dumps({**asdict(summary), "ids_per_second": summary.ids_per_second}, indent=2), "--json")
    return 1 if summary.missed or summary.false_alarms else 0


def _say(ns: argparse.Namespace, text: str) -> None:
    if not ns.quiet:
        sys.stderr.write(f"tito-fast: {text}\n")


def _score(ns: argparse.Namespace) -> int:
    from tito_fast.score.files import ScoreOptions, score_files

    if _AS_COMMAND:
        keep_freed_memory()
    if ns.out is not None and Path(ns.out).suffix not in SUFFIXES:
        raise UsageError(f"--out {ns.out}: name it .jsonl or .parquet")
    _check_outputs(
        {"--out": ns.out, "--json": ns.json, "--report": ns.report, "--markdown": ns.markdown},
        [ns.dump, ns.template, ns.encoder, ns.family if ns.family and ns.family.endswith(".json") else None, ns.tokenizer],
    )
    options = ScoreOptions(
        ns.dump, ns.tokenizer, _family_arg(ns.family), template=_template_arg(ns.template), encoder=_encoder_arg(ns.encoder),
        trust_encoder=ns.trust_encoder, mode=ns.mode, workers=ns.workers, threads=ns.threads, on_error=ns.on_error,
        metric_version=ns.metric_version, worst=ns.worst, ci=ns.ci, out=ns.out, json=ns.json, report=ns.report,
        markdown=ns.markdown,
    )  # fmt: skip
    bar = Progress(0, sys.stderr, ns.quiet, verb="read", unit="records")
    done = score_files(options, progress=bar, say=lambda note: _say(ns, note))
    if done.problem:
        sys.stderr.write(done.problem)
    elif done.skipped:
        _say(ns, done.skipped)
    if not ns.quiet:
        (sys.stderr if ns.json == "-" else sys.stdout).write(done.table)  # stdout carries the JSON then
    for flag, path, text in done.reports:
        _write(path, text, flag)
    if done.stream.stopped_by is not None:
        return stopping.exit_code(done.stream.stopped_by)
    if done.stream.worker_died is not None:
        return EXIT_CODES["bug"]
    if not done.summary.complete:
        return EXIT_CODES["input"]
    if ns.ci and done.ci_failures:
        sys.stderr.write("tito-fast: --ci: " + "; ".join(done.ci_failures) + "\n")
        return EXIT_CODES["findings"]
    return EXIT_CODES["ok"]


def _diff(ns: argparse.Namespace) -> int:
    from tito_fast.score.diff import DiffOptions, diff_files

    if len(ns.inputs) > 2:
        raise UsageError("give a dump, or two id files (EXPECTED.json ACTUAL.json)")
    for path in ns.inputs:
        _input_file(path, "input")
    options = DiffOptions(
        tuple(ns.inputs), ns.tokenizer, _family_arg(ns.family), template=_template_arg(ns.template),
        encoder=_encoder_arg(ns.encoder), trust_encoder=ns.trust_encoder, session=ns.session,
        width=ns.width or shutil.get_terminal_size((120, 24)).columns, context=ns.context,
        colour=ns.color == "always" or (ns.color == "auto" and sys.stdout.isatty() and not os.environ.get("NO_COLOR")),
    )  # fmt: skip
    done = diff_files(options, say=lambda note: print(f"tito-fast: {note}", file=sys.stderr))
    sys.stdout.write(done.text)
    return EXIT_CODES["findings"] if done.differs else EXIT_CODES["ok"]


def _verify_template(ns: argparse.Namespace) -> int:
    _check_outputs({"--json": ns.json, "--derive": ns.derive}, [ns.template, ns.encoder, ns.tokenizer])
    if ns.derive is not None:
        if ns.family is not None:
            raise UsageError("--derive derives the family from the template: leave out --family")
        if ns.derive == "-" and ns.json == "-":
            raise UsageError("--derive - and --json -: only one of them may write to stdout")
        return _derive(ns, load_tokenizer(ns.tokenizer))
    tok = load_tokenizer(ns.tokenizer)
    family = _family_arg(ns.family)
    if family is None:
        family, note = resolve_family(None, tok)
        _say(ns, note)
    # What is verified is the given template, or the tokenizer's own: never Miles' fixed
    # template in its place (the summary names that one when it exists).
    template, label = _verify_template_file(ns.template)
    subject = for_template(
        tok, family, ns.chat_template_kwargs, template=template, template_label=label,
        encoder_path=_encoder_arg(ns.encoder), trust_encoder=ns.trust_encoder, backend=ns.backend,
    )  # fmt: skip
    tito, refused = subject.tito, subject.refused  # a refused template is replayed anyway to show where it breaks
    if not ns.quiet:
        sys.stderr.write(f"verify-template: family {tito.family}, template: {subject.source}\n")
        sys.stderr.write(f"  renderer: {tito.renderer_note}\n")
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
        sys.stdout.write(f"verified: {subject.source}\n")
        if subject.fixed_hint:
            sys.stdout.write(f"note: {subject.fixed_hint}\n")
    if ns.json:
        payload = {
            "family": tito.family, "template": subject.source, "refused": refused,
            "fixed_template": subject.fixed_template, "fixed_template_note": subject.fixed_hint,
            "results": [r.to_dict() for r in results],
        }  # fmt: skip
        _write(ns.json, json.dumps(payload, indent=2, ensure_ascii=False), "--json")
    return EXIT_CODES["findings"] if failed or refused or not any(r.ok for r in results) else EXIT_CODES["ok"]


def _derive(ns: argparse.Namespace, tok: Any) -> int:
    """verify-template --derive: a family declaration from the template alone, verified."""
    from tito_fast.session.derive import derive_family

    template, label = _verify_template_file(ns.template)
    name = Path(ns.derive).stem if ns.derive != "-" else "derived"
    done = derive_family(tok, template=template, name=name, template_kwargs=ns.chat_template_kwargs)
    payload = json.dumps(done.declaration(), indent=2, ensure_ascii=False) + "\n"
    _write(ns.derive, payload, "--derive")
    if not ns.quiet:
        out = sys.stderr if ns.derive == "-" else sys.stdout
        passed = sum(r.ok for r in done.results)
        failed = sum(not r.ok and not r.skipped for r in done.results)
        skipped = sum(bool(r.skipped) for r in done.results)
        out.write(f"derived family {done.config.name!r} from {label or done.template_source}:\n")
        for step in done.steps:
            out.write(f"  - {step}\n")
        out.write(f"replays with it: {passed} passed, {failed} failed, {skipped} skipped\n")
        out.write("TITO holds with this declaration" if done.holds else done.fix)
        out.write(f"\nwritten: {ns.derive}\n" if ns.derive != "-" else "\n")
    if ns.json:
        results = {"declaration": done.declaration(), "holds": done.holds, "steps": done.steps, "fix": done.fix,
                   "results": [r.to_dict() for r in done.results]}  # fmt: skip
        _write(ns.json, json.dumps(results, indent=2, ensure_ascii=False), "--json")
    return EXIT_CODES["ok"] if done.holds else EXIT_CODES["findings"]


def _verify_template_file(value: str | None) -> tuple[str | None, str]:
    """verify-template's --template: a file, or the name of a Miles fixed template
    (e.g. qwen3_fixed.jinja) read from the installed package when no such file exists."""
    if value is None:
        return None, ""
    if not Path(value).exists() and value in FIXED_TEMPLATES.values():
        fixed = find_by_name(value)
        if fixed is None:
            raise UsageError(f"--template {value}: Miles' fixed template, not installed; pip install 'tito_fast[miles]'")
        return fixed.text, f"--template {value} ({fixed.origin})"
    return _template_arg(value), f"--template {value}"


def _policy_arg(values: list[str] | None) -> str | dict[str, str] | None:
    if not values:
        return None
    plain = [v for v in values if "=" not in v]
    if plain and len(values) > 1:
        raise UsageError("--policy: give one POLICY for every cause, or CAUSE=POLICY items, not both")
    if plain:
        return plain[0]
    return dict(v.split("=", 1) for v in values)


def _assemble(ns: argparse.Namespace) -> int:
    from tito_fast.chains.job import AssembleOptions, assemble_files

    if ns.out is not None and Path(ns.out).suffix not in (".parquet", ".jsonl"):
        raise UsageError(f"--out {ns.out}: name it .parquet or .jsonl")
    if ns.packed and (ns.out is None or Path(ns.out).suffix != ".parquet"):
        raise UsageError("--packed: the packed form is written with --out CHAINS.parquet")
    _check_outputs({"--out": ns.out, "--json": ns.json, "--report": ns.report}, [ns.calls, ns.tokenizer])
    options = AssembleOptions(
        ns.calls, tokenizer=ns.tokenizer, family=ns.family, policy=_policy_arg(ns.policy), realign_window=ns.realign_window,
        on_error=ns.on_error, threads=ns.threads, leaves=ns.leaves, matcher=ns.matcher, out=ns.out, packed=ns.packed,
        json=ns.json, report=ns.report,
    )  # fmt: skip
    done = assemble_files(options, progress=Progress(0, sys.stderr, ns.quiet, verb="assembled", unit="sessions"))
    if done.skipped:
        _say(ns, done.skipped)
    if not ns.quiet:
        (sys.stderr if ns.json == "-" else sys.stdout).write(done.table)
    return EXIT_CODES["ok"]


#: What the command's own process keeps of freed memory (`_core.keep_freed_memory`):
#: up to 256 MiB of free heap, and blocks up to 32 MiB from the heap (the
#: ceiling of glibc's own sliding threshold).
KEEP_FREED = (256 << 20, 32 << 20)


#: Whether `cli` runs as the `tito-fast` command (`main`): then `score` may
#: change what its own process does (`keep_freed_memory`); a library user's
#: or a test's `cli(...)` changes nothing of the process it runs in.
_AS_COMMAND = False


def main() -> None:
    """Entry point of the `tito-fast` script."""
    global _AS_COMMAND
    _AS_COMMAND = True
    raise SystemExit(cli(*sys.argv[1:]))


def keep_freed_memory(env: Mapping[str, str] = os.environ) -> bool:
    """Have this process's C allocator keep freed memory (`KEEP_FREED`), as
    `tito-fast score` does: a differing session's render and ids live until
    its diagnosis, and memory handed back to the system is faulted in again,
    page by page, by the next batch (on a 2-core VM that made a differing
    session's check 0.2 ms dearer than a clean one's; `assemble` showed no
    gain, so only `score` asks). Settings a user gave glibc
    (`GLIBC_TUNABLES=glibc.malloc.*`, `MALLOC_*_` variables) are kept."""
    if "glibc.malloc." in env.get("GLIBC_TUNABLES", "") or any(k.startswith("MALLOC_") and k.endswith("_") for k in env):
        return False
    return _core_keep_freed_memory(*KEEP_FREED)

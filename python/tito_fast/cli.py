"""The `tito-fast` command line.

`tito-fast demo` builds synthetic multi-turn sessions the way a TITO trainer
does (a TokenBuffer per session, the Qwen3 splice at every turn, a prefix
check per turn), plants known faults in a share of the fresh renders, and
finds them again with the batch kernel, printing what it planted next to
what it found. It needs no tokenizer and no network.

Example:
    >>> from tito_fast.cli import cli
    >>> cli("demo", "--sessions", "20", "--turns", "4", "--quiet")
    0
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any, TextIO

import numpy as np

import tito_fast

IM_START, IM_END, NEWLINE = 151644, 151645, 198
VOCAB = 151_643
FAULTS = ("none", "retokenized", "missing_newline", "changed_content")


@dataclass
class DemoSummary:
    """What the demo planted and what the batch check found."""

    sessions: int
    turns: int
    total_ids: int
    planted: dict[str, int]
    found_mismatching: int
    missed: int
    false_alarms: int
    median_first_divergence: float | None
    seconds_build: float
    seconds_check: float

    @property
    def ids_per_second(self) -> float:
        return 2 * self.total_ids / max(self.seconds_check, 1e-9)


class _Progress:
    """A progress bar on a terminal; a line per tenth of the work elsewhere."""

    def __init__(self, total: int, out: TextIO, quiet: bool) -> None:
        self.total, self.out, self.quiet = total, out, quiet
        self.tty = out.isatty()
        self.shown = -1

    def update(self, done: int) -> None:
        if self.quiet or not self.total:
            return
        step = 100 * done // self.total if self.tty else 10 * (10 * done // self.total)
        if step == self.shown:
            return
        self.shown = step
        if self.tty:
            filled = 30 * done // self.total
            self.out.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {done}/{self.total} sessions")
            if done == self.total:
                self.out.write("\n")
        else:
            self.out.write(f"built {done}/{self.total} sessions\n")
        self.out.flush()


def _build_session(rng: np.random.Generator, turns: int) -> tuple[np.ndarray, list[int]]:
    """The engine's ids of one session, turn by turn, with the Qwen3 splice."""
    buf = tito_fast.TokenBuffer()
    stored: list[int] = []
    for _ in range(turns):
        body = rng.integers(0, VOCAB, size=int(rng.integers(50, 400))).tolist()
        incremental = [NEWLINE, IM_START, *body[:3], NEWLINE] if stored else [IM_START, *body[:3], NEWLINE]
        prompt = tito_fast.merge_tokens(stored, incremental, append_after=(IM_END, NEWLINE))
        completion = [*body[3:], IM_END]  # the model stops at <|im_end|>, no newline
        tito_fast.check_prefix(stored, prompt)  # TITO holds turn over turn
        buf.extend(prompt[len(buf) :] + completion)
        buf.checkpoint()
        stored = prompt + completion
    return buf.to_numpy(), stored


def _plant(rng: np.random.Generator, ids: np.ndarray, fault: str) -> tuple[np.ndarray, int | None]:
    """A fresh render of `ids` with `fault` planted; returns it and the fault's position."""
    render = np.append(ids, NEWLINE).astype(np.uint32)  # the template ends every message with "\n"
    if fault == "none":
        return render, None
    if fault == "missing_newline":
        seams = np.flatnonzero(render[:-1] == IM_END)
        pos = int(rng.choice(seams[:-1])) + 1 if len(seams) > 1 else len(ids)
        return np.delete(render, pos), pos
    pos = int(rng.integers(1, len(ids) - 2))
    render = render.copy()
    if fault == "retokenized":  # two ids re-encode as one
        render = np.delete(render, pos)
        render[pos] = (int(render[pos]) * 7 + 1) % VOCAB
    else:  # changed_content
        render[pos] = (int(render[pos]) + 1) % VOCAB
    return render, pos


def run_demo(sessions: int, turns: int, seed: int, threads: int | None, err: TextIO, quiet: bool) -> DemoSummary:
    rng = np.random.default_rng(seed)
    t0 = time.perf_counter()
    engine: list[np.ndarray] = []
    renders: list[np.ndarray] = []
    planted: list[tuple[str, int | None]] = []
    progress = _Progress(sessions, err, quiet)
    for i in range(sessions):
        ids, _ = _build_session(rng, turns)
        fault = FAULTS[0] if rng.random() < 0.7 else str(rng.choice(FAULTS[1:]))
        render, pos = _plant(rng, ids, fault)
        engine.append(np.append(ids, NEWLINE).astype(np.uint32))
        renders.append(render)
        planted.append((fault, pos))
        progress.update(i + 1)
    # One CSR batch per side, as a dump's token column would be laid out.
    a_off = np.cumsum([0] + [len(x) for x in engine], dtype=np.int64)
    b_off = np.cumsum([0] + [len(x) for x in renders], dtype=np.int64)
    a_values, b_values = np.concatenate(engine), np.concatenate(renders)
    t1 = time.perf_counter()
    lcp = tito_fast.common_prefix_len_csr(a_values, a_off, b_values, b_off, threads=threads)
    t2 = time.perf_counter()
    lens = np.minimum(np.diff(a_off), np.diff(b_off))
    mismatching = (lcp < lens) | (np.diff(a_off) != np.diff(b_off))
    faulty = np.array([f != "none" for f, _ in planted])
    return DemoSummary(
        sessions=sessions,
        turns=turns,
        total_ids=int(a_off[-1]),
        planted=dict(Counter(f for f, _ in planted)),
        found_mismatching=int(mismatching.sum()),
        missed=int((faulty & ~mismatching).sum()),
        false_alarms=int((~faulty & mismatching).sum()),
        median_first_divergence=float(np.median(lcp[mismatching])) if mismatching.any() else None,
        seconds_build=t1 - t0,
        seconds_check=t2 - t1,
    )


def _print_summary(s: DemoSummary, out: TextIO) -> None:
    rows = [
        ("sessions", f"{s.sessions} x {s.turns} turns"),
        ("ids per side", f"{s.total_ids:,}"),
        ("planted faults", ", ".join(f"{k}={v}" for k, v in sorted(s.planted.items()))),
        ("sessions found mismatching", str(s.found_mismatching)),
        ("planted faults missed", str(s.missed)),
        ("false alarms", str(s.false_alarms)),
        ("median first divergence", "-" if s.median_first_divergence is None else f"{s.median_first_divergence:,.0f}"),
        ("build (TokenBuffer, splice, checks)", f"{s.seconds_build:.3f} s"),
        ("batch check", f"{s.seconds_check * 1e3:.2f} ms ({s.ids_per_second / 1e6:,.0f} M ids/s)"),
    ]
    width = max(len(k) for k, _ in rows)
    for k, v in rows:
        out.write(f"{k:<{width}}  {v}\n")


def cli(*args: str) -> int:
    """Run the command line with `args`; returns the exit code."""
    parser = argparse.ArgumentParser(prog="tito-fast", description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--version", action="version", version=f"tito_fast {tito_fast.__version__}")
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
    verify.add_argument("--tokenizer", required=True, help="tokenizer directory (or fixture:NAME for a test fixture)")
    verify.add_argument("--family", default="default", help="family name, or a JSON file declaring a FamilyConfig")
    verify.add_argument("--template", metavar="FILE", help="chat template file replacing the tokenizer's")
    verify.add_argument("--json", metavar="OUT", help="also write the results as JSON to OUT ('-' for stdout)")
    verify.add_argument("--quiet", action="store_true", help="no progress and no table")
    ns = parser.parse_args(args)
    if ns.command == "verify-template":
        return _verify_template(ns)
    if ns.sessions < 1 or ns.turns < 2:
        parser.error("--sessions must be >= 1 and --turns >= 2")
    summary = run_demo(ns.sessions, ns.turns, ns.seed, ns.threads, sys.stderr, ns.quiet)
    if not ns.quiet:
        _print_summary(summary, sys.stdout)
    if ns.json:
        text = json.dumps({**asdict(summary), "ids_per_second": summary.ids_per_second}, indent=2)
        if ns.json == "-":
            print(text)
        else:
            with open(ns.json, "w", encoding="utf-8") as f:
                f.write(text + "\n")
    return 1 if summary.missed or summary.false_alarms else 0


def _load_tokenizer(spec: str) -> Any:
    if spec.startswith("fixture:"):
        from tito_fast import fixtures

        return fixtures.load_tokenizer(spec.split(":", 1)[1])
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(spec)


def _verify_template(ns: argparse.Namespace) -> int:
    from pathlib import Path

    from tito_fast.families import get_tito_tokenizer
    from tito_fast.verify import verify_family

    tok = _load_tokenizer(ns.tokenizer)
    family: Any = ns.family
    if ns.family.endswith(".json"):
        family = json.loads(Path(ns.family).read_text(encoding="utf-8"))
    template = Path(ns.template).read_text(encoding="utf-8") if ns.template else None
    tito = get_tito_tokenizer(tok, family, chat_template=template)
    if not ns.quiet:
        sys.stderr.write(f"verify-template: family {tito.family}, replaying conversations ...\n")
    results = verify_family(tito)
    failed = [r for r in results if not r.ok and not r.skipped]
    if not ns.quiet:
        rows = [("roles", "conversation", "turns", "result", "first divergence (expected | merged)")]
        for r in results:
            result = "pass" if r.ok else ("skip" if r.skipped else "FAIL")
            detail = r.skipped or r.error
            if r.divergence is not None:
                detail = f"id {r.divergence}: {r.expected_text!r} | {r.actual_text!r}"
            rows.append(("{" + ",".join(sorted(r.roles)) + "}", r.name, str(r.turns), result, detail))
        widths = [max(len(row[i]) for row in rows) for i in range(4)]
        for row in rows:
            sys.stdout.write("  ".join(c.ljust(w) for c, w in zip(row[:4], widths)) + "  " + row[4] + "\n")
        passed = sum(r.ok for r in results)
        skipped = sum(bool(r.skipped) for r in results)
        sys.stdout.write(f"\n{tito.family}: {passed} passed, {len(failed)} failed, {skipped} skipped\n")
    if ns.json:
        text = json.dumps({"family": tito.family, "results": [r.to_dict() for r in results]}, indent=2, ensure_ascii=False)
        if ns.json == "-":
            print(text)
        else:
            Path(ns.json).write_text(text + "\n", encoding="utf-8")
    return 1 if failed or not any(r.ok for r in results) else 0


def main() -> None:
    """Entry point of the `tito-fast` script."""
    raise SystemExit(cli(*sys.argv[1:]))

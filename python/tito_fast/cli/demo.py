"""`tito-fast demo`: synthetic multi-turn sessions built the way a TITO trainer
builds them (a TokenBuffer per session, the Qwen3 splice at every turn, a
prefix check per turn), known faults planted in a share of the fresh renders,
and the batch kernel finding them again. It needs no tokenizer and no network.

Example:
    >>> import io
    >>> run_demo(20, 4, seed=0, threads=None, err=io.StringIO(), quiet=True).missed
    0
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass
from typing import TextIO

import numpy as np

from tito_fast._core import TokenBuffer, check_prefix, common_prefix_len_csr, merge_tokens
from tito_fast.cli.progress import Progress

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


def _build_session(rng: np.random.Generator, turns: int) -> tuple[np.ndarray, list[int]]:
    """The engine's ids of one session, turn by turn, with the Qwen3 splice."""
    buf = TokenBuffer()
    stored: list[int] = []
    for _ in range(turns):
        body = rng.integers(0, VOCAB, size=int(rng.integers(50, 400))).tolist()
        incremental = [NEWLINE, IM_START, *body[:3], NEWLINE] if stored else [IM_START, *body[:3], NEWLINE]
        prompt = merge_tokens(stored, incremental, append_after=(IM_END, NEWLINE))
        completion = [*body[3:], IM_END]  # the model stops at <|im_end|>, no newline
        check_prefix(stored, prompt)  # TITO holds turn over turn
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
    progress = Progress(sessions, err, quiet)
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
    lcp = common_prefix_len_csr(a_values, a_off, b_values, b_off, threads=threads)
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


def print_summary(s: DemoSummary, out: TextIO) -> None:
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

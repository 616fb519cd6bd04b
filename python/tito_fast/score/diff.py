"""`tito-fast diff` as one library call: two id sequences, or a dump session
against a fresh render of its messages, side by side by segment.

`diff_files(options)` loads the tokenizer, builds the scorer, reads the
inputs (a dump, or two JSON id files: `read_ids`) and returns a
`DiffOutcome`: the text to print and whether any id differs
(retokenizations included).

Example:
    >>> options = DiffOptions(("examples/qwen3_dump.jsonl",), "fixture:qwen3", "qwen3", session="ex-0001")
    >>> diff_files(options).differs  # doctest: +SKIP
    True
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from tito_fast.errors import ScoreError, UsageError
from tito_fast.score import report
from tito_fast.score.dump import BadRecord, json_error, read_dump
from tito_fast.score.run import resolve_family
from tito_fast.score.scorer import Scorer
from tito_fast.tokenizer.load import load_tokenizer


@dataclass(frozen=True)
class DiffOptions:
    """What a `tito-fast diff` run compares, and how its text is laid out."""

    inputs: tuple[str, ...]  # (DUMP,) or (EXPECTED.json, ACTUAL.json)
    tokenizer: str  # a folder, or fixture:NAME
    family: Any = None  # a name, a FamilyConfig dict, or None (the records', else the template's)
    template: str | None = None  # a chat template text replacing the tokenizer's
    encoder: str | None = None  # DeepSeek's encoder file
    trust_encoder: bool = False
    session: str | None = None  # session_id (or line/row number) in the dump; None: the first readable one
    width: int = 120
    context: int = 1  # equal segments kept around each difference
    colour: bool = False


@dataclass(frozen=True)
class DiffOutcome:
    """The side-by-side text, and whether any id differs."""

    text: str
    differs: bool


def read_ids(path: str) -> npt.NDArray[np.uint32]:
    """A JSON file's id list (or an object's `token_ids` / `ids`), checked as the score job checks ids.

    Raises:
        UsageError: not UTF-8 JSON, not a list, or an item that is not an id in [0, 2**32-1].
    """
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        raise UsageError(f"{path}: invalid JSON: {json_error(e)}") from None
    except UnicodeDecodeError as e:
        raise UsageError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    if isinstance(data, dict):
        data = data.get("token_ids", data.get("ids"))
    if not isinstance(data, list):
        raise UsageError(f"{path}: expected a JSON list of token ids (or an object with 'token_ids')")
    for i, x in enumerate(data):
        if type(x) is not int:
            raise UsageError(f"{path}: item {i} is {json.dumps(x)} ({type(x).__name__}); token ids are integers")
        if not 0 <= x <= 2**32 - 1:
            raise UsageError(f"{path}: item {i} is {x}; token ids are in [0, 2**32-1]")
    return np.asarray(data, dtype=np.uint32)


def diff_files(options: DiffOptions, *, say: Callable[[str], None] | None = None) -> DiffOutcome:
    """Diff `options.inputs`; `say(note)` with how the family was chosen when none was given.

    Raises:
        UsageError: more than two inputs, no such session, or the session is a bad record.
        TokenizerLoadError, FamilyError: the tokenizer or family cannot be had.
    """
    o = options
    if len(o.inputs) > 2:
        raise UsageError("give a dump, or two id files (EXPECTED.json ACTUAL.json)")
    tok = load_tokenizer(o.tokenizer, snapshot=True)
    family = o.family
    if family is None:
        family, note = resolve_family(o.inputs[0] if len(o.inputs) == 1 else None, tok)
        if say is not None:
            say(note)
    scorer = Scorer(
        tok, family, chat_template=o.template, mode="full", encoder_path=o.encoder, trust_encoder=o.trust_encoder
    )
    if len(o.inputs) == 2:
        expected, actual = read_ids(o.inputs[0]), read_ids(o.inputs[1])
        labels = (Path(o.inputs[0]).name, Path(o.inputs[1]).name)
        title = f"{o.inputs[0]} vs {o.inputs[1]}"
        diagnosis = scorer.cmp.diagnose(expected, actual)  # no messages: the rendered blocks are numbered
    else:
        record = None
        for r in read_dump(o.inputs[0]):
            if isinstance(r, BadRecord):
                if o.session is not None and r.session_id == o.session:
                    raise UsageError(f"session {o.session!r} is a bad record ({r.source}): {r.reason}")
                continue
            if o.session is None or o.session in (r.session_id, r.source.rsplit(":", 1)[-1].removeprefix("row ")):
                try:  # a record `score` finds bad (another family, an id outside the vocabulary) is bad here too
                    scorer.check_record(r)
                except ScoreError as e:
                    if o.session is not None:
                        raise UsageError(f"session {o.session!r} is a bad record ({r.source}): {e}") from e
                    continue
                record = r
                break
        if record is None:
            raise UsageError(f"no session {o.session!r} in {o.inputs[0]}" if o.session else f"no readable session in {o.inputs[0]}")
        actual = record.token_ids
        expected, diagnosis = scorer.diagnose(record)  # messages numbered as in the record, as score numbers them
        labels = ("fresh render", "session ids")
        title = f"session {record.session_id} ({record.source})"
    text = report.diff_text(
        scorer.cmp, expected, actual, title=title, labels=labels, colour=o.colour, width=o.width, context=o.context,
        diagnosis=diagnosis,
    )  # fmt: skip
    # Any difference is a finding, retokenizations included (the reference reports none of them).
    return DiffOutcome(text, report.any_difference(scorer.cmp, expected, actual, diagnosis))


__all__ = ["DiffOptions", "DiffOutcome", "diff_files", "read_ids"]

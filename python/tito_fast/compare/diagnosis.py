"""Diagnosis: which role and message a difference belongs to, and what kind it is.

The reference labels a text difference "assistant" only when the segment
right after a special token starts with the assistant marker, so in formats
where the role name sits in its own segment (Llama 3), or where tags inside
an assistant turn are special tokens, assistant bodies are called
non-assistant. Here roles are tracked across the whole sequence from each
format's message markers, and every difference also gets a kind:

- `retokenization`: same text, other ids (invisible to the reference, yet a
  TITO violation: the trainer would see other tokens than the engine);
- `whitespace_only`: the texts differ only in whitespace;
- `splice_seam`: a short difference (at most `SEAM` ids) that reaches a
  boundary token, where turns are spliced together, or a different
  boundary token;
- `content`: anything else.

Example:
    >>> from tito_fast import fixtures, TokenSeqComparator
    >>> tok = fixtures.load_tokenizer("qwen3")  # doctest: +SKIP
    >>> cmp = TokenSeqComparator(tok, "<|im_start|>assistant")  # doctest: +SKIP
    >>> cmp.diagnose(expected_ids, actual_ids).items[0].role  # doctest: +SKIP
    'assistant'
"""

from __future__ import annotations

import difflib
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

import numpy as np

from tito_fast._core import common_prefix_len
from tito_fast.compare.alignment import Alignment, Mismatch, MismatchType, as_list, as_sliceable
from tito_fast.compare.roles import MessageTable, RoleScheme, RoleTracker

#: A difference of at most this many ids, this close to a boundary, is a splice seam.
SEAM = 3


class Aligner(Protocol):
    """What `diagnose` needs of a comparator (`TokenSeqComparator` is one)."""

    tokenizer: Any
    vocab: Any

    def align(self, expected: Any, actual: Any, trim: set[int]) -> Alignment: ...

    def mismatches(self, expected: Any, actual: Any, alignment: Alignment) -> list[Mismatch]: ...

    def decode(self, ids: list[int]) -> str: ...

    def is_assistant_segment(self, ids: Any, starts: list[int], special: Any, idx: int) -> bool: ...

@dataclass
class DiagnosisItem:
    """One difference, located and classified.

    `type` is the reference's mismatch type for it, or None for a pure
    retokenization (which the reference does not report).
    """

    type: str | None
    kind: str
    role: str
    message_index: int
    segment_index: int
    expected_span: tuple[int, int]
    actual_span: tuple[int, int]
    expected_text: str
    actual_text: str
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        """All fields as a dict (spans as lists)."""
        d = asdict(self)
        d["expected_span"], d["actual_span"] = list(self.expected_span), list(self.actual_span)
        return d


@dataclass
class Diagnosis:
    """Every difference between two id sequences, with the reference's own list beside it."""

    items: list[DiagnosisItem]
    reference: list[Mismatch]
    scheme: str | None
    #: Problems with the input itself, e.g. ids outside the tokenizer's
    #: vocabulary (a sign that the two sides used different tokenizers).
    warnings: list[str] = field(default_factory=list)
    #: Where each message of the actual ids starts, and its role.
    actual_table: MessageTable | None = field(default=None, repr=False, compare=False)

    def by_kind(self) -> dict[str, int]:
        """How many items of each kind."""
        return dict(Counter(i.kind for i in self.items))

    def by_role(self) -> dict[str, int]:
        """How many items in messages of each role."""
        return dict(Counter(i.role for i in self.items))

    def to_dict(self) -> dict[str, Any]:
        """Items, the reference list, and the per-kind and per-role counts."""
        return {
            "scheme": self.scheme,
            "warnings": list(self.warnings),
            "items": [i.to_dict() for i in self.items],
            "reference": [m.to_dict() for m in self.reference],
            "by_kind": self.by_kind(),
            "by_role": self.by_role(),
        }


def classify(e_ids: list[int], a_ids: list[int], e_text: str, a_text: str) -> str:
    """The kind of a difference between two id runs that sit between boundaries (see the module docs)."""
    if e_text == a_text:
        return "retokenization"
    if "".join(e_text.split()) == "".join(a_text.split()):
        return "whitespace_only"
    head = common_prefix_len(e_ids, a_ids)
    tail = common_prefix_len(e_ids[head:][::-1], a_ids[head:][::-1])
    e_len, a_len = len(e_ids) - head - tail, len(a_ids) - head - tail
    touches = head == 0 or tail == 0  # the differing ids reach the boundary
    if touches and max(e_len, a_len) <= SEAM:
        return "splice_seam"
    return "content"


def diagnose(cmp: Aligner, tracker: RoleTracker, expected: Any, actual: Any, trim: set[int]) -> Diagnosis:
    """See `TokenSeqComparator.diagnose`."""
    exp, act = as_sliceable(expected), as_sliceable(actual)
    aligned = cmp.align(exp, act, trim)
    reference = cmp.mismatches(exp, act, aligned)  # the reference's list, from the same alignment
    kind, differing = aligned.kind, aligned.differing
    e_starts, a_starts = aligned.expected_starts.tolist(), aligned.actual_starts.tolist()
    e_special, a_special = aligned.expected_special, aligned.actual_special
    e_arr, a_arr = exp[: e_starts[-1]], act[: a_starts[-1]]  # trimmed; lists only of the pairs that differ
    a_table = tracker.table(a_arr)
    items: list[DiagnosisItem] = []
    warnings = _vocabulary_warnings(cmp, {"expected": exp, "actual": act})

    def pair_item(i: int, j: int) -> DiagnosisItem | None:
        es, ee, as_, ae = e_starts[i], e_starts[i + 1], a_starts[j], a_starts[j + 1]
        e_ids, a_ids = as_list(e_arr[es:ee]), as_list(a_arr[as_:ae])
        if e_ids == a_ids:
            return None
        e_text, a_text = cmp.decode(e_ids), cmp.decode(a_ids)
        # Attribute to the message holding the first differing id: a content
        # segment can span several messages when role markers are not special.
        msg, role = a_table.at(min(as_ + common_prefix_len(e_ids, a_ids), ae - 1))
        if e_special[i]:
            return DiagnosisItem(MismatchType.SPECIAL_TOKEN_TYPE.value, "splice_seam", role, msg, i, (es, ee), (as_, ae), e_text, a_text)
        if e_text == a_text:
            ref_type = None
        else:
            assistant = cmp.is_assistant_segment(e_arr, e_starts, e_special, i) and cmp.is_assistant_segment(
                a_arr, a_starts, a_special, j
            )
            ref_type = (MismatchType.ASSISTANT_TEXT if assistant else MismatchType.NON_ASSISTANT_TEXT).value
        kind_ = classify(e_ids, a_ids, e_text, a_text)
        return DiagnosisItem(ref_type, kind_, role, msg, i, (es, ee), (as_, ae), e_text, a_text)

    if kind == "aligned":
        for i in differing.tolist():
            if (item := pair_item(i, i)) is not None:
                items.append(item)
        return Diagnosis(items, reference, tracker.scheme.name if tracker.scheme else None, warnings, a_table)

    # Structures differ: align the two segment lists (special ids, and a
    # digest of each content run) and report each added, removed or changed
    # stretch; stretches that line up segment for segment are compared pairwise.
    def sig(ids: list[int], starts: list[int], special: Any) -> list[Any]:
        return [ids[starts[k]] if special[k] else hash(tuple(ids[starts[k] : starts[k + 1]])) for k in range(len(special))]

    e_list, a_list = as_list(e_arr), as_list(a_arr)
    e_table = tracker.table(e_arr)  # only structural differences name expected-side messages
    matcher = difflib.SequenceMatcher(None, sig(e_list, e_starts, e_special), sig(a_list, a_starts, a_special), autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            continue
        if op == "replace" and i2 - i1 == j2 - j1 and list(e_special[i1:i2]) == list(a_special[j1:j2]):
            for k in range(i2 - i1):
                if (item := pair_item(i1 + k, j1 + k)) is not None:
                    items.append(item)
            continue
        es, ee, as_, ae = e_starts[i1], e_starts[i2], a_starts[j1], a_starts[j2]
        e_ids, a_ids = e_list[es:ee], a_list[as_:ae]
        e_text, a_text = cmp.decode(e_ids) if e_ids else "", cmp.decode(a_ids) if a_ids else ""
        if op == "insert":
            msg, role = a_table.at(as_)
            detail = f"actual adds segments {j1}..{j2 - 1}"
        elif op == "delete":
            msg, role = e_table.at(es)
            detail = f"actual lacks expected segments {i1}..{i2 - 1}"
        else:
            msg, role = a_table.at(as_)
            detail = f"expected segments {i1}..{i2 - 1} differ from actual segments {j1}..{j2 - 1}"
        e_msgs = sorted({e_table.at(p)[0] for p in range(es, ee)})
        a_msgs = sorted({a_table.at(p)[0] for p in range(as_, ae)})
        if e_msgs:
            detail += f"; expected messages {e_msgs[0]}..{e_msgs[-1]}"
        if a_msgs:
            detail += f"; actual messages {a_msgs[0]}..{a_msgs[-1]}"
        kind_ = classify(e_ids, a_ids, e_text, a_text)
        items.append(
            DiagnosisItem(MismatchType.SPECIAL_TOKEN_COUNT.value, kind_, role, msg, i1, (es, ee), (as_, ae), e_text, a_text, detail)
        )
    return Diagnosis(items, reference, tracker.scheme.name if tracker.scheme else None, warnings, a_table)


def _vocabulary_warnings(cmp: Aligner, sides: dict[str, Any]) -> list[str]:
    """Ids the tokenizer does not know: it decodes them as nothing, as the reference does."""
    size = cmp.vocab.size if cmp.vocab is not None else len(cmp.tokenizer)
    out = []
    for name, ids in sides.items():
        arr = np.asarray(ids, dtype=np.int64)
        bad = np.flatnonzero(arr >= size)
        if len(bad):
            out.append(
                f"{name} holds {len(bad)} id(s) outside the tokenizer's {size} (first {int(arr[bad[0]])} at position "
                f"{int(bad[0])}); they decode to nothing: were the ids made by another tokenizer?"
            )
    return out


# RoleScheme and RoleTracker live in tito_fast.compare.roles; named here too for
# the former import path (tito_fast.diagnosis.RoleScheme).
__all__ = ["SEAM", "Aligner", "Diagnosis", "DiagnosisItem", "RoleScheme", "RoleTracker", "classify", "diagnose"]

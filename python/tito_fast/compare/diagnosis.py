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

import bisect
import difflib
from collections import Counter
from collections.abc import Hashable, Sequence
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

    @property
    def vocab_size(self) -> int: ...

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
    #: Where each message of the actual ids starts, and its role (None when nothing needed it).
    actual_table: MessageTable | None = field(default=None, repr=False, compare=False)
    #: The same for the expected ids (the fresh render), which names the items' messages
    #: (built when there is an item).
    expected_table: MessageTable | None = field(default=None, repr=False, compare=False)

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


def diagnose(
    cmp: Aligner,
    tracker: RoleTracker,
    expected: Any,
    actual: Any,
    trim: set[int],
    *,
    aligned: Alignment | None = None,
    expected_table: MessageTable | None = None,
    in_vocabulary: bool = False,
) -> Diagnosis:
    """See `TokenSeqComparator.diagnose`. `aligned` (`cmp.align(expected,
    actual, trim)`) and `expected_table` (`tracker.table` of the trimmed
    expected ids), when already made (the native check makes them on its
    threads: `CheckedSession.alignment`, `expected_table`); `in_vocabulary`:
    the caller knows every id of both sides is in the tokenizer's vocabulary
    (the native check's sessions are), so there is nothing to warn of."""
    exp, act = as_sliceable(expected), as_sliceable(actual)
    if aligned is None:
        aligned = cmp.align(exp, act, trim)
    reference = cmp.mismatches(exp, act, aligned)  # the reference's list, from the same alignment
    kind, differing = aligned.kind, aligned.differing
    e_starts, a_starts = aligned.expected_starts.tolist(), aligned.actual_starts.tolist()
    e_special, a_special = aligned.expected_special, aligned.actual_special
    e_arr, a_arr = exp[: e_starts[-1]], act[: a_starts[-1]]  # trimmed; lists only of the pairs that differ
    # Roles and messages come from the fresh render (the expected side): it
    # says what each message is; the session's own markers may be the fault.
    # The tables are built on the first difference (most sessions have none).
    tables: dict[str, MessageTable] = {} if expected_table is None else {"e": expected_table}

    def e_table_at(pos: int) -> tuple[int, str]:
        if "e" not in tables:
            tables["e"] = tracker.table(e_arr)
        return tables["e"].at(pos)

    def a_table_at(pos: int) -> tuple[int, str]:
        if "a" not in tables:
            tables["a"] = tracker.table(a_arr)
        return tables["a"].at(pos)

    def done() -> Diagnosis:
        scheme = tracker.scheme.name if tracker.scheme else None
        return Diagnosis(items, reference, scheme, warnings, tables.get("a"), tables.get("e"))
    items: list[DiagnosisItem] = []
    warnings = [] if in_vocabulary else _vocabulary_warnings(cmp, {"expected": exp, "actual": act})

    def pair_item(i: int, j: int) -> DiagnosisItem | None:
        es, ee, as_, ae = e_starts[i], e_starts[i + 1], a_starts[j], a_starts[j + 1]
        e_ids, a_ids = as_list(e_arr[es:ee]), as_list(a_arr[as_:ae])
        if e_ids == a_ids:
            return None
        e_text, a_text = cmp.decode(e_ids), cmp.decode(a_ids)
        # Attribute to the message holding the first differing id: a content
        # segment can span several messages when role markers are not special.
        msg, role = e_table_at(min(es + common_prefix_len(e_ids, a_ids), max(ee - 1, es)))
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
        return done()

    # Structures differ: align the two segment lists (special ids, and a
    # digest of each content run) and report each added, removed or changed
    # stretch; stretches that line up segment for segment are compared pairwise.
    def sig(ids: list[int], starts: list[int], special: Any) -> list[Any]:
        return [ids[starts[k]] if special[k] else hash(tuple(ids[starts[k] : starts[k + 1]])) for k in range(len(special))]

    e_list, a_list = as_list(e_arr), as_list(a_arr)
    for op, i1, i2, j1, j2 in sequence_opcodes(sig(e_list, e_starts, e_special), sig(a_list, a_starts, a_special)):
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
        # Where the render has nothing (an insert), the message is the one the
        # extra ids follow in the render.
        msg, role = e_table_at(es if ee > es else max(es - 1, 0))
        if op == "insert":
            detail = f"actual adds segments {j1}..{j2 - 1}"
        elif op == "delete":
            detail = f"actual lacks expected segments {i1}..{i2 - 1}"
        else:
            detail = f"expected segments {i1}..{i2 - 1} differ from actual segments {j1}..{j2 - 1}"
        if ee > es:
            detail += f"; expected blocks {e_table_at(es)[0]}..{e_table_at(ee - 1)[0]}"
        if ae > as_:
            detail += f"; actual blocks {a_table_at(as_)[0]}..{a_table_at(ae - 1)[0]}"
        kind_ = classify(e_ids, a_ids, e_text, a_text)
        items.append(
            DiagnosisItem(MismatchType.SPECIAL_TOKEN_COUNT.value, kind_, role, msg, i1, (es, ee), (as_, ae), e_text, a_text, detail)
        )
    return done()


#: Below this many element pairs `sequence_opcodes` asks difflib directly.
DIFFLIB_PAIRS = 250_000


def sequence_opcodes(a: Sequence[Hashable], b: Sequence[Hashable]) -> list[tuple[str, int, int, int, int]]:
    """difflib-style opcodes turning `a` into `b`, in near-linear time.

    Common ends are matched first; what is left is anchored on elements that
    occur once in each side, in order (patience diff), and each stretch
    between anchors is treated the same way, so the time grows with the
    lengths plus the square of the largest stretch with no unique element,
    not with the product of the lengths (difflib's worst case). Stretches of
    at most `DIFFLIB_PAIRS` element pairs go to difflib, so small inputs
    get exactly difflib's opcodes. Adjacent changes are merged, as difflib
    merges them ("replace" when both sides have elements).

    Example:
        >>> sequence_opcodes("abxcd", "abycd")
        [('equal', 0, 2, 0, 2), ('replace', 2, 3, 2, 3), ('equal', 3, 5, 3, 5)]
    """
    if len(a) * len(b) <= DIFFLIB_PAIRS:
        return [(op, i1, i2, j1, j2) for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()]
    out: list[tuple[str, int, int, int, int]] = []
    _opcodes(a, b, 0, len(a), 0, len(b), out, 0)
    return _merge(out)


def _opcodes(
    a: Sequence[Hashable], b: Sequence[Hashable], i1: int, i2: int, j1: int, j2: int,
    out: list[tuple[str, int, int, int, int]], depth: int,
) -> None:  # fmt: skip
    head = 0
    while i1 + head < i2 and j1 + head < j2 and a[i1 + head] == b[j1 + head]:
        head += 1
    if head:
        out.append(("equal", i1, i1 + head, j1, j1 + head))
        i1, j1 = i1 + head, j1 + head
    tail = 0
    while i1 < i2 - tail and j1 < j2 - tail and a[i2 - 1 - tail] == b[j2 - 1 - tail]:
        tail += 1
    i2, j2 = i2 - tail, j2 - tail
    if (i2 - i1) * (j2 - j1) <= DIFFLIB_PAIRS:
        for op, x1, x2, y1, y2 in difflib.SequenceMatcher(None, a[i1:i2], b[j1:j2], autojunk=False).get_opcodes():
            out.append((op, i1 + x1, i1 + x2, j1 + y1, j1 + y2))
    else:
        anchors = _unique_anchors(a, b, i1, i2, j1, j2) if depth < 64 else []
        if not anchors:
            out.append(("replace", i1, i2, j1, j2))
        else:
            pi, pj = i1, j1
            for ai, aj in anchors:
                _opcodes(a, b, pi, ai, pj, aj, out, depth + 1)
                out.append(("equal", ai, ai + 1, aj, aj + 1))
                pi, pj = ai + 1, aj + 1
            _opcodes(a, b, pi, i2, pj, j2, out, depth + 1)
    if tail:
        out.append(("equal", i2, i2 + tail, j2, j2 + tail))


def _unique_anchors(a: Sequence[Hashable], b: Sequence[Hashable], i1: int, i2: int, j1: int, j2: int) -> list[tuple[int, int]]:
    """Anchors for the stretch: pairs (i, j) of elements that occur once in
    `a[i1:i2]` and once in `b[j1:j2]`; when there are none (a session of
    repeated turns), the k-th occurrence of each element that occurs equally
    often on both sides paired with its k-th. The longest run of pairs in the
    same order on both sides is kept."""
    count_a = Counter(a[i1:i2])
    count_b = Counter(b[j1:j2])
    for limit in (1, None):
        keep = {x for x, n in count_a.items() if count_b.get(x) == n and (limit is None or n <= limit)}
        if not keep:
            continue
        seen: dict[Hashable, list[int]] = {}
        for j in range(j1, j2):
            if b[j] in keep:
                seen.setdefault(b[j], []).append(j)
        taken: Counter[Hashable] = Counter()
        pairs = []
        for i in range(i1, i2):
            x = a[i]
            if x in keep:
                pairs.append((i, seen[x][taken[x]]))
                taken[x] += 1
        run = _increasing_run(pairs)
        if run:
            return run
    return []


def _increasing_run(pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The longest subsequence of `pairs` (in order of i) whose j increase (patience sorting)."""
    tops: list[int] = []  # the j ending the best run of each length
    ends: list[int] = []  # index into pairs of that run's end
    back = [-1] * len(pairs)
    for k, (_, j) in enumerate(pairs):
        n = bisect.bisect_left(tops, j)
        if n == len(tops):
            tops.append(j)
            ends.append(k)
        else:
            tops[n], ends[n] = j, k
        back[k] = ends[n - 1] if n else -1
    run: list[tuple[int, int]] = []
    k = ends[-1] if ends else -1
    while k >= 0:
        run.append(pairs[k])
        k = back[k]
    return run[::-1]


def _merge(ops: list[tuple[str, int, int, int, int]]) -> list[tuple[str, int, int, int, int]]:
    """Adjacent opcodes of one kind joined; adjacent changes joined into one."""
    out: list[tuple[str, int, int, int, int]] = []
    for op in ops:
        if op[1] == op[2] and op[3] == op[4]:
            continue
        if out and (out[-1][0] == "equal") == (op[0] == "equal"):
            prev = out[-1]
            i1, i2, j1, j2 = prev[1], op[2], prev[3], op[4]
            tag = "equal" if op[0] == "equal" else ("replace" if i2 > i1 and j2 > j1 else "delete" if i2 > i1 else "insert")
            out[-1] = (tag, i1, i2, j1, j2)
        else:
            out.append(op)
    return out


def _vocabulary_warnings(cmp: Aligner, sides: dict[str, Any]) -> list[str]:
    """Ids the tokenizer does not know: it decodes them as nothing, as the reference does."""
    size = cmp.vocab_size
    out = []
    for name, ids in sides.items():
        arr = np.asarray(ids)
        if not len(arr) or int(arr.max()) < size:
            continue
        arr = arr.astype(np.int64, copy=False)
        bad = np.flatnonzero(arr >= size)
        if len(bad):
            out.append(
                f"{name} holds {len(bad)} id(s) outside the tokenizer's {size} (first {int(arr[bad[0]])} at position "
                f"{int(bad[0])}); they decode to nothing: were the ids made by another tokenizer?"
            )
    return out


# RoleScheme and RoleTracker live in tito_fast.compare.roles; named here too for
# the former import path (tito_fast.diagnosis.RoleScheme).
__all__ = [
    "DIFFLIB_PAIRS",
    "SEAM",
    "Aligner",
    "Diagnosis",
    "DiagnosisItem",
    "RoleScheme",
    "RoleTracker",
    "classify",
    "diagnose",
    "sequence_opcodes",
]

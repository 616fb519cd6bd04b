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
from typing import TYPE_CHECKING, Any

import numpy as np

from tito_fast._core import common_prefix_len

if TYPE_CHECKING:
    from tito_fast.comparator import Mismatch, TokenSeqComparator

ROLES = ("system", "user", "assistant", "tool")
ALIASES = {"ai": "assistant", "model": "assistant", "observation": "tool", "ipython": "tool", "function": "tool"}
#: A difference of at most this many ids, this close to a boundary, is a splice seam.
SEAM = 3
#: Ids decoded after a marker to read the role name.
ROLE_PROBE_IDS = 8


@dataclass(frozen=True)
class RoleScheme:
    """How a chat format marks where messages start and which role they have.

    Args:
        name: a label for reports.
        fixed: marker token -> role, for formats with one token per role
            (GLM `<|user|>`, DeepSeek `<｜User｜>`, Kimi `<|im_assistant|>`).
        named: marker token -> terminator, for formats that write the role
            name after the marker (ChatML `<|im_start|>` up to "\\n", Llama 3
            `<|start_header_id|>` up to `<|end_header_id|>`, MiniMax `]~b]`).

    Example:
        >>> RoleScheme("k2v3", named={"<|ifm|im_start|>": "\\n"}).name
        'k2v3'
    """

    name: str
    fixed: dict[str, str] = field(default_factory=dict)
    named: dict[str, str] = field(default_factory=dict)


SCHEMES = [
    # Kimi before ChatML: a Kimi vocabulary may also hold <|im_start|>.
    RoleScheme(
        "kimi",
        named={"<|im_system|>": "<|im_middle|>", "<|im_user|>": "<|im_middle|>", "<|im_assistant|>": "<|im_middle|>"},
    ),
    RoleScheme("chatml", named={"<|im_start|>": "\n"}),
    RoleScheme("llama3", named={"<|start_header_id|>": "<|end_header_id|>"}),
    RoleScheme(
        "glm",
        fixed={"<|system|>": "system", "<|user|>": "user", "<|assistant|>": "assistant", "<|observation|>": "tool"},
    ),
    RoleScheme(
        "deepseek",
        fixed={
            "<｜begin▁of▁sentence｜>": "system",
            "<｜User｜>": "user",
            "<｜Assistant｜>": "assistant",
            "<｜tool▁outputs▁begin｜>": "tool",
        },
    ),
    RoleScheme("minimax", named={"]~b]": "\n"}),
]


def _token_id(tokenizer: Any, token: str) -> int | None:
    """The id of `token` when it is a single token of the vocabulary."""
    ids = tokenizer.convert_tokens_to_ids([token])
    tid = ids[0] if ids else None
    if tid is None or tid == getattr(tokenizer, "unk_token_id", None):
        return None
    return int(tid)


def _normalise_role(text: str) -> str:
    role = text.strip().lower()
    role = ALIASES.get(role, role)
    return role if role in ROLES else "unknown"


@dataclass
class MessageTable:
    """Where each message starts in one id sequence, and its role."""

    starts: np.ndarray
    roles: list[str]

    def at(self, pos: int) -> tuple[int, str]:
        """`(message_index, role)` of the id at `pos` (-1, "unknown" before the first message)."""
        i = int(np.searchsorted(self.starts, pos, side="right")) - 1
        return (i, self.roles[i]) if i >= 0 else (-1, "unknown")


class RoleTracker:
    """Finds messages and roles in id sequences of one tokenizer and scheme."""

    def __init__(self, tokenizer: Any, scheme: RoleScheme | None = None, decode: Any = None) -> None:
        self.tokenizer = tokenizer
        self.scheme = scheme if scheme is not None else self.detect(tokenizer)
        # `decode(ids) -> str`: the comparator's (byte table first) when given.
        self._decode = decode if decode is not None else (lambda ids: str(tokenizer.decode(ids, skip_special_tokens=False)))
        self._roles: dict[tuple[int, ...], str] = {}  # (marker, role ids...) -> role
        self.fixed: dict[int, str] = {}
        self.named: dict[int, str | int] = {}
        if self.scheme is not None:
            for tok, role in self.scheme.fixed.items():
                if (tid := _token_id(tokenizer, tok)) is not None:
                    self.fixed[tid] = role
            for tok, term in self.scheme.named.items():
                if (tid := _token_id(tokenizer, tok)) is not None:
                    term_id = _token_id(tokenizer, term) if len(term) > 1 else None
                    self.named[tid] = term_id if term_id is not None else term
        self.markers = np.array(sorted(self.fixed) + sorted(self.named), dtype=np.int64)

    @staticmethod
    def detect(tokenizer: Any) -> RoleScheme | None:
        """The first known scheme whose markers are all single tokens of `tokenizer`."""
        for scheme in SCHEMES:
            markers = list(scheme.fixed) + list(scheme.named)
            if all(_token_id(tokenizer, m) is not None for m in markers[:2]):
                return scheme
        return None

    def table(self, ids: Any) -> MessageTable:
        arr = np.asarray(ids, dtype=np.int64)
        starts = np.flatnonzero(np.isin(arr, self.markers)) if len(self.markers) else np.zeros(0, dtype=np.int64)
        roles = []
        for p in starts.tolist():
            marker = int(arr[p])
            if marker in self.fixed:
                roles.append(self.fixed[marker])
                continue
            term = self.named[marker]
            probe = arr[p + 1 : p + 1 + ROLE_PROBE_IDS].tolist()
            if isinstance(term, int):
                if term in probe:
                    probe = probe[: probe.index(term)]
                key = (marker, *probe)
                role = self._roles.get(key)
                if role is None:
                    role = self._roles[key] = _normalise_role(self._decode(probe))
                roles.append(role)
            else:
                roles.append(_normalise_role(self._decode(probe).split(term, 1)[0]))
        return MessageTable(starts.astype(np.int64), roles)


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


def diagnose(cmp: TokenSeqComparator, tracker: RoleTracker, expected: Any, actual: Any, trim: set[int]) -> Diagnosis:
    """See `TokenSeqComparator.diagnose`."""
    from tito_fast.comparator import _sliceable, _to_list

    exp, act = _sliceable(expected), _sliceable(actual)
    aligned = cmp._align(exp, act, trim)
    reference = cmp._mismatches(exp, act, aligned)  # the reference's list, from the same alignment
    kind, differing, _verdicts, (e_starts, e_special), (a_starts, a_special), _texts = aligned
    e_starts, a_starts = e_starts.tolist(), a_starts.tolist()
    e_arr, a_arr = exp[: e_starts[-1]], act[: a_starts[-1]]  # trimmed; lists only of the pairs that differ
    a_table = tracker.table(a_arr)
    items: list[DiagnosisItem] = []
    warnings = _vocabulary_warnings(cmp, {"expected": exp, "actual": act})

    def pair_item(i: int, j: int) -> DiagnosisItem | None:
        es, ee, as_, ae = e_starts[i], e_starts[i + 1], a_starts[j], a_starts[j + 1]
        e_ids, a_ids = _to_list(e_arr[es:ee]), _to_list(a_arr[as_:ae])
        if e_ids == a_ids:
            return None
        e_text, a_text = cmp._decode(e_ids), cmp._decode(a_ids)
        # Attribute to the message holding the first differing id: a content
        # segment can span several messages when role markers are not special.
        msg, role = a_table.at(min(as_ + common_prefix_len(e_ids, a_ids), ae - 1))
        if e_special[i]:
            return DiagnosisItem("special_token_type", "splice_seam", role, msg, i, (es, ee), (as_, ae), e_text, a_text)
        if e_text == a_text:
            ref_type = None
        else:
            assistant = cmp._is_assistant(e_arr, e_starts, e_special, i) and cmp._is_assistant(
                a_arr, a_starts, a_special, j
            )
            ref_type = "assistant_text" if assistant else "non_assistant_text"
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

    e_list, a_list = _to_list(e_arr), _to_list(a_arr)
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
        e_text, a_text = cmp._decode(e_ids) if e_ids else "", cmp._decode(a_ids) if a_ids else ""
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
            DiagnosisItem("special_token_count", kind_, role, msg, i1, (es, ee), (as_, ae), e_text, a_text, detail)
        )
    return Diagnosis(items, reference, tracker.scheme.name if tracker.scheme else None, warnings, a_table)


def _vocabulary_warnings(cmp: TokenSeqComparator, sides: dict[str, Any]) -> list[str]:
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

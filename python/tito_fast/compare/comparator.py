"""TokenSeqComparator: a drop-in for the Miles comparator, same results, ids first.

Segmentation at boundary ids and the structural check run in Rust; aligned
segments are compared by ids first (identical ids decode identically), then
by bytes from the tokenizer's checked byte table (`tito_fast.tokenizer.vocab`), and
decoded only when the table cannot decide. Texts are decoded only for what
is reported, so the result equals the reference's, which decodes everything.

Example:
    >>> from tito_fast.compare.comparator import TokenSeqComparator
    >>> from tito_fast import fixtures
    >>> tok = fixtures.load_tokenizer("qwen3")  # doctest: +SKIP
    >>> cmp = TokenSeqComparator(tok, "<|im_start|>assistant")  # doctest: +SKIP
    >>> ids = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)  # doctest: +SKIP
    >>> cmp.compare_sequences(tok.encode(ids), tok.encode(ids))  # doctest: +SKIP
    []
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from tito_fast._core import Segmenter
from tito_fast.compare.alignment import (
    ASSISTANT_PROBE_IDS,
    Alignment,
    Mismatch,
    MismatchType,
    Segment,
    Verdict,
    as_list,
    as_sliceable,
)
from tito_fast.compare.diagnosis import Diagnosis, diagnose
from tito_fast.compare.roles import RoleTracker
from tito_fast.tokenizer.backend import special_ids
from tito_fast.tokenizer.vocab import Vocab


def _vocab_of(tokenizer: Any) -> Vocab | None:
    """The tokenizer's byte table, or None when it has no fast backend."""
    try:
        return Vocab.from_tokenizer(tokenizer)
    except TypeError:
        return None


class TokenSeqComparator:
    """Segment id sequences at special tokens and compare them, as the reference does.

    Args:
        tokenizer: a transformers tokenizer (anything with `decode`,
            `all_special_ids` and `added_tokens_decoder`).
        assistant_start_str: decoded text that starts assistant content, e.g.
            `"<|im_start|>assistant"`; None labels every text difference
            non-assistant.
        special_token_ids: boundary ids; None detects them (`collect_special_ids`).
        trim_trailing_ids: ids stripped from both tails before comparing,
            united with those given to `compare_sequences`.
        role_scheme: how the format marks messages and roles, for
            `diagnose` (a `tito_fast.compare.diagnosis.RoleScheme`); None detects it.
    """

    def __init__(
        self,
        tokenizer: Any,
        assistant_start_str: str | None,
        special_token_ids: Iterable[int] | None = None,
        trim_trailing_ids: Iterable[int] | None = None,
        *,
        role_scheme: Any = None,
    ) -> None:
        self.tokenizer = tokenizer
        self._role_scheme = role_scheme
        self._tracker: RoleTracker | None = None
        ids = set(special_token_ids) if special_token_ids is not None else special_ids(tokenizer)
        self._special_ids = ids
        self.vocab = _vocab_of(tokenizer)
        self._segmenter = self.vocab.segmenter(frozenset(ids)) if self.vocab is not None else Segmenter(ids)
        self._assistant_start_str = assistant_start_str
        self._assistant_start = assistant_start_str.encode("utf-8") if assistant_start_str is not None else None
        self._trim_trailing_ids: set[int] | None = set(trim_trailing_ids) if trim_trailing_ids else None
        self._special_text: dict[int, str] = {}

    @property
    def vocab_size(self) -> int:
        """How many ids the tokenizer knows (0 to vocab_size - 1): its byte
        table's count, else `len(tokenizer)`; an id from vocab_size on
        decodes to nothing."""
        return int(self.vocab.size) if self.vocab is not None else len(self.tokenizer)

    @staticmethod
    def collect_special_ids(tokenizer: Any) -> set[int]:
        """`all_special_ids` plus every added token flagged `special=True`
        (`tito_fast.tokenizer.backend.special_ids`).

        Tokens like `<think>` are usually not special, so they are not boundaries.
        """
        return special_ids(tokenizer)

    def segment_by_special_tokens(self, token_ids: Sequence[int] | Any) -> list[Segment]:
        """Split ids into segments: each special id alone, each run of others together."""
        ids = as_sliceable(token_ids)
        starts, special = self._segmenter.segment(ids)
        return [
            Segment(as_list(ids[starts[i] : starts[i + 1]]), bool(special[i])) for i in range(len(special))
        ]

    def compare_sequences(
        self,
        expected_ids: Sequence[int] | Any,
        actual_ids: Sequence[int] | Any,
        trim_trailing_ids: Iterable[int] | None = None,
    ) -> list[Mismatch]:
        """The reference's mismatch list for two id sequences.

        Args:
            expected_ids: the canonical ids (a fresh chat-template render).
            actual_ids: the ids the session accumulated.
            trim_trailing_ids: more ids to strip from both tails, united with
                the constructor's.
        """
        exp, act = as_sliceable(expected_ids), as_sliceable(actual_ids)
        return self.mismatches(exp, act, self.align(exp, act, self.trim_ids(trim_trailing_ids)))

    def diagnose(
        self,
        expected_ids: Sequence[int] | Any,
        actual_ids: Sequence[int] | Any,
        trim_trailing_ids: Iterable[int] | None = None,
    ) -> Diagnosis:
        """Every difference with its role, message index and kind (a `Diagnosis`).

        Roles come from the format's message markers (detected from the
        tokenizer, or the `role_scheme` given to the constructor); the
        reference's own mismatch list is included as `Diagnosis.reference`.
        """
        return diagnose(self, self.role_tracker, expected_ids, actual_ids, self.trim_ids(trim_trailing_ids))

    @property
    def role_tracker(self) -> RoleTracker:
        """How messages and roles are found in this tokenizer's ids (built on first use)."""
        if self._tracker is None:
            self._tracker = RoleTracker(self.tokenizer, self._role_scheme, decode=self.decode, segmenter=self._segmenter)
        return self._tracker

    @property
    def assistant_start(self) -> bytes | None:
        """The text that starts assistant content (UTF-8), for the assistant test of `align`."""
        return self._assistant_start

    @property
    def segmenter(self) -> Segmenter:
        """The Rust segmenter over this comparator's boundary ids (with the byte table when byte-exact)."""
        return self._segmenter

    def compare_batch(
        self,
        expected_seqs: Sequence[Any],
        actual_seqs: Sequence[Any],
        trim_trailing_ids: Iterable[int] | None = None,
        *,
        threads: int | None = None,
    ) -> list[list[Mismatch]]:
        """`compare_sequences` over many sessions: the alignment of all pairs runs in
        parallel on `threads` (default: every core) with the GIL released.

        Example:
            >>> cmp.compare_batch([a, b], [a, b2])  # doctest: +SKIP
            [[], [Mismatch(...)]]
        """
        exps = [as_sliceable(x) for x in expected_seqs]
        acts = [as_sliceable(x) for x in actual_seqs]
        aligned = self._segmenter.align_batch(
            exps,
            acts,
            self.trim_ids(trim_trailing_ids),
            threads=threads,
            assistant_start=self._assistant_start,
            probe_ids=ASSISTANT_PROBE_IDS,
        )
        return [self.mismatches(e, a, al) for e, a, al in zip(exps, acts, aligned)]

    def trim_ids(self, trim_trailing_ids: Iterable[int] | None = None) -> set[int]:
        """The ids stripped from both tails: the constructor's and `trim_trailing_ids`."""
        trim = set(self._trim_trailing_ids or ())
        if trim_trailing_ids:
            trim |= set(trim_trailing_ids)
        return trim

    def align(self, exp: Any, act: Any, trim: set[int]) -> Alignment:
        """`Segmenter.align` with this comparator's assistant test (trimming `trim` first)."""
        return self._segmenter.align(
            exp, act, trim, assistant_start=self._assistant_start, probe_ids=ASSISTANT_PROBE_IDS
        )

    def mismatches(self, exp: Any, act: Any, aligned: Alignment) -> list[Mismatch]:
        """The reference's mismatch list for an alignment of `exp` and `act`."""
        kind, differing = aligned.kind, aligned.differing
        if kind == "aligned" and not len(differing):
            return []
        e_starts, a_starts = aligned.expected_starts.tolist(), aligned.actual_starts.tolist()
        e_special, a_special = aligned.expected_special, aligned.actual_special
        if kind != "aligned":
            if kind == "count":
                detail = f"segment count differs: expected {len(e_special)}, got {len(a_special)}"
            else:
                detail = "segment structure (special/content pattern) differs"
            return [
                Mismatch(
                    MismatchType.SPECIAL_TOKEN_COUNT,
                    -1,
                    self._describe(exp, e_starts, e_special),
                    self._describe(act, a_starts, a_special),
                    detail,
                )
            ]
        out: list[Mismatch] = []
        for idx, verdict, known in zip(differing.tolist(), aligned.verdicts.tolist(), aligned.texts):
            if verdict == Verdict.SAME_TEXT:
                continue  # same text, other ids (the byte table proved it): not reported
            if known is not None:  # the byte table's texts (it is byte-exact: what decode gives)
                e_text, a_text = known[0].decode("utf-8"), known[1].decode("utf-8")
            else:
                e_ids = as_list(exp[e_starts[idx] : e_starts[idx + 1]])
                a_ids = as_list(act[a_starts[idx] : a_starts[idx + 1]])
                e_text, a_text = self.decode(e_ids), self.decode(a_ids)
            if verdict == Verdict.SPECIAL_TYPE:
                out.append(Mismatch(MismatchType.SPECIAL_TOKEN_TYPE, idx, e_text, a_text))
                continue
            if verdict == Verdict.UNKNOWN:  # the byte table could not tell: decide from decoded text
                if e_text == a_text:
                    continue  # same text, other ids: the reference does not report it
                assistant = self.is_assistant_segment(exp, e_starts, e_special, idx) and self.is_assistant_segment(
                    act, a_starts, a_special, idx
                )
            else:
                assistant = verdict == Verdict.ASSISTANT_TEXT
            kind_ = MismatchType.ASSISTANT_TEXT if assistant else MismatchType.NON_ASSISTANT_TEXT
            out.append(Mismatch(kind_, idx, e_text, a_text))
        return out

    def decode(self, ids: list[int]) -> str:
        """`tokenizer.decode(ids, skip_special_tokens=False)`, from the byte table when it can tell."""
        if len(ids) == 1:
            text = self._special_text.get(ids[0])
            if text is None:
                text = self._special_text[ids[0]] = self._decode_many(ids)
            return text
        return self._decode_many(ids)

    def _decode_many(self, ids: list[int]) -> str:
        if self._segmenter.has_byte_table:
            raw = self._segmenter.text_bytes(ids)
            if raw is not None:
                # The table is byte-exact (self-checked against decode) and
                # every run is valid UTF-8, so this is what decode returns.
                return raw.decode("utf-8")
        return str(self.tokenizer.decode(ids, skip_special_tokens=False))

    def is_assistant_segment(self, ids: Any, starts: list[int], special: Any, idx: int) -> bool:
        """The reference's test: previous special + first ids start with the assistant marker."""
        if self._assistant_start_str is None or special[idx] or idx == 0 or not special[idx - 1]:
            return False
        prev = self.decode(as_list(ids[starts[idx - 1] : starts[idx]]))
        head_end = min(starts[idx] + ASSISTANT_PROBE_IDS, starts[idx + 1])
        head = self.decode(as_list(ids[starts[idx] : head_end]))
        return (prev + head).startswith(self._assistant_start_str)

    def _describe(self, ids: Any, starts: list[int], special: Any) -> str:
        parts = []
        for i in range(len(special)):
            if special[i]:
                parts.append(f"[{self.decode(as_list(ids[starts[i] : starts[i + 1]]))}]")
            else:
                parts.append(f"({starts[i + 1] - starts[i]} tokens)")
        return " ".join(parts)


__all__ = ["ASSISTANT_PROBE_IDS", "Mismatch", "MismatchType", "Segment", "TokenSeqComparator"]

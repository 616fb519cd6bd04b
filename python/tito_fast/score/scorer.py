"""Score rollout dumps: the reference's session mismatch lists, diagnosed and aggregated.

Per session this computes what the reference's `compute_session_mismatch`
computes (the session's accumulated ids against a fresh render of its
messages, compared by the family's comparator) and the diagnosis (role,
message, turn and kind of each difference); `summarize` aggregates them
under the reference's metric names.

Two paths give the same reference mismatch lists:

- "full" (default): encode the whole render, then compare (what the
  reference does), so the diagnosis also sees retokenization drift;
- "fast": split the rendered text at the tokenizer's added
  tokens, as the tokenizer itself does before encoding, and compare each
  text segment with the session's segment bytes from the byte table; only
  segments that differ, or that the path cannot prove equal (a normalizer
  would change the text, the byte table cannot tell, the tail the
  comparator trims), are encoded. Segments with the same text but other
  ids are not reported by the reference, so they need no ids; the one thing
  the fast path does not see is such a pure retokenization, which only the
  diagnosis (kind "retokenization", type None) reports in "full" mode.

Example:
    >>> scorer = Scorer(tok, "qwen3")  # doctest: +SKIP
    >>> result = scorer.score(record)  # doctest: +SKIP
    >>> result.mismatches  # doctest: +SKIP
    []
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np

from tito_fast._core import CheckedSession, SessionChecker, common_prefix_len
from tito_fast.chat.families import FamilyConfig, TitoTokenizer, get_tito_tokenizer
from tito_fast.compare.alignment import ASSISTANT_PROBE_IDS, Alignment
from tito_fast.compare.comparator import Mismatch, MismatchType
from tito_fast.compare.diagnosis import Diagnosis, DiagnosisItem, diagnose
from tito_fast.compare.messages import SENTINEL, MessageBounds, block_messages, history_messages
from tito_fast.compare.roles import MessageTable
from tito_fast.errors import MissingDependency, ScoreError, TemplateLimitError
from tito_fast.score.dump import Record
from tito_fast.tokenizer.added import AddedTokenSplitter

Mode = Literal["fast", "full"]
CONTEXT_IDS = 24  # ids of context kept on each side of a reported difference


@dataclass
class ScoredItem(DiagnosisItem):
    """A diagnosis item placed in its session, in the dump's terms:
    `message_index` is the index in the record's `messages` (-1: text outside
    every message, e.g. a tool list the template renders), `role` that
    message's role, `marker_role` the role of the rendered block; `position`
    is the session id where it starts, `turn` the number of assistant
    messages before its message, and (for reported differences) a little of
    the session's text around it, for reports."""

    position: int = 0
    turn: int | None = None
    before: str = ""
    after: str = ""
    #: the role of the rendered block the difference sits in (`role` is the
    #: record message's): Qwen renders a tool result in a user block
    marker_role: str = ""

    def to_dict(self) -> dict[str, Any]:
        d = super().to_dict()
        if self.type is None:  # context is kept for reported differences only
            del d["before"], d["after"]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ScoredItem:
        """The inverse of `to_dict`."""
        fields = dict(d)
        fields["expected_span"], fields["actual_span"] = tuple(d["expected_span"]), tuple(d["actual_span"])
        return cls(**fields)


@dataclass
class SessionResult:
    """One session's reference mismatch list and diagnosis (typed; `to_dict` for output)."""

    session_id: str
    source: str
    turns: int
    num_ids: int
    mismatches: list[Mismatch]
    items: list[ScoredItem]
    first_divergence: int | None
    path: str
    encoded_segments: int = 0
    segments: int = 0
    metadata: Any = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: the reference's mismatch dicts and the diagnosis items as dicts."""
        return {
            "session_id": self.session_id,
            "source": self.source,
            "turns": self.turns,
            "num_ids": self.num_ids,
            "mismatches": [m.to_dict() for m in self.mismatches],
            "items": [i.to_dict() for i in self.items],
            "first_divergence": self.first_divergence,
            "path": self.path,
            "encoded_segments": self.encoded_segments,
            "segments": self.segments,
            "metadata": self.metadata,
        }


@dataclass(frozen=True)
class _Session:
    """What a result needs of its record."""

    session_id: str
    source: str
    metadata: Any
    roles: list[str]
    turns: int
    messages: list[dict[str, Any]] | None = None
    tools: list[dict[str, Any]] | None = None
    #: renders the record's message prefixes as the native check rendered it whole
    checked: CheckedSession | None = None
    #: the record read again, for a prefix the native renderer does not render
    reread: Callable[[], Record | None] | None = None

    @classmethod
    def of(cls, record: Record) -> _Session:
        roles = [str(m.get("role", "unknown")) for m in record.messages]
        turns = sum(1 for m in record.messages if m.get("role") == "assistant")
        return cls(record.session_id, record.source, record.metadata, roles, turns, messages=record.messages, tools=record.tools)


class Scorer:
    """Scores sessions of one tokenizer and family.

    Args:
        tokenizer: a transformers tokenizer (its chat template is used).
        family: a family name, `FamilyConfig` or dict (`get_tito_tokenizer`).
        chat_template: a template text replacing the tokenizer's.
        mode: "full" (default) or "fast" (see the module doc).
        trust_encoder: load a DeepSeek encoder file found in the tokenizer's
            folder (it runs that file's code; default False).
        encoder_path: DeepSeek V3.2/V4's encoder module (else found where
            users have it, see `tito_fast.chat.deepseek`).
        tito: an already built family (then tokenizer/family are ignored).

    Example:
        >>> Scorer(tok, "qwen3").score(record).first_divergence  # doctest: +SKIP
        1834
    """

    def __init__(
        self,
        tokenizer: Any = None,
        family: str | FamilyConfig | dict[str, Any] = "default",
        *,
        chat_template: str | None = None,
        mode: Mode = "full",
        tito: TitoTokenizer | None = None,
        encoder_path: str | None = None,
        trust_encoder: bool = False,
    ) -> None:
        if mode not in ("fast", "full"):
            raise ValueError(f"mode must be 'fast' or 'full', got {mode!r}")
        self.tito = (
            tito
            if tito is not None
            else get_tito_tokenizer(
                tokenizer, family, chat_template=chat_template, backend="native", encoder_path=encoder_path,
                trust_encoder=trust_encoder,
            )  # fmt: skip
        )
        self.family = self.tito.family
        self.mode: Mode = mode
        self.cmp = self.tito.create_comparator()
        self._seg = self.cmp.segmenter
        self._trim = self.cmp.trim_ids()
        vocab = self.cmp.vocab
        self.vocab_size = self.cmp.vocab_size  # the one size: the check's, and the diagnosis's warnings
        self.splitter = AddedTokenSplitter(
            self.tito.tokenizer,
            set(self._seg.boundary_ids),
            bool(vocab is not None and vocab.byte_exact),
            reason="the family renders with DeepSeek's encoder module" if self.tito.deepseek is not None else None,
        )
        if self.splitter.reason is None:
            self.splitter.reason = self._round_trip_check()
        self.tito.fast_encoder  # built now, so that forked workers inherit it
        #: The session check in Rust (`_core.SessionChecker`) for JSONL lines,
        #: or None, and then `native_reason` says why.
        self.native: SessionChecker | None = None
        self.native_reason: str | None = None
        self.native, self.native_reason = self._native_checker()

    @property
    def text_encoder(self) -> str:
        """What encodes texts: tito_fast's Rust encoder, or the tokenizer and why."""
        enc = self.tito.fast_encoder
        if enc is None:
            return "the tokenizer (not a fast tokenizer)"
        return "tito_fast (Rust)" if enc.reason is None else f"the tokenizer ({enc.reason})"

    @property
    def renderer(self) -> str:
        """What renders and checks the sessions of JSONL dumps: the native check, or the Python path and why."""
        if self.native is not None:
            return "native (Rust: JSONL lines parsed, rendered, encoded and compared on threads)"
        return f"Python ({self.native_reason})"

    @property
    def fast_path(self) -> bool:
        """Whether sessions are scored without encoding equal segments."""
        return self.mode == "fast" and self.splitter.reason is None

    def _native_checker(self) -> tuple[SessionChecker | None, str | None]:
        """The Rust session check for this family, or (None, why not)."""
        t = self.tito
        if t.deepseek is not None:
            return None, "the family renders with DeepSeek's encoder module (Python)"
        if t.backend != "native":
            return None, f"the {t.backend!r} backend was asked for"
        if t.config.arguments != "dict":
            return None, "the family's template takes tool-call arguments as JSON strings"
        enc = t.fast_encoder
        core = enc.core if enc is not None else None
        if core is None:
            why = enc.reason if enc is not None else "the tokenizer is not a fast one"
            return None, f"tito_fast's encoder does not cover the tokenizer ({why})"
        renderer = t.native_renderer()
        assert renderer is not None  # the native backend, not DeepSeek's encoder
        if renderer.template is None:
            return None, renderer.reason
        checker = SessionChecker(
            renderer.template, core, variables=t.template_variables, tool_policy=t.tool_policy, trim_ids=sorted(self._trim),
            vocab_size=self.vocab_size, family=self.family, openers=self.cmp.role_tracker.openers, segmenter=self.cmp.segmenter,
            # full mode diagnoses the check's own ids: aligned, and their role table read, on its threads
            roles=None if self.fast_path else self.cmp.role_tracker.core, assistant_start=self.cmp.assistant_start,
            probe_ids=ASSISTANT_PROBE_IDS,
        )  # fmt: skip
        return checker, None

    def clean_result(self, source: str, session_id: str, turns: int, num_ids: int, metadata: Any) -> SessionResult:
        """The result of a session the native check found equal to its render
        (as the Python path scores it, without segment counts)."""
        return SessionResult(session_id, source, turns, num_ids, [], [], None, "fast" if self.fast_path else "full", 0, 0, metadata)

    def _round_trip_check(self) -> str | None:
        """Segment texts must decode back from their own ids for equal bytes to mean equal text."""
        probes = ["hello world", " leading", "trailing  ", "\n\nx\n", "你好 🙂", "a\tb", "  ", "é", "{\"a\": 1}"]
        for text in probes:
            ids = self.tito.encode(text)
            raw = self._seg.text_bytes(np.asarray(ids, dtype=np.uint32))
            if raw is None or raw != text.encode("utf-8"):
                return f"the tokenizer does not decode {text!r} back to itself"
        return None

    # -- one session --------------------------------------------------------

    def _attribution(
        self, sess: _Session, text: str | bytes, expected: np.ndarray, known: tuple[int, int] | None = None
    ) -> tuple[MessageBounds, Callable[[int], int]] | None:
        """Which message each id of `expected` (the render `text`, encoded) belongs
        to, from the render's boundaries (`compare.messages.MessageBounds`:
        renders of the record's message prefixes), and where in the render id
        i starts; None when the ids do not decode to the render byte for byte
        (then the rendered markers number the messages). `known`: `(i, byte)`,
        where id i of these ids starts, found by the native check as it
        found that they decode to the render byte for byte
        (`CheckedSession.first_difference`)."""
        raw = text if isinstance(text, bytes) else text.encode("utf-8")
        seg = self.cmp.segmenter
        if sess.messages is None and sess.checked is None:
            return None
        if known is not None and not 0 <= known[0] < len(expected):
            known = None  # not an id of these ids: they are not the check's
        if known is None and (not len(expected) or seg.byte_len(expected) != len(raw)):
            return None

        def offset(i: int) -> int:
            if known is not None and i == known[0]:
                return known[1]
            return seg.byte_len(expected[:i]) or 0

        checked = sess.checked
        record: list[tuple[list[dict[str, Any]], list[dict[str, Any]] | None]] = []

        def conversation() -> tuple[list[dict[str, Any]], list[dict[str, Any]] | None]:
            """The record's messages and tools (read again, once, on the native check's path)."""
            if not record:
                rec = sess.reread() if sess.messages is None and sess.reread is not None else None
                record.append((rec.messages, rec.tools) if rec is not None else (sess.messages or [], sess.tools))
            return record[0]

        def render(k: int, then_user: str | None) -> str:
            """The prefix rendered by the tokenizer's template (jinja2 where the native renderer does not render it)."""
            messages, tools = conversation()
            msgs = messages[:k] if then_user is None else history_messages(messages, k)
            return self.tito.apply_chat_template(msgs, add_generation_prompt=False, tools=tools)

        def render_prefix(k: int) -> str:
            return render(k, None)

        def render_history(k: int) -> str:
            return render(k, SENTINEL)

        if checked is not None:  # the native check's values, nothing read or converted again: it renders natively
            return checked.message_bounds(render_prefix=render_prefix, render_history=render_history), offset
        tracker = self.cmp.role_tracker
        role0 = sess.roles[0] if sess.roles else None
        bounds = MessageBounds(
            render_prefix, len(sess.roles), raw, openers=tracker.openers, first_role=role0, render_history=render_history
        )
        return bounds, offset

    def check_record(self, record: Record) -> None:
        """Raise `ScoreError` for a record this scorer cannot score."""
        if record.family is not None and record.family != self.family:
            raise ScoreError(f"record is for family {record.family!r}, the scorer for {self.family!r}")
        top = int(record.token_ids.max()) if len(record.token_ids) else 0
        if top >= self.vocab_size:
            at = int(np.argmax(record.token_ids >= self.vocab_size))
            raise ScoreError(f"token_ids[{at}] = {int(record.token_ids[at])} is outside the vocabulary ({self.vocab_size} ids)")

    def expected_ids(self, record: Record, text: str | None = None) -> np.ndarray:
        """The reference's expected ids: the whole render, encoded."""
        if text is None:
            text = self._render(record)
        return np.asarray(self.tito.encode(text), dtype=np.uint32)

    def _render(self, record: Record) -> str:
        try:
            return self.tito.apply_chat_template(record.messages, add_generation_prompt=False, tools=record.tools)
        except (MissingDependency, TemplateLimitError):  # the installation's problem; a limit (its own code)
            raise
        except Exception as e:  # a template that raises is a bad record, not a crash
            raise ScoreError(f"the chat template failed: {type(e).__name__}: {e}") from e

    def _fast_expected(self, text: str, actual: np.ndarray) -> tuple[np.ndarray, int, int] | None:
        """Ids that compare like the encoded render: the session's own ids for
        content segments with provably the same text, real ids elsewhere.
        Returns (ids, segments encoded, segments)."""
        sp = self.splitter
        segs = sp.segments(text)
        if segs is None:
            return None
        starts, special = self._seg.segment(actual)
        starts_l, special_l = starts.tolist(), special.tolist()
        n_act = len(special_l)
        # The comparator trims trailing ids on both sides: segments the trim
        # can reach are encoded for real, so the trim sees real ids.
        real_from = len(segs)
        while real_from > 0:
            s = segs[real_from - 1]
            real_from -= 1
            if isinstance(s, int):
                if s not in self._trim:
                    break
                continue
            tail = self.tito.encode(s)
            if any(t not in self._trim for t in tail):
                break
        pieces: list[Any] = []
        encoded = 0
        all_invariant = sp.all_invariant([s for s in segs if isinstance(s, str)])
        act_special_ids = actual[starts[:-1][special]].tolist()  # the boundary id of each special segment, in order
        special_rank = np.cumsum(special).tolist()
        run: list[int] | None = None  # [start, end) in `actual` of segments taken from it as they are
        for i, s in enumerate(segs):
            take = False
            if i < real_from and i < n_act:
                if isinstance(s, int):
                    take = special_l[i] and act_special_ids[special_rank[i] - 1] == s
                elif not special_l[i] and (all_invariant or sp.invariant(s)):
                    raw = self._seg.text_bytes(actual[starts_l[i] : starts_l[i + 1]])
                    take = raw is not None and raw == s.encode("utf-8")
            if take:
                if run is None:
                    run = [starts_l[i], starts_l[i + 1]]
                else:
                    run[1] = starts_l[i + 1]
                continue
            if run is not None:
                pieces.append(actual[run[0] : run[1]])
                run = None
            if isinstance(s, int):
                pieces.append(np.array([s], dtype=np.uint32))
            else:
                encoded += 1
                pieces.append(np.asarray(self.tito.encode(s), dtype=np.uint32))
        if run is not None:
            pieces.append(actual[run[0] : run[1]])
        ids = np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.uint32)
        return ids, encoded, sum(1 for s in segs if isinstance(s, str))

    def score(self, record: Record, rendered: tuple[str, np.ndarray] | None = None) -> SessionResult:
        """The session's reference mismatch list and diagnosis (raises `ScoreError`);
        `rendered`: the render and its ids, when already made."""
        self.check_record(record)
        if rendered is not None:
            text, expected = rendered
        else:
            text, expected = self._render(record), None
        return self._score(_Session.of(record), text, expected, record.token_ids, record)

    def score_checked(
        self, source: str, session_id: str, text: bytes, expected: np.ndarray, actual: np.ndarray, checked: CheckedSession,
        reread: Callable[[], Record | None] | None = None,
    ) -> SessionResult:  # fmt: skip
        """`score` of a session the native check found differing
        (`SessionChecker.check_lines`): its render `text` (UTF-8) and ids `expected`,
        the session's ids `actual`, and `checked` (what the diagnosis needs of
        the record; it renders the message prefixes), so the record is not
        read or converted again; `reread()` reads it, for a prefix the native
        renderer does not render (then jinja2 does, as on the Python path)."""
        sess = _Session(session_id, source, checked.metadata, checked.roles, checked.turns, checked=checked, reread=reread)
        return self._score(sess, text, expected, actual, None)

    def _score(
        self, sess: _Session, text: str | bytes, expected: np.ndarray | None, actual: np.ndarray, record: Record | None
    ) -> SessionResult:
        """`text`: the render (UTF-8 bytes when the native check made it)."""
        fast = None
        if self.fast_path:
            fast = self._fast_expected(text if isinstance(text, str) else text.decode("utf-8"), actual)
        if fast is not None:
            fast_ids, encoded, nseg = fast
            diag = self.cmp.diagnose(fast_ids, actual)
            if not any(m.type is MismatchType.SPECIAL_TOKEN_COUNT for m in diag.reference):
                return self._result(sess, diag, fast_ids, actual, "fast", encoded, nseg, text)
            # Structures differ: describing them needs every segment's real ids.
        nseg = fast[2] if fast is not None else 0
        if expected is None:
            assert record is not None and isinstance(text, str)
            expected = self.expected_ids(record, text)  # the whole render, encoded once
        checked = sess.checked
        aligned = checked.alignment if checked is not None else None
        if checked is not None and aligned is not None and _aligns(aligned, expected, actual):  # begun on the check's threads
            e_table = checked.expected_table
            diag = diagnose(
                self.cmp, self.cmp.role_tracker, expected, actual, self._trim, aligned=aligned,
                expected_table=MessageTable(*e_table) if e_table is not None else None, in_vocabulary=True,
            )  # fmt: skip
        else:
            diag = self.cmp.diagnose(expected, actual)
        return self._result(sess, diag, expected, actual, "full", nseg, nseg, text)

    def _result(
        self,
        sess: _Session,
        diag: Diagnosis,
        expected: np.ndarray,
        actual: np.ndarray,
        path: str,
        encoded: int,
        nseg: int,
        text: str | bytes,
    ) -> SessionResult:
        # the check's ids (the full path's) are these ids: where it found them differ first is known
        known = sess.checked.first_difference if sess.checked is not None and path == "full" else None
        items, first = self._place(sess, diag, expected, actual, text, known)
        return SessionResult(
            sess.session_id,
            sess.source,
            sess.turns,
            len(actual),
            list(diag.reference),
            items,
            first,
            path,
            encoded,
            nseg,
            sess.metadata,
        )

    def diagnose(self, record: Record) -> tuple[np.ndarray, Diagnosis]:
        """The ids of the record's whole render and the diagnosis of its ids
        against them, the items placed in the record's terms (`ScoredItem`:
        message index and role of the record's `messages`), as `score` places
        them; what `tito-fast diff` shows for a dump. Raises `ScoreError`
        when the template fails."""
        text = self._render(record)
        expected = self.expected_ids(record, text)
        diag = self.cmp.diagnose(expected, record.token_ids)
        items, _ = self._place(_Session.of(record), diag, expected, record.token_ids, text)
        return expected, replace(diag, items=items)

    def _place(
        self,
        sess: _Session,
        diag: Diagnosis,
        expected: np.ndarray,
        actual: np.ndarray,
        text: str | bytes,
        known: tuple[int, int] | None = None,
    ) -> tuple[list[ScoredItem], int | None]:
        """The diagnosis items in the session's terms, and the first reported
        difference's position (`known`: see `_attribution`)."""
        bounds = self._attribution(sess, text, expected, known) if diag.items else None
        roles = sess.roles
        # assistant messages before each message (the turn of an item placed by the bounds)
        assistant_before = np.cumsum([0] + [r == "assistant" for r in roles]).tolist() if bounds is not None else []

        table = diag.expected_table if self.cmp.role_tracker.scheme is not None else None
        guesses: list[list[int] | None] = []

        def guess(i: int) -> int:
            """Where a difference in the rendered block of message i (the
            markers' number) lies, as the search tries it first: that block's
            first message (made once, when a search first needs it)."""
            if not guesses:
                guesses.append(block_messages(table.roles, roles) if table is not None else None)
            g = guesses[0]
            return g[i] if g is not None and 0 <= i < len(g) else i

        items: list[ScoredItem] = []
        first: int | None = None
        for it in diag.items:
            (es, ee), (as_, ae) = it.expected_span, it.actual_span
            head = common_prefix_len(expected[es:ee], actual[as_:ae]) if ae > as_ and ee > es else 0
            pos = int(as_ + head)
            fields = vars(it) | {"marker_role": it.role}
            if bounds is not None:
                at = es + head if ee > es else max(es - 1, 0)  # where the render differs (or what the extra ids follow)
                at = min(at, max(ee - 1, es), len(expected) - 1)
                byte = bounds[1](at)
                k = bounds[0].known_message_at(byte)
                if k is None:
                    k = bounds[0].message_at(byte, hint=guess(it.message_index))
                fields["message_index"] = k
                fields["role"] = roles[k] if k >= 0 else it.role
                turn: int | None = int(assistant_before[k]) if k >= 0 else 0
            elif table is not None and 0 <= it.message_index < len(table.starts):
                start = int(table.starts[it.message_index])
                turn = sum(1 for s0, r in zip(table.starts.tolist(), table.roles) if r == "assistant" and s0 < start)
            else:
                turn = None
            before = after = ""
            if it.type is not None:  # a little of the session's text around it, for reports
                before = self.cmp.decode(actual[max(0, as_ - CONTEXT_IDS) : as_].tolist())
                after = self.cmp.decode(actual[ae : ae + CONTEXT_IDS].tolist())
            items.append(ScoredItem(**fields, position=pos, turn=turn, before=before, after=after))
            if it.type is not None and (first is None or pos < first):
                first = pos
        return items, first


def _aligns(aligned: Alignment, expected: np.ndarray, actual: np.ndarray) -> bool:
    """Whether `aligned` can be an alignment of these two id sequences (the
    check's own, passed on with it: a cheap guard against others)."""
    return int(aligned.expected_starts[-1]) <= len(expected) and int(aligned.actual_starts[-1]) <= len(actual)

"""Score rollout dumps: the reference's session mismatch lists, diagnosed and aggregated.

Per session this computes what the reference's `compute_session_mismatch`
computes (the session's accumulated ids against a fresh render of its
messages, compared by the family's comparator) and the diagnosis (role,
message, turn and kind of each difference); `summarize` aggregates them
under the reference's metric names.

Two paths give the same reference mismatch lists:

- "full": encode the whole render, then compare (what the reference does);
- "fast" (default): split the rendered text at the tokenizer's added
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

import re
import statistics
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np

from tito_fast._core import common_prefix_len
from tito_fast.dump import BadRecord, Record
from tito_fast.families import FamilyConfig, TitoTokenizer, get_tito_tokenizer

Mode = Literal["fast", "full"]
MISMATCH_TYPES = ("special_token_count", "special_token_type", "non_assistant_text", "assistant_text")
STRICT_TYPES = MISMATCH_TYPES[:3]
CONTEXT_IDS = 24  # ids of context kept on each side of a reported difference


class ScoreError(ValueError):
    """A session that cannot be scored (a template that raises, ids out of the vocabulary, ...)."""


@dataclass
class SessionResult:
    """One session's reference mismatch list and diagnosis."""

    session_id: str
    source: str
    turns: int
    num_ids: int
    mismatches: list[dict[str, Any]]
    items: list[dict[str, Any]]
    first_divergence: int | None
    path: str
    encoded_segments: int = 0
    segments: int = 0
    metadata: Any = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class FastSplitter:
    """Splits a rendered text where the tokenizer splits it before encoding: at
    its added tokens (leftmost-longest, as the tokenizer's matcher does).

    `reason` is None when the fast path applies to the tokenizer, else why
    not (e.g. an added token that strips neighbouring whitespace).
    """

    def __init__(self, tito: TitoTokenizer, boundary_ids: set[int], byte_exact: bool) -> None:
        self.reason: str | None = None
        self.by_text: dict[str, int] = {}
        self.boundary = boundary_ids
        self.normalizer: Any = None
        self._unicode_form = False
        self._python_form: str | None = None
        self.pattern: re.Pattern[str] | None = None
        self.pattern_normalized: re.Pattern[str] | None = None
        backend: Any = getattr(tito.tokenizer, "backend_tokenizer", None) or getattr(tito.tokenizer, "_tokenizer", None)
        if tito.encoder is not None:
            self.reason = "the family renders with its own encoder module"
        elif not byte_exact:
            self.reason = "the tokenizer has no byte-exact byte table"
        elif backend is None or not hasattr(backend, "get_added_tokens_decoder"):
            self.reason = "not a fast (Rust) tokenizer"
        if self.reason:
            return
        added = backend.get_added_tokens_decoder()
        raw: list[str] = []
        normalized: list[str] = []
        for tid, tok in added.items():
            if tok.lstrip or tok.rstrip or tok.single_word:
                self.reason = f"added token {tok.content!r} strips whitespace or matches single words"
                return
            self.by_text[tok.content] = int(tid)
            (normalized if tok.normalized else raw).append(tok.content)
        missing = [b for b in sorted(boundary_ids) if b not in added]
        if missing:
            self.reason = f"boundary id {missing[0]} is not an added token"
            return
        self.normalizer = backend.normalizer
        form = repr(self.normalizer)[:-2]
        self._unicode_form = form in ("NFC", "NFD", "NFKC", "NFKD")
        # Python's own check of the same form decides whole texts at C speed
        # (the tokenizer's normalize_str builds alignments: ~100 ns a character).
        # It is trusted only when it agrees with the tokenizer on probes.
        self._python_form = form if self._unicode_form and self._agrees(form) else None

        def alternation(texts: list[str]) -> re.Pattern[str] | None:
            texts = sorted(texts, key=len, reverse=True)  # longest first: leftmost-longest, as the tokenizer matches
            return re.compile("(" + "|".join(re.escape(t) for t in texts) + ")") if texts else None

        # The tokenizer matches added tokens in two passes: those not normalized on
        # the raw text, then the normalized ones inside the normalized pieces.
        self.pattern = alternation(raw)
        self.pattern_normalized = alternation(normalized)

    def segments(self, text: str) -> list[int | str] | None:
        """The render as boundary ids and content texts, in order (content texts hold the
        non-boundary added tokens as text); None when a piece the tokenizer would
        normalize holds normalized added tokens (the path cannot follow it)."""
        parts = self.pattern.split(text) if self.pattern is not None else [text]
        if self.pattern_normalized is not None:
            expanded: list[str] = []
            for k, p in enumerate(parts):
                if k % 2 == 1 or not p:
                    expanded.append(p)
                    continue
                sub = self.pattern_normalized.split(p)
                if len(sub) > 1 and not self.invariant(p):
                    return None
                expanded.extend(sub)  # text, token, text, ...: parity of positions is kept
            parts = expanded
        out: list[int | str] = []
        cur: list[str] = []
        for k, p in enumerate(parts):
            if k % 2 == 0:
                if p:
                    cur.append(p)
                continue
            tid = self.by_text[p]
            if tid in self.boundary:
                if cur:
                    out.append("".join(cur))
                    cur = []
                out.append(tid)
            else:
                cur.append(p)
        if cur:
            out.append("".join(cur))
        return out

    def _agrees(self, form: str) -> bool:
        import unicodedata

        probes = ["e\u0301", "\u00e9", "A\u030a", "\u212b", "\ufb01", "\u1100\u1161\u11a8", "\uac01", "q\u0323\u0307",
                  "q\u0307\u0323", "\u0958", "\u2126", "\u00bd", "x\u0345\u0301", "\U0001d15e", "\u0f73", "caf\u00e9 \u4f60"]
        for p in probes:
            mine = unicodedata.is_normalized(form, p)  # type: ignore[arg-type]
            if mine != (self.normalizer.normalize_str(p) == p):
                return False
        return True

    def all_invariant(self, texts: list[str]) -> bool:
        """Whether the normalizer leaves every text as it is, in one call: texts are
        joined by newlines, which no Unicode normalization form composes, reorders,
        creates or removes, so the join is invariant exactly when every text is."""
        if self.normalizer is None:
            return True
        if not self._unicode_form:
            return False  # decide text by text
        joined = "\n".join(t for t in texts if not t.isascii())
        if not joined:
            return True
        if self._python_form is not None:
            import unicodedata

            return unicodedata.is_normalized(self._python_form, joined)  # type: ignore[arg-type]
        return bool(self.normalizer.normalize_str(joined) == joined)

    def invariant(self, text: str) -> bool:
        """The normalizer leaves `text` as it is (so its ids decode back to it)."""
        if self.normalizer is None or (self._unicode_form and text.isascii()):
            return True  # Unicode normalization forms leave ASCII as it is
        return bool(self.normalizer.normalize_str(text) == text)


class Scorer:
    """Scores sessions of one tokenizer and family.

    Args:
        tokenizer: a transformers tokenizer (its chat template is used).
        family: a family name, `FamilyConfig` or dict (`get_tito_tokenizer`).
        chat_template: a template text replacing the tokenizer's.
        mode: "fast" (default) or "full" (see the module doc).
        encoder_path: DeepSeek V3.2/V4's encoder module (else found where
            users have it, see `tito_fast.deepseek`).
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
        mode: Mode = "fast",
        tito: TitoTokenizer | None = None,
        encoder_path: str | None = None,
    ) -> None:
        if mode not in ("fast", "full"):
            raise ValueError(f"mode must be 'fast' or 'full', got {mode!r}")
        self.tito = (
            tito
            if tito is not None
            else get_tito_tokenizer(tokenizer, family, chat_template=chat_template, backend="jinja", encoder_path=encoder_path)
        )
        self.family = self.tito.family
        self.mode: Mode = mode
        self.cmp = self.tito.create_comparator()
        self._seg = self.cmp._segmenter
        self._trim = self.cmp._trim(None)
        vocab = self.cmp.vocab
        self.vocab_size = vocab.size if vocab is not None else len(self.tito.tokenizer)
        self.splitter = FastSplitter(self.tito, set(self._seg.boundary_ids), bool(vocab is not None and vocab.byte_exact))
        if self.splitter.reason is None:
            self.splitter.reason = self._round_trip_check()
        self.tito.fast_encoder  # built now, so that forked workers inherit it

    @property
    def encoder(self) -> str:
        """What encodes texts: tito_fast's Rust encoder, or the tokenizer and why."""
        enc = self.tito.fast_encoder
        if enc is None:
            return "the tokenizer (not a fast tokenizer)"
        return "tito_fast (Rust)" if enc.reason is None else f"the tokenizer ({enc.reason})"

    @property
    def fast_path(self) -> bool:
        """Whether sessions are scored without encoding equal segments."""
        return self.mode == "fast" and self.splitter.reason is None

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

    def score(self, record: Record) -> SessionResult:
        """The session's reference mismatch list and diagnosis (raises `ScoreError`)."""
        self.check_record(record)
        actual = record.token_ids
        text = self._render(record)
        fast = self._fast_expected(text, actual) if self.fast_path else None
        if fast is not None:
            expected, encoded, nseg = fast
            diag = self.cmp.diagnose(expected, actual)
            if not any(m.type.value == "special_token_count" for m in diag.reference):
                return self._result(record, diag, expected, actual, "fast", encoded, nseg)
            # Structures differ: describing them needs every segment's real ids.
        nseg = fast[2] if fast is not None else 0
        expected = self.expected_ids(record, text)  # the whole render, encoded once
        diag = self.cmp.diagnose(expected, actual)
        return self._result(record, diag, expected, actual, "full", nseg, nseg)

    def _result(
        self, record: Record, diag: Any, expected: np.ndarray, actual: np.ndarray, path: str, encoded: int, nseg: int
    ) -> SessionResult:
        table = diag.actual_table if self.cmp._tracker.scheme is not None else None
        assistant_starts = (
            np.array([s for s, r in zip(table.starts.tolist(), table.roles) if r == "assistant"], dtype=np.int64)
            if table is not None
            else None
        )
        items = []
        first: int | None = None
        for it in diag.items:
            d = it.to_dict()
            (es, ee), (as_, ae) = it.expected_span, it.actual_span
            pos = as_ + common_prefix_len(expected[es:ee], actual[as_:ae]) if ae > as_ else as_
            d["position"] = int(pos)
            turn = None
            if table is not None and assistant_starts is not None and it.message_index >= 0:
                start = int(table.starts[it.message_index])
                turn = int(np.count_nonzero(assistant_starts < start))
            d["turn"] = turn
            if it.type is not None:  # a little of the session's text around it, for reports
                d["before"] = self.cmp._decode(actual[max(0, as_ - CONTEXT_IDS) : as_].tolist())
                d["after"] = self.cmp._decode(actual[ae : ae + CONTEXT_IDS].tolist())
            items.append(d)
            if it.type is not None and (first is None or pos < first):
                first = int(pos)
        turns = sum(1 for m in record.messages if m.get("role") == "assistant")
        return SessionResult(
            record.session_id,
            record.source,
            turns,
            len(actual),
            [m.to_dict() for m in diag.reference],
            items,
            first,
            path,
            encoded,
            nseg,
            record.metadata,
        )


# -- aggregation --------------------------------------------------------------


@dataclass
class Summary:
    """Aggregates over scored sessions, with the reference's metric names."""

    family: str
    mode: str
    metric_version: str
    sessions: int
    bad_records: int
    complete: bool
    metrics: dict[str, float]
    turns: int
    turns_with_mismatch: int
    per_turn_rate: float
    by_turn: list[dict[str, Any]]
    by_type: dict[str, int]
    by_role: dict[str, int]
    by_kind: dict[str, int]
    first_divergence: list[int]
    first_divergence_median: float | None
    fast_path: str
    encoded_segment_share: float | None
    errors: list[dict[str, Any]] = field(default_factory=list)
    ci_failures: list[str] = field(default_factory=list)
    #: where an incomplete run stopped: a record ("FILE:LINE") or "interrupted"
    stopped_at: str | None = None
    #: what encoded texts (`Scorer.encoder`)
    encoder: str = "not recorded"
    #: which chat template (or DeepSeek encoder) rendered, and why (`TitoTokenizer.template_source`)
    template: str = "not recorded"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(
    results: list[SessionResult],
    bad: list[BadRecord],
    *,
    family: str,
    mode: str,
    fast_path: str,
    metric_version: str = "v1",
    complete: bool = True,
    stopped_at: str | None = None,
    encoder: str = "not recorded",
    template: str = "not recorded",
) -> Summary:
    """The reference's metrics (`tito_session_mismatch_rate/<version>` and
    `/<type>`: shares of sessions with any mismatch / one of that type) plus
    per-turn rates, breakdowns by type, role and kind (reported differences,
    and retokenizations), and first-divergence positions."""
    n = len(results)
    prefix = f"tito_session_mismatch_rate/{metric_version}"
    metrics: dict[str, float] = {}
    if n:
        metrics[prefix] = sum(bool(r.mismatches) for r in results) / n
        for t in MISMATCH_TYPES:
            metrics[f"{prefix}/{t}"] = sum(any(m["type"] == t for m in r.mismatches) for r in results) / n
    by_type: Counter[str] = Counter()
    by_role: Counter[str] = Counter()
    by_kind: Counter[str] = Counter()
    turn_hits: Counter[int] = Counter()
    reach: Counter[int] = Counter()
    turns = turns_bad = 0
    for r in results:
        by_type.update(m["type"] for m in r.mismatches)
        hit_turns: set[int] = set()
        for it in r.items:
            by_kind[it["kind"]] += 1
            if it["type"] is not None:
                by_role[it["role"]] += 1
                if it["turn"] is not None:
                    hit_turns.add(min(it["turn"], max(r.turns - 1, 0)))
        if r.mismatches and not hit_turns:
            hit_turns.add(max(r.turns - 1, 0))  # located nowhere: count it once, at the last turn
        turns += max(r.turns, 1)
        turns_bad += len(hit_turns)
        for k in range(max(r.turns, 1)):
            reach[k] += 1
        turn_hits.update(hit_turns)
    by_turn = [
        {"turn": t, "sessions": reach[t], "with_mismatch": turn_hits[t], "rate": turn_hits[t] / reach[t]} for t in sorted(reach)
    ]
    firsts = sorted(r.first_divergence for r in results if r.first_divergence is not None)
    encoded = sum(r.encoded_segments for r in results)
    segs = sum(r.segments for r in results)
    ci = [f"{prefix}/{t}={metrics[f'{prefix}/{t}']:.4f} must be 0" for t in STRICT_TYPES if metrics.get(f"{prefix}/{t}", 0)]
    return Summary(
        family=family,
        mode=mode,
        metric_version=metric_version,
        sessions=n,
        bad_records=len(bad),
        complete=complete,
        metrics=metrics,
        turns=turns,
        turns_with_mismatch=turns_bad,
        per_turn_rate=turns_bad / turns if turns else 0.0,
        by_turn=by_turn,
        by_type={t: by_type[t] for t in MISMATCH_TYPES},
        by_role=dict(by_role.most_common()),
        by_kind=dict(by_kind.most_common()),
        first_divergence=firsts,
        first_divergence_median=statistics.median(firsts) if firsts else None,
        fast_path=fast_path,
        encoded_segment_share=encoded / segs if segs else None,
        errors=[b.to_dict() for b in bad],
        ci_failures=ci,
        stopped_at=stopped_at,
        encoder=encoder,
        template=template,
    )


def worst(results: list[SessionResult], k: int = 5) -> list[SessionResult]:
    """The `k` worst sessions: strict types first, then most reported differences;
    one per (type, kind, role) of the first difference before any repeats, so
    the examples show different problems."""

    def key(r: SessionResult) -> tuple[int, int, int]:
        strict = sum(m["type"] in STRICT_TYPES for m in r.mismatches)
        return (-strict, -len(r.mismatches), r.first_divergence if r.first_divergence is not None else 1 << 62)

    def signature(r: SessionResult) -> tuple[Any, ...]:
        first = next((i for i in r.items if i["type"] is not None), None)
        return (first["type"], first["kind"], first["role"]) if first else ()

    ranked = sorted((r for r in results if r.mismatches), key=key)
    picked: list[SessionResult] = []
    seen: set[tuple[Any, ...]] = set()
    for r in ranked:
        if len(picked) < k and signature(r) not in seen:
            seen.add(signature(r))
            picked.append(r)
    for r in ranked:
        if len(picked) >= k:
            break
        if r not in picked:
            picked.append(r)
    return sorted(picked, key=key)

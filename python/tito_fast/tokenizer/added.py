"""Where a tokenizer splits a text before encoding it: at its added tokens.

`tokenizers` matches added tokens in two passes (those that are not
normalized on the raw text, then the normalized ones inside the normalized
pieces), leftmost-longest in each. `AddedTokenSplitter` splits a rendered
chat text the same way, so the score job can compare each text segment with
the session's bytes instead of encoding it.

Example:
    >>> splitter = AddedTokenSplitter(tok, boundary_ids, byte_exact=True)  # doctest: +SKIP
    >>> splitter.segments("<|im_start|>user\\nhi<|im_end|>")  # doctest: +SKIP
    [151644, 'user\\nhi', 151645]
"""

from __future__ import annotations

from typing import Any

from tito_fast import _core
from tito_fast.tokenizer.backend import backend_of


class AddedTokenSplitter:
    """Splits a rendered text where the tokenizer splits it before encoding: at
    its added tokens (leftmost-longest, as the tokenizer's matcher does).

    `reason` is None when the fast path applies to the tokenizer, else why
    not (e.g. an added token that strips neighbouring whitespace); a caller
    may give its own `reason` not to use the split.
    """

    def __init__(self, tokenizer: Any, boundary_ids: set[int], byte_exact: bool, *, reason: str | None = None) -> None:
        self.reason: str | None = None
        self.by_text: dict[str, int] = {}
        self.text_of: dict[int, str] = {}
        self.boundary = boundary_ids
        self.normalizer: Any = None
        self._unicode_form = False
        self._python_form: str | None = None
        self._split: _core.AddedTokenSplitter | None = None
        backend: Any = backend_of(tokenizer)
        if reason is not None:
            self.reason = reason
        elif not byte_exact:
            self.reason = "the tokenizer has no byte-exact byte table"
        elif backend is None or not hasattr(backend, "get_added_tokens_decoder"):
            self.reason = "not a fast (Rust) tokenizer"
        if self.reason:
            return
        added = backend.get_added_tokens_decoder()
        raw: list[tuple[str, int]] = []
        normalized: list[tuple[str, int]] = []
        for tid, tok in added.items():
            if tok.lstrip or tok.rstrip or tok.single_word:
                self.reason = f"added token {tok.content!r} strips whitespace or matches single words"
                return
            self.by_text[tok.content] = int(tid)
            (normalized if tok.normalized else raw).append((tok.content, int(tid)))
        self.text_of = {tid: text for text, tid in self.by_text.items()}
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

        # The tokenizer's two passes, leftmost-longest (the Rust core's split, as its encoder's).
        self._split = _core.AddedTokenSplitter(raw, normalized)

    def segments(self, text: str) -> list[int | str] | None:
        """The render as boundary ids and content texts, in order (content texts hold the
        non-boundary added tokens as text); None when a piece the tokenizer would
        normalize holds normalized added tokens (the path cannot follow it)."""
        assert self._split is not None, "no split: see `reason`"
        parts, checked = self._split.split(text)
        if any(not self.invariant(p) for p in checked):
            return None
        out: list[int | str] = []
        cur: list[str] = []
        for p in parts:
            if isinstance(p, str):
                cur.append(p)
            elif p in self.boundary:
                if cur:
                    out.append("".join(cur))
                    cur = []
                out.append(p)
            else:
                cur.append(self.text_of[p])
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

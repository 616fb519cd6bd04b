"""Which message of a conversation each rendered id belongs to.

A chat template renders each message in its own way (wrapper tags, tool
calls re-serialised as JSON, whitespace trimmed, tool results merged into
one block), so a message's text cannot be reliably looked up in the render.
Its boundaries can: for a template that renders append-only (every family
tito_fast supports renders that way with its pinned kwargs), the render of
`messages[:k]` is a prefix of the render of `messages[:k+1]`, so message k
holds the bytes between the two renders' lengths. `MessageBounds` renders
the prefixes it needs (a binary search per position, each prefix rendered
once) and says which message a byte of the render belongs to.

Where a prefix render is not a prefix of the whole, or the template refuses
it, the template renders the last turns otherwise than it renders history
(DeepSeek V3.2 drops the reasoning of turns before the last user message and
refuses an assistant turn without reasoning after it; Llama 3.1 refuses a
system message alone when it puts the tools into the first user message).
Then the prefix is rendered as history, followed by a user message holding a
sentinel (`render_history`), and it ends where that render departs from the
whole, or where the sentinel's block opens if that comes first. Where the
render of no message is not a prefix of the whole (a default system prompt
that the first message replaces), what comes before the first message's
block is outside the messages.

Example:
    >>> msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    >>> render = lambda k: "<s>" + "".join(f"<{m['role']}>{m['content']}</>" for m in msgs[:k])
    >>> b = MessageBounds(render, len(msgs), render(2).encode())
    >>> [b.message_at(i) for i in (0, 3, 13, 16)]
    [-1, 0, 0, 1]
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tito_fast._core import Segmenter, common_prefix_len


class MessageBounds:
    """Where each of `n` messages starts in `text` (the UTF-8 render of all of
    them), from `render_prefix(k)`, the render of the first k messages.

    Example:
        >>> b = MessageBounds(lambda k: "ab"[:k], 2, b"ab")
        >>> b.message_at(0), b.message_at(1)
        (0, 1)
    """

    def __init__(
        self,
        render_prefix: Callable[[int], str | bytes],
        n: int,
        text: bytes,
        *,
        openers: list[bytes] | None = None,
        first_role: str | None = None,
        render_history: Callable[[int], str | bytes] | None = None,
    ) -> None:
        """`openers`: the strings that open a rendered message block (the
        template's role markers) and `first_role` the first message's role:
        when the template refuses to render no message, or renders for no
        message what the first message replaces, what it renders before the
        first message's own block (a tools block) belongs to no message
        unless that message is a system message. `render_history(k)`: the
        render of `messages[:k]` followed by a user message whose content is
        `SENTINEL` (`history_messages` builds them), for prefixes whose
        render is not a prefix of the whole."""
        self._render = render_prefix
        self._render_history = render_history
        self.n = n
        self.text = text
        self._openers = [o for o in openers or [] if o]
        self._first_role = first_role
        self._len: dict[int, int] = {n: len(text)}

    def prefix_len(self, k: int) -> int:
        """Bytes of `text` that the render of `messages[:k]` covers: its length
        when it is a prefix of the whole render; else (the template renders
        the last turns otherwise, or refuses the prefix) the part of the
        history render (`render_history`) shared with the whole, up to the
        sentinel's block; else the part of the prefix render shared with the
        whole, or what the shorter prefix before it covers."""
        got = self._len.get(k)
        if got is None:
            part = _render_or_none(self._render, k)
            shared = self._shared(part) if part is not None else None
            if part is not None and shared == len(part):
                got = shared
            elif k == 0:
                got = self._preamble()
            else:
                history = self._history_len(k)
                if history is not None:
                    got = max(history, shared or 0)
                else:
                    got = shared if shared is not None else self.prefix_len(k - 1)
            self._len[k] = got
        return got

    def _shared(self, part: bytes) -> int:
        """Bytes `part` shares with the start of `text`."""
        return common_prefix_len(part, self.text)

    def _history_len(self, k: int) -> int | None:
        """Where `messages[:k]`, rendered as history (a user message after them),
        end in `text`: where that render departs from `text`, or where the
        sentinel's block opens if that comes first; None without a render."""
        if self._render_history is None:
            return None
        part = _render_or_none(self._render_history, k)
        if part is None:
            return None
        at = part.rfind(SENTINEL.encode("utf-8"))
        if at < 0:
            return None
        block = max((part.rfind(o, 0, at) for o in self._openers), default=-1)
        return min(self._shared(part), block if block >= 0 else at)

    def _preamble(self) -> int:
        """Where the first message's own block starts, when no render of zero messages says
        (the template refuses it, or renders a default the first message replaces)."""
        if not self._openers or self._first_role in (None, "system") or self.n == 0:
            return 0
        end = self.prefix_len(1)
        starts = [i for o in self._openers for i in _find_all(self.text[:end], o)]
        return max(starts) if starts else 0

    def message_at(self, byte: int, hint: int | None = None) -> int:
        """The index of the message whose render holds byte `byte` of `text`
        (the last message for a byte past the end; -1 for a byte of what the
        template renders before any message, e.g. a tools block). `hint`: a
        guess of the answer (e.g. the rendered block's number), tried first:
        a right guess costs two prefix renders, a wrong one changes nothing
        but the order of the search."""
        lo, hi = 0, self.n  # the smallest k with prefix_len(k) > byte: message k-1
        if byte >= self.prefix_len(hi):
            return self.n - 1
        guesses = [] if hint is None else [hint + 1, hint, hint + 2, hint + 3, hint - 1]
        step = 2  # past the guesses, the search widens from the hint before it halves
        while lo < hi:
            mid = next((g for g in guesses if lo <= g < hi), None)
            if mid is not None:
                guesses.remove(mid)
            elif hint is not None and hi - lo > 2 * step and (lo > hint + 1 or hi <= hint):
                mid = lo + step if lo > hint + 1 else hi - step  # the answer is near the hint: gallop away from it
                step *= 2
            else:
                mid = (lo + hi) // 2
            if self.prefix_len(mid) > byte:
                hi = mid
            else:
                lo = mid + 1
        return lo - 1


def block_messages(block_roles: Sequence[str], message_roles: Sequence[str]) -> list[int] | None:
    """A guess of the message each rendered block (the role tracker's blocks,
    in order) starts with, for `MessageBounds.message_at`'s hint: blocks one
    per message, or one per run of consecutive tool results (templates that
    put them in one block), with a block of the template's own first (a
    tools block) when there is one more; None when neither count fits. A
    guess only orders the search: a wrong one costs renders, never the answer."""
    for grouped in (False, True):
        starts = [i for i, r in enumerate(message_roles) if not (grouped and r == "tool" and i > 0 and message_roles[i - 1] == "tool")]
        extra = len(block_roles) - len(starts)
        if extra == 0:
            return starts
        if extra == 1 and block_roles[0] == "system":
            return [-1, *starts]
    return None


#: The content of the user message `render_history` renders after a prefix.
SENTINEL = "TITO_FAST_HISTORY_SENTINEL"


def history_messages(messages: list[dict[str, Any]], k: int) -> list[dict[str, Any]]:
    """`messages[:k]` followed by a user message holding `SENTINEL`: what
    `render_history(k)` renders (the prefix as the template renders history)."""
    return [*messages[:k], {"role": "user", "content": SENTINEL}]


def _render_or_none(render: Callable[[int], str | bytes], k: int) -> bytes | None:
    try:
        out = render(k)
        return out if isinstance(out, bytes) else out.encode("utf-8")
    except Exception:  # e.g. a template that needs a user message first
        return None


def _find_all(text: bytes, needle: bytes) -> list[int]:
    out, at = [], text.find(needle)
    while at >= 0:
        out.append(at)
        at = text.find(needle, at + 1)
    return out


def map_offsets(src: bytes, dst: bytes, offsets: list[int], markers: list[bytes]) -> np.ndarray:
    """Byte `offsets` of `src` (a render) carried over to `dst` (another text of
    the same conversation, e.g. the ids an engine was given, decoded): both are
    cut at the `markers` (the template's special-token strings), and an offset
    keeps its place within its piece (clamped to the piece's length in `dst`).
    Past the first marker the two texts do not share, offsets map to where
    that marker would be. Texts that differ inside a piece (tools serialised
    in another key order, a retokenized seam) keep every other piece's
    boundaries exact.

    Example:
        >>> map_offsets(b"<a>xx<b>yy", b"<a>xxx<b>yy", [3, 5, 8], [b"<a>", b"<b>"]).tolist()
        [3, 6, 9]
    """
    import re

    if not markers:
        return np.asarray([min(o, len(dst)) for o in offsets], dtype=np.int64)
    pattern = re.compile(b"|".join(re.escape(m) for m in sorted(set(markers), key=len, reverse=True)))
    a = [(m.start(), m.group()) for m in pattern.finditer(src)]
    b = [(m.start(), m.group()) for m in pattern.finditer(dst)]
    shared = 0
    while shared < min(len(a), len(b)) and a[shared][1] == b[shared][1]:
        shared += 1
    a_starts = [0] + [p for p, _ in a[:shared]]
    b_starts = [0] + [p for p, _ in b[:shared]]
    b_ends = b_starts[1:] + [b[shared][0] if shared < len(b) else len(dst)]
    k = np.searchsorted(np.asarray(a_starts, dtype=np.int64), np.asarray(offsets, dtype=np.int64), side="right") - 1
    out = [min(b_starts[j] + (o - a_starts[j]), b_ends[j]) for j, o in zip(k.tolist(), offsets)]
    return np.asarray(out, dtype=np.int64)


def id_offsets(segmenter: Segmenter, ids: np.ndarray, text_len: int) -> np.ndarray | None:
    """The byte offset in the decoded text where each of `ids` starts (one more
    entry: the end), from `segmenter`'s byte table (the comparator's: it has
    one when the tokenizer's table is byte-exact), or None when it has none,
    an id is outside it, or `ids` do not decode to `text_len` bytes."""
    if not len(ids):
        return None
    out = segmenter.id_offsets(ids)
    return out if out is not None and int(out[-1]) == text_len else None

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

The rule is written once, in Rust (`rust/src/bounds.rs`): `MessageBounds`
is `_core.MessageBounds`, over renders that Python callables make (the
chains, a record the native check does not take) or that a differing
session of the native check makes (`CheckedSession.message_bounds`, which
also finds the first difference's message on the check's threads).

Example:
    >>> msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    >>> render = lambda k: "<s>" + "".join(f"<{m['role']}>{m['content']}</>" for m in msgs[:k])
    >>> b = MessageBounds(render, len(msgs), render(2).encode())
    >>> [b.message_at(i) for i in (0, 3, 13, 16)]
    [-1, 0, 0, 1]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tito_fast._core import HISTORY_SENTINEL, MessageBounds, Segmenter, block_messages

__all__ = ["SENTINEL", "MessageBounds", "block_messages", "history_messages", "id_offsets", "map_offsets"]

#: The content of the user message `render_history` renders after a prefix
#: (named once, in Rust: `rust/src/bounds.rs`).
SENTINEL = HISTORY_SENTINEL


def history_messages(messages: list[dict[str, Any]], k: int) -> list[dict[str, Any]]:
    """`messages[:k]` followed by a user message holding `SENTINEL`: what
    `render_history(k)` renders (the prefix as the template renders history)."""
    return [*messages[:k], {"role": "user", "content": SENTINEL}]


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

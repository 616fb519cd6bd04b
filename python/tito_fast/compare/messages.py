"""Where a conversation's messages sit in its rendered ids.

A chat template wraps each message in markers and tags, and may merge
messages into one rendered block (tool results in one user block) or add
blocks of its own (a default system prompt). To tell which message of the
request an id belongs to, each message's own text is looked up in the
render, in order, and mapped to ids through the tokenizer's byte table.

Example:
    >>> find_messages([{"role": "user", "content": "hi"}], "<|im_start|>user\\nhi<|im_end|>")
    [(17, 19)]
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tito_fast.tokenizer.vocab import Vocab


def message_texts(message: dict[str, Any]) -> list[str]:
    """Texts of a message that its render holds verbatim, in the order tried:
    its content (content parts: their text), its reasoning, its first tool
    call's name."""
    out = []
    content = message.get("content")
    if isinstance(content, list):  # content parts: their text
        content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    for value in (content, message.get("reasoning_content")):
        if isinstance(value, str) and value.strip():
            out.append(value.strip()[:200])
    for call in message.get("tool_calls") or []:
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str) and fn["name"]:
            out.append(fn["name"])
            break
    return out


def find_messages(messages: list[dict[str, Any]], text: str) -> list[tuple[int, int] | None]:
    """Where each message's own text (`message_texts`) is in `text`, as
    (start, end) UTF-8 byte offsets, each looked up after the one before
    (None: not found)."""
    found: list[tuple[int, int] | None] = []
    cursor = 0  # char offset after the previous message's text
    for m in messages:
        hit = None
        for probe in message_texts(m):
            at = text.find(probe, cursor)
            if at >= 0:
                hit = (at, at + len(probe))
                cursor = hit[1]
                break
        found.append(hit)
    if text.isascii():
        return found
    cps = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)  # char offsets to byte offsets
    char_bytes = np.concatenate([[0], np.cumsum(1 + (cps >= 0x80) + (cps >= 0x800) + (cps >= 0x10000))]).tolist()
    return [(char_bytes[f[0]], char_bytes[f[1]]) if f is not None else None for f in found]


def message_starts(
    vocab: Vocab | None, ids: np.ndarray, text: str, found: list[tuple[int, int] | None], block_starts: np.ndarray | None
) -> np.ndarray | None:
    """Where each message starts in `ids` (non-decreasing), from where its
    text was found (`find_messages`) in `text`, the decode of `ids`; None
    when the byte table does not tell each id's bytes, or `ids` do not
    decode to `text` byte for byte.

    A message starts at the rendered block (`block_starts`: where each
    marker-opened block starts) holding its text or, when that block holds
    the previous message's text too (tool results rendered in one block),
    halfway between the two texts, so each keeps its own wrapper tags. A
    message whose text cannot be found starts where the one before it ends.
    """
    if vocab is None or not vocab.byte_exact or not len(ids):
        return None
    wide = ids.astype(np.int64)
    ends = np.cumsum(vocab.offsets[wide + 1].astype(np.int64) - vocab.offsets[wide].astype(np.int64))
    if int(ends[-1]) != (len(text) if text.isascii() else len(text.encode("utf-8"))):
        return None
    at_bytes = np.asarray([c for f in found if f is not None for c in f], dtype=np.int64)
    at_ids = np.searchsorted(ends, at_bytes, side="right").tolist()  # the id holding each text's first / last-but-one byte
    blocks = block_starts if block_starts is not None else np.zeros(0, dtype=np.int64)
    firsts = np.asarray(at_ids[0::2], dtype=np.int64)
    b = np.searchsorted(blocks, firsts, side="right") - 1
    at_block = np.where(b >= 0, blocks[np.maximum(b, 0)] if len(blocks) else 0, 0).tolist()
    starts: list[int] = []
    prev_end_id = 0
    k = 0
    for hit in found:
        if hit is None:  # not found: it starts where the one before it ends
            starts.append(prev_end_id)
            continue
        first, block_start = at_ids[2 * k], at_block[k]
        if starts and block_start < prev_end_id:  # the block holds the previous message too: split the wrapper between them
            starts.append(prev_end_id + (first - prev_end_id + 1) // 2)
        else:
            starts.append(block_start)
        prev_end_id = at_ids[2 * k + 1]
        k += 1
    return np.maximum.accumulate(np.asarray(starts, dtype=np.int64)) if starts else None

"""Real chat-template sessions for the comparator benchmarks (Qwen3 by default)."""

from __future__ import annotations

import functools
import random
from typing import Any

from tito_fast.testing import fixtures

WORDS = (
    "the model calls a tool to read the file then checks the result and writes a short answer with code "
    "numbers like 42 or 3.14 appear, JSON {\"path\": \"src/main.rs\", \"line\": 17} too; unicode: café 你好 🙂"
).split()


def _text(rng: random.Random, n_words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_words))


@functools.cache
def tokenizer(family: str = "qwen3") -> Any:
    return fixtures.load_tokenizer(family)


@functools.cache
def session_ids(turns: int, family: str = "qwen3", seed: int = 0) -> tuple[int, ...]:
    """A rendered session of `turns` user/assistant turns (~480 ids per turn)."""
    rng = random.Random(seed)
    messages = [{"role": "system", "content": "You are a coding agent."}]
    for _ in range(turns):
        messages.append({"role": "user", "content": _text(rng, 70)})
        messages.append({"role": "assistant", "content": _text(rng, 270)})
    tok = tokenizer(family)
    text = tok.apply_chat_template(messages, tokenize=False)
    return tuple(tok.encode(text, add_special_tokens=False))


def with_differences(ids: tuple[int, ...], n: int, boundary: set[int], seed: int = 1) -> list[int]:
    """`ids` with one id changed in each of `n` content segments."""
    out = list(ids)
    starts = [
        i
        for i in range(1, len(out) - 3)
        if out[i - 1] in boundary and not any(t in boundary for t in out[i : i + 3])
    ]
    rng = random.Random(seed)
    for s in rng.sample(starts, min(n, len(starts))):
        out[s + 2] = (out[s + 2] + 7) % 100_000
    return out

"""Encoding text: tito_fast's Rust encoder vs the tokenizer it replaces.

Two texts per tokenizer: a tool result of about 900 characters (what a TITO
merge encodes each agent turn) and the whole render of a 50-turn agent
session (what a session check encodes). Rows: `tito_fast`
(`FastEncoder.encode`; it remembers the ids of short pieces, so repeated
words are looked up), `tito_fast_cold` (the same with that cache cleared
before every round), `tokenizers` (the Rust tokenizer called directly,
`encode_batch_fast`, as tito_fast did before) and `transformers`
(`tokenizer.encode(text, add_special_tokens=False)`, the reference's call).
All three must give the same ids.
"""

from __future__ import annotations

from typing import Any

import pytest

from benches.bench_trajectory import TOOLS, agent_session
from benches.sessions import tokenizer
from tito_fast.chat.families import get_tito_tokenizer
from tito_fast.tokenizer.encoder import FastEncoder


def _texts(family: str, tito_family: str) -> dict[str, str]:
    msgs = agent_session(50, seed=3)
    tito = get_tito_tokenizer(tokenizer(family), tito_family, backend="jinja")
    return {
        "tool result": next(m["content"] for m in msgs if m["role"] == "tool"),
        "50-turn agent render": tito.apply_chat_template(msgs, add_generation_prompt=False, tools=TOOLS),
    }


@pytest.mark.parametrize(
    ("family", "tito_family"), [("qwen3", "qwen3"), ("llama31", "llama3"), ("deepseek_v3", "default"), ("minimax_m27", "minimax_m27")]
)
@pytest.mark.parametrize("text_kind", ["tool result", "50-turn agent render"])
@pytest.mark.parametrize("impl", ["tito_fast", "tito_fast_cold", "tokenizers", "transformers"])
def bench_encode(benchmark: Any, full_size: bool, family: str, tito_family: str, text_kind: str, impl: str) -> None:
    tok = tokenizer(family)
    text = _texts(family, tito_family)[text_kind]
    enc = FastEncoder.for_tokenizer(tok)
    assert enc.reason is None
    benchmark.group = f"encode {text_kind} ({len(text):,} chars, {family})"
    setup = None
    if impl.startswith("tito_fast"):
        fn = lambda: enc.encode(text)  # noqa: E731
        if impl == "tito_fast_cold":
            setup = enc.clear_cache  # every round starts without remembered pieces
    elif impl == "tokenizers":
        fn = lambda: list(enc.backend.encode_batch_fast([text], add_special_tokens=False)[0].ids)  # noqa: E731
    else:
        fn = lambda: tok.encode(text, add_special_tokens=False)  # noqa: E731
    rounds = {"rounds": 200 if len(text) < 10_000 else 10, "iterations": 1} if full_size else {"rounds": 1, "iterations": 1}
    ids = benchmark.pedantic(fn, setup=setup, **rounds)
    assert list(ids) == list(tok.encode(text, add_special_tokens=False))
    benchmark.extra_info["ids"] = len(ids)

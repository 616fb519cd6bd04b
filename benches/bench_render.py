"""Rendering a 50-turn conversation with a chat template: transformers'
`apply_chat_template`, tito_fast's jinja2 environment, and the native (Rust)
renderer, on Qwen3's template (Miles' fixed one) with tools; all three must
give the same text. The native row includes everything `render` does in
Python around it (message normalisation, tool canonicalisation, the
conversion to template values); `tito_fast_native_batch_2_threads` renders 16
conversations per call on two threads (per conversation)."""

from __future__ import annotations

from typing import Any

import pytest

from benches.bench_trajectory import TOOLS, agent_session
from benches.sessions import tokenizer
from tito_fast.chat.families import get_tito_tokenizer
from tito_fast.chat.render import Backend, native_renderer, normalize_messages, render, special_tokens
from tito_fast.chat.tools import canonical_tools

BATCH = 16


@pytest.mark.parametrize("impl", ["transformers", "tito_fast_jinja2", "tito_fast_native", "tito_fast_native_batch_2_threads"])
def bench_render(benchmark: Any, full_size: bool, impl: str) -> None:
    turns = 50 if full_size else 3
    tok = tokenizer()
    tito = get_tito_tokenizer(tok, "qwen3")
    template = tito.chat_template
    assert template is not None
    msgs = agent_session(turns)
    kwargs = dict(tito.chat_template_kwargs)
    benchmark.group = f"render a {turns}-turn conversation"
    want = render(tok, msgs, tools=TOOLS, chat_template=template, backend="hf", **kwargs)
    rounds = {"rounds": 30, "iterations": 1} if full_size else {"rounds": 1, "iterations": 1}
    if impl == "tito_fast_native_batch_2_threads":
        variables = {**special_tokens(tok), **kwargs}
        native = native_renderer(template, variables, "drop").template
        assert native is not None
        ctx = {**variables, "messages": normalize_messages(msgs), "tools": canonical_tools(TOOLS), "documents": None, "add_generation_prompt": False}
        contexts = [ctx] * BATCH
        benchmark.extra_info["per_call"] = BATCH
        out = benchmark.pedantic(lambda: native.render_many(contexts, threads=2), **rounds)
        assert out == [want] * BATCH
        return
    backends: dict[str, Backend] = {"transformers": "hf", "tito_fast_jinja2": "jinja", "tito_fast_native": "native"}
    backend = backends[impl]
    text = benchmark.pedantic(
        lambda: render(tok, msgs, tools=TOOLS, chat_template=template, backend=backend, none_keys="drop", **kwargs), **rounds
    )
    assert text == want

"""Whole sessions merged turn by turn: Trajectory vs the reference algorithm.

Each turn the reference renders the synthetic base and base + appended
messages, encodes the suffix, concatenates full lists, checks the prefix
with list slices and keeps a full copy of the ids (`miles_tito_tokenizers`:
the same with that package's `merge_tokens`). tito_fast does the same
work with one render when the base render is cached (it depends only on the
last assistant's tool calls, the tools and the kwargs; it renders with the
native renderer, the `tito_fast_jinja` row with tito_fast's jinja2
environment), encodes
the appended text with its Rust encoder (`tito_fast.tokenizer.encoder`; the
`tito_fast_tokenizer_encode` row uses the tokenizer's encode instead, to
show what the encoder is worth), splices and checks in Rust, and keeps one
TokenBuffer. All must produce identical ids at every turn.

Two workloads: an agent session (a tool call with new arguments every turn:
the cached base never hits) and a chat session (the assistant answers, a
user follows: the base is the same every turn, so tito_fast renders once per
turn). Per-turn cost = session time / turns. Memory of the 300-turn session: the
reference's list copies (tracemalloc peak) vs the buffer's bytes, with the
final ids as uint32 for scale.
"""

from __future__ import annotations

import copy
import json
import random
import tracemalloc
from typing import Any

import pytest

from benches.sessions import WORDS, tokenizer
from tito_fast.chat.families import get_tito_tokenizer
from tito_fast.session.trajectory import Trajectory
from tito_fast.session.verify import completion_ids
from tito_fast.testing import reference

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "run",
            "description": "Run a shell command.",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]},
        },
    }
]


def agent_session(turns: int, seed: int = 0, tool_calls: bool = True) -> list[dict[str, Any]]:
    """system, user, then `turns` x (assistant with reasoning and a tool call, tool result), final answer;
    with `tool_calls=False` a chat: the assistant answers and a user message follows."""
    rng = random.Random(seed)

    def text(n: int) -> str:
        return " ".join(rng.choice(WORDS) for _ in range(n))

    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": text(60)},
    ]
    for t in range(turns - 1):
        if not tool_calls:
            msgs.append({"role": "assistant", "content": text(80), "reasoning_content": text(60)})
            msgs.append({"role": "user", "content": text(90)})
            continue
        call = {"id": f"call_{t}", "type": "function", "function": {"name": "run", "arguments": json.dumps({"cmd": text(6)})}}
        msgs.append({"role": "assistant", "content": text(20), "reasoning_content": text(60), "tool_calls": [call]})
        msgs.append({"role": "tool", "tool_call_id": f"call_{t}", "content": text(150)})
    msgs.append({"role": "assistant", "content": text(40), "reasoning_content": text(30)})
    return msgs


def _completions(tito: Any, msgs: list[dict[str, Any]]) -> list[list[int]]:
    """The ids the model generates for each assistant turn."""
    return [completion_ids(tito, msgs[:k], m, TOOLS) for k, m in enumerate(msgs) if m["role"] == "assistant"]


def requests(msgs: list[dict[str, Any]]) -> list[tuple[int, list[dict[str, Any]]]]:
    """(index of the assistant reply, the request's messages) per turn; each request
    is a fresh parse, as a session server receives it (no object shared between turns)."""
    return [(k, json.loads(json.dumps(msgs[:k]))) for k, m in enumerate(msgs) if m["role"] == "assistant"]


def run_tito(tito: Any, msgs: list[dict[str, Any]], reqs: list[tuple[int, list[dict[str, Any]]]], completions: list[list[int]]) -> Trajectory:
    tito._base_cache.clear()  # every round starts cold, as a new session with new tool calls would
    traj = Trajectory(tito)
    for turn, (k, request) in enumerate(reqs):
        prompt = traj.prepare(request, TOOLS)
        traj.update(request, msgs[k], prompt, completions[turn])
    return traj


def run_reference(
    ref: reference.ReferenceTito, msgs: list[dict[str, Any]], reqs: list[tuple[int, list[dict[str, Any]]]], completions: list[list[int]]
) -> list[list[int]]:
    copies: list[list[int]] = []
    stored: list[dict[str, Any]] = []
    for turn, (k, request) in enumerate(reqs):
        if not copies:
            prompt = list(ref.tokenizer.encode(ref.render(request, TOOLS, True), add_special_tokens=False))
        else:
            prompt = ref.merge_tokens(stored, request, copies[-1], TOOLS)
        all_ids = prompt + completions[turn]
        if copies:
            assert reference.check_prefix(copies[-1], all_ids) is None
        copies.append(all_ids)
        stored = request + [msgs[k]]
    return copies


def run_miles_tito_tokenizers(
    mtt: Any, msgs: list[dict[str, Any]], reqs: list[tuple[int, list[dict[str, Any]]]], completions: list[list[int]]
) -> list[list[int]]:
    """The reference algorithm with miles-tito-tokenizers' `merge_tokens` (the package a user would pick instead)."""
    copies: list[list[int]] = []
    stored: list[dict[str, Any]] = []
    for turn, (k, request) in enumerate(reqs):
        if not copies:
            prompt = mtt.tokenizer.encode(mtt.render_messages(request, add_generation_prompt=True, tools=TOOLS), add_special_tokens=False)
        else:
            prompt = mtt.merge_tokens(stored, request, copies[-1], TOOLS)
        all_ids = list(prompt) + completions[turn]
        if copies:
            assert reference.check_prefix(copies[-1], all_ids) is None
        copies.append(all_ids)
        stored = request + [msgs[k]]
    return copies


@pytest.mark.parametrize("session", ["agent", "chat"])
@pytest.mark.parametrize("turns", [50, 300])
@pytest.mark.parametrize("impl", ["tito_fast", "tito_fast_jinja", "tito_fast_tokenizer_encode", "miles_tito_tokenizers", "python"])
def bench_trajectory(benchmark: Any, full_size: bool, session: str, turns: int, impl: str) -> None:
    n = turns if full_size else 4
    tok = tokenizer()
    # tito_fast_tokenizer_encode: the jinja row with the tokenizer's own encode instead of tito_fast's encoder
    backend = "native" if impl == "tito_fast" else "jinja"
    tito = get_tito_tokenizer(tok, "qwen3", backend=backend, fast_encode=impl != "tito_fast_tokenizer_encode")
    msgs = agent_session(n, tool_calls=session == "agent")
    completions = _completions(tito, msgs)
    reqs = requests(msgs)
    ref = reference.ReferenceTito(
        tok, append_after=tito._append_after, template_kwargs=tito.chat_template_kwargs, chat_template=tito.chat_template
    )
    kind = "agent session, a tool call per turn" if session == "agent" else "chat session, no tool calls"
    benchmark.group = f"trajectory {turns} turns ({kind})"
    benchmark.extra_info["turns"] = n
    rounds = {"rounds": 11 if n <= 50 else 3, "iterations": 1} if full_size else {"rounds": 1, "iterations": 1}
    if impl == "miles_tito_tokenizers":
        from miles_tito_tokenizers.tokenizer import Qwen3TITOTokenizer

        mtok = copy.copy(tok)
        mtok.chat_template = tito.chat_template  # the fixed template, as Miles installs it
        roles = ["tool"] if session == "agent" else ["tool", "user"]
        mtt = Qwen3TITOTokenizer(mtok, chat_template_kwargs=dict(tito.chat_template_kwargs), allowed_append_roles=roles)
        copies = benchmark.pedantic(lambda: run_miles_tito_tokenizers(mtt, msgs, reqs, completions), **rounds)
        ours = run_reference(ref, msgs, reqs, completions)
        # miles-tito-tokenizers renders tool definitions in its own pydantic shape (no SGLang `strict` /
        # `defer_loading` fields): its ids differ from the engine's by a fixed run in the system block,
        # and every id after the first prompt (the merged turns) is the same.
        shift = len(copies[0]) - len(ours[0])
        assert all(len(m) - len(o) == shift for m, o in zip(copies, ours)) and len(copies) == len(ours)
        assert copies[-1][len(copies[0]) :] == ours[-1][len(ours[0]) :]
        benchmark.extra_info["final_uint32_bytes"] = 4 * len(copies[-1])
    elif impl == "python":
        copies = benchmark.pedantic(lambda: run_reference(ref, msgs, reqs, completions), **rounds)
        final = copies[-1]
        benchmark.extra_info["final_uint32_bytes"] = 4 * len(final)
        tracemalloc.start()
        run_reference(ref, msgs, reqs, completions)
        benchmark.extra_info["bytes"] = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    else:
        traj = benchmark.pedantic(lambda: run_tito(tito, msgs, reqs, completions), **rounds)
        copies = run_reference(ref, msgs, reqs, completions)
        final = copies[-1]
        assert traj.token_ids == final
        assert traj.buffer.checkpoints == [len(c) for c in copies]  # identical ids at every turn
        benchmark.extra_info["bytes"] = traj.buffer.nbytes
        benchmark.extra_info["final_uint32_bytes"] = 4 * len(final)
        assert traj.buffer.nbytes <= 1.5 * 4 * len(final) + 4096
        assert traj.mismatch() == []

"""Does a family's incremental merge reproduce its full render? (`tito-fast verify-template`)

For each set of roles that may follow an assistant turn ({tool},
{tool, user}, {tool, user, system}) this builds multi-turn conversations
(reasoning, tool calls one or several per turn, tool results, unicode,
empty content), replays them as a rollout would (the first prompt
rendered, each completion the assistant turn as the template renders it,
less the trailing ids a model does not generate, each later prompt from
`merge_tokens`), and checks the accumulated ids equal the full render of
the conversation token for token (after the family's trailing trims).

Example:
    >>> from tito_fast.verify import verify_family
    >>> report = verify_family(tok, "qwen3")  # doctest: +SKIP
    >>> all(r.ok for r in report)  # doctest: +SKIP
    True
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tito_fast.families import RenderDiffError, TitoTokenizer
from tito_fast.messages import AppendOnlyError
from tito_fast.render import RenderError

ROLE_SETS: tuple[frozenset[str], ...] = (
    frozenset({"tool"}),
    frozenset({"tool", "user"}),
    frozenset({"tool", "user", "system"}),
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["C", "F"]}},
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the web.",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
        },
    },
]


def _call(i: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}}


def conversations(roles: frozenset[str], parallel_calls: bool = True) -> list[tuple[str, list[dict[str, Any]]]]:
    """Named conversations whose messages after each assistant turn use only `roles`.

    Every assistant turn carries reasoning (a thinking model always emits
    some); `parallel_calls=False` gives one tool call per turn.
    """
    first_calls = [_call(0, "get_weather", {"city": "Paris"})]
    if parallel_calls:
        first_calls.append(_call(1, "get_weather", {"city": "Zürich", "unit": "C"}))
    tools_turns: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful assistant. Use tools when they help."},
        {"role": "user", "content": "What is the weather in Paris and Zürich?"},
        {"role": "assistant", "content": "Let me check.", "reasoning_content": "I need the weather tool.", "tool_calls": first_calls},
    ]
    tools_turns += [
        {"role": "tool", "tool_call_id": c["id"], "content": json.dumps({"temp": 18 + i, "sky": "clear"})}
        for i, c in enumerate(first_calls)
    ]
    tools_turns += [
        {"role": "assistant", "content": None, "reasoning_content": "Also search.", "tool_calls": [_call(2, "search", {"q": "météo 你好 🙂"})]},
        {"role": "tool", "tool_call_id": "call_2", "content": ""},
        {"role": "assistant", "content": "Paris 18°C, Zürich 19°C. 🙂\n\nAnything else?", "reasoning_content": "Summarise."},
    ]
    out = [("tool calls", tools_turns)]
    if "user" in roles:
        chat = list(tools_turns)
        if "system" in roles:
            chat.append({"role": "system", "content": "Answer in one line."})
        chat += [
            {"role": "user", "content": "And tomorrow?  Two spaces; trailing newline\n"},
            {"role": "assistant", "content": "", "reasoning_content": "Check again.", "tool_calls": [_call(3, "get_weather", {"city": "Paris"})]},
            {"role": "tool", "tool_call_id": "call_3", "content": "{\"temp\": 21}"},
            {"role": "assistant", "content": "21°C tomorrow.", "reasoning_content": "Done."},
            {"role": "user", "content": "Thanks!"},
            {"role": "assistant", "content": "You're welcome.", "reasoning_content": "Close politely."},
        ]
        out.append(("tool calls and user turns", chat))
    return out


@dataclass
class Result:
    """One conversation replayed under one role set."""

    roles: frozenset[str]
    name: str
    turns: int = 0
    ok: bool = False
    skipped: str = ""  # why the conversation could not be used with this template
    error: str = ""  # what failed
    divergence: int | None = None  # first differing id index (merged vs full render)
    expected_text: str = ""
    actual_text: str = ""
    mismatches: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "roles": sorted(self.roles),
            "conversation": self.name,
            "turns": self.turns,
            "ok": self.ok,
            "skipped": self.skipped,
            "error": self.error,
            "first_divergence": self.divergence,
            "expected_text": self.expected_text,
            "actual_text": self.actual_text,
            "mismatches": self.mismatches,
        }


def completion_ids(
    tito: TitoTokenizer,
    history: list[dict[str, Any]],
    reply: dict[str, Any],
    tools: list[dict[str, Any]] | None = None,
    opener: str | None = None,
) -> list[int]:
    """The ids a model generates for `reply` after `history`: the template's render
    of that turn, less the trailing ids it does not generate (the whitespace the
    template puts after its end token). `opener` is the render of `history` with
    the generation prompt, when the caller has it already.

    Raises `ValueError` when the generation prompt is not how the template
    renders the turn that follows it.
    """
    if opener is None:
        opener = tito.apply_chat_template(history, add_generation_prompt=True, tools=tools)
    rendered = tito.apply_chat_template(history + [reply], add_generation_prompt=False, tools=tools)
    if not rendered.startswith(opener):
        at = next((i for i, (x, y) in enumerate(zip(opener, rendered)) if x != y), len(opener))
        raise ValueError(
            f"message {len(history)}: the generation prompt is not how the template renders the assistant turn "
            f"({opener[at:at + 30]!r} vs {rendered[at:at + 30]!r})"
        )
    ids = tito.encode(rendered[len(opener) :])
    while ids and ids[-1] in tito.trailing_token_ids and not tito.tokenizer.decode(ids[-1:]).strip():
        ids.pop()
    return ids


def replay(tito: TitoTokenizer, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> tuple[list[int], int]:
    """The ids a rollout of `messages` accumulates with this family, and its number of turns.

    Raises the family's errors (`AppendOnlyError`, `RenderDiffError`,
    `RenderError`) and `ValueError` when the template's generation prompt
    is not how it renders the assistant turn that follows.
    """
    stored: list[int] | None = None
    prev_end = 0
    turns = 0
    for k, msg in enumerate(messages):
        if msg.get("role") != "assistant" or k == 0:
            continue
        history = messages[:k]
        opener = tito.apply_chat_template(history, add_generation_prompt=True, tools=tools)
        if stored is None:
            prompt = tito.encode(opener)  # the first prompt is the render itself
        else:
            prompt = tito.merge_tokens(messages[:prev_end], history, stored, tools)
        stored = prompt + completion_ids(tito, history, msg, tools, opener)
        prev_end = k + 1
        turns += 1
    if stored is None:
        raise ValueError("the conversation has no assistant turn after the first message")
    return stored, turns


def verify_family(tito: TitoTokenizer, role_sets: tuple[frozenset[str], ...] = ROLE_SETS) -> list[Result]:
    """Replay every conversation under every role set the family allows and compare with the full render."""
    results = []
    comparator = tito.create_comparator()
    trim = set(tito.trailing_token_ids)
    for roles in role_sets:
        for parallel in (True, False):
            for name, messages in conversations(roles, parallel_calls=parallel):
                label = name + ("" if parallel else ", one call per turn")
                r = Result(roles, label)
                results.append(r)
                if not roles <= tito.allowed_append_roles:
                    r.skipped = f"the family allows only {sorted(tito.allowed_append_roles)} after an assistant turn"
                    continue
                try:
                    expected = tito.render_ids(messages, TOOLS)
                except RenderError as e:
                    r.skipped = f"the template cannot render it: {e}"
                    continue
                try:
                    actual, r.turns = replay(tito, messages, TOOLS)
                except (AppendOnlyError, RenderDiffError, RenderError, ValueError) as e:
                    r.error = f"{type(e).__name__}: {e}"
                    continue
                e_ids, a_ids = _trim(expected, trim), _trim(actual, trim)
                if e_ids == a_ids:
                    r.ok = True
                    continue
                from tito_fast import common_prefix_len

                at = common_prefix_len(e_ids, a_ids)
                r.divergence = at
                dec = tito.tokenizer.decode
                r.expected_text = dec(e_ids[max(0, at - 8) : at + 12], skip_special_tokens=False)
                r.actual_text = dec(a_ids[max(0, at - 8) : at + 12], skip_special_tokens=False)
                r.mismatches = [m.to_dict() for m in comparator.compare_sequences(expected, actual)]
                r.error = "merged ids differ from the full render"
    return results


def _trim(ids: list[int], trim: set[int]) -> list[int]:
    end = len(ids)
    while end and ids[end - 1] in trim:
        end -= 1
    return ids[:end]

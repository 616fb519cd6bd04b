"""Short canned conversations, replayed when a family is built to check that its
template renders append-only (`TitoTokenizer` does it for templates it does
not recognise), and the thinking switch of template kwargs.

Example:
    >>> thinking_on({"enable_thinking": False}), thinking_on({})
    (False, True)
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from typing import Any

from tito_fast.chat.deepseek import thinking_mode
from tito_fast.errors import RenderError

#: Tools of the canned replay (and of `tito_fast.session.verify`'s conversations).
CANNED_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]


def _weather_call(i: int, city: str) -> dict[str, Any]:
    return {"id": f"call_{i}", "type": "function", "function": {"name": "get_weather", "arguments": json.dumps({"city": city})}}


def thinking_on(kwargs: Mapping[str, Any]) -> bool:
    """Whether template kwargs leave thinking on (`thinking_mode`, else
    `enable_thinking`, else `thinking`; on unless one of them turns it off;
    the reference's precedence, see `tito_fast.chat.deepseek.thinking_mode`).

    Example:
        >>> thinking_on({"enable_thinking": False}), thinking_on({})
        (False, True)
    """
    try:
        return thinking_mode(dict(kwargs)) == "thinking"
    except RenderError:  # a thinking_mode that is neither: the renderer will say so
        return True


def canned_conversations(roles: Collection[str], thinking: bool = True) -> list[list[dict[str, Any]]]:
    """Short conversations whose messages after an assistant turn use only
    `roles`, replayed when a family is built to check that its template is
    append-only: one with every assistant-turn shape a template may render
    differently (no reasoning key, "" and " " reasoning, tool calls without
    content, several calls, content only, as last and non-last turns), and,
    with `thinking`, one with reasoning on every turn; without `thinking`
    (a model with thinking off) no turn has reasoning.

    Example:
        >>> [m["role"] for m in canned_conversations({"tool"})[0]]
        ['system', 'user', 'assistant', 'tool', 'tool', 'assistant', 'tool', 'assistant']
    """
    shapes: list[dict[str, Any]] = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "Weather in Paris and Rome?"},
        {"role": "assistant", "content": "", "tool_calls": [_weather_call(0, "Paris"), _weather_call(1, "Rome")]},
        {"role": "tool", "tool_call_id": "call_0", "content": "18"},
        {"role": "tool", "tool_call_id": "call_1", "content": "21"},
        {"role": "assistant", "content": "Checking Paris again.", "reasoning_content": "", "tool_calls": [_weather_call(2, "Paris")]},
        {"role": "tool", "tool_call_id": "call_2", "content": "19"},
        {"role": "assistant", "content": "Paris 19, Rome 21.", "reasoning_content": " "},
    ]
    if "system" in roles:
        shapes.append({"role": "system", "content": "Answer in one line."})
    if "user" in roles:
        shapes += [
            {"role": "user", "content": "Thanks."},
            {"role": "assistant", "content": "You're welcome."},
            {"role": "user", "content": "Bye."},
            {"role": "assistant", "content": "Bye.", "reasoning_content": "Close."},
        ]
    if not thinking:
        return [[{k: v for k, v in m.items() if k != "reasoning_content"} for m in shapes]]
    reasoned = [
        {**m, "reasoning_content": f"Think {i}."} if m["role"] == "assistant" else m for i, m in enumerate(shapes)
    ]
    return [shapes, reasoned]

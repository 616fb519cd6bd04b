"""Rendering: our jinja2 environment equals transformers' on real templates,
tool canonicalisation policies, message normalisation, errors."""

from __future__ import annotations

import functools
import json
from typing import Any

import pytest

from tito_fast.chat.render import normalize_messages, render
from tito_fast.chat.tools import canonical_tools
from tito_fast.errors import RenderError
from tito_fast.session.verify import TOOLS, conversations
from tito_fast.testing import fixtures

FAMILIES = ["qwen3", "qwen35", "qwen25", "glm47", "minimax_m27", "llama31", "kimi_k2", "deepseek_v3"]


@functools.cache
def _tok(name: str) -> Any:
    return fixtures.load_tokenizer(name)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("gen", [False, True])
def test_jinja_backend_equals_transformers(family: str, gen: bool) -> None:
    tok = _tok(family)
    compared = 0
    for parallel in (True, False):
        for _, messages in conversations(frozenset({"tool", "user"}), parallel_calls=parallel):
            # None-valued keys, which transformers drops: "drop" renders alike.
            messages = [{**m, "name": None} if m["role"] == "user" else m for m in messages]
            for end in range(2, len(messages) + 1):
                try:
                    want = render(tok, messages[:end], tools=TOOLS, add_generation_prompt=gen)
                except RenderError:
                    with pytest.raises(RenderError):
                        render(tok, messages[:end], tools=TOOLS, add_generation_prompt=gen, backend="jinja", none_keys="drop")
                    continue
                assert render(tok, messages[:end], tools=TOOLS, add_generation_prompt=gen, backend="jinja", none_keys="drop") == want
                compared += 1
    assert compared >= 5


def test_jinja_backend_keeps_none_valued_keys() -> None:
    # transformers 5 drops keys whose value is None; a template that tests
    # `is none` sees the difference. Ours keeps them.
    template = "{% for m in messages %}{{ m.role }}:{{ 'none' if m.name is none else 'absent' if m.name is not defined else m.name }};{% endfor %}"
    tok = _tok("qwen3")
    msgs = [{"role": "user", "content": "hi", "name": None}]
    assert render(tok, msgs, chat_template=template, backend="jinja") == "user:none;"
    assert render(tok, msgs, chat_template=template) == "user:absent;"


def test_jinja_backend_allows_list_append() -> None:
    template = "{% set xs = [] %}{% for m in messages %}{% set _ = xs.append(m.role) %}{% endfor %}{{ xs | join(',') }}"
    assert render(_tok("qwen3"), [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}], chat_template=template, backend="jinja") == "user,assistant"


def test_tool_policies() -> None:
    tool = {"name": "f", "description": "d", "parameters": {"type": "object"}}
    sglang = canonical_tools([tool])
    assert sglang == [{"type": "function", "function": {"description": "d", "name": "f", "parameters": {"type": "object"}, "strict": False}, "defer_loading": None}]
    assert list(sglang[0]["function"]) == ["description", "name", "parameters", "strict"]
    legacy = canonical_tools([{"type": "function", "function": tool}], "sglang-legacy")
    assert legacy == [{"type": "function", "function": {"description": "d", "name": "f", "parameters": {"type": "object"}, "strict": False}}]
    assert canonical_tools([{"type": "function", "function": tool}], "none") == [{"type": "function", "function": tool}]
    deferred = canonical_tools([{"type": "function", "function": tool, "defer_loading": True}])
    assert deferred is not None and deferred[0]["function"]["defer_loading"] is True and deferred[0]["defer_loading"] is True
    assert canonical_tools(None) is None and canonical_tools([]) is None
    with pytest.raises(ValueError, match="tool policy"):
        canonical_tools([tool], "openai")  # type: ignore[arg-type]
    with pytest.raises(RenderError, match="tools\\[0\\].function needs a string 'name'"):
        canonical_tools([{"description": "no name"}])
    # The policy shows in a real prompt: Qwen3 dumps each tool with tojson.
    text = render(_tok("qwen3"), [{"role": "user", "content": "x"}], tools=[tool])
    assert '"strict": false' in text and '"defer_loading": null' in text
    assert '"defer_loading"' not in render(_tok("qwen3"), [{"role": "user", "content": "x"}], tools=[tool], tool_policy="sglang-legacy")


def test_message_normalisation() -> None:
    calls: list[dict[str, Any]] = [{"id": "c", "type": "function", "function": {"name": "f", "arguments": '{"a": [1, "é"]}'}}]
    msgs: list[dict[str, Any]] = [{"role": "assistant", "content": None, "tool_calls": calls}]
    out = normalize_messages(msgs)
    assert out[0]["content"] == "" and out[0]["tool_calls"][0]["function"]["arguments"] == {"a": [1, "é"]}
    assert msgs[0]["content"] is None and isinstance(calls[0]["function"]["arguments"], str)  # input untouched
    back = normalize_messages(out, "json")
    assert json.loads(back[0]["tool_calls"][0]["function"]["arguments"]) == {"a": [1, "é"]}
    bad: list[dict[str, Any]] = [{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "f", "arguments": "{not json"}}]}]
    with pytest.raises(RenderError, match=r"messages\[0\].tool_calls\[0\].function.arguments is not valid JSON"):
        normalize_messages(bad)
    with pytest.raises(RenderError, match=r"messages\[1\] is a str"):
        normalize_messages([{"role": "user", "content": "x"}, "oops"])  # type: ignore[list-item]


def test_template_errors_are_render_errors() -> None:
    tok = _tok("llama31")
    two_calls = conversations(frozenset({"tool"}))[0][1][:3]
    with pytest.raises(RenderError, match="single tool-calls"):
        render(tok, two_calls, tools=TOOLS)
    with pytest.raises(RenderError, match="TypeError"):
        render(_tok("deepseek_v31"), two_calls, tools=TOOLS)  # its template concatenates JSON strings
    assert "get_weather" in render(_tok("deepseek_v31"), two_calls, tools=TOOLS, arguments="json")


def test_deepseek_v4_encoder() -> None:
    from tito_fast.chat import deepseek

    tok = _tok("deepseek_v4")
    found = deepseek.find_encoder(tok, "dsv4", trust_encoder=True)  # the fixture folder's copy: trusted here
    assert found is not None and found.origin.endswith("deepseek_v4/encoding_dsv4.py") and found.keeps_history_reasoning
    enc = found
    msgs = [{"role": "user", "content": "hi"}]
    with_prompt = render(tok, msgs, deepseek=enc, add_generation_prompt=True, arguments="json")
    without = render(tok, msgs, deepseek=enc, arguments="json")
    assert with_prompt == without + "<｜Assistant｜><think>" and without.startswith("<｜begin▁of▁sentence｜>")
    chat = render(tok, msgs, deepseek=enc, add_generation_prompt=True, arguments="json", thinking=False)
    assert chat.endswith("<｜Assistant｜></think>")
    assert "get_weather" in render(tok, msgs, deepseek=enc, tools=TOOLS, arguments="json")
    with pytest.raises(RenderError, match="takes no kwargs \\['clear_thinking'\\]"):
        render(tok, msgs, deepseek=enc, clear_thinking=False)
    with pytest.raises(RenderError, match="does not exist"):
        deepseek.load_encoder("/nonexistent/encoding_dsv4.py")

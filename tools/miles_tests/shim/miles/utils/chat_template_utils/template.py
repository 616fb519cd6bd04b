"""Miles' rendering entry points, answered by tito_fast.chat.render and tito_fast.chat.deepseek."""

from __future__ import annotations

import json
import os
from typing import Any

from miles.utils.chat_template_utils.message_matcher_hub import (  # noqa: F401
    assert_messages_append_only_with_allowed_role,
    strict_message_matches,
)
from tito_fast.chat import deepseek
from tito_fast.chat.render import canonical_tools, normalize_messages, render
from tito_fast.errors import RenderError


def _model_type(tokenizer: Any) -> str:
    path = os.path.join(getattr(tokenizer, "name_or_path", "") or "", "config.json")
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return ""
    return data.get("model_type", "") if isinstance(data, dict) else ""


def normalize_tool_arguments(messages: list[dict[str, Any]], format: str) -> list[dict[str, Any]]:
    return normalize_messages(messages, "json" if format == "json" else "dict")


def extract_tool_dicts(tools: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    return canonical_tools(tools)


def merge_chat_template_kwargs(base: dict[str, Any], overrides: dict[str, Any], *, alias_keys: Any = ()) -> dict[str, Any]:
    if alias_keys:
        return deepseek.merge_thinking_kwargs(base, overrides)
    return {**base, **overrides}


def load_hf_chat_template(model_id: str) -> str:
    raise OSError("no hub access here")


def apply_chat_template(
    messages: list[dict[str, Any]],
    *,
    tokenizer: Any,
    tools: list[dict[str, Any]] | None = None,
    add_generation_prompt: bool = True,
    tokenize: bool = False,
    **kwargs: Any,
) -> Any:
    model_type = _model_type(tokenizer)
    if model_type in ("deepseek_v32", "deepseek_v4"):
        version = "dsv32" if model_type == "deepseek_v32" else "dsv4"
        found = deepseek.find_encoder(tokenizer, version)
        if found is None:
            raise ValueError(deepseek.not_found_message(model_type, version))
        text = render(tokenizer, messages, tools=tools, add_generation_prompt=add_generation_prompt, arguments="json",
                      deepseek=found, none_keys="drop", **kwargs)
    else:
        try:
            text = render(tokenizer, messages, tools=tools, add_generation_prompt=add_generation_prompt, none_keys="drop", **kwargs)
        except RenderError as e:
            raise ValueError(f"Chat template rendering failed: {e}") from e
    return tokenizer.encode(text, add_special_tokens=False) if tokenize else text


def apply_chat_template_from_str(chat_template: str, messages: list[dict[str, Any]], add_generation_prompt: bool = True,
                                 tools: list[dict[str, Any]] | None = None, **kwargs: Any) -> str:
    from tito_fast.chat.render import _compile  # noqa: F401  (the jinja backend renders as transformers does)

    class _NoTokenizer:
        special_tokens_map: dict[str, Any] = {}
        chat_template = None

    try:
        return render(_NoTokenizer(), messages, tools=tools, add_generation_prompt=add_generation_prompt,
                      chat_template=chat_template, backend="jinja", none_keys="drop", **kwargs)
    except RenderError as e:
        raise ValueError(f"Chat template rendering failed: {e}") from e

"""DeepSeek's own prompt encoders (V3.2, V4) as a renderer.

DeepSeek V3.2 and V4 ship no Jinja chat template: a Python module
(`encoding_dsv4.py`, `encoding_dsv32.py`) with `encode_messages(messages,
thinking_mode, ...)` renders prompts, and the inference engine calls it. This
module loads such a file at run time (from the tokenizer's directory or a
given path; tito_fast ships no copy) and calls it the way the engine does:

- `thinking` / `enable_thinking` kwargs choose `thinking_mode` ("thinking"
  unless one of them is false); `drop_thinking` and `reasoning_effort` pass
  through; any other kwarg is an error;
- tools (canonicalised like the engine's pydantic dump) go into the system
  message, which is added when there is none;
- tool-call arguments must be JSON strings (the family renders with
  `arguments="json"`);
- the encoder always ends a user/tool tail with the assistant opener; without
  a generation prompt that opener is cut off.

Example:
    >>> enc = load_encoder("/path/to/tokenizer/encoding_dsv4.py")  # doctest: +SKIP
    >>> render_with_encoder(enc, messages, add_generation_prompt=True)  # doctest: +SKIP
"""

from __future__ import annotations

import functools
import importlib.util
from pathlib import Path
from typing import Any

from tito_fast.render import RenderError, ToolPolicy, canonical_tools

ASSISTANT = "<｜Assistant｜>"
_PASS_THROUGH = ("drop_thinking", "reasoning_effort")


@functools.lru_cache(maxsize=8)
def load_encoder(path: str | Path) -> Any:
    """Import an encoder module from its file (cached per path)."""
    path = Path(path)
    if not path.is_file():
        raise RenderError(f"DeepSeek encoder module {path} does not exist")
    spec = importlib.util.spec_from_file_location(f"tito_fast_encoder_{path.stem}_{abs(hash(str(path)))}", path)
    if spec is None or spec.loader is None:
        raise RenderError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not callable(getattr(module, "encode_messages", None)):
        raise RenderError(f"{path} has no encode_messages()")
    return module


def find_encoder(tokenizer: Any, name: str) -> Path | None:
    """`encoding_<name>.py` in the tokenizer's directory, when there is one."""
    root = getattr(tokenizer, "name_or_path", "") or ""
    candidate = Path(root) / f"encoding_{name}.py"
    return candidate if root and candidate.is_file() else None


def _thinking_mode(kwargs: dict[str, Any]) -> str:
    for key in ("thinking", "enable_thinking"):
        if kwargs.get(key) is not None:
            return "thinking" if kwargs[key] else "chat"
    mode = kwargs.get("thinking_mode", "thinking")
    if mode not in ("thinking", "chat"):
        raise RenderError(f"thinking_mode must be 'thinking' or 'chat', got {mode!r}")
    return str(mode)


def render_with_encoder(
    encoder: Any,
    messages: list[dict[str, Any]],
    *,
    tools: list[dict[str, Any]] | None = None,
    add_generation_prompt: bool = True,
    tool_policy: ToolPolicy = "sglang",
    version: str = "dsv4",
    **kwargs: Any,
) -> str:
    """The encoder's prompt for `messages` (see the module doc)."""
    unknown = set(kwargs) - {"thinking", "enable_thinking", "thinking_mode", *_PASS_THROUGH}
    if unknown:
        raise RenderError(f"the DeepSeek encoder takes no kwargs {sorted(unknown)}")
    mode = _thinking_mode(kwargs)
    config = {k: kwargs[k] for k in _PASS_THROUGH if k in kwargs}
    msgs = list(messages)  # only the list and the system message change: no deep copy
    defs = canonical_tools(tools, tool_policy)
    if defs:
        if msgs and msgs[0].get("role") == "system":
            msgs[0] = {**msgs[0], "tools": defs}
        else:
            msgs.insert(0, {"role": "system", "content": "", "tools": defs})
    try:
        text = str(encoder.encode_messages(msgs, thinking_mode=mode, **config))
    except (AssertionError, KeyError, TypeError, ValueError) as e:
        raise RenderError(f"the DeepSeek encoder failed: {type(e).__name__}: {e}") from e
    if add_generation_prompt or not msgs:
        return text
    think = getattr(encoder, "thinking_start_token", "<think>") if mode == "thinking" else getattr(encoder, "thinking_end_token", "</think>")
    tail = msgs[-1].get("role")
    if version == "dsv32":
        suffix = ASSISTANT + think if tail in ("user", "developer") else ("\n\n" + think if tail == "tool" else None)
    else:
        suffix = ASSISTANT + think if tail in ("user", "developer", "tool") else None
    if suffix is not None and text.endswith(suffix):
        return text[: -len(suffix)]
    return text

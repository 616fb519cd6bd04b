"""DeepSeek's own prompt encoders (V3.2, V4) as a renderer.

DeepSeek V3.2 and V4 ship no Jinja chat template: a Python module
(`encoding_dsv32.py`, `encoding_dsv4.py`) with `encode_messages(messages,
thinking_mode, ...)` renders prompts, and the inference engine calls it.
tito_fast ships no copy; `find_encoder` looks where users have one, in this
order:

1. an explicit file (`encoder_path=`, `--encoder FILE`);
2. the copy installed with the framework that renders it: Miles' own
   vendored `encoding_dsv32` (the `miles` package), SGLang's `encoding_dsv4`
   (the `sglang` package);
3. next to the tokenizer files, then in its `encoding/` folder (as
   DeepSeek's model repositories ship it), only with `trust_encoder=True`
   (`--trust-encoder`): loading the file runs its code, as transformers'
   `trust_remote_code` does;
4. the `miles-tito-tokenizers` package (`pip install 'tito_fast[miles]'`).

It is called the way the engine and the reference call it:

- the thinking mode follows the reference's precedence: `thinking_mode`
  when given, else `enable_thinking`, else `thinking`, else "thinking";
  `drop_thinking` and `reasoning_effort` pass through; any other kwarg is an
  error;
- tools (canonicalised like the engine's pydantic dump) go into the system
  message, which is added when there is none;
- tool-call arguments must be JSON strings (the family renders with
  `arguments="json"`);
- the encoder always ends a user/tool tail with the assistant opener; without
  a generation prompt that opener is cut off.

Encoders differ in one way that decides append-only rendering: Miles'
vendored V3.2 copy and V4 keep every assistant's reasoning under
`drop_thinking=False`, DeepSeek's (and SGLang's) V3.2 original drops the
reasoning of assistant turns before the last user message whatever
`drop_thinking` says. `Encoder.keeps_history_reasoning` tells which.

Example:
    >>> enc = find_encoder(tok, "dsv4")  # doctest: +SKIP
    >>> render_with_encoder(enc.module, messages, add_generation_prompt=True)  # doctest: +SKIP
"""

from __future__ import annotations

import functools
import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tito_fast import _deps
from tito_fast.chat.tools import ToolPolicy, canonical_tools
from tito_fast.errors import RenderError

ASSISTANT = "<｜Assistant｜>"
_PASS_THROUGH = ("drop_thinking", "reasoning_effort")
#: Template kwargs that all name the thinking mode (a request that sets one replaces them all).
THINKING_KWARGS = frozenset({"thinking_mode", "enable_thinking", "thinking"})

# Where installed frameworks keep the encoder (package, path inside it).
_FRAMEWORK_COPIES = {
    "dsv32": [("miles", "utils/chat_template_utils/templates/encoding_dsv32.py")],
    "dsv4": [("sglang", "srt/entrypoints/openai/encoding_dsv4.py")],
}
_MTT_MODULES = {"dsv32": "miles_tito_tokenizers.encoders.deepseek_v32", "dsv4": "miles_tito_tokenizers.encoders.deepseek_v4"}


@dataclass(frozen=True)
class Encoder:
    """A loaded DeepSeek encoder module and where it came from.

    Attributes:
        module: the module (`encode_messages`, `thinking_start_token`, ...).
        origin: where it was found, for messages and reports.
        version: "dsv32" or "dsv4".
        keeps_history_reasoning: whether `drop_thinking=False` keeps the
            reasoning of assistant turns before the last user message (then
            appending a user turn is append-only).
    """

    module: Any
    origin: str
    version: str
    keeps_history_reasoning: bool


@functools.lru_cache(maxsize=16)
def load_encoder(path: str | Path) -> Any:
    """Import an encoder module from its file (cached per path)."""
    path = Path(path)
    if not path.is_file():
        raise RenderError(f"DeepSeek encoder module {path} does not exist")
    spec = importlib.util.spec_from_file_location(f"tito_fast_encoder_{path.stem}_{abs(hash(str(path)))}", path)
    if spec is None or spec.loader is None:
        raise RenderError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as e:  # a broken file: say which
        raise RenderError(f"cannot import the DeepSeek encoder {path}: {type(e).__name__}: {e}") from e
    if not callable(getattr(module, "encode_messages", None)):
        raise RenderError(f"{path} has no encode_messages()")
    return module


def _package_file(package: str, inner: str) -> Path | None:
    """A file inside an installed package, found without importing the package."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    for root in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(root) / inner
        if candidate.is_file():
            return candidate
    return None


def folder_copies(tokenizer: Any, version: str) -> list[Path]:
    """The encoder files next to the tokenizer files and in their `encoding/` folder."""
    root = getattr(tokenizer, "name_or_path", "") or ""
    if not isinstance(root, str) or not root:
        return []
    return [p for sub in ("", "encoding") if (p := Path(root) / sub / f"encoding_{version}.py").is_file()]


def candidates(tokenizer: Any, version: str, trust_encoder: bool = False) -> list[tuple[str, str]]:
    """Every place `find_encoder` looks, in order, as (kind, where): kind is "file" or "module".
    The tokenizer's folder is looked in only with `trust_encoder`."""
    out: list[tuple[str, str]] = []
    for package, inner in _FRAMEWORK_COPIES.get(version, []):
        found = _package_file(package, inner)
        if found is not None:
            out.append(("file", str(found)))
    if trust_encoder:
        out.extend(("file", str(p)) for p in folder_copies(tokenizer, version))
    if version in _MTT_MODULES and _deps.installed("miles_tito_tokenizers"):
        out.append(("module", _MTT_MODULES[version]))
    return out


def _load(kind: str, where: str) -> Any:
    if kind == "file":
        return load_encoder(where)
    try:
        module = _deps.require(where, "use its DeepSeek encoder")
    except Exception as e:
        raise RenderError(f"cannot import {where}: {type(e).__name__}: {e}") from e
    if not callable(getattr(module, "encode_messages", None)):
        raise RenderError(f"{where} has no encode_messages()")
    return module


def _describe(kind: str, where: str) -> str:
    if kind == "module":
        return f"module {where} (miles-tito-tokenizers)"
    return f"file {where}"


def keeps_history_reasoning(module: Any) -> bool:
    """Whether the encoder keeps an assistant's reasoning once a later user turn
    follows, under `drop_thinking=False` (one small render)."""
    msgs = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a", "reasoning_content": "tito-probe-reasoning"},
        {"role": "user", "content": "q2"},
    ]
    try:
        text = str(module.encode_messages(msgs, thinking_mode="thinking", drop_thinking=False))
    except Exception:
        return False
    return "tito-probe-reasoning" in text


def find_encoder(
    tokenizer: Any, version: str, path: str | Path | None = None, *, trust_encoder: bool = False
) -> Encoder | None:
    """The DeepSeek encoder for `version` ("dsv32" or "dsv4"): `path` when given,
    else the first of `candidates(tokenizer, version, trust_encoder)` that loads;
    None when there is none.

    Raises `RenderError` when `path` is given but cannot be loaded.
    """
    if path is not None:
        module = load_encoder(str(path))
        return Encoder(module, f"file {path}", version, keeps_history_reasoning(module))
    for kind, where in candidates(tokenizer, version, trust_encoder):
        try:
            module = _load(kind, where)
        except RenderError:
            continue  # a framework copy that does not import here: try the next place
        return Encoder(module, _describe(kind, where), version, keeps_history_reasoning(module))
    return None


def not_found_message(family: str, version: str, untrusted: list[Path] | None = None) -> str:
    if untrusted:
        return (
            f"family {family!r} renders with DeepSeek's encoding_{version}.py; the tokenizer's folder has "
            f"{untrusted[0]}, and loading it runs its code: pass trust_encoder=True (--trust-encoder) to use it, "
            f"or pass the file as encoder_path= (--encoder FILE), or install miles-tito-tokenizers "
            f"(pip install 'tito_fast[miles]')"
        )
    return (
        f"family {family!r} renders with DeepSeek's encoding_{version}.py, and none was found: not installed with "
        f"Miles or SGLang, not next to the tokenizer files or in their encoding/ folder, and miles-tito-tokenizers "
        f"is not installed. Install it (pip install 'tito_fast[miles]'), or pass the file as encoder_path= "
        f"(--encoder FILE on the command line)"
    )


def thinking_mode(kwargs: dict[str, Any]) -> str:
    """The effective thinking mode of template kwargs, with the reference's precedence:
    `thinking_mode`, then `enable_thinking`, then `thinking`, then "thinking".

    Example:
        >>> thinking_mode({"enable_thinking": False, "thinking": True})
        'chat'
        >>> thinking_mode({"thinking_mode": "thinking", "thinking": False})
        'thinking'
    """
    mode = kwargs.get("thinking_mode")
    if mode is None:
        for key in ("enable_thinking", "thinking"):
            if kwargs.get(key) is not None:
                mode = "thinking" if kwargs[key] else "chat"
                break
        else:
            mode = "thinking"
    if mode not in ("thinking", "chat"):
        raise RenderError(f"thinking_mode must be 'thinking' or 'chat', got {mode!r}")
    return str(mode)


def merge_thinking_kwargs(base: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """`base` updated by `overrides`, where an override naming the thinking mode in
    any of its spellings replaces all of base's spellings (a request-scoped mode wins)."""
    merged = dict(base)
    if THINKING_KWARGS & overrides.keys():
        for key in THINKING_KWARGS:
            merged.pop(key, None)
    merged.update(overrides)
    return merged


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
    unknown = set(kwargs) - {*THINKING_KWARGS, *_PASS_THROUGH}
    if unknown:
        raise RenderError(f"the DeepSeek encoder takes no kwargs {sorted(unknown)}")
    mode = thinking_mode(kwargs)
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
    except Exception as e:  # the encoders raise their own error classes (DS32EncodingError, ...)
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

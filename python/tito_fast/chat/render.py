"""Chat-template rendering as the inference engine does it.

Everything that renders a conversation in tito_fast goes through `render`:

- messages are normalised as the engine does before templating: an
  assistant `content: None` becomes `""`, and tool-call `arguments` given
  as a JSON string become a dict (Jinja templates index them as objects);
  the caller's messages are never modified;
- tools are canonicalised by a named policy (`TOOL_POLICIES`): `sglang`
  (the default: what current SGLang's pydantic `Tool` model dumps, with
  `"defer_loading": null` per tool and `"strict": false` per function),
  `sglang-legacy` (no `defer_loading`) or `none` (as given);
- a template that rejects the canonical tool shape is retried with the bare
  function schemas, as the engine does;
- the backend is the tokenizer's own `apply_chat_template` (`"hf"`, the
  default), `"jinja"`: a jinja2 environment of our own set up like
  transformers' (sandboxed, `trim_blocks`, `lstrip_blocks`, loop controls,
  a `tojson` that keeps non-ASCII, `raise_exception`, `strftime_now`,
  `{% generation %}` blocks) that keeps None-valued message keys, which
  transformers 5 drops, and whose sandbox lets templates call `list.append`,
  or `"native"`: the same variables rendered by the Rust renderer
  (`tito_fast._core.NativeTemplate`, on minijinja) with the interpreter
  released. A template the native renderer cannot render exactly as jinja2
  (it does not compile, or differs on probe conversations) renders with
  jinja2 (`native_renderer(...).reason` says why), and so does any single
  render it cannot do (a Python method it lacks, a value it cannot print
  as Python does): native results are jinja2's text or not given at all.

Example:
    >>> from tito_fast.chat.render import render
    >>> render(tok, [{"role": "user", "content": "hi"}], add_generation_prompt=True)  # doctest: +SKIP
    '<|im_start|>user\\nhi<|im_end|>\\n<|im_start|>assistant\\n'
"""

from __future__ import annotations

import functools
import json
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from tito_fast import _deps
from tito_fast._core import NativeTemplate, TemplateRenderError
from tito_fast._core import normalize_messages as _normalize
from tito_fast.chat.canned import CANNED_TOOLS, canned_conversations
from tito_fast.chat.deepseek import Encoder, render_with_encoder
from tito_fast.chat.tools import ToolPolicy, canonical_tools, plain_copy
from tito_fast.errors import RenderError

Backend = Literal["hf", "jinja", "native"]
BACKENDS: tuple[Backend, ...] = ("hf", "jinja", "native")


def normalize_messages(
    messages: list[dict[str, Any]],
    arguments: Literal["dict", "json"] = "dict",
    *,
    none_keys: Literal["keep", "drop"] = "keep",
    alias: bool = False,
) -> list[dict[str, Any]]:
    """A copy with assistant `content: None` as `""` and tool-call arguments as
    dicts (`"dict"`, for Jinja templates) or JSON strings (`"json"`, for encoders
    that parse them); with `none_keys="drop"` None-valued keys go, and with
    `alias` the reasoning is set under `thinking` and `reasoning_content` as
    transformers does. The rule has one owner, the Rust core
    (`_core.normalize_messages`, rust/src/check/normalise.rs), which the
    native session check uses too.

    Example:
        >>> m = [{"role": "assistant", "content": None,
        ...       "tool_calls": [{"function": {"name": "f", "arguments": '{"a": 1}'}}]}]
        >>> normalize_messages(m)[0]["tool_calls"][0]["function"]["arguments"]
        {'a': 1}
    """
    try:
        return _normalize(messages, arguments=arguments, none_keys=none_keys, alias=alias)
    except ValueError as e:
        raise RenderError(str(e)) from None


def render(
    tokenizer: Any,
    messages: list[dict[str, Any]],
    *,
    tools: list[dict[str, Any]] | None = None,
    add_generation_prompt: bool = False,
    chat_template: str | None = None,
    tool_policy: ToolPolicy = "sglang",
    backend: Backend = "hf",
    arguments: Literal["dict", "json"] = "dict",
    none_keys: Literal["keep", "drop"] = "keep",
    deepseek: Encoder | None = None,
    **template_kwargs: Any,
) -> str:
    """The rendered text of `messages` (never tokenized here).

    Args:
        tokenizer: a transformers tokenizer (its template and special tokens).
        messages: OpenAI-style chat messages.
        tools: tool definitions, canonicalised by `tool_policy`.
        add_generation_prompt: end with the assistant opener.
        chat_template: a template string that replaces the tokenizer's.
        backend: "hf" (the tokenizer's `apply_chat_template`), "jinja" or
            "native" (Rust; jinja2 where it cannot render exactly).
        arguments: tool-call arguments as "dict" (most templates) or "json"
            strings (templates that concatenate them, e.g. DeepSeek V3.1).
        none_keys: the jinja backend keeps message keys whose value is None
            ("keep") or drops them as transformers 5 does ("drop": then both
            backends render alike, the jinja one faster).
        deepseek: DeepSeek's encoder module (`tito_fast.chat.deepseek.Encoder`)
            that renders instead of a template.
        template_kwargs: extra template variables (`enable_thinking`, ...).
    """
    # the jinja and native backends get the messages as transformers hands them on (reasoning aliased)
    aliased = backend in ("jinja", "native") and deepseek is None
    msgs = normalize_messages(messages, arguments, none_keys=none_keys if aliased else "keep", alias=aliased)
    if deepseek is not None:
        return render_with_encoder(
            deepseek.module,
            msgs,
            tools=tools,
            add_generation_prompt=add_generation_prompt,
            tool_policy=tool_policy,
            version=deepseek.version,
            **template_kwargs,
        )
    tool_defs = _canonical_tools_memo(tools, tool_policy) if backend == "native" else canonical_tools(tools, tool_policy)

    def once(defs: list[dict[str, Any]] | None) -> str:
        if backend == "hf":
            out = tokenizer.apply_chat_template(
                msgs,
                tools=defs,
                chat_template=chat_template,
                add_generation_prompt=add_generation_prompt,
                tokenize=False,
                **template_kwargs,
            )
            return str(out)
        if backend in ("jinja", "native"):
            template = chat_template if chat_template is not None else template_of(tokenizer)
            variables = {**special_tokens(tokenizer), **template_kwargs}
            context = {
                **variables,
                "messages": msgs,
                "tools": defs,
                "documents": None,
                "add_generation_prompt": add_generation_prompt,
            }
            if backend == "native":
                native = native_renderer(template, variables, none_keys)
                text = native.render(context)
                if text is not None:
                    return text
                context["tools"] = plain_copy(defs)  # the remembered tools stay as they are
            return str(_compile(template).render(**context))
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")

    jinja2 = _deps.jinja2()

    try:
        try:
            return once(tool_defs)
        except jinja2.TemplateError as e:
            if tool_defs is None:
                raise RenderError(f"chat template failed: {e}") from e
            try:
                return once([t["function"] for t in tool_defs])
            except jinja2.TemplateError as e2:
                raise RenderError(f"chat template failed (also with bare function schemas): {e2}") from e2
    except (TypeError, KeyError, AttributeError) as e:
        raise RenderError(f"chat template failed on these messages: {type(e).__name__}: {e}") from e


def _utc_offset() -> int:
    """Seconds east of UTC of the local time now (what `datetime.now()` uses)."""
    return int(time.localtime().tm_gmtoff)


@dataclass
class NativeRenderer:
    """One template (with one set of template variables) on the native renderer.

    `template` is the compiled `NativeTemplate`, or None when the template
    renders with jinja2: `reason` says why (it does not compile natively, or
    a probe conversation renders differently). `fallbacks` counts single
    renders handed to jinja2 (something that render needed that the native
    renderer does not do exactly), `last_fallback` says what.

    Example:
        >>> r = native_renderer("{{ messages[0].content }}", {}, "drop")
        >>> r.reason is None, r.render({"messages": [{"content": "hi"}]})
        (True, 'hi')
    """

    template: NativeTemplate | None
    reason: str | None
    fallbacks: int = 0
    last_fallback: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def render(self, context: dict[str, Any]) -> str | None:
        """The native render of `context`, or None: render it with jinja2."""
        if self.template is None:
            return None
        try:
            return self.template.render(context)
        except TemplateRenderError as e:
            with self._lock:
                self.fallbacks += 1
                self.last_fallback = str(e)
            return None


def native_renderer(template: str, variables: dict[str, Any], none_keys: Literal["keep", "drop"] = "drop") -> NativeRenderer:
    """The template on the native renderer, built and probed once per template
    and variables (shared by all threads), or with `reason` set when it must
    render with jinja2."""
    last = _LAST_NATIVE  # one read: another thread may replace it
    if last is not None and last[0] is template and last[2] == none_keys and last[1] == variables:
        return last[3]  # the same template and variables as the last render: no key to build
    try:
        key = json.dumps(variables, sort_keys=True)
    except (TypeError, ValueError):
        return NativeRenderer(None, "the template variables are not plain JSON values")
    found = _native(template, key, none_keys)
    globals()["_LAST_NATIVE"] = (template, plain_copy(variables), none_keys, found)
    return found


#: (template, a copy of the variables, none_keys, renderer) of the last lookup.
_LAST_NATIVE: tuple[str, dict[str, Any], str, NativeRenderer] | None = None
#: (policy, the tools' JSON text, their canonical form) of the last native render with tools.
_LAST_TOOLS: tuple[str, str, list[dict[str, Any]] | None] | None = None


def _canonical_tools_memo(tools: list[dict[str, Any]] | None, policy: ToolPolicy) -> list[dict[str, Any]] | None:
    """`canonical_tools`, remembered for the last tools (a session sends the
    same tools every turn). Only for the native renderer, which never changes
    what it is given (a jinja2 template could). The tools are the same when
    their JSON text is: `==` is not enough, as 1, 1.0 and true are equal but
    written apart by `tojson`, and so are dicts with their keys in another
    order, and 0.0 and -0.0."""
    if not tools:
        return canonical_tools(tools, policy)
    try:
        text = json.dumps(tools)
    except (TypeError, ValueError, RecursionError):  # not plain JSON values: not remembered
        return canonical_tools(tools, policy)
    last = _LAST_TOOLS
    if last is not None and last[0] == policy and last[1] == text:
        return last[2]
    defs = canonical_tools(tools, policy)
    globals()["_LAST_TOOLS"] = (policy, text, defs)
    return defs


@functools.lru_cache(maxsize=64)
def _native(template: str, variables_json: str, none_keys: Literal["keep", "drop"]) -> NativeRenderer:
    try:
        compiled = NativeTemplate(template, utc_offset=_utc_offset())
    except TemplateRenderError as e:
        return NativeRenderer(None, f"the native renderer cannot compile the template: {e.reason}")
    variables = json.loads(variables_json)
    reason = _probe(compiled, template, variables, none_keys)
    return NativeRenderer(compiled if reason is None else None, reason)


def _probe(compiled: NativeTemplate, template: str, variables: dict[str, Any], none_keys: Literal["keep", "drop"]) -> str | None:
    """Render the canned conversations (every assistant-turn shape, with and
    without tools and generation prompt) both ways; the first difference, if any."""
    env = _compile(template)
    convs = canned_conversations({"user", "tool", "system"}) + canned_conversations({"user", "tool"}, thinking=False)
    for i, conv in enumerate(convs):
        msgs = normalize_messages(conv, none_keys=none_keys, alias=True)
        for tools in (None, canonical_tools(CANNED_TOOLS, "sglang")):
            for gen in (False, True):
                for upto in (2, len(msgs)):
                    ctx = {**variables, "messages": msgs[:upto], "tools": tools, "documents": None, "add_generation_prompt": gen}
                    try:
                        want: str | None = str(env.render(**ctx))
                    except Exception:  # jinja2 rejects this shape: the native side must fail too
                        want = None
                    try:
                        got: str | None = compiled.render(ctx)
                    except TemplateRenderError as e:
                        if want is None or e.raised:
                            continue
                        return f"the native renderer cannot render probe conversation {i}: {e.reason}"
                    if got != want:
                        if want is None:
                            return f"jinja2 fails on probe conversation {i} where the native renderer does not"
                        assert got is not None
                        at = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), min(len(got), len(want)))
                        return f"probe conversation {i} renders differently at character {at}: native {got[at:at + 30]!r}, jinja2 {want[at:at + 30]!r}"
    return None


def template_of(tokenizer: Any) -> str:
    """The tokenizer's chat template (its default one when it has several)."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        template = template.get("default")
    if not isinstance(template, str):
        raise RenderError("the tokenizer has no chat template; pass chat_template=")
    return template


def special_tokens(tokenizer: Any) -> dict[str, Any]:
    return dict(getattr(tokenizer, "special_tokens_map", {}) or {})


@functools.lru_cache(maxsize=64)
def _compile(template: str) -> Any:
    jinja2 = _deps.jinja2()
    # jinja2 comes from _deps as a module object, so its classes are Any to mypy
    extension_base: Any = jinja2.ext.Extension
    sandbox_base: Any = jinja2.sandbox.SandboxedEnvironment

    class Generation(extension_base):  # type: ignore[misc]
        """`{% generation %}...{% endgeneration %}` renders its body unchanged."""

        tags = {"generation"}

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

        def _body(self, caller: Any) -> str:
            return str(caller())

    def raise_exception(message: str) -> None:
        raise jinja2.TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None, sort_keys: bool = False) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt: str) -> str:
        return datetime.now().strftime(fmt)

    dict_attributes = frozenset(dir(dict))
    plain_objects = (jinja2.runtime.LoopContext, jinja2.utils.Namespace)
    # Public str methods; the sandbox allows them all and wraps only these two.
    str_methods = frozenset(a for a in dir(str) if not a.startswith("_")) - {"format", "format_map"}

    class Sandbox(sandbox_base):  # type: ignore[misc]
        """The sandbox, with a fast path for `message.role`-style lookups.

        Jinja tries the attribute first and the item second; on a plain dict
        every name that is not a dict method is an item, so it is read
        directly (same result, without raising AttributeError first).
        """

        def getattr(self, obj: Any, attribute: str) -> Any:
            t = type(obj)
            if t is dict and attribute not in dict_attributes:
                try:
                    return obj[attribute]
                except KeyError:
                    return self.undefined(obj=obj, name=attribute)
            if t is str and attribute in str_methods:
                return getattr(obj, attribute)
            if t in plain_objects and not attribute.startswith("_"):
                # loop.index0, ns.flag: public data of jinja's own objects, which the sandbox allows
                try:
                    return getattr(obj, attribute)
                except AttributeError:
                    return self.undefined(obj=obj, name=attribute)
            return super().getattr(obj, attribute)

    # A (mutable) sandbox: some templates build lists with `.append`.
    env = Sandbox(trim_blocks=True, lstrip_blocks=True, extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(template)

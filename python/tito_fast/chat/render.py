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
import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from tito_fast import _deps
from tito_fast._core import NativeTemplate, TemplateLimitError, TemplateRenderError
from tito_fast._core import normalize_messages as _normalize
from tito_fast.chat.canned import CANNED_TOOLS, canned_conversations
from tito_fast.chat.deepseek import Encoder, render_with_encoder
from tito_fast.chat.tools import ToolPolicy, canonical_tools, plain_copy
from tito_fast.errors import RenderError
from tito_fast.tokenizer import cache as table_cache

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
            return render_jinja(_compile(template), context)
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")

    try:
        try:
            return once(tool_defs)
        except _jinja_error() as e:
            if tool_defs is None:
                raise RenderError(f"chat template failed: {e}") from e
            try:
                return once([t["function"] for t in tool_defs])
            except _jinja_error() as e2:
                raise RenderError(f"chat template failed (also with bare function schemas): {e2}") from e2
    except (TypeError, KeyError, AttributeError) as e:
        raise RenderError(f"chat template failed on these messages: {type(e).__name__}: {e}") from e


class _NotRaised(Exception):
    """Stands for jinja2's errors while jinja2 is not imported (nothing rendered with it)."""


def _jinja_error() -> type[Exception]:
    """`jinja2.TemplateError` once jinja2 is imported, else an error nothing raises:
    a native render needs no jinja2 (importing it costs ~25 ms of a run's start)."""
    jinja2 = _deps.loaded("jinja2")
    return jinja2.TemplateError if jinja2 is not None else _NotRaised


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
    reason = _probe_verdict(compiled, template, variables, none_keys)
    return NativeRenderer(compiled if reason is None else None, reason)


def _probe_verdict(
    compiled: NativeTemplate, template: str, variables: dict[str, Any], none_keys: Literal["keep", "drop"]
) -> str | None:
    """`_probe`'s verdict, kept on disk (`tokenizer.cache`) by the template,
    its variables and the jinja2 it was compared with: a template known by
    its hash is not probed again (compiling it for jinja2 is most of a
    start-up's render setup)."""
    digest = hashlib.sha256(template.encode("utf-8")).hexdigest()
    # the key holds the installed jinja2's version (`tokenizer.cache`): read without importing it
    name = table_cache.key("probe", digest, json.dumps(variables, sort_keys=True), none_keys)
    got = table_cache.load(name)
    if got is not None and "verdict" in got:
        try:
            return table_cache.array_text(got["verdict"]) or None
        except UnicodeDecodeError:  # a damaged file: probe again
            pass
    reason = _probe(compiled, template, variables, none_keys)
    table_cache.store(name, {"verdict": table_cache.text_array(reason or "")})
    return reason


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
                        want: str | None = render_jinja(env, ctx)
                    except TemplateLimitError:  # a limit on a probe conversation: the template is refused
                        raise
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


# -- the limits of the jinja2 renderer (the native renderer's, in jinja2's terms) --

#: The least budget of steps (loop iterations and calls) of a jinja2 render;
#: it grows with the context as the native renderer's fuel does.
STEPS_FLOOR = 1 << 20
STEPS_PER_BYTE = 4
#: Bytes a render may create (strings built by `~`, `+`, `*`, `%`,
#: `format`, padding filters and methods, macro results) per step of its budget.
BYTES_PER_STEP = 64
#: The output a render may write: the floor plus this per byte of context.
OUTPUT_FLOOR = 64 << 20
OUTPUT_PER_BYTE = 16
#: The most nested macro calls (Python's own recursion limit is a limit too).
MAX_MACRO_DEPTH = 100
#: The most items a `range` may have (jinja2's sandbox's, and the native renderer's).
MAX_RANGE = 100_000


class _Budget:
    """What one jinja2 render may still do (per thread: the template is shared)."""

    __slots__ = ("steps", "bytes", "depth")

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self.bytes = steps * BYTES_PER_STEP
        self.depth = 0


_budget = threading.local()


def _limit(what: str) -> TemplateLimitError:
    e = TemplateLimitError(f"the template passed a limit of the renderer: {what}")
    e.reason = what
    return e


def _current() -> _Budget | None:
    return getattr(_budget, "b", None)


def _step(n: int = 1) -> None:
    b = _current()
    if b is not None:
        b.steps -= n
        if b.steps < 0:
            raise _limit("out of steps (loop iterations and calls; the budget grows with the conversation)")


def _charge(nbytes: int) -> None:
    """Pay for `nbytes` of data before it is made."""
    b = _current()
    if b is not None:
        b.bytes -= nbytes
        if b.bytes < 0:
            raise _limit(f"a string of {nbytes} bytes, more than the render's data budget has left")


def _context_size(value: Any, depth: int = 0) -> int:
    """The context's size as the limits count it: its strings' bytes (characters
    here) and 16 per other value, as the native renderer counts."""
    if isinstance(value, str):
        return len(value)
    if depth > 300:
        return 16
    if isinstance(value, dict):
        return 16 + sum(_context_size(k, depth + 1) + _context_size(v, depth + 1) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return 16 + sum(_context_size(v, depth + 1) for v in value)
    return 16


def render_jinja(template: Any, context: dict[str, Any]) -> str:
    """Render a template of `_compile` under the limits (the native renderer's,
    counted in jinja2's terms: steps for fuel, bytes created, output size,
    macro depth, `range` size); a limit, a MemoryError or a RecursionError is
    `TemplateLimitError`."""
    size = _context_size(context)
    outer = _current()
    _budget.b = _Budget(max(STEPS_FLOOR, STEPS_PER_BYTE * size))
    cap = OUTPUT_FLOOR + OUTPUT_PER_BYTE * size
    try:
        parts: list[str] = []
        total = 0
        for piece in template.generate(**context):
            total += len(piece)
            if total > cap:
                raise _limit(f"the output passed {cap} characters (the output limit)")
            parts.append(piece)
        return "".join(parts)
    except MemoryError:
        raise _limit("out of memory") from None
    except RecursionError:
        raise _limit("too deep a recursion (Python's recursion limit)") from None
    finally:
        _budget.b = outer


def _loop(iterable: Any) -> Any:
    """What a `{% for %}` loop iterates: each item is a step."""
    for item in iterable:
        _step()
        yield item


def _concat(items: list[Any]) -> str:
    """`a ~ b ~ ...`, paid for before it is made."""
    strs = [str(x) for x in items]
    _charge(sum(map(len, strs)))
    return "".join(strs)


def _safe_range(*args: int) -> range:
    rng = range(*args)
    if len(rng) > MAX_RANGE:
        raise _limit(f"range() of {len(rng)} items (at most {MAX_RANGE})")
    return rng


_WIDTH = re.compile(r"\d+")


def _format_widths(fmt: str, printf: bool) -> int:
    """The most bytes of padding a format string asks for: the sum of the
    numbers in its specs (a bound, not the exact figure)."""
    total = 0
    if printf:
        for spec in re.findall(r"%[-#0 +]*(?:\d+|\*)?(?:\.(?:\d+|\*))?[a-zA-Z%]", fmt):
            total += 64 + sum(int(d) for d in _WIDTH.findall(spec))
    else:
        for spec in re.findall(r"\{[^{}]*\}", fmt):
            total += 64 + sum(int(d) for d in _WIDTH.findall(spec.partition(":")[2]))
    return total


def _padded(method: Any) -> Any:
    """A padding str method (`center`, `ljust`, `rjust`, `zfill`, `expandtabs`)
    that pays for its width first."""

    def bounded(*args: Any, **kwargs: Any) -> Any:
        width = next((a for a in list(args) + list(kwargs.values()) if isinstance(a, int)), 0)
        if method.__name__ == "expandtabs":
            width = width * max(1, method.__self__.count("\t"))
        _charge(max(0, int(width)))
        return method(*args, **kwargs)

    return bounded


_PADDING_METHODS = frozenset({"center", "ljust", "rjust", "zfill", "expandtabs"})


def _paying_filter(name: str, f: Any) -> Any:
    """A jinja2 filter whose result may be far larger than its input, paying
    for the width (or the format's padding) first."""

    def paying(*args: Any, **kwargs: Any) -> Any:
        if name == "format" and args and isinstance(args[0], str):
            _charge(_format_widths(args[0], printf=True) + len(args[0]))
        elif name == "indent" and args:
            width = args[1] if len(args) > 1 else kwargs.get("width", 4)
            lines = str(args[0]).count("\n") + 1
            _charge(lines * (len(width) if isinstance(width, str) else max(0, int(width))))
        else:
            width = args[1] if len(args) > 1 else kwargs.get("width", 80)
            _charge(max(0, int(width)) if isinstance(width, int) else 0)
        return f(*args, **kwargs)

    return functools.wraps(f)(paying)


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

    nodes = jinja2.nodes
    macro_types = (jinja2.runtime.Macro,)

    transformer_base: Any = jinja2.visitor.NodeTransformer

    class Limited(transformer_base):  # type: ignore[misc]
        """Every `{% for %}` iterates through `_loop` (a step per item) and every
        `~` builds through `_concat` (paid for first): environment attributes,
        which a template cannot rebind."""

        def visit_For(self, node: Any) -> Any:
            node = self.generic_visit(node)
            node.iter = nodes.Call(nodes.EnvironmentAttribute("tito_loop"), [node.iter], [], None, None)
            return node

        def visit_Concat(self, node: Any) -> Any:
            node = self.generic_visit(node)
            return nodes.Call(nodes.EnvironmentAttribute("tito_concat"), [nodes.List(node.nodes)], [], None, None)

    class Sandbox(sandbox_base):  # type: ignore[misc]
        """The sandbox, with a fast path for `message.role`-style lookups, and
        the renderer's limits (see `render_jinja`).

        Jinja tries the attribute first and the item second; on a plain dict
        every name that is not a dict method is an item, so it is read
        directly (same result, without raising AttributeError first).
        """

        intercepted_binops = frozenset({"*", "+", "%"})
        tito_loop = staticmethod(_loop)
        tito_concat = staticmethod(_concat)

        def compile(self, source: Any, name: str | None = None, filename: str | None = None, raw: bool = False, defer_init: bool = False) -> Any:
            # jinja2 compiles a template from its AST as well as from its text: the AST, made bounded
            if isinstance(source, str):
                source = Limited().visit(self.parse(source, name, filename))
            return super().compile(source, name, filename, raw, defer_init)

        def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
            _step()
            b = _current()
            macro = b is not None and isinstance(__obj, macro_types)
            if macro:
                b.depth += 1  # type: ignore[union-attr]
                if b.depth > MAX_MACRO_DEPTH:  # type: ignore[union-attr]
                    raise _limit(f"more than {MAX_MACRO_DEPTH} nested macro calls")
            try:
                out = super().call(__context, __obj, *args, **kwargs)
            finally:
                if macro:
                    b.depth -= 1  # type: ignore[union-attr]
            if macro and isinstance(out, str):
                _charge(len(out))
            return out

        def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
            if operator == "*":
                n, seq = (left, right) if isinstance(left, int) else (right, left)
                if isinstance(n, int) and isinstance(seq, (str, list, tuple)):
                    _charge(max(0, n) * len(seq) * (1 if isinstance(seq, str) else 8))
            elif operator == "+" and isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple)):
                _charge(len(left) + len(right))
            elif operator == "%" and isinstance(left, str):
                _charge(_format_widths(left, printf=True) + len(left))
            return super().call_binop(context, operator, left, right)

        def wrap_str_format(self, value: Any) -> Any:
            wrapped = super().wrap_str_format(value)
            if wrapped is not None:
                _charge(_format_widths(value.__self__, printf=False))
            return wrapped

        def getattr(self, obj: Any, attribute: str) -> Any:
            t = type(obj)
            if t is dict and attribute not in dict_attributes:
                try:
                    return obj[attribute]
                except KeyError:
                    return self.undefined(obj=obj, name=attribute)
            if t is str and attribute in str_methods:
                if attribute in _PADDING_METHODS:
                    return _padded(getattr(obj, attribute))
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
    # the filters that pad to a width pay for it first
    for name in ("center", "indent", "format"):
        env.filters[name] = _paying_filter(name, env.filters[name])
    env.globals["range"] = _safe_range
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    # jinja2 folds constant expressions when it compiles (`'x'|center(10**9)`):
    # they pay from a budget too (one that fails is left to the render)
    outer = _current()
    _budget.b = _Budget(STEPS_FLOOR)
    try:
        return env.from_string(template)
    finally:
        _budget.b = outer

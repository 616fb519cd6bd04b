"""The native (Rust) chat-template renderer renders what transformers'
`apply_chat_template` renders, byte for byte: on every fixture template and
every Miles fixed template, on the verify-template conversations and on
random messages, and anything it cannot render exactly goes to jinja2."""

from __future__ import annotations

import functools
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tito_fast._core import NativeTemplate, TemplateRenderError
from tito_fast.chat.render import native_renderer, render, special_tokens, template_of
from tito_fast.chat.templates import FIXED_TEMPLATES, find_fixed_template
from tito_fast.errors import RenderError
from tito_fast.session.verify import TOOLS, conversations
from tito_fast.testing import fixtures

# (fixture tokenizer, fixed template family or None for the tokenizer's own template)
TEMPLATES: list[tuple[str, str | None]] = [
    ("qwen3", None),
    ("qwen35", None),
    ("glm47", None),
    ("minimax_m27", None),
    ("llama31", None),
    ("kimi_k2", None),
    ("deepseek_v3", None),
    ("deepseek_v31", None),
    ("nemotron3", None),
] + [
    ({"qwen35": "qwen35", "kimi25": "kimi_k2", "minimax_m25": "minimax_m27", "minimax_m27": "minimax_m27"}.get(f, "qwen3"), f)
    for f in FIXED_TEMPLATES
]


@functools.cache
def _tok(name: str) -> Any:
    return fixtures.load_tokenizer(name)


def _template(tok_name: str, fixed: str | None) -> str:
    if fixed is None:
        return template_of(_tok(tok_name))
    found = find_fixed_template(fixed)
    if found is None:
        pytest.skip(f"no installed package ships {FIXED_TEMPLATES[fixed]} (miles-tito-tokenizers has no inkling template)")
    return found.text


def _ids(p: tuple[str, str | None]) -> str:
    return p[0] if p[1] is None else f"{p[1]}-fixed"


def _both(tok: Any, template: str, messages: list[dict[str, Any]], **kw: Any) -> tuple[str | None, str | None]:
    """(transformers' render or None when it raises, the native render or None when it raises)."""
    try:
        want: str | None = render(tok, messages, chat_template=template, **kw)
    except RenderError:
        want = None
    extra = {k: v for k, v in kw.items() if k not in ("tools", "add_generation_prompt")}
    native = native_renderer(template, {**special_tokens(tok), **extra}, "drop")
    assert native.reason is None, native.reason
    before = native.fallbacks
    try:
        got: str | None = render(tok, messages, chat_template=template, backend="native", none_keys="drop", **kw)
    except RenderError:
        got = None
    assert native.fallbacks == before or want is None, f"fell back to jinja2: {native.last_fallback}"
    return want, got


@pytest.mark.parametrize("pair", TEMPLATES, ids=_ids)
def test_every_template_renders_natively(pair: tuple[str, str | None]) -> None:
    tok = _tok(pair[0])
    template = _template(*pair)
    native = native_renderer(template, special_tokens(tok), "drop")
    assert native.reason is None, native.reason


@pytest.mark.parametrize("pair", TEMPLATES, ids=_ids)
@pytest.mark.parametrize("thinking", [True, False])
def test_native_equals_transformers_on_verify_conversations(pair: tuple[str, str | None], thinking: bool) -> None:
    tok = _tok(pair[0])
    template = _template(*pair)
    compared = 0
    for roles in (frozenset({"tool"}), frozenset({"tool", "user"}), frozenset({"tool", "user", "system"})):
        for parallel in (True, False):
            for _, messages in conversations(roles, parallel_calls=parallel, thinking=thinking):
                for tools in (TOOLS, None):
                    for gen in (False, True):
                        for end in (2, 3, len(messages)):
                            kw = {"enable_thinking": thinking}
                            want, got = _both(tok, template, messages[:end], tools=tools, add_generation_prompt=gen, **kw)
                            assert got == want, (roles, parallel, tools is None, gen, end)
                            compared += want is not None
    assert compared >= 20


# -- random messages ----------------------------------------------------------

_text = st.text(st.characters(codec="utf-8"), max_size=30) | st.sampled_from(["", " ", "\n", "  x\n\n", "<think>a</think>b", "é 你好 🙂", "\x1c\t"])
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | _text
)
_json = st.recursive(_scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3), max_leaves=8)


@st.composite
def _call(draw: Any, i: int) -> dict[str, Any]:
    args = draw(st.dictionaries(st.text(min_size=1, max_size=8), _json, max_size=3))
    as_json = draw(st.booleans())
    return {
        "id": f"call_{i}",
        "type": "function",
        "function": {"name": draw(st.sampled_from(["get_weather", "run", "f_ü"])), "arguments": json.dumps(args) if as_json else args},
    }


@st.composite
def _messages(draw: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if draw(st.booleans()):
        out.append({"role": "system", "content": draw(_text)})
    out.append({"role": "user", "content": draw(_text)})
    for turn in range(draw(st.integers(1, 3))):
        msg: dict[str, Any] = {"role": "assistant", "content": draw(st.none() | _text)}
        reasoning = draw(st.sampled_from(["absent", "none", "text"]))
        if reasoning == "none":
            msg["reasoning_content"] = None
        elif reasoning == "text":
            msg["reasoning_content"] = draw(_text)
        n_calls = draw(st.integers(0, 3))
        if n_calls:
            msg["tool_calls"] = [draw(_call(10 * turn + k)) for k in range(n_calls)]
        out.append(msg)
        for k in range(n_calls):
            out.append({"role": "tool", "tool_call_id": f"call_{10 * turn + k}", "content": draw(_text)})
        if draw(st.booleans()):
            out.append({"role": "user", "content": draw(_text)})
    return out


@pytest.mark.parametrize("pair", TEMPLATES, ids=_ids)
@settings(max_examples=40, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(messages=_messages(), with_tools=st.booleans(), gen=st.booleans())
def test_native_equals_transformers_on_random_messages(
    pair: tuple[str, str | None], messages: list[dict[str, Any]], with_tools: bool, gen: bool
) -> None:
    tok = _tok(pair[0])
    template = _template(*pair)
    want, got = _both(tok, template, messages, tools=TOOLS if with_tools else None, add_generation_prompt=gen)
    assert got == want


# -- fallbacks and errors -----------------------------------------------------


def test_unsupported_render_falls_back_to_jinja2() -> None:
    tok = _tok("qwen3")
    # list.append: the jinja backend's mutable sandbox allows it, minijinja values are immutable
    template = "{% set xs = [] %}{% for m in messages %}{% set _ = xs.append(m.role) %}{% endfor %}{{ xs | join(',') }}"
    msgs = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    native = native_renderer(template, special_tokens(tok), "keep")
    assert native.reason is not None and "append" in native.reason
    assert render(tok, msgs, chat_template=template, backend="native", none_keys="keep") == "user,assistant"


def test_template_that_does_not_compile_says_why() -> None:
    native = native_renderer("{% for x in %}", {}, "drop")
    assert native.template is None and native.reason is not None and "compile" in native.reason


def test_raise_exception_is_flagged() -> None:
    t = NativeTemplate("{{ raise_exception('no ' ~ what) }}")
    with pytest.raises(TemplateRenderError) as e:
        t.render({"what": "tools"})
    assert e.value.raised and e.value.reason == "no tools"
    assert isinstance(e.value, ValueError)


def test_bad_context_is_a_clear_error() -> None:
    t = NativeTemplate("{{ x }}")
    with pytest.raises(ValueError, match="'context': must be a dict"):
        t.render(["x"])  # type: ignore[arg-type]
    with pytest.raises(TemplateRenderError, match="context holds a value of type object"):
        t.render({"x": object()})
    deep: Any = []
    for _ in range(1000):
        deep = [deep]
    with pytest.raises(TemplateRenderError, match="nested deeper"):
        t.render({"x": deep})
    with pytest.raises(TemplateRenderError, match="beyond 128 bits"):
        t.render({"x": 2**200})


def test_render_many_on_threads_equals_one_by_one() -> None:
    tok = _tok("qwen3")
    template = template_of(tok)
    t = NativeTemplate(template)
    contexts = [
        {**special_tokens(tok), "messages": msgs[:end], "tools": None, "add_generation_prompt": False}
        for _, msgs in conversations(frozenset({"tool", "user"}))
        for end in range(2, len(msgs) + 1)
    ]
    one = [t.render(c) for c in contexts]
    assert t.render_many(contexts, threads=2) == one
    out = t.render_many([{"x": 1}, {"messages": 3}], threads=1)
    assert isinstance(out[1], TemplateRenderError)


def test_remembered_tools_and_variables_follow_changes() -> None:
    """The native path remembers the last tools and template variables; tools
    or kwargs changed in place between renders still render as given."""
    tok = fixtures.load_tokenizer("qwen3")
    tools = json.loads(json.dumps(TOOLS))
    msgs = [{"role": "user", "content": "hi"}]
    kwargs: dict[str, Any] = {"enable_thinking": True}

    def both() -> tuple[str, str]:
        gen = {"add_generation_prompt": True, **kwargs}
        native = render(tok, msgs, tools=tools, backend="native", none_keys="drop", **gen)
        return native, render(tok, msgs, tools=tools, backend="hf", **gen)

    first, want = both()
    assert first == want
    tools[0]["function"]["description"] = "changed in place"
    native, want = both()
    assert native == want and "changed in place" in native
    tools.append({"type": "function", "function": {"name": "extra", "parameters": {}}})
    native, want = both()
    assert native == want and '"extra"' in native
    kwargs["enable_thinking"] = False  # the same template with other variables
    thinking_off, want = both()
    assert thinking_off == want and thinking_off != native


def test_floats_halfway_between_two_shortest_forms_are_written_as_python_writes_them() -> None:
    """562949953421312.25 reads back from both ...312.2 and ...312.3; Python's
    repr takes the even digit (Rust's shortest form the upper one)."""
    import random

    from tito_fast.chat.render import native_renderer

    r = native_renderer("{{ x }}", {})
    rng = random.Random(5)
    ties = [float(2**e + rng.randint(0, 2**20)) + f for e in range(40, 57) for f in (0.125, 0.25, 0.375, 0.625, 0.75, 0.875)]
    for v in ties + [-x for x in ties] + [562949953421312.2]:
        assert r.render({"x": v}) == repr(v)

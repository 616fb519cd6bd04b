"""The drop-in as Miles users run it: Miles' fixed templates (installed on the
tokenizer, or from the package), the fallback edit, the build-time append-only
check, DeepSeek encoders found where users have them, and the reference's API."""

from __future__ import annotations

import enum
import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tito_fast.chat import deepseek, templates
from tito_fast.chat.canned import canned_conversations
from tito_fast.chat.families import get_tito_tokenizer
from tito_fast.errors import FamilyError, RenderError, TemplateNotAppendOnlyError
from tito_fast.session.verify import TOOLS, conversations, verify_family
from tito_fast.testing import fixtures
from tito_fast.testing.reference import ReferenceTito

# fixture tokenizer -> families whose Miles fixed template is in miles-tito-tokenizers
FIXED = [
    ("qwen3", "qwen3"),
    ("qwen35", "qwen35"),
    ("qwen3", "qwennext"),
    ("minimax_m27", "minimax_m27"),
    ("minimax_m27", "minimax_m25"),
    ("kimi_k2", "kimi25"),
]


@functools.cache
def _tok(name: str) -> Any:
    return fixtures.load_tokenizer(name)


def _as_miles_loads_it(tok_name: str, family: str) -> Any:
    """A fresh tokenizer with the family's fixed template installed, as Miles' load_tokenizer does."""
    fixed = templates.find_fixed_template(family)
    assert fixed is not None, "miles-tito-tokenizers is a test dependency"
    tok = fixtures.load_tokenizer(tok_name)
    tok.chat_template = fixed.text
    return tok


@pytest.fixture
def no_miles_packages(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if neither Miles nor miles-tito-tokenizers were installed."""
    monkeypatch.setattr(templates, "_folders", lambda: [])
    monkeypatch.setattr(deepseek, "_MTT_MODULES", {})
    monkeypatch.setattr(deepseek, "_FRAMEWORK_COPIES", {})


def test_the_package_files_are_the_known_ones() -> None:
    assert templates.package_available()
    for family, name in templates.FIXED_TEMPLATES.items():
        fixed = templates.find_fixed_template(family)
        if fixed is None:
            assert name == "inkling_fixed.jinja"  # only in Miles itself
            continue
        assert templates.identify(fixed.text) == name
        assert "miles-tito-tokenizers" in fixed.origin and fixed.name == name


@pytest.mark.parametrize(("tok_name", "family"), FIXED)
def test_tokenizer_as_miles_loads_it_is_used_as_is(tok_name: str, family: str) -> None:
    tok = _as_miles_loads_it(tok_name, family)
    tito = get_tito_tokenizer(tok, family)
    assert tito.chat_template is None  # the tokenizer's own template renders
    assert tito.template_source == f"the tokenizer's template (Miles' {templates.FIXED_TEMPLATES[family]})"
    results = verify_family(tito, thinking="both")
    assert all(r.ok for r in results if not r.skipped), [r.to_dict() for r in results if not r.ok and not r.skipped]
    assert sum(r.ok for r in results) >= 4


@pytest.mark.parametrize(("tok_name", "family"), FIXED)
def test_stock_tokenizer_renders_with_the_fixed_template(tok_name: str, family: str) -> None:
    stock = get_tito_tokenizer(_tok(tok_name), family)
    assert stock.template_source.startswith("Miles' fixed template (miles-tito-tokenizers") or family == "kimi25"
    miles = get_tito_tokenizer(_as_miles_loads_it(tok_name, family), family)
    for roles in ({"tool"}, {"tool", "user"}):
        if not roles <= stock.allowed_append_roles or family == "kimi25":
            continue
        for thinking in (True, False):
            for _, msgs in conversations(frozenset(roles), thinking=thinking):
                for gen in (False, True):
                    a = stock.apply_chat_template(msgs, add_generation_prompt=gen, tools=TOOLS)
                    assert a == miles.apply_chat_template(msgs, add_generation_prompt=gen, tools=TOOLS)


def test_kimi_k2_template_is_append_only_and_kept() -> None:
    # Kimi K2's own template (the fixture stands in for K2.5) passes the canned replay: used as it is.
    tito = get_tito_tokenizer(_tok("kimi_k2"), "kimi25")
    assert tito.chat_template is None and tito.template_source == "the tokenizer's own template (append-only: checked)"


# -- the fallback edit renders as the fixed template, for every message shape --

_text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=12)
_reasoning = st.one_of(st.just(None), st.just(""), st.just(" "), st.just("\n"), _text)


@st.composite
def _conversation(draw: st.DrawFn, user_turns: bool) -> list[dict[str, Any]]:
    msgs: list[dict[str, Any]] = []
    if draw(st.booleans()):
        msgs.append({"role": "system", "content": draw(_text)})
    msgs.append({"role": "user", "content": draw(_text)})
    call = 0
    for _ in range(draw(st.integers(1, 4))):
        m: dict[str, Any] = {"role": "assistant", "content": draw(st.one_of(st.none(), st.just(""), _text))}
        reasoning = draw(st.one_of(st.just("absent"), _reasoning))
        if reasoning != "absent":
            m["reasoning_content"] = reasoning
        n_calls = draw(st.integers(0, 3))
        if n_calls:
            calls = []
            for _ in range(n_calls):
                args = draw(st.dictionaries(st.sampled_from(["city", "q", "n"]), st.one_of(_text, st.integers(), st.lists(st.integers(), max_size=2)), max_size=2))
                calls.append({"id": f"c{call}", "type": "function", "function": {"name": "get_weather", "arguments": json.dumps(args, ensure_ascii=False) if draw(st.booleans()) else args}})
                call += 1
            m["tool_calls"] = calls
        elif draw(st.booleans()):
            m["tool_calls"] = []
        msgs.append(m)
        for c in m.get("tool_calls") or []:
            msgs.append({"role": "tool", "tool_call_id": c["id"], "content": draw(_text)})
        if user_turns and draw(st.booleans()):
            msgs.append({"role": "user", "content": draw(_text)})
    return msgs


@pytest.mark.parametrize(("tok_name", "family", "fixed_of"), [
    ("qwen3", "qwen3", "qwen3"),
    ("qwen35", "qwen35", "qwen35"),
    ("minimax_m27", "minimax_m27", "minimax_m27"),
    ("qwen3", "qwennext", "qwen3"),  # the Qwen3 template stands in for Qwen3-Next's: its edit renders as qwen3_fixed
    ("minimax_m27", "minimax_m25", "minimax_m27"),
])
def test_fallback_edit_renders_as_the_fixed_template(tok_name: str, family: str, fixed_of: str, monkeypatch: pytest.MonkeyPatch) -> None:
    fixed = templates.find_fixed_template(fixed_of)
    assert fixed is not None
    with monkeypatch.context() as m:
        m.setattr(templates, "_folders", lambda: [])
        edited = get_tito_tokenizer(_tok(tok_name), family)
    assert edited.template_source.startswith("the tokenizer's template with tito_fast's edit")
    assert edited.chat_template is not None and edited.chat_template != fixed.text
    ref = get_tito_tokenizer(_tok(tok_name), family, chat_template=fixed.text)

    @settings(max_examples=60)
    @given(_conversation(user_turns=True), st.booleans(), st.booleans(), st.sampled_from([None, True, False]))
    def check(msgs: list[dict[str, Any]], gen: bool, with_tools: bool, thinking: bool | None) -> None:
        kwargs = {} if thinking is None else {"enable_thinking": thinking}
        a, b = edited.clone_with_chat_template_kwargs(kwargs), ref.clone_with_chat_template_kwargs(kwargs)
        tools = TOOLS if with_tools else None
        try:
            want = b.apply_chat_template(msgs, add_generation_prompt=gen, tools=tools)
        except RenderError:
            with pytest.raises(RenderError):
                a.apply_chat_template(msgs, add_generation_prompt=gen, tools=tools)
            return
        assert a.apply_chat_template(msgs, add_generation_prompt=gen, tools=tools) == want

    check()


def test_without_the_package_the_edit_is_used_and_checked(no_miles_packages: None) -> None:
    tito = get_tito_tokenizer(fixtures.load_tokenizer("qwen3"), "qwen3")
    assert "tito_fast's edit" in tito.template_source and "not installed" in tito.template_source
    assert all(r.ok for r in verify_family(tito, thinking="both") if not r.skipped)


def test_a_template_neither_known_nor_append_only_is_refused(no_miles_packages: None) -> None:
    # Kimi's template has no Qwen3 reasoning gate to edit, and it is not a Qwen3 format.
    with pytest.raises(TemplateNotAppendOnlyError, match="family 'qwen3'") as e:
        get_tito_tokenizer(_tok("kimi_k2"), "qwen3")
    assert "pip install 'tito_fast[miles]'" in str(e.value) and "chat_template=" in str(e.value)
    # The stock Qwen3 template given explicitly is refused with where it departs.
    stock = json.loads((fixtures.tokenizer_dir("qwen3") / "tokenizer_config.json").read_text())["chat_template"]
    with pytest.raises(TemplateNotAppendOnlyError, match="departs? from the full render at id") as e2:
        get_tito_tokenizer(_tok("qwen3"), "qwen3", chat_template=stock)
    assert e2.value.divergence is not None and e2.value.family == "qwen3"
    assert "<think>" in e2.value.detail
    # With thinking off the canned replay has no reasoning at all, and the stock template still fails.
    with pytest.raises(TemplateNotAppendOnlyError):
        get_tito_tokenizer(_tok("qwen3"), "qwen3", {"enable_thinking": False}, chat_template=stock)
    # ... unless the check is turned off (verify-template does that to show every failure).
    assert get_tito_tokenizer(_tok("qwen3"), "qwen3", chat_template=stock, check_template=False).chat_template == stock


def test_a_users_own_append_only_template_is_kept() -> None:
    fixed = templates.find_fixed_template("qwen3")
    assert fixed is not None
    own = "{#- our team's copy -#}\n" + fixed.text
    tok = fixtures.load_tokenizer("qwen3")
    tok.chat_template = own
    tito = get_tito_tokenizer(tok, "qwen3")
    assert tito.chat_template is None and tito.template_source == "the tokenizer's own template (append-only: checked)"
    explicit = get_tito_tokenizer(_tok("qwen3"), "qwen3", chat_template=own)
    assert explicit.template_source == "the chat_template argument (append-only: checked)"


def test_canned_conversations_cover_the_shapes() -> None:
    shapes, reasoned = canned_conversations({"tool", "user", "system"})
    assistants = [m for m in shapes if m["role"] == "assistant"]
    assert any("reasoning_content" not in m for m in assistants)
    assert {m.get("reasoning_content") for m in assistants} >= {"", " "}
    assert any(len(m.get("tool_calls") or []) > 1 and not m["content"] for m in assistants)
    assert all(m.get("reasoning_content") for m in reasoned if m["role"] == "assistant")


# -- the reference's API ---------------------------------------------------


def test_reference_api_and_errors() -> None:
    tok = _tok("qwen3")

    class Kind(str, enum.Enum):
        QWEN3 = "qwen3"

    assert get_tito_tokenizer(tok, tokenizer_type="qwen3").family == "qwen3"
    assert get_tito_tokenizer(tok, Kind.QWEN3).family == "qwen3"
    assert get_tito_tokenizer(tok).family == "default"
    with pytest.raises(ValueError, match="must not be None"):
        get_tito_tokenizer(None, "qwen3")
    with pytest.raises(ValueError, match="disagree"):
        get_tito_tokenizer(tok, "qwen3", tokenizer_type="glm47")
    with pytest.raises(ValueError, match="unknown family"):
        get_tito_tokenizer(tok, tokenizer_type="nonexistent")
    with pytest.raises(ValueError, match="conflicts with the value registered"):
        get_tito_tokenizer(tok, "qwen3", {"clear_thinking": True})
    tito = get_tito_tokenizer(tok, "qwen3", None, "<|im_start|>assistant\n", ["tool", "user"])
    assert tito.assistant_start_str == "<|im_start|>assistant\n" and tito.allowed_append_roles == {"tool", "user"}
    assert tito.create_comparator()._assistant_start_str == "<|im_start|>assistant\n"
    with pytest.raises(ValueError, match=r"role='system', allowed="):
        tito.tokenize_additional_messages([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}],
                                          [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                                           {"role": "system", "content": "c"}])
    q35 = _tok("qwen35")
    with pytest.raises(ValueError, match=r"cannot append \['system'\]"):
        get_tito_tokenizer(q35, "qwen35", allowed_append_roles=["tool", "system"])
    with pytest.raises(ValueError, match="unknown roles"):
        get_tito_tokenizer(tok, "qwen3", allowed_append_roles=["developer"])


def test_tokenizer_none_builds_a_stand_in_as_the_reference_does() -> None:
    """The reference's base class takes tokenizer=None (its session tests subclass it
    and mock every method); its factory and its family classes, which read token ids
    when built, do not. What needs the tokenizer says so, by name."""
    from tito_fast.chat.families import TitoTokenizer, family_config

    stub = TitoTokenizer(None, family_config("default"), {"enable_thinking": True}, assistant_start_str="<|im_start|>assistant")
    assert stub.tokenizer is None and stub.family == "default" and stub.chat_template_kwargs == {"enable_thinking": True}
    assert stub.assistant_start_str == "<|im_start|>assistant" and stub.allowed_append_roles == {"tool", "user", "system", "assistant"}
    assert stub.merge_ids([1, 2], [3]) == [1, 2, 3]  # the seam rule needs no tokenizer
    old = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    with pytest.raises(ValueError, match="role='developer'"):  # the message check runs before anything renders
        stub.tokenize_additional_messages(old, old + [{"role": "developer", "content": "c"}])
    calls: list[tuple[Callable[[], Any], str]] = [
        (lambda: stub.tokenize_additional_messages(old, old + [{"role": "user", "content": "c"}]), "apply_chat_template"),
        (lambda: stub.apply_chat_template(old, add_generation_prompt=True), "apply_chat_template"),
        (lambda: stub.encode("x"), "encode"),
        (stub.create_comparator, "create_comparator"),
        (lambda: stub.clone_with_chat_template_kwargs({"x": 1}).encode("x"), "encode"),
    ]
    for call, what in calls:
        with pytest.raises(FamilyError, match=rf"^{what}.* needs a tokenizer: .*built with tokenizer=None"):
            call()
    subclass = type("Mocked", (TitoTokenizer,), {"apply_chat_template": lambda self, m, **k: "rendered", "encode": lambda self, t: [len(t)]})
    assert subclass(None, family_config("default")).tokenize_additional_messages(old, old + [{"role": "user", "content": "c"}]) == [0]
    for family, needs in [("qwen3", "seam rule"), ("glm47", "seam rule"), ("kimi25", "boundary"), ("deepseekv32", "encoder"), ("llama3", "trailing-trim")]:
        with pytest.raises(FamilyError, match=rf"family '{family}' needs a tokenizer to be built: .*{needs}"):
            TitoTokenizer(None, family_config(family))
    with pytest.raises(ValueError, match="tokenizer must not be None"):  # as the reference's factory (its tests assert it)
        get_tito_tokenizer(None)


# -- DeepSeek V3.2 / V4 encoders ---------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "thinking"),
    [
        ({}, True),
        ({"enable_thinking": False}, False),
        ({"thinking": False}, False),
        ({"enable_thinking": False, "thinking": True}, False),  # enable_thinking before thinking
        ({"thinking_mode": "thinking", "thinking": False}, True),  # an explicit mode before both
        ({"thinking_mode": "chat"}, False),
        ({"enable_thinking": None, "thinking": False}, False),
    ],
)
def test_deepseek_thinking_precedence(kwargs: dict[str, Any], thinking: bool) -> None:
    tito = get_tito_tokenizer(_tok("deepseek_v32"), "deepseekv32", kwargs)
    assert tito.chat_template_kwargs["thinking"] is thinking
    text = tito.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True)
    assert text.endswith("<｜Assistant｜><think>" if thinking else "<｜Assistant｜></think>")


@pytest.mark.parametrize("family", ["deepseekv32", "deepseekv4"])
def test_request_thinking_replaces_the_startup_mode(family: str) -> None:
    tok = _tok("deepseek_v32" if family == "deepseekv32" else "deepseek_v4")
    start = get_tito_tokenizer(tok, family, {"enable_thinking": False})
    assert start.clone_with_chat_template_kwargs({"thinking": True}).chat_template_kwargs == {"drop_thinking": False, "thinking": True}


def test_deepseek_v32_encoder_from_the_package() -> None:
    tito = get_tito_tokenizer(_tok("deepseek_v32"), "deepseekv32")
    assert tito.deepseek is not None and "miles-tito-tokenizers" in tito.deepseek.origin
    # DeepSeek's own encoder (as the package ships it) drops earlier reasoning once a user turn
    # follows, even with drop_thinking=False: a user append cannot be append-only.
    assert not tito.deepseek.keeps_history_reasoning
    assert "user" not in tito.allowed_append_roles and tito.notes
    assert all(r.ok for r in verify_family(tito, thinking="both") if not r.skipped)


def _write_encoder(folder: Path, keep_reasoning: bool) -> Path:
    """A small encoder module of our own with DeepSeek's calling convention."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "encoding_dsv32.py"
    path.write_text(
        "thinking_start_token = '<think>'\nthinking_end_token = '</think>'\n"
        "def encode_messages(messages, thinking_mode, drop_thinking=True, **kw):\n"
        "    last_user = max([i for i, m in enumerate(messages) if m['role'] == 'user'], default=-1)\n"
        "    out = []\n"
        "    for i, m in enumerate(messages):\n"
        "        if m['role'] == 'assistant':\n"
        f"            keep = {keep_reasoning!r} and not drop_thinking or i > last_user\n"
        "            r = (m.get('reasoning_content') or '') if keep else ''\n"
        "            out.append('<A>' + r + '|' + (m.get('content') or ''))\n"
        "        else:\n"
        "            out.append('<' + m['role'] + '>' + (m.get('content') or ''))\n"
        "    tail = messages[-1]['role'] if messages else None\n"
        "    think = thinking_start_token if thinking_mode == 'thinking' else thinking_end_token\n"
        "    return ''.join(out) + ('<｜Assistant｜>' + think if tail == 'user' else '')\n",
        encoding="utf-8",
    )
    return path


def test_deepseek_encoder_is_found_where_users_have_it(tmp_path: Path, no_miles_packages: None) -> None:
    tok = fixtures.load_tokenizer("deepseek_v32")
    with pytest.raises(FamilyError, match="encoding_dsv32.py, and none was found") as e:
        get_tito_tokenizer(tok, "deepseekv32")
    assert "--encoder FILE" in str(e.value) and "tito_fast[miles]" in str(e.value)
    # an explicit file; a keep-all-reasoning encoder (like Miles' vendored copy) keeps user appends
    explicit = get_tito_tokenizer(tok, "deepseekv32", encoder_path=str(_write_encoder(tmp_path / "x", True)))
    assert explicit.deepseek is not None and explicit.deepseek.keeps_history_reasoning
    assert "user" in explicit.allowed_append_roles and not explicit.notes
    # next to a tokenizer, then in its encoding/ folder: loading runs the file, so only when trusted
    root = tmp_path / "model"
    root.mkdir()
    tok.name_or_path = str(root)
    marker = tmp_path / "ran"
    _write_encoder(root / "encoding", False)
    path = root / "encoding" / "encoding_dsv32.py"
    path.write_text(f"open({str(marker)!r}, 'w').close()\n" + path.read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(FamilyError, match=r"loading it runs its code: pass trust_encoder=True \(--trust-encoder\)"):
        get_tito_tokenizer(tok, "deepseekv32")
    assert not marker.exists()  # the untrusted file was not run
    found = get_tito_tokenizer(tok, "deepseekv32", trust_encoder=True)
    assert found.deepseek is not None and found.deepseek.origin.endswith("encoding/encoding_dsv32.py")
    assert "user" not in found.allowed_append_roles and marker.exists()
    _write_encoder(root, True)
    first = get_tito_tokenizer(tok, "deepseekv32", trust_encoder=True)
    assert first.deepseek is not None and first.deepseek.origin == f"file {root / 'encoding_dsv32.py'}"


def test_deepseek_v32_incremental_equals_the_real_history_suffix() -> None:
    # The synthetic-base diff must give what the real history render appends (tool appends).
    tito = get_tito_tokenizer(_tok("deepseek_v32"), "deepseekv32")
    old: list[dict[str, Any]] = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "", "reasoning_content": "r",
         "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]},
    ]
    appended_sets: list[list[dict[str, Any]]] = [[{"role": "tool", "content": "out", "tool_call_id": "c0"}]]
    for appended in appended_sets:
        new = old + appended
        incremental = tito.tokenize_additional_messages(old, new)
        before = tito.apply_chat_template(old, add_generation_prompt=False)
        after = tito.apply_chat_template(new, add_generation_prompt=True)
        assert after.startswith(before) and incremental == tito.encode(after[len(before):])


def test_reference_parity_on_miles_loaded_tokenizers() -> None:
    # The plain reference (written from the spec) rendering with the same template gives the same merge.
    for tok_name, family in FIXED[:4]:
        tito = get_tito_tokenizer(_as_miles_loads_it(tok_name, family), family)
        ref = ReferenceTito(tito.tokenizer, append_after=tito._append_after, allowed_roles=tito.allowed_append_roles,
                            template_kwargs=tito.chat_template_kwargs)
        _, msgs = conversations(frozenset({"tool", "user"}) & tito.allowed_append_roles | {"tool"})[-1]
        ends = [k + 1 for k, m in enumerate(msgs) if m["role"] == "assistant"]
        for a, b in zip(ends, ends[1:]):
            old, new = msgs[:a], msgs[: b - 1]
            if not {m["role"] for m in new[a:]} <= tito.allowed_append_roles:
                continue
            assert tito.merge_tokens(old, new, [1, 2], TOOLS) == ref.merge_tokens(old, new, [1, 2], TOOLS)


class _CharTokenizer:
    """A minimal tokenizer: one id per character, no vocabulary methods beyond these."""

    def __init__(self, name_or_path: str) -> None:
        self.name_or_path = name_or_path

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        assert add_special_tokens is False
        return [ord(c) for c in text]

    def convert_tokens_to_ids(self, token: str) -> int:
        return {"<｜User｜>": 1, "<｜Assistant｜>": 2}[token]


@pytest.mark.parametrize(
    "appended",
    [
        [{"role": "user", "content": "next question"}],
        [{"role": "tool", "content": "out", "tool_call_id": "c0"}],
        [{"role": "assistant", "content": "injected"}, {"role": "user", "content": "next"}],
        [{"role": "assistant", "content": "one"}, {"role": "assistant", "content": "two"}, {"role": "user", "content": "next"}],
    ],
)
def test_deepseek_synthetic_base_equals_real_history_with_a_keep_all_encoder(tmp_path: Path, appended: list[dict[str, Any]]) -> None:
    # An encoder that keeps every turn's reasoning under drop_thinking=False (as Miles' vendored copy
    # does) renders position-independently: the synthetic-base diff gives the real history's suffix.
    tok = _CharTokenizer(str(tmp_path))
    tito = get_tito_tokenizer(tok, "deepseekv32", encoder_path=str(_write_encoder(tmp_path / "enc", True)))
    old: list[dict[str, Any]] = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "", "reasoning_content": "r",
         "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}]},
    ]
    new = old + appended
    before = tito.apply_chat_template(old, add_generation_prompt=False)
    after = tito.apply_chat_template(new, add_generation_prompt=True)
    assert after.startswith(before)
    assert tito.tokenize_additional_messages(old, new) == tok.encode(after[len(before):])


# -- verify-template verifies what it is given --------------------------------


@pytest.mark.parametrize(("tok_name", "family"), FIXED)
def test_the_verifier_binds_the_given_template_never_a_substitute(tok_name: str, family: str) -> None:
    from tito_fast.chat.render import template_of
    from tito_fast.session.verify import for_template

    tok = _tok(tok_name)
    stock = template_of(tok)
    assert get_tito_tokenizer(tok, family).chat_template != stock or family == "kimi25"  # the family may substitute ...
    subject = for_template(tok, family)  # ... the verifier must not
    rendered = subject.tito.chat_template if subject.tito.chat_template is not None else template_of(subject.tito.tokenizer)
    assert rendered == stock and subject.source == "the tokenizer's own template"
    name = templates.FIXED_TEMPLATES[family]
    assert subject.fixed_template == name and f"verify it with --template {name}" in subject.fixed_hint
    fixed = templates.find_fixed_template(family)
    assert fixed is not None
    given = for_template(tok, family, template=fixed.text, template_label="the fixed one")
    assert given.tito.chat_template == fixed.text and not given.refused and given.fixed_template is None and not given.fixed_hint


def test_the_verifier_fails_the_stock_qwen3_template_as_the_reference_does() -> None:
    # Miles' run_all_checks_via_tito on a Qwen3 tokenizer keeping its stock template reports
    # failures (its test_via_tito_fail_on_original_qwen3_template); on the fixed one it passes.
    from tito_fast.session.verify import for_template

    stock = verify_family(for_template(_tok("qwen3"), "qwen3").tito, thinking="both")
    assert any(not r.ok and not r.skipped for r in stock)
    fixed = templates.find_fixed_template("qwen3")
    assert fixed is not None
    ok = verify_family(for_template(_tok("qwen3"), "qwen3", template=fixed.text).tito, thinking="both")
    assert all(r.ok for r in ok if not r.skipped) and sum(r.ok for r in ok) == 32

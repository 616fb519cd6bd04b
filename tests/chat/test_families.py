"""TITO families on real tokenizers: ids equal to the plain reference at every
turn, merged ids equal to the full render, errors that name what is wrong."""

from __future__ import annotations

import functools
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tito_fast.chat.families import FAMILIES, FamilyConfig, get_tito_tokenizer, patch_template
from tito_fast.errors import AppendOnlyError, FamilyError, RenderDiffError
from tito_fast.session.verify import ROLE_SETS, TOOLS, conversations, verify_family, with_call_ids
from tito_fast.testing import fixtures
from tito_fast.testing.reference import ReferenceTito

# fixture tokenizer -> the family that renders it append-only
PAIRS = [
    ("qwen3", "qwen3"),
    ("qwen35", "qwen35"),
    ("qwen25", "qwen25"),  # its own vocabulary and stock template, as published
    ("glm47", "glm47"),
    ("glm5", "glm47"),  # GLM-5, 5.1 and 5.2: their stock templates on the GLM-4.7 vocabulary
    ("glm51", "glm47"),
    ("glm52", "glm47"),
    ("minimax_m27", "minimax_m27"),
    ("minimax_m27", "minimax_m25"),
    ("minimax_m3", "minimax_m27"),  # MiniMax-M3's own tokenizer and stock template
    ("llama31", "llama3"),
    ("kimi_k2", "kimi25"),
    ("kimi_k2", "kimi26"),
    ("qwen3", "default"),
    ("qwen3", "qwennext"),  # Qwen3's template stands in for Qwen3-Next's (same reasoning gate)
    ("nemotron3", "nemotron3"),  # NVIDIA's template on the Qwen3 vocabulary
    ("devstral", "mistral"),  # Devstral Small's template (llama.cpp's copy) with Mistral's special tokens added
    ("deepseek_v4", "deepseekv4"),  # DeepSeek's encoder module, no template
]


@functools.cache
def _tok(name: str) -> Any:
    return fixtures.load_tokenizer(name)


def _reference(tito: Any) -> ReferenceTito:
    c = tito.config
    return ReferenceTito(
        tito.tokenizer,
        append_after=tito._append_after,
        drop_last_if_in=tito._drop_last,
        allowed_roles=c.allowed_roles,
        template_kwargs=tito.chat_template_kwargs,
        diff=c.diff,
        arguments=c.arguments,
        chat_template=tito.chat_template,
        encoder=tito.deepseek.module if tito.deepseek else None,
        encoder_version=tito.deepseek.version if tito.deepseek else "dsv4",
    )


def _splits(messages: list[dict[str, Any]]) -> list[tuple[int, int]]:
    """(end of the stored messages, end of the new request) for every pair of assistant turns."""
    ends = [k + 1 for k, m in enumerate(messages) if m["role"] == "assistant"]
    return [(a, b - 1) for i, a in enumerate(ends) for b in ends[i + 1 :]]


@pytest.mark.parametrize(
    ("tok_name", "family", "backend"),
    [(t, f, "hf") for t, f in PAIRS] + [(t, f, "jinja") for t, f in PAIRS if f in ("qwen3", "glm47", "minimax_m27", "llama3", "kimi25")],
)
def test_ids_equal_the_reference_at_every_split(tok_name: str, family: str, backend: str) -> None:
    tito = get_tito_tokenizer(_tok(tok_name), family, backend=backend)
    ref = _reference(tito)
    checked = 0
    for roles in ROLE_SETS:
        if not roles <= tito.allowed_append_roles:
            continue
        for parallel in (True, False):
            for _, messages in conversations(roles, parallel_calls=parallel):
                messages = with_call_ids(messages, tito.config.tool_call_ids)
                for old_end, new_end in _splits(messages):
                    old, new = messages[:old_end], messages[:new_end]
                    if not {m["role"] for m in new[old_end:]} <= tito.allowed_append_roles:
                        continue
                    try:
                        want = ref.tokenize_additional_messages(old, new, TOOLS)
                    except Exception:  # the template cannot render it (e.g. Llama 3 and parallel calls)
                        with pytest.raises(ValueError):
                            tito.tokenize_additional_messages(old, new, TOOLS)
                        continue
                    assert tito.tokenize_additional_messages(old, new, TOOLS) == want
                    prefix = list(range(5)) + [want[0]]
                    assert tito.merge_tokens(old, new, prefix, TOOLS) == ref.merge_tokens(old, new, prefix, TOOLS)
                    checked += 1
    assert checked >= 10


@pytest.mark.parametrize(("tok_name", "family"), [p for p in PAIRS if p[1] != "default"])
def test_merged_ids_equal_the_full_render(tok_name: str, family: str) -> None:
    results = verify_family(get_tito_tokenizer(_tok(tok_name), family))
    failed = [r.to_dict() for r in results if not r.ok and not r.skipped]
    assert not failed
    assert sum(r.ok for r in results) >= 4


def test_default_family_shows_qwen3_cut_thinking() -> None:
    # Qwen3's own template drops earlier reasoning once a user turn follows:
    # without the family's template, the merged ids are not the render.
    results = verify_family(get_tito_tokenizer(_tok("qwen3"), "default"))
    bad = [r for r in results if r.error and r.name.startswith("tool calls")]
    assert bad and all("user" in r.roles for r in bad)
    assert "<think>" in bad[0].actual_text and "<think>" not in bad[0].expected_text
    assert bad[0].mismatches and bad[0].mismatches[0]["type"] == "non_assistant_text"
    # ... and renders the empty <think> block of a turn without reasoning only while
    # it is the last turn, so even tool-only appends break on such a turn.
    shapes = [r for r in results if r.error and r.name.startswith("assistant shapes")]
    assert any(r.roles == {"tool"} for r in shapes)
    assert all("<think>\n\n</think>" in r.actual_text and "<think>" not in r.expected_text for r in shapes)


def test_base_render_is_cached() -> None:
    tito = get_tito_tokenizer(_tok("qwen3"), "qwen3")
    _, messages = conversations(frozenset({"tool", "user"}))[1]
    ends = [k + 1 for k, m in enumerate(messages) if m["role"] == "assistant"]
    stored = [1, 2]
    before = tito.renders
    for a, b in zip(ends, ends[1:]):
        tito.merge_tokens(messages[:a], messages[: b - 1], stored, TOOLS)
    distinct_bases = len({json.dumps(messages[a - 1].get("tool_calls") or []) for a in ends[:-1]})
    assert tito.renders - before == (len(ends) - 1) + distinct_bases
    # The reference renders twice per turn.
    assert len(ends) - 1 + distinct_bases < 2 * (len(ends) - 1)


def test_family_attributes() -> None:
    tok = _tok("qwen3")
    q = get_tito_tokenizer(tok, "qwen3")
    nl = tok.encode("\n", add_special_tokens=False)[0]
    assert q.trailing_token_ids == {nl} and q.max_trim_tokens == 0 and q.assistant_start_str == "<|im_start|>assistant"
    assert q.merge_ids([7, 151645], [151644]) == [7, 151645, nl, 151644]
    g = get_tito_tokenizer(_tok("glm47"), "glm47")
    obs, user = (g.tokenizer.convert_tokens_to_ids(t) for t in ("<|observation|>", "<|user|>"))
    assert g.max_trim_tokens == 1 and g.trailing_token_ids == {obs, user}
    assert g.merge_ids([5, obs], [obs, 9]) == [5, obs, 9] and g.merge_ids([5, user], [obs]) == [5, obs]
    k = get_tito_tokenizer(_tok("kimi_k2"), "kimi25")
    middle = k.tokenizer.convert_tokens_to_ids("<|im_middle|>")
    assert k.special_token_ids is not None and middle not in k.special_token_ids
    assert k.tokenizer.convert_tokens_to_ids("<|im_end|>") in k.special_token_ids
    cmp = k.create_comparator()
    assert cmp._assistant_start_str == "<|im_assistant|>" and middle not in cmp._special_ids
    v4 = get_tito_tokenizer(_tok("deepseek_v4"), "deepseekv4")
    assert v4.deepseek is not None and v4.max_trim_tokens == 0 and len(v4.trailing_token_ids) == 3
    assert set(FAMILIES) >= {"default", "qwen3", "qwen35", "qwennext", "nemotron3", "glm47", "kimi25", "kimi26",
                             "minimax_m25", "minimax_m27", "deepseekv32", "deepseekv4", "inkling", "llama3"}


def test_conflicting_kwargs_and_unknown_family() -> None:
    tok = _tok("qwen3")
    with pytest.raises(FamilyError, match="clear_thinking=True conflicts"):
        get_tito_tokenizer(tok, "qwen3", {"clear_thinking": True})
    assert get_tito_tokenizer(tok, "qwen3", {"clear_thinking": False, "enable_thinking": True}).chat_template_kwargs == {
        "clear_thinking": False,
        "enable_thinking": True,
    }
    with pytest.raises(FamilyError, match="unknown family 'qwen9'"):
        get_tito_tokenizer(tok, "qwen9")
    with pytest.raises(FamilyError, match="not one token"):
        get_tito_tokenizer(tok, "glm47")  # Qwen3 has no <|observation|>
    with pytest.raises(FamilyError, match="unknown family config keys"):
        get_tito_tokenizer(tok, {"name": "x", "splice": "?"})
    with pytest.raises(FamilyError, match="unknown roles"):
        FamilyConfig("x", allowed_roles=frozenset({"robot"}))
    assert patch_template("ab", (("a", "c"),)) == "cb"


def test_append_only_errors_name_message_and_field() -> None:
    tito = get_tito_tokenizer(_tok("qwen3"), "qwen3")
    _, messages = conversations(frozenset({"tool", "user"}))[1]
    old, new = messages[:3], [dict(m) for m in messages[:5]]
    new[1]["content"] = "something else"
    with pytest.raises(AppendOnlyError, match="message 1 differs from the stored one in 'content'") as e:
        tito.tokenize_additional_messages(old, new, TOOLS)
    assert e.value.index == 1 and e.value.field == "content"
    q35 = get_tito_tokenizer(_tok("qwen35"), "qwen35")
    with pytest.raises(AppendOnlyError, match="appends role 'system'") as e2:
        q35.tokenize_additional_messages(old, old + [{"role": "system", "content": "x"}], TOOLS)
    assert e2.value.index == 3 and e2.value.field == "role"
    with pytest.raises(AppendOnlyError, match="messages were removed"):
        tito.tokenize_additional_messages(messages[:5], messages[:3], TOOLS)
    with pytest.raises(FamilyError, match="old_messages is empty"):
        tito.tokenize_additional_messages([], messages[:2], TOOLS)


def test_render_diff_error() -> None:
    # A template that renders the base differently once something is appended.
    template = "{% for m in messages %}{{ m.role }}{% if loop.last %}!{% endif %}{% endfor %}"
    tito = get_tito_tokenizer(_tok("qwen3"), "default", chat_template=template)
    with pytest.raises(RenderDiffError, match=r"rendered suffix diff failed for \['user'\]"):
        tito.tokenize_additional_messages([{"role": "assistant", "content": "a"}], [{"role": "assistant", "content": "a"}, {"role": "user", "content": "b"}])


K2V3_TEMPLATE = (
    "{% for m in messages %}<|ifm|im_start|>{{ m.role }}\n{{ m.content }}<|ifm|im_end|>{% endfor %}"
    "{% if add_generation_prompt %}<|ifm|im_start|>assistant\n{% endif %}"
)


@functools.cache
def _k2v3_tokenizer() -> Any:
    from tokenizers import AddedToken
    from transformers import PreTrainedTokenizerFast

    base = _tok("qwen3")
    tok = PreTrainedTokenizerFast(tokenizer_object=base.backend_tokenizer.__class__.from_str(base.backend_tokenizer.to_str()))
    tok.add_special_tokens({"additional_special_tokens": [AddedToken("<|ifm|im_start|>", special=True), AddedToken("<|ifm|im_end|>", special=True)]})
    tok.chat_template = K2V3_TEMPLATE
    return tok


def test_declarative_family_for_a_format_nobody_ships() -> None:
    # The field report's k2v3 format: no newline between messages, the model
    # stops at <|ifm|im_end|>, which is trimmed; declared as data, no code.
    config = {
        "name": "k2v3",
        "trailing": ["<|ifm|im_end|>"],
        "assistant_start_str": "<|ifm|im_start|>assistant",
        "allowed_roles": ["tool", "user", "system"],
    }
    tito = get_tito_tokenizer(_k2v3_tokenizer(), config)
    end = tito.tokenizer.convert_tokens_to_ids("<|ifm|im_end|>")
    assert tito.trailing_token_ids == {end} and tito.family == "k2v3"
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}, {"role": "user", "content": "bye"}]
    inc = tito.tokenize_additional_messages(msgs[:2], msgs)
    assert tito.tokenizer.decode(inc) == "<|ifm|im_start|>user\nbye<|ifm|im_end|><|ifm|im_start|>assistant\n"
    assert [r.ok for r in verify_family(tito) if not r.skipped] and all(r.ok for r in verify_family(tito) if not r.skipped)


@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_random_contents_keep_parity(data: st.DataObject) -> None:
    # Arbitrary text (unicode, whitespace, template-looking strings) in every message.
    pair = data.draw(st.sampled_from([("qwen3", "qwen3"), ("glm47", "glm47"), ("llama31", "llama3")]))
    tito = get_tito_tokenizer(_tok(pair[0]), pair[1])
    text = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=30)
    roles = sorted(tito.allowed_append_roles - {"assistant"} - ({"system"} if pair[1] == "llama3" else set()))
    old = [{"role": "user", "content": data.draw(text)}, {"role": "assistant", "content": data.draw(text), "reasoning_content": "r"}]
    appended = [{"role": r, "content": data.draw(text)} for r in data.draw(st.lists(st.sampled_from(roles), min_size=1, max_size=3))]
    new = old + appended
    ref = _reference(tito)
    try:
        want = ref.tokenize_additional_messages(old, new)
    except Exception:  # the template refuses these messages (e.g. a tool result with no call)
        with pytest.raises(ValueError):  # tito_fast: RenderError / RenderDiffError, both ValueErrors
            tito.tokenize_additional_messages(old, new)
        return
    assert tito.tokenize_additional_messages(old, new) == want


def test_parser_bindings_resolve_as_miles_documents() -> None:
    """Each family names the SGLang parsers that read its output; a user's
    flag must agree where the family declares one, and is taken where not."""
    from tito_fast.chat.families import resolve_parsers

    assert resolve_parsers("qwen3") == ("qwen3", "qwen25") and resolve_parsers("kimi26") == ("kimi_k2", "kimi_k2_raw_id")
    assert resolve_parsers("default") == (None, None) and resolve_parsers("default", "mine", "ours") == ("mine", "ours")
    assert resolve_parsers("glm47", "glm45") == ("glm45", "glm47")  # one given, the other the family's
    with pytest.raises(ValueError, match="--reasoning-parser='glm45' disagrees with family 'qwen3'"):
        resolve_parsers("qwen3", user_reasoning_parser="glm45")
    with pytest.raises(ValueError, match="--tool-call-parser='glm47' disagrees"):
        resolve_parsers("qwen3", user_tool_call_parser="glm47")

"""A family derived from a tokenizer and its template alone, against the
hand-written families on their real tokenizers and templates."""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

import pytest

from tito_fast import derive_family
from tito_fast.chat.presets import FAMILIES, FamilyConfig
from tito_fast.errors import FamilyError
from tito_fast.score.run import run_score
from tito_fast.testing import fixtures

ROOT = Path(__file__).resolve().parents[2]

#: (fixture tokenizer, hand-written family): every known family whose template a fixture ships
#: (DeepSeek V3.2/V4 render with an encoder module: nothing to derive from).
PAIRS = [
    ("qwen3", "qwen3"), ("qwen25", "qwen25"), ("qwen35", "qwen35"), ("glm47", "glm47"), ("glm51", "glm47"),
    ("glm52", "glm47"), ("minimax_m27", "minimax_m27"), ("minimax_m3", "minimax_m27"), ("llama31", "llama3"),
    ("kimi_k2", "kimi25"), ("nemotron3", "nemotron3"), ("mistral_small32", "mistral"), ("ministral3", "mistral"),
    ("devstral", "mistral"),
]  # fmt: skip

#: Where a derived declaration differs from the hand-written one, and why that is right.
DIFFERS: dict[tuple[str, str], set[str]] = {
    # Miles' MiniMax family refuses a later system message; the template renders one append-only
    ("minimax_m27", "allowed_roles"): {"allowed_roles"},
    ("minimax_m3", "allowed_roles"): {"allowed_roles"},
    # the hand-written Llama 3 family also trims <|eot_id|>/<|eom_id|> from compared tails
    ("llama31", "trailing"): {"trailing"},
    # this Kimi K2 template has no preserve_thinking variable (the K2.5 family's kwarg)
    ("kimi_k2", "template_kwargs"): {"template_kwargs"},
    # MiniMax-M3's stock template keeps earlier reasoning as it is: no kwarg is needed
    ("minimax_m3", "template_kwargs"): {"template_kwargs"},
    # these take any tool-call id; the family uses the form Mistral Small 3.2's template requires
    ("ministral3", "tool_call_ids"): {"tool_call_ids"},
    ("devstral", "tool_call_ids"): {"tool_call_ids"},
}


@functools.cache
def _tok(name: str) -> Any:
    return fixtures.load_tokenizer(name)


@functools.cache
def _derived(fixture: str, family: str) -> Any:
    return derive_family(_tok(fixture), name=family)


@pytest.mark.parametrize(("fixture", "family"), PAIRS)
def test_the_derived_family_holds_and_matches_the_hand_written_one(fixture: str, family: str) -> None:
    d = _derived(fixture, family)
    assert d.holds, d.fix
    assert any(r.ok for r in d.results)
    # every replay passes, or is one the template refuses to render at all (Mistral: turns must alternate)
    assert not [r for r in d.results if not r.ok and not r.skipped and not (r.divergence is None and r.error.startswith("RenderError"))]
    hand, got = FAMILIES[family], d.config
    for name in ("append_after", "drop_last_if_in", "max_trim_tokens", "trailing", "allowed_roles", "template_kwargs", "tool_call_ids"):
        if (fixture, name) in DIFFERS:
            continue
        assert getattr(got, name) == getattr(hand, name), name
    # the assistant start is the hand-written one, or it with the role name that follows (the same places)
    if hand.assistant_start_str is None:  # no generation prompt (Mistral)
        assert got.assistant_start_str is None
    else:
        assert got.assistant_start_str is not None and got.assistant_start_str.startswith(hand.assistant_start_str.rstrip())
    # the declaration is plain data that reads back as the same family
    back = FamilyConfig.from_dict(json.loads(json.dumps(d.declaration())))
    assert back == got


@pytest.mark.parametrize(("fixture", "family"), [("qwen3", "qwen3"), ("glm47", "glm47")])
def test_the_derived_family_scores_the_example_dump_as_the_hand_written_one(fixture: str, family: str) -> None:
    dump = ROOT / "examples" / f"{family}_dump.jsonl"
    derived = run_score(dump, f"fixture:{fixture}", _derived(fixture, family).declaration(), on_error="skip")
    hand = run_score(dump, f"fixture:{fixture}", family, on_error="skip")
    assert derived.summary.sessions > 0 and derived.summary.complete
    assert [r.to_dict() for r in derived.results] == [r.to_dict() for r in hand.results]


def test_a_stock_template_is_verified_as_it_is_and_the_fix_is_named() -> None:
    """Qwen3's stock template drops earlier reasoning: as published it cannot
    hold; the derivation says so and carries the known edits."""
    d = _derived("qwen3", "qwen3")
    assert d.config.chat_template is not None and "clear_thinking is false" in d.config.chat_template
    assert any("not append-only as published" in s for s in d.steps)


def test_a_template_that_cannot_hold_says_which_shapes_break() -> None:
    # a template that drops every earlier assistant turn's content: no kwarg fixes it
    template = (
        "{% for m in messages %}<|im_start|>{{ m.role }}\n"
        "{% if m.role == 'assistant' and not loop.last %}(elided){% else %}{{ m.content or '' }}{% endif %}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    d = derive_family(_tok("qwen25"), template=template)
    assert not d.holds
    assert "TITO cannot hold with this template" in d.fix and "replay(s) break" in d.fix


def test_a_template_that_refuses_the_probes_cannot_hold() -> None:
    refuses = "{% for m in messages %}{% if m.role == 'assistant' %}{{ raise_exception('no assistant') }}{% endif %}{{ m.content }}{% endfor %}"
    d = derive_family(_tok("qwen25"), template=refuses)
    assert not d.holds and "refuses the messages" in d.fix and "no assistant" in d.fix


def test_a_given_template_is_part_of_the_declaration() -> None:
    template = fixtures.tokenizer_dir("qwen25").joinpath("tokenizer_config.json").read_text(encoding="utf-8")
    own = json.loads(template)["chat_template"]
    d = derive_family(_tok("qwen3"), template=own, name="qwen25_on_qwen3")
    assert d.holds and d.config.chat_template == own and d.declaration()["chat_template"] == own


def test_no_template_is_an_input_error() -> None:
    class NoTemplate:
        chat_template = None

    with pytest.raises(FamilyError, match="nothing to derive from"):
        derive_family(NoTemplate())


#: Templates of families beyond Miles' on which TITO cannot hold (or cannot be
#: shown to), on their real templates with the family's special tokens added to
#: the Qwen3 vocabulary (`tito_fast.testing.fixtures.ADDED`): what the derivation says.
CANNOT = [
    # Harmony: the final message ends <|return|> when generated, <|end|> once a message follows
    ("gpt_oss", "'<|return|>' as the last message, '<|end|><|start|>us"),
    # Gemma 4: the content of an earlier assistant turn with tool calls is dropped from history
    ("gemma4", "replay(s) break"),
    # Gemma 2/3: no system role, no tools: none of the verifier's conversations renders
    ("gemma2", "System role not supported"),
]


@pytest.mark.parametrize(("fixture", "says"), CANNOT)
def test_templates_on_which_tito_cannot_hold_say_why(fixture: str, says: str) -> None:
    d = derive_family(_tok(fixture), name=fixture)
    assert not d.holds and says in d.fix, d.fix

"""Does a family's incremental merge reproduce its full render? (`tito-fast verify-template`)

For each set of roles that may follow an assistant turn ({tool},
{tool, user}, {tool, user, system}) this builds multi-turn conversations
(reasoning, tool calls one or several per turn, tool results, unicode,
empty content), replays them as a rollout would (the first prompt
rendered, each completion the assistant turn as the template renders it,
less the trailing ids a model does not generate, each later prompt from
`merge_tokens`), and checks the accumulated ids equal the full render of
the conversation token for token (after the family's trailing trims).

What is verified is what the caller gives: `verify_family` replays with
the `TitoTokenizer` it is handed (whose template `get_tito_tokenizer` chose,
Miles' fixed template included), and `for_template` (what
`tito-fast verify-template` uses) builds one that renders exactly the given
template or the tokenizer's own, never a substitute, and says when Miles
registers a fixed template for the family and how to verify that one.

Example:
    >>> from tito_fast.session.verify import for_template, verify_family
    >>> v = for_template(tok, "qwen3")  # the tokenizer's own (stock) template  # doctest: +SKIP
    >>> all(r.ok for r in verify_family(v.tito))  # Qwen3's stock template cuts earlier reasoning  # doctest: +SKIP
    False
    >>> v.fixed_hint  # doctest: +SKIP
    "Miles registers a fixed template for family 'qwen3', qwen3_fixed.jinja, ..."
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tito_fast.chat.families import FamilyConfig, TitoTokenizer, family_config, get_tito_tokenizer, thinking_on
from tito_fast.chat.render import template_of
from tito_fast.chat.templates import FIXED_TEMPLATES, find_fixed_template, identify
from tito_fast.errors import FamilyError, RenderError, TemplateNotAppendOnlyError

ROLE_SETS: tuple[frozenset[str], ...] = (
    frozenset({"tool"}),
    frozenset({"tool", "user"}),
    frozenset({"tool", "user", "system"}),
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "unit": {"type": "string", "enum": ["C", "F"]}},
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the web.",
            "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
        },
    },
]


def _call(i: int, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False)}}


def conversations(roles: frozenset[str], parallel_calls: bool = True, thinking: bool = True) -> list[tuple[str, list[dict[str, Any]]]]:
    """Named conversations whose messages after each assistant turn use only `roles`.

    With `thinking` the first two carry reasoning on every assistant turn and
    the third ("assistant shapes") mixes every shape a template may render
    differently: no reasoning key, "" and " " reasoning, content None, tool
    calls without content, several calls, content only, each as a last and
    as a non-last turn. Without `thinking` (a model with thinking off) no
    assistant turn has reasoning. `parallel_calls=False` gives one tool call
    per turn.
    """
    first_calls = [_call(0, "get_weather", {"city": "Paris"})]
    if parallel_calls:
        first_calls.append(_call(1, "get_weather", {"city": "Zürich", "unit": "C"}))
    tools_turns: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful assistant. Use tools when they help."},
        {"role": "user", "content": "What is the weather in Paris and Zürich?"},
        {"role": "assistant", "content": "Let me check.", "reasoning_content": "I need the weather tool.", "tool_calls": first_calls},
    ]
    tools_turns += [
        {"role": "tool", "tool_call_id": c["id"], "content": json.dumps({"temp": 18 + i, "sky": "clear"})}
        for i, c in enumerate(first_calls)
    ]
    tools_turns += [
        {"role": "assistant", "content": None, "reasoning_content": "Also search.", "tool_calls": [_call(2, "search", {"q": "météo 你好 🙂"})]},
        {"role": "tool", "tool_call_id": "call_2", "content": ""},
        {"role": "assistant", "content": "Paris 18°C, Zürich 19°C. 🙂\n\nAnything else?", "reasoning_content": "Summarise."},
    ]
    out = [("tool calls", tools_turns)]
    if "user" in roles:
        chat = list(tools_turns)
        if "system" in roles:
            chat.append({"role": "system", "content": "Answer in one line."})
        chat += [
            {"role": "user", "content": "And tomorrow?  Two spaces; trailing newline\n"},
            {"role": "assistant", "content": "", "reasoning_content": "Check again.", "tool_calls": [_call(3, "get_weather", {"city": "Paris"})]},
            {"role": "tool", "tool_call_id": "call_3", "content": "{\"temp\": 21}"},
            {"role": "assistant", "content": "21°C tomorrow.", "reasoning_content": "Done."},
            {"role": "user", "content": "Thanks!"},
            {"role": "assistant", "content": "You're welcome.", "reasoning_content": "Close politely."},
        ]
        out.append(("tool calls and user turns", chat))
    out.append(("assistant shapes", _shapes(roles, parallel_calls)))
    if not thinking:
        out = [(name, [_without_reasoning(m) for m in msgs]) for name, msgs in out]
    return out


def _shapes(roles: frozenset[str], parallel_calls: bool) -> list[dict[str, Any]]:
    pair = [_call(6, "get_weather", {"city": "Oslo"})]
    if parallel_calls:
        pair.append(_call(7, "search", {"q": "Oslo events"}))
    msgs: list[dict[str, Any]] = [
        {"role": "system", "content": "Plan trips."},
        {"role": "user", "content": "A day in Oslo?"},
        {"role": "assistant", "content": "", "tool_calls": [_call(4, "search", {"q": "Oslo"})]},  # no reasoning key
        {"role": "tool", "tool_call_id": "call_4", "content": "museums"},
        {"role": "assistant", "content": "Found museums.", "reasoning_content": "", "tool_calls": [_call(5, "get_weather", {"city": "Oslo"})]},
        {"role": "tool", "tool_call_id": "call_5", "content": "rain"},
        {"role": "assistant", "content": None, "reasoning_content": " ", "tool_calls": pair},
    ]
    msgs += [{"role": "tool", "tool_call_id": c["id"], "content": "ok"} for c in pair]
    msgs.append({"role": "assistant", "content": "Museums in the morning, then a concert."})  # content only, no reasoning
    if "user" in roles:
        msgs += [
            {"role": "user", "content": "Shorter?"},
            {"role": "assistant", "content": "Museums, concert.", "reasoning_content": ""},
            {"role": "user", "content": "And the weather?"},
            {"role": "assistant", "content": "", "tool_calls": [_call(8, "get_weather", {"city": "Oslo"})]},  # last: calls only
        ]
    return msgs


def _without_reasoning(message: dict[str, Any]) -> dict[str, Any]:
    if message.get("role") != "assistant" or "reasoning_content" not in message:
        return message
    return {k: v for k, v in message.items() if k != "reasoning_content"}


@dataclass
class Result:
    """One conversation replayed under one role set."""

    roles: frozenset[str]
    name: str
    thinking: bool | None = None  # enable_thinking of this replay (None: the family's kwargs as given)
    turns: int = 0
    ok: bool = False
    skipped: str = ""  # why the conversation could not be used with this template
    error: str = ""  # what failed
    note: str = ""  # a passing replay's remark (a retokenized seam)
    divergence: int | None = None  # first differing id index (merged vs full render)
    expected_text: str = ""
    actual_text: str = ""
    mismatches: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "roles": sorted(self.roles),
            "conversation": self.name,
            "thinking": self.thinking,
            "turns": self.turns,
            "ok": self.ok,
            "skipped": self.skipped,
            "error": self.error,
            "note": self.note,
            "first_divergence": self.divergence,
            "expected_text": self.expected_text,
            "actual_text": self.actual_text,
            "mismatches": self.mismatches,
        }


def completion_ids(
    tito: TitoTokenizer,
    history: list[dict[str, Any]],
    reply: dict[str, Any],
    tools: list[dict[str, Any]] | None = None,
    opener: str | None = None,
) -> list[int]:
    """`tito.completion_ids(...)`: the ids a model generates for `reply` after `history`."""
    return tito.completion_ids(history, reply, tools, opener)


def replay(tito: TitoTokenizer, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> tuple[list[int], int]:
    """`tito.replay(...)`: the ids a rollout of `messages` accumulates, and its number of turns."""
    return tito.replay(messages, tools)


THINKING_CHOICES = ("on", "off", "both", "as-given")


def call_id(form: str, name: str, index: int) -> str:
    """Tool-call id number `index` (of a call to `name`) in a family's form
    (`FamilyConfig.tool_call_ids`): "call" `call_0`, "mistral" nine letters
    and digits, "kimi" `functions.name:0`."""
    if form == "mistral":
        return f"call{index:05d}"[-9:]
    if form == "kimi":
        return f"functions.{name}:{index}"
    return f"call_{index}"


def with_call_ids(messages: list[dict[str, Any]], form: str) -> list[dict[str, Any]]:
    """`messages` with every tool-call id (and the tool results' `tool_call_id`) in `form`."""
    if form == "call":
        return messages
    names: dict[str, str] = {}
    out = []
    for m in messages:
        if m.get("tool_calls"):
            calls = []
            for c in m["tool_calls"]:
                new = call_id(form, c["function"]["name"], int(str(c["id"]).rsplit("_", 1)[-1]))
                names[c["id"]] = new
                calls.append({**c, "id": new})
            m = {**m, "tool_calls": calls}
        elif m.get("role") == "tool" and m.get("tool_call_id") in names:
            m = {**m, "tool_call_id": names[m["tool_call_id"]]}
        out.append(m)
    return out


def verify_family(
    tito: TitoTokenizer, role_sets: tuple[frozenset[str], ...] = ROLE_SETS, thinking: str = "as-given"
) -> list[Result]:
    """Replay every conversation under every role set the family allows and compare with the full render.

    `thinking`: "on" replays the reasoning conversations with `enable_thinking=True`,
    "off" conversations without reasoning with `enable_thinking=False`, "both" both,
    "as-given" the family's kwargs as they are (conversations with reasoning unless
    they turn thinking off).
    """
    if thinking not in THINKING_CHOICES:
        raise ValueError(f"thinking must be one of {THINKING_CHOICES}, got {thinking!r}")
    variants: list[tuple[bool | None, TitoTokenizer]] = []
    if thinking in ("on", "both"):
        variants.append((True, tito.clone_with_chat_template_kwargs({"enable_thinking": True})))
    if thinking in ("off", "both"):
        variants.append((False, tito.clone_with_chat_template_kwargs({"enable_thinking": False})))
    if thinking == "as-given":
        variants.append((None, tito))
    results = []
    for mode, variant in variants:
        comparator = variant.create_comparator()
        for roles in role_sets:
            for parallel in (True, False):
                reasoning = mode if mode is not None else thinking_on(variant.chat_template_kwargs)
                for name, messages in conversations(roles, parallel_calls=parallel, thinking=reasoning):
                    messages = with_call_ids(messages, variant.config.tool_call_ids)
                    label = name + ("" if parallel else ", one call per turn")
                    r = Result(roles, label, thinking=mode)
                    results.append(r)
                    if not roles <= variant.allowed_append_roles:
                        r.skipped = f"the family allows only {sorted(variant.allowed_append_roles)} after an assistant turn"
                        continue
                    _check(variant, comparator, messages, r)
    return results


def _check(tito: TitoTokenizer, comparator: Any, messages: list[dict[str, Any]], r: Result) -> None:
    outcome = tito.check_replay(messages, TOOLS)
    r.turns = outcome.turns
    if outcome.status == "skip":
        r.skipped = outcome.detail
        return
    r.ok = outcome.ok
    r.divergence = outcome.divergence
    r.expected_text, r.actual_text = outcome.expected_text, outcome.actual_text
    if outcome.status == "retokenized":
        r.note = f"retokenized at id {outcome.divergence}: the same text, other ids (the reference does not report it)"
    elif not outcome.ok:
        r.error = outcome.detail
        if outcome.expected_ids:
            r.mismatches = [m.to_dict() for m in comparator.compare_sequences(outcome.expected_ids, outcome.actual_ids)]


@dataclass
class Subject:
    """What `for_template` verifies: the family bound to exactly that template (`tito`),
    the template in words (`source`), why the family would refuse it when built
    (`refused`, "" when it would not), and the fixed template Miles registers for
    the family when the verified one is not it (`fixed_template`, its file name;
    `fixed_hint`, in words: where it is and how to verify it)."""

    tito: TitoTokenizer
    source: str
    refused: str = ""
    fixed_template: str | None = None
    fixed_hint: str = ""


def for_template(
    tokenizer: Any,
    family: str | FamilyConfig | Mapping[str, Any] | None,
    chat_template_kwargs: Mapping[str, Any] | None = None,
    *,
    template: str | None = None,
    template_label: str = "the chat_template argument",
    **options: Any,
) -> Subject:
    """The family bound to the template to verify, never a substitute for it.

    The template is `template` when given (`template_label` names it), else the
    one a family file declares, else the tokenizer's own. `get_tito_tokenizer`
    would render a family that Miles registers a fixed template for (qwen3,
    qwen35, qwennext, kimi25, minimax_m25/m27, inkling) with that template
    instead of a stock one that is not append-only, as Miles' `load_tokenizer`
    does; a verifier must not, or it reports PASS for a template nobody gave it
    (Miles' own verifier fails the stock Qwen3 template). DeepSeek families
    render with their encoder module, which is what is verified for them.
    A template the family would refuse is still bound (`refused` says why), so
    the replay shows where it breaks. `options` go to `get_tito_tokenizer`.
    """
    config = family_config(family)
    text: str | None = None
    source = ""
    if not config.deepseek:
        if template is not None:
            text, source = template, template_label
        elif config.chat_template is not None:
            text, source = config.chat_template, f"the template family {config.name!r} declares"
        else:
            try:
                text = template_of(tokenizer)
            except RenderError as e:
                raise FamilyError(f"nothing to verify: {e}; give a template (--template FILE)") from None
            source = "the tokenizer's own template"
        known = identify(text)
        if known is not None and known not in source:
            source += f" (Miles' {known})"
    refused = ""
    own = template is None and config.chat_template is None
    tito: TitoTokenizer | None = None
    if own or text is None:  # as the family builds itself; kept when it renders the tokenizer's own template
        try:
            tito = get_tito_tokenizer(tokenizer, config, chat_template_kwargs, **options)
        except TemplateNotAppendOnlyError:
            tito = None
        if tito is not None and tito.chat_template is not None and text is not None:
            tito = None  # a substitute (the fixed template, an edit): bind the tokenizer's own instead
    if tito is None:
        try:
            tito = get_tito_tokenizer(tokenizer, config, chat_template_kwargs, chat_template=text, check_template=not own, **options)
        except TemplateNotAppendOnlyError as e:  # only a given template: the family would refuse it
            refused = str(e).replace("the chat_template argument", source, 1)
            tito = get_tito_tokenizer(tokenizer, config, chat_template_kwargs, chat_template=text, check_template=False, **options)
    if text is None:
        source = tito.template_source
    fixed_name = FIXED_TEMPLATES.get(config.name)
    hint = ""
    if fixed_name is not None and (text is None or identify(text) != fixed_name):
        fixed = find_fixed_template(config.name)
        where = f"installed: {fixed.origin}" if fixed is not None else "not installed: pip install 'tito_fast[miles]'"
        hint = (
            f"Miles registers a fixed template for family {config.name!r}, {fixed_name} ({where}); Miles' load_tokenizer "
            f"installs it and get_tito_tokenizer renders with it in place of a stock template that is not append-only. "
            f"This run verified {source}, not it; verify it with --template {fixed_name}"
        )
    return Subject(tito, source, refused, fixed_name if hint else None, hint)

"""The TITO families as data: `FamilyConfig` and the table of built-in families.

A family says how one model's chat format joins turns: the splice rule at the
seam between the stored ids and the appended ids, the trailing ids a
comparison ignores, how many stored ids a prefix check may trim, where
assistant content starts, the boundary ids, the roles that may be appended,
the template kwargs that keep rendering append-only, and, for templates that
prune history, the edits that make them append-only when Miles' fixed
template is not installed. `tito_fast.chat.families` binds one to a tokenizer.

Example:
    >>> FAMILIES["glm47"].max_trim_tokens
    1
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from tito_fast.errors import FamilyError

ALL_ROLES = frozenset({"tool", "user", "system", "assistant"})
#: The forms of tool-call ids a family's template may require (`FamilyConfig.tool_call_ids`).
CallIds = Literal["call", "mistral", "kimi"]
TOOL_CALL_IDS: tuple[CallIds, ...] = ("call", "mistral", "kimi")


@dataclass(frozen=True)
class FamilyConfig:
    """A TITO family, declared.

    Token names are token strings (`"<|im_end|>"`) or short texts that
    encode to exactly one id (`"\\n"`).

    Attributes:
        name: the family's name.
        append_after: `(X, Y)`: when the stored ids end with X, append Y
            (Qwen3: `("<|im_end|>", "\\n")`).
        drop_last_if_in: drop the stored ids' last id when it is one of these
            (GLM-4.7: `("<|observation|>", "<|user|>")`).
        trailing: ids a comparison strips from both tails.
        max_trim_tokens: stored ids a prefix check may drop from the end.
        assistant_start_str: text that opens assistant content (comparator).
        boundary: segment boundary ids: "auto" (the tokenizer's special ids),
            or a tuple of token names.
        boundary_exclude: token names taken out of an "auto" boundary set.
        allowed_roles: roles that may be appended after an assistant turn.
        template_kwargs: kwargs every render gets; a caller's conflicting
            value is an error.
        diff: "dummy" (render after the synthetic base) or "history"
            (render the real old messages and the new ones: DeepSeek V4).
        chat_template: a template that replaces the tokenizer's.
        arguments: tool-call arguments as "dict" or "json" for the template.
        deepseek: "dsv4" or "dsv32": render with DeepSeek's encoder module
            `encoding_<deepseek>.py` (found where users have it, see
            `tito_fast.chat.deepseek`) instead of a chat template. (A config
            dict may still name this key "encoder".)
        template_patches: `(find, replace)` edits that make the tokenizer's
            own template append-only (each `find` must occur exactly once);
            applied unless `chat_template` is given.
        reasoning_parser, tool_call_parser: the SGLang `--reasoning-parser`
            and `--tool-call-parser` that read this family's output (the
            engine splits reasoning and tool calls out of the completion
            with them; `resolve_parsers` checks a user's flags against them).
        tool_call_ids: the form of tool-call ids the template accepts, for
            the verifier's conversations: "call" (`call_0`), "mistral" (nine
            letters and digits, which Mistral's templates require) or "kimi"
            (`functions.NAME:INDEX`, as Kimi K2.x's parsers expect).

    Example:
        >>> FamilyConfig.from_dict({"name": "k2v3", "trailing": ["<|ifm|im_end|>"]}).trailing
        ('<|ifm|im_end|>',)
    """

    name: str
    append_after: tuple[str, str] | None = None
    drop_last_if_in: tuple[str, ...] = ()
    trailing: tuple[str, ...] = ()
    max_trim_tokens: int = 0
    assistant_start_str: str | None = None
    boundary: Literal["auto"] | tuple[str, ...] = "auto"
    boundary_exclude: tuple[str, ...] = ()
    allowed_roles: frozenset[str] = ALL_ROLES
    template_kwargs: Mapping[str, Any] = field(default_factory=dict)
    diff: Literal["dummy", "history"] = "dummy"
    chat_template: str | None = None
    arguments: Literal["dict", "json"] = "dict"
    template_patches: tuple[tuple[str, str], ...] = ()
    deepseek: Literal["", "dsv4", "dsv32"] = ""
    tool_call_ids: CallIds = "call"
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None

    def __post_init__(self) -> None:
        bad = set(self.allowed_roles) - ALL_ROLES
        if bad:
            raise FamilyError(f"allowed_roles has unknown roles {sorted(bad)}; known: {sorted(ALL_ROLES)}")
        if self.max_trim_tokens < 0:
            raise FamilyError("max_trim_tokens must be >= 0")
        if self.diff not in ("dummy", "history"):
            raise FamilyError(f"diff must be 'dummy' or 'history', got {self.diff!r}")
        if self.tool_call_ids not in TOOL_CALL_IDS:
            raise FamilyError(f"tool_call_ids must be one of {TOOL_CALL_IDS}, got {self.tool_call_ids!r}")
        object.__setattr__(self, "allowed_roles", frozenset(self.allowed_roles))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FamilyConfig:
        """A config from plain data (e.g. a JSON file); unknown keys are an error."""
        known = set(cls.__dataclass_fields__)
        unknown = set(data) - known - {"encoder"}
        if unknown:
            raise FamilyError(f"unknown family config keys {sorted(unknown)}; known: {sorted(known)}")
        d = dict(data)
        if "encoder" in d and "deepseek" not in d:  # the key's former name
            d["deepseek"] = d.pop("encoder")
        for key in ("drop_last_if_in", "trailing", "boundary_exclude"):
            if key in d:
                d[key] = tuple(d[key])
        if "append_after" in d and d["append_after"] is not None:
            d["append_after"] = tuple(d["append_after"])
        if isinstance(d.get("boundary"), list):
            d["boundary"] = tuple(d["boundary"])
        if "allowed_roles" in d:
            d["allowed_roles"] = frozenset(d["allowed_roles"])
        if "template_patches" in d:
            d["template_patches"] = tuple((str(a), str(b)) for a, b in d["template_patches"])
        return cls(**d)


# Qwen templates drop the reasoning of assistant turns before the last user
# query ("cut-thinking"): under clear_thinking=False these edits keep it, so
# a user turn can be appended without rewriting history.
_KEEP_REASONING = ("{%- if loop.index0 > ns.last_query_index %}", "{%- if loop.index0 > ns.last_query_index or clear_thinking is false %}")
# Qwen3 renders the <think> block of a non-last assistant turn only when it
# has reasoning; the engine saw the block on every turn (the model always
# emits it; with thinking off the generation prompt holds it), so under
# clear_thinking=False every assistant turn keeps it, empty or not.
_ALWAYS_THINK_BLOCK = (
    "{%- if loop.last or (not loop.last and reasoning_content) %}",
    "{%- if loop.last or (not loop.last and reasoning_content) or clear_thinking is false %}",
)
# Qwen3.5 refuses a conversation without a user query, which the synthetic
# base (system + assistant) is; under clear_thinking=False it may render.
_ALLOW_NO_QUERY = (
    "{%- if ns.multi_step_tool %}\n    {{- raise_exception('No user query found in messages.') }}",
    "{%- if ns.multi_step_tool and clear_thinking is not false %}\n    {{- raise_exception('No user query found in messages.') }}",
)
_QWEN = dict(append_after=("<|im_end|>", "\n"), trailing=("\n",), assistant_start_str="<|im_start|>assistant")
_MINIMAX = dict(
    append_after=("[e~[", "\n"),
    trailing=("\n",),
    assistant_start_str="]~b]ai",
    # MiniMax renders reasoning only after the last user message: keep it all.
    template_patches=(
        (
            "{%- if reasoning_content and loop.index0 > ns.last_user_index -%}",
            "{%- if reasoning_content and (loop.index0 > ns.last_user_index or clear_thinking is false) -%}",
        ),
    ),
)
_DEEPSEEK_BOUNDARY = ("<｜User｜>", "<｜Assistant｜>")

#: The reference's families, and llama3.
FAMILIES: dict[str, FamilyConfig] = {
    "default": FamilyConfig("default"),
    "qwen3": FamilyConfig(
        "qwen3", **_QWEN, template_kwargs={"clear_thinking": False}, template_patches=(_KEEP_REASONING, _ALWAYS_THINK_BLOCK),  # type: ignore[arg-type]
        reasoning_parser="qwen3", tool_call_parser="qwen25",
    ),
    # Qwen2.5 (Instruct, Coder): ChatML without reasoning; its stock template
    # renders append-only as it is (a default system prompt when the first
    # message is not one, tool results in one user block).
    "qwen25": FamilyConfig("qwen25", **_QWEN, tool_call_parser="qwen25"),  # type: ignore[arg-type]
    "qwen35": FamilyConfig(
        "qwen35", **_QWEN, template_kwargs={"clear_thinking": False},  # type: ignore[arg-type]
        allowed_roles=frozenset({"tool", "user", "assistant"}),  # its template refuses a later system message
        template_patches=(_KEEP_REASONING, _ALLOW_NO_QUERY), reasoning_parser="qwen3", tool_call_parser="qwen3_coder",
    ),
    "qwennext": FamilyConfig(
        "qwennext", **_QWEN, template_kwargs={"clear_thinking": False}, template_patches=(_KEEP_REASONING, _ALWAYS_THINK_BLOCK),  # type: ignore[arg-type]
        reasoning_parser="qwen3", tool_call_parser="qwen25",
    ),
    "nemotron3": FamilyConfig(
        "nemotron3",
        append_after=("<|im_end|>", "\n"),
        trailing=("\n",),
        assistant_start_str="<|im_start|>assistant\n",
        template_kwargs={"truncate_history_thinking": False},
        reasoning_parser="nemotron_3",
        tool_call_parser="qwen3_coder",
    ),
    "glm47": FamilyConfig(
        "glm47",
        drop_last_if_in=("<|observation|>", "<|user|>"),
        trailing=("<|observation|>", "<|user|>"),
        max_trim_tokens=1,
        assistant_start_str="<|assistant|>",
        template_kwargs={"clear_thinking": False},
        reasoning_parser="glm45",
        tool_call_parser="glm47",
    ),
    "kimi25": FamilyConfig(
        "kimi25", assistant_start_str="<|im_assistant|>", boundary_exclude=("<|im_middle|>",),
        template_kwargs={"preserve_thinking": True},
    ),
    # Kimi K2.6: its tool-call parser reads ids of the form functions.NAME:INDEX,
    # so the verifier's conversations carry ids of that form.
    "kimi26": FamilyConfig(
        "kimi26", assistant_start_str="<|im_assistant|>", boundary_exclude=("<|im_middle|>",),
        template_kwargs={"preserve_thinking": True}, tool_call_ids="kimi", reasoning_parser="kimi_k2",
        tool_call_parser="kimi_k2_raw_id",
    ),
    "minimax_m25": FamilyConfig(
        "minimax_m25", **_MINIMAX, template_kwargs={"clear_thinking": False},  # type: ignore[arg-type]
        reasoning_parser="minimax-append-think", tool_call_parser="minimax-m2",
        allowed_roles=frozenset({"tool", "user", "assistant"}),
    ),
    "minimax_m27": FamilyConfig(
        "minimax_m27", **_MINIMAX, template_kwargs={"clear_thinking": False},  # type: ignore[arg-type]
        reasoning_parser="minimax-append-think", tool_call_parser="minimax-m2",
        allowed_roles=frozenset({"tool", "user", "assistant"}),
    ),
    "deepseekv32": FamilyConfig(
        "deepseekv32", assistant_start_str="<｜Assistant｜>", boundary=_DEEPSEEK_BOUNDARY,
        template_kwargs={"drop_thinking": False}, arguments="json", deepseek="dsv32", reasoning_parser="deepseek-v3",
        tool_call_parser="deepseekv32",
    ),
    "deepseekv4": FamilyConfig(
        "deepseekv4", assistant_start_str="<｜Assistant｜>", boundary=_DEEPSEEK_BOUNDARY,
        trailing=("<｜Assistant｜>", "<think>", "</think>"), diff="history",
        template_kwargs={"drop_thinking": False}, allowed_roles=frozenset({"tool", "user", "assistant"}),
        arguments="json", deepseek="dsv4", reasoning_parser="deepseek-v4", tool_call_parser="deepseekv4",
    ),
    "inkling": FamilyConfig(
        "inkling", assistant_start_str="<|message_model|>",
        boundary=("<|message_user|>", "<|message_model|>", "<|message_system|>", "<|message_tool|>"),
        reasoning_parser="inkling", tool_call_parser="inkling",
    ),
    # New: Mistral (Mistral Small 3.2, Ministral 3 Reasoning, Devstral Small:
    # llama.cpp's copies of their templates). The model stops at </s>, which
    # the template writes after an assistant message, and the next message
    # follows it directly: no seam rule. Their templates take tool-call ids of
    # nine letters and digits only, and refuse conversations whose user and
    # assistant turns do not alternate (see docs/families.md).
    "mistral": FamilyConfig("mistral", tool_call_ids="mistral", tool_call_parser="mistral"),
    # New: Llama 3.x. The model stops at <|eot_id|> (the template's message
    # end), so the seam needs no fix; assistant bodies follow
    # <|end_header_id|>, so the role marker alone opens them.
    "llama3": FamilyConfig(
        "llama3",
        trailing=("<|eot_id|>", "<|eom_id|>"),
        assistant_start_str="<|start_header_id|>assistant",
        tool_call_parser="llama3",
    ),
}


def patch_template(template: str, patches: tuple[tuple[str, str], ...], family: str = "") -> str:
    """`template` with each `(find, replace)` applied; each `find` must occur exactly once.

    Example:
        >>> patch_template("a {{ x }} b", (("{{ x }}", "{{ y }}"),))
        'a {{ y }} b'
    """
    for find, repl in patches:
        n = template.count(find)
        if n != 1:
            raise FamilyError(
                f"family {family!r}: cannot make this chat template append-only: expected one {find!r}, "
                f"found {n}; pass chat_template= with an append-only template for this model"
            )
        template = template.replace(find, repl)
    return template

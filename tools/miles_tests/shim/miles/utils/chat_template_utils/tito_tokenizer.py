"""Miles' TITO tokenizer classes, each a tito_fast family (`tito_fast.chat.families`).

Behaviour comes from tito_fast: the family table, template choice, kwargs
pinning, thinking precedence, allowed roles, merges and the comparator. The
few Miles registration details tito_fast has no counterpart for (the
`FixedTemplate` record, private helpers) are
plain stand-ins here, so that tests of them fail visibly rather than import.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tito_fast.chat import families as _f
from tito_fast.chat.render import template_of
from tito_fast.errors import RenderError
from tito_fast.chat import presets as _presets
from tito_fast.chat import templates as _t

_folders = _t._folders()
TEMPLATE_DIR = _folders[0][0] if _folders else Path("templates")
VALID_APPEND_ROLES: tuple[str, ...] = ("tool", "user", "system", "assistant")
ALL_APPEND_ROLES: frozenset[str] = _presets.ALL_ROLES


@dataclass(frozen=True)
class FixedTemplate:
    """Stand-in for Miles' registration record (tito_fast keeps these facts in FamilyConfig)."""

    template: str | None = None
    extra_kwargs: dict[str, Any] = field(default_factory=dict)
    allowed_append_roles: frozenset[str] = ALL_APPEND_ROLES

    def __post_init__(self) -> None:
        roles = frozenset(self.allowed_append_roles)
        unknown = roles - ALL_APPEND_ROLES  # tito_fast's roles (presets.ALL_ROLES), in the words of Miles' record
        if unknown:
            raise ValueError(
                f"Unknown FixedTemplate allowed_append_roles: {sorted(unknown)}; supported roles are {sorted(ALL_APPEND_ROLES)}"
            )
        object.__setattr__(self, "allowed_append_roles", roles)


def _fixed(family: str) -> FixedTemplate:
    config = _f.FAMILIES[family]
    return FixedTemplate(_t.FIXED_TEMPLATES.get(family), dict(config.template_kwargs), config.allowed_roles)


def _own_template(tokenizer: Any) -> str | None:
    if tokenizer is None:
        return None
    try:
        return template_of(tokenizer)
    except RenderError:  # no template: the family decides (DeepSeek's encoders)
        return None


def _build_dummy_assistant(stored_assistant: dict[str, Any]) -> dict[str, Any]:
    return {"role": "assistant", "content": "", "reasoning_content": " ", "tool_calls": stored_assistant.get("tool_calls") or []}


class TITOTokenizer(_f.TitoTokenizer):
    _FAMILY = "default"
    FIXED_TEMPLATE = _fixed("default")
    chat_template_kwarg_aliases: frozenset[str] = frozenset()
    reasoning_parser: str | None = None
    tool_call_parser: str | None = None

    def __init__(
        self,
        tokenizer: Any,
        chat_template_kwargs: dict[str, Any] | None = None,
        assistant_start_str: str | None = None,
        special_token_ids: set[int] | None = None,
    ) -> None:
        fixed = type(self).FIXED_TEMPLATE
        config = _f.FAMILIES[self._FAMILY]
        if fixed != _fixed(self._FAMILY):  # a test registering its own record
            config = replace(config, allowed_roles=fixed.allowed_append_roles, template_kwargs=dict(fixed.extra_kwargs))
        # Miles' classes render the tokenizer's template as it is (its load_tokenizer installs the
        # fixed one beforehand); tito_fast's family would put the fixed one in place of a stock one.
        own = _own_template(tokenizer)
        super().__init__(tokenizer, config, chat_template_kwargs, assistant_start_str=assistant_start_str,
                         chat_template=own, check_template=own is None)  # tokenizer=None: tito_fast's stand-in
        if special_token_ids is not None:
            self.special_token_ids = set(special_token_ids)
        self._assistant_start_str = self.assistant_start_str
        if self._append_after is not None:
            self._im_end_id = self._eos_id = self._append_after[0]
            self._newline_id = self._append_after[1]
        if self._drop_last:
            self._observation_id = tokenizer.convert_tokens_to_ids("<|observation|>")
            self._user_id = tokenizer.convert_tokens_to_ids("<|user|>")

    def apply_chat_template(self, messages: list[dict[str, Any]], *, add_generation_prompt: bool,  # type: ignore[override]
                            tools: list[dict[str, Any]] | None = None, tokenize: bool = False) -> Any:
        text = super().apply_chat_template(messages, add_generation_prompt=add_generation_prompt, tools=tools)
        return self.encode(text) if tokenize else text

    def _encode_text(self, text: str) -> list[int]:
        return self.encode(text)


def _attrs(name: str) -> dict[str, Any]:
    config = _f.FAMILIES[name]  # the parser bindings are the family's (FamilyConfig)
    return {"_FAMILY": name, "FIXED_TEMPLATE": _fixed(name), "reasoning_parser": config.reasoning_parser,
            "tool_call_parser": config.tool_call_parser}


def _family(name: str, cls_name: str) -> type[TITOTokenizer]:
    return type(cls_name, (TITOTokenizer,), _attrs(name))


Qwen3TITOTokenizer = _family("qwen3", "Qwen3TITOTokenizer")
Qwen35TITOTokenizer = type("Qwen35TITOTokenizer", (Qwen3TITOTokenizer,), _attrs("qwen35"))
QwenNextTITOTokenizer = type("QwenNextTITOTokenizer", (Qwen3TITOTokenizer,), _attrs("qwennext"))
GLM47TITOTokenizer = _family("glm47", "GLM47TITOTokenizer")
Nemotron3TITOTokenizer = type("Nemotron3TITOTokenizer", (Qwen3TITOTokenizer,), _attrs("nemotron3"))
Kimi25TITOTokenizer = _family("kimi25", "Kimi25TITOTokenizer")
Kimi26TITOTokenizer = _family("kimi26", "Kimi26TITOTokenizer")
MinimaxM25TITOTokenizer = _family("minimax_m25", "MinimaxM25TITOTokenizer")
MinimaxM27TITOTokenizer = type("MinimaxM27TITOTokenizer", (MinimaxM25TITOTokenizer,), _attrs("minimax_m27"))
DeepSeekV32TITOTokenizer = _family("deepseekv32", "DeepSeekV32TITOTokenizer")
DeepSeekV4TITOTokenizer = _family("deepseekv4", "DeepSeekV4TITOTokenizer")
InklingTITOTokenizer = _family("inkling", "InklingTITOTokenizer")


class TITOTokenizerType(str, enum.Enum):
    DEFAULT = "default"
    QWEN3 = "qwen3"
    QWEN35 = "qwen35"
    QWENNEXT = "qwennext"
    GLM47 = "glm47"
    NEMOTRON3 = "nemotron3"
    KIMI25 = "kimi25"
    KIMI26 = "kimi26"
    MINIMAX_M25 = "minimax_m25"
    MINIMAX_M27 = "minimax_m27"
    DEEPSEEKV32 = "deepseekv32"
    DEEPSEEKV4 = "deepseekv4"
    INKLING = "inkling"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def get_tokenizer_class(cls, t: TITOTokenizerType) -> type[TITOTokenizer]:
        return _CLASSES[cls(t).value]


_CLASSES: dict[str, type[TITOTokenizer]] = {
    "default": TITOTokenizer, "qwen3": Qwen3TITOTokenizer, "qwen35": Qwen35TITOTokenizer, "qwennext": QwenNextTITOTokenizer,
    "glm47": GLM47TITOTokenizer, "nemotron3": Nemotron3TITOTokenizer, "kimi25": Kimi25TITOTokenizer,
    "kimi26": Kimi26TITOTokenizer, "minimax_m25": MinimaxM25TITOTokenizer, "minimax_m27": MinimaxM27TITOTokenizer,
    "deepseekv32": DeepSeekV32TITOTokenizer, "deepseekv4": DeepSeekV4TITOTokenizer, "inkling": InklingTITOTokenizer,
}


def get_tito_tokenizer(tokenizer: Any, tokenizer_type: Any = "default", chat_template_kwargs: dict[str, Any] | None = None,
                       assistant_start_str: str | None = None) -> TITOTokenizer:
    """tito_fast's factory decides (None, unknown names); the instance is of the Miles-named class."""
    name = getattr(tokenizer_type, "value", tokenizer_type)
    _f.get_tito_tokenizer(tokenizer, tokenizer_type=name, check_template=False) if tokenizer is None or name not in _CLASSES else None
    kwargs: dict[str, Any] = {"chat_template_kwargs": chat_template_kwargs}
    if assistant_start_str is not None:
        kwargs["assistant_start_str"] = assistant_start_str
    return _CLASSES[name](tokenizer, **kwargs)


def resolve_fixed_chat_template(tito_model: Any) -> tuple[str | None, dict[str, Any]]:
    name = getattr(tito_model, "value", tito_model)
    if name not in _CLASSES:
        raise ValueError(f"unknown family {name!r}")
    fixed = _fixed(name)
    return (str(TEMPLATE_DIR / fixed.template) if fixed.template else None), dict(fixed.extra_kwargs)


def resolve_reasoning_and_tool_call_parser(tito_model: Any, user_reasoning_parser: str | None = None,
                                           user_tool_call_parser: str | None = None) -> tuple[str | None, str | None]:
    return _f.resolve_reasoning_and_tool_call_parser(getattr(tito_model, "value", tito_model), user_reasoning_parser,
                                                     user_tool_call_parser)


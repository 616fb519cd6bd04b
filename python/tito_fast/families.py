"""TITO families: incremental tokenization of appended messages and the merge
of a session's stored ids with them.

A family says how one model's chat format joins turns: how the stored ids
(the previous turn's prompt + completion) are spliced to the ids of the
messages appended since (`merge_tokens`), which trailing ids a comparison
ignores, how many stored ids a prefix check may trim, where assistant
content starts, which ids are segment boundaries, which roles may be
appended append-only, and which template kwargs keep renders append-only.

The appended messages are tokenized as the reference does: render a
synthetic base (a dummy system message and an empty assistant carrying the
last stored message's tool calls), render base + appended messages with the
generation prompt, check the second text starts with the first, and encode
the rest. The base render depends only on those tool calls, the tools and
the kwargs, so it is cached: each turn renders once, not twice.

Every family of the reference is built in (`FAMILIES`), plus `llama3`, and
`FamilyConfig` declares a new one without code (see `from_config`).

Example:
    >>> from tito_fast import get_tito_tokenizer
    >>> tito = get_tito_tokenizer(tok, "qwen3")  # doctest: +SKIP
    >>> ids = tito.merge_tokens(old_messages, new_messages, stored_ids)  # doctest: +SKIP
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from tito_fast._core import merge_tokens as _merge
from tito_fast.encoder import FastEncoder
from tito_fast.messages import Matcher, check_append_only
from tito_fast.render import RenderError, ToolPolicy, render, template_of

ALL_ROLES = frozenset({"tool", "user", "system", "assistant"})
DUMMY_SYSTEM = {"role": "system", "content": "dummy system"}


class FamilyError(ValueError):
    """A family cannot be built for this tokenizer, or was given conflicting settings."""


class RenderDiffError(ValueError):
    """Rendering base + appended messages did not extend the base render."""


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
        encoder: "dsv4" or "dsv32": render with DeepSeek's encoder module
            (`encoding_<encoder>.py` in the tokenizer's directory, or the
            `encoder_path` option) instead of a chat template.
        template_patches: `(find, replace)` edits that make the tokenizer's
            own template append-only (each `find` must occur exactly once);
            applied unless `chat_template` is given.

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
    encoder: Literal["", "dsv4", "dsv32"] = ""

    def __post_init__(self) -> None:
        bad = set(self.allowed_roles) - ALL_ROLES
        if bad:
            raise FamilyError(f"allowed_roles has unknown roles {sorted(bad)}; known: {sorted(ALL_ROLES)}")
        if self.max_trim_tokens < 0:
            raise FamilyError("max_trim_tokens must be >= 0")
        if self.diff not in ("dummy", "history"):
            raise FamilyError(f"diff must be 'dummy' or 'history', got {self.diff!r}")
        object.__setattr__(self, "allowed_roles", frozenset(self.allowed_roles))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FamilyConfig:
        """A config from plain data (e.g. a JSON file); unknown keys are an error."""
        known = set(cls.__dataclass_fields__)
        unknown = set(data) - known
        if unknown:
            raise FamilyError(f"unknown family config keys {sorted(unknown)}; known: {sorted(known)}")
        d = dict(data)
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
        "qwen3", **_QWEN, template_kwargs={"clear_thinking": False}, template_patches=(_KEEP_REASONING,),  # type: ignore[arg-type]
    ),
    "qwen35": FamilyConfig(
        "qwen35", **_QWEN, template_kwargs={"clear_thinking": False},  # type: ignore[arg-type]
        allowed_roles=frozenset({"tool", "user", "assistant"}),  # its template refuses a later system message
        template_patches=(_KEEP_REASONING, _ALLOW_NO_QUERY),
    ),
    "qwennext": FamilyConfig(
        "qwennext", **_QWEN, template_kwargs={"clear_thinking": False}, template_patches=(_KEEP_REASONING,),  # type: ignore[arg-type]
    ),
    "nemotron3": FamilyConfig(
        "nemotron3",
        append_after=("<|im_end|>", "\n"),
        trailing=("\n",),
        assistant_start_str="<|im_start|>assistant\n",
        template_kwargs={"truncate_history_thinking": False},
    ),
    "glm47": FamilyConfig(
        "glm47",
        drop_last_if_in=("<|observation|>", "<|user|>"),
        trailing=("<|observation|>", "<|user|>"),
        max_trim_tokens=1,
        assistant_start_str="<|assistant|>",
        template_kwargs={"clear_thinking": False},
    ),
    "kimi25": FamilyConfig(
        "kimi25", assistant_start_str="<|im_assistant|>", boundary_exclude=("<|im_middle|>",),
        template_kwargs={"preserve_thinking": True},
    ),
    "kimi26": FamilyConfig(
        "kimi26", assistant_start_str="<|im_assistant|>", boundary_exclude=("<|im_middle|>",),
        template_kwargs={"preserve_thinking": True},
    ),
    "minimax_m25": FamilyConfig(
        "minimax_m25", **_MINIMAX, template_kwargs={"clear_thinking": False},  # type: ignore[arg-type]
        allowed_roles=frozenset({"tool", "user", "assistant"}),
    ),
    "minimax_m27": FamilyConfig(
        "minimax_m27", **_MINIMAX, template_kwargs={"clear_thinking": False},  # type: ignore[arg-type]
        allowed_roles=frozenset({"tool", "user", "assistant"}),
    ),
    "deepseekv32": FamilyConfig(
        "deepseekv32", assistant_start_str="<｜Assistant｜>", boundary=_DEEPSEEK_BOUNDARY,
        template_kwargs={"drop_thinking": False}, arguments="json", encoder="dsv32",
    ),
    "deepseekv4": FamilyConfig(
        "deepseekv4", assistant_start_str="<｜Assistant｜>", boundary=_DEEPSEEK_BOUNDARY,
        trailing=("<｜Assistant｜>", "<think>", "</think>"), diff="history",
        template_kwargs={"drop_thinking": False}, allowed_roles=frozenset({"tool", "user", "assistant"}),
        arguments="json", encoder="dsv4",
    ),
    "inkling": FamilyConfig(
        "inkling", assistant_start_str="<|message_model|>",
        boundary=("<|message_user|>", "<|message_model|>", "<|message_system|>", "<|message_tool|>"),
    ),
    # New: Llama 3.x. The model stops at <|eot_id|> (the template's message
    # end), so the seam needs no fix; assistant bodies follow
    # <|end_header_id|>, so the role marker alone opens them.
    "llama3": FamilyConfig(
        "llama3",
        trailing=("<|eot_id|>", "<|eom_id|>"),
        assistant_start_str="<|start_header_id|>assistant",
    ),
}


def _own_template(tokenizer: Any, family: str) -> str:
    try:
        return template_of(tokenizer)
    except RenderError as e:
        raise FamilyError(f"family {family!r}: {e}") from None


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


def _single_id(tokenizer: Any, name: str, what: str) -> int:
    """The id of a token string, or of a short text that encodes to one id."""
    added = tokenizer.get_added_vocab() if hasattr(tokenizer, "get_added_vocab") else {}
    if name in added:
        return int(added[name])
    vocab_id = tokenizer.convert_tokens_to_ids(name)
    unk = getattr(tokenizer, "unk_token_id", None)
    if isinstance(vocab_id, int) and vocab_id != unk and tokenizer.convert_ids_to_tokens(vocab_id) == name:
        return vocab_id
    ids = tokenizer.encode(name, add_special_tokens=False)
    if len(ids) != 1:
        raise FamilyError(f"{what}: {name!r} is not one token of this tokenizer (it encodes to {ids})")
    return int(ids[0])


class TitoTokenizer:
    """A family bound to a tokenizer: tokenizes appended messages and merges ids.

    Made by `get_tito_tokenizer`. Thread-safe: the base-render cache is
    guarded by a lock, rendering and encoding hold no shared state.

    Example:
        >>> tito = get_tito_tokenizer(tok, "qwen3")  # doctest: +SKIP
        >>> tito.merge_ids([7, 151645], [151644])  # the seam rule alone: a newline after <|im_end|>  # doctest: +SKIP
        [7, 151645, 198, 151644]
    """

    def __init__(
        self,
        tokenizer: Any,
        config: FamilyConfig,
        chat_template_kwargs: Mapping[str, Any] | None = None,
        *,
        tool_policy: ToolPolicy = "sglang",
        matcher: str | Matcher = "strict",
        backend: Literal["hf", "jinja"] = "hf",
        base_cache_size: int = 64,
        encoder_path: str | None = None,
        fast_encode: bool = True,
    ) -> None:
        self.tokenizer = tokenizer
        self.config = config
        self.family = config.name
        kwargs = dict(chat_template_kwargs or {})
        for key, value in config.template_kwargs.items():
            if key in kwargs and kwargs[key] != value:
                raise FamilyError(
                    f"chat template kwarg {key}={kwargs[key]!r} conflicts with {value!r}, which family "
                    f"{config.name!r} needs to render append-only"
                )
            kwargs[key] = value
        self.chat_template_kwargs: dict[str, Any] = kwargs
        self.tool_policy: ToolPolicy = tool_policy
        self.matcher = matcher
        self.backend: Literal["hf", "jinja"] = backend
        self.allowed_append_roles: frozenset[str] = config.allowed_roles
        self.max_trim_tokens: int = config.max_trim_tokens
        self.assistant_start_str: str | None = config.assistant_start_str
        self.trailing_token_ids: frozenset[int] = frozenset(
            _single_id(tokenizer, t, f"family {config.name} trailing") for t in config.trailing
        )
        self._append_after = (
            (
                _single_id(tokenizer, config.append_after[0], f"family {config.name} append_after"),
                _single_id(tokenizer, config.append_after[1], f"family {config.name} append_after"),
            )
            if config.append_after
            else None
        )
        self._drop_last = frozenset(
            _single_id(tokenizer, t, f"family {config.name} drop_last_if_in") for t in config.drop_last_if_in
        )
        self.special_token_ids: set[int] | None = self._boundary()
        self.encoder: Any = None
        if config.encoder:
            from tito_fast.deepseek import find_encoder, load_encoder

            path = encoder_path or find_encoder(tokenizer, config.encoder)
            if path is None:
                raise FamilyError(
                    f"family {config.name!r} renders with DeepSeek's encoding_{config.encoder}.py, which is not in "
                    f"the tokenizer's directory; pass encoder_path="
                )
            self.encoder = load_encoder(str(path))
        self.chat_template: str | None = config.chat_template
        if self.chat_template is None and config.template_patches:
            self.chat_template = patch_template(_own_template(tokenizer, config.name), config.template_patches, config.name)
        # A transformers fast tokenizer encodes exactly as its backend does
        # unless it splits special tokens itself.
        rust_tok = getattr(tokenizer, "backend_tokenizer", None)
        plain = not getattr(tokenizer, "split_special_tokens", False)
        self._rust_tokenizer: Any = rust_tok if rust_tok is not None and plain and hasattr(rust_tok, "encode") else None
        self._fast_encode = fast_encode and self._rust_tokenizer is not None
        self._fast_encoder: FastEncoder | None = None
        self._base_cache: OrderedDict[str, str] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._base_cache_size = base_cache_size
        self.renders = 0  # how many templates this object rendered (cache effect, for tests and benches)

    def _boundary(self) -> set[int] | None:
        from tito_fast.comparator import TokenSeqComparator

        c = self.config
        if c.boundary == "auto":
            if not c.boundary_exclude:
                return None  # the comparator detects them
            auto = TokenSeqComparator.collect_special_ids(self.tokenizer)
            return auto - {_single_id(self.tokenizer, t, f"family {c.name} boundary_exclude") for t in c.boundary_exclude}
        return {_single_id(self.tokenizer, t, f"family {c.name} boundary") for t in c.boundary}

    # -- rendering -------------------------------------------------------

    def apply_chat_template(
        self, messages: list[dict[str, Any]], *, add_generation_prompt: bool, tools: list[dict[str, Any]] | None = None
    ) -> str:
        """The family's render of `messages` (text)."""
        self.renders += 1
        return render(
            self.tokenizer,
            messages,
            tools=tools,
            add_generation_prompt=add_generation_prompt,
            chat_template=self.chat_template,
            tool_policy=self.tool_policy,
            backend=self.backend,
            arguments=self.config.arguments,
            none_keys="drop",  # the jinja backend then renders as transformers does
            encoder=self.encoder,
            encoder_version=self.config.encoder or "dsv4",
            **self.chat_template_kwargs,
        )

    @property
    def fast_encoder(self) -> FastEncoder | None:
        """The exact Rust encoder of the tokenizer (`tito_fast.encoder`), built on
        first use; None when turned off or the tokenizer is not a fast one."""
        if self._fast_encode and self._fast_encoder is None:
            self._fast_encoder = FastEncoder.for_tokenizer(self.tokenizer)
        return self._fast_encoder

    def encode(self, text: str) -> list[int]:
        """`tokenizer.encode(text, add_special_tokens=False)`: by `fast_encoder`
        when it covers the tokenizer (same ids, several times faster), else by
        the Rust tokenizer directly when the tokenizer is a fast one (same ids,
        without the batch machinery)."""
        if self._fast_encode:
            return self.fast_encoder.encode(text)  # type: ignore[union-attr]
        if self._rust_tokenizer is not None:
            fast = getattr(self._rust_tokenizer, "encode_batch_fast", None)  # no offsets: same ids, less work
            if fast is not None:
                return list(fast([text], add_special_tokens=False)[0].ids)
            return list(self._rust_tokenizer.encode(text, add_special_tokens=False).ids)
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def render_ids(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> list[int]:
        """The canonical ids of a whole session (no generation prompt), as the session check renders them."""
        text = self.apply_chat_template(messages, add_generation_prompt=False, tools=tools)
        return self.encode(text)

    def _base_text(self, last: dict[str, Any], tools: list[dict[str, Any]] | None) -> tuple[list[dict[str, Any]], str]:
        calls = last.get("tool_calls") or []
        base: list[dict[str, Any]] = [
            DUMMY_SYSTEM,
            {"role": "assistant", "content": "", "reasoning_content": " ", "tool_calls": calls},
        ]
        key = json.dumps([calls, tools], sort_keys=True, default=repr)
        with self._cache_lock:
            text = self._base_cache.get(key)
            if text is not None:
                self._base_cache.move_to_end(key)
                return base, text
        text = self.apply_chat_template(base, add_generation_prompt=False, tools=tools)  # outside the lock
        with self._cache_lock:
            self._base_cache[key] = text
            if len(self._base_cache) > self._base_cache_size:
                self._base_cache.popitem(last=False)
        return base, text

    def tokenize_additional_messages(
        self,
        old_messages: list[dict[str, Any]],
        new_messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
    ) -> list[int]:
        """Ids of the messages appended to `old_messages`, generation prompt included.

        Raises `AppendOnlyError` when `new_messages` does not extend
        `old_messages` with allowed roles, and `RenderDiffError` when the
        template's render of the extension does not start with its render of
        the base.
        """
        check_append_only(old_messages, new_messages, self.allowed_append_roles, self.matcher)
        return self._incremental(old_messages, new_messages, tools)

    def _incremental(
        self, old_messages: list[dict[str, Any]], new_messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> list[int]:
        """`tokenize_additional_messages` once the history has been checked."""
        if not old_messages:
            raise FamilyError("old_messages is empty: there is no stored turn to extend")
        appended = new_messages[len(old_messages) :]
        if self.config.diff == "history":
            before = self.apply_chat_template(old_messages, add_generation_prompt=False, tools=tools)
            after = self.apply_chat_template(new_messages, add_generation_prompt=True, tools=tools)
        else:
            base, before = self._base_text(old_messages[-1], tools)
            after = self.apply_chat_template(base + appended, add_generation_prompt=True, tools=tools)
        if not after.startswith(before):
            roles = [m.get("role") for m in appended] or ["generation_prompt"]
            at = next((i for i, (x, y) in enumerate(zip(before, after)) if x != y), min(len(before), len(after)))
            raise RenderDiffError(
                f"rendered suffix diff failed for {roles}: the render with the appended messages departs from "
                f"the base render at character {at} ({before[at:at + 40]!r} vs {after[at:at + 40]!r})"
            )
        return self.encode(after[len(before) :])

    def splice(self, prefix_ids: Any) -> Any:
        """The stored ids with the family's seam rule applied (nothing appended)."""
        return self.merge_ids(prefix_ids, [])

    def merge_ids(self, prefix_ids: Any, incremental: Any) -> Any:
        """Seam rule + concatenation of ids (no rendering)."""
        return _merge(prefix_ids, incremental, append_after=self._append_after, drop_last_if_in=self._drop_last or None)

    def merge_tokens(
        self,
        old_messages: list[dict[str, Any]],
        new_messages: list[dict[str, Any]],
        prefix_ids: Any,
        tools: list[dict[str, Any]] | None = None,
    ) -> list[int]:
        """The full prompt ids of the next turn: the stored ids (seam fixed) + the appended messages' ids."""
        incremental = self.tokenize_additional_messages(old_messages, new_messages, tools)
        merged = self.merge_ids(prefix_ids, incremental)
        return merged if isinstance(merged, list) else merged.tolist()

    def create_comparator(self) -> Any:
        """A `TokenSeqComparator` with this family's assistant start, boundary ids and trims."""
        from tito_fast.comparator import TokenSeqComparator

        return TokenSeqComparator(
            self.tokenizer,
            self.assistant_start_str,
            special_token_ids=self.special_token_ids,
            trim_trailing_ids=self.trailing_token_ids or None,
        )

    def __repr__(self) -> str:
        return f"TitoTokenizer(family={self.family!r}, kwargs={self.chat_template_kwargs!r})"


def get_tito_tokenizer(
    tokenizer: Any,
    family: str | FamilyConfig | Mapping[str, Any] = "default",
    chat_template_kwargs: Mapping[str, Any] | None = None,
    **options: Any,
) -> TitoTokenizer:
    """A family bound to `tokenizer`.

    Args:
        tokenizer: a transformers tokenizer (template included).
        family: a name in `FAMILIES`, a `FamilyConfig`, or a dict for
            `FamilyConfig.from_dict` (a format nobody ships).
        chat_template_kwargs: extra template kwargs; a value that conflicts
            with one the family pins is an error.
        options: `tool_policy`, `matcher`, `fast_encode` (default True: encode
            with `tito_fast.encoder.FastEncoder` where it covers the
            tokenizer), `encoder_path` (DeepSeek V3.2/V4's
            encoder module), `backend` ("hf": the tokenizer's
            `apply_chat_template`; "jinja": our environment, same output,
            faster), `chat_template` (a template text replacing the
            tokenizer's, e.g. a fixed one).

    Example:
        >>> tito = get_tito_tokenizer(tok, "glm47")  # doctest: +SKIP
        >>> tito.max_trim_tokens  # doctest: +SKIP
        1
    """
    if isinstance(family, str):
        try:
            config = FAMILIES[family]
        except KeyError:
            raise FamilyError(f"unknown family {family!r}; known: {sorted(FAMILIES)}") from None
    elif isinstance(family, FamilyConfig):
        config = family
    else:
        config = FamilyConfig.from_dict(family)
    template = options.pop("chat_template", None)
    if template is not None:
        config = replace(config, chat_template=template)
    return TitoTokenizer(tokenizer, config, chat_template_kwargs, **options)


def family_names() -> list[str]:
    """Names of the built-in families."""
    return sorted(FAMILIES)


__all__ = [
    "FAMILIES",
    "FamilyConfig",
    "FamilyError",
    "RenderDiffError",
    "TitoTokenizer",
    "get_tito_tokenizer",
    "family_names",
    "patch_template",
]


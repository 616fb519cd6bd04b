"""A TITO family bound to a tokenizer: incremental tokenization of appended
messages and the merge of a session's stored ids with them.

The family itself is data (`tito_fast.chat.presets.FamilyConfig`): how the
stored ids (the previous turn's prompt + completion) are spliced to the ids
of the messages appended since, which trailing ids a comparison ignores,
which roles may be appended, and which template kwargs keep renders
append-only. `TitoTokenizer` adds the tokenizer, the template chosen for it
(Miles' fixed template where Miles registers one), and the work.

The appended messages are tokenized as the reference does: render a
synthetic base (a dummy system message and an empty assistant carrying the
last stored message's tool calls), render base + appended messages with the
generation prompt, check the second text starts with the first, and encode
the rest. The base render depends only on those tool calls, the tools and
the kwargs, so it is cached: each turn renders once, not twice.

Every family of the reference is built in (`FAMILIES`), plus `llama3`, and
`FamilyConfig` declares a new one without code (`FamilyConfig.from_dict`).

Example:
    >>> from tito_fast import get_tito_tokenizer
    >>> tito = get_tito_tokenizer(tok, "qwen3")  # doctest: +SKIP
    >>> ids = tito.merge_tokens(old_messages, new_messages, stored_ids)  # doctest: +SKIP
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import threading
from collections import OrderedDict
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from tito_fast._core import common_prefix_len, trim_trailing
from tito_fast._core import merge_tokens as _merge
from tito_fast.chat.canned import CANNED_TOOLS, canned_conversations, thinking_on
from tito_fast.chat.deepseek import (
    Encoder,
    find_encoder,
    folder_copies,
    merge_thinking_kwargs,
    not_found_message,
    thinking_mode,
)
from tito_fast.chat.messages import Matcher, check_append_only
from tito_fast.chat.presets import ALL_ROLES, FAMILIES, FamilyConfig, patch_template
from tito_fast.chat.render import BACKENDS, Backend, NativeRenderer, native_renderer, render, special_tokens, template_of
from tito_fast.chat.templates import FIXED_TEMPLATES, find_fixed_template, identify
from tito_fast.chat.tools import ToolPolicy
from tito_fast.compare.comparator import TokenSeqComparator
from tito_fast.errors import (
    AppendOnlyError,
    FamilyError,
    RenderDiffError,
    RenderError,
    TemplateLimitError,
    TemplateNotAppendOnlyError,
    TurnNotProducibleError,
)
from tito_fast.tokenizer import cache as table_cache
from tito_fast.tokenizer.backend import backend_of, decode_settings, kind, single_id, special_ids
from tito_fast.tokenizer.encoder import FastEncoder

DUMMY_SYSTEM = {"role": "system", "content": "dummy system"}


@dataclass
class ReplayOutcome:
    """How a replayed conversation compares with its full render (`TitoTokenizer.check_replay`).

    `status`: "pass" (equal ids), "retokenized" (the same text, other ids: a
    seam the engine tokenizes apart, which the reference does not report),
    "fail" (other text, or the merge raised), "skip" (the template cannot
    render the conversation, or one of its turns cannot follow the
    generation prompt). `divergence` is the first differing id.
    """

    status: Literal["pass", "retokenized", "fail", "skip"]
    turns: int = 0
    detail: str = ""
    divergence: int | None = None
    expected_text: str = ""
    actual_text: str = ""
    expected_ids: list[int] = field(default_factory=list)
    actual_ids: list[int] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.status in ("pass", "retokenized")


def _single_id(tokenizer: Any, name: str, what: str) -> int:
    """The id of a token string, or of a short text that encodes to one id; FamilyError otherwise."""
    tid = single_id(tokenizer, name)
    if tid is None:
        ids = tokenizer.encode(name, add_special_tokens=False)
        raise FamilyError(
            f"{what}: {name!r} is not one token of this tokenizer (it encodes to {ids}); "
            "is the family right for this tokenizer?"
        )
    return tid


def _own_template(tokenizer: Any, family: str) -> str:
    try:
        return template_of(tokenizer)
    except RenderError as e:
        raise FamilyError(f"family {family!r}: {e}") from None


def _template_or_none(tokenizer: Any) -> str | None:
    try:
        return template_of(tokenizer)
    except RenderError:
        return None


class TitoTokenizer:
    """A family bound to a tokenizer: tokenizes appended messages and merges ids.

    Made by `get_tito_tokenizer`. Thread-safe: the base-render cache is
    guarded by a lock, rendering and encoding hold no shared state.

    `tokenizer=None` builds a stand-in, as the reference's base class allows
    (its tests subclass it and mock the methods): the family must need no
    token ids to be built (`default` does; a family whose seam rule, trims
    or boundary set name tokens raises `FamilyError` saying what needs the
    tokenizer), and whatever renders, encodes or compares raises `FamilyError`
    naming itself. The append-only message check and `merge_ids` work.

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
        backend: Backend = "native",
        base_cache_size: int = 64,
        encoder_path: str | None = None,
        trust_encoder: bool = False,
        fast_encode: bool = True,
        assistant_start_str: str | None = None,
        allowed_append_roles: Collection[str] | None = None,
        chat_template: str | None = None,
        check_template: bool = True,
    ) -> None:
        if tokenizer is None:
            _check_buildable_without_tokenizer(config)
        self.tokenizer = tokenizer
        self.config = config
        self.family = config.name
        self._options: dict[str, Any] = dict(
            tool_policy=tool_policy, matcher=matcher, backend=backend, base_cache_size=base_cache_size,
            encoder_path=encoder_path, trust_encoder=trust_encoder, fast_encode=fast_encode,
            assistant_start_str=assistant_start_str,
            allowed_append_roles=allowed_append_roles, chat_template=chat_template, check_template=check_template,
        )
        kwargs = dict(chat_template_kwargs or {})
        for key, value in config.template_kwargs.items():
            if key in kwargs and kwargs[key] != value:
                raise FamilyError(
                    f"chat template kwarg {key}={kwargs[key]!r} conflicts with the value registered for family "
                    f"{config.name!r}: {value!r}, which it needs to render append-only"
                )
            kwargs[key] = value
        #: Notes on choices made for this tokenizer (a narrowed role set, ...), for reports.
        self.notes: list[str] = []
        #: DeepSeek's encoder module and where it came from, for families that render with one.
        self.deepseek: Encoder | None = None
        roles = config.allowed_roles
        if config.deepseek:
            self.deepseek = find_encoder(tokenizer, config.deepseek, encoder_path, trust_encoder=trust_encoder)
            if self.deepseek is None:
                raise FamilyError(not_found_message(config.name, config.deepseek, folder_copies(tokenizer, config.deepseek)))
            # The effective thinking mode, made explicit as the reference does (the engine forwards it).
            kwargs["thinking"] = thinking_mode(kwargs) == "thinking"
            if not self.deepseek.keeps_history_reasoning and "user" in roles:
                roles = roles - {"user"}
                self.notes.append(
                    f"the DeepSeek encoder ({self.deepseek.origin}) drops the reasoning of assistant turns "
                    f"before the last user message even with drop_thinking=False, so appending a user turn is not "
                    f"append-only: allowed roles narrowed to {sorted(roles)} (Miles' vendored copy keeps it)"
                )
        self.chat_template_kwargs: dict[str, Any] = kwargs
        self.tool_policy: ToolPolicy = tool_policy
        self.matcher = matcher
        if backend not in BACKENDS:
            raise FamilyError(f"backend must be one of {BACKENDS}, got {backend!r}")
        self.backend: Backend = backend
        if allowed_append_roles is not None:
            requested = frozenset(allowed_append_roles)
            if requested - ALL_ROLES:
                raise FamilyError(f"allowed_append_roles has unknown roles {sorted(requested - ALL_ROLES)}; known: {sorted(ALL_ROLES)}")
            if requested - roles:
                raise FamilyError(
                    f"family {config.name!r} cannot append {sorted(requested - roles)} append-only with this "
                    f"template; allowed_append_roles must be a subset of {sorted(roles)}"
                )
            roles = requested
        self.allowed_append_roles: frozenset[str] = roles
        facts = family_facts(tokenizer, config)
        self.max_trim_tokens: int = facts.max_trim_tokens
        self.assistant_start_str: str | None = assistant_start_str if assistant_start_str is not None else facts.assistant_start_str
        self.trailing_token_ids: frozenset[int] = facts.trailing_token_ids
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
        self.special_token_ids: set[int] | None = facts.special_token_ids
        # A transformers fast tokenizer encodes exactly as its backend does
        # unless it splits special tokens itself.
        rust_tok = backend_of(tokenizer)
        plain = not getattr(tokenizer, "split_special_tokens", False)
        self._rust_tokenizer: Any = rust_tok if rust_tok is not None and plain and hasattr(rust_tok, "encode") else None
        self._fast_encode = fast_encode and self._rust_tokenizer is not None
        self._fast_encoder: FastEncoder | None = None
        self._base_cache: OrderedDict[str, str] = OrderedDict()
        self._cache_lock = threading.Lock()
        self._base_cache_size = base_cache_size
        self.renders = 0  # how many templates this object rendered (cache effect, for tests and benches)
        self.chat_template: str | None = None
        #: Which template renders for this family and why (see `_choose_template`).
        self.template_source: str = ""
        explicit = chat_template if chat_template is not None else config.chat_template
        self.chat_template, self.template_source = self._choose_template(explicit, check_template)

    # -- which template ----------------------------------------------------

    def _choose_template(self, explicit: str | None, check: bool) -> tuple[str | None, str]:
        """The template this family renders with (None: the tokenizer's own) and a note on why.

        In order: DeepSeek's encoder (no template); a template given by the
        caller (checked append-only unless it is a known fixed template or the
        family is `default`); for a family without a fixed template, the
        tokenizer's own template (with the family's declared edits, if any);
        for one with a fixed template (Miles' `*_fixed.jinja`): the tokenizer's
        own template when it is that file or passes a short canned replay, else
        the fixed template from an installed package (`tito_fast.chat.templates`),
        else tito_fast's edit of the stock template (which renders the same
        text), else `TemplateNotAppendOnlyError`.
        """
        c = self.config
        if self.deepseek is not None:
            drops = "" if self.deepseek.keeps_history_reasoning else (
                "; it drops the reasoning of turns before the last user message, unlike Miles' vendored copy"
            )
            return None, f"DeepSeek's encoder ({self.deepseek.origin}{drops})"
        fixed_name = FIXED_TEMPLATES.get(c.name)
        checks = check and c.name != "default" and self.tokenizer is not None  # a check renders and encodes
        if explicit is not None:
            known = identify(explicit)
            if known is not None:
                return explicit, f"the chat_template argument (Miles' {known})"
            if checks:
                self._require_append_only(explicit, "the chat_template argument", fixed_name)
                return explicit, "the chat_template argument (append-only: checked)"
            return explicit, "the chat_template argument"
        if self.tokenizer is None:
            return explicit, ("the chat_template argument (not checked: no tokenizer)" if explicit is not None else "none yet (no tokenizer)")
        if fixed_name is None:
            if c.template_patches:
                return patch_template(_own_template(self.tokenizer, c.name), c.template_patches, c.name), (
                    "the tokenizer's template with the family's edits"
                )
            return None, "the tokenizer's own template"
        own = _template_or_none(self.tokenizer)
        failure: tuple[int | None, str] | None = None
        if own is not None:
            if identify(own) == fixed_name:
                return None, f"the tokenizer's template (Miles' {fixed_name})"
            if checks:
                failure = self._replay_check(own)
                if failure is None:
                    return None, "the tokenizer's own template (append-only: checked)"
        fixed = find_fixed_template(c.name)
        if fixed is not None:
            return fixed.text, f"Miles' fixed template ({fixed.origin})"
        if own is not None and c.template_patches:
            try:
                patched = patch_template(own, c.template_patches, c.name)
            except FamilyError:
                patched = None
            if patched is not None and (not checks or self._replay_check(patched) is None):
                return patched, f"the tokenizer's template with tito_fast's edit (renders as Miles' {fixed_name}; miles-tito-tokenizers is not installed)"
        if not checks and own is not None:
            return None, "the tokenizer's own template (not checked)"
        self._raise_not_append_only("the tokenizer's own template" if own is not None else "no template", fixed_name, failure)
        raise AssertionError("unreachable")

    def _require_append_only(self, template: str, source: str, fixed_name: str | None) -> None:
        failure = self._replay_check(template)
        if failure is not None:
            self._raise_not_append_only(source, fixed_name, failure)

    def _raise_not_append_only(self, source: str, fixed_name: str | None, failure: tuple[int | None, str] | None) -> None:
        at, detail = failure if failure is not None else (None, "the tokenizer has no chat template")
        where = f"the merged ids depart from the full render at id {at}: {detail}" if at is not None else detail
        advice = (
            f"install miles-tito-tokenizers (pip install 'tito_fast[miles]') to render with Miles' {fixed_name}, or "
            if fixed_name
            else ""
        )
        raise TemplateNotAppendOnlyError(
            f"family {self.family!r}: {source} does not render append-only with kwargs {self.chat_template_kwargs} "
            f"(a short canned replay, roles {sorted(self.allowed_append_roles)}: {where}); {advice}pass "
            f"chat_template= (--template FILE) with an append-only template for this model",
            family=self.family,
            source=source,
            divergence=at,
            detail=detail,
        )

    def _replay_check(self, template: str) -> tuple[int | None, str] | None:
        """Replay the canned conversations with `template`; None when none of them
        fails (retokenized seams and turns no engine could produce do not count),
        else (first differing id or None, what differs). The verdict is kept
        with the tokenizer's tables (`tokenizer.cache`) under everything it
        depends on, and read from there when the tokenizer's digest is at hand
        (a `SnapshotTokenizer`'s): a known template is not probed again."""
        name = self._replay_key(template)
        if name is not None:
            got = table_cache.load(name)
            if got is not None:
                try:
                    kept = json.loads(table_cache.array_text(got["verdict"]))
                    return None if kept is None else (kept[0], str(kept[1]))
                except (KeyError, ValueError, TypeError, IndexError, UnicodeDecodeError):
                    pass  # another layout: replay again
        verdict = self._replay(template)
        if name is not None:
            table_cache.store(name, {"verdict": table_cache.text_array(json.dumps(verdict))})
        return verdict

    def _replay_key(self, template: str) -> str | None:
        """The name of `_replay_check`'s kept verdict for `template`, or None when the tokenizer's digest is not at hand."""
        backend = backend_of(self.tokenizer)
        digest = table_cache.known_digest(backend) if backend is not None else None
        if digest is None or not isinstance(self.matcher, str):
            return None  # no digest at hand, or a matcher given as a function: nothing to key the verdict by

        def plain(o: Any) -> Any:  # sets in order: their repr changes with the interpreter's hash seed
            if isinstance(o, (set, frozenset)):
                return sorted(o, key=repr)
            if isinstance(o, Mapping):
                return dict(o)
            raise TypeError(type(o).__name__)

        try:
            config = json.dumps(dataclasses.asdict(self.config), sort_keys=True, default=plain)
            variables = json.dumps(self.template_variables, sort_keys=True, default=plain)  # kwargs and special tokens
        except (TypeError, ValueError):
            return None
        what = (hashlib.sha256(template.encode("utf-8")).hexdigest(), config, variables, sorted(self.allowed_append_roles),
                self.tool_policy, self.backend, self.matcher, kind(self.tokenizer), decode_settings(self.tokenizer),
                sorted(special_ids(self.tokenizer)))  # fmt: skip
        return table_cache.key("replay", digest, *what)

    def _replay(self, template: str) -> tuple[int | None, str] | None:
        """`_replay_check` without its kept verdicts."""
        trial = self._with_template(template)
        skipped = ""
        judged = 0
        for messages in canned_conversations(self.allowed_append_roles, thinking_on(self.chat_template_kwargs)):
            outcome = trial.check_replay(messages, CANNED_TOOLS)
            if outcome.status == "fail":
                where = (
                    f"full render {outcome.expected_text!r}, merged {outcome.actual_text!r}"
                    if outcome.divergence is not None
                    else outcome.detail
                )
                return outcome.divergence, where
            if outcome.status == "skip":
                skipped = skipped or outcome.detail
            else:
                judged += 1
        return None if judged else (None, f"no canned conversation could be replayed ({skipped})")

    def _with_template(self, template: str) -> TitoTokenizer:
        """A trial copy of this family rendering `template`, encoding with the
        tokenizer's own encode (no encoder built for a trial), with caches of
        its own: this object is never changed by a trial."""
        trial = copy.copy(self)
        trial.__dict__.update(
            chat_template=template, _fast_encode=False, _fast_encoder=None, _base_cache=OrderedDict(), _cache_lock=threading.Lock(), renders=0
        )
        return trial

    def clone_with_chat_template_kwargs(self, request_kwargs: Mapping[str, Any]) -> TitoTokenizer:
        """A copy of this family with a request's template kwargs on top of its own;
        for DeepSeek families a request naming the thinking mode in any spelling
        (`thinking_mode`, `enable_thinking`, `thinking`) replaces all of them.

        Example:
            >>> v4 = get_tito_tokenizer(tok, "deepseekv4", {"enable_thinking": False})  # doctest: +SKIP
            >>> v4.clone_with_chat_template_kwargs({"thinking": True}).chat_template_kwargs  # doctest: +SKIP
            {'drop_thinking': False, 'thinking': True}
        """
        if self.deepseek is not None:
            merged = merge_thinking_kwargs(self.chat_template_kwargs, dict(request_kwargs))
        else:
            merged = {**self.chat_template_kwargs, **request_kwargs}
        options = dict(self._options)
        if options["chat_template"] is None and self.chat_template is not None:
            options["chat_template"], options["check_template"] = self.chat_template, False  # already chosen
        return TitoTokenizer(self.tokenizer, self.config, merged, **options)


    # -- rendering -------------------------------------------------------

    def apply_chat_template(
        self, messages: list[dict[str, Any]], *, add_generation_prompt: bool, tools: list[dict[str, Any]] | None = None
    ) -> str:
        """The family's render of `messages` (text)."""
        self._need_tokenizer("apply_chat_template (rendering the chat template)")
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
            deepseek=self.deepseek,
            **self.chat_template_kwargs,
        )

    @property
    def renderer_note(self) -> str:
        """What renders this family's templates, in words (for reports and the CLI)."""
        if self.deepseek is not None:
            return f"DeepSeek's encoder module ({self.deepseek.origin})"
        if self.backend == "hf":
            return "the tokenizer's apply_chat_template (transformers)"
        if self.backend == "jinja":
            return "jinja2 (tito_fast's environment)"
        native = self.native_renderer()
        if native is not None and native.reason is None:
            return "native (Rust, minijinja)"
        return f"jinja2, not native: {native.reason if native is not None else '?'}"

    @property
    def template_variables(self) -> dict[str, Any]:
        """The variables a render hands the template besides the conversation:
        the tokenizer's special tokens and the family's template kwargs."""
        return {**special_tokens(self.tokenizer), **self.chat_template_kwargs}

    def native_renderer(self) -> NativeRenderer | None:
        """The family's template on the native renderer (what the "native"
        backend renders with), or None when the family renders otherwise
        (DeepSeek's encoder module, the "hf" or "jinja" backend)."""
        if self.deepseek is not None or self.backend != "native":
            return None
        self._need_tokenizer("native_renderer (the template's special-token variables)")
        template = self.chat_template if self.chat_template is not None else template_of(self.tokenizer)
        return native_renderer(template, self.template_variables, "drop")

    @property
    def fast_encoder(self) -> FastEncoder | None:
        """The exact Rust encoder of the tokenizer (`tito_fast.tokenizer.encoder`), built on
        first use; None when turned off or the tokenizer is not a fast one."""
        if self._fast_encode and self._fast_encoder is None:
            self._fast_encoder = FastEncoder.for_tokenizer(self.tokenizer)
        return self._fast_encoder

    def encode(self, text: str) -> list[int]:
        """`tokenizer.encode(text, add_special_tokens=False)`: by `fast_encoder`
        when it covers the tokenizer (same ids, several times faster), else by
        the Rust tokenizer directly when the tokenizer is a fast one (same ids,
        without the batch machinery)."""
        self._need_tokenizer("encode")
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
        key = json.dumps([calls, tools], default=repr)  # key order counts: tojson writes it
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
        return self.incremental_ids(old_messages, new_messages, tools)

    def incremental_ids(
        self, old_messages: list[dict[str, Any]], new_messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> list[int]:
        """`tokenize_additional_messages` without the append-only check, for a caller
        that has checked the history already (`Trajectory` does while it looks for retries)."""
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

    # -- replay: the ids a rollout accumulates -----------------------------

    def completion_ids(
        self,
        history: list[dict[str, Any]],
        reply: dict[str, Any],
        tools: list[dict[str, Any]] | None = None,
        opener: str | None = None,
    ) -> list[int]:
        """The ids a model generates for `reply` after `history`: the template's render
        of that turn, less the trailing ids it does not generate (the whitespace the
        template puts after its end token). `opener` is the render of `history` with
        the generation prompt, when the caller has it already.

        Raises `TurnNotProducibleError` (a `ValueError`) when the generation prompt
        is not how the template renders the turn that follows it.
        """
        if opener is None:
            opener = self.apply_chat_template(history, add_generation_prompt=True, tools=tools)
        rendered = self.apply_chat_template(history + [reply], add_generation_prompt=False, tools=tools)
        if not rendered.startswith(opener):
            at = next((i for i, (x, y) in enumerate(zip(opener, rendered)) if x != y), len(opener))
            raise TurnNotProducibleError(
                f"message {len(history)}: the generation prompt is not how the template renders the assistant turn "
                f"({opener[at:at + 30]!r} vs {rendered[at:at + 30]!r}), so no engine produced this turn with these kwargs"
            )
        ids = self.encode(rendered[len(opener) :])
        while ids and ids[-1] in self.trailing_token_ids and not self.tokenizer.decode(ids[-1:]).strip():
            ids.pop()
        return ids

    def replay(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> tuple[list[int], int]:
        """The ids a rollout of `messages` accumulates with this family (the first
        prompt rendered, each completion the template's render of the assistant
        turn, each later prompt from `merge_tokens`), and its number of turns.

        Raises the family's errors (`AppendOnlyError`, `RenderDiffError`,
        `RenderError`) and `ValueError` when the template's generation prompt
        is not how it renders the assistant turn that follows.
        """
        stored: list[int] | None = None
        prev_end = 0
        turns = 0
        for k, msg in enumerate(messages):
            if msg.get("role") != "assistant" or k == 0:
                continue
            history = messages[:k]
            opener = self.apply_chat_template(history, add_generation_prompt=True, tools=tools)
            if stored is None:
                prompt = self.encode(opener)  # the first prompt is the render itself
            else:
                prompt = self.merge_tokens(messages[:prev_end], history, stored, tools)
            stored = prompt + self.completion_ids(history, msg, tools, opener)
            prev_end = k + 1
            turns += 1
        if stored is None:
            raise ValueError("the conversation has no assistant turn after the first message")
        return stored, turns

    def check_replay(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> ReplayOutcome:
        """Replay `messages` (`replay`) and compare the ids with the full render (after the family's trailing trims)."""
        try:
            expected = self.render_ids(messages, tools)
        except RenderError as e:
            return ReplayOutcome("skip", detail=f"the template cannot render it: {e}")
        try:
            actual, turns = self.replay(messages, tools)
        except TemplateLimitError:  # a limit is the template's verdict, never a replay failure
            raise
        except TurnNotProducibleError as e:
            return ReplayOutcome("skip", detail=str(e))
        except (AppendOnlyError, RenderDiffError, RenderError, ValueError) as e:
            return ReplayOutcome("fail", detail=f"{type(e).__name__}: {e}")
        e_ids, a_ids = trim_trailing(expected, self.trailing_token_ids), trim_trailing(actual, self.trailing_token_ids)
        if e_ids == a_ids:
            return ReplayOutcome("pass", turns)
        at = common_prefix_len(e_ids, a_ids)
        dec = self.tokenizer.decode
        out = ReplayOutcome(
            "fail",
            turns,
            divergence=at,
            expected_text=dec(e_ids[max(0, at - 8) : at + 12], skip_special_tokens=False),
            actual_text=dec(a_ids[max(0, at - 8) : at + 12], skip_special_tokens=False),
            expected_ids=expected,
            actual_ids=actual,
        )
        if dec(e_ids, skip_special_tokens=False) == dec(a_ids, skip_special_tokens=False):
            out.status, out.detail = "retokenized", f"the same text, tokenized apart from id {at}"
        else:
            out.detail = "merged ids differ from the full render"
        return out

    def create_comparator(self) -> Any:
        """A `TokenSeqComparator` with this family's assistant start, boundary ids and trims."""
        self._need_tokenizer("create_comparator (the comparator decodes segments and finds special ids)")
        return TokenSeqComparator(
            self.tokenizer,
            self.assistant_start_str,
            special_token_ids=self.special_token_ids,
            trim_trailing_ids=self.trailing_token_ids or None,
        )

    def _need_tokenizer(self, what: str) -> None:
        if self.tokenizer is None:
            raise FamilyError(
                f"{what} needs a tokenizer: this TitoTokenizer (family {self.family!r}) was built with tokenizer=None, "
                "a stand-in as Miles' TITOTokenizer allows; build it with the model's tokenizer"
            )

    def __repr__(self) -> str:
        return f"TitoTokenizer(family={self.family!r}, kwargs={self.chat_template_kwargs!r})"


def _check_buildable_without_tokenizer(config: FamilyConfig) -> None:
    """`TitoTokenizer(None, config)` builds a stand-in (Miles' base `TITOTokenizer(tokenizer=None)`
    does: tests mock its methods) unless the family needs the tokenizer to be built: token ids
    its seam rule, trims or boundary set name, or DeepSeek's encoder found next to it."""
    needs = []
    if config.deepseek:
        needs.append(f"DeepSeek's encoder module ({config.deepseek}), looked up with the tokenizer")
    if config.append_after:
        needs.append(f"the seam rule's ids (append {config.append_after[1]!r} after {config.append_after[0]!r})")
    if config.drop_last_if_in:
        needs.append(f"the seam rule's ids (drop a last {' or '.join(map(repr, config.drop_last_if_in))})")
    if config.trailing:
        needs.append(f"the trailing-trim ids ({', '.join(map(repr, config.trailing))})")
    if config.boundary != "auto" or config.boundary_exclude:
        needs.append("the comparator's boundary ids")
    if needs:
        raise FamilyError(
            f"tokenizer is None, but family {config.name!r} needs a tokenizer to be built: {'; '.join(needs)} "
            "(Miles' family classes fail the same way; only the base family builds a tokenizer-less stand-in)"
        )


def get_tito_tokenizer(
    tokenizer: Any,
    family: str | FamilyConfig | Mapping[str, Any] | None = None,
    chat_template_kwargs: Mapping[str, Any] | None = None,
    assistant_start_str: str | None = None,
    allowed_append_roles: Collection[str] | None = None,
    *,
    tokenizer_type: str | None = None,
    **options: Any,
) -> TitoTokenizer:
    """A family bound to `tokenizer`; the same call as the reference's
    `get_tito_tokenizer` (and `miles-tito-tokenizers`').

    The family renders with Miles' fixed chat template where Miles registers
    one: the tokenizer's own template when it is that template or renders
    append-only (checked by a short canned replay), else the file from an
    installed `miles` or `miles-tito-tokenizers` package, else tito_fast's
    edit of the stock template; `tito.template_source` says which.

    Args:
        tokenizer: a transformers tokenizer (template included); None raises `FamilyError`
            (a `ValueError`), as the reference's does.
        family: a name in `FAMILIES` (`tokenizer_type=` is the reference's
            name for it), a `FamilyConfig`, or a dict for
            `FamilyConfig.from_dict` (a format nobody ships). Default "default".
        chat_template_kwargs: extra template kwargs; a value that conflicts
            with one the family pins is an error.
        assistant_start_str: overrides the family's (comparator labels).
        allowed_append_roles: a subset of the family's roles to allow.
        options: `tool_policy`, `matcher`, `fast_encode` (default True: encode
            with `tito_fast.tokenizer.encoder.FastEncoder` where it covers the
            tokenizer), `encoder_path` (DeepSeek V3.2/V4's encoder module;
            found where users have it otherwise, see `tito_fast.chat.deepseek`),
            `backend` ("native", the default: the Rust renderer, which renders
            with jinja2 whatever it cannot render exactly; "hf": the
            tokenizer's `apply_chat_template`; "jinja": our jinja2
            environment; all give the same text), `chat_template` (a template
            text replacing the tokenizer's), `check_template` (default True:
            replay a short conversation to check a template that is not a
            known fixed one).

    Example:
        >>> tito = get_tito_tokenizer(tok, "glm47")  # doctest: +SKIP
        >>> tito.max_trim_tokens  # doctest: +SKIP
        1
    """
    if tokenizer is None:  # Miles' get_tito_tokenizer raises the same (its tests assert "must not be None")
        raise FamilyError(
            "tokenizer must not be None: get_tito_tokenizer binds a family to a tokenizer, as Miles' does; "
            "TitoTokenizer(None, family_config('default')) builds a tokenizer-less stand-in"
        )
    if tokenizer_type is not None:
        if family is not None and _family_name(family) != _family_name(tokenizer_type):
            raise FamilyError(f"family {_family_name(family)!r} and tokenizer_type {_family_name(tokenizer_type)!r} disagree; pass one")
        family = tokenizer_type
    config = family_config(family)
    return TitoTokenizer(
        tokenizer, config, chat_template_kwargs, assistant_start_str=assistant_start_str,
        allowed_append_roles=allowed_append_roles, **options,
    )


def family_config(family: str | FamilyConfig | Mapping[str, Any] | None) -> FamilyConfig:
    """The `FamilyConfig` of a family name (None: "default"), a config, or a dict of one."""
    if family is None:
        family = "default"
    if isinstance(family, FamilyConfig):
        return family
    if isinstance(family, Mapping):
        return FamilyConfig.from_dict(family)
    name = _family_name(family)
    try:
        return FAMILIES[name]
    except KeyError:
        raise FamilyError(f"unknown family {name!r}; known: {sorted(FAMILIES)}") from None


def resolve_parsers(
    family: str | FamilyConfig | Mapping[str, Any] | None,
    user_reasoning_parser: str | None = None,
    user_tool_call_parser: str | None = None,
) -> tuple[str | None, str | None]:
    """The SGLang `--reasoning-parser` and `--tool-call-parser` for a family
    (`FamilyConfig.reasoning_parser` / `.tool_call_parser`), each resolved on
    its own: a flag the user left out is the family's (None where the family
    declares none); a flag the user gave must be the family's when it
    declares one (else ValueError), and is taken as given when it declares
    none. (Miles' `resolve_reasoning_and_tool_call_parser`.)

    Example:
        >>> resolve_parsers("glm47")
        ('glm45', 'glm47')
    """
    config = family_config(family)

    def one(flag: str, declared: str | None, given: str | None) -> str | None:
        if given is None or declared is None:
            return declared if given is None else given
        if given != declared:
            raise ValueError(
                f"--{flag}={given!r} disagrees with family {config.name!r}, which declares {declared!r}: "
                f"pass {declared!r} or leave --{flag} out"
            )
        return given

    return (
        one("reasoning-parser", config.reasoning_parser, user_reasoning_parser),
        one("tool-call-parser", config.tool_call_parser, user_tool_call_parser),
    )


#: Miles' name for `resolve_parsers`.
resolve_reasoning_and_tool_call_parser = resolve_parsers


@dataclass(frozen=True)
class FamilyFacts:
    """What a family says of a tokenizer's ids, without rendering anything: the
    ids trimmed from both tails, how many may be trimmed from stored ids, the
    comparator's boundary ids (None: the tokenizer's special ids) and the
    assistant start. `TitoTokenizer` takes these from here; so does
    `tito_fast.assemble`, which needs no template for them.

    Example:
        >>> family_facts(tok, "glm47").max_trim_tokens  # doctest: +SKIP
        1
    """

    family: str
    trailing_token_ids: frozenset[int]
    max_trim_tokens: int
    special_token_ids: set[int] | None
    assistant_start_str: str | None

    def create_comparator(self, tokenizer: Any) -> Any:
        """A `TokenSeqComparator` with these boundary ids, trims and assistant start."""
        return TokenSeqComparator(
            tokenizer, self.assistant_start_str, special_token_ids=self.special_token_ids,
            trim_trailing_ids=self.trailing_token_ids or None,
        )  # fmt: skip


def family_facts(tokenizer: Any, family: str | FamilyConfig | Mapping[str, Any] | None) -> FamilyFacts:
    """The `FamilyFacts` of `family` for `tokenizer` (raises `FamilyError` when a
    token the family names is not one token of this tokenizer)."""
    c = family_config(family)
    if c.boundary == "auto":
        boundary: set[int] | None = None  # the comparator detects them
        if c.boundary_exclude:
            auto = TokenSeqComparator.collect_special_ids(tokenizer)
            boundary = auto - {_single_id(tokenizer, t, f"family {c.name} boundary_exclude") for t in c.boundary_exclude}
    else:
        boundary = {_single_id(tokenizer, t, f"family {c.name} boundary") for t in c.boundary}
    trailing = frozenset(_single_id(tokenizer, t, f"family {c.name} trailing") for t in c.trailing)
    return FamilyFacts(c.name, trailing, c.max_trim_tokens, boundary, c.assistant_start_str)


def _family_name(family: Any) -> str:
    """A family name from a string or an enum member (the reference's `TITOTokenizerType`)."""
    value = getattr(family, "value", family)
    return value if isinstance(value, str) else str(value)


__all__ = [
    "FAMILIES",
    "FamilyConfig",
    "FamilyFacts",
    "resolve_parsers",
    "resolve_reasoning_and_tool_call_parser",
    "FamilyError",
    "RenderDiffError",
    "ReplayOutcome",
    "TemplateNotAppendOnlyError",
    "TitoTokenizer",
    "TurnNotProducibleError",
    "family_config",
    "family_facts",
    "get_tito_tokenizer",
    "patch_template",
    "thinking_on",
]

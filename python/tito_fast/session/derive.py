"""A TITO family derived from a tokenizer and its chat template alone
(`tito_fast.derive_family`, `tito-fast verify-template --derive OUT.json`).

The template is probed with the verifier's message shapes, never guessed
from its name:

- **the seam**: what the template writes after an assistant message's
  content. A stop token the model generates (the tokenizer's EOS) followed
  by one more id (Qwen's `<|im_end|>` then `\\n`) gives `append_after` and
  `trailing`; nothing at all (GLM: the next message's opener ends the turn,
  so the model stops on it) gives `drop_last_if_in` and `trailing` from the
  openers of a user and a tool message, and `max_trim_tokens=1`;
- **the assistant start**: the generation prompt's opener and role name;
- **the template kwargs** under which the render is append-only: the
  template's own variables that name thinking (`clear_thinking`,
  `preserve_thinking`, `truncate_history_thinking`, ...) are tried with
  both values, and the setting under which most replays pass is kept;
- **the roles** that may be appended after an assistant turn: a role set
  whose replays fail while a smaller one passes is left out (a template that
  refuses a later system message);
- **a known fix**: a template that still breaks and is a published one
  tito_fast knows the edits for (Qwen3, MiniMax, ...) is patched, and the
  declaration carries the patched template.

Then the verifier replays every shape with the declaration: it holds (exit
0) or it names the shapes that break and what would fix them (exit 1). The
declaration is plain `FamilyConfig` data, usable as `--family OUT.json`.

Example:
    >>> d = derive_family(tok)  # doctest: +SKIP
    >>> d.holds, d.config.append_after  # doctest: +SKIP
    (True, ('<|im_end|>', '\\n'))
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from tito_fast.chat.identify import family_of_template
from tito_fast.chat.presets import ALL_ROLES, FAMILIES, TOOL_CALL_IDS, CallIds, FamilyConfig, patch_template
from tito_fast.chat.render import render, template_of
from tito_fast.errors import FamilyError, RenderError
from tito_fast.session.verify import ROLE_SETS, Result, call_id, for_template, verify_family
from tito_fast.tokenizer.backend import special_ids

#: A message content no template writes on its own: where it lands marks the message.
_MARK = "ZQXJ"
_BASE: list[dict[str, Any]] = [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
#: For a template that refuses a system message (Gemma).
_BASE_NO_SYSTEM: list[dict[str, Any]] = [{"role": "user", "content": "U"}]
_TOOL_CALL = {"id": "call_0", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}


@dataclass
class Derivation:
    """A derived family: the declaration (`config`), whether TITO holds with
    it (`holds`: every replay the family allows passes), what was found, in
    words (`steps`), the replays (`results`) and, when it does not hold,
    which shapes break and what would fix them (`fix`)."""

    config: FamilyConfig
    holds: bool
    template_source: str
    steps: list[str] = field(default_factory=list)
    results: list[Result] = field(default_factory=list)
    fix: str = ""

    def declaration(self) -> dict[str, Any]:
        """The declaration as plain JSON data (`FamilyConfig.from_dict` reads it back)."""
        d = asdict(self.config)
        d["allowed_roles"] = sorted(self.config.allowed_roles)
        d["template_kwargs"] = dict(self.config.template_kwargs)
        for key in ("append_after", "drop_last_if_in", "trailing", "boundary", "boundary_exclude", "template_patches"):
            if isinstance(d.get(key), tuple):
                d[key] = list(d[key])
        defaults = asdict(FamilyConfig(self.config.name))
        defaults["allowed_roles"] = sorted(ALL_ROLES)
        # only what differs from a plain family, so the file reads as the family's rules
        return {k: v for k, v in d.items() if k == "name" or v != (list(defaults[k]) if isinstance(defaults[k], tuple) else defaults[k])}


class _NoSeam(Exception):
    """The template's renders cannot be joined turn by turn: what it writes, in words."""


def _tokens(tokenizer: Any, text: str) -> list[str]:
    return [str(t) for t in tokenizer.convert_ids_to_tokens(tokenizer.encode(text, add_special_tokens=False))]


def _special(tokenizer: Any, added: bool = False) -> set[str]:
    """The special tokens, as `special_ids` finds them (with `added`: every
    added token too, `<think>` as well)."""
    names = {str(t) for t in tokenizer.convert_ids_to_tokens(sorted(special_ids(tokenizer)))}
    if added and hasattr(tokenizer, "get_added_vocab"):
        names |= set(tokenizer.get_added_vocab())
    return names


def _render(tokenizer: Any, template: str, messages: list[dict[str, Any]], kwargs: Mapping[str, Any], gen: bool = False) -> str:
    return render(tokenizer, messages, chat_template=template, add_generation_prompt=gen, **dict(kwargs))


def _probe(tokenizer: Any, template: str, messages: list[dict[str, Any]], kwargs: Mapping[str, Any], gen: bool = False) -> str:
    """A render the seam is read from: a template that refuses it cannot be joined turn by turn."""
    try:
        return _render(tokenizer, template, messages, kwargs, gen)
    except RenderError as e:
        roles = ", ".join(m["role"] for m in messages)
        raise _NoSeam(f"the template refuses the messages [{roles}]: {e}") from None


def _after(tokenizer: Any, template: str, kwargs: Mapping[str, Any], before: list[dict[str, Any]], message: dict[str, Any]) -> str:
    """What the template writes for `message` after `before` (the render's new text)."""
    a = _probe(tokenizer, template, before, kwargs)
    b = _probe(tokenizer, template, before + [message], kwargs)
    if not b.startswith(a):
        raise _NoSeam(f"the template re-renders earlier messages when a {message['role']} message is appended")
    return b[len(a) :]


def _base(tokenizer: Any, template: str, kwargs: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The opening messages of the probes: a system message and a user one, or
    the user one alone when the template refuses a system message."""
    try:
        _render(tokenizer, template, _BASE, kwargs)
        return _BASE
    except RenderError:
        return _BASE_NO_SYSTEM


def _seam(tokenizer: Any, template: str, kwargs: Mapping[str, Any], base: list[dict[str, Any]], steps: list[str]) -> dict[str, Any]:
    """The seam rule: what follows a completion in the template (probed after `base`, `_base`)."""
    full = _probe(tokenizer, template, base + [{"role": "assistant", "content": _MARK}], kwargs)
    if _MARK not in full:
        raise _NoSeam("the template does not render an assistant message's content")
    after = full[full.rindex(_MARK) + len(_MARK) :]
    # The turn's end as the last message and once a message follows it: a
    # terminator that changes (Harmony's <|return|> becomes <|end|>) no seam
    # rule can join. (A change before it, in reasoning or content, is for the
    # kwargs and known edits below to fix, and for the verifier to show.)
    followed = _probe(tokenizer, template, base + [{"role": "assistant", "content": _MARK}, {"role": "user", "content": "V"}], kwargs)
    if _MARK in followed:
        later = followed[followed.index(_MARK) + len(_MARK) :]
        if not later.startswith(after):
            raise _NoSeam(
                f"an assistant turn ends otherwise once a message follows it: {after!r} as the last message, "
                f"{later[: len(after) + 8]!r} before a user message"
            )
    eos = getattr(tokenizer, "eos_token", None)
    special = _special(tokenizer)
    if not after:
        # The next message's opener ends the turn: the model stops on it.
        # (replies with reasoning: a template may drop an empty reasoning wrapper from history)
        reply = {"role": "assistant", "content": _MARK, "reasoning_content": "r"}
        user_text = _after(tokenizer, template, kwargs, base + [reply], {"role": "user", "content": "V"})
        call = {"role": "assistant", "content": "", "reasoning_content": "r", "tool_calls": [_TOOL_CALL]}
        tool_text = _after(tokenizer, template, kwargs, base + [call], {"role": "tool", "tool_call_id": "call_0", "content": "R"})
        openers = []
        for role, text in (("user", user_text), ("tool", tool_text)):
            first = _tokens(tokenizer, text)[:1]
            if not first or first[0] not in special:
                raise _NoSeam(f"nothing follows an assistant message, and a {role} message does not open with a special token")
            openers.append(first[0])
        opened = tuple(sorted(set(openers)))
        steps.append(f"nothing follows an assistant message: the model stops on the next message's opener {list(opened)}, trimmed from stored ids")
        return {"drop_last_if_in": opened, "trailing": opened, "max_trim_tokens": 1}
    toks = _tokens(tokenizer, after)
    stop = toks[0]
    if stop not in special:
        raise _NoSeam(f"after an assistant message the template writes {after!r}, which does not open with a special token")
    if eos is not None and stop != eos:
        steps.append(f"an assistant message ends with {stop!r} (the tokenizer's EOS is {eos!r}): taken as the stop token")
    rest = after[len(stop) :] if after.startswith(stop) else "".join(toks[1:])
    if not rest:
        steps.append(f"an assistant message ends with the stop token {stop!r}: the next message follows it directly")
        return {}
    if len(toks) != 2:
        raise _NoSeam(f"after the stop token {stop!r} the template writes {rest!r} ({len(toks) - 1} ids); a seam rule appends one id")
    steps.append(f"an assistant message ends with {stop!r} then {rest!r}: {rest!r} is appended to stored ids that end with {stop!r}")
    return {"append_after": (stop, rest), "trailing": (rest,)}


def _assistant_start(tokenizer: Any, template: str, kwargs: Mapping[str, Any], base: list[dict[str, Any]]) -> str | None:
    """The generation prompt's opener and role name (where assistant content starts)."""
    plain = _probe(tokenizer, template, base, kwargs)
    gen = _probe(tokenizer, template, base, kwargs, gen=True)
    if not gen.startswith(plain) or gen == plain:
        return None
    prompt = gen[len(plain) :]
    special = _special(tokenizer, added=True)
    out = ""
    for t in _tokens(tokenizer, prompt):
        text = tokenizer.convert_tokens_to_string([t]) if t not in special else t
        if out and (t in special or "\n" in text):
            break
        out += text
    return out.rstrip() or None


def _thinking_variables(template: str) -> list[str]:
    """The template's own variables that name thinking, other than enable_thinking."""
    from tito_fast import _deps

    jinja2 = _deps.jinja2()
    try:
        names = jinja2.meta.find_undeclared_variables(jinja2.Environment().parse(template))
    except jinja2.TemplateError:
        return []
    return sorted(n for n in names if "think" in n and n != "enable_thinking")


def _replay(tokenizer: Any, template: str, config: FamilyConfig) -> list[Result]:
    """The verifier's replays under `config` (thinking on and off when the template reads `enable_thinking`)."""
    text = config.chat_template or template
    subject = for_template(tokenizer, config, None, template=text, template_label="the template")
    return verify_family(subject.tito, thinking="both" if "enable_thinking" in text else "as-given")


def _call_ids(tokenizer: Any, template: str, kwargs: Mapping[str, Any], base: list[dict[str, Any]]) -> CallIds:
    """The form of tool-call ids the template renders (`FamilyConfig.tool_call_ids`): the first that renders."""
    for form in TOOL_CALL_IDS:
        call = {"id": call_id(form, "f", 0), "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
        messages = base + [
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": call["id"], "content": "R"},
        ]
        try:
            _render(tokenizer, template, messages, kwargs)
            return form
        except RenderError:
            continue
    return "call"


def _refused(r: Result) -> bool:
    """A conversation the template refuses to render at all (it raises): no
    engine produced it, so it says nothing of the seam."""
    return not r.ok and r.divergence is None and (r.error.startswith("RenderError") or r.skipped.startswith("the template cannot render it"))


def _broken(results: list[Result]) -> list[Result]:
    """The replays that diverge or fail for another reason than a refusal."""
    return [r for r in results if not r.ok and not r.skipped and not _refused(r)]


def _score(results: list[Result]) -> tuple[int, int]:
    return sum(r.ok for r in results), -len(_broken(results))


def _holds(results: list[Result]) -> bool:
    return any(r.ok for r in results) and not _broken(results)


def derive_family(
    tokenizer: Any, *, template: str | None = None, name: str = "derived", template_kwargs: Mapping[str, Any] | None = None
) -> Derivation:
    """Derive a family declaration from `tokenizer` and its chat template
    (or `template`), then verify it (see the module doc).

    Args:
        tokenizer: a transformers tokenizer.
        template: a chat template that replaces the tokenizer's own.
        name: the declared family's name.
        template_kwargs: kwargs every render gets (kept in the declaration);
            the thinking variables found are searched on top of them.

    Raises:
        FamilyError: no template to probe. (A template whose renders no seam
            rule joins is a `Derivation` that does not hold, saying what it writes.)
    """
    source = "the given template" if template is not None else "the tokenizer's own template"
    given = template
    if template is None:
        try:
            template = template_of(tokenizer)
        except RenderError as e:
            raise FamilyError(f"nothing to derive from: {e} (DeepSeek V3.2/V4 render with their encoder: --family deepseekv32 / deepseekv4)") from None
    fixed = dict(template_kwargs or {})
    # The thinking variables: each unset, False or True; the setting most replays pass under
    # (the seam is probed under each: a template may re-render history unless one is set).
    variables = [v for v in _thinking_variables(template) if v not in fixed][:3]
    best: tuple[tuple[int, int], FamilyConfig, list[Result], list[str]] | None = None
    refused: _NoSeam | None = None
    for values in itertools.product((None, False, True), repeat=len(variables)):
        kwargs = {**fixed, **{v: x for v, x in zip(variables, values) if x is not None}}
        found: list[str] = []
        try:
            base = _base(tokenizer, template, kwargs)  # the probes' opening messages, rendered once
            seam = _seam(tokenizer, template, kwargs, base, found)
        except _NoSeam as e:
            refused = refused or e
            continue
        start = _assistant_start(tokenizer, template, kwargs, base)
        if start:
            found.append(f"assistant content starts after {start!r}")
        ids = _call_ids(tokenizer, template, kwargs, base)
        if ids != "call":
            found.append(f"the template accepts tool-call ids in the {ids!r} form only")
        # a template given in place of the tokenizer's is part of the declaration (what was verified)
        config = FamilyConfig(
            name, assistant_start_str=start, template_kwargs=kwargs, tool_call_ids=ids, chat_template=given, **seam
        )  # fmt: skip
        results = _replay(tokenizer, template, config)
        if best is None or _score(results) > best[0]:
            best = (_score(results), config, results, found)
        if _holds(results):
            break
    if best is None:  # no setting gives a seam: TITO cannot hold, and this says why
        assert refused is not None
        why = f"TITO cannot hold with this template: {refused}"
        return Derivation(FamilyConfig(name, template_kwargs=fixed), False, source, [str(refused)], [], why)
    _, config, results, steps = best
    if variables:
        chosen = {k: v for k, v in config.template_kwargs.items() if k in variables}
        steps.append(f"the template's thinking variables {variables}: rendered with {chosen or 'none set'}")

    # A published template tito_fast knows the edits for.
    if not _holds(results):
        known = family_of_template(template)
        if known is not None and FAMILIES[known[0]].template_patches:
            family = FAMILIES[known[0]]
            try:
                patched = patch_template(template, family.template_patches, known[0])
            except FamilyError:
                patched = None
            if patched is not None:
                kwargs = {**config.template_kwargs, **family.template_kwargs}
                trial = FamilyConfig(**{**_fields(config), "chat_template": patched, "template_kwargs": kwargs})
                tried = _replay(tokenizer, patched, trial)
                if _score(tried) > _score(results):
                    steps.append(f"{known[1]}: not append-only as published; patched with family {known[0]!r}'s edits")
                    config, results = trial, tried
    # A later system message the template refuses (it raises where the same
    # conversation without it renders): system is left out of the roles.
    small, big = ROLE_SETS[1], ROLE_SETS[2]
    small_ok = {(r.name, r.thinking) for r in results if r.roles == small and r.ok}
    big_bad = [r for r in results if r.roles == big and not r.ok and (r.name, r.thinking) in small_ok]
    if big_bad and all(_refused(r) or (r.skipped and r.divergence is None) for r in big_bad):
        allowed = frozenset(config.allowed_roles - {"system"})
        config = FamilyConfig(**{**_fields(config), "allowed_roles": allowed})
        results = _replay(tokenizer, config.chat_template or template, config)
        steps.append(f"the template refuses a system message after an assistant turn: allowed roles {sorted(allowed)}")
    refusals = sorted({(r.error or r.skipped).split(": ")[-1] for r in results if _refused(r)})
    if refusals:
        steps.append(f"the template refuses {sum(_refused(r) for r in results)} of the verifier's conversations: {'; '.join(refusals[:3])}")
    holds = _holds(results)
    fix = "" if holds else _fix(results, config)
    return Derivation(config, holds, source, steps, results, fix)


def _fields(config: FamilyConfig) -> dict[str, Any]:
    return {k: getattr(config, k) for k in FamilyConfig.__dataclass_fields__}


def _fix(results: list[Result], config: FamilyConfig) -> str:
    broken = _broken(results)
    if not broken:
        reasons = sorted({r.skipped.split(", so ")[0] for r in results if r.skipped})
        return (
            f"TITO cannot be shown to hold with this template: none of the {len(results)} replays could run "
            f"({'; '.join(reasons[:3])}{'; ...' if len(reasons) > 3 else ''}). A template must render an assistant turn "
            "as the model generates it after the generation prompt, and render the verifier's message shapes"
        )
    shapes = sorted({f"{r.name} with roles {sorted(r.roles)}" for r in broken})
    first = broken[0] if broken else None
    where = ""
    if first is not None and first.divergence is not None:
        where = f"; first at id {first.divergence}: the full render has {first.expected_text!r} where the merge has {first.actual_text!r}"
    elif first is not None and first.error:
        where = f"; {first.error}"
    return (
        f"TITO cannot hold with this template: {len(broken)} replay(s) break ({'; '.join(shapes[:4])}{'; ...' if len(shapes) > 4 else ''}){where}. "
        "A template that re-renders earlier turns (dropping reasoning of earlier turns, changing how they end) must keep them "
        "as they were generated: give a fixed template (--template FILE) or the kwargs that keep history"
        + ("" if config.template_kwargs else " (the template names no thinking variable to set)")
    )

"""Plain-Python definitions of the kernels, written from the reference semantics.

These are deliberately the slow, obvious way (list slices, `zip` loops, a
full copy of the ids per checkpoint), as the reference framework does it.
They are the ground truth of the property tests and the baseline of the
benchmarks; nothing in the fast path calls them.

Example:
    >>> from tito_fast import reference
    >>> reference.common_prefix_len([1, 2, 3], [1, 2, 4])
    2
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

from tito_fast.compare.comparator import TokenSeqComparator


def common_prefix_len(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix, one element at a time.

    Example:
        >>> common_prefix_len([1, 2], [1, 2, 3])
        2
    """
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


@dataclass(frozen=True)
class PrefixFacts:
    """The facts a failed prefix check reports."""

    index: int
    matched: int
    checked_len: int
    stored_len: int
    new_len: int
    max_trim_tokens: int


def check_prefix(stored: Sequence[int], new: Sequence[int], *, max_trim_tokens: int = 0) -> PrefixFacts | None:
    """The token-level TITO check; returns the failure facts, or None when it passes.

    `stored`, less up to `max_trim_tokens` trailing ids, must equal the start
    of `new`. The first mismatch is the first differing index, or
    `min(len(new), checked_len)` when `new` ends inside the checked prefix.

    Example:
        >>> check_prefix([1, 2, 3], [1, 2, 3, 4]) is None
        True
        >>> check_prefix([1, 5, 3], [1, 2, 3]).index
        1
    """
    if not stored:
        return None
    check_len = len(stored) - max_trim_tokens
    if check_len <= 0 or list(new[:check_len]) == list(stored[:check_len]):
        return None
    first = next(
        (i for i, (x, y) in enumerate(zip(new[:check_len], stored[:check_len])) if x != y),
        min(len(new), check_len),
    )
    return PrefixFacts(first, first, check_len, len(stored), len(new), max_trim_tokens)


def trim_trailing(ids: Sequence[int], trim_ids: Collection[int]) -> list[int]:
    """Strip trailing ids found in `trim_ids`, repeatedly.

    Example:
        >>> trim_trailing([1, 2, 2], {2})
        [1]
    """
    out = list(ids)
    while out and out[-1] in trim_ids:
        out.pop()
    return out


def merge_tokens(
    prefix: Sequence[int],
    incremental: Sequence[int],
    *,
    append_after: tuple[int, int | Sequence[int]] | None = None,
    drop_last_if_in: Collection[int] | None = None,
) -> list[int]:
    """Prefix with the seam rule (drop first, then append), then the incremental ids.

    Example:
        >>> merge_tokens([1, 5], [7], append_after=(5, 6))
        [1, 5, 6, 7]
    """
    out = list(prefix)
    if drop_last_if_in and out and out[-1] in drop_last_if_in:
        out = out[:-1]
    if append_after is not None and out and out[-1] == append_after[0]:
        extra = append_after[1]
        out = out + ([extra] if isinstance(extra, int) else list(extra))
    return out + list(incremental)


@dataclass
class ListTrajectory:
    """Session ids as the reference keeps them: a full copy per checkpoint.

    The current ids are the newest checkpoint's copy plus whatever was added
    since. Memory grows with turns × length.

    Example:
        >>> t = ListTrajectory()
        >>> t.extend([1, 2]); t.checkpoint(); t.extend([3]); t.checkpoint()
        2
        3
        >>> t.rollback(1); t.ids
        2
        [1, 2]
    """

    ids: list[int] = field(default_factory=list)
    copies: list[list[int]] = field(default_factory=list)

    def extend(self, ids: Sequence[int]) -> None:
        self.ids = self.ids + list(ids)

    def checkpoint(self) -> int:
        self.copies.append(list(self.ids))
        return len(self.ids)

    def rollback(self, n: int = 1) -> int:
        if n > len(self.copies):
            raise ValueError(f"cannot roll back {n} checkpoint(s): the buffer has {len(self.copies)}")
        del self.copies[len(self.copies) - n :]
        self.ids = list(self.copies[-1]) if self.copies else []
        return len(self.ids)

    def replace_last(self, n: int, ids: Sequence[int]) -> None:
        if n > len(self.ids):
            raise ValueError(f"cannot replace the last {n} id(s): the buffer holds {len(self.ids)}")
        self.ids = self.ids[: len(self.ids) - n] + list(ids)

    @property
    def checkpoints(self) -> list[int]:
        return [len(c) for c in self.copies]


class ReferenceComparator:
    """The comparator of the reference semantics, the slow obvious way.

    Every segment of both sequences is decoded and compared as text, as the
    reference does; the fast `TokenSeqComparator` must give the same
    `to_dict()` lists. Mismatch objects are shared with the fast path.
    """

    def __init__(
        self,
        tokenizer: Any,
        assistant_start_str: str | None,
        special_token_ids: Collection[int] | None = None,
        trim_trailing_ids: Collection[int] | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.boundary = (
            set(special_token_ids) if special_token_ids is not None else TokenSeqComparator.collect_special_ids(tokenizer)
        )
        self.assistant_start_str = assistant_start_str
        self.trim = set(trim_trailing_ids or ())

    def decode(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=False))

    def segments(self, ids: Sequence[int]) -> list[tuple[list[int], bool]]:
        out: list[tuple[list[int], bool]] = []
        run: list[int] = []
        for t in ids:
            if t in self.boundary:
                if run:
                    out.append((run, False))
                    run = []
                out.append(([t], True))
            else:
                run.append(t)
        if run:
            out.append((run, False))
        return out

    def is_assistant(self, segs: list[tuple[list[int], bool]], i: int) -> bool:
        if self.assistant_start_str is None or segs[i][1] or i == 0 or not segs[i - 1][1]:
            return False
        return (self.decode(segs[i - 1][0]) + self.decode(segs[i][0][:20])).startswith(self.assistant_start_str)

    def describe(self, segs: list[tuple[list[int], bool]]) -> str:
        return " ".join(f"[{self.decode(ids)}]" if special else f"({len(ids)} tokens)" for ids, special in segs)

    def compare(
        self, expected: Sequence[int], actual: Sequence[int], trim_trailing_ids: Collection[int] | None = None
    ) -> list[dict[str, Any]]:
        """The mismatch list as dicts (`type`, `segment_index`, texts, `detail`)."""
        trim = self.trim | set(trim_trailing_ids or ())
        e = self.segments(trim_trailing(expected, trim))
        a = self.segments(trim_trailing(actual, trim))

        def item(kind: str, idx: int, et: str, at: str, detail: str = "") -> dict[str, Any]:
            return {"type": kind, "segment_index": idx, "expected_text": et, "actual_text": at, "detail": detail}

        if len(e) != len(a):
            detail = f"segment count differs: expected {len(e)}, got {len(a)}"
            return [item("special_token_count", -1, self.describe(e), self.describe(a), detail)]
        if [s for _, s in e] != [s for _, s in a]:
            detail = "segment structure (special/content pattern) differs"
            return [item("special_token_count", -1, self.describe(e), self.describe(a), detail)]
        out = []
        for i, ((eids, special), (aids, _)) in enumerate(zip(e, a)):
            both_assistant = self.is_assistant(e, i) and self.is_assistant(a, i)
            if special:
                if eids != aids:
                    out.append(item("special_token_type", i, self.decode(eids), self.decode(aids)))
                continue
            et, at = self.decode(eids), self.decode(aids)
            if et != at:
                out.append(item("assistant_text" if both_assistant else "non_assistant_text", i, et, at))
        return out


# -- TITO families (incremental tokenization and merge) ---------------------


def reference_tools(tools: list[dict[str, Any]] | None, policy: str = "sglang") -> list[dict[str, Any]] | None:
    """Tools as the engine's pydantic models dump them (written out by hand)."""
    if not tools:
        return None
    out = []
    for t in tools:
        if "function" not in t:
            t = {"type": "function", "function": t}
        if policy == "none":
            out.append(t)
            continue
        f = t["function"]
        fn = {"description": f.get("description"), "name": f["name"], "parameters": f.get("parameters"), "strict": f.get("strict", False)}
        if policy == "sglang":
            if f.get("defer_loading", t.get("defer_loading")) is not None:
                fn["defer_loading"] = f.get("defer_loading", t.get("defer_loading"))
            out.append({"type": t.get("type", "function"), "function": fn, "defer_loading": t.get("defer_loading")})
        else:
            out.append({"type": t.get("type", "function"), "function": fn})
    return out


class ReferenceTito:
    """The reference's incremental tokenization, the slow obvious way: two
    renders and one encode per turn, list concatenation, no cache.

    `append_after` / `drop_last_if_in` / `trailing` are ids; `template_kwargs`
    are passed to every render.
    """

    def __init__(
        self,
        tokenizer: Any,
        *,
        append_after: tuple[int, int] | None = None,
        drop_last_if_in: Collection[int] = (),
        allowed_roles: Collection[str] = ("tool", "user", "system", "assistant"),
        template_kwargs: dict[str, Any] | None = None,
        diff: str = "dummy",
        arguments: str = "dict",
        chat_template: str | None = None,
        encoder: Any = None,
        encoder_version: str = "dsv4",
    ) -> None:
        self.tokenizer = tokenizer
        self.encoder = encoder  # DeepSeek V3.2/V4's encoding module instead of a template
        self.encoder_version = encoder_version
        self.append_after = append_after
        self.drop_last_if_in = set(drop_last_if_in)
        self.allowed_roles = set(allowed_roles)
        self.template_kwargs = dict(template_kwargs or {})
        self.diff = diff
        self.arguments = arguments
        self.chat_template = chat_template

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None, gen: bool) -> str:
        import copy
        import json

        msgs = copy.deepcopy(messages)
        for m in msgs:
            if m.get("role") == "assistant":
                if m.get("content") is None:
                    m["content"] = ""
                for call in m.get("tool_calls") or []:
                    f = call.get("function") or {}
                    if self.arguments == "dict" and isinstance(f.get("arguments"), str):
                        f["arguments"] = json.loads(f["arguments"])
                    if self.arguments == "json" and isinstance(f.get("arguments"), dict):
                        f["arguments"] = json.dumps(f["arguments"], ensure_ascii=False)
        if self.encoder is not None:
            if tools:
                if not msgs or msgs[0]["role"] != "system":
                    msgs.insert(0, {"role": "system", "content": ""})
                msgs[0]["tools"] = reference_tools(tools)
            kw = self.template_kwargs
            # thinking mode: thinking_mode, else enable_thinking, else thinking, else on
            mode = kw.get("thinking_mode")
            if mode is None:
                flag = next((kw[k] for k in ("enable_thinking", "thinking") if kw.get(k) is not None), True)
                mode = "thinking" if flag else "chat"
            passed = {k: v for k, v in kw.items() if k in ("drop_thinking", "reasoning_effort")}
            text = str(self.encoder.encode_messages(msgs, thinking_mode=mode, **passed))
            think = self.encoder.thinking_start_token if mode == "thinking" else self.encoder.thinking_end_token
            tail = msgs[-1]["role"] if msgs else None
            if self.encoder_version == "dsv32" and tail == "tool":
                opener = "\n\n" + think
            else:
                opener = "<｜Assistant｜>" + think
            if not gen and tail in ("user", "tool") and text.endswith(opener):
                text = text[: -len(opener)]
            return text
        text = self.tokenizer.apply_chat_template(
            msgs, tools=reference_tools(tools), add_generation_prompt=gen, tokenize=False,
            chat_template=self.chat_template, **self.template_kwargs,
        )
        return str(text)

    def tokenize_additional_messages(
        self, old: list[dict[str, Any]], new: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
    ) -> list[int]:
        assert len(new) >= len(old) and all(
            {k: a.get(k) or None for k in ("role", "content", "reasoning_content", "tool_calls")}
            == {k: b.get(k) or None for k in ("role", "content", "reasoning_content", "tool_calls")}
            for a, b in zip(old, new)
        ), "not append-only"
        appended = new[len(old):]
        assert all(m["role"] in self.allowed_roles for m in appended), "role not allowed"
        if self.diff == "history":
            before, after = self.render(old, tools, False), self.render(new, tools, True)
        else:
            base: list[dict[str, Any]] = [
                {"role": "system", "content": "dummy system"},
                {"role": "assistant", "content": "", "reasoning_content": " ", "tool_calls": old[-1].get("tool_calls") or []},
            ]
            before, after = self.render(base, tools, False), self.render(base + appended, tools, True)
        if not after.startswith(before):
            raise ValueError(f"rendered suffix diff failed for {[m['role'] for m in appended]}")
        return list(self.tokenizer.encode(after[len(before):], add_special_tokens=False))

    def merge_tokens(
        self, old: list[dict[str, Any]], new: list[dict[str, Any]], prefix: Sequence[int], tools: list[dict[str, Any]] | None = None
    ) -> list[int]:
        incremental = self.tokenize_additional_messages(old, new, tools)
        return merge_tokens(prefix, incremental, append_after=self.append_after, drop_last_if_in=self.drop_last_if_in)

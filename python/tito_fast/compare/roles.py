"""Messages and roles in id sequences, from each chat format's message markers.

A `RoleScheme` says how a format marks messages: markers that fix the role
(`<|user|>`), or markers followed by the role's name up to a terminator
(`<|im_start|>` ... `\\n`). `RoleTracker` finds the known scheme of a tokenizer
and builds a `MessageTable` (where each message starts, and its role) for an
id sequence, tracking roles across the whole sequence rather than looking
back one segment as the reference does.

Example:
    >>> RoleTracker.detect(tok).name  # doctest: +SKIP
    'chatml'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tito_fast.tokenizer.backend import token_id

ROLES = ("system", "user", "assistant", "tool")
ALIASES = {"ai": "assistant", "model": "assistant", "observation": "tool", "ipython": "tool", "function": "tool"}
#: Ids decoded after a marker to read the role name.
ROLE_PROBE_IDS = 8


@dataclass(frozen=True)
class RoleScheme:
    """How a chat format marks where messages start and which role they have.

    Args:
        name: a label for reports.
        fixed: marker token -> role, for formats with one token per role
            (GLM `<|user|>`, DeepSeek `<｜User｜>`, Kimi `<|im_assistant|>`).
        named: marker token -> terminator, for formats that write the role
            name after the marker (ChatML `<|im_start|>` up to "\\n", Llama 3
            `<|start_header_id|>` up to `<|end_header_id|>`, MiniMax `]~b]`).
        inner: marker token -> role, for messages a format renders inside
            another block (Qwen's `<tool_response>` inside a user block): each
            starts a message of that role; a block holding nothing but its
            header before one becomes that message.

    Example:
        >>> RoleScheme("k2v3", named={"<|ifm|im_start|>": "\\n"}).name
        'k2v3'
    """

    name: str
    fixed: dict[str, str] = field(default_factory=dict)
    named: dict[str, str] = field(default_factory=dict)
    inner: dict[str, str] = field(default_factory=dict)


SCHEMES = [
    # Kimi before ChatML: a Kimi vocabulary may also hold <|im_start|>.
    RoleScheme(
        "kimi",
        named={"<|im_system|>": "<|im_middle|>", "<|im_user|>": "<|im_middle|>", "<|im_assistant|>": "<|im_middle|>"},
    ),
    RoleScheme("chatml", named={"<|im_start|>": "\n"}, inner={"<tool_response>": "tool"}),
    RoleScheme("llama3", named={"<|start_header_id|>": "<|end_header_id|>"}),
    RoleScheme(
        "glm",
        fixed={"<|system|>": "system", "<|user|>": "user", "<|assistant|>": "assistant", "<|observation|>": "tool"},
    ),
    RoleScheme(
        "deepseek",
        fixed={
            "<｜begin▁of▁sentence｜>": "system",
            "<｜User｜>": "user",
            "<｜Assistant｜>": "assistant",
            "<｜tool▁outputs▁begin｜>": "tool",
        },
    ),
    RoleScheme("minimax", named={"]~b]": "\n"}),
]


def _normalise_role(text: str) -> str:
    role = text.strip().lower()
    role = ALIASES.get(role, role)
    return role if role in ROLES else "unknown"


@dataclass
class MessageTable:
    """Where each message starts in one id sequence, and its role."""

    starts: np.ndarray
    roles: list[str]

    def at(self, pos: int) -> tuple[int, str]:
        """`(message_index, role)` of the id at `pos` (-1, "unknown" before the first message)."""
        i = int(np.searchsorted(self.starts, pos, side="right")) - 1
        return (i, self.roles[i]) if i >= 0 else (-1, "unknown")


class RoleTracker:
    """Finds messages and roles in id sequences of one tokenizer and scheme."""

    def __init__(self, tokenizer: Any, scheme: RoleScheme | None = None, decode: Any = None) -> None:
        self.tokenizer = tokenizer
        self.scheme = scheme if scheme is not None else self.detect(tokenizer)
        # `decode(ids) -> str`: the comparator's (byte table first) when given.
        self._decode = decode if decode is not None else (lambda ids: str(tokenizer.decode(ids, skip_special_tokens=False)))
        self._roles: dict[tuple[int, ...], str] = {}  # (marker, role ids...) -> role
        self._headers: dict[tuple[Any, ...], bool] = {}  # (role, a block's short header ids...) -> only a header
        self.fixed: dict[int, str] = {}
        self.named: dict[int, str | int] = {}
        self.inner: dict[int, str] = {}
        if self.scheme is not None:
            for tok, role in self.scheme.inner.items():
                if (tid := token_id(tokenizer, tok)) is not None:
                    self.inner[tid] = role
            for tok, role in self.scheme.fixed.items():
                if (tid := token_id(tokenizer, tok)) is not None:
                    self.fixed[tid] = role
            for tok, term in self.scheme.named.items():
                if (tid := token_id(tokenizer, tok)) is not None:
                    term_id = token_id(tokenizer, term) if len(term) > 1 else None
                    self.named[tid] = term_id if term_id is not None else term
        self.markers = np.array(sorted(self.fixed) + sorted(self.named) + sorted(self.inner), dtype=np.int64)
        self._openers: list[bytes] | None = None

    @property
    def openers(self) -> list[bytes]:
        """The UTF-8 text of each marker that opens a message block (fixed and
        named, not inner): what `compare.messages.MessageBounds` looks for."""
        if self._openers is None:
            self._openers = [self._decode([i]).encode("utf-8") for i in (*self.fixed, *self.named)]
        return self._openers

    @staticmethod
    def detect(tokenizer: Any) -> RoleScheme | None:
        """The first known scheme whose markers are all single tokens of `tokenizer`."""
        for scheme in SCHEMES:
            markers = list(scheme.fixed) + list(scheme.named)
            if all(token_id(tokenizer, m) is not None for m in markers[:2]):
                return scheme
        return None

    def table(self, ids: Any) -> MessageTable:
        arr = np.asarray(ids, dtype=np.int64)
        found = np.flatnonzero(np.isin(arr, self.markers)) if len(self.markers) else np.zeros(0, dtype=np.int64)
        starts: list[int] = []
        roles: list[str] = []
        if not len(found):
            return MessageTable(np.asarray(starts, dtype=np.int64), roles)
        # every marker's id and the ids after it, read in one gather (not a slice per marker)
        n = len(arr)
        at = found[:, None] + 1 + np.arange(ROLE_PROBE_IDS)
        probes = arr[np.minimum(at, n - 1)].tolist()
        positions = found.tolist()
        inner, fixed, named, known = self.inner, self.fixed, self.named, self._roles
        last, last_probe = -1, probes[0]  # the marker of the last block started, and the ids after it
        for p, marker, probe in zip(positions, arr[found].tolist(), probes):
            if p + 1 + ROLE_PROBE_IDS > n:
                probe = probe[: n - p - 1]  # the ids left before the end
            if marker in inner:
                role = inner[marker]
                if starts and last not in inner:
                    s0 = starts[-1] + 1
                    header = last_probe[: p - s0] if p - s0 <= ROLE_PROBE_IDS else arr[s0:p].tolist()
                    if self._holds_only_header(header, roles[-1]):
                        roles[-1] = role  # the block holds nothing but this message
                        continue
                starts.append(p)
                roles.append(role)
                last, last_probe = marker, probe
                continue
            starts.append(p)
            last, last_probe = marker, probe
            if marker in fixed:
                roles.append(fixed[marker])
                continue
            term = named[marker]
            if isinstance(term, int):
                if term in probe:
                    probe = probe[: probe.index(term)]
                key = (marker, *probe)
                cached = known.get(key)
                if cached is None:
                    cached = known[key] = _normalise_role(self._decode(probe))
                roles.append(cached)
            else:
                # most role names and their terminator are one or two ids
                cached = known.get((marker, *probe[:2])) if len(probe) > 1 else None
                if cached is None:
                    cached = known.get((marker, probe[0])) if probe else None
                roles.append(cached if cached is not None else self._named_role(marker, probe, term))
        return MessageTable(np.asarray(starts, dtype=np.int64), roles)

    def _holds_only_header(self, ids: list[int], role: str) -> bool:
        """Whether `ids` (a block's ids after its marker) are nothing but the
        header of a block of `role` (its name, or an alias); cached by the
        role and ids for short headers."""
        key = (role, *ids) if len(ids) <= ROLE_PROBE_IDS else None
        got = self._headers.get(key) if key is not None else None
        if got is None:
            header = self._decode(ids).strip().lower()
            got = header in ("", role, *(k for k, v in ALIASES.items() if v == role))
            if key is not None:
                self._headers[key] = got
        return got

    def _named_role(self, marker: int, probe: list[int], term: str) -> str:
        """The role a marker names before the text `term` (decoded from
        `probe`, the ids after the marker), cached by the marker and the ids
        up to the first one whose text holds `term`: the role name's few ids
        repeat, the message text after them does not."""
        for k in range(1, len(probe) + 1):
            cached = self._roles.get((marker, *probe[:k]))
            if cached is not None:
                return cached
        for k in range(1, len(probe) + 1):
            text = self._decode(probe[:k])
            if term in text:  # the text before it is the full decode's too (a prefix's bytes)
                role = self._roles[(marker, *probe[:k])] = _normalise_role(text.split(term, 1)[0])
                return role
        return _normalise_role(self._decode(probe).split(term, 1)[0])

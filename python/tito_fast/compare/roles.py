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

from tito_fast import _core
from tito_fast._core import RoleMarkers, Segmenter
from tito_fast.tokenizer.backend import token_id

#: The roles a table names (any other name reads "unknown"), other names of
#: them, and the ids decoded after a marker to read a name: the rule is
#: `_core.RoleMarkers`'s (Rust, its one owner).
ROLES: tuple[str, ...] = _core.ROLES
ALIASES: dict[str, str] = _core.ROLE_ALIASES
ROLE_PROBE_IDS: int = _core.ROLE_PROBE_IDS


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

    def __init__(self, tokenizer: Any, scheme: RoleScheme | None = None, decode: Any = None, segmenter: Segmenter | None = None) -> None:
        """`decode(ids) -> str`: the comparator's (byte table first), else the
        tokenizer's; `segmenter`: a `Segmenter` whose byte table reads role
        names without calling `decode`."""
        self.tokenizer = tokenizer
        self.scheme = scheme if scheme is not None else self.detect(tokenizer)
        self._decode = decode if decode is not None else (lambda ids: str(tokenizer.decode(ids, skip_special_tokens=False)))
        self._segmenter = segmenter
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
        #: the table's rule, in Rust (`_core.RoleMarkers`, its one owner)
        self._core = RoleMarkers(self.fixed, self.named, self.inner)
        self._openers: list[bytes] | None = None

    @property
    def core(self) -> RoleMarkers:
        """The markers as Rust holds them (`_core.RoleMarkers`, the table's rule)."""
        return self._core

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
        """Where each message of `ids` starts, and its role: a marker that
        fixes the role starts a message of it; a named marker's role is the
        text of the ids after it up to its terminator (at most
        `ROLE_PROBE_IDS` ids), stripped, lower-cased, aliases resolved
        (`ALIASES`; a name outside `ROLES` is "unknown"); an inner marker
        starts a message of its role, or names the block it sits in when that
        block holds nothing but its header before it.

        Example:
            >>> RoleTracker(tok).table(ids).roles  # doctest: +SKIP
            ['system', 'user', 'assistant']
        """
        starts, roles = self._core.table(ids, self._decode, self._segmenter)
        return MessageTable(starts, roles)

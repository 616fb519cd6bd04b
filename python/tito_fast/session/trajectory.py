"""One session's messages and ids, turn by turn, as a TITO session server keeps them.

`Trajectory` holds the message history and a `TokenBuffer` with one
checkpoint per generated assistant turn (a checkpoint is a length, so a
session costs O(total ids), where the reference keeps a full copy of the
ids per turn). Per engine call:

1. `prepare(request_messages, tools)` returns the prompt ids: the stored ids
   merged with the appended messages (the first turn renders from scratch).
   A request that departs from the stored history is a retry: the session
   rolls back to the last generated checkpoint inside the matching prefix,
   discarding at most `max_rollback_steps` (default 1) generated turns.
2. `update(request_messages, assistant_message, prompt_ids, completion_ids)`
   checks the stored ids are a prefix of prompt + completion (less up to the
   family's `max_trim_tokens`) and records the new checkpoint.
3. `mismatch()` compares the accumulated ids with a fresh render of the
   history: the reference's mismatch list; `diagnose()` says which role,
   message and kind each difference is.

Example:
    >>> traj = Trajectory(get_tito_tokenizer(tok, "qwen3"))  # doctest: +SKIP
    >>> prompt = traj.prepare(messages, tools)  # doctest: +SKIP
    >>> traj.update(messages, reply, prompt, completion_ids)  # doctest: +SKIP
    >>> traj.mismatch()  # doctest: +SKIP
    []
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import numpy.typing as npt

from tito_fast._core import TokenBuffer, check_prefix, common_prefix_len
from tito_fast.chat.families import TitoTokenizer
from tito_fast.chat.messages import (
    BUILTIN,
    Matcher,
    call_matcher,
    check_roles,
    messages_equal,
    resolve_matcher,
)
from tito_fast.errors import RollbackError, TurnRecordedError


class Trajectory:
    """Messages and checkpointed ids of one session (see the module doc).

    Args:
        tito: the family bound to the tokenizer (`get_tito_tokenizer`).
            Calls on one Trajectory are serialised by a lock; one family
            object may serve many sessions and threads.
        matcher: message matcher for history checks (default: the family's).
        max_rollback_steps: generated turns a retry may discard.

    Example:
        >>> traj = Trajectory(get_tito_tokenizer(tok, "glm47"), max_rollback_steps=2)  # doctest: +SKIP
        >>> traj.num_turns  # doctest: +SKIP
        0
    """

    def __init__(self, tito: TitoTokenizer, *, matcher: str | Matcher | None = None, max_rollback_steps: int = 1) -> None:
        if max_rollback_steps < 0:
            raise ValueError("max_rollback_steps must be >= 0")
        self.tito = tito
        self.matcher: Matcher = resolve_matcher(matcher if matcher is not None else tito.matcher)
        self.max_rollback_steps = max_rollback_steps
        self.messages: list[dict[str, Any]] = []
        self.buffer = TokenBuffer()
        self.tools: list[dict[str, Any]] | None = None
        self._ends: list[int] = []  # message count after each generated turn (one per checkpoint)
        self._comparator: Any = None
        # One call at a time per session (a session server may get a retry while a turn is in flight).
        self._lock = threading.RLock()

    @property
    def num_turns(self) -> int:
        """Generated assistant turns stored."""
        return len(self._ends)

    @property
    def token_ids(self) -> list[int]:
        """The stored ids (a new list; `buffer.to_numpy()` gives a zero-copy view)."""
        return self.buffer.to_list()

    def _rollback_for(self, request: list[dict[str, Any]]) -> None:
        """Roll back when `request` departs from the stored history. Afterwards the
        request repeats every stored message (stored history always ends at a checkpoint)."""
        stored = self.messages
        if not stored or not self._ends:
            return
        if self.matcher in BUILTIN and messages_equal(request[: len(stored)], stored):
            return  # equal messages match under every built-in matcher: one C-level comparison
        match = 0
        for s, r in zip(stored, request):
            if not call_matcher(self.matcher, s, r):
                break
            match += 1
        if match >= len(stored):
            return
        keep = sum(1 for end in self._ends if end <= match)  # checkpoints inside the matching prefix
        discard = len(self._ends) - keep
        if discard > self.max_rollback_steps:
            raise RollbackError(
                f"rollback failed: discard_count={discard} exceeds max_assistant_rollback_steps="
                f"{self.max_rollback_steps}: the request departs from the stored history at message {match}, "
                f"which would discard {discard} generated turns; stored {len(stored)} messages, request {len(request)}"
            )
        self.buffer.rollback(discard)
        self._ends = self._ends[:keep]
        self.messages = stored[: self._ends[-1]] if self._ends else []

    def prepare(self, request_messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> npt.NDArray[np.uint32]:
        """The prompt ids for this request as a uint32 array (`.tolist()` for a
        list); rolls back first when the request is a retry.

        Raises `AppendOnlyError` (a role the family cannot append) and
        `RollbackError` (a retry further back than `max_rollback_steps`).
        """
        with self._lock:
            return self._prepare(request_messages, tools)

    def _prepare(self, request_messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> npt.NDArray[np.uint32]:
        self._rollback_for(request_messages)
        self.tools = tools
        if not self._ends:
            text = self.tito.apply_chat_template(request_messages, add_generation_prompt=True, tools=tools)
            return np.asarray(self.tito.encode(text), dtype=np.uint32)
        # The rollback scan matched every stored message: only the appended roles are left to check.
        check_roles(len(self.messages), request_messages, self.tito.allowed_append_roles)
        effective = self.messages + request_messages[len(self.messages) :]
        incremental = self.tito.incremental_ids(self.messages, effective, tools)
        merged: npt.NDArray[np.uint32] = self.tito.merge_ids(self.buffer.to_numpy(), incremental)
        return merged

    def update(
        self,
        request_messages: list[dict[str, Any]],
        assistant_message: dict[str, Any],
        prompt_ids: Any,
        completion_ids: Any,
    ) -> None:
        """Record a generated turn; `PrefixMismatchError` when the stored ids,
        less up to the family's `max_trim_tokens`, do not start prompt + completion.
        Ids may be lists or arrays (arrays are read in place).

        `request_messages` is the whole request of this turn, so it holds every
        message recorded so far; one that holds fewer (the same turn given
        again) raises `TurnRecordedError` and changes nothing."""
        with self._lock:
            self._update(request_messages, assistant_message, prompt_ids, completion_ids)

    def _update(
        self, request_messages: list[dict[str, Any]], assistant_message: dict[str, Any], prompt_ids: Any, completion_ids: Any
    ) -> None:
        if len(request_messages) < len(self.messages):
            raise TurnRecordedError(
                f"request_messages holds {len(request_messages)} messages but the trajectory already holds "
                f"{len(self.messages)} (was this turn recorded already?); each turn's request carries the whole history"
            )
        prompt = prompt_ids if isinstance(prompt_ids, np.ndarray) else np.asarray(prompt_ids, dtype=np.int64)
        completion = completion_ids if isinstance(completion_ids, np.ndarray) else np.asarray(completion_ids, dtype=np.int64)
        stored = self.buffer.to_numpy()
        stored_len = len(stored)
        trim = self.tito.max_trim_tokens
        if stored_len:
            # The checked ids lie inside the prompt unless the prompt is shorter.
            new = prompt if len(prompt) >= stored_len - trim else np.concatenate([prompt, completion])
            check_prefix(stored, new, max_trim_tokens=trim)
            keep = min(common_prefix_len(stored, new), stored_len)
        else:
            keep = 0
        tail = np.concatenate([prompt[keep:], completion]) if keep <= len(prompt) else completion[keep - len(prompt) :]
        if keep < stored_len:
            self.buffer.replace_last(stored_len - keep, tail)
        else:
            self.buffer.extend(tail)
        self.buffer.checkpoint()
        self.messages = self.messages + request_messages[len(self.messages) :] + [assistant_message]
        self._ends.append(len(self.messages))

    def expected_ids(self, tools: list[dict[str, Any]] | None = None) -> list[int]:
        """A fresh render of the stored history (no generation prompt)."""
        return self.tito.render_ids(self.messages, tools if tools is not None else self.tools)

    def comparator(self) -> Any:
        """The family's comparator (made once)."""
        if self._comparator is None:
            self._comparator = self.tito.create_comparator()
        return self._comparator

    def mismatch(self, tools: list[dict[str, Any]] | None = None) -> list[dict[str, Any]] | None:
        """The reference's mismatch list (`to_dict()`s) of the stored ids against a fresh render; None when empty."""
        with self._lock:
            if not len(self.buffer):
                return None
            expected, actual = self.expected_ids(tools), self.buffer.to_numpy()
        return [m.to_dict() for m in self.comparator().compare_sequences(expected, actual)]

    def diagnose(self, tools: list[dict[str, Any]] | None = None) -> Any:
        """`TokenSeqComparator.diagnose` of the stored ids against a fresh render."""
        with self._lock:
            expected, actual = self.expected_ids(tools), self.buffer.to_numpy()
        return self.comparator().diagnose(expected, actual)

    def __len__(self) -> int:
        return len(self.buffer)

    def __repr__(self) -> str:
        return f"Trajectory(family={self.tito.family!r}, turns={self.num_turns}, ids={len(self.buffer)})"

"""`assemble`: captured calls to trainable chains (see `tito_fast.chains`)."""

from __future__ import annotations

import bisect
import gc
import math
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from itertools import chain as concat
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np

from tito_fast import _deps
from tito_fast._core import assemble_calls, check_call_texts
from tito_fast.chains.calls import (
    MAX_ID,
    BadCall,
    Call,
    CallsError,
    OnError,
    Sessions,
    call_order,
    group_sessions,
    parse_call,
    parse_messages,
    parse_tools,
    read_calls,
)
from tito_fast.chains.matchers import check_matcher, message_hints, parse_message_texts
from tito_fast.compare.messages import MessageBounds, history_messages, id_offsets, map_offsets
from tito_fast.errors import DumpError
from tito_fast.score.dump import MAX_RECORD_BYTES, dump_format, oversized_row_groups, row_sizes, too_large

if TYPE_CHECKING:
    from tito_fast.chains.packed import PackedChains

#: Event kinds, in the order of the Rust codes.
KINDS = ("extend", "seam_drift", "rollback", "rewrite", "new_root", "length", "superseded")
#: What each event kind means, in plain words (the reports' legend).
KIND_LEGEND = {
    "extend": "the call extended a chain other than the one extended last (an agent resuming its own chain), or after trimming its trailing end-of-turn ids",
    "seam_drift": "the prompt re-renders the end of the last completion differently (a retokenized seam); realigned by default: the re-rendered sampled ids are masked",
    "rollback": "the prompt is a prefix of a chain: a retry from an earlier point; it branches off that chain",
    "rewrite": "the prompt changes earlier history (compaction, an edited message); it branches off the chain at the change",
    "new_root": "the prompt shares no more than the first message block with any chain (a sub-agent with its own system prompt, a new conversation): a new root",
    "length": "the call extends a chain whose last call was cut by finish_reason='length': it branches off it (such a chain is not extended)",
    "superseded": "with leaves='drop_retries': an attempt a retry replaced, dropped from the retry's branch point on",
}
#: Why event counts differ with and without a tokenizer.
NO_TOKENIZER_NOTE = (
    "assembled without a tokenizer: no trailing end-of-turn ids are trimmed (a prompt that re-renders one is an event, not an "
    "extension) and no message markers are known (the first block is a chain's whole first prompt, so more calls are new_root "
    "and fewer rewrite); give --tokenizer for the family's rules"
)
#: The leaf pickers: every leaf of a session's forest, or without the attempts a retry superseded.
LEAVES = ("all", "drop_retries")
#: The causes a policy is chosen for.
CAUSES = ("seam_drift", "rollback", "rewrite", "new_root")
POLICIES = ("fork", "realign", "drop")
PolicyName = Literal["fork", "realign", "drop"]
#: Realign seam drift, fork everything else (nothing is dropped unless asked).
DEFAULT_POLICY: dict[str, PolicyName] = {"seam_drift": "realign", "rollback": "fork", "rewrite": "fork", "new_root": "fork"}
#: Seam drift is a departure within this many ids of the chain's end.
DEFAULT_REALIGN_WINDOW = 8
#: Ids on each side of an event's position looked at to tell what kind of difference it is.
WINDOW_IDS = 256


def resolve_policy(policy: str | dict[str, str] | None) -> dict[str, PolicyName]:
    """The policy of each cause from `None` (the default), one policy name for
    every cause ("realign" applies to seam drift, the others fork), or a dict
    `{cause: policy}` over the defaults.

    Raises:
        ValueError: an unknown cause or policy, or "realign" for a cause other than seam drift.
    """
    out = dict(DEFAULT_POLICY)
    if policy is None:
        return out
    if isinstance(policy, str):
        if policy not in POLICIES:
            raise ValueError(f"policy must be one of {POLICIES} or a dict {{cause: policy}}, got {policy!r}")
        return {c: ("fork" if policy == "realign" and c != "seam_drift" else policy) for c in CAUSES}  # type: ignore[misc]
    for cause, p in policy.items():
        if cause not in CAUSES:
            raise ValueError(f"policy: unknown cause {cause!r}; causes are {CAUSES}")
        if p not in POLICIES:
            raise ValueError(f"policy[{cause!r}]: must be one of {POLICIES}, got {p!r}")
        if p == "realign" and cause != "seam_drift":
            raise ValueError(f"policy[{cause!r}]: 'realign' applies to seam drift only (the difference is near the chain's end)")
        out[cause] = p  # type: ignore[assignment]
    return out


class Chain:
    """One trainable sequence: ids in which every call's prompt is exactly
    the ids before its completion.

    `loss_mask` is 1 exactly on the ids the model sampled (each sampled id is
    1 in one chain only), `logprobs` the engine's logprob there and NaN
    elsewhere. `call_index` (per id) is the call that added the id (its
    prompt's new ids or its completion). With a tokenizer, `message_index`
    and `role` (per id) are its message (of the request, when the calls
    carry their `messages`; else the rendered block) and its role.

    A session is a forest: each chain is one leaf's path. `parent` is the
    chain this one branched off (None: a root) and `shared` the number of
    leading ids the two have in common; those ids have loss 0 here (they are
    trained in the parent), so a trainer may pack a shared prefix once
    (`Assembly.packed`). `open` is False when the chain's last call ended on
    `finish_reason="length"`: no later call extends it.

    The arrays are views of the assembly's flat arrays (one buffer for every
    chain of a batch of sessions), made when first read.
    """

    __slots__ = ("session_id", "index", "open", "parent", "shared", "_flat", "_ids", "_spans", "_fam", "_messages", "_last")

    def __init__(
        self, session_id: str, index: int, flat: Mapping[str, np.ndarray], ids: tuple[int, int], spans: tuple[int, int],
        open: bool, fam: _Family, messages: Callable[[int], _Request], last: tuple[int, int],
        tree: tuple[int | None, int] = (None, 0),
    ) -> None:  # fmt: skip
        self.session_id = session_id
        self.index = index
        self.open = open  # False: its last call ended on finish_reason="length", no call extends it
        self.parent, self.shared = tree  # the chain it branched off (None: a root), leading ids shared with it
        self._flat = flat  # ids, loss_mask, logprobs, span_start and span_call of the whole batch
        self._ids = ids  # (start, end) in the flat ids
        self._spans = spans  # (start, end) in the flat call runs
        self._fam = fam
        # its last call (position in the batch) and that call's prompt length: its ids are
        # that prompt and the call's completion; the call's messages are read from `messages`
        # (which holds the batch's messages, never its ids)
        self._messages = messages
        self._last = last

    def _of_ids(self, name: str) -> np.ndarray:
        return self._flat[name][self._ids[0] : self._ids[1]]

    def _of_spans(self, name: str) -> np.ndarray:
        return self._flat[name][self._spans[0] : self._spans[1]]

    @property
    def ids(self) -> np.ndarray:
        """The token ids (uint32)."""
        return self._of_ids("ids")

    @property
    def loss_mask(self) -> np.ndarray:
        """1 on sampled ids, else 0 (uint8)."""
        return self._of_ids("loss_mask")

    @property
    def logprobs(self) -> np.ndarray:
        """The engine's logprob on sampled ids, NaN elsewhere (float32)."""
        return self._of_ids("logprobs")

    @property
    def span_start(self) -> np.ndarray:
        """Where each run of one call's ids starts (int64)."""
        return self._of_spans("span_start")

    @property
    def span_call(self) -> np.ndarray:
        """The call_index of each run's call (int64)."""
        return self._of_spans("span_call_index")

    @property
    def buffers(self) -> Mapping[str, np.ndarray]:
        """The flat arrays its views are made from, shared by every chain of
        its batch of sessions."""
        return self._flat

    def __repr__(self) -> str:
        return (
            f"Chain(session_id={self.session_id!r}, index={self.index}, ids={len(self)}, sampled={self.sampled}, open={self.open}, "
            f"parent={self.parent}, shared={self.shared})"
        )

    def __len__(self) -> int:
        return self._ids[1] - self._ids[0]

    @property
    def call_index(self) -> np.ndarray:
        """The call_index of the call that added each id (int64)."""
        lengths = np.diff(np.append(self.span_start, len(self.ids)))
        return np.repeat(self.span_call, lengths)

    def _table(self) -> Any:
        if self._fam.tracker is None:
            raise ValueError("message_index and role need a tokenizer: assemble(..., tokenizer=...)")
        return self._fam.tracker.table(self.ids)

    @property
    def message_index(self) -> np.ndarray:
        """The message of each id (int64): with the calls' `messages`, the
        index of the request message of its last call (found as the score
        job finds them, `tito_fast.compare.messages`), its completion being
        message `len(messages)` (the response); else, or when the ids do not
        decode byte for byte, the rendered message block. -1 before the first."""
        return _message_at(self._found(), self._table(), np.arange(len(self)))[0]

    @property
    def role(self) -> list[str]:
        """The role of each id's message (see `message_index`); before the
        first message, its rendered block's ("unknown" before any marker)."""
        return _message_at(self._found(), self._table(), np.arange(len(self)))[1]

    def _found(self) -> tuple[np.ndarray, list[str]] | None:
        g, prompt_len = self._last
        return _message_map(self._fam, self._messages(g), self.ids[:prompt_len])

    @property
    def sampled(self) -> int:
        """Ids with loss 1."""
        return int(np.count_nonzero(self.loss_mask))

    def to_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "chain": self.index,
            "open": self.open,
            "parent": self.parent,
            "shared": self.shared,
            "ids": self.ids.tolist(),
            "loss_mask": self.loss_mask.tolist(),
            "logprobs": [None if math.isnan(x) else x for x in self.logprobs.tolist()],
            "call_index": self.call_index.tolist(),
        }


@dataclass
class Event:
    """A call that did not simply extend the chain extended last.

    `kind`: extend (another chain, or after trimming trailing ids), seam_drift,
    rollback, rewrite, new_root, length (the call extends a chain whose last
    call was cut by `finish_reason="length"`: it branches off it) or
    superseded (`leaves="drop_retries"`: an attempt a retry replaced, dropped
    from the retry's branch point on); `policy`: what was done (fork, realign,
    drop; "extend" for an extension); `chain`: the chain it was matched
    against (None: none open), `to_chain`: where the call went (None:
    dropped); `position`: the ids it shares with that chain, `message_index`
    and `role` the message there (as `Chain.message_index`: of the request
    of the chain's call before this one, else the rendered block); `diagnosis`: what kind of
    difference is there (retokenization, whitespace_only, splice_seam,
    content; None for extensions and rollbacks or without a tokenizer);
    `removed` / `masked`: ids of the chain replaced and the sampled ones
    among them; `dropped`: this call's completion ids not emitted.
    """

    session_id: str
    call_index: int
    kind: str
    policy: str
    chain: int | None
    to_chain: int | None
    position: int
    removed: int = 0
    masked: int = 0
    dropped: int = 0
    message_index: int | None = None
    role: str | None = None
    diagnosis: str | None = None
    source: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dict(vars(self))


class Events(Sequence[Event]):
    """An assembly's events, in order: each made into an `Event` when first
    read (its message, role and diagnosis then too) and kept. An assembly of
    millions of calls holds them as the matching's arrays, not as objects.

    Example:
        >>> from tito_fast import assemble
        >>> a = assemble([{"session_id": "s", "prompt_ids": [1, 2], "completion_ids": [3]},
        ...               {"session_id": "s", "prompt_ids": [1, 2], "completion_ids": [4]}])
        >>> len(a.events), a.events[0].kind
        (1, 'rollback')
    """

    def __init__(self) -> None:
        self._parts: list[Callable[[int], Event]] = []
        self._starts: list[int] = [0]
        self._made: dict[int, Event] = {}

    def add(self, count: int, make: Callable[[int], Event]) -> None:
        """`count` more events; `make(k)` makes the part's k-th (the assembly's own use)."""
        if count:
            self._parts.append(make)
            self._starts.append(self._starts[-1] + count)

    def __len__(self) -> int:
        return self._starts[-1]

    @overload
    def __getitem__(self, i: int) -> Event: ...
    @overload
    def __getitem__(self, i: slice) -> list[Event]: ...
    def __getitem__(self, i: int | slice) -> Event | list[Event]:
        if isinstance(i, slice):
            return [self[k] for k in range(*i.indices(len(self)))]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError("event index out of range")
        ev = self._made.get(i)
        if ev is None:
            part = bisect.bisect_right(self._starts, i) - 1
            ev = self._made[i] = self._parts[part](i - self._starts[part])
        return ev

    def __iter__(self) -> Iterator[Event]:
        return (self[k] for k in range(len(self)))

    def __repr__(self) -> str:
        return f"Events({len(self):,})"


@dataclass
class AssemblySummary:
    """What an assembly delivered."""

    sessions: int
    calls: int
    chains: int
    chains_per_session: dict[int, int]  # number of chains -> sessions
    sampled_ids: int
    delivered_ids: int  # with loss 1
    masked_by_cause: dict[str, int]
    dropped_by_cause: dict[str, int]
    forks_by_cause: dict[str, int]
    events_by_kind: dict[str, int]
    bad_records: int
    policy: dict[str, str]
    realign_window: int

    @property
    def delivered_share(self) -> float:
        return self.delivered_ids / self.sampled_ids if self.sampled_ids else 1.0

    def to_dict(self) -> dict[str, Any]:
        d = dict(vars(self))
        d["chains_per_session"] = {str(k): v for k, v in sorted(self.chains_per_session.items())}
        d["delivered_share"] = self.delivered_share
        d["verdict"] = self.verdict()
        return d

    def verdict(self) -> str:
        """The assembly in plain words."""
        masked, dropped = sum(self.masked_by_cause.values()), sum(self.dropped_by_cause.values())
        lost = "" if not masked + dropped else f"; {masked:,} masked and {dropped:,} dropped, each counted by cause"
        bad = f"; {self.bad_records:,} bad record(s) skipped" if self.bad_records else ""
        return (
            f"{100 * self.delivered_share:.2f}% of the {self.sampled_ids:,} sampled ids are delivered with loss 1, in "
            f"{self.chains:,} chains from {self.calls:,} calls of {self.sessions:,} sessions{lost}{bad}. Every chain was checked: "
            "each sampled id follows exactly its call's prompt and carries the engine's logprob."
        )

    def table(self) -> str:
        """The summary as an aligned text table."""
        rows = [
            ("sessions", f"{self.sessions:,}"),
            ("calls", f"{self.calls:,}"),
            ("chains", f"{self.chains:,} ({self.chains / max(self.sessions, 1):.2f} per session)"),
            ("sampled ids", f"{self.sampled_ids:,}"),
            ("delivered with loss 1", f"{self.delivered_ids:,} ({100 * self.delivered_share:.2f}%)"),
        ]
        for cause, n in sorted(self.masked_by_cause.items()):
            rows.append((f"masked ({cause})", f"{n:,}"))
        for cause, n in sorted(self.dropped_by_cause.items()):
            rows.append((f"dropped ({cause})", f"{n:,}"))
        for cause, n in sorted(self.forks_by_cause.items()):
            rows.append((f"forks ({cause})", f"{n:,}"))
        for kind, n in sorted(self.events_by_kind.items()):
            rows.append((f"events: {kind}", f"{n:,}"))
        rows.append(("bad records", f"{self.bad_records:,}"))
        rows.append(("policy", ", ".join(f"{c}={p}" for c, p in self.policy.items()) + f" (realign window {self.realign_window})"))
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k.ljust(width)}  {v}" for k, v in rows)


@dataclass
class Assembly:
    """The chains of every session (`sessions[session_id]`, in order: a
    read-only mapping whose chains are made when a session is first read;
    `dict(a.sessions)` for a dict), the events, the bad records and the summary."""

    sessions: ChainsBySession
    events: Events
    bad: list[BadCall]
    summary: AssemblySummary

    def chains(self) -> list[Chain]:
        """Every chain, session by session."""
        return [c for cs in self.sessions.values() for c in cs]

    def packed(self) -> PackedChains:
        """Every chain stored from where it parts from its parent on (a shared
        prefix once: `tito_fast.chains.packed.PackedChains`)."""
        from tito_fast.chains.packed import pack

        return pack(self)

    @property
    def nbytes(self) -> int:
        """Bytes held by the chains' arrays (ids, masks, logprobs, call runs)."""
        flats = {id(f): f for f in self.sessions.buffers()}  # one per batch of sessions, no chain made
        return sum(a.nbytes for f in flats.values() for a in f.values())


@dataclass
class _Family:
    """What assembly takes from a tokenizer and family."""

    trim: list[int]
    max_trim: int
    boundary: list[int]
    comparator: Any  # TokenSeqComparator or None
    tracker: Any  # RoleTracker or None
    render: Callable[[list[dict[str, Any]], list[dict[str, Any]] | None], str] | None = None  # messages, tools -> text


#: A call's request: its messages and tools (None: not given).
_Request = tuple[list[dict[str, Any]] | None, list[dict[str, Any]] | None]


def _family(tokenizer: Any, family: Any) -> _Family:
    if tokenizer is None:
        if family is not None:
            raise ValueError("family needs a tokenizer (its trim ids and message markers are the tokenizer's ids)")
        return _Family([], 0, [], None, None)
    from tito_fast.chat.families import family_facts, get_tito_tokenizer

    from tito_fast.tokenizer.load import load_tokenizer

    tokenizer = load_tokenizer(tokenizer, snapshot=True)  # a folder, fixture:NAME, or a tokenizer as it is
    if family is None:
        from tito_fast.chat.identify import family_of_tokenizer

        found = family_of_tokenizer(tokenizer)
        if found is None:
            from tito_fast.errors import FamilyError

            raise FamilyError("the tokenizer's chat template names no known family: pass family=")
        family = found[0]
    facts = family_facts(tokenizer, family)  # ids only: no template is needed to assemble
    cmp = facts.create_comparator(tokenizer)
    tracker = cmp.role_tracker
    boundary = sorted(set(tracker.fixed) | set(tracker.named))
    built: list[Any] = []  # the family's renderer, built on first use (message indexes only)

    def render(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> str:
        if not built:
            try:
                built.append(get_tito_tokenizer(tokenizer, family))
            except (ValueError, ImportError) as e:  # a template the family does not render: the markers name messages
                built.append(e)
        if isinstance(built[0], Exception):
            raise built[0]
        return str(built[0].apply_chat_template(messages, add_generation_prompt=False, tools=tools))

    return _Family(sorted(facts.trailing_token_ids), int(facts.max_trim_tokens), boundary, cmp, tracker, render)


def _csr(sessions: Sessions) -> dict[str, Any]:
    """The Rust call layout for `Call` objects: each call's arrays as they
    are (prompts repeat their history: they are never copied into one
    buffer; completions and logprobs are read in place too), and the
    session bounds."""
    calls = list(concat.from_iterable(sessions.calls))
    lps = list(map(attrgetter("completion_logprobs"), calls))  # None: NaN
    f32 = np.dtype(np.float32)
    if not all(lp is None or (type(lp) is np.ndarray and lp.dtype == f32) for lp in lps):
        lps = [None if lp is None else np.ascontiguousarray(lp, dtype=np.float32) for lp in lps]
    return {
        "prompts": list(map(attrgetter("prompt_ids"), calls)),
        "completion": list(map(attrgetter("completion_ids"), calls)),
        "completion_offsets": None,
        "logprobs": lps,
        "session_offsets": np.concatenate([[0], np.cumsum(list(map(len, sessions.calls)))]).astype(np.int64),
    }


def _diagnosis(fam: _Family, old: np.ndarray, new: np.ndarray, at: int, seam: bool) -> str | None:
    """The kind of difference between the chain's ids `old` and the prompt
    `new` from position `at` on (`tito_fast.compare.diagnosis.classify`), in
    the message block that holds `at`. At a seam the chain's tail is compared
    with as much of the prompt as spells the same length of text (the prompt
    goes on past the chain's end); elsewhere the two blocks up to the next
    marker (at most `WINDOW_IDS` ids)."""
    from tito_fast.compare.diagnosis import classify

    cmp = fam.comparator
    if cmp is None:
        return None
    marks = np.asarray(fam.boundary, dtype=np.int64)
    lo = max(0, at - WINDOW_IDS)
    before = np.flatnonzero(np.isin(old[lo:at], marks)) if len(marks) else np.zeros(0, dtype=np.int64)
    start = lo + int(before[-1]) + 1 if len(before) else lo  # from the start of the block that holds `at`
    head = old[start:at].tolist()

    def block(ids: np.ndarray) -> list[int]:
        seg = ids[at : at + WINDOW_IDS]
        hit = np.flatnonzero(np.isin(seg, marks)) if len(marks) else np.zeros(0, dtype=np.int64)
        out: list[int] = seg[: int(hit[0]) if len(hit) and hit[0] > 0 else len(seg)].tolist()
        return out

    if seam:
        tail = old[at : at + WINDOW_IDS].tolist()
        e_ids = head + tail
        want = len(cmp.decode(tail))
        taken: list[int] = []
        for x in new[at : at + len(tail) + 16].tolist():  # the prompt's ids that spell as much text
            if len(cmp.decode(taken)) >= want:
                break
            taken.append(x)
        a_ids = head + taken
    else:
        e_ids, a_ids = head + block(old), head + block(new)
    return classify(e_ids, a_ids, cmp.decode(e_ids), cmp.decode(a_ids))


@dataclass
class _Batch:
    """Some sessions' calls in session and call order, as the matching takes
    them (`args`) and as the results are described (call indexes, sources,
    the ids of a call for event diagnosis)."""

    ids: list[str]  # session ids
    counts: list[int]  # calls per session
    call_index: np.ndarray  # int64, per ordered call
    args: dict[str, Any]  # prompts, completion, completion_offsets, logprobs, session_offsets, order
    prompt: Callable[[int], np.ndarray]
    completion: Callable[[int], np.ndarray]
    source: Callable[[int], str]
    sampled: int  # completion ids of these calls
    messages: Callable[[int], _Request]  # a call's request messages and tools (None: not given)


def _message_map(fam: _Family, request: _Request, prompt: np.ndarray) -> tuple[np.ndarray, list[str]] | None:
    """Where each of a request's messages starts in its `prompt` (the response,
    one message more, starts at the generation prompt), and their roles, from
    the render's boundaries (`compare.messages.MessageBounds`, as the score
    job attributes ids); None without messages or a renderer, or when the
    ids do not decode byte for byte."""
    messages, tools = request
    if fam.comparator is None or fam.tracker is None or fam.render is None or not messages:
        return None
    raw = fam.comparator.decode(prompt.tolist()).encode("utf-8")
    offsets = id_offsets(fam.comparator.segmenter, prompt, len(raw))
    if offsets is None:
        return None
    render = fam.render
    n = len(messages)
    try:
        full = render(messages, tools).encode("utf-8")
    except Exception:  # the template refuses this request: the rendered blocks name the messages
        return None
    markers = [fam.comparator.decode([i]).encode("utf-8") for i in fam.boundary]
    openers = fam.tracker.openers
    role0 = str(messages[0].get("role", ""))
    bounds = MessageBounds(
        lambda k: render(messages[:k], tools), n, full, openers=openers, first_role=role0,
        render_history=lambda k: render(history_messages(messages, k), tools),
    )  # fmt: skip
    in_render = [bounds.prefix_len(k) for k in range(n)] + [len(full)]  # the response starts where the render ends
    byte_starts = map_offsets(full, raw, in_render, [m for m in markers if m])  # the engine's prompt may differ in places
    starts = np.searchsorted(offsets[1:], byte_starts, side="right")  # the id holding each message's first byte
    return np.maximum.accumulate(starts), [str(m.get("role", "unknown")) for m in messages] + ["assistant"]


def _message_at(found: tuple[np.ndarray, list[str]] | None, table: Any, at: np.ndarray) -> tuple[np.ndarray, list[str]]:
    """The message index and role of the ids at positions `at`: from `found`
    (`_message_map`) when the request's messages were found, else the
    rendered block of `table` (a `MessageTable`); ids before the first
    message take their block's role ("unknown" before any marker)."""
    blocks = np.searchsorted(table.starts, at, side="right") - 1
    block_roles = [*table.roles, "unknown"]  # index -1: before the first marker
    if found is None:
        return blocks, [block_roles[b] for b in blocks.tolist()]
    index = np.searchsorted(found[0], at, side="right") - 1
    roles = found[1]
    return index, [roles[i] if i >= 0 else block_roles[b] for i, b in zip(index.tolist(), blocks.tolist())]


def _session_hints(conversations: Iterable[list[tuple[Any, Any]]], matcher: str, rows: Iterable[np.ndarray], n: int) -> np.ndarray | None:
    """The `hints` argument of `assemble_calls` (`n` call rows, -1 where
    none): per session, its calls' (messages, response) in order and their
    rows; None when no call has a hint."""
    out = np.full(n, -1, dtype=np.int64)
    found = False
    for conv, r in zip(conversations, rows):
        h = np.asarray(message_hints(conv, matcher), dtype=np.int64)
        if (h >= 0).any():
            found = True
            out[r] = np.where(h >= 0, r[np.maximum(h, 0)], -1)
    return out if found else None


def _object_batch(sessions: Sessions, matcher: str | None = None) -> _Batch:
    calls = list(concat.from_iterable(sessions.calls))
    requests: list[_Request] = [(c.messages, c.tools) for c in calls]  # what chains keep of the calls
    args = _csr(sessions)
    args["order"] = None
    if matcher is not None:  # rows: the calls in session order, as given
        starts = args["session_offsets"].tolist()
        args["hints"] = _session_hints(
            ([(c.messages, c.response) for c in cs] for cs in sessions.calls), matcher,
            (np.arange(a, b, dtype=np.int64) for a, b in zip(starts[:-1], starts[1:])), len(calls),
        )  # fmt: skip
    ended = [c.finish_reason == "length" for c in calls]
    args["length"] = np.asarray(ended, dtype=bool) if any(ended) else None
    index = list(map(attrgetter("call_index"), calls))
    if None in index:  # a call without one: its place in its session
        index = [c.call_index if c.call_index is not None else k for cs in sessions.calls for k, c in enumerate(cs)]
    sources = list(map(attrgetter("source"), calls))  # the events keep these, never the calls
    return _Batch(
        sessions.ids, list(map(len, sessions.calls)), np.asarray(index, dtype=np.int64), args,
        lambda g: calls[g].prompt_ids, lambda g: calls[g].completion_ids, sources.__getitem__, sum(map(len, args["completion"])),
        requests.__getitem__,
    )  # fmt: skip


def _list_chunks(table: Any, name: str, *, dtype: Any, required: bool) -> list[tuple[np.ndarray, np.ndarray]] | None:
    """A list column, chunk by chunk, as (flat values, int64 offsets from 0)
    read in place (a Parquet file read whole has a chunk per row group:
    they are not copied into one), checked: no null list (unless not
    required: then None for a missing column), no null value, ids within
    0 .. 2**32-1. Raises `CallsError` naming the column and row."""
    pa, pc = _deps.pyarrow(), _deps.pyarrow_compute()

    if name not in table.column_names:
        if required:
            raise CallsError(f"the capture has no column {name!r}; its columns are {sorted(table.column_names)}")
        return None
    col = table.column(name)
    if not (pa.types.is_list(col.type) or pa.types.is_large_list(col.type)):
        raise CallsError(f"column {name!r} must be a list column, got {col.type}")
    if col.null_count and required:
        row = int(np.flatnonzero(np.asarray(col.is_null()))[0])
        raise CallsError(f"row {row}: {name!r} is null")
    out = []
    first_row = 0
    for chunk in col.chunks if isinstance(col, pa.ChunkedArray) else [col]:
        # The chunk's own buffers: its offsets index its child values.
        offsets = np.asarray(chunk.offsets, dtype=np.int64)
        flat = chunk.values
        if offsets[0] != 0 or offsets[-1] != len(flat):  # a slice of a longer array
            flat = flat.slice(int(offsets[0]), int(offsets[-1] - offsets[0]))
            offsets = offsets - offsets[0]

        def row_of(at: int, offsets: np.ndarray = offsets, first_row: int = first_row) -> int:
            return first_row + int(np.searchsorted(offsets, at, side="right")) - 1

        if dtype is np.uint32:
            if flat.null_count:
                raise CallsError(f"row {row_of(int(np.flatnonzero(np.asarray(flat.is_null()))[0]))}: {name!r} holds a null id")
            if not pa.types.is_integer(flat.type):
                raise CallsError(f"column {name!r} must hold ints, got {flat.type}")
            values = np.asarray(flat)
            if values.dtype != np.uint32:
                bad = (values < 0) | (values > MAX_ID) if len(values) else np.zeros(0, dtype=bool)
                if bad.any():
                    at = int(np.argmax(bad))
                    row = row_of(at)
                    raise CallsError(
                        f"row {row}: {name}[{at - offsets[row - first_row]}] = {int(values[at])} is not an id (0 .. 2**32-1)"
                    )
                values = values.astype(np.uint32)
        elif pa.types.is_float32(flat.type) and not flat.null_count:
            values = np.asarray(flat)  # as it is
        else:
            values = np.asarray(pc.fill_null(flat.cast(pa.float32()), np.float32(np.nan)), dtype=np.float32)
        out.append((values, offsets))
        first_row += len(chunk)
    return out or [(np.zeros(0, dtype=dtype), np.zeros(1, dtype=np.int64))]


def _flat(chunks: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """Chunks of a list column as one (values, offsets) pair (copied only when there are several)."""
    if len(chunks) == 1:
        return chunks[0]
    starts = np.cumsum([0] + [len(v) for v, _ in chunks[:-1]])
    return np.concatenate([v for v, _ in chunks]), np.concatenate([[0]] + [o[1:] + s for (_, o), s in zip(chunks, starts)])


class _Rows:
    """A list column's rows, in its chunks (see `_list_chunks`)."""

    def __init__(self, chunks: list[tuple[np.ndarray, np.ndarray]]) -> None:
        self.chunks = chunks
        self.starts = np.cumsum([0] + [len(o) - 1 for _, o in chunks]).tolist()

    def lengths(self) -> np.ndarray:
        return np.concatenate([np.diff(o) for _, o in self.chunks])

    def __getitem__(self, row: int) -> np.ndarray:
        k = bisect.bisect_right(self.starts, row) - 1
        values, offsets = self.chunks[k]
        i = row - self.starts[k]
        return values[offsets[i] : offsets[i + 1]]

    def arg(self) -> tuple[Any, Any]:
        """As `assemble_calls` takes them: (values, offsets), or lists of chunks."""
        if len(self.chunks) == 1:
            return self.chunks[0]
        return [v for v, _ in self.chunks], [o for _, o in self.chunks]


def _row_of_values(lengths: np.ndarray, wrong: np.ndarray) -> np.ndarray:
    """The rows of a list column (row lengths `lengths`) holding the flat values marked in `wrong`."""
    at = np.flatnonzero(wrong)
    if not len(at):
        return at
    return np.searchsorted(np.cumsum(lengths), at, side="right")


def _screen(table: Any, name: str, on_error: OnError) -> tuple[Any, np.ndarray | None, list[BadCall]] | None:
    """The rows of a capture table the columnar path may take, checked by the
    one reader's rules: (the table of good rows, their row numbers in
    `table` (None: all rows), the bad rows as `BadCall`s with the reader's
    reason, `chains.calls.parse_call`). None when a column has a type the
    columnar path does not read (then every row goes through the reader).
    Raises `CallsError` for the first bad row under `on_error="fail"`."""
    pa, pc = _deps.pyarrow(), _deps.pyarrow_compute()
    types = pa.types
    n = table.num_rows
    names = set(table.column_names)

    def typ(col: str) -> Any:
        return table.column(col).type if col in names else None

    def is_list_of(t: Any, *kinds: Any) -> bool:
        return t is not None and (types.is_list(t) or types.is_large_list(t)) and any(k(t.value_type) for k in kinds)

    def texts(t: Any) -> bool:
        return t is None or types.is_string(t) or types.is_large_string(t) or types.is_binary(t) or types.is_large_binary(t) or types.is_null(t)

    sid_t = typ("session_id")
    if sid_t is None:
        raise CallsError(f"the capture has no column 'session_id'; its columns are {sorted(table.column_names)}")
    for col in ("prompt_ids", "completion_ids"):
        if col not in names:
            raise CallsError(f"the capture has no column {col!r}; its columns are {sorted(table.column_names)}")
    if (
        not (types.is_string(sid_t) or types.is_large_string(sid_t) or types.is_integer(sid_t))
        or not all(is_list_of(typ(c), types.is_integer) for c in ("prompt_ids", "completion_ids"))
        or (typ("completion_logprobs") is not None and not is_list_of(typ("completion_logprobs"), types.is_floating, types.is_integer))
        or (typ("call_index") is not None and not (types.is_integer(typ("call_index")) or types.is_null(typ("call_index"))))
        or not all(texts(typ(c)) for c in ("messages", "tools", "finish_reason", "metadata"))
    ):
        return None
    sizes = row_sizes(table)  # the dump's bound on a record (MAX_RECORD_BYTES), one owner
    big = sizes > MAX_RECORD_BYTES
    bad = np.asarray(table.column("session_id").is_null()) | big
    for col in ("prompt_ids", "completion_ids"):
        c = table.column(col)
        bad = bad | np.asarray(c.is_null())
        lengths = np.asarray(pc.fill_null(pc.list_value_length(c), 0), dtype=np.int64)
        flat = pc.list_flatten(c)
        # per id, only when some id may be wrong (uint32 ids without nulls are all ids)
        if flat.null_count or (not types.is_uint32(flat.type) and len(flat)):
            wrong = np.asarray(flat.is_null())
            if not types.is_uint32(flat.type):
                v = np.asarray(pc.fill_null(flat, 0).cast(pa.int64() if types.is_signed_integer(flat.type) else pa.uint64()))
                wrong = wrong | (v < 0) | (v > MAX_ID)
            bad[_row_of_values(lengths, wrong)] = True
        if col == "prompt_ids":
            bad = bad | (lengths == 0)
    if "completion_logprobs" in names:
        lp = table.column("completion_logprobs")
        given = np.asarray(lp.is_valid())
        lp_len = np.asarray(pc.fill_null(pc.list_value_length(lp), 0), dtype=np.int64)
        c_len = np.asarray(pc.fill_null(pc.list_value_length(table.column("completion_ids")), 0), dtype=np.int64)
        bad = bad | (given & (lp_len != c_len))
        flat = pc.list_flatten(lp)
        if len(flat):
            # read in place when they are floats without nulls (a copy of millions of
            # logprobs costs more here than the checks); a float32 that is finite is in range
            if types.is_floating(flat.type) and not flat.null_count and flat.type.bit_width in (32, 64):
                v = np.asarray(flat)
            else:
                v = np.asarray(pc.fill_null(flat.cast(pa.float64()), 0.0), dtype=np.float64)
            wrong = ~np.isfinite(v)
            if v.dtype != np.float32:
                wrong |= np.abs(v) > np.finfo(np.float32).max
            bad[_row_of_values(lp_len, wrong)] = True
    if "call_index" in names and not types.is_null(typ("call_index")):
        ci = table.column("call_index")
        v = np.asarray(pc.fill_null(ci.cast(pa.float64()), 0.0))
        bad = bad | (v < 0) | (v >= 2.0**63)
    if names & {"messages", "tools", "metadata"}:
        m, t, md = (table.column(c).to_pylist() if c in names else [None] * n for c in ("messages", "tools", "metadata"))
        bad = bad | np.asarray([r is not None for r in check_call_texts(m, t, md)], dtype=bool)
    if not bad.any():
        return table, None, []
    out: list[BadCall] = []
    for r in np.flatnonzero(bad).tolist():
        where = f"{name}:row {r}" if name else f"row {r}"
        c = too_large(where, int(sizes[r])) if big[r] else parse_call(table.slice(r, 1).to_pylist()[0], where, json_text=True)
        if not isinstance(c, BadCall):
            return None  # the reader takes a row the columnar checks refused: let the reader decide every row
        if on_error == "fail":
            raise CallsError(f"{c.source}: {c.reason}")
        out.append(c)
    keep = np.flatnonzero(~bad)
    return table.take(pa.array(keep)), keep, out


def _table_batches(
    table: Any, name: str, on_error: OnError, matcher: str | None = None
) -> tuple[list[_Batch], list[BadCall], int] | None:
    """A capture table (Arrow, or a Parquet file read whole) as batches of
    sessions for the matching, without a Python object per call: the ids are
    read in place from the list columns, and the calls are put in session and
    call order by a permutation the matching follows. Rows the one reader
    refuses are bad calls (`_screen`); None when a column's type is one the
    columnar path does not read (then the rows go through the reader)."""
    pa, pc = _deps.pyarrow(), _deps.pyarrow_compute()

    screened = _screen(table, name, on_error)
    if screened is None:
        return None
    table, row_of, screened_bad = screened
    n = table.num_rows

    def src(row: int) -> str:
        r = row if row_of is None else int(row_of[row])
        return f"{name}:row {r}" if name else f"row {r}"

    sid = table.column("session_id")
    if sid.null_count:
        raise CallsError(f"{src(int(np.flatnonzero(np.asarray(sid.is_null()))[0]))}: missing field 'session_id'")
    prompt_chunks = _list_chunks(table, "prompt_ids", dtype=np.uint32, required=True)
    completion_chunks = _list_chunks(table, "completion_ids", dtype=np.uint32, required=True)
    assert prompt_chunks is not None and completion_chunks is not None
    prompts = _Rows(prompt_chunks)  # read in place, chunk by chunk: prompts are most of a capture
    completion = _flat(completion_chunks)
    empty = np.flatnonzero(prompts.lengths() == 0)
    if len(empty):
        raise CallsError(f"{src(int(empty[0]))}: 'prompt_ids' is empty")
    lp_chunks = _list_chunks(table, "completion_logprobs", dtype=np.float32, required=False)
    lps = None if lp_chunks is None else _flat(lp_chunks)
    c_len = np.diff(completion[1])
    if lps is None:
        logprobs = np.full(len(completion[0]), np.nan, dtype=np.float32)
    else:
        lp_len = np.diff(lps[1])
        given = np.asarray(pc.is_valid(table.column("completion_logprobs")))
        wrong = np.flatnonzero(given & (lp_len != c_len))
        if len(wrong):
            r = int(wrong[0])
            raise CallsError(f"{src(r)}: 'completion_logprobs' has {int(lp_len[r])} values for {int(c_len[r])} completion ids")
        logprobs = np.full(len(completion[0]), np.nan, dtype=np.float32)
        rows = np.flatnonzero(given)
        if len(rows) == n and np.array_equal(lps[1], completion[1]):  # laid out as the completions: as they are
            logprobs = lps[0]
        elif len(rows):  # each given row's values into its completion's place
            lens = lp_len[rows]
            src_at = np.repeat(lps[1][:-1][rows], lens) + (np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens))
            dst_at = np.repeat(completion[1][:-1][rows], lens) + (np.arange(int(lens.sum())) - np.repeat(np.cumsum(lens) - lens, lens))
            logprobs[dst_at] = lps[0][src_at]
    enc = pc.dictionary_encode(sid.cast(pa.string()) if not pa.types.is_string(sid.type) else sid)
    enc = enc.combine_chunks() if isinstance(enc, pa.ChunkedArray) else enc
    code = np.asarray(enc.indices, dtype=np.int64)
    ids = [str(x) for x in enc.dictionary.to_pylist()]
    if "call_index" in table.column_names:
        ci = table.column("call_index")
        given_ix = np.asarray(ci.is_valid())
        index = np.asarray(ci.cast(pa.int64()).fill_null(-1), dtype=np.int64)
        if (index[given_ix] < 0).any():
            raise CallsError(f"{src(int(np.flatnonzero(given_ix & (index < 0))[0]))}: 'call_index' must be a non-negative int")
    else:
        given_ix, index = np.zeros(n, dtype=bool), np.full(n, -1, dtype=np.int64)
    order, bad_at, index = call_order(code, index, given_ix)
    bad = screened_bad + [
        BadCall(src(r), f"call_index {int(index[r])} repeats an earlier call of session {ids[code[r]]!r}", ids[code[r]], "repeated_call")
        for r in order[bad_at].tolist()
    ]
    if bad and on_error == "fail":
        raise CallsError(f"{bad[0].source}: {bad[0].reason}")
    order = order[~bad_at]
    counts = np.bincount(code[order], minlength=len(ids)).tolist()
    c_vals, c_off = completion
    messages_col = table.column("messages") if "messages" in table.column_names else None
    tools_col = table.column("tools") if "tools" in table.column_names else None
    response_col = table.column("response") if "response" in table.column_names else None
    length = None  # per row: the completion ended on finish_reason="length"
    if "finish_reason" in table.column_names:
        fr = table.column("finish_reason")
        if not pa.types.is_null(fr.type):
            word = b"length" if pa.types.is_binary(fr.type) or pa.types.is_large_binary(fr.type) else "length"
            length = np.asarray(pc.fill_null(pc.equal(fr, pa.scalar(word, fr.type)), False), dtype=bool)
    batches = []
    start = 0
    for lo in range(0, len(ids), BATCH_SESSIONS):
        part = counts[lo : lo + BATCH_SESSIONS]
        rows_part = order[start : start + sum(part)]
        start += sum(part)
        args = {
            "prompts": prompts.arg(), "completion": c_vals, "completion_offsets": c_off, "logprobs": logprobs,
            "session_offsets": np.concatenate([[0], np.cumsum(part)]).astype(np.int64), "order": rows_part.astype(np.int64),
            "length": length,
        }  # fmt: skip
        if matcher is not None and messages_col is not None:  # computed when the batch is matched
            args["hints"] = partial(_table_hints, messages_col, response_col, rows_part, part, n, matcher)

        def ids_of(g: int, rows: np.ndarray = rows_part) -> np.ndarray:
            return prompts[int(rows[g])]

        def done_of(g: int, rows: np.ndarray = rows_part) -> np.ndarray:
            r = int(rows[g])
            return c_vals[c_off[r] : c_off[r + 1]]

        def source_of(g: int, rows: np.ndarray = rows_part) -> str:
            return src(int(rows[g]))

        sampled = int(np.diff(c_off)[rows_part].sum())
        def messages_of(g: int, rows: np.ndarray = rows_part) -> _Request:
            if messages_col is None:
                return None, None
            r = int(rows[g])
            try:
                messages = parse_messages(messages_col[r].as_py())
                tools = parse_tools(tools_col[r].as_py()) if tools_col is not None else None
            except CallsError as e:
                raise CallsError(f"{src(r)}: {e}") from e
            return messages, tools

        batches.append(
            _Batch(ids[lo : lo + BATCH_SESSIONS], part, index[rows_part], args, ids_of, done_of, source_of, sampled, messages_of)
        )
    return batches, bad, len(ids)


def _table_hints(messages_col: Any, response_col: Any, rows: np.ndarray, counts: list[int], n: int, matcher: str) -> np.ndarray | None:
    """`_session_hints` of a batch of a capture table: `rows` its rows in
    session and call order, `counts` its calls per session; the messages (and
    responses) are JSON text per row."""
    pa = _deps.pyarrow()
    take = pa.array(rows, type=pa.int64())
    texts = messages_col.take(take).to_pylist()
    responses = response_col.take(take).to_pylist() if response_col is not None else [None] * len(rows)
    bounds = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64).tolist()
    return _session_hints(
        (list(zip(parse_message_texts(texts[a:b]), responses[a:b])) for a, b in zip(bounds[:-1], bounds[1:])), matcher,
        (rows[a:b].astype(np.int64) for a, b in zip(bounds[:-1], bounds[1:])), n,
    )  # fmt: skip


class _Part:
    """One batch's chains, made session by session when first read (a
    Python object per chain costs more than matching its calls)."""

    __slots__ = ("ids", "messages", "fam", "flat", "starts", "calls_start", "counts", "_cols")

    def __init__(self, batch: _Batch, out: dict[str, np.ndarray], fam: _Family) -> None:
        # what the chains keep of the batch: its session ids and its calls' messages, never their ids
        self.ids, self.messages, self.fam = batch.ids, batch.messages, fam
        # what the chains keep: their ids, masks, logprobs and call runs (one array each for the batch)
        self.flat = {k: out[k] for k in ("ids", "loss_mask", "logprobs", "span_start")}
        self.flat["span_call_index"] = batch.call_index[out["span_call"]] if len(out["span_call"]) else out["span_call"]
        # chains are numbered session by session: each session's first chain
        self.counts = np.bincount(out["chain_session"], minlength=len(batch.ids))
        self.starts: list[int] = np.concatenate([[0], np.cumsum(self.counts)]).tolist()
        self.calls_start: list[int] = np.concatenate([[0], np.cumsum(batch.counts)]).tolist()  # each session's first call
        names = ("chain_offsets", "span_offsets", "chain_open", "chain_last_call", "chain_prompt_len", "chain_parent", "chain_shared")
        self._cols = [out[k] for k in names]

    def chains(self, s: int) -> list[Chain]:
        """Session `s`'s chains (its place in the batch)."""
        lo, hi = self.starts[s], self.starts[s + 1]
        off, span, opened, last, plen, parent, shared = (c[lo : hi + 1].tolist() for c in self._cols)
        sid, flat, fam, messages = self.ids[s], self.flat, self.fam, self.messages
        return [
            Chain(sid, j, flat, (off[j], off[j + 1]), (span[j], span[j + 1]), opened[j], fam, messages, (last[j], plen[j]),
                  (None if parent[j] < 0 else parent[j] - lo, shared[j]))
            for j in range(hi - lo)
        ]  # fmt: skip


class ChainsBySession(Mapping[str, list[Chain]]):
    """Each session's chains (`sessions[session_id]`, in order), in the
    sessions' order; a session's `Chain` objects are made when it is first
    read (they are views of the assembly's arrays)."""

    def __init__(self, parts: Sequence[_Part] = ()) -> None:
        self._parts = list(parts)
        self._where = {sid: (k, s) for k, part in enumerate(self._parts) for s, sid in enumerate(part.ids)}
        self._made: dict[str, list[Chain]] = {}

    def __getitem__(self, session_id: str) -> list[Chain]:
        got = self._made.get(session_id)
        if got is None:
            k, s = self._where[session_id]
            got = self._made.setdefault(session_id, self._parts[k].chains(s))  # one list per session, across threads
        return got

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._where

    def buffers(self) -> list[Mapping[str, np.ndarray]]:
        """The flat arrays of each batch of sessions (what the chains are views of)."""
        return [p.flat for p in self._parts]

    def counts(self) -> np.ndarray:
        """Chains per session, in the sessions' order."""
        return np.concatenate([p.counts for p in self._parts]) if self._parts else np.zeros(0, dtype=np.int64)

    def __repr__(self) -> str:
        return f"ChainsBySession({len(self):,} sessions, {int(self.counts().sum()):,} chains)"


def _build(batch: _Batch, out: dict[str, np.ndarray], fam: _Family) -> tuple[_Part, int, Callable[[int], Event]]:
    """The batch's chains, and its events as a count and a maker (`Events`)."""
    part = _Part(batch, out, fam)
    first_chain = part.starts  # global index of each session's first chain
    if not len(out["event_call"]):
        return part, 0, lambda k: None  # type: ignore[return-value]
    call_chain = out["call_chain"]
    session_start = part.calls_start
    cols = {k: out[f"event_{k}"] for k in ("call", "kind", "policy", "chain", "to_chain", "position", "removed", "masked", "dropped")}
    sids, source, call_index = batch.ids, batch.source, batch.call_index  # what a plain event reads: never the calls' ids

    def plain(k: int) -> Event:  # read from the arrays when asked for (most events never are)
        g_call = int(cols["call"][k])
        s = bisect.bisect_right(session_start, g_call) - 1
        base = first_chain[s]
        kind = KINDS[cols["kind"][k]]
        chain_g, to_g = int(cols["chain"][k]), int(cols["to_chain"][k])
        return Event(
            sids[s], int(call_index[g_call]), kind, "extend" if kind == "extend" else POLICIES[cols["policy"][k]],
            None if chain_g < 0 else chain_g - base, None if to_g < 0 else to_g - base, int(cols["position"][k]),
            int(cols["removed"][k]), int(cols["masked"][k]), int(cols["dropped"][k]), source=source(g_call),
        )  # fmt: skip

    def make(k: int) -> Event:
        ev = plain(k)
        g_call, kind, chain_g, pos = int(cols["call"][k]), ev.kind, int(cols["chain"][k]), ev.position
        if chain_g >= 0 and fam.tracker is not None:
            lo = session_start[bisect.bisect_right(session_start, g_call) - 1]
            before = np.flatnonzero(call_chain[lo:g_call] == chain_g)
            if len(before):
                prev = lo + int(before[-1])  # the last call the chain took before this one
                old = np.concatenate([batch.prompt(prev), batch.completion(prev)])  # the chain's ids at this call
                found = _message_map(fam, batch.messages(prev), batch.prompt(prev))
                index, role = _message_at(found, fam.tracker.table(old), np.asarray([min(pos, len(old) - 1)]))
                ev.message_index, ev.role = int(index[0]), role[0]
                if kind in ("seam_drift", "rewrite", "new_root"):
                    ev.diagnosis = _diagnosis(fam, old, batch.prompt(g_call), pos, seam=kind == "seam_drift")
        return ev

    if fam.tracker is not None:  # messages and diagnoses read the calls' ids: made now, so the input is not kept
        made = [make(k) for k in range(len(cols["call"]))]
        return part, len(made), made.__getitem__
    return part, len(cols["call"]), plain


class _Tally:
    """Event counts by kind, from the matching's arrays (no `Event` made)."""

    def __init__(self) -> None:
        self.masked: Counter[str] = Counter()
        self.dropped: Counter[str] = Counter()
        self.forks: Counter[str] = Counter()
        self.kinds: Counter[str] = Counter()

    def add(self, out: dict[str, np.ndarray]) -> None:
        kind, policy = out["event_kind"], out["event_policy"]
        if not len(kind):
            return
        fork = POLICIES.index("fork")
        for code, name in enumerate(KINDS):
            at = kind == code
            if not at.any():
                continue
            self.kinds[name] += int(at.sum())
            if (m := int(out["event_masked"][at].sum())):
                self.masked[name] += m
            if (d := int(out["event_dropped"][at].sum())):
                self.dropped[name] += d
            if name != "extend" and (f := int((policy[at] == fork).sum())):
                self.forks[name] += f


def _summary(
    sessions: ChainsBySession, tally: _Tally, calls: int, sampled: int, delivered: int, bad: int,
    policy: Mapping[str, str], window: int,
) -> AssemblySummary:  # fmt: skip
    counts, times = np.unique(sessions.counts(), return_counts=True)
    return AssemblySummary(
        sessions=len(sessions),
        calls=calls,
        chains=int(np.dot(counts, times)),
        chains_per_session=dict(zip(counts.tolist(), times.tolist())),
        sampled_ids=sampled,
        delivered_ids=delivered,
        masked_by_cause=dict(tally.masked),
        dropped_by_cause=dict(tally.dropped),
        forks_by_cause=dict(tally.forks),
        events_by_kind=dict(tally.kinds),
        bad_records=bad,
        policy=dict(policy),
        realign_window=window,
    )


#: Sessions handed to the Rust matching at once (progress is reported between batches).
BATCH_SESSIONS = 2048


def _run(
    batch: _Batch, fam: _Family, pol: Mapping[str, str], window: int, threads: int | None, leaves: str, tally: _Tally
) -> tuple[_Part, int, Callable[[int], Event], int]:
    """The Rust matching of one batch: its chains, its events (a count and a
    maker, counted into `tally`) and the ids delivered with loss 1."""
    a = batch.args
    hints = a.get("hints")
    if callable(hints):
        hints = hints()
    out = assemble_calls(
        a["prompts"], a["completion"], a["completion_offsets"], a["logprobs"], a["session_offsets"], order=a["order"],
        trim_ids=fam.trim, max_trim=fam.max_trim, realign_window=window,
        policy=(pol["seam_drift"], pol["rollback"], pol["rewrite"], pol["new_root"]), boundary_ids=fam.boundary,
        length=a["length"], hints=hints, leaves=leaves, threads=threads,
    )  # fmt: skip
    tally.add(out)
    return (*_build(batch, out, fam), int(np.count_nonzero(out["loss_mask"])))


def assemble(
    calls: str | Path | Iterable[Call | dict[str, Any]],
    *,
    family: Any = None,
    tokenizer: Any = None,
    policy: str | dict[str, str] | None = None,
    realign_window: int = DEFAULT_REALIGN_WINDOW,
    on_error: OnError = "fail",
    threads: int | None = None,
    progress: Callable[[int, int], None] | None = None,
    leaves: str = "all",
    matcher: str | None = None,
) -> Assembly:
    """Captured calls to trainable chains, per session.

    Each call's prompt is matched in Rust against its session's open chains
    (longest common prefix, with the family's trailing-trim tolerance): a
    prompt that extends a chain adds its new ids (loss 0) and the completion
    (loss 1, with its logprobs); any other call is an `Event` handled by the
    policy of its cause (`resolve_policy`). Every chain is checked before it
    is returned: each id with loss 1 follows exactly its call's prompt and
    the completion ids before it, and carries the engine's logprob.

    Args:
        calls: a capture file (.jsonl, .jsonl.gz, .parquet), a pyarrow Table of
            capture records (list columns, read in place: the fast path for
            millions of calls), or `Call`s / dicts.
        family: the family name (trim ids, markers); found from the tokenizer when None.
        tokenizer: a transformers tokenizer, a folder, or `fixture:NAME`; without
            one, no trim tolerance, no message roles and no diagnosis.
        policy: None (realign seam drift, fork the rest), one policy, or `{cause: policy}`.
        realign_window: seam drift is a departure within this many ids of a chain's end.
        on_error: "fail" (raise `CallsError` for the first bad record) or "skip" (count it).
        threads: threads for the matching (None: all cores; more than the cores are clamped to them).
        progress: called with (sessions assembled, sessions) after each batch.
        leaves: "all" (one chain per leaf of each session's forest) or
            "drop_retries" (an attempt that a retry superseded, i.e. a chain a
            rollback branched off that took no call after it, is dropped from
            the branch point on and counted as `superseded`; the retry's chain
            keeps the history before it).
        matcher: None (the ids alone place each call), or a message matcher
            of Miles' session server ("strict", "loose_tool_call",
            "role_content_only"; `tito_fast.chains.matchers`): a call whose ids
            extend no chain, but whose `messages` extend an earlier call's
            conversation (its messages and response) under the matcher, is
            classified against that call's chain (a harness that re-serialises
            tool arguments). The ids stay the ground truth: what a call
            extends, and every check, is unchanged.

    Example:
        >>> a = assemble([{"session_id": "s", "prompt_ids": [1, 2], "completion_ids": [3]},
        ...               {"session_id": "s", "prompt_ids": [1, 2, 3, 4], "completion_ids": [5]}])
        >>> a.sessions["s"][0].ids.tolist(), a.sessions["s"][0].loss_mask.tolist()
        ([1, 2, 3, 4, 5], [0, 0, 1, 0, 1])
    """
    if isinstance(realign_window, bool) or not isinstance(realign_window, int) or realign_window < 0:
        raise ValueError(f"realign_window must be a non-negative int, got {realign_window!r}")
    pol = resolve_policy(policy)
    if leaves not in LEAVES:
        raise ValueError(f"leaves must be one of {LEAVES}, got {leaves!r}")
    if matcher is not None:
        check_matcher(matcher)
    fam = _family(tokenizer, family)
    with _collector_paused():  # the tokenizer above loads with the collector on
        table, name = _as_table(calls)
        records: Any = calls
        if table is not None:
            if table.num_rows == 0 and isinstance(calls, (str, Path)):
                raise CallsError(f"{calls}: the capture holds no records")
            got = _table_batches(table, name, on_error, matcher)
            if got is not None:
                batches, bad, total = got
                return _assemble_batches(iter(batches), total, bad, fam, pol, realign_window, threads, progress, leaves)
            records = [  # a column type the columnar path does not read: every row through the one reader
                parse_call(row, f"{name}:row {r}" if name else f"row {r}", json_text=True) for r, row in enumerate(table.to_pylist())
            ]
        good, bad = read_calls(records, on_error=on_error)
        if not good and not bad and isinstance(calls, (str, Path)):
            raise CallsError(f"{calls}: the capture holds no records")
        sessions, repeated = group_sessions(good)
        if repeated and on_error == "fail":
            raise CallsError(f"{repeated[0].source}: {repeated[0].reason}")
        bad.extend(repeated)
        parts = (
            _object_batch(Sessions(sessions.ids[lo : lo + BATCH_SESSIONS], sessions.calls[lo : lo + BATCH_SESSIONS]), matcher)
            for lo in range(0, len(sessions.ids), BATCH_SESSIONS)
        )
        return _assemble_batches(parts, len(sessions.ids), bad, fam, pol, realign_window, threads, progress, leaves)


@contextmanager
def _collector_paused() -> Iterator[None]:
    """The cyclic garbage collector paused for an assembly. Chains and events
    are many small objects that live as long as the assembly: the collector
    finds nothing among them. Left on, it rescans them as they pile up (a
    session of a million calls went superlinear), and the objects an
    assembly makes set off full collections of the caller's whole heap (in a
    process holding a large capture as Python lists, a full collection costs
    more than the assembly)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _as_table(calls: Any) -> tuple[Any, str]:
    """(a pyarrow Table, its file name) for Arrow and Parquet input, else (None, "")."""
    if isinstance(calls, (str, Path)) and str(calls).endswith(".parquet"):
        pq = _deps.parquet()

        p = Path(calls)
        try:
            dump_format(p)  # the dump's rule for names and contents (a folder, no such file), one owner
        except DumpError as e:
            raise CallsError(str(e)) from None
        try:
            if oversized_row_groups(pq.ParquetFile(p).metadata):  # rows not to decode: the reader reports them
                return None, ""
            return pq.read_table(p), p.name
        except Exception as e:  # pyarrow's own error types
            what = "cannot be read in the memory available" if isinstance(e, MemoryError) else "not a readable Parquet file"
            raise CallsError(f"{calls}: {what} ({type(e).__name__}: {e})") from e
    if type(calls).__module__.startswith("pyarrow") and hasattr(calls, "column_names"):
        return calls, ""
    return None, ""


def _assemble_batches(
    batches: Iterator[_Batch], total: int, bad: list[BadCall], fam: _Family, pol: Mapping[str, str], window: int,
    threads: int | None, progress: Callable[[int, int], None] | None, leaves: str = "all",
) -> Assembly:  # fmt: skip
    parts: list[_Part] = []
    events = Events()
    tally = _Tally()
    n_calls = sampled = delivered = done = 0
    for batch in batches:  # (the collector is paused: `_collector_paused`)
        chains, count, make, got = _run(batch, fam, pol, window, threads, leaves, tally)
        n_calls += len(batch.call_index)
        sampled += batch.sampled
        delivered += got
        parts.append(chains)
        events.add(count, make)
        done += len(batch.ids)
        if progress is not None:
            progress(done, total)
    by_session = ChainsBySession(parts)
    summary = _summary(by_session, tally, n_calls, sampled, delivered, len(bad), pol, window)
    return Assembly(by_session, events, bad, summary)

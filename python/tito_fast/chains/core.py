"""`assemble`: captured calls to trainable chains (see `tito_fast.chains`)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from tito_fast._core import assemble_calls
from tito_fast.chains.calls import BadCall, Call, CallsError, OnError, Sessions, group_sessions, read_calls

#: Event kinds, in the order of the Rust codes.
KINDS = ("extend", "seam_drift", "rollback", "rewrite", "new_root")
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


@dataclass
class Chain:
    """One trainable sequence: ids in which every call's prompt is exactly
    the ids before its completion.

    `loss_mask` is 1 exactly on the ids the model sampled (each sampled id is
    1 in one chain only), `logprobs` the engine's logprob there and NaN
    elsewhere. `call_index` (per id) is the call that added the id (its
    prompt's new ids or its completion). With a tokenizer, `message_index`
    and `role` (per id) are the rendered message block and its role.
    """

    session_id: str
    index: int
    ids: np.ndarray  # uint32
    loss_mask: np.ndarray  # uint8
    logprobs: np.ndarray  # float32
    span_start: np.ndarray  # int64: where each run of one call's ids starts
    span_call: np.ndarray  # int64: that call's call_index
    open: bool = True  # False: a later call forked off it
    _tracker: Any = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def call_index(self) -> np.ndarray:
        """The call_index of the call that added each id (int64)."""
        lengths = np.diff(np.append(self.span_start, len(self.ids)))
        return np.repeat(self.span_call, lengths)

    def _table(self) -> Any:
        if self._tracker is None:
            raise ValueError("message_index and role need a tokenizer: assemble(..., tokenizer=...)")
        return self._tracker.table(self.ids)

    @property
    def message_index(self) -> np.ndarray:
        """The rendered message block of each id (-1 before the first marker)."""
        t = self._table()
        return np.searchsorted(t.starts, np.arange(len(self.ids)), side="right") - 1

    @property
    def role(self) -> list[str]:
        """The role of the message block of each id ("unknown" before the first marker)."""
        t = self._table()
        roles = [*t.roles, "unknown"]  # index -1: before the first marker
        return [roles[i] for i in self.message_index.tolist()]

    @property
    def sampled(self) -> int:
        """Ids with loss 1."""
        return int(np.count_nonzero(self.loss_mask))

    def to_dict(self) -> dict[str, Any]:
        return {
            "session_id": self.session_id,
            "chain": self.index,
            "open": self.open,
            "ids": self.ids.tolist(),
            "loss_mask": self.loss_mask.tolist(),
            "logprobs": [None if math.isnan(x) else x for x in self.logprobs.tolist()],
            "call_index": self.call_index.tolist(),
        }


@dataclass
class Event:
    """A call that did not simply extend the chain extended last.

    `kind`: extend (another chain, or after trimming trailing ids), seam_drift,
    rollback, rewrite or new_root; `policy`: what was done (fork, realign,
    drop; "extend" for an extension); `chain`: the chain it was matched
    against (None: none open), `to_chain`: where the call went (None:
    dropped); `position`: the ids it shares with that chain, `message_index`
    and `role` the rendered message block there; `diagnosis`: what kind of
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
        return d

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
    """The chains of every session (`sessions[session_id]`, in order), the
    events, the bad records and the summary."""

    sessions: dict[str, list[Chain]]
    events: list[Event]
    bad: list[BadCall]
    summary: AssemblySummary

    def chains(self) -> list[Chain]:
        """Every chain, session by session."""
        return [c for cs in self.sessions.values() for c in cs]

    @property
    def nbytes(self) -> int:
        """Bytes held by the chains' arrays (ids, masks, logprobs, call runs)."""
        seen: set[int] = set()
        total = 0
        for c in self.chains():
            for a in (c.ids, c.loss_mask, c.logprobs, c.span_start, c.span_call):
                base = a.base if a.base is not None else a
                if id(base) not in seen:
                    seen.add(id(base))
                    total += base.nbytes
        return total


@dataclass
class _Family:
    """What assembly takes from a tokenizer and family."""

    trim: list[int]
    max_trim: int
    boundary: list[int]
    comparator: Any  # TokenSeqComparator or None
    tracker: Any  # RoleTracker or None


def _family(tokenizer: Any, family: Any) -> _Family:
    if tokenizer is None:
        if family is not None:
            raise ValueError("family needs a tokenizer (its trim ids and message markers are the tokenizer's ids)")
        return _Family([], 0, [], None, None)
    from tito_fast.chat.families import get_tito_tokenizer

    if isinstance(tokenizer, (str, Path)):
        from tito_fast.score.run import load_tokenizer

        tokenizer = load_tokenizer(str(tokenizer))
    if family is None:
        from tito_fast.chat.identify import family_of_tokenizer

        found = family_of_tokenizer(tokenizer)
        if found is None:
            from tito_fast.errors import FamilyError

            raise FamilyError("the tokenizer's chat template names no known family: pass family=")
        family = found[0]
    tito = get_tito_tokenizer(tokenizer, family)
    cmp = tito.create_comparator()
    tracker = cmp.role_tracker
    boundary = sorted(set(tracker.fixed) | set(tracker.named))
    return _Family(sorted(tito.trailing_token_ids or ()), int(tito.max_trim_tokens), boundary, cmp, tracker)


def _csr(sessions: Sessions) -> dict[str, Any]:
    """The Rust call layout: prompts as they are (one array each: agent prompts
    repeat their history, so they are never copied into one buffer);
    completions, logprobs and session bounds as flat arrays with offsets."""
    calls = [c for cs in sessions.calls for c in cs]
    completions = [c.completion_ids for c in calls]
    clen = np.fromiter(map(len, completions), dtype=np.int64, count=len(calls))
    nan = np.float32(np.nan)
    lps = [c.completion_logprobs if c.completion_logprobs is not None else np.full(len(c.completion_ids), nan, np.float32) for c in calls]
    return {
        "prompts": [c.prompt_ids for c in calls],
        "completion": np.concatenate(completions) if calls else np.zeros(0, dtype=np.uint32),
        "completion_offsets": np.concatenate([[0], np.cumsum(clen)]).astype(np.int64),
        "logprobs": np.concatenate(lps).astype(np.float32, copy=False) if calls else np.zeros(0, np.float32),
        "session_offsets": np.concatenate([[0], np.cumsum([len(cs) for cs in sessions.calls])]).astype(np.int64),
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


def _build(sessions: Sessions, out: dict[str, np.ndarray], fam: _Family) -> tuple[dict[str, list[Chain]], list[Event]]:
    calls = [c for cs in sessions.calls for c in cs]
    session_of_call = np.repeat(np.arange(len(sessions.ids)), [len(cs) for cs in sessions.calls])
    call_idx = [c.call_index if c.call_index is not None else k for cs in sessions.calls for k, c in enumerate(cs)]
    chain_off = out["chain_offsets"]
    span_off = out["span_offsets"]
    chain_session = out["chain_session"].tolist()
    span_call = np.asarray(call_idx, dtype=np.int64)[out["span_call"]] if len(out["span_call"]) else out["span_call"]
    by_session: dict[str, list[Chain]] = {sid: [] for sid in sessions.ids}
    first_chain: list[int] = []  # global index of each session's first chain
    counts: list[int] = [0] * len(sessions.ids)
    for s in chain_session:
        counts[s] += 1
    acc = 0
    for n in counts:
        first_chain.append(acc)
        acc += n
    for g, s in enumerate(chain_session):
        a, b = int(chain_off[g]), int(chain_off[g + 1])
        sa, sb = int(span_off[g]), int(span_off[g + 1])
        sid = sessions.ids[s]
        by_session[sid].append(
            Chain(
                sid, g - first_chain[s], out["ids"][a:b], out["loss_mask"][a:b], out["logprobs"][a:b],
                out["span_start"][sa:sb], span_call[sa:sb], bool(out["chain_open"][g]), fam.tracker,
            )  # fmt: skip
        )
    events: list[Event] = []
    call_chain = out["call_chain"]
    last_call_of_chain: dict[int, int] = {}  # global chain -> last global call in it (so far)
    ev_calls = out["event_call"].tolist()
    ev_at = 0
    n_events = len(ev_calls)
    for g_call in range(len(calls)):
        while ev_at < n_events and ev_calls[ev_at] == g_call:
            k = ev_at
            s = int(session_of_call[g_call])
            base = first_chain[s]
            kind = KINDS[int(out["event_kind"][k])]
            chain_g = int(out["event_chain"][k])
            to_g = int(out["event_to_chain"][k])
            pos = int(out["event_position"][k])
            ev = Event(
                sessions.ids[s], call_idx[g_call], kind,
                "extend" if kind == "extend" else POLICIES[int(out["event_policy"][k])],
                None if chain_g < 0 else chain_g - base, None if to_g < 0 else to_g - base, pos,
                int(out["event_removed"][k]), int(out["event_masked"][k]), int(out["event_dropped"][k]),
                source=calls[g_call].source,
            )  # fmt: skip
            if chain_g >= 0 and chain_g in last_call_of_chain and fam.tracker is not None:
                prev = calls[last_call_of_chain[chain_g]]
                old = np.concatenate([prev.prompt_ids, prev.completion_ids])  # the chain's ids at this call
                ev.message_index, ev.role = fam.tracker.table(old).at(min(pos, len(old) - 1))
                if kind in ("seam_drift", "rewrite", "new_root"):
                    ev.diagnosis = _diagnosis(fam, old, calls[g_call].prompt_ids, pos, seam=kind == "seam_drift")
            events.append(ev)
            ev_at += 1
        g = int(call_chain[g_call])
        if g >= 0:
            last_call_of_chain[g] = g_call
    return by_session, events


def _summary(
    sessions: dict[str, list[Chain]], events: list[Event], calls: int, sampled: int, bad: int, policy: Mapping[str, str], window: int
) -> AssemblySummary:
    masked: Counter[str] = Counter()
    dropped: Counter[str] = Counter()
    forks: Counter[str] = Counter()
    for e in events:
        if e.masked:
            masked[e.kind] += e.masked
        if e.dropped:
            dropped[e.kind] += e.dropped
        if e.policy == "fork":
            forks[e.kind] += 1
    return AssemblySummary(
        sessions=len(sessions),
        calls=calls,
        chains=sum(len(cs) for cs in sessions.values()),
        chains_per_session=dict(Counter(len(cs) for cs in sessions.values())),
        sampled_ids=sampled,
        delivered_ids=sum(c.sampled for cs in sessions.values() for c in cs),
        masked_by_cause=dict(masked),
        dropped_by_cause=dict(dropped),
        forks_by_cause=dict(forks),
        events_by_kind=dict(Counter(e.kind for e in events)),
        bad_records=bad,
        policy=dict(policy),
        realign_window=window,
    )


#: Sessions handed to the Rust matching at once (progress is reported between batches).
BATCH_SESSIONS = 2048


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
        calls: a capture file (.jsonl, .jsonl.gz, .parquet) or `Call`s / dicts.
        family: the family name (trim ids, markers); found from the tokenizer when None.
        tokenizer: a transformers tokenizer, a folder, or `fixture:NAME`; without
            one, no trim tolerance, no message roles and no diagnosis.
        policy: None (realign seam drift, fork the rest), one policy, or `{cause: policy}`.
        realign_window: seam drift is a departure within this many ids of a chain's end.
        on_error: "fail" (raise `CallsError` for the first bad record) or "skip" (count it).
        threads: threads for the matching (None: all cores).
        progress: called with (sessions assembled, sessions) after each batch.

    Example:
        >>> a = assemble([{"session_id": "s", "prompt_ids": [1, 2], "completion_ids": [3]},
        ...               {"session_id": "s", "prompt_ids": [1, 2, 3, 4], "completion_ids": [5]}])
        >>> a.sessions["s"][0].ids.tolist(), a.sessions["s"][0].loss_mask.tolist()
        ([1, 2, 3, 4, 5], [0, 0, 1, 0, 1])
    """
    if isinstance(realign_window, bool) or not isinstance(realign_window, int) or realign_window < 0:
        raise ValueError(f"realign_window must be a non-negative int, got {realign_window!r}")
    pol = resolve_policy(policy)
    fam = _family(tokenizer, family)
    good, bad = read_calls(calls, on_error=on_error)
    sessions, repeated = group_sessions(good)
    if repeated and on_error == "fail":
        raise CallsError(f"{repeated[0].source}: {repeated[0].reason}")
    bad.extend(repeated)
    by_session: dict[str, list[Chain]] = {}
    events: list[Event] = []
    total = len(sessions.ids)
    n_calls = sampled = 0
    for lo in range(0, max(total, 1), BATCH_SESSIONS):
        part = Sessions(sessions.ids[lo : lo + BATCH_SESSIONS], sessions.calls[lo : lo + BATCH_SESSIONS])
        arrays = _csr(part)
        out = assemble_calls(
            arrays["prompts"], arrays["completion"], arrays["completion_offsets"], arrays["logprobs"],
            arrays["session_offsets"], trim_ids=fam.trim, max_trim=fam.max_trim,
            realign_window=realign_window, policy=(pol["seam_drift"], pol["rollback"], pol["rewrite"], pol["new_root"]),
            boundary_ids=fam.boundary,
            threads=threads,
        )  # fmt: skip
        n_calls += len(arrays["prompts"])
        sampled += len(arrays["completion"])
        chains, evs = _build(part, out, fam)
        by_session.update(chains)
        events.extend(evs)
        if progress is not None:
            progress(min(lo + BATCH_SESSIONS, total), total)
    return Assembly(by_session, events, bad, _summary(by_session, events, n_calls, sampled, len(bad), pol, realign_window))

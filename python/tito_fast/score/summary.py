"""Aggregates over scored sessions: the reference's metric names and meaning,
per-turn rates, breakdowns by type, role and kind, the sessions of each
category the verdict counts (named, up to `MAX_NAMED` each), and the worst
sessions.

Example:
    >>> summarize([], [], family="qwen3", mode="fast", fast_path="on").sessions
    0
"""

from __future__ import annotations

import array
import bisect
import statistics
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from tito_fast.compare.comparator import MismatchType
from tito_fast.score.dump import BadRecord
from tito_fast.score.scorer import SessionResult

#: The reference's mismatch types, in its order.
MISMATCH_TYPES = tuple(t.value for t in MismatchType)
#: The types Miles' CI mode requires to be 0 (`assistant_text` is tolerated).
STRICT_TYPES = (MismatchType.SPECIAL_TOKEN_COUNT.value, MismatchType.SPECIAL_TOKEN_TYPE.value, MismatchType.NON_ASSISTANT_TEXT.value)


#: Bad records listed in a summary (all are counted).
MAX_ERRORS = 1000
#: Sessions named in each category of `Summary.named_sessions` (all are counted).
MAX_NAMED = 20
#: The session that differs only by retokenization (same text, other ids): the reference reports nothing for it.
RETOKENIZATION_ONLY = "retokenization_only"


def categories(r: SessionResult) -> dict[str, Any]:
    """The categories the verdict counts that session `r` falls in, each with
    the first item that puts it there: "mismatch" (a reference mismatch),
    "type:T" (a mismatch of type T), "retokenization_only" (differences, none
    the reference reports), "kind:K" (a difference of kind K, reported or
    not) and "role:R" (a reported difference in a message of role R)."""
    out: dict[str, Any] = {}
    reported = [it for it in r.items if it.type is not None]
    if r.mismatches:
        out["mismatch"] = reported[0] if reported else None
        for m in r.mismatches:
            out.setdefault(f"type:{m.type.value}", next((it for it in reported if it.type == m.type.value), None))
    elif r.items:
        out[RETOKENIZATION_ONLY] = r.items[0]
    for it in r.items:
        out.setdefault(f"kind:{it.kind}", it)
    for it in reported:
        out.setdefault(f"role:{it.role}", it)
    return out


def locate(it: Any) -> str:
    """Where a diagnosis item is, in the dump's terms: message (role), turn, id."""
    if it is None:
        return ""
    msg = f"message {it.message_index} ({it.role})" if it.message_index is not None and it.message_index >= 0 else "outside the messages"
    turn = f", turn {it.turn}" if it.turn is not None else ""
    return f"{msg}{turn}, id {it.position}"


@dataclass
class Summary:
    """Aggregates over scored sessions, with the reference's metric names."""

    family: str
    mode: str
    metric_version: str
    sessions: int
    bad_records: int
    complete: bool
    metrics: dict[str, float]
    turns: int
    turns_with_mismatch: int
    per_turn_rate: float
    by_turn: list[dict[str, Any]]
    by_type: dict[str, int]
    by_role: dict[str, int]
    by_kind: dict[str, int]
    #: sessions whose first divergence falls in [start, end), in 20 equal bins
    first_divergence_bins: list[dict[str, int]]
    first_divergence_median: float | None
    fast_path: str
    encoded_segment_share: float | None
    #: the first `MAX_ERRORS` bad records (`bad_records` counts all)
    errors: list[dict[str, Any]] = field(default_factory=list)
    ci_failures: list[str] = field(default_factory=list)
    #: where an incomplete run stopped: a record ("FILE:LINE") or "interrupted"
    stopped_at: str | None = None
    #: what encoded texts (`Scorer.text_encoder`)
    encoder: str = "not recorded"
    #: what rendered and checked the sessions (`Scorer.renderer`)
    renderer: str = "not recorded"
    #: which chat template (or DeepSeek encoder) rendered, and why (`TitoTokenizer.template_source`)
    template: str = "not recorded"
    #: the sessions of each category the verdict counts (`categories`):
    #: `{category: {"sessions": how many, "named": the first MAX_NAMED as
    #: {"session_id", "source", "where"}}}`, in the verdict's order
    named_sessions: dict[str, dict[str, Any]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class SummaryBuilder:
    """A `Summary` built one result at a time, in memory that does not grow
    with the sessions (counters, per-turn tallies, 8 bytes per session that
    diverges for the exact median, the first `MAX_ERRORS` bad records).

    Example:
        >>> b = SummaryBuilder()
        >>> b.summary(family="qwen3", mode="full", fast_path="off").sessions
        0
    """

    def __init__(self) -> None:
        self.sessions = 0
        self.with_mismatch = 0
        self.type_sessions: Counter[str] = Counter()
        self.by_type: Counter[str] = Counter()
        self.by_role: Counter[str] = Counter()
        self.by_kind: Counter[str] = Counter()
        self.turn_hits: Counter[int] = Counter()
        self.reach: Counter[int] = Counter()
        self.turns = 0
        self.turns_bad = 0
        self.firsts = array.array("q")
        self.encoded = 0
        self.segments = 0
        self.bad_records = 0
        self.errors: list[dict[str, Any]] = []
        self.last_bad: BadRecord | None = None
        self.category_sessions: Counter[str] = Counter()
        self.named: dict[str, list[dict[str, str]]] = {}

    def add(self, r: SessionResult | BadRecord) -> None:
        """Count one session's result, or one bad record."""
        if isinstance(r, BadRecord):
            self.bad_records += 1
            self.last_bad = r
            if len(self.errors) < MAX_ERRORS:
                self.errors.append(r.to_dict())
            return
        self.sessions += 1
        self.with_mismatch += bool(r.mismatches)
        self.type_sessions.update({m.type.value for m in r.mismatches})
        self.by_type.update(m.type.value for m in r.mismatches)
        hit_turns: set[int] = set()
        for it in r.items:
            self.by_kind[it.kind] += 1
            if it.type is not None:
                self.by_role[it.role] += 1
                if it.turn is not None:
                    hit_turns.add(min(it.turn, max(r.turns - 1, 0)))
        if r.mismatches and not hit_turns:
            hit_turns.add(max(r.turns - 1, 0))  # located nowhere: count it once, at the last turn
        self.turns += max(r.turns, 1)
        self.turns_bad += len(hit_turns)
        for k in range(max(r.turns, 1)):
            self.reach[k] += 1
        self.turn_hits.update(hit_turns)
        if r.first_divergence is not None:
            self.firsts.append(r.first_divergence)
        self.encoded += r.encoded_segments
        self.segments += r.segments
        for cat, it in categories(r).items():
            self.category_sessions[cat] += 1
            named = self.named.setdefault(cat, [])
            if len(named) < MAX_NAMED:
                named.append({"session_id": r.session_id, "source": r.source, "where": locate(it)})

    def summary(
        self,
        *,
        family: str,
        mode: str,
        fast_path: str,
        metric_version: str = "v1",
        complete: bool = True,
        stopped_at: str | None = None,
        encoder: str = "not recorded",
        template: str = "not recorded",
        renderer: str = "not recorded",
    ) -> Summary:
        """The summary of what was added so far."""
        n = self.sessions
        prefix = f"tito_session_mismatch_rate/{metric_version}"
        metrics: dict[str, float] = {}
        if n:
            metrics[prefix] = self.with_mismatch / n
            for t in MISMATCH_TYPES:
                metrics[f"{prefix}/{t}"] = self.type_sessions[t] / n
        reach, hits = self.reach, self.turn_hits
        by_turn = [{"turn": t, "sessions": reach[t], "with_mismatch": hits[t], "rate": hits[t] / reach[t]} for t in sorted(reach)]
        firsts = sorted(self.firsts)
        ci = [f"{prefix}/{t}={metrics[f'{prefix}/{t}']:.4f} must be 0" for t in STRICT_TYPES if metrics.get(f"{prefix}/{t}", 0)]
        by_kind = dict(self.by_kind.most_common())
        by_role = dict(self.by_role.most_common())
        order = ["mismatch", *(f"type:{t}" for t in MISMATCH_TYPES), RETOKENIZATION_ONLY]
        order += [f"kind:{k}" for k in by_kind] + [f"role:{r}" for r in by_role]
        named = {c: {"sessions": self.category_sessions[c], "named": list(self.named[c])} for c in order if c in self.named}
        return Summary(
            family=family,
            mode=mode,
            metric_version=metric_version,
            sessions=n,
            bad_records=self.bad_records,
            complete=complete,
            metrics=metrics,
            turns=self.turns,
            turns_with_mismatch=self.turns_bad,
            per_turn_rate=self.turns_bad / self.turns if self.turns else 0.0,
            by_turn=by_turn,
            by_type={t: self.by_type[t] for t in MISMATCH_TYPES},
            by_role=by_role,
            by_kind=by_kind,
            first_divergence_bins=_bins(firsts),
            first_divergence_median=statistics.median(firsts) if firsts else None,
            fast_path=fast_path,
            encoded_segment_share=self.encoded / self.segments if self.segments else None,
            errors=list(self.errors),
            ci_failures=ci,
            stopped_at=stopped_at,
            encoder=encoder,
            renderer=renderer,
            template=template,
            named_sessions=named,
        )


def _bins(values: list[int], bins: int = 20) -> list[dict[str, int]]:
    """`values` (sorted) counted in `bins` equal bins from 0 past the largest."""
    if not values:
        return []
    width = max(1, -(-(values[-1] + 1) // bins))
    counts = Counter(v // width for v in values)
    return [{"start": i * width, "end": (i + 1) * width, "sessions": counts[i]} for i in range(values[-1] // width + 1)]


def summarize(
    results: Iterable[SessionResult],
    bad: Iterable[BadRecord],
    *,
    family: str,
    mode: str,
    fast_path: str,
    metric_version: str = "v1",
    complete: bool = True,
    stopped_at: str | None = None,
    encoder: str = "not recorded",
    template: str = "not recorded",
) -> Summary:
    """The reference's metrics (`tito_session_mismatch_rate/<version>` and
    `/<type>`: shares of sessions with any mismatch / one of that type) plus
    per-turn rates, breakdowns by type, role and kind (reported differences,
    and retokenizations), and first-divergence positions."""
    b = SummaryBuilder()
    for r in results:
        b.add(r)
    for x in bad:
        b.add(x)
    return b.summary(
        family=family, mode=mode, fast_path=fast_path, metric_version=metric_version, complete=complete,
        stopped_at=stopped_at, encoder=encoder, template=template,
    )


def _rank(r: SessionResult) -> tuple[int, int, int]:
    strict = sum(m.type.value in STRICT_TYPES for m in r.mismatches)
    return (-strict, -len(r.mismatches), r.first_divergence if r.first_divergence is not None else 1 << 62)


def _signature(r: SessionResult) -> tuple[Any, ...]:
    first = next((i for i in r.items if i.type is not None), None)
    return (first.type, first.kind, first.role) if first else ()


class WorstKeeper:
    """The `k` worst sessions of a stream, holding at most `k` plus one per
    distinct (type, kind, role) of a first difference; `worst()` returns
    what `worst(all_results, k)` would.

    Example:
        >>> WorstKeeper(3).worst()
        []
    """

    def __init__(self, k: int = 5) -> None:
        self.k = k
        self.seen = 0
        self.top: list[tuple[tuple[int, int, int], int, SessionResult]] = []
        self.best: dict[tuple[Any, ...], tuple[tuple[int, int, int], int, SessionResult]] = {}

    def add(self, r: SessionResult) -> None:
        if not r.mismatches or self.k <= 0:
            return
        entry = (_rank(r), self.seen, r)
        self.seen += 1
        sig = _signature(r)
        if sig not in self.best or entry[:2] < self.best[sig][:2]:
            self.best[sig] = entry
        if len(self.top) < self.k or entry[:2] < self.top[-1][:2]:
            bisect.insort(self.top, entry, key=lambda e: e[:2])
            del self.top[self.k :]

    def worst(self) -> list[SessionResult]:
        """The worst sessions added so far (see `worst`)."""
        entries = {e[1]: e for e in [*self.top, *self.best.values()]}
        return worst([e[2] for e in sorted(entries.values(), key=lambda e: e[:2])], self.k)


def worst(results: Iterable[SessionResult], k: int = 5) -> list[SessionResult]:
    """The `k` worst sessions: strict types first, then most reported differences;
    one per (type, kind, role) of the first difference before any repeats, so
    the examples show different problems."""
    ranked = sorted((r for r in results if r.mismatches), key=_rank)
    picked: list[SessionResult] = []
    picked_ids: set[int] = set()
    seen: set[tuple[Any, ...]] = set()
    for r in ranked:
        if len(picked) < k and _signature(r) not in seen:
            seen.add(_signature(r))
            picked.append(r)
            picked_ids.add(id(r))
    for r in ranked:
        if len(picked) >= k:
            break
        if id(r) not in picked_ids:
            picked.append(r)
            picked_ids.add(id(r))
    return sorted(picked, key=_rank)

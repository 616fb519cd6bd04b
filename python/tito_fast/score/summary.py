"""Aggregates over scored sessions: the reference's metric names and meaning,
per-turn rates, breakdowns by type, role and kind, and the worst sessions.

Example:
    >>> summarize([], [], family="qwen3", mode="fast", fast_path="on").sessions
    0
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from tito_fast.compare.comparator import MismatchType
from tito_fast.score.dump import BadRecord
from tito_fast.score.scorer import SessionResult

#: The reference's mismatch types, in its order.
MISMATCH_TYPES = tuple(t.value for t in MismatchType)
#: The types Miles' CI mode requires to be 0 (`assistant_text` is tolerated).
STRICT_TYPES = (MismatchType.SPECIAL_TOKEN_COUNT.value, MismatchType.SPECIAL_TOKEN_TYPE.value, MismatchType.NON_ASSISTANT_TEXT.value)


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
    first_divergence: list[int]
    first_divergence_median: float | None
    fast_path: str
    encoded_segment_share: float | None
    errors: list[dict[str, Any]] = field(default_factory=list)
    ci_failures: list[str] = field(default_factory=list)
    #: where an incomplete run stopped: a record ("FILE:LINE") or "interrupted"
    stopped_at: str | None = None
    #: what encoded texts (`Scorer.text_encoder`)
    encoder: str = "not recorded"
    #: which chat template (or DeepSeek encoder) rendered, and why (`TitoTokenizer.template_source`)
    template: str = "not recorded"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize(
    results: list[SessionResult],
    bad: list[BadRecord],
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
    n = len(results)
    prefix = f"tito_session_mismatch_rate/{metric_version}"
    metrics: dict[str, float] = {}
    if n:
        metrics[prefix] = sum(bool(r.mismatches) for r in results) / n
        for t in MISMATCH_TYPES:
            metrics[f"{prefix}/{t}"] = sum(any(m.type.value == t for m in r.mismatches) for r in results) / n
    by_type: Counter[str] = Counter()
    by_role: Counter[str] = Counter()
    by_kind: Counter[str] = Counter()
    turn_hits: Counter[int] = Counter()
    reach: Counter[int] = Counter()
    turns = turns_bad = 0
    for r in results:
        by_type.update(m.type.value for m in r.mismatches)
        hit_turns: set[int] = set()
        for it in r.items:
            by_kind[it.kind] += 1
            if it.type is not None:
                by_role[it.role] += 1
                if it.turn is not None:
                    hit_turns.add(min(it.turn, max(r.turns - 1, 0)))
        if r.mismatches and not hit_turns:
            hit_turns.add(max(r.turns - 1, 0))  # located nowhere: count it once, at the last turn
        turns += max(r.turns, 1)
        turns_bad += len(hit_turns)
        for k in range(max(r.turns, 1)):
            reach[k] += 1
        turn_hits.update(hit_turns)
    by_turn = [
        {"turn": t, "sessions": reach[t], "with_mismatch": turn_hits[t], "rate": turn_hits[t] / reach[t]} for t in sorted(reach)
    ]
    firsts = sorted(r.first_divergence for r in results if r.first_divergence is not None)
    encoded = sum(r.encoded_segments for r in results)
    segs = sum(r.segments for r in results)
    ci = [f"{prefix}/{t}={metrics[f'{prefix}/{t}']:.4f} must be 0" for t in STRICT_TYPES if metrics.get(f"{prefix}/{t}", 0)]
    return Summary(
        family=family,
        mode=mode,
        metric_version=metric_version,
        sessions=n,
        bad_records=len(bad),
        complete=complete,
        metrics=metrics,
        turns=turns,
        turns_with_mismatch=turns_bad,
        per_turn_rate=turns_bad / turns if turns else 0.0,
        by_turn=by_turn,
        by_type={t: by_type[t] for t in MISMATCH_TYPES},
        by_role=dict(by_role.most_common()),
        by_kind=dict(by_kind.most_common()),
        first_divergence=firsts,
        first_divergence_median=statistics.median(firsts) if firsts else None,
        fast_path=fast_path,
        encoded_segment_share=encoded / segs if segs else None,
        errors=[b.to_dict() for b in bad],
        ci_failures=ci,
        stopped_at=stopped_at,
        encoder=encoder,
        template=template,
    )


def worst(results: list[SessionResult], k: int = 5) -> list[SessionResult]:
    """The `k` worst sessions: strict types first, then most reported differences;
    one per (type, kind, role) of the first difference before any repeats, so
    the examples show different problems."""

    def key(r: SessionResult) -> tuple[int, int, int]:
        strict = sum(m.type.value in STRICT_TYPES for m in r.mismatches)
        return (-strict, -len(r.mismatches), r.first_divergence if r.first_divergence is not None else 1 << 62)

    def signature(r: SessionResult) -> tuple[Any, ...]:
        first = next((i for i in r.items if i.type is not None), None)
        return (first.type, first.kind, first.role) if first else ()

    ranked = sorted((r for r in results if r.mismatches), key=key)
    picked: list[SessionResult] = []
    seen: set[tuple[Any, ...]] = set()
    for r in ranked:
        if len(picked) < k and signature(r) not in seen:
            seen.add(signature(r))
            picked.append(r)
    for r in ranked:
        if len(picked) >= k:
            break
        if r not in picked:
            picked.append(r)
    return sorted(picked, key=key)

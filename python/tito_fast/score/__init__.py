"""Scoring rollout dumps: reading them (`dump`), one session against its fresh
render (`scorer`), aggregates (`summary`), the job over a whole dump with
workers (`run`), reports (`report`) and Ray Data (`ray`).

The names of the former `tito_fast.score` module are importable from here.
"""

from tito_fast.errors import ScoreError
from tito_fast.score.scorer import CONTEXT_IDS, Mode, ScoredItem, Scorer, SessionResult
from tito_fast.score.summary import MISMATCH_TYPES, STRICT_TYPES, Summary, summarize, worst

__all__ = [
    "CONTEXT_IDS",
    "MISMATCH_TYPES",
    "STRICT_TYPES",
    "Mode",
    "ScoreError",
    "ScoredItem",
    "Scorer",
    "SessionResult",
    "Summary",
    "summarize",
    "worst",
]

"""Miles' comparator names, answered by tito_fast.compare.comparator."""

from tito_fast.compare.comparator import Mismatch, MismatchType, Segment, TokenSeqComparator  # noqa: F401

"""Miles' comparator names, answered by tito_fast.comparator."""

from tito_fast.comparator import Mismatch, MismatchType, Segment, TokenSeqComparator  # noqa: F401

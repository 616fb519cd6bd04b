"""Two id sequences -> their differences: the Miles-compatible comparator, roles
of the format's messages, and the diagnosis (role, message, kind) of each difference."""

from tito_fast.compare.comparator import (
    Mismatch,
    MismatchType,
    Segment,
    TokenSeqComparator,
)
from tito_fast.compare.diagnosis import Diagnosis, DiagnosisItem, RoleScheme

__all__ = ["Diagnosis", "DiagnosisItem", "Mismatch", "MismatchType", "RoleScheme", "Segment", "TokenSeqComparator"]

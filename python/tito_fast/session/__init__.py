"""Sessions over turns: `Trajectory` (a session's ids, checkpoints, retries and
checks) and `verify_family` (does a family's merge reproduce the full render?)."""

from tito_fast.errors import RollbackError
from tito_fast.session.trajectory import Trajectory
from tito_fast.session.verify import verify_family

__all__ = ["RollbackError", "Trajectory", "verify_family"]

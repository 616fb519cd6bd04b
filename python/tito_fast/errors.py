"""Every exception tito_fast raises, in one place.

Bad input is a `ValueError` subclass that names what is wrong and where;
the Rust core's own (`TokenInputError`, `PrefixMismatchError`,
`TokenBufferError`) are defined in the extension and re-exported here.

Example:
    >>> from tito_fast.errors import FamilyError
    >>> issubclass(FamilyError, ValueError)
    True
"""

from __future__ import annotations

from typing import Any

from tito_fast._core import PrefixMismatchError, TokenBufferError, TokenInputError

# -- chat: messages, rendering, families ------------------------------------


class AppendOnlyError(ValueError):
    """The new messages do not extend the stored ones as required.

    Attributes: `index` (the first offending message), `field` (the first
    differing field, or "role" for a role that may not be appended, or
    "length" when messages were removed), `stored`, `new`.
    """

    def __init__(self, message: str, *, index: int, field: str, stored: Any = None, new: Any = None) -> None:
        super().__init__(message)
        self.index, self.field, self.stored, self.new = index, field, stored, new


class MatcherError(RuntimeError):
    """A custom matcher raised or returned something other than a bool."""


class RenderError(ValueError):
    """A chat template (or DeepSeek's encoder) failed to render (its message says which and why)."""


class FamilyError(ValueError):
    """A family cannot be built for this tokenizer, or was given conflicting settings."""


class TemplateNotAppendOnlyError(FamilyError):
    """The chat template a family would use does not render append-only.

    Attributes: `family`, `source` (which template), `divergence` (the first
    id where the merged ids of a short canned replay depart from the full
    render, or None when the replay itself failed), `detail`.
    """

    def __init__(self, message: str, *, family: str, source: str, divergence: int | None, detail: str) -> None:
        super().__init__(message)
        self.family, self.source, self.divergence, self.detail = family, source, divergence, detail


class RenderDiffError(ValueError):
    """Rendering base + appended messages did not extend the base render."""


class TurnNotProducibleError(ValueError):
    """A replayed assistant turn cannot follow the template's generation prompt
    (its render does not start with it), so no engine produced it with these kwargs."""


# -- session ---------------------------------------------------------------


class RollbackError(ValueError):
    """A retried request would discard more generated turns than allowed."""


class TurnRecordedError(ValueError):
    """`Trajectory.update` was given a turn whose request holds fewer messages
    than the trajectory already has: the same turn recorded twice."""


# -- score -------------------------------------------------------------------


class DumpError(ValueError):
    """The dump itself cannot be read (missing file, unknown format)."""


class TokenizerLoadError(ValueError):
    """A tokenizer could not be loaded: no such folder or fixture, no tokenizer files in it."""


class OutputPathError(ValueError):
    """An output path cannot be written, or would overwrite an input."""


class ScoreError(ValueError):
    """One record cannot be scored (it is reported as a bad record, the run goes on)."""


class Terminated(KeyboardInterrupt):
    """A stop signal other than SIGINT (SIGTERM: what Slurm, Kubernetes and Ray
    send), raised in the main thread as SIGINT raises `KeyboardInterrupt`, so
    that whatever stops a run cleanly on Ctrl-C does the same for it (see
    `tito_fast.score.stopping`). Attribute: `signum`."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    def __str__(self) -> str:
        return f"signal {self.signum}"


class WorkerDiedError(RuntimeError):
    """A worker process of a scoring run ended while it worked (killed, e.g. by
    the out-of-memory killer; the process pool raised `BrokenProcessPool`).
    Attribute: `detail` ("signal 9 (SIGKILL)", "exit code 1")."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail

    def __str__(self) -> str:
        return f"a worker died: {self.detail}" if self.detail else "a worker died"


# -- testing -----------------------------------------------------------------


class FixtureError(RuntimeError):
    """A tokenizer fixture could not be downloaded, or its bytes are not the pinned ones."""


__all__ = [
    "AppendOnlyError",
    "DumpError",
    "FamilyError",
    "FixtureError",
    "MatcherError",
    "OutputPathError",
    "PrefixMismatchError",
    "RenderDiffError",
    "RenderError",
    "RollbackError",
    "ScoreError",
    "TemplateNotAppendOnlyError",
    "Terminated",
    "TokenBufferError",
    "TokenInputError",
    "TokenizerLoadError",
    "TurnRecordedError",
    "TurnNotProducibleError",
    "WorkerDiedError",
]

"""Every exception tito_fast raises, in one place, and their catalogue.

Bad input is a `ValueError` subclass that names what is wrong and where;
the Rust core's own (`TokenInputError`, `PrefixMismatchError`,
`TokenBufferError`, `TemplateRenderError`, `TemplateLimitError`) are defined
in the extension and re-exported here. Every class has a stable `code` (snake_case) and the
`exit_code` of `tito-fast` when it ends a command; `CATALOGUE` lists them
(code -> class name, exit code, meaning), and `exit_code_of` is what the
command line maps an exception through. A missing optional package is
`MissingDependency` (raised by `tito_fast._deps`, which imports them all).

Example:
    >>> from tito_fast.errors import CATALOGUE, FamilyError, exit_code_of
    >>> issubclass(FamilyError, ValueError), FamilyError.code
    (True, 'family_error')
    >>> CATALOGUE["missing_dependency"][:2]
    ('MissingDependency', 2)
    >>> exit_code_of(FamilyError("no such family")), exit_code_of(KeyError("x"))
    (2, None)
"""

from __future__ import annotations

from typing import Any, ClassVar

from tito_fast._core import (
    PrefixMismatchError,
    TemplateLimitError,
    TemplateRenderError,
    TokenBufferError,
    TokenInputError,
    bad_record_codes,
)

#: The exit code of `tito-fast` for a problem of its input (an argument, a
#: file, a template, the installed packages): one line, no traceback.
INPUT_EXIT = 2

# -- the command line and the environment ------------------------------------


class UsageError(ValueError):
    """A command-line argument or input file the command cannot use."""

    code: ClassVar[str] = "usage"
    exit_code: ClassVar[int] = INPUT_EXIT


class MissingDependency(ValueError, ModuleNotFoundError):
    """An optional package is not installed; the message names it and the extra
    of tito_fast that installs it (`pip install 'tito_fast[score]'`).

    Also a `ModuleNotFoundError` (with `name` the package), as the import it
    replaces raised. Attributes: `package`, `extras` (the extras that install
    it, the smallest first), `purpose` (what it is needed for), `detail` (the
    import error when the package is there but cannot be imported, else "").
    """

    code: ClassVar[str] = "missing_dependency"
    exit_code: ClassVar[int] = INPUT_EXIT

    def __init__(self, package: str, extras: tuple[str, ...], purpose: str = "", detail: str = "") -> None:
        self.package, self.extras, self.purpose, self.detail = package, tuple(extras), purpose, detail
        ModuleNotFoundError.__init__(self, self.message(), name=package)

    @property
    def extra(self) -> str:
        """The smallest extra that installs the package."""
        return self.extras[0]

    def message(self, who: str = "tito_fast", prefer: str | None = None) -> str:
        """The one-line message, `who` needing the package (e.g. "tito-fast score");
        `prefer`: the extra to name when it is one of `extras` (e.g. the CLI's "score")."""
        extra = prefer if prefer in self.extras else self.extra
        why = f" to {self.purpose}" if self.purpose else ""
        broken = f", which is installed but cannot be imported ({self.detail})" if self.detail else ""
        return f"{who} needs {self.package}{why}{broken}: pip install 'tito_fast[{extra}]'"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.package, self.extras, self.purpose, self.detail))

# -- chat: messages, rendering, families ------------------------------------


class AppendOnlyError(ValueError):
    """The new messages do not extend the stored ones as required.

    Attributes: `index` (the first offending message), `field` (the first
    differing field, or "role" for a role that may not be appended, or
    "length" when messages were removed), `stored`, `new`.
    """

    code: ClassVar[str] = "append_only"
    exit_code: ClassVar[int] = INPUT_EXIT

    def __init__(self, message: str, *, index: int, field: str, stored: Any = None, new: Any = None) -> None:
        super().__init__(message)
        self.index, self.field, self.stored, self.new = index, field, stored, new


class MatcherError(RuntimeError):
    """A custom matcher raised or returned something other than a bool."""

    code: ClassVar[str] = "matcher_error"
    exit_code: ClassVar[int] = INPUT_EXIT


class RenderError(ValueError):
    """A chat template (or DeepSeek's encoder) failed to render (its message says which and why)."""

    code: ClassVar[str] = "render_error"
    exit_code: ClassVar[int] = INPUT_EXIT


class FamilyError(ValueError):
    """A family cannot be built for this tokenizer, or was given conflicting settings."""

    code: ClassVar[str] = "family_error"
    exit_code: ClassVar[int] = INPUT_EXIT


class TemplateNotAppendOnlyError(FamilyError):
    """The chat template a family would use does not render append-only.

    Attributes: `family`, `source` (which template), `divergence` (the first
    id where the merged ids of a short canned replay depart from the full
    render, or None when the replay itself failed), `detail`.
    """

    code: ClassVar[str] = "template_not_append_only"
    exit_code: ClassVar[int] = INPUT_EXIT

    def __init__(self, message: str, *, family: str, source: str, divergence: int | None, detail: str) -> None:
        super().__init__(message)
        self.family, self.source, self.divergence, self.detail = family, source, divergence, detail


class RenderDiffError(ValueError):
    """Rendering base + appended messages did not extend the base render."""

    code: ClassVar[str] = "render_diff"
    exit_code: ClassVar[int] = INPUT_EXIT


class TurnNotProducibleError(ValueError):
    """A replayed assistant turn cannot follow the template's generation prompt
    (its render does not start with it), so no engine produced it with these kwargs."""

    code: ClassVar[str] = "turn_not_producible"
    exit_code: ClassVar[int] = INPUT_EXIT


# -- session ---------------------------------------------------------------


class RollbackError(ValueError):
    """A retried request would discard more generated turns than allowed."""

    code: ClassVar[str] = "rollback"
    exit_code: ClassVar[int] = INPUT_EXIT


class TurnRecordedError(ValueError):
    """`Trajectory.update` was given a turn whose request holds fewer messages
    than the trajectory already has: the same turn recorded twice."""

    code: ClassVar[str] = "turn_recorded"
    exit_code: ClassVar[int] = INPUT_EXIT


# -- score -------------------------------------------------------------------


class DumpError(ValueError):
    """The dump itself cannot be read (missing file, unknown format)."""

    code: ClassVar[str] = "dump_error"
    exit_code: ClassVar[int] = INPUT_EXIT


class TokenizerLoadError(ValueError):
    """A tokenizer could not be loaded: no such folder or fixture, no tokenizer files in it."""

    code: ClassVar[str] = "tokenizer_load"
    exit_code: ClassVar[int] = INPUT_EXIT


class OutputPathError(ValueError):
    """An output path cannot be written, or would overwrite an input."""

    code: ClassVar[str] = "output_path"
    exit_code: ClassVar[int] = INPUT_EXIT


class ScoreError(ValueError):
    """One record cannot be scored (it is reported as a bad record, the run goes on)."""

    code: ClassVar[str] = "bad_record"
    exit_code: ClassVar[int] = INPUT_EXIT


class Terminated(KeyboardInterrupt):
    """A stop signal other than SIGINT (SIGTERM: what Slurm, Kubernetes and Ray
    send), raised in the main thread as SIGINT raises `KeyboardInterrupt`, so
    that whatever stops a run cleanly on Ctrl-C does the same for it (see
    `tito_fast.score.stopping`). Attribute: `signum`."""

    code: ClassVar[str] = "terminated"
    exit_code: ClassVar[int] = 143

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum

    def __str__(self) -> str:
        return f"signal {self.signum}"


class WorkerDiedError(RuntimeError):
    """A worker process of a scoring run ended while it worked (killed, e.g. by
    the out-of-memory killer; the process pool raised `BrokenProcessPool`).
    Attribute: `detail` ("signal 9 (SIGKILL)", "exit code 1")."""

    code: ClassVar[str] = "worker_died"
    exit_code: ClassVar[int] = 3

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail

    def __str__(self) -> str:
        return f"a worker died: {self.detail}" if self.detail else "a worker died"


# -- testing -----------------------------------------------------------------


class FixtureError(RuntimeError):
    """A tokenizer fixture could not be downloaded, or its bytes are not the pinned ones."""

    code: ClassVar[str] = "fixture_error"
    exit_code: ClassVar[int] = INPUT_EXIT


# -- the Rust core's (defined in the extension) -------------------------------

for _cls, _code in (
    (TokenInputError, "token_input"),
    (PrefixMismatchError, "prefix_mismatch"),
    (TokenBufferError, "token_buffer"),
    (TemplateRenderError, "native_template"),
    (TemplateLimitError, "template_limit"),
):
    setattr(_cls, "code", _code)
    setattr(_cls, "exit_code", INPUT_EXIT)
del _cls, _code

# -- the catalogue -------------------------------------------------------------

_MEANINGS: tuple[tuple[type[BaseException], str], ...] = (
    (UsageError, "a command-line argument or input file the command cannot use"),
    (MissingDependency, "an optional package is not installed; the message names the extra that installs it"),
    (TokenInputError, "token ids that are not integers from 0 to 4294967295, or not a flat sequence"),
    (PrefixMismatchError, "one id sequence does not extend the other (TITO broken)"),
    (TokenBufferError, "a TokenBuffer asked to roll back or truncate past what it holds"),
    (AppendOnlyError, "new messages do not extend the stored ones as required"),
    (MatcherError, "a custom matcher raised or returned something other than a bool"),
    (RenderError, "a chat template (or DeepSeek's encoder) failed to render"),
    (TemplateRenderError, "the native renderer cannot render a template as jinja2 does"),
    (TemplateLimitError, "a chat template passed a limit of the renderer (fuel, recursion, output size, range size)"),
    (FamilyError, "a family cannot be built for this tokenizer, or was given conflicting settings"),
    (TemplateNotAppendOnlyError, "the chat template a family would use does not render append-only"),
    (RenderDiffError, "rendering base + appended messages did not extend the base render"),
    (TurnNotProducibleError, "a replayed assistant turn cannot follow the template's generation prompt"),
    (RollbackError, "a retried request would discard more generated turns than allowed"),
    (TurnRecordedError, "the same turn given to Trajectory.update twice"),
    (DumpError, "a dump or capture file cannot be read (missing file, unknown format, missing column)"),
    (TokenizerLoadError, "a tokenizer could not be loaded (no such folder or fixture, no tokenizer files)"),
    (OutputPathError, "an output path cannot be written, or would overwrite an input"),
    (ScoreError, "one record cannot be scored (a bad record: skipped, or the run stops under --on-error fail)"),
    (FixtureError, "a tokenizer fixture could not be downloaded, or its bytes are not the pinned ones"),
    (WorkerDiedError, "a worker process died (killed, out of memory); the reports are marked INCOMPLETE"),
    (Terminated, "stopped by SIGTERM (as Slurm, Kubernetes and Ray stop a job); the reports are marked INCOMPLETE"),
)

#: Every code a bad record (a `BadRecord` of the score job, a `BadCall` of
#: `assemble`) can carry, with its meaning; defined once in the Rust core's
#: reader (rust/src/record/schema.rs).
BAD_RECORD_CODES: dict[str, str] = dict(bad_record_codes())

#: Every error class by its stable code: (class name, exit code of `tito-fast`, meaning).
CATALOGUE: dict[str, tuple[str, int, str]] = {
    getattr(cls, "code"): (cls.__name__, getattr(cls, "exit_code"), meaning) for cls, meaning in _MEANINGS
}
_BY_CLASS: dict[type[BaseException], int] = {cls: getattr(cls, "exit_code") for cls, _ in _MEANINGS}


def exit_code_of(error: BaseException) -> int | None:
    """The exit code `CATALOGUE` gives `error` (its class's, or its nearest
    catalogued base class's), or None for an exception not in the catalogue."""
    for cls in type(error).__mro__:
        if cls in _BY_CLASS:
            return _BY_CLASS[cls]
    return None


__all__ = [
    "BAD_RECORD_CODES",
    "CATALOGUE",
    "INPUT_EXIT",
    "AppendOnlyError",
    "DumpError",
    "FamilyError",
    "FixtureError",
    "MatcherError",
    "MissingDependency",
    "OutputPathError",
    "PrefixMismatchError",
    "RenderDiffError",
    "RenderError",
    "RollbackError",
    "ScoreError",
    "TemplateLimitError",
    "TemplateNotAppendOnlyError",
    "TemplateRenderError",
    "Terminated",
    "TokenBufferError",
    "TokenInputError",
    "TokenizerLoadError",
    "TurnRecordedError",
    "TurnNotProducibleError",
    "UsageError",
    "exit_code_of",
    "WorkerDiedError",
]

"""Output files written whole or not at all, and never in place of a device.

`Output(path)` is where one output goes. A regular file or a new path is
written to a temporary file in the same folder and renamed over it by
`commit()`: a reader never sees half a file, `discard()` (or leaving the
`with` block on an exception) removes it, and temporary files still pending
when the process ends are removed then (`discard_pending`). A path that
exists and is not a regular file is written in place, never replaced: a
device (`/dev/null`), a FIFO, or `/dev/stdout` and `/dev/fd/N`. A folder is
refused (`OutputPathError`, naming the argument and the path). Every output
writer of `tito-fast` goes through it: `write_output` for a whole text ("-":
stdout), `Output` for what is written as it comes (`ResultWriter`,
`JsonResults`, `write_chains`, `write_jsonl`, `write_parquet`);
`check_outputs` refuses, before any work, an output that cannot be written.

Example:
    >>> import os, pathlib, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> path = os.path.join(folder, "report.md")
    >>> with Output(path) as out:
    ...     _ = out.open("w").write("# all of it")
    ...     os.path.basename(out.write_path).startswith(".report.md.")
    True
    >>> os.listdir(folder), pathlib.Path(path).read_text()
    (['report.md'], '# all of it')
    >>> output_kind(path), output_kind(os.devnull)
    ('file', 'stream')
    >>> output_kind(folder, "--report")
    Traceback (most recent call last):
    ...
    tito_fast.errors.OutputPathError: --report ...: is a folder; give a file name
"""

from __future__ import annotations

import atexit
import os
import secrets
import stat
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Literal

from tito_fast.errors import OutputPathError
from tito_fast.tokenizer.load import TOKENIZER_FILES

#: Paths written in place even when they lead to a regular file: they name a descriptor of this process.
DESCRIPTOR_PATHS = ("/dev/stdout", "/dev/stderr", "/dev/fd/", "/proc/")

_PENDING: dict[str, int] = {}  # temporary file -> the pid that made it


def output_kind(path: str | os.PathLike[str], arg: str | None = None) -> Literal["file", "stream"]:
    """"file" (a regular file or a new path: written atomically) or "stream"
    (a device, a FIFO, a descriptor path: written in place).

    Raises:
        OutputPathError: `path` is a folder (the message names `arg`, e.g. "--report").
    """
    p = os.fspath(path)
    try:
        st = os.stat(p)
    except OSError:  # a new path (or one the write will report on)
        return "file"
    if stat.S_ISDIR(st.st_mode):
        raise OutputPathError(f"{arg + ' ' if arg else ''}{p}: is a folder; give a file name")
    if stat.S_ISREG(st.st_mode) and not (os.name == "posix" and _descriptor_path(p)):
        return "file"
    return "stream"


def _descriptor_path(p: str) -> bool:
    a = os.path.abspath(p)
    return any(a == d or (d.endswith("/") and a.startswith(d)) for d in DESCRIPTOR_PATHS)


class Output:
    """One output: a temporary file next to `path` until `commit()`, or `path`
    itself where it is a device or FIFO (`in_place`). Use it as a context
    manager (committed on success, discarded on an exception), or call
    `commit()` / `discard()`; write through `open()` or `sink()`.

    Raises:
        OutputPathError: `path` is a folder.
        OSError: the temporary file cannot be made (a folder not writable).
    """

    def __init__(self, path: str | os.PathLike[str], arg: str | None = None) -> None:
        self.path = os.fspath(path)
        self.in_place = output_kind(self.path, arg) == "stream"
        self.tmp: str | None = None
        self._files: list[IO[Any]] = []
        if self.in_place:
            self.target = self.path
            return
        self.target = os.path.realpath(self.path)  # a symlink stays one: its target is replaced
        folder, name = os.path.split(self.target)
        while self.tmp is None:
            tmp = os.path.join(folder, f".{name}.{secrets.token_hex(4)}.tmp")
            _PENDING[tmp] = os.getpid()  # before it exists: an interrupt in between leaves nothing
            try:
                os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))
            except FileExistsError:
                del _PENDING[tmp]
                continue
            except BaseException:
                del _PENDING[tmp]
                raise
            self.tmp = tmp
        try:  # a file replaced keeps its permissions
            os.chmod(self.tmp, stat.S_IMODE(os.stat(self.target).st_mode))
        except OSError:
            pass

    @property
    def write_path(self) -> str:
        """Where the bytes go until `commit()`: the temporary file, or the path itself in place."""
        return self.tmp if self.tmp is not None else self.path

    def open(self, mode: str = "w", **kwargs: Any) -> IO[Any]:
        """`open(write_path, mode, ...)`; the file is closed by `commit()` / `discard()`."""
        f = open(self.write_path, mode, **kwargs)
        self._files.append(f)
        return f

    def sink(self) -> str | IO[bytes]:
        """What pyarrow writes to: the temporary file's path, or a binary file
        opened in place (pyarrow's own files seek, which a FIFO cannot)."""
        return self.write_path if not self.in_place else self.open("wb")

    def commit(self) -> None:
        """Close what `open()` opened and move the file into place."""
        self._close()
        if self.tmp is not None:
            os.replace(self.tmp, self.target)
            _PENDING.pop(self.tmp, None)
            self.tmp = None

    def discard(self) -> None:
        """Close what `open()` opened and remove the temporary file (in place: only close)."""
        try:
            self._close()
        finally:
            if self.tmp is not None:
                _unlink(self.tmp)
                self.tmp = None

    def _close(self) -> None:
        files, self._files = self._files, []
        for f in files:
            f.close()

    def __enter__(self) -> Output:
        return self

    def __exit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if et is None:
            self.commit()
        else:
            self.discard()


def write_text(path: str | os.PathLike[str], text: str, arg: str | None = None) -> None:
    """`text` (UTF-8) to `path` through an `Output`: whole, or nothing."""
    with Output(path, arg) as out:
        out.open("w", encoding="utf-8").write(text)


def write_output(path: str, text: str, arg: str | None = None) -> None:
    """`text` to the file `path` (`write_text`: whole, or nothing; a device
    or FIFO in place), or to stdout for "-" (ending with a newline)."""
    if path == "-":
        sys.stdout.write(text if text.endswith("\n") else text + "\n")
        return
    write_text(path, text, arg)


def check_outputs(outputs: Mapping[str, str | None], inputs: Iterable[str | None]) -> None:
    """Refuse, before any work, an output that cannot be written or that is an input.

    `outputs`: option -> path (None: not asked for; "-": stdout); `inputs`:
    the run's input paths (None skipped), a tokenizer folder's files included.

    Raises:
        OutputPathError: a folder, a folder that does not exist or is not
            writable, an input (or a tokenizer file) about to be overwritten,
            or two options writing the same file.
    """
    seen: dict[Path, str] = {}
    protected = [Path(p).resolve() for p in inputs if p]
    for flag, path in outputs.items():
        if path is None or path == "-":
            continue
        if output_kind(path, flag) == "stream":  # a device or FIFO, written in place (a folder is refused)
            if not os.access(path, os.W_OK):
                raise OutputPathError(f"{flag} {path}: is not writable")
            continue
        p = Path(path)
        target = p.resolve()
        if not target.parent.is_dir():
            raise OutputPathError(f"{flag} {path}: the folder {p.parent} does not exist; create it first")
        if not os.access(target.parent, os.W_OK):
            raise OutputPathError(f"{flag} {path}: the folder {p.parent} is not writable")
        for src in protected:
            if target == src or (p.exists() and src.exists() and os.path.samefile(p, src)):
                raise OutputPathError(f"{flag} {path}: is an input of this run; writing it would destroy the input")
            if src.is_dir() and target.parent == src and target.name in TOKENIZER_FILES:
                raise OutputPathError(f"{flag} {path}: would overwrite a file of the tokenizer")
        if target in seen:
            raise OutputPathError(f"{flag} {path}: {seen[target]} writes the same file")
        seen[target] = flag


def discard_pending() -> None:
    """Remove every temporary file of this process not yet committed or discarded (run at exit)."""
    for tmp, pid in list(_PENDING.items()):
        if pid == os.getpid():  # never a parent's, in a forked child
            _unlink(tmp)


def _unlink(tmp: str) -> None:
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    _PENDING.pop(tmp, None)


atexit.register(discard_pending)

__all__ = ["DESCRIPTOR_PATHS", "Output", "check_outputs", "discard_pending", "output_kind", "write_output", "write_text"]

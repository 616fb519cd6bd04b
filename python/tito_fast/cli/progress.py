"""Progress on stderr for long command-line work: a bar on a terminal, a line per
tenth of the work elsewhere (logs stay short).

Example:
    >>> import io
    >>> out = io.StringIO()
    >>> p = Progress(10, out, quiet=False, verb="scored")
    >>> for i in range(1, 11): p.update(i)
    >>> out.getvalue().splitlines()[-1]
    'scored 10/10 sessions'
"""

from __future__ import annotations

from typing import TextIO


class Progress:
    """A progress bar on a terminal; a line per tenth of the work elsewhere."""

    def __init__(self, total: int, out: TextIO, quiet: bool, verb: str = "built", unit: str = "sessions") -> None:
        self.total, self.out, self.quiet, self.verb, self.unit = total, out, quiet, verb, unit
        self.tty = out.isatty()
        self.shown = -1

    def __call__(self, done: int, total: int) -> None:
        """A library's `progress(done, total)` callback: the total may be learnt late."""
        self.total = total
        self.update(done)

    def update(self, done: int) -> None:
        if self.quiet or not self.total:
            return
        step = 100 * done // self.total if self.tty else 10 * (10 * done // self.total)
        if step == self.shown:
            return
        self.shown = step
        if self.tty:
            filled = 30 * done // self.total
            self.out.write(f"\r[{'#' * filled}{'.' * (30 - filled)}] {done}/{self.total} {self.unit} {self.verb}")
            if done == self.total:
                self.out.write("\n")
        else:
            self.out.write(f"{self.verb} {done}/{self.total} {self.unit}\n")
        self.out.flush()

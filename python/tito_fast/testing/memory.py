"""Resident memory of a process, for the scale test and `benches/rss.py`.

Example:
    >>> import os
    >>> rss_kib(os.getpid()) is None or rss_kib(os.getpid()) > 0
    True
"""

from __future__ import annotations


def rss_kib(pid: int) -> int | None:
    """The resident set size of process `pid` in KiB (`VmRSS` in
    `/proc/PID/status`), or None where there is no such file."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


__all__ = ["rss_kib"]

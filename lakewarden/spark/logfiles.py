"""Pruning the log files a scheduler writes on its own disk: the Spark driver's WARN/ERROR
file of each session (`<data_dir>/spark/logs/<application id>.log`, rolled once at 16 MB;
`joblog`) and each submitted application's output (`<data_dir>/applications/<group>.log`).
Without it, every scheduler start and every submitted application leaves a file forever."""

from __future__ import annotations

import logging
import time
from collections.abc import Collection, Iterable
from pathlib import Path

log = logging.getLogger(__name__)


def prune(
    directories: Iterable[Path],
    older_than_s: float,
    keep: Collection[str],
    now: float | None = None,
) -> list[Path]:
    """Delete the `*.log` files (and their rolled `*.log.N`) in `directories` last written
    more than `older_than_s` ago, except those whose log name (`<name>.log`) is in `keep`:
    the live session's file and running applications' files, which an idle writer may not
    have touched for long but still holds open. Returns what was deleted."""
    cutoff = (time.time() if now is None else now) - older_than_s
    removed: list[Path] = []
    for directory in directories:
        if not directory.is_dir():
            continue
        for path in directory.iterdir():
            name = _log_name(path.name)
            if name is None or name in keep or not path.is_file():
                continue
            try:
                if path.stat().st_mtime < cutoff:
                    path.unlink()
                    removed.append(path)
            except FileNotFoundError:
                continue  # another scheduler on this disk pruned it first
    if removed:
        log.info("pruned %d log file(s) older than %.0f h", len(removed), older_than_s / 3600)
    return removed


def _log_name(filename: str) -> str | None:
    """`x.log` of `x.log` and of a rolled `x.log.1`; None for anything else."""
    stem, dot, suffix = filename.rpartition(".")
    if suffix == "log":
        return filename
    if dot and suffix.isdigit() and stem.endswith(".log"):
        return stem
    return None

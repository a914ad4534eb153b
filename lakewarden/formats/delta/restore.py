"""An operator's undo of a Delta table (`POST …/rollback`, admin): delta-rs' `restore` in the
API process (no JVM), which commits a `RESTORE` version as Spark's `RESTORE TABLE … TO
VERSION AS OF` does: the table's files become those of the version named; the versions
after it stay in the log. A job's own undo runs Spark's (`formats.delta.jobs.restore`)."""

from __future__ import annotations

from typing import Any

from lakewarden.formats.delta.timeline import DeltaTimeline


class RestoreRefused(ValueError):
    """The version is not one the table can return to (newer than its current one, or its
    files are gone: vacuumed)."""


class RestoreConflict(RuntimeError):
    """A writer committed while restoring: nothing changed."""


def restore_to(timeline: DeltaTimeline, version: int) -> dict[str, Any]:
    """Restore the table to `version`: (from version, to version, RESTORE's version or
    None when the table already was at it, rolled back)."""
    from deltalake.exceptions import CommitFailedError, DeltaError

    table = timeline.open_table()
    current = table.version()
    if version < 0 or version > current:
        raise RestoreRefused(f"version {version} is not in the table's history (0..{current})")
    if version == current:
        done = {"rolled_back": False, "restore_version": None}
        return {"from_snapshot_id": current, "to_snapshot_id": version, **done}
    try:
        table.restore(version)
    except DeltaError as exc:
        # delta-rs refuses to commit to a table with writer features it cannot write (e.g.
        # liquid clustering's), as a CommitFailedError: not a conflict, a refusal
        if "unsupported table features" in str(exc).lower():
            raise RestoreRefused(
                f"delta-rs 1.6.6 cannot write this table ({exc}): restore version {version} "
                f"with Spark: RESTORE TABLE delta.`{timeline.path}` TO VERSION AS OF {version}"
            ) from exc
        if isinstance(exc, CommitFailedError):
            raise RestoreConflict(f"a writer committed while restoring: {exc}") from exc
        # its files or log are gone (VACUUM, log retention)
        raise RestoreRefused(f"cannot restore version {version}: {exc}") from exc
    return {
        "from_snapshot_id": current,
        "to_snapshot_id": version,
        "rolled_back": True,
        "restore_version": table.version(),
    }

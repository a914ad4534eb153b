"""`IcebergFormat`: an Iceberg table (pyiceberg) behind the seam of `lakewarden.formats.base`.

Its timeline is the table's snapshots: `since` is readiness's reading of what is new after
a cursor, `find_job_commits` the recovery's finder (`lakewarden.spark.commits.find_commit`).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyiceberg.table import Table

from lakewarden.formats.base import (
    Capabilities,
    Commit,
    CommitId,
    FormatName,
    Refs,
    TableFormat,
    Timeline,
    TimelinePage,
)
from lakewarden.formats.iceberg import finder, history, markers
from lakewarden.policy.model import MAIN_BRANCH
from lakewarden.refs import branch_heads

CAPABILITIES = Capabilities(
    kinds=frozenset({"compaction", "clustering", "zorder", "ttl", "clean", "stats"}),
    branches=True,
    tags="native",
    rollback="to_ancestor",
    commit_totals=True,
    marks_service_commits=True,
)


@dataclass(frozen=True)
class IcebergTimeline:
    table: Table

    def since(self, cursor: CommitId | None, limit: int) -> TimelinePage:
        """The current branch's commits newer than `cursor`, oldest first. After a rollback
        the cursor is off main's history: the commits after the point where the two
        histories part, not main's whole past read again as new. At most `limit` (also
        when the cursor's snapshot has expired)."""
        seen = self._lineage(cursor)
        found: list[Commit] = []
        stopped_at: str | None = None
        for snapshot in history.ancestors(self.table, self.table.current_snapshot(), limit + 1):
            if str(snapshot.snapshot_id) in seen:
                stopped_at = str(snapshot.snapshot_id)
                break
            if len(found) == limit:
                break
            found.append(history.of_pyiceberg(snapshot))
        off = cursor is not None and stopped_at != cursor
        return TimelinePage(found[::-1], cursor_off_history=off)

    def _lineage(self, cursor: CommitId | None) -> set[str]:
        """The cursor and its ancestors still in the metadata (an expired cursor: itself,
        so the walk at least stops at it)."""
        if cursor is None:
            return set()
        head = self.table.metadata.snapshot_by_id(int(cursor))
        return {str(s.snapshot_id) for s in history.ancestors(self.table, head)} | {cursor}

    def find_job_commits(self, task_id: int) -> Commit | None:
        """The newest commit task `task_id` made that still stands: in a branch's history
        (main's, or the branch the job wrote to) and not reverted after a failed validation
        (`finder.standing_in`); a commit rolled away or reverted, or only staged (a staging
        branch a crashed attempt left: `IcebergRefs.heads`), is not a success."""
        return finder.newest_standing(
            (
                history.branch_history(self.table, head)
                for head in IcebergRefs(self.table).heads().values()
            ),
            task_id,
        )


@dataclass(frozen=True)
class IcebergRefs:
    table: Table
    main: str = MAIN_BRANCH

    def heads(self) -> dict[str, int]:
        """Each branch (main too) and the snapshot at its head; not a rewrite's staging
        branch (`markers.is_stage`: lakewarden's own, its commits not yet validated)."""
        return {n: h for n, h in branch_heads(self.table).items() if not markers.is_stage(n)}

    def branches(self) -> set[str]:
        return set(self.heads())

    def is_branch(self, name: str) -> bool:
        return name in self.heads()


@dataclass(frozen=True)
class IcebergFormat:
    """An Iceberg table bound to the seam: what the core asks of it goes through here."""

    table: Table
    name: FormatName = "iceberg"
    capabilities: Capabilities = CAPABILITIES

    def timeline(self) -> Timeline:
        return IcebergTimeline(self.table)

    def refs(self) -> Refs:
        return IcebergRefs(self.table)


def open_table(table: Table) -> TableFormat:
    """The seam over a loaded pyiceberg table (mypy checks IcebergFormat keeps the seam)."""
    return IcebergFormat(table)

"""The seam: what lakewarden asks of a table format, whatever the format.

Only what the core calls today is here (issue 24 §1 trims the research note's sketch to
it): a format's commits (`Commit`), the mark a job leaves on them (`JobMarker`), its
timeline (`Timeline.since`, `Timeline.find_job_commits`), its refs and what it can do
(`Capabilities`). A commit id is a string at the seam: an Iceberg snapshot id, a Hudi
instant, a Delta version. Commits are ordered by `seq` (or time), never by id: Iceberg's
ids are random.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

FormatName = Literal["iceberg", "hudi", "delta"]
CommitId = str


# The keys of a job's mark in a commit's summary, whatever the format (an Iceberg snapshot
# summary, a Hudi instant's extraMetadata, a Delta commit's commitInfo).
MARKER_PREFIX = "lakewarden."  # every key lakewarden stamps on a commit starts so
TASK_KEY = f"{MARKER_PREFIX}task-id"
ATTEMPT_KEY = f"{MARKER_PREFIX}attempt"


@dataclass(frozen=True)
class JobMarker:
    """ "Made by lakewarden task `task_id`, attempt `attempt`": what a job stamps on its
    commits so that it, a validation and a retry can tell them from a writer's."""

    task_id: int
    attempt: int | None = None


def marker_of(summary: Mapping[str, str]) -> JobMarker | None:
    """The mark a commit's summary carries (`TASK_KEY`, `ATTEMPT_KEY`), or None."""
    task = summary.get(TASK_KEY)
    if task is None or not task.isdigit():
        return None
    attempt = summary.get(ATTEMPT_KEY)
    return JobMarker(int(task), int(attempt) if attempt and attempt.isdigit() else None)


@dataclass(frozen=True)
class Commit:
    """One commit of the table as the core sees it."""

    id: CommitId
    parent: CommitId | None
    seq: int | None  # the format's order (Iceberg: sequence number); None when unknown
    at_ms: int  # commit time, ms since the epoch
    operation: str | None
    summary: Mapping[str, str]
    native: Any = field(default=None, compare=False, repr=False)  # the format's own object


@dataclass(frozen=True)
class TimelinePage:
    """The commits after a cursor on the current line of history, oldest first."""

    commits: Sequence[Commit]
    cursor_off_history: bool  # the cursor is not an ancestor of the head (a rollback)


class Timeline(Protocol):
    def since(self, cursor: CommitId | None, limit: int) -> TimelinePage:
        """The head's commits newer than `cursor`, oldest first, at most `limit`."""
        ...

    def find_job_commits(self, task_id: int) -> Commit | None:
        """The newest commit task `task_id` made that still stands (in a branch's history
        and not undone since), or None."""
        ...


class Refs(Protocol):
    @property
    def main(self) -> str:
        """The branch the table's readers see (Iceberg: main)."""
        ...

    def branches(self) -> set[str]: ...

    def is_branch(self, name: str) -> bool: ...


@dataclass(frozen=True)
class Capabilities:
    """What a format can do; the core asks these (and explains with `reasons`), never the
    format's name."""

    kinds: frozenset[str]
    branches: bool
    tags: Literal["native", "savepoint", "pinned"]
    rollback: Literal["to_ancestor", "to_savepoint", "restore_version"]
    commit_totals: bool  # Commit.summary carries table totals (event verdicts)
    marks_service_commits: bool  # table-service commits carry the JobMarker
    reasons: Mapping[str, str] = field(default_factory=dict)


class TableFormat(Protocol):
    @property
    def name(self) -> FormatName: ...

    @property
    def capabilities(self) -> Capabilities: ...

    def timeline(self) -> Timeline: ...

    def refs(self) -> Refs: ...

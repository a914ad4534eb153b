"""The one rule for "this job's commits", over commits however they were read.

Six places used to look for a job's commit, each its own way, and each had its bug
(7922d96: a commit rolled away counted; 0fb403d: one reverted by validation counted;
cf304f8: a writer's commit of the same application was taken for ours). They now read the
table their way (pyiceberg metadata, Iceberg-Java, the `snapshots` metadata table: see
`history`), turn what they read into `Commit`s, and ask this module. Pure: unit-tested
without a table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from lakewarden.formats.base import Commit
from lakewarden.formats.iceberg.markers import REVERT_KEY, TASK_KEY, carries


def standing_in(history: Iterable[Commit], task_id: int) -> Commit | None:
    """The newest commit of task `task_id` in one branch's `history` (newest first) that
    stands: no later commit of that history reverts the task's rewrite (`REVERT_KEY`)."""
    task = str(task_id)
    for commit in history:
        if commit.summary.get(REVERT_KEY) == task:
            return None  # the task's commits below this one were undone on this branch
        if commit.summary.get(TASK_KEY) == task:
            return commit
    return None


def newest_standing(histories: Iterable[Iterable[Commit]], task_id: int) -> Commit | None:
    """Over every branch's history, the newest standing commit of the task (by commit time;
    of two at the same time, the first branch's)."""
    found: Commit | None = None
    for history in histories:
        commit = standing_in(history, task_id)
        if commit is not None and (found is None or commit.at_ms > found.at_ms):
            found = commit
    return found


def marked(commits: Iterable[Commit], props: Mapping[str, str]) -> list[Commit]:
    """The commits carrying `props` (the job's mark), in the order given."""
    return [c for c in commits if carries(c.summary, props)]


def newest(
    commits: Iterable[Commit], match: Callable[[Commit], bool] | None = None
) -> Commit | None:
    """The newest commit (by commit time) that `match`es (any, without one); of equal
    times, the last given."""
    chosen = sorted((c for c in commits if match is None or match(c)), key=lambda c: c.at_ms)
    return chosen[-1] if chosen else None


@dataclass
class CommitSpan:
    """Consecutive commits of the job: `before` is the parent of the first."""

    before: str
    commits: list[Commit] = field(default_factory=list)  # oldest first


def spans(history: Sequence[Commit], props: Mapping[str, str]) -> list[CommitSpan]:
    """The job's commits in `history` (newest first, since the job started), oldest first,
    in spans of consecutive commits (a writer's commit between two starts a new span). A
    commit with no parent has nothing to compare against and is left out."""
    out: list[CommitSpan] = []
    previous_ours = False
    for commit in reversed(history):
        ours = carries(commit.summary, props)
        if ours and commit.parent is not None:
            if not previous_ours:
                out.append(CommitSpan(before=commit.parent))
            out[-1].commits.append(commit)
        previous_ours = ours
    return out


def is_rewrite(commit: Commit) -> bool:
    """A `replace`: the same rows in other files. Writers do not make one."""
    return commit.operation == "replace"


def is_manifest_rewrite(commit: Commit) -> bool:
    """A `replace` that replaced manifests (rewrite_manifests; a compaction's does not)."""
    return is_rewrite(commit) and "manifests-replaced" in commit.summary

"""Write-audit-publish for rewrites: a rewrite that is validated commits to a staging branch,
and only what passed validation reaches its target branch (main, or `compaction.branch`).

Readers of the target never see a bad rewrite: before this, a rewrite committed to main and
was undone after a failed validation, and every reader in between saw the corrupted table.
Iceberg's `rewriteDataFiles` action commits by itself (once per file group batch with
partial progress) but takes `toBranch`, so it commits where it is told; validation then
compares the staged snapshots with the base as before, both read by Spark's Iceberg reader
(delete files applied) by snapshot id. (Checking the output files before Iceberg's commit
would mean reading them outside any snapshot, with another reader: no stronger, more code.)

- `open_stage`: a branch `lakewarden-stage-<task>-<attempt>` (`markers.stage_branch`) at
  the target's head, the base. Any other staging branch of the table is dropped in the same
  commit: the scheduler runs one job per table at a time, so it is one a crashed job left
  (the finders never count its commits; a deposed leader's job still running then finds
  its staging branch gone and publishes nothing).
- `publish`, once validation passed:
  - the target's head is still the base: the target is set to the staging branch's head,
    and the staging branch removed, in one compare-and-swap of the table's metadata, so the
    very snapshots validated become the target's history (a writer committing in that
    instant makes the swap fail, and the next way is taken);
  - a writer committed to the target since: the staged commits' net file changes are
    committed to it as one `RewriteFiles`, carrying the task's mark, validated by Iceberg
    from the base (it fails if a writer removed a replaced file or added deletes against
    one meanwhile), with the base's data sequence number, as the action's own commit has.
    The writers' commits stay; the rows are the validated ones plus theirs.
- `drop`: the staging branch goes, published or not. A refused rewrite's snapshots are then
  in no branch: the next snapshot expiry removes them and their files.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from lakewarden.formats.base import JobMarker
from lakewarden.formats.iceberg import history
from lakewarden.formats.iceberg.markers import (
    ATTEMPT_KEY,
    PUBLISHED_FROM_KEY,
    TASK_KEY,
    is_stage,
    stage_branch,
)
from lakewarden.policy.model import MAIN_BRANCH
from lakewarden.spark.commits import commit_properties
from lakewarden.spark.java import each

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Stage:
    name: str  # the staging branch
    target: str  # the branch the rewrite is for
    base: int  # the target's head the staging branch started at


# Tries to make the staging branch while writers keep committing.
OPEN_TRIES = 4


def _which(branch: str) -> str:
    return "main" if branch == MAIN_BRANCH else f"branch {branch}"


def open_stage(table: Any, target: str) -> Stage | None:
    """A staging branch at the head of `target` for the running job (its commit properties
    name it); None when the target has no snapshot (nothing to rewrite) or outside a job."""
    props = commit_properties()
    if TASK_KEY not in props:
        return None
    attempt = props.get(ATTEMPT_KEY)
    name = stage_branch(JobMarker(int(props[TASK_KEY]), int(attempt) if attempt else None))
    for tries_left in reversed(range(OPEN_TRIES)):
        # Fresh metadata each try: a writer's commit since the table was loaded made the
        # ref update's transaction fail with "Table metadata refresh is required" (Iceberg
        # does not retry that one), and the job with it.
        table.refresh()
        head = table.snapshot(target)
        if head is None:
            return None
        manage = table.manageSnapshots()
        for ref in list(each(table.refs().keySet())):
            if is_stage(str(ref)):
                manage = manage.removeBranch(str(ref))
        try:
            manage.createBranch(name, head.snapshotId()).commit()
        except Exception as exc:
            if tries_left == 0 or "CommitFailedException" not in str(exc):
                raise
            log.info("staging branch %s: the table moved meanwhile; trying again", name)
            continue
        table.refresh()
        return Stage(name, target, int(head.snapshotId()))
    raise AssertionError("unreachable")


def publish(jvm: Any, table: Any, stage: Stage) -> dict[str, Any]:
    """Bring what the staging branch holds to the target (see the module's docstring); says
    how. Raises when a writer's commit conflicts with the rewrite (nothing published)."""
    table.refresh()
    staged = table.snapshot(stage.name)
    if staged is None:
        raise RuntimeError(f"the staging branch {stage.name} is gone: nothing was published")
    staged_id = int(staged.snapshotId())
    if staged_id == stage.base:
        return {"action": "none", "reason": "the rewrite committed nothing"}
    ops = table.operations()
    base = ops.current()
    head = base.ref(stage.target)
    if head is not None and int(head.snapshotId()) == stage.base:
        # the staging branch goes in the same swap: one metadata commit, not two
        meta = (
            jvm.org.apache.iceberg.TableMetadata.buildFrom(base)
            .setBranchSnapshot(staged_id, stage.target)
            .removeRef(stage.name)
        )
        try:
            ops.commit(base, meta.build())
        except Exception as exc:  # a writer's commit won the race: re-apply below
            log.warning("fast-forward of %s lost to a commit: %s", table.name(), exc)
        table.refresh()
        now = table.snapshot(stage.target)
        if now is not None and int(now.snapshotId()) == staged_id:  # published
            return {
                "action": "fast_forwarded",
                "snapshot_id": staged_id,
                "reason": f"published: {_which(stage.target)} moved to the validated snapshot "
                f"{staged_id} (no writer committed since the rewrite started)",
            }
    return _reapply(table, stage, staged_id)


def _reapply(table: Any, stage: Stage, staged_id: int) -> dict[str, Any]:
    io = table.io()
    added: dict[str, Any] = {}
    removed: dict[str, Any] = {}
    for commit in reversed(history.java_history(table, stage.name, stop_at=stage.base)):
        snapshot = commit.native
        for gone, new in (
            (snapshot.removedDataFiles(io), snapshot.addedDataFiles(io)),
            (snapshot.removedDeleteFiles(io), snapshot.addedDeleteFiles(io)),
        ):
            for f in each(gone):
                path = str(f.location())
                if added.pop(path, None) is None:
                    removed[path] = f
            for f in each(new):
                added[str(f.location())] = f
    base = table.snapshot(stage.base)
    rewrite = (
        table.newRewrite()
        .toBranch(stage.target)
        .validateFromSnapshot(stage.base)
        .dataSequenceNumber(base.sequenceNumber())
    )
    for f in removed.values():
        rewrite = rewrite.deleteFile(f)
    for f in added.values():
        rewrite = rewrite.addFile(f)
    for key, value in commit_properties().items():
        rewrite = rewrite.set(key, value)
    rewrite = rewrite.set(PUBLISHED_FROM_KEY, str(staged_id))
    try:
        rewrite.commit()
    except Exception as exc:
        first = str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__
        raise RuntimeError(
            f"the validated rewrite was not published: a writer committed to "
            f"{_which(stage.target)} meanwhile and conflicts with it ({first})"
        ) from exc
    table.refresh()
    snapshot_id = int(table.snapshot(stage.target).snapshotId())
    return {
        "action": "reapplied",
        "snapshot_id": snapshot_id,
        "staged_snapshot_id": staged_id,
        "reason": f"published: a writer committed to {_which(stage.target)} since the rewrite "
        f"started, so its file changes (validated as snapshot {staged_id}) were committed "
        f"on top as snapshot {snapshot_id}, checked by Iceberg against the writers' commits",
    }


def refused(stage: Stage) -> dict[str, Any]:
    """What `publish` would have said of a rewrite that failed validation."""
    return {
        "action": "not_published",
        "reason": f"never published: the rewrite was committed only to the staging branch "
        f"{stage.name}, now dropped; {_which(stage.target)} was never changed by it",
    }


def drop(table: Any, stage: Stage) -> None:
    """Remove the staging branch (never raises: the task's outcome is decided already; a
    branch left behind is dropped by the task's next attempt, or by hand)."""
    try:
        table.refresh()
        if table.refs().containsKey(stage.name):
            table.manageSnapshots().removeBranch(stage.name).commit()
            table.refresh()
    except Exception:
        log.warning(
            "could not drop the staging branch %s of %s", stage.name, table.name(), exc_info=True
        )

"""A task's commit counts as done (and is never run again) only while it stands: in a
branch's history and not reverted. A rewrite rolled away or reverted after a failed
validation is not a success for a retry or a re-attached run to recover, nor is one only
on a rewrite's staging branch."""

from __future__ import annotations

import pyarrow as pa
from helpers import SCHEMA, append_batches, current, make_table
from pyiceberg.table import Table

from lakewarden.runtime import Runtime
from lakewarden.spark.commits import ATTEMPT_KEY, REVERT_KEY, TASK_KEY, find_commit

ROWS = pa.Table.from_pylist([{"id": 1, "region": "a", "amount": 1.0}], schema=SCHEMA)


def test_only_a_commit_that_stands_is_found(rt: Runtime) -> None:
    table = append_batches(make_table(rt), 1)
    before = current(table).snapshot_id
    table.append(ROWS, snapshot_properties={TASK_KEY: "7", ATTEMPT_KEY: "1"})
    ours = current(table.refresh()).snapshot_id
    assert find_commit(table, 7) == (ours, "1")
    assert find_commit(table, 8) is None

    # Reverted by a later commit (validation's undo when a writer committed meanwhile).
    table.append(ROWS, snapshot_properties={REVERT_KEY: "7"})
    assert find_commit(table.refresh(), 7) is None

    # Rolled away (validation's undo when nobody committed since): not in main's history.
    other = append_batches(make_table(rt, name="rolled"), 1)
    other.append(ROWS, snapshot_properties={TASK_KEY: "9", ATTEMPT_KEY: "2"})
    assert find_commit(other.refresh(), 9) is not None
    start = current(other).snapshot_id
    other.manage_snapshots().rollback_to_snapshot(_parent(other, start)).commit()
    assert find_commit(other.refresh(), 9) is None

    # On a branch (compaction.branch): found there.
    table.manage_snapshots().create_branch(before, "qa").commit()
    table.refresh().append(ROWS, branch="qa", snapshot_properties={TASK_KEY: "11"})
    assert find_commit(table.refresh(), 11) is not None

    # Only staged (a crashed job's staging branch, never validated nor published): not done.
    table.manage_snapshots().create_branch(before, "lakewarden-stage-12-1").commit()
    stage = "lakewarden-stage-12-1"
    table.refresh().append(ROWS, branch=stage, snapshot_properties={TASK_KEY: "12"})
    assert stage in table.refresh().metadata.refs
    assert find_commit(table, 12) is None


def _parent(table: Table, snapshot_id: int) -> int:
    snapshot = table.snapshot_by_id(snapshot_id)
    parent = snapshot.parent_snapshot_id if snapshot is not None else None
    assert parent is not None
    return int(parent)

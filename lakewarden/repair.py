"""Repair one partition, revert a range of commits (issue 33 §2), with pyiceberg (no JVM).

Both change main's live data files, and nothing else, in one overwrite commit:

- **partition repair**: one partition back to what it held at an earlier snapshot of main
  (its files then put back, its files since taken out), later changes to other partitions
  kept;
- **range revert**: the changes of main's commits after `from_snapshot` up to and including
  `to_snapshot` undone (the data files they added taken out, those they removed put back),
  the commits after the range kept;
- **cherry-pick**: an append committed outside main's history (an audit branch's) applied
  to main: its data files appended as they are.

A plan (the dry run) says which files and rows go and come back. Applying it is refused
when it cannot be exact: delete files involved (their rows would not follow), a file to
put back that is gone from storage (expired by clean), a file added in the range that a
later commit already rewrote, or main having moved since the plan. After the commit the
result is checked like a rewrite: main's live data files must be exactly the planned set;
if not, main is rolled back to the snapshot before and the check's finding raised.
A format v3 table is refused (`refs.unwritable`): pyiceberg 0.12 cannot write v3 metadata.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pyiceberg.manifest import DataFile, DataFileContent, ManifestContent
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot, ancestors_of

from lakewarden.metadata import jsonable
from lakewarden.readiness import PartitionField, partition_label
from lakewarden.refs import rollback_main, unwritable

MARK = "lakewarden.repair"  # snapshot property of a repair's or a revert's commit


class RepairRefused(ValueError):
    """The repair cannot be exact (the message says why and what to do)."""


class MainMoved(RuntimeError):
    """Main is not at the snapshot the plan was made from."""


@dataclass
class Live:
    """A snapshot's live data files (by path) and how many delete files it has."""

    data: dict[str, DataFile] = field(default_factory=dict)
    deletes: list[DataFile] = field(default_factory=list)


def live_files(table: Table, snapshot: Snapshot) -> Live:
    live = Live()
    for manifest in snapshot.manifests(table.io):
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            f = entry.data_file
            if manifest.content == ManifestContent.DELETES or f.content != DataFileContent.DATA:
                live.deletes.append(f)
            else:
                live.data[f.file_path] = f
    return live


@dataclass
class Plan:
    """What a repair or revert changes: the files taken out and put back, their rows."""

    action: str  # "repair" | "revert" | "cherry-pick"
    from_snapshot_id: int  # main's head the plan was made on
    remove: list[DataFile]
    add: list[DataFile]
    expected: set[str]  # main's live data files after it
    scope: dict[str, Any]

    def summary(self) -> dict[str, Any]:
        return {
            "action": self.action,
            **self.scope,
            "main_snapshot_id": self.from_snapshot_id,
            "files_removed": sorted(f.file_path for f in self.remove),
            "files_restored": sorted(f.file_path for f in self.add),
            "rows_removed": sum(f.record_count for f in self.remove),
            "rows_restored": sum(f.record_count for f in self.add),
            "changes": bool(self.remove or self.add),
        }


def _main(table: Table) -> Snapshot:
    if (why := unwritable(table, "a repair, revert or cherry-pick")) is not None:
        raise RepairRefused(f"{why}; nothing was changed")
    head = table.current_snapshot()
    if head is None:
        raise RepairRefused("the table has no snapshot: nothing to repair")
    return head


def _on_main(table: Table, snapshot_id: int, head: Snapshot) -> Snapshot:
    for s in ancestors_of(head, table.metadata):
        if s.snapshot_id == snapshot_id:
            return s
    if table.snapshot_by_id(snapshot_id) is None:
        raise LookupError(f"the table has no snapshot {snapshot_id}")
    raise RepairRefused(
        f"snapshot {snapshot_id} is not in main's history: a repair returns main's own past"
    )


def _partition_matcher(table: Table, partition: dict[str, str]) -> Any:
    """A test of (spec id, partition record) against the partition as given: each field
    of the spec by name, its value as `partition_label` shows it (2026-11-23) or raw."""
    schema = table.schema()
    specs = table.specs()

    def matches(spec_id: int, record: Any) -> bool:
        spec = specs[spec_id]
        if {f.name for f in spec.fields} != set(partition):
            return False
        for i, pf in enumerate(spec.fields):
            raw = record[i]
            source = schema.find_field(pf.source_id)
            label, _ = partition_label(
                PartitionField(source.name, pf.source_id, source.field_type, pf.transform), raw
            )
            given = partition[pf.name]
            if given not in (label, str(jsonable(raw))):
                return False
        return True

    fields = {f.name for spec in specs.values() for f in spec.fields}
    unknown = sorted(set(partition) - fields)
    if unknown or not partition:
        raise RepairRefused(
            f"partition must name the table's partition fields ({', '.join(sorted(fields))})"
            + (f"; unknown: {', '.join(unknown)}" if unknown else "")
        )
    return matches


def _refuse_deletes(deletes: list[DataFile], where: str) -> None:
    if deletes:
        raise RepairRefused(
            f"{len(deletes)} delete file(s) {where}: their rows would not follow the data "
            "files; compact the table (its deletes applied) first"
        )


def plan_partition_repair(table: Table, partition: dict[str, str], to_snapshot: int) -> Plan:
    head = _main(table)
    target = _on_main(table, to_snapshot, head)
    matches = _partition_matcher(table, partition)
    now, then = live_files(table, head), live_files(table, target)
    mine_now = {p: f for p, f in now.data.items() if matches(f.spec_id, f.partition)}
    mine_then = {p: f for p, f in then.data.items() if matches(f.spec_id, f.partition)}
    _refuse_deletes(
        [f for f in now.deletes + then.deletes if matches(f.spec_id, f.partition)],
        "apply to the partition now or then",
    )
    remove = [f for p, f in mine_now.items() if p not in mine_then]
    add = [f for p, f in mine_then.items() if p not in mine_now]
    expected = (set(now.data) - set(mine_now)) | set(mine_then)
    scope = {"partition": partition, "to_snapshot_id": to_snapshot}
    return Plan("repair", head.snapshot_id, remove, add, expected, scope)


def plan_range_revert(table: Table, from_snapshot: int, to_snapshot: int) -> Plan:
    head = _main(table)
    end = _on_main(table, to_snapshot, head)
    start = _on_main(table, from_snapshot, end)
    if start.snapshot_id == end.snapshot_id:
        raise RepairRefused("the range is empty: from_snapshot must be older than to_snapshot")
    now, before, after = (live_files(table, s) for s in (head, start, end))
    if len(before.deletes) != len(after.deletes) or {f.file_path for f in before.deletes} != {
        f.file_path for f in after.deletes
    }:
        raise RepairRefused(
            "the range's commits added or removed delete files: their rows cannot be put back "
            "exactly"
        )
    added = {p: f for p, f in after.data.items() if p not in before.data}
    removed = {p: f for p, f in before.data.items() if p not in after.data}
    rewritten = sorted(p for p in added if p not in now.data)
    if rewritten:
        raise RepairRefused(
            f"{len(rewritten)} file(s) the range added were rewritten or removed by a later "
            f"commit (e.g. {rewritten[0]}): its rows now live in other files; revert those "
            "commits too (a wider range), or roll back"
        )
    remove = list(added.values())
    add = [f for p, f in removed.items() if p not in now.data]
    expected = (set(now.data) - set(added)) | set(removed)
    scope = {"from_snapshot_id": from_snapshot, "to_snapshot_id": to_snapshot}
    return Plan("revert", head.snapshot_id, remove, add, expected, scope)


def plan_cherry_pick(table: Table, snapshot_id: int) -> Plan:
    """The data files an append commit outside main's history (an audit branch's, say)
    added, appended to main as they are (Iceberg's cherry-pick of an append). Refused for a
    commit on main already, one that removed files or wrote delete files, or whose files
    main already holds."""
    head = _main(table)
    picked = table.snapshot_by_id(snapshot_id)
    if picked is None:
        raise LookupError(f"the table has no snapshot {snapshot_id}")
    if any(s.snapshot_id == snapshot_id for s in ancestors_of(head, table.metadata)):
        raise RepairRefused(f"snapshot {snapshot_id} is in main's history already")
    parent = (
        table.snapshot_by_id(picked.parent_snapshot_id)
        if picked.parent_snapshot_id is not None
        else None
    )
    after, before = live_files(table, picked), live_files(table, parent) if parent else Live()
    removed = [p for p in before.data if p not in after.data]
    new_deletes = {f.file_path for f in after.deletes} - {f.file_path for f in before.deletes}
    if removed or new_deletes:
        raise RepairRefused(
            f"snapshot {snapshot_id} removed {len(removed)} data file(s) and added "
            f"{len(new_deletes)} delete file(s): only an append's files can be picked exactly"
        )
    now = live_files(table, head)
    added = [f for p, f in after.data.items() if p not in before.data]
    held = sorted(f.file_path for f in added if f.file_path in now.data)
    if held:
        raise RepairRefused(f"main already holds {held[0]} (picked before?): nothing to pick")
    scope = {"snapshot_id": snapshot_id}
    return Plan(
        "cherry-pick",
        head.snapshot_id,
        [],
        added,
        set(now.data) | {f.file_path for f in added},
        scope,
    )


def _check_files_exist(table: Table, files: list[DataFile]) -> None:
    for f in files:
        if not table.io.new_input(f.file_path).exists():
            raise RepairRefused(
                f"{f.file_path} is gone from storage (expired by clean): the state it held "
                "cannot be put back"
            )


def apply(table: Table, plan: Plan, by: str) -> dict[str, Any]:
    """Commit the plan as one overwrite on main, then check main's live files are exactly
    the planned set (rolled back and RepairRefused if not)."""
    head = _main(table)
    if head.snapshot_id != plan.from_snapshot_id:
        raise MainMoved(
            f"main moved since the plan (snapshot {plan.from_snapshot_id}, now "
            f"{head.snapshot_id}): plan again (dry run) and retry"
        )
    out = plan.summary()
    if not out["changes"]:
        return {**out, "committed_snapshot_id": None}
    _check_files_exist(table, plan.add)
    mark = json.dumps({"by": by, **plan.scope, "action": plan.action}, default=str)
    with (
        table.transaction() as tx,
        tx.update_snapshot(snapshot_properties={MARK: mark}).overwrite() as overwrite,
    ):
        for f in plan.remove:
            overwrite.delete_data_file(f)
        for f in plan.add:
            overwrite.append_data_file(f)
    table = table.refresh()
    done = _main(table)
    got = set(live_files(table, done).data)
    if got != plan.expected:
        rollback_main(table, plan.from_snapshot_id)
        raise RepairRefused(
            f"the {plan.action} committed snapshot {done.snapshot_id} with "
            f"{len(got - plan.expected)} unexpected and {len(plan.expected - got)} missing data "
            f"file(s); main was rolled back to {plan.from_snapshot_id}"
        )
    return {**out, "committed_snapshot_id": done.snapshot_id}

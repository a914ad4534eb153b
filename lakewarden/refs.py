"""Branches and tags of a table, read and changed with pyiceberg (no JVM): what each
holds and keeps, when Iceberg's expire_snapshots drops it, the scheduled tags of the
policy's `tags` section, and a rollback of main.

When a ref lapses, as Iceberg's expire_snapshots judges it: a branch other than main, or
a tag, is dropped once its snapshot is older than its max-ref-age (the ref's own, else
the table's `history.expire.max-ref-age-ms`; neither: never). main never lapses. A
snapshot a live ref points to is never expired; a branch also keeps its newest
min-snapshots-to-keep ancestors and those younger than its max-snapshot-age.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table
from pyiceberg.table.refs import SnapshotRef, SnapshotRefType
from pyiceberg.table.snapshots import Snapshot, ancestors_of

from lakewarden.policy.model import MAIN_BRANCH, TagsPolicy

MAX_REF_AGE_PROPERTY = "history.expire.max-ref-age-ms"
# The sweep's tags: `daily-YYYYMMDD` / `hourly-YYYYMMDDHH` (UTC).
NAME_FORMATS = {"daily": "daily-%Y%m%d", "hourly": "hourly-%Y%m%d%H"}
PERIODS = {"daily": timedelta(days=1), "hourly": timedelta(hours=1)}


@dataclass(frozen=True)
class RefInfo:
    name: str
    type: str  # "branch" | "tag"
    snapshot_id: int
    committed_at: datetime | None  # of its snapshot
    age_hours: float | None  # of its snapshot, now
    max_ref_age_ms: int | None  # its own (None: the table's default applies)
    min_snapshots_to_keep: int | None
    max_snapshot_age_ms: int | None
    lapses_at: datetime | None  # when expire_snapshots drops it (None: never)

    def lapsed(self, now: datetime) -> bool:
        return self.lapses_at is not None and self.lapses_at < now


def default_max_ref_age_ms(table: Table) -> int | None:
    value = table.properties.get(MAX_REF_AGE_PROPERTY)
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def _info(
    table: Table, name: str, ref: SnapshotRef, default_age: int | None, now: datetime
) -> RefInfo:
    snapshot = table.snapshot_by_id(ref.snapshot_id)
    at = datetime.fromtimestamp(snapshot.timestamp_ms / 1000, UTC) if snapshot else None
    max_age = ref.max_ref_age_ms if ref.max_ref_age_ms is not None else default_age
    lapses = (
        at + timedelta(milliseconds=max_age)
        if at is not None and max_age is not None and name != MAIN_BRANCH
        else None
    )
    return RefInfo(
        name=name,
        type="tag" if ref.snapshot_ref_type == SnapshotRefType.TAG else "branch",
        snapshot_id=ref.snapshot_id,
        committed_at=at,
        age_hours=round((now - at).total_seconds() / 3600, 3) if at else None,
        max_ref_age_ms=ref.max_ref_age_ms,
        min_snapshots_to_keep=ref.min_snapshots_to_keep,
        max_snapshot_age_ms=ref.max_snapshot_age_ms,
        lapses_at=lapses,
    )


def list_refs(table: Table, now: datetime) -> list[RefInfo]:
    """Every branch and tag: main first, then branches, then tags, each by name."""
    default_age = default_max_ref_age_ms(table)
    infos = [_info(table, n, r, default_age, now) for n, r in table.metadata.refs.items()]
    return sorted(infos, key=lambda i: (i.name != MAIN_BRANCH, i.type != "branch", i.name))


# --- scheduled tags ---------------------------------------------------------------------


def period_start(every: str, now: datetime) -> datetime:
    now = now.astimezone(UTC)
    if every == "hourly":
        return now.replace(minute=0, second=0, microsecond=0)
    return now.replace(hour=0, minute=0, second=0, microsecond=0)


def tag_name(every: str, now: datetime) -> str:
    """The scheduled tag of the period `now` falls in."""
    return period_start(every, now).strftime(NAME_FORMATS[every])


def tag_max_ref_age_ms(retention_days: int, snapshot_at: datetime, now: datetime) -> int:
    """A tag's max-ref-age counts from its snapshot's commit, not from the tagging: add the
    snapshot's age, so the tag is kept `retention_days` from now, however old the snapshot."""
    age = max(timedelta(0), now - snapshot_at)
    return int((timedelta(days=retention_days) + age).total_seconds() * 1000)


def branch_heads(table: Table) -> dict[str, int]:
    """Each branch (main too) and the snapshot at its head, in the metadata's order: the
    one test of "is this ref a branch" (formats.iceberg.table.IcebergRefs asks it)."""
    return {
        name: ref.snapshot_id
        for name, ref in table.metadata.refs.items()
        if ref.snapshot_ref_type == SnapshotRefType.BRANCH
    }


def snapshot_time(snapshot: Snapshot) -> datetime:
    return datetime.fromtimestamp(snapshot.timestamp_ms / 1000, UTC)


# pyiceberg 0.12 writes table metadata (and manifests) of format v1 and v2 only ("Writing
# V3 is not yet supported"): every commit lakewarden makes through it (tags, a rollback,
# publish's fast-forward, a repair) is refused on a v3 table before anything is written.
PYICEBERG_MAX_WRITE_VERSION = 2


class FormatUnwritable(ValueError):
    """pyiceberg cannot commit to the table's format version; nothing was changed."""


def unwritable(table: Table, what: str) -> str | None:
    """Why `what` (a commit through pyiceberg) cannot be made on `table`, or None."""
    version = table.metadata.format_version
    if version <= PYICEBERG_MAX_WRITE_VERSION:
        return None
    return (
        f"{what} is refused on an Iceberg format v{version} table: pyiceberg 0.12, which "
        f"commits it, writes table metadata of format v{PYICEBERG_MAX_WRITE_VERSION} at most"
    )


def require_writable(table: Table, what: str) -> None:
    """Raise FormatUnwritable when pyiceberg cannot commit `what` to `table`."""
    why = unwritable(table, what)
    if why is not None:
        raise FormatUnwritable(f"{why}; nothing was changed")


def create_tags(
    table: Table,
    snapshot_id: int,
    names: list[str],
    retention_days: int,
    made: datetime,
    now: datetime,
) -> None:
    """Tag snapshot `snapshot_id` (committed at `made`) with each of `names` (a tag of that
    name moves), kept `retention_days` from `now`, in one metadata-only commit. Raises
    CommitFailedException when a writer's commit won; the caller says what that means."""
    require_writable(table, "tagging a snapshot")
    age_ms = tag_max_ref_age_ms(retention_days, made, now)
    manage = table.manage_snapshots()
    for name in names:
        manage = manage.create_tag(snapshot_id, name, max_ref_age_ms=age_ms)
    manage.commit()


@dataclass(frozen=True)
class DueTag:
    name: str  # this period's tag
    due: bool  # the sweep would make it now
    reason: str
    next_name: str  # the next period's tag
    next_at: datetime  # when the next period starts


def due_tag(policy: TagsPolicy, table: Table, now: datetime) -> DueTag:
    """Is this period's tag due on `table`? The sweep asks this, and explain does."""
    name = tag_name(policy.every, now)
    next_at = period_start(policy.every, now) + PERIODS[policy.every]
    next_name = tag_name(policy.every, next_at)

    def outcome(due: bool, reason: str) -> DueTag:
        return DueTag(name, due, reason, next_name, next_at)

    if not policy.enabled:
        return outcome(False, "tags are disabled by policy")
    refused = unwritable(table, "a scheduled tag")
    if refused is not None:  # skipped with the reason, never a failed sweep
        return outcome(False, refused)
    existing = table.metadata.refs.get(name)
    if existing is not None:
        return outcome(
            False,
            f"{name} exists (snapshot {existing.snapshot_id}); next: {next_name} at "
            f"{next_at.isoformat()}",
        )
    current = table.current_snapshot()
    if current is None:
        return outcome(False, "the table has no snapshot to tag yet")
    return outcome(
        True,
        f"{name} is due: the next sweep tags snapshot {current.snapshot_id}, kept "
        f"{policy.retention_days} days",
    )


def make_due_tag(table: Table, policy: TagsPolicy, now: datetime) -> str | None:
    """Tag main's current snapshot with this period's name, unless the tag exists; returns
    the name made, or None. Idempotent: when another commit made the tag first (a second
    leader for a moment), that one stands. A metadata-only commit, no data written."""
    due = due_tag(policy, table, now)
    if not due.due:
        return None
    current = table.current_snapshot()
    if current is None:
        return None
    made = snapshot_time(current)
    try:
        create_tags(table, current.snapshot_id, [due.name], policy.retention_days, made, now)
    except CommitFailedException:
        if due.name in table.refresh().metadata.refs:
            return None  # made by someone else meanwhile: one tag per period
        raise
    return due.name


# --- rollback ---------------------------------------------------------------------------


class UnknownTarget(LookupError):
    """No such snapshot or tag (404)."""


class RollbackRefused(ValueError):
    """The target exists but main cannot roll back to it (422)."""


def resolve_target(table: Table, to_snapshot: int | None, to_tag: str | None) -> int:
    """The snapshot id a rollback request names (exactly one of the two)."""
    if to_tag is not None:
        ref = table.metadata.refs.get(to_tag)
        if ref is None:
            raise UnknownTarget(f"the table has no tag {to_tag!r} (GET …/refs lists them)")
        if ref.snapshot_ref_type != SnapshotRefType.TAG:
            raise RollbackRefused(f"{to_tag!r} is a branch, not a tag: name a tag or a snapshot")
        return ref.snapshot_id
    assert to_snapshot is not None
    if table.snapshot_by_id(to_snapshot) is None:
        raise UnknownTarget(f"the table has no snapshot {to_snapshot} (it may have expired)")
    return to_snapshot


def rollback_main(table: Table, target: int) -> dict[str, Any]:
    """Point main back at `target`, an ancestor of main's current snapshot (Iceberg's
    rollback_to_snapshot): only a state main really had, so its later commits stay in
    history (and can be rolled forward to by snapshot id until they expire). A snapshot off
    main's history (another branch's, or one left behind by an earlier rollback) is refused:
    setting main to it would publish a state main never had. The commit asserts main has
    not moved since it was read (CommitFailedException otherwise: a writer committed)."""
    if (why := unwritable(table, "a rollback of main")) is not None:
        raise RollbackRefused(f"{why}; nothing was changed")
    current = table.current_snapshot()
    before = current.snapshot_id if current else None
    if before == target:
        return {"from_snapshot_id": before, "to_snapshot_id": target, "rolled_back": False}
    ancestors = {s.snapshot_id for s in ancestors_of(current, table.metadata)} if current else set()
    if target not in ancestors:
        raise RollbackRefused(
            f"snapshot {target} is not an ancestor of main's current snapshot {before}: "
            "a rollback only returns main to a state it had (to publish another branch's "
            "state, use Iceberg's set_current_snapshot or fast_forward deliberately)"
        )
    table.manage_snapshots().rollback_to_snapshot(target).commit()
    return {"from_snapshot_id": before, "to_snapshot_id": target, "rolled_back": True}

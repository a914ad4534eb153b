"""The leader's readiness round (`lakewarden.readiness` holds the rule): for each table
whose policy enables readiness, read the commits since the last round, un-ready the ready
partitions a late commit touched (saying which commit, when), judge the others, tag and
record those that became ready, and open a task of a required kind that has not looked at
a complete partition since its last commit (its planner then rewrites the partition or says
there is nothing to do: either counts). Then deliver the notifications.

Cost: only tables whose own settings or namespace defaults name `readiness` are parsed (the
section is off by default); a table whose current snapshot (a Hudi or Delta table's newest
commit the poller ingested: its head token) is the one read last time, that
has no partition waiting (an overdue one waits), no watermark posted since and no period's
`deadline_minutes` passed since (`readiness_cursors.empty_due_at`) is not even loaded. A
table's catalog I/O (load, manifests, tag commits) runs with no transaction open; its writes
are one short fenced transaction, each state change guarded by the state it expects.
"""

from __future__ import annotations

import functools
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table
from sqlalchemy import delete, func, select, update
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.orm import Session

from lakewarden.alerts.sinks import DELIVERY_RETRY_BASE_S, notify
from lakewarden.backoff import retry_delay_s
from lakewarden.catalogs.catalog import load_table
from lakewarden.db.models import (
    ManagedTable,
    PartitionReadiness,
    ReadinessCursor,
    ReadinessNotification,
    Task,
)
from lakewarden.db.session import transaction
from lakewarden.isolation import PerTable
from lakewarden.leader import Fence, check_fence
from lakewarden.policy.model import Policy
from lakewarden.readiness import (
    READY_EVENT,
    UNREADY_EVENT,
    Assessed,
    Assessment,
    assess,
    pin_of,
    recorded,
    tag_name,
)
from lakewarden.readiness_logs import head_of, location, path_log
from lakewarden.redact import redact, secrets_of
from lakewarden.refs import FormatUnwritable, create_tags, snapshot_time
from lakewarden.runtime import Runtime
from lakewarden.settings import Settings
from lakewarden.tables import effective_policy_for, naming_section, ref_of
from lakewarden.tasks.birth import open_task

log = logging.getLogger(__name__)

NOTIFY_LEASE_S = 60.0  # a claimed notification is not claimed again for this long
KEEP_DELIVERED = timedelta(days=7)  # delivered notifications are kept this long


@functools.cache
def _client() -> httpx.Client:
    return httpx.Client(timeout=5.0)


def readiness_round(rt: Runtime, fence: Fence, now: datetime) -> int:
    """Judge every table with readiness enabled; returns how many partitions changed
    state. A table that fails is alerted (`lakewarden.isolation`), the others go on."""
    isolated = PerTable("readiness")
    changed = 0
    for table_id, key in _candidates(rt, fence.region):
        with isolated.table(key):
            changed += _round_of_table(rt, fence, table_id, now)
    with transaction(rt.engine) as s:
        check_fence(s, fence)
        isolated.record(s)
        s.execute(  # delivered long ago: the sinks have them, the states are in the table
            delete(ReadinessNotification).where(
                ReadinessNotification.delivered_at < now - KEEP_DELIVERED
            )
        )
    deliver_notifications(rt, _client())
    return changed


def _candidates(rt: Runtime, region: str | None) -> list[tuple[int, str]]:
    with transaction(rt.engine) as s:
        return naming_section(s, "readiness", every_format=True, region=region)


def _round_of_table(rt: Runtime, fence: Fence, table_id: int, now: datetime) -> int:
    with transaction(rt.engine) as s:
        row = s.get(ManagedTable, table_id)
        if row is None or row.retired_at is not None:
            return 0
        policy = effective_policy_for(s, row)
        if not policy.readiness.enabled:
            return 0
        if _idle(s, row, policy, now):
            return 0
        catalog, ref, version = row.catalog, ref_of(row), row.policy_version
        table_format = row.format
        known = recorded(s, table_id, policy.readiness)
    # The catalog and the manifests (a path table's log) are read with no transaction open.
    tags = None
    if table_format == "iceberg":
        table = load_table(rt.catalogs.load(catalog), ref)
        found = assess(known, table, policy.readiness, now)
        tags = _tag(table, found, policy) if policy.readiness.tag else None
    else:  # pinned by the version or instant recorded with the partition (readiness_logs)
        log = path_log(table_format, rt.catalogs.entry(catalog), ref)
        found = assess(known, log, policy.readiness, now)
    with transaction(rt.engine) as s:
        check_fence(s, fence)
        where = location(table_format, rt.catalogs.entry(catalog), ref)
        changed = _store(s, table_id, f"{catalog}.{ref.dotted}", found, tags, now, where)
        _open_tasks(s, table_id, found, policy, version, fence)
        if table_format == "hudi" and policy.readiness.tag:
            _savepoint_task(s, table_id, found, policy, version, fence)
    return changed


def _savepoint_task(
    s: Session, table_id: int, found: Assessment, policy: Policy, version: int, fence: Fence
) -> None:
    """A Hudi table's partitions became ready with `readiness.tag`: a clean task, whose job
    savepoints their instant first (`kinds.hudi_clean`; unless one is open already)."""
    becoming = found.becoming_ready()
    if not becoming or found.snapshot_id is None or not policy.clean.enabled:
        return
    open_task(
        s,
        table_id=table_id,
        policy_version=version,
        kind="clean",
        section=policy.clean,
        actor=fence.holder,
        trigger={
            "source": "readiness",
            "reason": f"readiness: savepoint instant {found.snapshot_id}, which ready "
            f"partition(s) {', '.join(p.partition for p in becoming[:10])} are pinned at",
            "leader_epoch": fence.epoch,
        },
    )


def _idle(s: Session, row: ManagedTable, policy: Policy, now: datetime) -> bool:
    """Nothing new to read, no partition waiting, no watermark posted since the last round
    (it may pass empty periods) and no period's deadline passed: nothing to judge."""
    column = policy.readiness.partition
    cursor = s.get(ReadinessCursor, row.id)
    if cursor is None or cursor.scanned_column != column:
        return False
    # Iceberg: the current snapshot; Hudi, Delta: the newest commit the poller ingested.
    head = row.current_snapshot_id
    if row.format != "iceberg":
        head = head_of(row.format, row.metadata_location)
    if cursor.scanned_snapshot_id is None or cursor.scanned_snapshot_id != head:
        return False
    scanned = cursor.scanned_at
    if cursor.watermark_at is not None and (scanned is None or cursor.watermark_at >= scanned):
        return False
    if cursor.empty_due_at is not None and now >= cursor.empty_due_at:
        return False
    if policy.readiness.deadline_minutes is not None and cursor.empty_due_at is None:
        return False  # a deadline set since the last round: its due time is not known yet
    waiting = s.scalar(
        select(func.count())
        .select_from(PartitionReadiness)
        .where(
            PartitionReadiness.table_id == row.id,
            PartitionReadiness.column == column,
            PartitionReadiness.ready.is_(False),
        )
    )
    return not waiting


def _tag(table: Table, found: Assessment, policy: Policy) -> dict[str, str]:
    """Tag `ready-<partition>` on the current snapshot for each partition becoming ready
    (an existing tag of that name moves), in one commit. Returns partition -> tag; empty
    when that commit conflicted with a writer's (those partitions wait for the next round:
    a partition asked to be tagged is not ready until it is)."""
    becoming = found.becoming_ready()
    if not becoming or found.snapshot_id is None:
        return {}  # (a table without a snapshot: empty partitions become ready untagged)
    snapshot = table.snapshot_by_id(found.snapshot_id)
    now = datetime.now(UTC)
    # Iceberg counts a tag's age from its snapshot's commit: kept that long from now.
    made = snapshot_time(snapshot) if snapshot is not None else now
    names = {p.partition: tag_name(p.partition) for p in becoming}
    try:
        create_tags(
            table,
            found.snapshot_id,
            list(names.values()),
            policy.readiness.tag_retention_days,
            made,
            now,
        )
    except CommitFailedException as exc:
        log.info("readiness tags of %s lost to a commit, next round: %s", table.name(), exc)
        return {}
    except FormatUnwritable as exc:  # a v3 table (its policy was checked on a PUT)
        log.warning("readiness tags of %s: %s", table.name(), exc)
        return {}
    return names


def _store(
    s: Session,
    table_id: int,
    table: str,
    found: Assessment,
    tags: dict[str, str] | None,
    now: datetime,
    where: str,
) -> int:
    """Write the assessment: each partition's last commit and reason, the late commits'
    un-readying, the partitions that became ready (with `tags` asked for: only those
    tagged), and the cursor. Each state change is guarded by the state it expects, and
    queues its notification in the same transaction."""
    column, changed = found.field.column, 0
    for p in found.partitions:
        values: dict[str, Any] = {
            "partition_end": p.end,
            "last_commit_at": p.last_commit.at if p.last_commit else None,
            "last_commit_snapshot_id": p.last_commit.snapshot_id if p.last_commit else None,
            "reason": p.judgement.reason,
            "overdue_since": now if p.overdue else None,
            "updated_at": func.now(),
        }
        # Overdue since the round that first found it so; cleared by data or a heartbeat.
        since = func.coalesce(PartitionReadiness.overdue_since, now) if p.overdue else None
        s.execute(
            pg_insert(PartitionReadiness)
            .values(table_id=table_id, column=column, partition=p.partition, **values)
            .on_conflict_do_update(
                index_elements=["table_id", "column", "partition"],
                set_={**values, "overdue_since": since},
            )
        )
        this = (
            PartitionReadiness.table_id == table_id,
            PartitionReadiness.column == column,
            PartitionReadiness.partition == p.partition,
        )
        if p.late is not None and _move(
            s, this, ready=False, since=None, unready_at=now, unready_reason=p.late
        ):
            changed += 1
            _enqueue(s, table_id, table, column, p, ready=False, reason=p.late, at=now)
        if not p.becomes_ready:
            continue
        if tags is not None and p.partition not in tags and found.snapshot_id is not None:
            continue  # its tag did not commit: ready next round, tagged
        tag = tags.get(p.partition) if tags is not None else None
        if _move(s, this, ready=True, since=now, snapshot_id=found.snapshot_id, tag=tag):
            changed += 1
            _enqueue(
                s,
                table_id,
                table,
                column,
                p,
                ready=True,
                reason=p.judgement.reason,
                at=now,
                snapshot_id=found.snapshot_id,
                tag=tag,
                pin=_pin(found, tag, where),
            )
    scanned = {
        "scanned_snapshot_id": found.snapshot_id,
        "scanned_column": column,
        "scanned_at": now,
        "empty_due_at": found.empty_due_at,
    }
    s.execute(
        pg_insert(ReadinessCursor)
        .values(table_id=table_id, **scanned)
        .on_conflict_do_update(index_elements=[ReadinessCursor.table_id], set_=scanned)
    )
    return changed


def _pin(found: Assessment, tag: str | None, where: str) -> dict[str, str] | None:
    """How a reader pins a partition that became ready (a Hudi savepoint is made later, by
    the clean task: the instant here)."""
    pin = pin_of(found.format, found.snapshot_id, tag, where)
    return vars(pin) if pin is not None else None


def _move(s: Session, this: tuple[Any, ...], *, ready: bool, **values: Any) -> bool:
    """Set the partition's `ready` (and `values`) only if it is in the other state."""
    moved = s.execute(
        update(PartitionReadiness)
        .where(*this, PartitionReadiness.ready.is_(not ready))
        .values(ready=ready, updated_at=func.now(), **values)
    )
    return bool(moved.rowcount)  # type: ignore[attr-defined]


def _enqueue(
    s: Session,
    table_id: int,
    table: str,
    column: str,
    p: Assessed,
    *,
    ready: bool,
    reason: str,
    at: datetime,
    **extra: Any,
) -> None:
    """Queue a partition_ready / partition_unready notification (delivered after commit)."""
    event = READY_EVENT if ready else UNREADY_EVENT
    details = {
        "table": table,
        "partition_column": column,
        "partition": p.partition,
        "ready": ready,
        "at": at.isoformat(),
        "reason": reason,
        "last_commit_snapshot_id": p.last_commit.snapshot_id if p.last_commit else None,
        "no_data": p.last_commit is None,
        **extra,
    }
    verb = "ready" if ready else "no longer ready"
    payload = {
        "event": event,
        "summary": f"{table} partition {p.partition} is {verb}: {reason}",
        "details": details,
    }
    s.add(ReadinessNotification(table_id=table_id, ready=ready, payload=payload))


def _open_tasks(
    s: Session, table_id: int, found: Assessment, policy: Policy, version: int, fence: Fence
) -> None:
    """A required kind that has not looked at a complete partition since its last commit
    gets a task, unless one of that kind was created since that commit (it will look, or
    it failed: alerted as any failed task, and not retried from here)."""
    waiting: dict[str, datetime] = {}
    for p in found.partitions:
        if p.judgement.complete and p.last_commit is not None:  # empty: nothing to look at
            for missing in p.judgement.missing_kinds:
                waiting[missing] = max(waiting.get(missing, p.last_commit.at), p.last_commit.at)
    for kind, since in waiting.items():
        last = s.scalar(
            select(func.max(Task.created_at)).where(Task.table_id == table_id, Task.kind == kind)
        )
        if last is not None and last >= since:
            continue
        open_task(
            s,
            table_id=table_id,
            policy_version=version,  # the version `policy` was read at
            kind=kind,
            section=policy.for_kind(kind),
            actor=fence.holder,
            trigger={
                "source": "readiness",
                "reason": f"readiness: complete partitions wait for {kind} to look at them "
                f"(last commit at {since.isoformat()})",
                "leader_epoch": fence.epoch,
            },
        )


# --- delivery ---------------------------------------------------------------------------


def deliver_notifications(rt: Runtime, client: httpx.Client, limit: int = 100) -> int:
    """Send the queued notifications, oldest first, each claimed (SKIP LOCKED, then a
    lease) and sent with no transaction open; a failure is retried with backoff. Returns
    how many were delivered. Without a sink that takes notifications, they are marked
    delivered (there is no one to tell)."""
    secrets = secrets_of(rt.settings, rt.engine.url.render_as_string(hide_password=False))
    delivered = 0
    for _ in range(limit):
        claimed = _claim(rt)
        if claimed is None:
            break
        delivered += _send(rt, rt.settings, client, claimed, secrets)
    return delivered


def _claim(rt: Runtime) -> ReadinessNotification | None:
    with transaction(rt.engine) as s:
        due = (
            select(ReadinessNotification.id)
            .where(
                ReadinessNotification.delivered_at.is_(None),
                ReadinessNotification.next_attempt_at <= func.now(),
            )
            .order_by(ReadinessNotification.id)
            .limit(1)
            .with_for_update(skip_locked=True)
            .scalar_subquery()
        )
        return s.scalars(
            update(ReadinessNotification)
            .where(ReadinessNotification.id == due)
            .values(next_attempt_at=func.now() + timedelta(seconds=NOTIFY_LEASE_S))
            .returning(ReadinessNotification)
        ).one_or_none()


def _send(
    rt: Runtime,
    settings: Settings,
    client: httpx.Client,
    n: ReadinessNotification,
    secrets: list[str],
) -> bool:
    payload = n.payload
    errors = notify(settings, client, payload["event"], payload["summary"], payload["details"])
    values: dict[str, Any]
    if errors:
        attempts = n.attempts + 1
        delay = retry_delay_s(attempts, DELIVERY_RETRY_BASE_S, settings.retry_cap_s)
        error = redact("; ".join(errors), secrets)[:2000]
        log.warning("notification %d delivery failed (attempt %d): %s", n.id, attempts, error)
        values = {
            "attempts": attempts,
            "error": error,
            "next_attempt_at": datetime.now(UTC) + timedelta(seconds=delay),
        }
    else:
        values = {"delivered_at": func.now(), "error": None}
    with transaction(rt.engine) as s:  # only while our claim stands
        s.execute(
            update(ReadinessNotification)
            .where(
                ReadinessNotification.id == n.id,
                ReadinessNotification.next_attempt_at == n.next_attempt_at,
            )
            .values(**values)
        )
    return not errors
